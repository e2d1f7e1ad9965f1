/* SPDX-License-Identifier: MIT */
/*
 * Stream capture (see graph.h): while a stream is captured, what it is given
 * becomes nodes of the capture's graph instead of being posted. Each
 * captured stream has a tail, the nodes the next one depends on; an event
 * recorded in a captured stream remembers the tail, and a stream that waits
 * for it joins the capture with that tail (fork and join across streams).
 *
 * Streams and events are keyed by their wire handles. One lock guards the
 * tables; no device call is made under it.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

struct capture {
	unsigned long long id;
	struct qc_graph *graph;
	enum cudaStreamCaptureMode mode;
	uint64_t origin; /* the stream it began in */
	int invalid; /* a refused call invalidated it */
	int own_graph; /* made by the capture (not cudaStreamBeginCaptureToGraph's) */
};

/* A stream in a capture, with its tail. */
struct cap_stream {
	uint64_t stream;
	struct capture *cap;
	struct qc_node **tail;
	size_t ntail;
	cudaGraphEdgeData *edges; /* zeros, ntail of them (cudaStreamGetCaptureInfo) */
};

/* An event last recorded in a captured stream: the tail it recorded. */
struct cap_event {
	uint64_t event;
	struct capture *cap;
	struct qc_node **nodes;
	size_t n;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct cap_stream *streams;
static size_t nstreams;
static struct cap_event *events;
static size_t nevents;
static unsigned long long next_id = 1;
static __thread enum cudaStreamCaptureMode thread_mode = cudaStreamCaptureModeGlobal;

/* A stream's key here: its wire handle, but the per-thread default stream
 * is a stream of each thread (one handle on the wire), so its key is the
 * thread's own (an address no handle has: the top bit set). */
static __thread char thread_marker;

static uint64_t cap_key(cudaStream_t stream, int ptds)
{
	uint64_t h = qc_stream(stream, ptds);

	return h == QCUDA_STREAM_PER_THREAD ? (uint64_t)(uintptr_t)&thread_marker | (1ull << 63) : h;
}

static struct cap_stream *find_stream(uint64_t s)
{
	for (size_t i = 0; i < nstreams; i++)
		if (streams[i].stream == s)
			return &streams[i];
	return NULL;
}

static struct cap_event *find_event(uint64_t ev)
{
	for (size_t i = 0; i < nevents; i++)
		if (events[i].event == ev)
			return &events[i];
	return NULL;
}

static uint64_t event_key(cudaEvent_t event)
{
	return (uint64_t)(uintptr_t)event;
}

/* Sets a tail to a copy of nodes (duplicates dropped). */
static cudaError_t set_tail(struct qc_node ***tail, size_t *ntail, struct qc_node *const *nodes, size_t n)
{
	struct qc_node **v = malloc((n ? n : 1) * sizeof(*v));
	size_t k = 0;

	if (!v)
		return cudaErrorMemoryAllocation;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;

		while (j < k && v[j] != nodes[i])
			j++;
		if (j == k)
			v[k++] = nodes[i];
	}
	free(*tail);
	*tail = v;
	*ntail = k;
	return cudaSuccess;
}

static cudaError_t set_stream_tail(struct cap_stream *cs, struct qc_node *const *nodes, size_t n)
{
	cudaGraphEdgeData *edges = calloc(n ? n : 1, sizeof(*edges));
	cudaError_t e;

	if (!edges)
		return cudaErrorMemoryAllocation;
	e = set_tail(&cs->tail, &cs->ntail, nodes, n);
	if (e != cudaSuccess) {
		free(edges);
		return e;
	}
	free(cs->edges);
	cs->edges = edges;
	return cudaSuccess;
}

static void drop_stream(struct cap_stream *cs)
{
	free(cs->tail);
	free(cs->edges);
	*cs = streams[nstreams - 1];
	__atomic_store_n(&nstreams, nstreams - 1, __ATOMIC_RELAXED);
}

static void drop_event(struct cap_event *ce)
{
	free(ce->nodes);
	*ce = events[--nevents];
}

/* Joins stream s to cap with tail nodes. */
static cudaError_t join(uint64_t s, struct capture *cap, struct qc_node *const *nodes, size_t n)
{
	struct cap_stream *v = realloc(streams, (nstreams + 1) * sizeof(*v));
	cudaError_t e;

	if (!v)
		return cudaErrorMemoryAllocation;
	streams = v;
	v[nstreams] = (struct cap_stream){ .stream = s, .cap = cap };
	e = set_stream_tail(&v[nstreams], nodes, n);
	if (e == cudaSuccess)
		__atomic_store_n(&nstreams, nstreams + 1, __ATOMIC_RELAXED);
	return e;
}

/* Ends cap: its streams and events leave, the capture is freed; the graph
 * is the caller's. */
static void end(struct capture *cap)
{
	for (size_t i = nstreams; i-- > 0;)
		if (streams[i].cap == cap)
			drop_stream(&streams[i]);
	for (size_t i = nevents; i-- > 0;)
		if (events[i].cap == cap)
			drop_event(&events[i]);
	free(cap);
}

/* No capture at all (the common case) is seen without the lock: a capture
 * begun by another thread at the same moment is a race in the program. */
static int none(void)
{
	return __atomic_load_n(&nstreams, __ATOMIC_RELAXED) == 0;
}

int qc_capture_active(cudaStream_t stream, int ptds)
{
	int active;

	if (none())
		return 0;
	pthread_mutex_lock(&lock);
	active = nstreams && find_stream(cap_key(stream, ptds)) != NULL;
	pthread_mutex_unlock(&lock);
	return active;
}

int qc_capture_op(cudaStream_t stream, int ptds, struct qc_node_op *op, cudaError_t *e)
{
	struct cap_stream *cs;
	struct qc_node *node;

	if (none())
		return 0;

	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(cap_key(stream, ptds)) : NULL;
	if (!cs) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	if (cs->cap->invalid) {
		qc_node_op_free(op);
		*e = cudaErrorStreamCaptureInvalidated;
	} else {
		*e = qc_graph_add(cs->cap->graph, op, cs->tail, cs->ntail, &node);
		if (*e == cudaSuccess)
			*e = set_stream_tail(cs, &node, 1);
		if (*e != cudaSuccess)
			cs->cap->invalid = 1;
	}
	pthread_mutex_unlock(&lock);
	return 1;
}

int qc_capture_event_record(cudaEvent_t event, cudaStream_t stream, int ptds, cudaError_t *e)
{
	struct cap_stream *cs;
	struct cap_event *ce;
	int captured = 0;

	if (none())
		return 0;

	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(cap_key(stream, ptds)) : NULL;
	ce = find_event(event_key(event));
	if (!cs) {
		if (ce) /* recorded outside capture from now on */
			drop_event(ce);
	} else {
		captured = 1;
		*e = cs->cap->invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
		if (*e == cudaSuccess && !ce) {
			struct cap_event *v = realloc(events, (nevents + 1) * sizeof(*v));

			if (v) {
				events = v;
				ce = &events[nevents++];
				*ce = (struct cap_event){ .event = event_key(event) };
			} else {
				*e = cudaErrorMemoryAllocation;
			}
		}
		if (*e == cudaSuccess) {
			ce->cap = cs->cap;
			*e = set_tail(&ce->nodes, &ce->n, cs->tail, cs->ntail);
		}
	}
	pthread_mutex_unlock(&lock);
	return captured;
}

int qc_capture_event_wait(cudaStream_t stream, int ptds, cudaEvent_t event, cudaError_t *e)
{
	uint64_t s = cap_key(stream, ptds);
	struct cap_stream *cs;
	struct cap_event *ce;

	if (none())
		return 0;

	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(s) : NULL;
	ce = nevents ? find_event(event_key(event)) : NULL;
	if (!cs && !ce) {
		pthread_mutex_unlock(&lock);
		return 0;
	}
	if (!ce) {
		/* Waiting, in capture, on work outside it (an event recorded
		 * outside capture): CUDA refuses it and invalidates the capture. */
		cs->cap->invalid = 1;
		*e = cudaErrorStreamCaptureIsolation;
	} else if (ce->cap->invalid) {
		*e = cudaErrorStreamCaptureInvalidated;
	} else if (!cs) {
		*e = join(s, ce->cap, ce->nodes, ce->n); /* a fork */
	} else if (cs->cap != ce->cap) {
		cs->cap->invalid = ce->cap->invalid = 1;
		*e = cudaErrorStreamCaptureMerge;
	} else {
		/* A join: the stream's tail and the event's together. */
		struct qc_node **both = malloc((cs->ntail + ce->n + 1) * sizeof(*both));

		if (!both) {
			*e = cudaErrorMemoryAllocation;
		} else {
			memcpy(both, cs->tail, cs->ntail * sizeof(*both));
			memcpy(both + cs->ntail, ce->nodes, ce->n * sizeof(*both));
			*e = set_stream_tail(cs, both, cs->ntail + ce->n);
			free(both);
		}
	}
	pthread_mutex_unlock(&lock);
	return 1;
}

cudaError_t qc_capture_refuse(cudaStream_t stream, int ptds)
{
	struct cap_stream *cs;
	cudaError_t e = cudaSuccess;

	if (none())
		return cudaSuccess;
	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(cap_key(stream, ptds)) : NULL;
	if (cs) {
		cs->cap->invalid = 1;
		e = cudaErrorStreamCaptureUnsupported;
	}
	pthread_mutex_unlock(&lock);
	return e;
}

void qc_capture_forget_event(cudaEvent_t event)
{
	struct cap_event *ce;

	pthread_mutex_lock(&lock);
	ce = nevents ? find_event(event_key(event)) : NULL;
	if (ce)
		drop_event(ce);
	pthread_mutex_unlock(&lock);
}

/* The legacy default stream cannot be captured (it synchronizes with every
 * other blocking stream). */
static int legacy(cudaStream_t stream, int ptds)
{
	return stream == cudaStreamLegacy || (!stream && !ptds);
}

cudaError_t qc_capture_begin(cudaStream_t stream, int ptds, enum cudaStreamCaptureMode mode, struct qc_graph *to,
			     struct qc_node *const *deps, size_t ndeps)
{
	uint64_t s = cap_key(stream, ptds);
	struct capture *cap;
	cudaError_t e;

	if ((unsigned)mode > cudaStreamCaptureModeRelaxed)
		return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	if (legacy(stream, ptds))
		return cudaErrorStreamCaptureUnsupported;
	if (to && !qc_graph_known(to))
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < ndeps; i++)
		if (!deps || !qc_node_known(deps[i]) || deps[i]->graph != to)
			return cudaErrorInvalidValue;
	cap = calloc(1, sizeof(*cap));
	if (!cap)
		return cudaErrorMemoryAllocation;
	cap->graph = to ? to : qc_graph_new();
	cap->own_graph = !to;
	if (!cap->graph) {
		free(cap);
		return cudaErrorMemoryAllocation;
	}
	cap->mode = mode;
	cap->origin = s;
	pthread_mutex_lock(&lock);
	if (find_stream(s)) {
		e = cudaErrorIllegalState; /* already capturing */
	} else {
		cap->id = next_id++;
		e = join(s, cap, deps, ndeps);
	}
	pthread_mutex_unlock(&lock);
	if (e != cudaSuccess) {
		if (!to)
			qc_graph_free(cap->graph);
		free(cap);
	}
	return e;
}

/* Every node must lead to the origin's tail: else some stream forked from
 * it was not joined back. */
static int joined(const struct qc_graph *g, struct qc_node *const *tail, size_t ntail)
{
	char *reached = calloc(g->n ? g->n : 1, 1);
	struct qc_node **todo = malloc((g->n + ntail + 1) * sizeof(*todo));
	size_t ntodo = 0, nreached = 0;
	int ok;

	if (!reached || !todo) {
		free(reached);
		free(todo);
		return 1; /* cannot tell: do not refuse a correct capture */
	}
	for (size_t i = 0; i < ntail; i++)
		todo[ntodo++] = tail[i];
	while (ntodo) {
		struct qc_node *n = todo[--ntodo];

		if (reached[n->index])
			continue;
		reached[n->index] = 1, nreached++;
		for (size_t j = 0; j < n->ndeps; j++)
			if (!reached[n->deps[j]->index])
				todo[ntodo++] = n->deps[j];
	}
	ok = nreached == g->n;
	free(reached);
	free(todo);
	return ok;
}

cudaError_t qc_capture_end(cudaStream_t stream, int ptds, struct qc_graph **graph)
{
	uint64_t s = cap_key(stream, ptds);
	struct cap_stream *cs;
	struct capture *cap;
	struct qc_graph *unused;
	cudaError_t e = cudaSuccess;
	int no_out = !graph;

	if (no_out)
		graph = &unused;
	*graph = NULL;
	pthread_mutex_lock(&lock);
	cs = find_stream(s);
	if (!cs) {
		pthread_mutex_unlock(&lock);
		return no_out ? cudaErrorInvalidValue : cudaErrorIllegalState; /* not capturing */
	}
	cap = cs->cap;
	/* Only a capture into the caller's graph (cudaStreamBeginCaptureToGraph)
	 * may end without taking the graph: the caller has it already. */
	if (no_out && cap->own_graph) {
		pthread_mutex_unlock(&lock);
		return cudaErrorInvalidValue;
	}
	if (cap->origin != s) {
		cap->invalid = 1;
		pthread_mutex_unlock(&lock);
		return cudaErrorStreamCaptureUnmatched;
	}
	if (cap->invalid)
		e = cudaErrorStreamCaptureInvalidated;
	else if (!joined(cap->graph, cs->tail, cs->ntail))
		e = cudaErrorStreamCaptureUnjoined;
	if (e == cudaSuccess)
		*graph = cap->graph;
	else if (cap->own_graph)
		qc_graph_free(cap->graph);
	end(cap);
	pthread_mutex_unlock(&lock);
	return e;
}

cudaError_t qc_capture_info(cudaStream_t stream, int ptds, enum cudaStreamCaptureStatus *status, unsigned long long *id,
			    struct qc_graph **graph, struct qc_node *const **deps, const cudaGraphEdgeData **edges,
			    size_t *ndeps)
{
	struct cap_stream *cs;

	if (!status)
		return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(cap_key(stream, ptds)) : NULL;
	*status = !cs		     ? cudaStreamCaptureStatusNone
		  : cs->cap->invalid ? cudaStreamCaptureStatusInvalidated
				     : cudaStreamCaptureStatusActive;
	if (cs && id)
		*id = cs->cap->id;
	if (graph)
		*graph = cs ? cs->cap->graph : NULL;
	if (deps)
		*deps = cs ? cs->tail : NULL;
	if (edges)
		*edges = cs ? cs->edges : NULL;
	if (ndeps)
		*ndeps = cs ? cs->ntail : 0;
	pthread_mutex_unlock(&lock);
	return cudaSuccess;
}

cudaError_t qc_capture_update_deps(cudaStream_t stream, int ptds, struct qc_node *const *deps, size_t n,
				   unsigned int flags)
{
	struct cap_stream *cs;
	cudaError_t e = cudaSuccess;

	if (flags > cudaStreamSetCaptureDependencies || (n && !deps))
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&lock);
	cs = nstreams ? find_stream(cap_key(stream, ptds)) : NULL;
	if (!cs)
		e = cudaErrorIllegalState;
	for (size_t i = 0; e == cudaSuccess && i < n; i++)
		if (!qc_node_known(deps[i]) || deps[i]->graph != cs->cap->graph)
			e = cudaErrorInvalidValue;
	if (e == cudaSuccess && flags == cudaStreamSetCaptureDependencies) {
		e = set_stream_tail(cs, deps, n);
	} else if (e == cudaSuccess) {
		struct qc_node **both = malloc((cs->ntail + n + 1) * sizeof(*both));

		if (!both) {
			e = cudaErrorMemoryAllocation;
		} else {
			memcpy(both, cs->tail, cs->ntail * sizeof(*both));
			if (n)
				memcpy(both + cs->ntail, deps, n * sizeof(*both));
			e = set_stream_tail(cs, both, cs->ntail + n);
			free(both);
		}
	}
	pthread_mutex_unlock(&lock);
	return e;
}

cudaError_t qc_capture_exchange_mode(enum cudaStreamCaptureMode *mode)
{
	enum cudaStreamCaptureMode old;

	if (!mode || (unsigned)*mode > cudaStreamCaptureModeRelaxed)
		return cudaErrorInvalidValue;
	old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return cudaSuccess;
}
