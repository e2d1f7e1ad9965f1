/* SPDX-License-Identifier: MIT */
/*
 * The stream and event handles this process holds. Posted work (batch.c)
 * reaches the backend later, so its handles are checked here first: an
 * unknown handle fails at the call, as in CUDA, not at the next
 * synchronization. The backend still checks every handle itself; this is for
 * the program's sake, not for safety.
 *
 * An open-addressing set of nonzero 64-bit keys (kind in the top bits over
 * the backend's handle), grown at 3/4 full; removal re-inserts the rest of
 * the cluster so that lookups need no tombstones. Each key carries a value
 * of its owner's (stream.c keeps a stream's flags, device and id there:
 * what the queries of a stream answer without a round trip). And what a
 * cudaStream_t is on the wire (qc_stream), for every file that posts work.
 * And the graphs, nodes, executable graphs and user objects the program
 * holds (qc_known_*), below the graph files that make them.
 */
#include <pthread.h>
#include <stdlib.h>

#include "graph.h"

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static uint64_t *slots, *vals; /* vals[i]: the value of slots[i] */
static size_t cap, used; /* cap: a power of two, or 0 */

static uint64_t key(enum qc_handle_kind kind, uint64_t h)
{
	return h ^ ((uint64_t)kind << 62);
}

static size_t home(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static void put(uint64_t k, uint64_t v)
{
	size_t i = home(k);

	while (slots[i] && slots[i] != k)
		i = (i + 1) & (cap - 1);
	if (!slots[i])
		used++;
	slots[i] = k;
	vals[i] = v;
}

/* The slot of k, or -1 (lock held). */
static long find(uint64_t k)
{
	size_t i;

	if (!cap)
		return -1;
	for (i = home(k); slots[i] && slots[i] != k; i = (i + 1) & (cap - 1))
		;
	return slots[i] ? (long)i : -1;
}

static int grow(void)
{
	size_t old_cap = cap;
	uint64_t *old = slots, *old_vals = vals;
	size_t n = cap ? cap * 2 : 64;
	uint64_t *s = calloc(n, sizeof(*s)), *v = calloc(n, sizeof(*v));

	if (!s || !v) {
		free(s);
		free(v);
		return -1;
	}
	slots = s;
	vals = v;
	cap = n;
	used = 0;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			put(old[i], old_vals[i]);
	free(old);
	free(old_vals);
	return 0;
}

cudaError_t qc_handle_add(enum qc_handle_kind kind, uint64_t h, uint64_t value)
{
	cudaError_t e = cudaSuccess;

	pthread_rwlock_wrlock(&lock);
	if ((used + 1) * 4 > cap * 3 && grow())
		e = cudaErrorMemoryAllocation;
	else
		put(key(kind, h), value);
	pthread_rwlock_unlock(&lock);
	return e;
}

void qc_handle_remove(enum qc_handle_kind kind, uint64_t h)
{
	long at;
	size_t i;

	pthread_rwlock_wrlock(&lock);
	at = find(key(kind, h));
	if (at >= 0) {
		i = (size_t)at;
		slots[i] = 0;
		used--;
		for (i = (i + 1) & (cap - 1); slots[i]; i = (i + 1) & (cap - 1)) {
			uint64_t moved = slots[i];

			slots[i] = 0;
			used--;
			put(moved, vals[i]);
		}
	}
	pthread_rwlock_unlock(&lock);
}

int qc_handle_known(enum qc_handle_kind kind, uint64_t h)
{
	int found;

	pthread_rwlock_rdlock(&lock);
	found = find(key(kind, h)) >= 0;
	pthread_rwlock_unlock(&lock);
	return found;
}

int qc_handle_value(enum qc_handle_kind kind, uint64_t h, uint64_t *value)
{
	long at;

	pthread_rwlock_rdlock(&lock);
	at = find(key(kind, h));
	if (at >= 0)
		*value = vals[at];
	pthread_rwlock_unlock(&lock);
	return at >= 0;
}

void qc_handle_reset(void)
{
	pthread_rwlock_wrlock(&lock);
	for (size_t i = 0; i < cap; i++)
		slots[i] = 0;
	used = 0;
	pthread_rwlock_unlock(&lock);
}

/* ---------------------------------------------------------------- streams */

uint64_t qc_stream(cudaStream_t s, int ptds)
{
	if (s == NULL)
		return ptds ? QCUDA_STREAM_PER_THREAD : QCUDA_STREAM_LEGACY;
	if (s == cudaStreamLegacy)
		return QCUDA_STREAM_LEGACY;
	if (s == cudaStreamPerThread)
		return QCUDA_STREAM_PER_THREAD;
	return (uint64_t)(uintptr_t)s;
}

int qc_stream_special(cudaStream_t s)
{
	return s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

int qc_stream_known(cudaStream_t s, int ptds)
{
	return qc_stream_special(s) || qc_handle_known(QC_STREAM, qc_stream(s, ptds));
}

/* ------------------------------------------------- graphs and their kin */

/* Graphs, nodes, executable graphs and user objects the program holds,
 * each with its kind, so that a handle it passes is checked before it is
 * followed (and a node passed as a graph is not taken for one). */
struct known_obj {
	const void *p;
	enum qc_known kind;
};

static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct known_obj *known;
static size_t nknown, known_cap;

int qc_known_add(const void *p, enum qc_known kind)
{
	int ok = 1;

	pthread_mutex_lock(&known_lock);
	if (nknown == known_cap) {
		size_t cap = known_cap ? 2 * known_cap : 64;
		struct known_obj *v = realloc(known, cap * sizeof(*v));

		if (v)
			known = v, known_cap = cap;
		else
			ok = 0;
	}
	if (ok)
		known[nknown++] = (struct known_obj){ p, kind };
	pthread_mutex_unlock(&known_lock);
	return ok;
}

void qc_known_forget(const void *p)
{
	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < nknown; i++)
		if (known[i].p == p) {
			known[i] = known[--nknown];
			break;
		}
	pthread_mutex_unlock(&known_lock);
}

int qc_known_is(const void *p, enum qc_known kind)
{
	int found = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < nknown && !found; i++)
		found = known[i].p == p && known[i].kind == kind;
	pthread_mutex_unlock(&known_lock);
	return found;
}

int qc_graph_known(const struct qc_graph *g)
{
	return qc_known_is(g, QC_KNOWN_GRAPH);
}
int qc_node_known(const struct qc_node *n)
{
	return qc_known_is(n, QC_KNOWN_NODE);
}
int qc_exec_known(const struct qc_exec *x)
{
	return qc_known_is(x, QC_KNOWN_EXEC);
}
