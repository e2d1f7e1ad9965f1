/* SPDX-License-Identifier: MIT */
/*
 * Device memory: cudaMalloc and cudaFree, a region's release (of every kind)
 * and the reset that forgets them all, module variables' ranges, and
 * cudaPointerGetAttributes.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "qc_os.h"
#include "qcrt.h"

/* Releases what a region holds on both sides; r is out of the maps. With
 * after_reset, the backend already dropped its side. */
cudaError_t qc_region_release(struct qc_region *r, int after_reset)
{
	cudaError_t e = cudaSuccess;
	int rc;

	switch (r->kind) {
	case QC_MEM_SYMBOL:
		break;
	case QC_MEM_DEVICE:
	case QC_MEM_VMM:
		if (!after_reset)
			e = r->kind == QC_MEM_DEVICE ? qc_req_free(r->dev) : qc_req_vmm_free(r->dev, r->size);
		if (r->reserved)
			qc_os_release(r->res_start, r->map_len);
		break;
	case QC_MEM_PINNED:
	case QC_MEM_MANAGED:
		if (r->dev && !after_reset)
			e = qc_host_unmap(r->dev);
		qc_os_unmap_pages((void *)r->host, r->map_len);
		rc = qt_host_free(qc.fd, r->token);
		if (rc && e == cudaSuccess && !after_reset)
			qc_debug("HOST_FREE: %s", strerror(-rc));
		break;
	case QC_MEM_REGISTERED:
		if (r->dev && !after_reset)
			e = qc_host_unmap(r->unmap_dev ? r->unmap_dev : r->dev);
		if (r->reserved)
			qc_os_release(r->res_start, r->map_len);
		rc = qt_host_unregister(qc.fd, (void *)r->host);
		if (rc && e == cudaSuccess && !after_reset)
			qc_debug("HOST_UNREGISTER: %s", strerror(-rc));
		break;
	}
	qc_managed_free(r->hints);
	free(r);
	return e;
}

void qc_mem_reset(void)
{
	struct qc_region **all;
	size_t n = 0;

	pthread_rwlock_wrlock(&qc_maps_lock);
	all = malloc((qc_dev_map.n + qc_host_map.n + 1) * sizeof(*all));
	for (size_t i = 0; all && i < qc_dev_map.n; i++)
		all[n++] = qc_dev_map.v[i].r;
	for (size_t i = 0; all && i < qc_host_map.n; i++) {
		struct qc_region *r = qc_host_map.v[i].r;

		if (!r->dev) /* else already taken from qc_dev_map */
			all[n++] = r;
	}
	qc_dev_map.n = 0;
	qc_host_map.n = 0;
	pthread_rwlock_unlock(&qc_maps_lock);
	for (size_t i = 0; i < n; i++)
		qc_region_release(all[i], 1);
	free(all);
}

/* ------------------------------------------------------------ device memory */

cudaError_t qc_alloc_device(uint64_t size, uint64_t token, uint64_t *devp)
{
	struct qc_region *r = calloc(1, sizeof(*r));
	uint64_t dev = 0;
	cudaError_t e;

	if (!r)
		return cudaErrorMemoryAllocation;
	e = qc_req_malloc(size, &dev);
	if (e == cudaSuccess && dev == 0) {
		qc_msg("MALLOC returned a NULL device pointer");
		e = cudaErrorUnknown;
	}
	if (e != cudaSuccess) {
		free(r);
		return e;
	}
	r->token = token;
	if (qc_region_add_device(r, QC_MEM_DEVICE, dev, size, "MALLOC"))
		return cudaErrorUnknown;
	*devp = dev;
	return cudaSuccess;
}

QC_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	uint64_t dev = 0;
	cudaError_t e;

	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	*devPtr = NULL;
	e = qc_ready();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (size == 0)
		return cudaSuccess;
	e = qc_alloc_device(size, 0, &dev);
	if (e == cudaSuccess)
		*devPtr = (void *)(uintptr_t)dev;
	return qc_ret(e);
}

QC_API cudaError_t cudaFree(void *devPtr)
{
	uint64_t p = (uintptr_t)devPtr;
	struct qc_region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!devPtr)
		return cudaSuccess;
	if (qc_graph_mem_owns(devPtr))
		return cudaSuccess; /* back to its graph (graph.h) */
	if (qc_pool_free_import(p, &e))
		return qc_ret(e);
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
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(qc_region_release(r, 0));
}

void qc_mem_add_symbol(uint64_t dptr, uint64_t size)
{
	struct qc_region *r;

	if (!dptr || !size)
		return;
	pthread_rwlock_rdlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_dev_map, dptr);
	pthread_rwlock_unlock(&qc_maps_lock);
	if (r) /* already known (looked up again after a race) */
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->kind = QC_MEM_SYMBOL;
	r->dev = dptr;
	r->size = size;
	if (qc_region_add(r)) {
		qc_debug("variable at %#llx+%llu overlaps a known range", (unsigned long long)dptr,
			 (unsigned long long)size);
		free(r);
	}
}

struct qc_region *qc_region_take(uint64_t dev, enum qc_mem_kind kind)
{
	struct qc_region *r;

	pthread_rwlock_wrlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_dev_map, dev);
	if (r && r->kind == kind && r->dev == dev)
		qc_region_remove_locked(r);
	else
		r = NULL;
	pthread_rwlock_unlock(&qc_maps_lock);
	return r;
}

void qc_mem_remove_symbol(uint64_t dptr)
{
	free(qc_region_take(dptr, QC_MEM_SYMBOL));
}

QC_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	uint64_t a = (uintptr_t)ptr;
	struct qc_region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
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
