/* SPDX-License-Identifier: MIT */
/*
 * Host memory: pinned (cudaHostAlloc, cudaMallocHost), managed
 * (cudaMallocManaged) and registered (cudaHostRegister) guest memory, and
 * its device side (HOST_MAP).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"

/* The guest kernel's largest physically contiguous HOST_ALLOC. */
#define QC_MAX_CONTIGUOUS (4ull << 20)

cudaError_t qc_host_unmap(uint64_t dev)
{
	return qc_req_host_unmap(dev);
}

static cudaError_t host_map_call(uint64_t gpa, uint64_t size, uint64_t *dev)
{
	cudaError_t e;

	*dev = 0;
	e = qc_req_host_map(gpa, size, dev);
	if (e == cudaSuccess && *dev == 0) {
		qc_msg("HOST_MAP returned a NULL device pointer");
		e = cudaErrorUnknown;
	}
	return e;
}

/* Pages that are not physically contiguous: the guest driver names them
 * (HOST_MAP_PAGES) for [key, key+size), whole pages of one of this
 * process's HOST_ALLOC or HOST_REGISTER areas. */
static cudaError_t host_map_pages(uint64_t key, uint64_t size, uint64_t *dev)
{
	struct qcuda_args_host_map_pages a = { .key = key, .size = size };
	cudaError_t e;

	*dev = 0;
	e = qc_req_host_map_pages(&a, sizeof(a), dev);
	if (e == cudaSuccess && *dev == 0) {
		qc_msg("HOST_MAP_PAGES returned a NULL device pointer");
		e = cudaErrorUnknown;
	}
	return e;
}

static int warned_unmapped;

/*
 * Pinned guest memory (cudaHostAlloc, cudaMallocManaged): a HOST_ALLOC,
 * physically contiguous when it can be (<= 4 MiB: one extent, HOST_MAP),
 * else scattered pages the backend maps as one range (HOST_MAP_PAGES); then
 * mapped into this process at its device address when that is free.
 * need_map: fail rather than return memory the device cannot address.
 */
static cudaError_t host_alloc(void **out, size_t size, unsigned int flags, enum qc_mem_kind kind, int need_map)
{
	struct qc_region *r;
	uint64_t gpa = 0, dev = 0;
	size_t len = qc_page_round(size);
	int contiguous = len <= QC_MAX_CONTIGUOUS;
	cudaError_t e;
	void *want;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r)
		return cudaErrorMemoryAllocation;
	rc = qt_host_alloc(qc.fd, len, contiguous, &r->token, &gpa);
	if (rc == -ENOMEM && contiguous)
		rc = qt_host_alloc(qc.fd, len, 0, &r->token, &gpa);
	if (rc) {
		free(r);
		/* -ENOSYS: a transport without pinned memory. */
		if (rc == -ENOSYS)
			return cudaErrorNotSupported;
		return rc == -ENOMEM || rc == -EINVAL ? cudaErrorMemoryAllocation : cudaErrorUnknown;
	}
	e = gpa ? host_map_call(gpa, len, &dev) : host_map_pages(r->token, len, &dev);
	if (e != cudaSuccess) {
		qc_debug("HOST_MAP%s of %zu bytes failed: %s", gpa ? "" : "_PAGES", len, qc_error_label(e));
		dev = 0;
	}
	if (!dev && need_map) {
		qt_host_free(qc.fd, r->token);
		free(r);
		return cudaErrorMemoryAllocation;
	}
	if (!dev && !warned_unmapped && kind == QC_MEM_MANAGED) {
		warned_unmapped = 1;
		qc_msg("note: a managed allocation of %zu bytes could not be mapped for the device "
		       "(its pages are too scattered, or the backend refused): copies and memsets "
		       "work, kernels could not use it",
		       len);
	}
	want = dev && !(dev & (qc_page_size - 1)) && dev < QC_USER_TOP && len <= QC_USER_TOP - dev
		       ? (void *)(uintptr_t)dev
		       : NULL;
	r->host = (uintptr_t)qt_host_mmap(qc.fd, r->token, len, want);
	if (!r->host) {
		if (dev)
			qc_host_unmap(dev);
		qt_host_free(qc.fd, r->token);
		free(r);
		return cudaErrorMemoryAllocation;
	}
	r->kind = kind;
	r->dev = dev;
	r->size = size;
	r->map_len = len;
	r->flags = flags;
	if (qc_region_add(r)) {
		qc_msg("pinned memory at %#llx / device %#llx overlaps a live allocation", (unsigned long long)r->host,
		       (unsigned long long)dev);
		qc_region_release(r, 0);
		return cudaErrorUnknown;
	}
	*out = (void *)r->host;
	return cudaSuccess;
}

QC_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	cudaError_t e;

	QC_ENTER_OUT(pHost, NULL, e);
	if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
		return qc_ret(cudaErrorInvalidValue);
	if (size == 0)
		return cudaSuccess;
	/* Portable: one session per process, so every allocation is.
	 * WriteCombined: a caching hint for the CPU; ordinary memory is
	 * correct for it. Mapped: must get a device pointer. */
	return qc_ret(host_alloc(pHost, size, flags, QC_MEM_PINNED, !!(flags & cudaHostAllocMapped)));
}

QC_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

QC_API cudaError_t cudaFreeHost(void *ptr)
{
	struct qc_region *r;
	cudaError_t e;

	QC_ENTER(e);
	if (!ptr)
		return cudaSuccess;
	pthread_rwlock_wrlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_host_map, (uintptr_t)ptr);
	if (r && (r->kind != QC_MEM_PINNED || r->host != (uintptr_t)ptr))
		r = NULL;
	if (r)
		qc_region_remove_locked(r);
	pthread_rwlock_unlock(&qc_maps_lock);
	if (!r)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(qc_region_release(r, 0));
}

QC_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	cudaError_t e;

	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	QC_ENTER(e);
	if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
		return qc_ret(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0)
		return cudaSuccess;
	return qc_ret(host_alloc(devPtr, size, flags, QC_MEM_MANAGED, 0));
}

cudaError_t qc_mem_managed(const void *p, size_t n, qc_managed_fn fn, void *arg)
{
	uint64_t a = (uintptr_t)p;
	struct qc_region *r;
	cudaError_t e = cudaErrorInvalidValue;

	/* The read lock is held across fn: cudaFree (write lock) waits for it,
	 * so the region and its hints stay alive meanwhile. */
	pthread_rwlock_rdlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_host_map, a);
	if (r && r->kind == QC_MEM_MANAGED && n > 0 && n <= r->host + r->size - a)
		e = fn(&r->hints, r->host, r->size, arg);
	pthread_rwlock_unlock(&qc_maps_lock);
	return e;
}

QC_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	const unsigned int known =
		cudaHostRegisterPortable | cudaHostRegisterMapped | cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
	uint64_t a = (uintptr_t)ptr, gpa = 0, dev = 0, unmap_dev = 0;
	struct qc_region *r;
	cudaError_t e = qc_ready();
	int rc, busy;

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!ptr || size == 0 || (flags & ~known) || a + size < a)
		return qc_ret(cudaErrorInvalidValue);
	/* I/O memory cannot be registered through qcuda. */
	if (flags & cudaHostRegisterIoMemory)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&qc_maps_lock);
	busy = qc_rmap_overlaps(&qc_host_map, a, a + size);
	pthread_rwlock_unlock(&qc_maps_lock);
	if (busy)
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	rc = qt_host_register(qc.fd, ptr, size, &gpa);
	if (rc == -EEXIST)
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	if (rc)
		return qc_ret(rc == -ENOMEM ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
	if (gpa) {
		if (host_map_call(gpa, size, &dev) != cudaSuccess)
			dev = 0;
	} else {
		uint64_t key = a & ~(uint64_t)(qc_page_size - 1);

		e = host_map_pages(key, qc_page_round(a + size - key), &unmap_dev);
		if (e == cudaSuccess)
			dev = unmap_dev + (a - key);
		else
			qc_debug("HOST_MAP_PAGES of %zu registered bytes failed: %s", size, qc_error_label(e));
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (dev)
			qc_host_unmap(unmap_dev ? unmap_dev : dev);
		qt_host_unregister(qc.fd, ptr);
		return qc_ret(cudaErrorMemoryAllocation);
	}
	r->kind = QC_MEM_REGISTERED;
	r->host = (uintptr_t)ptr;
	r->dev = dev;
	r->unmap_dev = unmap_dev;
	r->size = size;
	r->flags = flags;
	if (dev && dev != a) {
		/* The user's pages cannot move to the device address: keep the
		 * device range free of anything else instead. */
		r->res_start = dev & ~(uint64_t)(qc_page_size - 1);
		r->map_len = qc_page_round(size + (dev - r->res_start));
		r->reserved = qc_reserve_range(r->res_start, r->map_len);
	}
	if (qc_region_add(r)) {
		/* Lost a race with another thread registering the same range. */
		qc_region_release(r, 0);
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	}
	return cudaSuccess;
}

QC_API cudaError_t cudaHostUnregister(void *ptr)
{
	struct qc_region *r;
	cudaError_t e;

	QC_ENTER(e);
	if (!ptr)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_wrlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_host_map, (uintptr_t)ptr);
	if (r && r->kind != QC_MEM_REGISTERED)
		r = NULL;
	if (r && r->host != (uintptr_t)ptr) {
		pthread_rwlock_unlock(&qc_maps_lock);
		return qc_ret(cudaErrorInvalidValue);
	}
	if (r)
		qc_region_remove_locked(r);
	pthread_rwlock_unlock(&qc_maps_lock);
	if (!r)
		return qc_ret(cudaErrorHostMemoryNotRegistered);
	return qc_ret(qc_region_release(r, 0));
}

QC_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	uint64_t a = (uintptr_t)pHost;
	struct qc_region *r;
	cudaError_t e = qc_ready();
	static int warned;

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!pDevice || flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_host_map, a);
	if (r && r->kind != QC_MEM_MANAGED)
		e = r->dev ? cudaSuccess : cudaErrorNotSupported;
	else
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		*pDevice = (void *)(uintptr_t)(r->dev + (a - r->host));
	pthread_rwlock_unlock(&qc_maps_lock);
	if (e == cudaErrorNotSupported && !warned) {
		warned = 1;
		qc_msg("cudaHostGetDevicePointer: this memory could not be mapped for the device "
		       "(its pages are too scattered for one mapping, or the backend refused it)");
	}
	return qc_ret(e);
}

QC_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
	struct qc_region *r;
	cudaError_t e;

	QC_ENTER(e);
	if (!pFlags)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_host_map, (uintptr_t)pHost);
	if (r && r->kind != QC_MEM_MANAGED)
		*pFlags = r->flags | cudaHostAllocMapped;
	else
		e = cudaErrorInvalidValue;
	pthread_rwlock_unlock(&qc_maps_lock);
	return qc_ret(e);
}
