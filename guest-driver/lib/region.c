/* SPDX-License-Identifier: MIT */
/*
 * The regions (the state layer, with rmap.c's maps): device memory
 * allocated and freed (MALLOC / FREE) as regions, a region's release of
 * every kind and the reset that forgets them all, module variables'
 * ranges, and what a pointer is (qc_resolve). The entry points that use
 * them (memory.c, hostmem.c, pool.c, module.c, the copies) are above.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
			e = qc_req_host_unmap(r->dev);
		qc_os_unmap_pages((void *)r->host, r->map_len);
		rc = qt_host_free(qc.fd, r->token);
		if (rc && e == cudaSuccess && !after_reset)
			qc_debug("HOST_FREE: %s", strerror(-rc));
		break;
	case QC_MEM_REGISTERED:
		if (r->dev && !after_reset)
			e = qc_req_host_unmap(r->unmap_dev ? r->unmap_dev : r->dev);
		if (r->reserved)
			qc_os_release(r->res_start, r->map_len);
		rc = qt_host_unregister(qc.fd, (void *)r->host);
		if (rc && e == cudaSuccess && !after_reset)
			qc_debug("HOST_UNREGISTER: %s", strerror(-rc));
		break;
	}
	free(r->hints); /* managed.c's record, one block */
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
	if (qc_region_add_device(r, QC_MEM_DEVICE, dev, size, "MALLOC")) {
		qc_region_release(r, 0);
		return cudaErrorUnknown;
	}
	*devp = dev;
	return cudaSuccess;
}

/* cudaMalloc without the thread's last error, for the library's own
 * allocations (cudaMallocPitch, graph memory nodes): no internal caller
 * goes through a public entry point. */
cudaError_t qc_malloc(void **devPtr, size_t size)
{
	uint64_t dev = 0;
	cudaError_t e;

	*devPtr = NULL;
	e = qc_ready();
	if (e != cudaSuccess)
		return e;
	if (size == 0)
		return cudaSuccess;
	e = qc_alloc_device(size, 0, &dev);
	if (e == cudaSuccess)
		*devPtr = (void *)(uintptr_t)dev;
	return e;
}

int qc_region_add_symbol(uint64_t dev, uint64_t size, uint64_t token)
{
	struct qc_region *r = calloc(1, sizeof(*r));

	if (!r)
		return 1;
	r->kind = QC_MEM_SYMBOL;
	r->dev = dev;
	r->size = size;
	r->token = token;
	if (qc_region_add(r)) {
		free(r);
		return -1;
	}
	return 0;
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
	if (qc_region_add_symbol(dptr, size, 0) < 0)
		qc_debug("variable at %#llx+%llu overlaps a known range", (unsigned long long)dptr,
			 (unsigned long long)size);
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

/* Frees device memory the library allocated for itself with qc_malloc
 * (graph memory nodes), as cudaFree would, without the thread's last error. */
cudaError_t qc_free_device(void *devPtr)
{
	struct qc_region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	r = qc_region_take((uintptr_t)devPtr, QC_MEM_DEVICE);
	return r ? qc_region_release(r, 0) : cudaErrorInvalidValue;
}

/*
 * Resolves [p, p+n). need_device: the call's kind says this side is device
 * memory, so it must be a known device-accessible range (device
 * allocations, pinned/registered/managed memory); otherwise anything goes
 * (unknown pointers are pageable host memory), as under unified addressing.
 */
cudaError_t qc_resolve(const void *p, size_t n, int need_device, struct qc_loc *l)
{
	uint64_t a = (uintptr_t)p;
	cudaError_t e = cudaSuccess;
	struct qc_region *r;

	pthread_rwlock_rdlock(&qc_maps_lock);
	if ((r = qc_rmap_find(&qc_dev_map, a))) {
		if (n > r->dev + r->size - a)
			e = cudaErrorInvalidValue;
		else if (r->kind == QC_MEM_DEVICE || r->kind == QC_MEM_SYMBOL || r->kind == QC_MEM_VMM)
			*l = (struct qc_loc){ .device = 1, .dptr = a };
		else /* host memory seen through its device pointer */
			*l = (struct qc_loc){ .device = 0, .hptr = (void *)(r->host + (a - r->dev)) };
	} else if ((r = qc_rmap_find(&qc_host_map, a))) {
		if (need_device && n > r->host + r->size - a)
			e = cudaErrorInvalidValue;
		else
			*l = (struct qc_loc){ .device = 0, .hptr = (void *)p };
	} else if (need_device) {
		e = cudaErrorInvalidValue;
	} else {
		*l = (struct qc_loc){ .device = 0, .hptr = (void *)p };
	}
	pthread_rwlock_unlock(&qc_maps_lock);
	return e;
}
