/* SPDX-License-Identifier: MIT */
/*
 * Memory: device allocations, copies and memsets, pinned / registered /
 * managed host memory, and the tables that let the library tell device
 * pointers from host pointers (cudaMemcpyDefault, argument checks).
 *
 * Every allocation is a region, kept in up to two sorted range maps:
 *   dev_map   ranges of device pointers (cudaMalloc, and the device side of
 *             mapped host memory),
 *   host_map  ranges of guest host memory the library knows (cudaHostAlloc,
 *             cudaHostRegister, cudaMallocManaged).
 * Unified addressing in the guest: the library tries to make a device
 * pointer range unusable for anything else in the guest's address space, so
 * that no host pointer can be mistaken for a device pointer: device
 * allocations get a PROT_NONE reservation at their device address, and host
 * allocations are mapped at their device address when it is free (then the
 * host and device pointers are the same, as under CUDA's unified
 * addressing). Both are best effort (MAP_FIXED_NOREPLACE).
 *
 * Memory that is host memory on both sides (pinned, registered, managed) is
 * copied and set by the CPU; device memory through the backend, the host
 * side of a copy being pinned by the driver (no copies).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qcrt.h"

/* The guest kernel's largest physically contiguous HOST_ALLOC. */
#define QC_MAX_CONTIGUOUS (4ull << 20)
/* Top of x86-64 user space with 4-level page tables. */
#define QC_USER_TOP 0x7ffffffff000ull

/* R_SYMBOL: a module's __device__/__constant__ variable (VAR_GET), device
 * memory that cudaFree refuses; dropped with its module or at reset. */
enum rkind { R_DEVICE, R_PINNED, R_REGISTERED, R_MANAGED, R_SYMBOL };

struct region {
	enum rkind kind;
	uint64_t dev;		/* device pointer, 0 if none (not mapped) */
	uintptr_t host;		/* host address, 0 for device memory */
	uint64_t size;		/* as asked for */
	size_t map_len;		/* page-rounded: mmap / reservation length */
	uint64_t token;		/* HOST_ALLOC token (pinned, managed) */
	unsigned int flags;	/* cudaHostAlloc / cudaHostRegister / managed flags */
	int reserved;		/* [res_start, +map_len) reserved PROT_NONE here */
	uint64_t res_start;
	void *hints;		/* managed: managed.c's advice and prefetch record, or NULL */
};

struct rent {
	uint64_t start, end;
	struct region *r;
};

struct rmap {
	struct rent *v;
	size_t n, cap;
};

static pthread_rwlock_t maps_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct rmap dev_map, host_map;
static size_t page_size;

__attribute__((constructor)) static void init_page_size(void)
{
	page_size = (size_t)sysconf(_SC_PAGESIZE);
}

static size_t page_round(uint64_t n)
{
	return (size_t)((n + page_size - 1) & ~(uint64_t)(page_size - 1));
}

/* Index of the first entry with start > p. */
static size_t rmap_upper(const struct rmap *m, uint64_t p)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct region *rmap_find(const struct rmap *m, uint64_t p)
{
	size_t i = rmap_upper(m, p);

	if (i == 0 || p >= m->v[i - 1].end)
		return NULL;
	return m->v[i - 1].r;
}

/* Any entry overlapping [start, end)? */
static int rmap_overlaps(const struct rmap *m, uint64_t start, uint64_t end)
{
	size_t i = rmap_upper(m, start);

	if (i > 0 && m->v[i - 1].end > start)
		return 1;
	return i < m->n && m->v[i].start < end;
}

static int rmap_insert(struct rmap *m, uint64_t start, uint64_t size, struct region *r)
{
	uint64_t end = start + size;
	size_t i;

	if (end < start || rmap_overlaps(m, start, end))
		return -EEXIST;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct rent *v = realloc(m->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	i = rmap_upper(m, start);
	memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
	m->v[i] = (struct rent){ start, end, r };
	m->n++;
	return 0;
}

static void rmap_remove(struct rmap *m, struct region *r)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->v[i].r == r) {
			memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
			m->n--;
			return;
		}
	}
}

/* Adds r to the maps (both, if it has both sides). */
static int add_region(struct region *r)
{
	int e = 0;

	pthread_rwlock_wrlock(&maps_lock);
	if (r->dev)
		e = rmap_insert(&dev_map, r->dev, r->size, r);
	if (!e && r->host) {
		e = rmap_insert(&host_map, r->host, r->size, r);
		if (e && r->dev)
			rmap_remove(&dev_map, r);
	}
	pthread_rwlock_unlock(&maps_lock);
	return e;
}

static void remove_region_locked(struct region *r)
{
	if (r->dev)
		rmap_remove(&dev_map, r);
	if (r->host)
		rmap_remove(&host_map, r);
}

/* PROT_NONE placeholder at a device address, so that nothing else in the
 * guest is ever mapped there (best effort). */
static int reserve_range(uint64_t dev, size_t len)
{
	void *p;

	if (!len || (dev & (page_size - 1)) || dev >= QC_USER_TOP || len > QC_USER_TOP - dev)
		return 0;
	p = mmap((void *)(uintptr_t)dev, len, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (p == (void *)(uintptr_t)dev)
		return 1;
	if (p != MAP_FAILED)
		munmap(p, len);
	qc_debug("device range %#llx+%zu overlaps guest memory: pointers there are ambiguous",
		 (unsigned long long)dev, len);
	return 0;
}

static cudaError_t host_unmap(uint64_t dev)
{
	struct qcuda_args_ptr a = { .ptr = dev };

	return qc_call(QCUDA_CMD_HOST_UNMAP, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
}

static cudaError_t host_map_call(uint64_t gpa, uint64_t size, uint64_t *dev)
{
	struct qcuda_args_host_map a = { .gpa = gpa, .size = size };
	cudaError_t e;

	*dev = 0;
	e = qc_call(QCUDA_CMD_HOST_MAP, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, dev);
	if (e == cudaSuccess && *dev == 0) {
		qc_msg("HOST_MAP returned a NULL device pointer");
		e = cudaErrorUnknown;
	}
	return e;
}

/* Releases what a region holds on both sides; r is out of the maps. With
 * after_reset, the backend already dropped its side. */
static cudaError_t release_region(struct region *r, int after_reset)
{
	cudaError_t e = cudaSuccess;
	int rc;

	switch (r->kind) {
	case R_SYMBOL:
		break;
	case R_DEVICE:
		if (!after_reset) {
			struct qcuda_args_ptr a = { .ptr = r->dev };

			e = qc_call(QCUDA_CMD_FREE, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
		}
		if (r->reserved)
			munmap((void *)(uintptr_t)r->res_start, r->map_len);
		break;
	case R_PINNED:
	case R_MANAGED:
		if (r->dev && !after_reset)
			e = host_unmap(r->dev);
		munmap((void *)r->host, r->map_len);
		rc = qt_host_free(qc.fd, r->token);
		if (rc && e == cudaSuccess && !after_reset)
			qc_debug("HOST_FREE: %s", strerror(-rc));
		break;
	case R_REGISTERED:
		if (r->dev && !after_reset)
			e = host_unmap(r->dev);
		if (r->reserved)
			munmap((void *)(uintptr_t)r->res_start, r->map_len);
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
	struct region **all;
	size_t n = 0;

	pthread_rwlock_wrlock(&maps_lock);
	all = malloc((dev_map.n + host_map.n + 1) * sizeof(*all));
	for (size_t i = 0; all && i < dev_map.n; i++)
		all[n++] = dev_map.v[i].r;
	for (size_t i = 0; all && i < host_map.n; i++) {
		struct region *r = host_map.v[i].r;

		if (!r->dev)	/* else already taken from dev_map */
			all[n++] = r;
	}
	dev_map.n = 0;
	host_map.n = 0;
	pthread_rwlock_unlock(&maps_lock);
	for (size_t i = 0; i < n; i++)
		release_region(all[i], 1);
	free(all);
}

/* ------------------------------------------------------------ device memory */

QC_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	struct qcuda_args_malloc a = { .size = size };
	struct region *r;
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
	r = calloc(1, sizeof(*r));
	if (!r)
		return qc_ret(cudaErrorMemoryAllocation);
	e = qc_call(QCUDA_CMD_MALLOC, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, &dev);
	if (e == cudaSuccess && dev == 0) {
		qc_msg("MALLOC returned a NULL device pointer");
		e = cudaErrorUnknown;
	}
	if (e != cudaSuccess) {
		free(r);
		return qc_ret(e);
	}
	r->kind = R_DEVICE;
	r->dev = dev;
	r->size = size;
	r->map_len = page_round(size);
	r->res_start = dev;
	r->reserved = reserve_range(dev, r->map_len);
	if (add_region(r)) {
		qc_msg("MALLOC returned %#llx+%zu, which overlaps a live allocation",
		       (unsigned long long)dev, size);
		release_region(r, 0);
		return qc_ret(cudaErrorUnknown);
	}
	*devPtr = (void *)(uintptr_t)dev;
	return cudaSuccess;
}

QC_API cudaError_t cudaFree(void *devPtr)
{
	uint64_t p = (uintptr_t)devPtr;
	struct region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!devPtr)
		return cudaSuccess;
	pthread_rwlock_wrlock(&maps_lock);
	r = rmap_find(&dev_map, p);
	if (!r || r->dev != p)
		r = rmap_find(&host_map, p);
	/* cudaFree takes device allocations and managed memory, at their start. */
	if (r && !((r->kind == R_DEVICE && r->dev == p) ||
		   (r->kind == R_MANAGED && (r->host == p || r->dev == p))))
		r = NULL;
	if (r)
		remove_region_locked(r);
	pthread_rwlock_unlock(&maps_lock);
	if (!r)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(release_region(r, 0));
}

/* ----------------------------------------------------------------- copies */

/* Where one side of a copy lives. */
struct loc {
	int device;		/* 1: device memory (the backend's), 0: guest memory */
	uint64_t dptr;		/* device pointer if device */
	void *hptr;		/* guest address if !device */
};

/*
 * Resolves [p, p+n). need_device: the call's kind says this side is device
 * memory, so it must be a known device-accessible range (device
 * allocations, pinned/registered/managed memory); otherwise anything goes
 * (unknown pointers are pageable host memory), as under unified addressing.
 */
static cudaError_t resolve(const void *p, size_t n, int need_device, struct loc *l)
{
	uint64_t a = (uintptr_t)p;
	cudaError_t e = cudaSuccess;
	struct region *r;

	pthread_rwlock_rdlock(&maps_lock);
	if ((r = rmap_find(&dev_map, a))) {
		if (n > r->dev + r->size - a)
			e = cudaErrorInvalidValue;
		else if (r->kind == R_DEVICE || r->kind == R_SYMBOL)
			*l = (struct loc){ .device = 1, .dptr = a };
		else	/* host memory seen through its device pointer */
			*l = (struct loc){ .device = 0, .hptr = (void *)(r->host + (a - r->dev)) };
	} else if ((r = rmap_find(&host_map, a))) {
		if (need_device && n > r->host + r->size - a)
			e = cudaErrorInvalidValue;
		else
			*l = (struct loc){ .device = 0, .hptr = (void *)p };
	} else if (need_device) {
		e = cudaErrorInvalidValue;
	} else {
		*l = (struct loc){ .device = 0, .hptr = (void *)p };
	}
	pthread_rwlock_unlock(&maps_lock);
	return e;
}

/* Waits for the work queued on a stream so far (for copies and memsets that
 * the library does itself, on guest memory). */
static cudaError_t stream_drain(cudaStream_t stream, int ptds)
{
	struct qcuda_args_handle a = { .handle = qc_stream(stream, ptds) };

	return qc_deferred(qc_call(QCUDA_CMD_STREAM_SYNC, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0,
				   NULL));
}

static cudaError_t do_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
			   cudaStream_t stream, int async, int ptds)
{
	struct qcuda_args_memcpy a;
	struct loc d, s;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (n == 0)
		return cudaSuccess;
	if ((unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (!dst || !src)
		return cudaErrorInvalidValue;
	e = resolve(dst, n, kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice, &d);
	if (e == cudaSuccess)
		e = resolve(src, n, kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice, &s);
	if (e != cudaSuccess)
		return e;

	memset(&a, 0, sizeof(a));
	a.size = n;
	a.stream = qc_stream(stream, ptds);
	a.async = async ? 1 : 0;
	if (d.device && s.device) {
		a.dst = d.dptr;
		a.src = s.dptr;
		if (async)
			return qc_stream_known(stream, ptds) ? qc_post(QCUDA_CMD_MEMCPY_DTOD, &a, sizeof(a)) :
							       cudaErrorInvalidResourceHandle;
		return qc_deferred(qc_call(QCUDA_CMD_MEMCPY_DTOD, &a, sizeof(a), NULL, 0, QT_NONE, NULL,
					   0, NULL));
	}
	/* Copies from or to guest memory go at once (the driver pins the pages
	 * for the call); a synchronous one is where posted work's errors show. */
	if (d.device) {
		a.dst = d.dptr;
		e = qc_call(QCUDA_CMD_MEMCPY_HTOD, &a, sizeof(a), NULL, 0, QT_TO_DEVICE, s.hptr, n,
			    NULL);
		return async ? e : qc_deferred(e);
	}
	if (s.device) {
		a.src = s.dptr;
		e = qc_call(QCUDA_CMD_MEMCPY_DTOH, &a, sizeof(a), NULL, 0, QT_FROM_DEVICE, d.hptr, n,
			    NULL);
		return async ? e : qc_deferred(e);
	}
	/* Guest memory on both sides: done here, after the stream's earlier work
	 * (a kernel may still be writing mapped or managed memory). */
	e = stream_drain(stream, ptds);
	if (e == cudaSuccess)
		memmove(d.hptr, s.hptr, n);
	return e;
}

cudaError_t qc_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
		      cudaStream_t stream, int async, int ptds)
{
	return do_copy(dst, src, n, kind, stream, async, ptds);
}

void qc_mem_add_symbol(uint64_t dptr, uint64_t size)
{
	struct region *r;

	if (!dptr || !size)
		return;
	pthread_rwlock_rdlock(&maps_lock);
	r = rmap_find(&dev_map, dptr);
	pthread_rwlock_unlock(&maps_lock);
	if (r)	/* already known (looked up again after a race) */
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	r->kind = R_SYMBOL;
	r->dev = dptr;
	r->size = size;
	if (add_region(r)) {
		qc_debug("variable at %#llx+%llu overlaps a known range",
			 (unsigned long long)dptr, (unsigned long long)size);
		free(r);
	}
}

void qc_mem_remove_symbol(uint64_t dptr)
{
	struct region *r;

	pthread_rwlock_wrlock(&maps_lock);
	r = rmap_find(&dev_map, dptr);
	if (r && r->kind == R_SYMBOL && r->dev == dptr)
		remove_region_locked(r);
	else
		r = NULL;
	pthread_rwlock_unlock(&maps_lock);
	free(r);
}

QC_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return qc_ret(do_copy(dst, src, count, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return qc_ret(do_copy(dst, src, count, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
				   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(do_copy(dst, src, count, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
					enum cudaMemcpyKind kind, cudaStream_t stream);
QC_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count,
					enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(do_copy(dst, src, count, kind, stream, 1, 1));
}

static cudaError_t do_memset(void *dst, int value, size_t n, cudaStream_t stream, int async,
			     int ptds)
{
	struct qcuda_args_memset a;
	struct loc d;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (n == 0)
		return cudaSuccess;
	if (!dst)
		return cudaErrorInvalidValue;
	e = resolve(dst, n, 1, &d);
	if (e != cudaSuccess)
		return e;
	if (!d.device) {
		e = stream_drain(stream, ptds);
		if (e == cudaSuccess)
			memset(d.hptr, value, n);
		return e;
	}
	memset(&a, 0, sizeof(a));
	a.dst = d.dptr;
	a.size = n;
	a.stream = qc_stream(stream, ptds);
	a.value = (uint32_t)value & 0xff;
	a.async = async ? 1 : 0;
	if (async)
		return qc_stream_known(stream, ptds) ? qc_post(QCUDA_CMD_MEMSET, &a, sizeof(a)) :
						       cudaErrorInvalidResourceHandle;
	return qc_call(QCUDA_CMD_MEMSET, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
}

QC_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return qc_ret(do_memset(devPtr, value, count, NULL, 0, 0));
}

QC_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
QC_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return qc_ret(do_memset(devPtr, value, count, NULL, 0, 1));
}

QC_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return qc_ret(do_memset(devPtr, value, count, stream, 1, 0));
}

QC_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);
QC_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return qc_ret(do_memset(devPtr, value, count, stream, 1, 1));
}

/* ------------------------------------------------------------- host memory */

static int warned_unmapped;

/*
 * Pinned guest memory (cudaHostAlloc, cudaMallocManaged): a HOST_ALLOC,
 * physically contiguous when it can be (<= 4 MiB) so that the device can
 * map it (HOST_MAP), then mapped into this process at its device address
 * when that is free. need_map: fail rather than return memory the device
 * cannot address.
 */
static cudaError_t host_alloc(void **out, size_t size, unsigned int flags, enum rkind kind,
			      int need_map)
{
	struct region *r;
	uint64_t gpa = 0, dev = 0;
	size_t len = page_round(size);
	int contiguous = len <= QC_MAX_CONTIGUOUS;
	cudaError_t e;
	void *want;
	int rc;

	r = calloc(1, sizeof(*r));
	if (!r)
		return cudaErrorMemoryAllocation;
	rc = qt_host_alloc(qc.fd, len, contiguous, &r->token, &gpa);
	if (rc == -ENOMEM && contiguous && !need_map) {
		contiguous = 0;
		rc = qt_host_alloc(qc.fd, len, 0, &r->token, &gpa);
	}
	if (rc) {
		free(r);
		return rc == -ENOMEM || rc == -EINVAL ? cudaErrorMemoryAllocation : cudaErrorUnknown;
	}
	if (gpa) {
		e = host_map_call(gpa, len, &dev);
		if (e != cudaSuccess) {
			qc_debug("HOST_MAP of %zu bytes failed: %s", len, cudaGetErrorName(e));
			dev = 0;
		}
	}
	if (!dev && need_map) {
		qt_host_free(qc.fd, r->token);
		free(r);
		return cudaErrorMemoryAllocation;
	}
	if (!dev && !warned_unmapped && kind == R_MANAGED) {
		warned_unmapped = 1;
		qc_msg("note: managed allocations above %llu KiB are guest memory the device cannot "
		       "address (copies and memsets work, kernels could not use them)",
		       QC_MAX_CONTIGUOUS >> 10);
	}
	want = dev && !(dev & (page_size - 1)) && dev < QC_USER_TOP && len <= QC_USER_TOP - dev
		       ? (void *)(uintptr_t)dev : NULL;
	r->host = (uintptr_t)qt_host_mmap(qc.fd, r->token, len, want);
	if (!r->host) {
		if (dev)
			host_unmap(dev);
		qt_host_free(qc.fd, r->token);
		free(r);
		return cudaErrorMemoryAllocation;
	}
	r->kind = kind;
	r->dev = dev;
	r->size = size;
	r->map_len = len;
	r->flags = flags;
	if (add_region(r)) {
		qc_msg("pinned memory at %#lx / device %#llx overlaps a live allocation",
		       (unsigned long)r->host, (unsigned long long)dev);
		release_region(r, 0);
		return cudaErrorUnknown;
	}
	*out = (void *)r->host;
	return cudaSuccess;
}

QC_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	cudaError_t e;

	if (!pHost)
		return qc_ret(cudaErrorInvalidValue);
	*pHost = NULL;
	e = qc_ready();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (flags & ~(unsigned)(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined))
		return qc_ret(cudaErrorInvalidValue);
	if (size == 0)
		return cudaSuccess;
	/* Portable: one session per process, so every allocation is.
	 * WriteCombined: a caching hint for the CPU; ordinary memory is
	 * correct for it. Mapped: must get a device pointer. */
	return qc_ret(host_alloc(pHost, size, flags, R_PINNED, !!(flags & cudaHostAllocMapped)));
}

QC_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

QC_API cudaError_t cudaFreeHost(void *ptr)
{
	struct region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!ptr)
		return cudaSuccess;
	pthread_rwlock_wrlock(&maps_lock);
	r = rmap_find(&host_map, (uintptr_t)ptr);
	if (r && (r->kind != R_PINNED || r->host != (uintptr_t)ptr))
		r = NULL;
	if (r)
		remove_region_locked(r);
	pthread_rwlock_unlock(&maps_lock);
	if (!r)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(release_region(r, 0));
}

QC_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
	cudaError_t e;

	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_ready();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
		return qc_ret(cudaErrorInvalidValue);
	*devPtr = NULL;
	if (size == 0)
		return cudaSuccess;
	return qc_ret(host_alloc(devPtr, size, flags, R_MANAGED, 0));
}

cudaError_t qc_mem_managed(const void *p, size_t n, qc_managed_fn fn, void *arg)
{
	uint64_t a = (uintptr_t)p;
	struct region *r;
	cudaError_t e = cudaErrorInvalidValue;

	/* The read lock is held across fn: cudaFree (write lock) waits for it,
	 * so the region and its hints stay alive meanwhile. */
	pthread_rwlock_rdlock(&maps_lock);
	r = rmap_find(&host_map, a);
	if (r && r->kind == R_MANAGED && n > 0 && n <= r->host + r->size - a)
		e = fn(&r->hints, r->host, r->size, arg);
	pthread_rwlock_unlock(&maps_lock);
	return e;
}

QC_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
	const unsigned int known = cudaHostRegisterPortable | cudaHostRegisterMapped |
				   cudaHostRegisterIoMemory | cudaHostRegisterReadOnly;
	uint64_t a = (uintptr_t)ptr, gpa = 0, dev = 0;
	struct region *r;
	cudaError_t e = qc_ready();
	int rc, busy;

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!ptr || size == 0 || (flags & ~known) || a + size < a)
		return qc_ret(cudaErrorInvalidValue);
	/* I/O memory cannot be registered through qcuda. */
	if (flags & cudaHostRegisterIoMemory)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&maps_lock);
	busy = rmap_overlaps(&host_map, a, a + size);
	pthread_rwlock_unlock(&maps_lock);
	if (busy)
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	rc = qt_host_register(qc.fd, ptr, size, &gpa);
	if (rc == -EEXIST)
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	if (rc)
		return qc_ret(rc == -ENOMEM ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
	if (gpa && host_map_call(gpa, size, &dev) != cudaSuccess)
		dev = 0;
	r = calloc(1, sizeof(*r));
	if (!r) {
		if (dev)
			host_unmap(dev);
		qt_host_unregister(qc.fd, ptr);
		return qc_ret(cudaErrorMemoryAllocation);
	}
	r->kind = R_REGISTERED;
	r->host = (uintptr_t)ptr;
	r->dev = dev;
	r->size = size;
	r->flags = flags;
	if (dev && dev != a) {
		/* The user's pages cannot move to the device address: keep the
		 * device range free of anything else instead. */
		r->res_start = dev & ~(uint64_t)(page_size - 1);
		r->map_len = page_round(size + (dev - r->res_start));
		r->reserved = reserve_range(r->res_start, r->map_len);
	}
	if (add_region(r)) {
		/* Lost a race with another thread registering the same range. */
		release_region(r, 0);
		return qc_ret(cudaErrorHostMemoryAlreadyRegistered);
	}
	return cudaSuccess;
}

QC_API cudaError_t cudaHostUnregister(void *ptr)
{
	struct region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!ptr)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_wrlock(&maps_lock);
	r = rmap_find(&host_map, (uintptr_t)ptr);
	if (r && r->kind != R_REGISTERED)
		r = NULL;
	if (r && r->host != (uintptr_t)ptr) {
		pthread_rwlock_unlock(&maps_lock);
		return qc_ret(cudaErrorInvalidValue);
	}
	if (r)
		remove_region_locked(r);
	pthread_rwlock_unlock(&maps_lock);
	if (!r)
		return qc_ret(cudaErrorHostMemoryNotRegistered);
	return qc_ret(release_region(r, 0));
}

QC_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
	uint64_t a = (uintptr_t)pHost;
	struct region *r;
	cudaError_t e = qc_ready();
	static int warned;

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!pDevice || flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&maps_lock);
	r = rmap_find(&host_map, a);
	if (r && r->kind != R_MANAGED)
		e = r->dev ? cudaSuccess : cudaErrorNotSupported;
	else
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		*pDevice = (void *)(uintptr_t)(r->dev + (a - r->host));
	pthread_rwlock_unlock(&maps_lock);
	if (e == cudaErrorNotSupported && !warned) {
		warned = 1;
		qc_msg("cudaHostGetDevicePointer: this memory is not physically contiguous in the "
		       "guest (pinned allocations above %llu KiB, most cudaHostRegister ranges), "
		       "so the device cannot address it", QC_MAX_CONTIGUOUS >> 10);
	}
	return qc_ret(e);
}

QC_API cudaError_t cudaHostGetFlags(unsigned int *pFlags, void *pHost)
{
	struct region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!pFlags)
		return qc_ret(cudaErrorInvalidValue);
	pthread_rwlock_rdlock(&maps_lock);
	r = rmap_find(&host_map, (uintptr_t)pHost);
	if (r && r->kind != R_MANAGED)
		*pFlags = r->flags | cudaHostAllocMapped;
	else
		e = cudaErrorInvalidValue;
	pthread_rwlock_unlock(&maps_lock);
	return qc_ret(e);
}

QC_API cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr)
{
	uint64_t a = (uintptr_t)ptr;
	struct region *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!attributes)
		return qc_ret(cudaErrorInvalidValue);
	memset(attributes, 0, sizeof(*attributes));
	attributes->type = cudaMemoryTypeUnregistered;
	attributes->device = -2;
	pthread_rwlock_rdlock(&maps_lock);
	r = rmap_find(&dev_map, a);
	if (r) {
		uint64_t off = a - r->dev;

		attributes->devicePointer = (void *)(uintptr_t)a;
		attributes->hostPointer = r->host ? (void *)(r->host + off) : NULL;
	} else if ((r = rmap_find(&host_map, a))) {
		uint64_t off = a - r->host;

		attributes->hostPointer = (void *)(uintptr_t)a;
		attributes->devicePointer = r->dev ? (void *)(uintptr_t)(r->dev + off) : NULL;
	}
	if (r) {
		attributes->device = qc_current_device();
		attributes->type = r->kind == R_DEVICE || r->kind == R_SYMBOL ? cudaMemoryTypeDevice :
				   r->kind == R_MANAGED ? cudaMemoryTypeManaged : cudaMemoryTypeHost;
		if (r->kind == R_MANAGED)
			attributes->devicePointer = attributes->hostPointer;
	}
	pthread_rwlock_unlock(&maps_lock);
	return cudaSuccess;
}
