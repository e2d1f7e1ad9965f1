/* SPDX-License-Identifier: MIT */
/*
 * The memory of graph alloc nodes (see graph.h): the allocations, their
 * reuse within a graph, which pointers are a live node's, and the counts
 * CUDA's graph memory attributes report.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_graph_mem **mems; /* live, for free nodes' checks */
static size_t nmems, mems_cap;
static uint64_t mem_used, mem_high; /* bytes of alloc nodes, as CUDA's attributes count them */

void qc_graph_mem_get(struct qc_graph_mem *m)
{
	pthread_mutex_lock(&mem_lock);
	m->refs++;
	pthread_mutex_unlock(&mem_lock);
}

void qc_graph_mem_put(struct qc_graph_mem *m)
{
	int last;

	pthread_mutex_lock(&mem_lock);
	last = --m->refs == 0;
	if (last) {
		for (size_t i = 0; i < nmems; i++)
			if (mems[i] == m) {
				mems[i] = mems[--nmems];
				break;
			}
		mem_used -= m->size;
	}
	pthread_mutex_unlock(&mem_lock);
	if (last) {
		qc_free_device(m->ptr);
		free(m);
	}
}

/* Whether ptr is the memory of a live alloc node. */
int qc_graph_mem_owns(const void *ptr)
{
	int found = 0;

	pthread_mutex_lock(&mem_lock);
	for (size_t i = 0; i < nmems && !found; i++)
		found = mems[i]->ptr == ptr;
	pthread_mutex_unlock(&mem_lock);
	return found;
}

/* Device memory of a device, the only graph memory served. */
static cudaError_t props_check(const struct cudaMemPoolProps *props, size_t size)
{
	if (!props || !size)
		return cudaErrorInvalidValue;
	if (props->allocType != cudaMemAllocationTypePinned || props->handleTypes != cudaMemHandleTypeNone ||
	    props->location.type != cudaMemLocationTypeDevice)
		return cudaErrorInvalidValue;
	if (props->location.id < 0 || props->location.id >= qc.device_count)
		return cudaErrorInvalidDevice;
	return cudaSuccess;
}

cudaError_t qc_node_op_alloc(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size)
{
	struct qc_graph_mem *m;
	cudaError_t e;

	e = props_check(props, size);
	if (e != cudaSuccess)
		return e;
	m = calloc(1, sizeof(*m));
	if (!m)
		return cudaErrorMemoryAllocation;
	e = qc_malloc(&m->ptr, size); /* the session's allocation: quota and checks apply */
	if (e == cudaSuccess) {
		pthread_mutex_lock(&mem_lock);
		if (nmems == mems_cap) {
			size_t cap = mems_cap ? 2 * mems_cap : 16;
			struct qc_graph_mem **v = realloc(mems, cap * sizeof(*v));

			if (v)
				mems = v, mems_cap = cap;
		}
		if (nmems < mems_cap) {
			mems[nmems++] = m;
			mem_used += size;
			if (mem_used > mem_high)
				mem_high = mem_used;
		} else {
			e = cudaErrorMemoryAllocation;
		}
		pthread_mutex_unlock(&mem_lock);
		if (e != cudaSuccess)
			qc_free_device(m->ptr);
	}
	if (e != cudaSuccess) {
		free(m);
		return e;
	}
	m->size = size;
	m->props = *props;
	m->refs = 1;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemAlloc;
	op->alloc = m;
	op->alloc_size = size;
	return cudaSuccess;
}

/* The memory of g's alloc node at the address ptr, if it is one. */
static struct qc_graph_mem *mem_of(const struct qc_graph *g, const void *ptr)
{
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i]->op.type == cudaGraphNodeTypeMemAlloc && g->nodes[i]->op.alloc->ptr == ptr)
			return g->nodes[i]->op.alloc;
	return NULL;
}

/* Whether free, a free node of m's address, comes after every alloc node
 * of g holding m: then no earlier use of m outlives it. */
static int frees_all_uses(const struct qc_graph *g, const struct qc_node *free, const struct qc_graph_mem *m,
			  char *mark)
{
	if (qc_graph_ancestors(g, free->deps, free->ndeps, mark))
		return 0;
	for (size_t i = 0; i < g->n; i++)
		if (g->nodes[i]->op.type == cudaGraphNodeTypeMemAlloc && g->nodes[i]->op.alloc == m && !mark[i])
			return 0;
	return 1;
}

/*
 * Memory that a node added to g after deps may take over: an earlier alloc
 * node's of g, of size bytes or more on the same device, which a free node
 * among the new node's ancestors gave back after every use of it in g.
 * Nodes of other graphs (child graphs included) are not considered.
 */
static struct qc_graph_mem *reusable(const struct qc_graph *g, struct qc_node *const *deps, size_t ndeps,
				     const struct cudaMemPoolProps *props, size_t size)
{
	struct qc_graph_mem *found = NULL;
	char *before, *mark;

	if (!qc_graph_known(g) || !ndeps || !deps)
		return NULL;
	for (size_t i = 0; i < ndeps; i++)
		if (!qc_node_known(deps[i]) || deps[i]->graph != g)
			return NULL; /* qc_graph_add refuses the node */
	before = malloc(2 * g->n);
	if (!before || qc_graph_ancestors(g, deps, ndeps, before)) {
		free(before);
		return NULL;
	}
	mark = before + g->n;
	for (size_t i = 0; i < g->n && !found; i++) {
		const struct qc_node *n = g->nodes[i];
		struct qc_graph_mem *m;

		if (!before[i] || n->op.type != cudaGraphNodeTypeMemFree)
			continue;
		m = mem_of(g, n->op.free_ptr);
		if (m && m->size >= size && m->props.location.id == props->location.id && frees_all_uses(g, n, m, mark))
			found = m;
	}
	free(before);
	return found;
}

cudaError_t qc_node_op_alloc_after(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size,
				   const struct qc_graph *g, struct qc_node *const *deps, size_t ndeps)
{
	cudaError_t e = props_check(props, size);
	struct qc_graph_mem *m;

	if (e != cudaSuccess)
		return e;
	m = reusable(g, deps, ndeps, props, size);
	if (!m)
		return qc_node_op_alloc(op, props, size);
	qc_graph_mem_get(m);
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemAlloc;
	op->alloc = m;
	op->alloc_size = size;
	return cudaSuccess;
}

cudaError_t qc_node_op_free_mem(struct qc_node_op *op, void *ptr)
{
	if (!ptr || !qc_graph_mem_owns(ptr))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemFree;
	op->free_ptr = ptr;
	return cudaSuccess;
}

/* Used and reserved are the same here: an alloc node's memory is its own
 * allocation (CUDA's reserved grows in larger granules). */
cudaError_t qc_graph_mem_attr(enum cudaGraphMemAttributeType attr, uint64_t *value, int set)
{
	cudaError_t e = cudaSuccess;

	if (!value)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&mem_lock);
	switch (attr) {
	case cudaGraphMemAttrUsedMemCurrent:
	case cudaGraphMemAttrReservedMemCurrent:
		if (set)
			e = cudaErrorInvalidValue;
		else
			*value = mem_used;
		break;
	case cudaGraphMemAttrUsedMemHigh:
	case cudaGraphMemAttrReservedMemHigh:
		if (set && *value != 0)
			e = cudaErrorInvalidValue;
		else if (set)
			mem_high = mem_used;
		else
			*value = mem_high;
		break;
	default:
		e = cudaErrorInvalidValue;
	}
	pthread_mutex_unlock(&mem_lock);
	return e;
}
