/* SPDX-License-Identifier: MIT */
/*
 * Executable graphs (see graph.h): instantiating a graph as a snapshot and
 * the order its nodes run in, launching, enabling steps, and updating from
 * a graph of the same shape.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* What order() appends to: the executable graph, and whether its nodes are the top level's. */
struct order_to {
	struct qc_exec *x;
	int top;
};

static cudaError_t order(struct qc_exec *x, struct qc_graph *g, int top);

/* A node's step (a child graph's in its place); nothing for nodes with nothing to run. */
static cudaError_t order_node(struct qc_node *n, void *arg)
{
	struct order_to *to = arg;
	struct qc_step *v;

	if (n->op.type == cudaGraphNodeTypeGraph)
		return order(to->x, n->op.child, 0);
	/* Nothing to run: an alloc node's memory exists from
	 * the node's creation, a free node's until the graph's end. */
	if (n->op.type == cudaGraphNodeTypeEmpty || n->op.type == cudaGraphNodeTypeMemAlloc ||
	    n->op.type == cudaGraphNodeTypeMemFree)
		return cudaSuccess;
	v = realloc(to->x->steps, (to->x->n + 1) * sizeof(*v));
	if (!v)
		return cudaErrorMemoryAllocation;
	to->x->steps = v;
	to->x->steps[to->x->n++] = (struct qc_step){ &n->op, to->top ? n : NULL, NULL, 0 };
	return cudaSuccess;
}

/* Appends the steps of g's nodes in a dependency order. */
static cudaError_t order(struct qc_exec *x, struct qc_graph *g, int top)
{
	struct order_to to = { x, top };

	return qc_graph_walk(g, order_node, &to);
}

/* The steps of the top-level nodes know the nodes they came from (a
 * snapshot has its graph's nodes at the same places). */
static void link_origins(struct qc_exec *x)
{
	for (size_t s = 0; s < x->n; s++)
		x->steps[s].orig = x->steps[s].snap ? x->orig[x->steps[s].snap->index] : NULL;
}

/* The references g and the graphs inside it (child graphs, conditional
 * bodies) own, added to into: moved out of them (take), or new ones. */
static int urefs_gather(struct qc_graph *g, struct qc_urefs *into, int take)
{
	int err = 0;

	for (size_t i = 0; i < g->urefs.n; i++) {
		struct qc_uref *r = &g->urefs.v[i];

		if (!qc_urefs_add(into, r->obj, r->count)) {
			if (!take)
				qc_uobj_get(r->obj, r->count);
		} else if (take) {
			qc_uobj_put(r->obj, r->count); /* out of memory: now, not after the launches */
		} else {
			err = -1;
		}
	}
	if (take) {
		free(g->urefs.v);
		g->urefs = (struct qc_urefs){ 0 };
	}
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node_op *op = &g->nodes[i]->op;

		if (op->type == cudaGraphNodeTypeGraph)
			err |= urefs_gather(op->child, into, take);
		for (unsigned int b = 0; op->type == cudaGraphNodeTypeConditional && b < op->cond.size; b++)
			err |= urefs_gather(op->cond.bodies[b], into, take);
	}
	return err;
}

static void release_later(void *arg)
{
	qc_urefs_release(arg);
	free(arg);
}

/* References x gives up (taken from r): released once its last launch is
 * done, by a host function queued after it on that stream (CUDA holds them
 * until the launches end); at once if it never ran or the stream is gone. */
static void release_after(struct qc_exec *x, struct qc_urefs *r)
{
	struct qc_urefs *held;

	if (!r->n) {
		qc_urefs_release(r);
		return;
	}
	if (x->launched && qc_stream_known(x->last_stream, x->last_ptds) &&
	    !qc_capture_active(x->last_stream, x->last_ptds) && (held = malloc(sizeof(*held)))) {
		*held = *r;
		if (qc_host_fn(x->last_stream, x->last_ptds, release_later, held) == cudaSuccess) {
			*r = (struct qc_urefs){ 0 };
			return;
		}
		free(held);
	}
	qc_urefs_release(r);
}

/* Frees a graph x no longer runs (its snapshot, or a child graph of it),
 * the user objects it holds released after x's launches. */
static void exec_drop(struct qc_exec *x, struct qc_graph *g)
{
	struct qc_urefs r = { 0 };

	if (!g)
		return;
	urefs_gather(g, &r, 1);
	qc_graph_free(g);
	release_after(x, &r);
}

/* A graph with conditional nodes: the host's executable graph, holding
 * references to the user objects of g (and of the graphs in it). */
static cudaError_t exec_new_host(const struct qc_graph *g, unsigned long long flags, struct qc_exec **out)
{
	struct qc_exec *x = calloc(1, sizeof(*x));
	cudaError_t e = x ? qc_graph_instantiate_host(g, &x->host) : cudaErrorMemoryAllocation;

	if (e == cudaSuccess && (urefs_gather((struct qc_graph *)g, &x->urefs, 0) || !qc_known_add(x, QC_KNOWN_EXEC))) {
		qc_urefs_release(&x->urefs);
		qc_req_graph_exec_destroy(x->host);
		e = cudaErrorMemoryAllocation;
	}
	if (e != cudaSuccess) {
		free(x);
		return e;
	}
	x->flags = flags;
	*out = x;
	return cudaSuccess;
}

/*
 * A graph the host can run whole, replayed as one CUDA graph: a graph of 16
 * kernels replayed step by step, a posted launch each, took 96.9 us against
 * 36.5 us natively (H100, docs/performance.md). Made from the snapshot,
 * whose kernel parameters were copied at instantiation as CUDA copies them,
 * into a host graph made for it (its executable graph outlives it). Where
 * the host cannot run a node (a host node, a copy of pageable memory) the
 * steps run, as before. QCUDA_GRAPH_REPLAY=0 keeps the steps (comparisons).
 */
static void replay_new(struct qc_exec *x)
{
	const char *env = getenv("QCUDA_GRAPH_REPLAY");
	uint64_t g = 0;
	cudaError_t e;

	if ((env && !strcmp(env, "0")) || !x->n || qc_req_graph_create(&g) != cudaSuccess)
		return;
	x->snapshot->host = g;
	e = qc_graph_instantiate_host(x->snapshot, &x->replay);
	x->snapshot->host = 0;
	qc_req_graph_destroy(g);
	if (e != cudaSuccess) {
		x->replay = 0;
		qc_debug("a graph of %zu steps runs step by step: %s", x->n, qc_error_name(e) ? qc_error_name(e) : "?");
	}
}

/* Its steps run from now on: the snapshot changed in a way the host's graph does not follow. */
static void replay_drop(struct qc_exec *x)
{
	if (x->replay)
		qc_req_graph_exec_destroy(x->replay);
	x->replay = 0;
}

/* The snapshot is a clone: it holds its own references to g's user
 * objects, as CUDA's instantiation retains them. */
cudaError_t qc_exec_new(const struct qc_graph *g, unsigned long long flags, struct qc_exec **out)
{
	struct qc_exec *x;
	cudaError_t e;

	if (!qc_graph_known(g))
		return cudaErrorInvalidValue;
	if (qc_graph_has_cond(g))
		return exec_new_host(g, flags, out);
	x = calloc(1, sizeof(*x));
	if (x)
		x->orig = malloc((g->n ? g->n : 1) * sizeof(*x->orig));
	if (!x || !x->orig || !(x->snapshot = qc_graph_clone(g, NULL))) {
		if (x)
			free(x->orig);
		free(x);
		return cudaErrorMemoryAllocation;
	}
	for (size_t i = 0; i < g->n; i++)
		x->orig[i] = g->nodes[i];
	x->flags = flags;
	e = order(x, x->snapshot, 1);
	if (e == cudaSuccess && !qc_known_add(x, QC_KNOWN_EXEC))
		e = cudaErrorMemoryAllocation;
	if (e == cudaSuccess)
		replay_new(x);
	if (e != cudaSuccess) {
		qc_graph_free(x->snapshot);
		free(x->orig);
		free(x->steps);
		free(x);
		return e;
	}
	link_origins(x);
	*out = x;
	return cudaSuccess;
}

void qc_exec_free(struct qc_exec *x)
{
	qc_known_forget(x);
	if (x->host)
		qc_req_graph_exec_destroy(x->host);
	replay_drop(x);
	exec_drop(x, x->snapshot);
	release_after(x, &x->urefs);
	free(x->orig);
	free(x->steps);
	free(x);
}

cudaError_t qc_node_op_run(const struct qc_node_op *op, cudaStream_t stream, int ptds)
{
	switch (op->type) {
	case cudaGraphNodeTypeKernel: {
		struct qc_launch_mode mode = { .cooperative = op->kernel.cooperative };

		qc_node_op_cluster(op, mode.cluster);
		return qc_launch_packed(
			op->kernel.k, op->kernel.grid, op->kernel.block, op->kernel.params, op->kernel.k->param_bytes,
			op->kernel.shmem, stream, ptds,
			mode.cooperative || mode.cluster[0] * mode.cluster[1] * mode.cluster[2] > 1 ? &mode : NULL);
	}
	case cudaGraphNodeTypeMemcpy: {
		cudaError_t e = cudaSuccess;
		const struct qc_node_op *c = op;

		if (c->copy.height * c->copy.depth == 1 ||
		    (c->copy.dpitch == c->copy.width && c->copy.spitch == c->copy.width &&
		     c->copy.dslice == c->copy.width * c->copy.height &&
		     c->copy.sslice == c->copy.width * c->copy.height))
			return qc_memcpy(c->copy.dst, c->copy.src, c->copy.width * c->copy.height * c->copy.depth,
					 c->copy.kind, stream, 1, ptds);
		for (size_t z = 0; z < c->copy.depth && e == cudaSuccess; z++)
			for (size_t y = 0; y < c->copy.height && e == cudaSuccess; y++)
				e = qc_memcpy(c->copy.dst + z * c->copy.dslice + y * c->copy.dpitch,
					      c->copy.src + z * c->copy.sslice + y * c->copy.spitch, c->copy.width,
					      c->copy.kind, stream, 1, ptds);
		return e;
	}
	case cudaGraphNodeTypeMemset: {
		cudaError_t e = cudaSuccess;
		size_t row = op->set.width * op->set.elem;

		for (size_t y = 0; y < op->set.height && e == cudaSuccess; y++) {
			char *d = op->set.dst + y * op->set.pitch;

			e = op->set.row ? qc_memcpy(d, op->set.row, row, cudaMemcpyHostToDevice, stream, 1, ptds)
					: qc_memset(d, (int)(op->set.value & 0xff), row, stream, 1, ptds);
		}
		return e;
	}
	case cudaGraphNodeTypeHost:
		return qc_host_fn(stream, ptds, op->host.fn, op->host.data);
	case cudaGraphNodeTypeEventRecord:
		return qc_event_record_now(op->event, stream, ptds);
	case cudaGraphNodeTypeWaitEvent:
		return qc_event_wait_now(stream, op->event, ptds);
	case cudaGraphNodeTypeEmpty:
		return cudaSuccess;
	default:
		return cudaErrorNotSupported;
	}
}

/* A disabled step runs as an empty node: nothing to post. */
cudaError_t qc_exec_launch(struct qc_exec *x, cudaStream_t stream, int ptds)
{
	cudaError_t e = cudaSuccess;

	if (!qc_exec_known(x))
		return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	x->launched = 1;
	x->last_stream = stream;
	x->last_ptds = ptds;
	if (x->host)
		return qc_req_graph_launch(x->host, qc_stream(stream, ptds));
	if (x->replay && !qc_capture_active(stream, ptds))
		return qc_post_graph_launch(x->replay, qc_stream(stream, ptds));
	for (size_t i = 0; i < x->n && e == cudaSuccess; i++)
		if (!x->steps[i].disabled)
			e = qc_node_op_run(x->steps[i].op, stream, ptds);
	return e;
}

cudaError_t qc_exec_set_op(struct qc_exec *x, const struct qc_node *node, struct qc_node_op *op)
{
	for (size_t i = 0; i < x->n; i++) {
		struct qc_node *snap = x->steps[i].snap;

		if (x->steps[i].orig != node || !snap)
			continue;
		if (snap->op.type != op->type) {
			qc_node_op_free(op);
			return cudaErrorInvalidValue;
		}
		replay_drop(x);
		qc_node_set_op(snap, op);
		return cudaSuccess;
	}
	qc_node_op_free(op);
	return cudaErrorInvalidValue;
}

/* Only kernel, memset and memcpy nodes can be disabled, as in CUDA 13. A
 * graph the host runs has no steps here. */
cudaError_t qc_exec_enabled(struct qc_exec *x, const struct qc_node *node, int set, unsigned int *enabled)
{
	struct qc_step *s = NULL;

	if (x->host)
		return cudaErrorNotSupported;
	for (size_t i = 0; i < x->n && !s; i++)
		if (x->steps[i].orig == node && x->steps[i].snap)
			s = &x->steps[i];
	if (!s || (s->op->type != cudaGraphNodeTypeKernel && s->op->type != cudaGraphNodeTypeMemset &&
		   s->op->type != cudaGraphNodeTypeMemcpy))
		return cudaErrorInvalidValue;
	if (set && !*enabled)
		replay_drop(x);
	if (set)
		s->disabled = !*enabled;
	else
		*enabled = !s->disabled;
	return cudaSuccess;
}

/* Same shape: as many nodes, of the same types, with the same edges. */
static const struct qc_node *shape_differs(const struct qc_graph *a, const struct qc_graph *b,
					   enum cudaGraphExecUpdateResult *why)
{
	if (a->n != b->n) {
		*why = cudaGraphExecUpdateErrorTopologyChanged;
		return NULL;
	}
	for (size_t i = 0; i < a->n; i++) {
		const struct qc_node *p = a->nodes[i], *q = b->nodes[i];

		if (p->op.type != q->op.type) {
			*why = cudaGraphExecUpdateErrorNodeTypeChanged;
			return q;
		}
		if (p->ndeps != q->ndeps) {
			*why = cudaGraphExecUpdateErrorTopologyChanged;
			return q;
		}
		for (size_t j = 0; j < p->ndeps; j++)
			if (p->deps[j]->index != q->deps[j]->index) {
				*why = cudaGraphExecUpdateErrorTopologyChanged;
				return q;
			}
		if (p->op.type == cudaGraphNodeTypeGraph && shape_differs(p->op.child, q->op.child, why)) {
			return q;
		}
	}
	return NULL;
}

/* The same shape orders its nodes the same way: the steps disabled stay
 * so, the references of the old snapshot go after x's launches. */
cudaError_t qc_exec_update(struct qc_exec *x, const struct qc_graph *g, enum cudaGraphExecUpdateResult *result,
			   const struct qc_node **err_node)
{
	struct qc_exec *fresh;
	enum cudaGraphExecUpdateResult why = cudaGraphExecUpdateSuccess;
	cudaError_t e;

	*err_node = NULL;
	if (!qc_exec_known(x) || !qc_graph_known(g))
		return cudaErrorInvalidValue;
	if (x->host || qc_graph_has_cond(g)) { /* the host's graph is not updated in place */
		*result = cudaGraphExecUpdateErrorNotSupported;
		return cudaErrorGraphExecUpdateFailure;
	}
	*err_node = shape_differs(x->snapshot, g, &why);
	if (why != cudaGraphExecUpdateSuccess) {
		*result = why;
		return cudaErrorGraphExecUpdateFailure;
	}
	/* The same shape: a new snapshot of g replaces the old one. */
	e = qc_exec_new(g, x->flags, &fresh);
	if (e != cudaSuccess) {
		*result = cudaGraphExecUpdateError;
		return e;
	}
	qc_known_forget(fresh);
	replay_drop(x);
	for (size_t i = 0; i < fresh->n && i < x->n; i++)
		if ((fresh->steps[i].disabled = x->steps[i].disabled))
			replay_drop(fresh);
	x->replay = fresh->replay; /* the new snapshot's, unless a step stays disabled */
	exec_drop(x, x->snapshot);
	free(x->orig);
	free(x->steps);
	x->snapshot = fresh->snapshot;
	x->orig = fresh->orig;
	x->steps = fresh->steps;
	x->n = fresh->n;
	free(fresh);
	*result = cudaGraphExecUpdateSuccess;
	return cudaSuccess;
}

/* The steps of x again, after a child graph of its snapshot changed (a
 * disabled step stays so). */
static cudaError_t restep(struct qc_exec *x)
{
	struct qc_exec fresh = { .orig = x->orig };
	cudaError_t e = order(&fresh, x->snapshot, 1);

	if (e != cudaSuccess) {
		free(fresh.steps);
		return e;
	}
	link_origins(&fresh);
	for (size_t i = 0; i < fresh.n; i++)
		for (size_t j = 0; fresh.steps[i].orig && j < x->n; j++)
			if (x->steps[j].orig == fresh.steps[i].orig)
				fresh.steps[i].disabled = x->steps[j].disabled;
	free(x->steps);
	x->steps = fresh.steps;
	x->n = fresh.n;
	return cudaSuccess;
}

/* x's copy of node takes a clone of child, which must have the shape of
 * the graph it replaces (as cudaGraphExecUpdate asks; CUDA 13 answers
 * cudaErrorGraphExecUpdateFailure otherwise, measured on the H100). The
 * host's graphs are not updated in place. */
cudaError_t qc_exec_set_child(struct qc_exec *x, const struct qc_node *node, const struct qc_graph *child)
{
	enum cudaGraphExecUpdateResult why = cudaGraphExecUpdateSuccess;
	struct qc_node *snap = NULL;
	struct qc_graph *c, *old;
	cudaError_t e;

	if (x->host)
		return cudaErrorNotSupported;
	for (size_t i = 0; i < x->snapshot->n && !snap; i++)
		if (x->orig[i] == node)
			snap = x->snapshot->nodes[i];
	if (!snap || snap->op.type != cudaGraphNodeTypeGraph || !qc_graph_known(child))
		return cudaErrorInvalidValue;
	if (qc_graph_has_cond(child) || shape_differs(snap->op.child, child, &why) || why != cudaGraphExecUpdateSuccess)
		return cudaErrorGraphExecUpdateFailure;
	replay_drop(x);
	c = qc_graph_clone(child, NULL);
	if (!c)
		return cudaErrorMemoryAllocation;
	old = snap->op.child;
	snap->op.child = c;
	e = restep(x);
	if (e != cudaSuccess) {
		snap->op.child = old;
		qc_graph_free(c);
		return e;
	}
	exec_drop(x, old);
	return cudaSuccess;
}
