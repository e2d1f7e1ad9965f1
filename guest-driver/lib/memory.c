/* SPDX-License-Identifier: MIT */
/*
 * Device memory's entry points: cudaMalloc, cudaFree (of memory of every
 * kind that cudaFree takes) and cudaPointerGetAttributes. What they stand
 * on, the regions, is region.c's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "qc_os.h"
#include "qcrt.h"

/* cudaFree's core. */
static cudaError_t qc_free(void *devPtr)
{
	uint64_t p = (uintptr_t)devPtr;
	struct qc_region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!devPtr)
		return cudaSuccess;
	if (qc_graph_mem_owns(devPtr))
		return cudaSuccess; /* back to its graph (graph.h) */
	if (qc_pool_free_import(p, &e))
		return e;
	pthread_rwlock_wrlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_dev_map, p);
	if (!r || r->dev != p)
		r = qc_rmap_find(&qc_host_map, p);
	/* cudaFree takes device allocations and managed memory, at their start. */
	if (r && !((r->kind == QC_MEM_DEVICE && r->dev == p) ||
		   (r->kind == QC_MEM_MANAGED && (r->host == p || r->dev == p))))
		r = NULL;
	if (r)
		qc_region_remove_locked(r);
	pthread_rwlock_unlock(&qc_maps_lock);
	if (!r)
		return cudaErrorInvalidValue;
	return qc_region_release(r, 0);
}

QC_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(qc_malloc(devPtr, size));
}

QC_API cudaError_t cudaFree(void *devPtr)
{
	return qc_ret(qc_free(devPtr));
}

QC_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	uint64_t a = (uintptr_t)ptr;
	struct qc_region *r;
	cudaError_t e;

	QC_ENTER(e);
	if (!attributes)
		return qc_ret(cudaErrorInvalidValue);
	memset(attributes, 0, sizeof(*attributes));
	attributes->type = cudaMemoryTypeUnregistered;
	attributes->device = -2;
	pthread_rwlock_rdlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_dev_map, a);
	if (r) {
		uint64_t off = a - r->dev;

		attributes->devicePointer = (void *)(uintptr_t)a;
		attributes->hostPointer = r->host ? (void *)(r->host + off) : NULL;
	} else if ((r = qc_rmap_find(&qc_host_map, a))) {
		uint64_t off = a - r->host;

		attributes->hostPointer = (void *)(uintptr_t)a;
		attributes->devicePointer = r->dev ? (void *)(uintptr_t)(r->dev + off) : NULL;
	}
	if (r) {
		attributes->device = r->device;
		attributes->type = r->kind == QC_MEM_DEVICE || r->kind == QC_MEM_SYMBOL || r->kind == QC_MEM_VMM
					   ? cudaMemoryTypeDevice
				   : r->kind == QC_MEM_MANAGED ? cudaMemoryTypeManaged
							       : cudaMemoryTypeHost;
		if (r->kind == QC_MEM_MANAGED)
			attributes->devicePointer = attributes->hostPointer;
	}
	pthread_rwlock_unlock(&qc_maps_lock);
	return cudaSuccess;
}
