/* SPDX-License-Identifier: MIT */
/*
 * The memory of graph alloc nodes (see graph.h): the allocations, which
 * pointers are a live node's, and the counts CUDA's graph memory
 * attributes report.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_graph_mem **mems;	/* live, for free nodes' checks */
static size_t nmems, mems_cap;
static uint64_t mem_used, mem_high;	/* bytes of alloc nodes, as CUDA's attributes count them */

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
		cudaFree(m->ptr);
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

cudaError_t qc_node_op_alloc(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size)
{
	struct qc_graph_mem *m;
	cudaError_t e;

	if (!props || !size)
		return cudaErrorInvalidValue;
	if (props->allocType != cudaMemAllocationTypePinned ||
	    props->handleTypes != cudaMemHandleTypeNone ||
	    props->location.type != cudaMemLocationTypeDevice)
		return cudaErrorInvalidValue;
	if (props->location.id < 0 || props->location.id >= qc.device_count)
		return cudaErrorInvalidDevice;
	m = calloc(1, sizeof(*m));
	if (!m)
		return cudaErrorMemoryAllocation;
	e = cudaMalloc(&m->ptr, size);	/* the session's allocation: quota and checks apply */
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
			cudaFree(m->ptr);
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
