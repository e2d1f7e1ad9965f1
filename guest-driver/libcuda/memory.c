/* SPDX-License-Identifier: MIT */
/*
 * Memory: allocations (device, pinned, registered, managed), copies and
 * memsets, synchronous and on streams, and pointer attributes. Each is the
 * runtime layer's own operation (the same range maps, pointer checks,
 * chunked transfers and posted work), under the thread's current context.
 */
#include <stdlib.h>
#include <string.h>

#include "cu.h"
#include "../lib/graph.h"

/* The runtime layer's per-thread-default-stream variants (cuda_runtime_api.h
 * declares them only for programs built that way). */
cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);

/* ------------------------------------------------------------ allocation */

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	void *p = NULL;
	CUresult r;

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = 0; /* what a failed allocation leaves, as natively */
	if (bytesize == 0) /* natively refused, unlike cudaMalloc(0) */
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(cudaMalloc(&p, bytesize));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct qc_region *reg;
	CUresult r;

	CU_ENTER(r);
	pthread_rwlock_rdlock(&qc_maps_lock);
	reg = qc_rmap_find(&qc_dev_map, dptr);
	if (reg) {
		if (pbase)
			*pbase = reg->dev;
		if (psize)
			*psize = reg->size;
	}
	pthread_rwlock_unlock(&qc_maps_lock);
	return reg ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	void *d = NULL;
	CUresult r;

	if (!pdptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(cudaHostGetDevicePointer(&d, p, Flags));
	if (r == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)d;
	return r;
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	void *p = NULL;
	CUresult r;

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = 0;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(cudaMallocManaged(&p, bytesize, flags));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}

/* ---------------------------------------------------------------- copies */

/* One copy: kind says which sides the program promised (the runtime layer
 * checks them as cudaMemcpy does); ptds: the per-thread default stream. */
static CUresult copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, CUstream stream, int async,
		     int ptds)
{
	CUresult r;

	CU_ENTER(r);
	if (n == 0)
		return CUDA_SUCCESS;
	return cu_result(qc_memcpy(dst, src, n, kind, (cudaStream_t)stream, async, ptds));
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return copy(PTR(dst), PTR(src), ByteCount, cudaMemcpyDefault, NULL, 0, 0);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return copy(PTR(dst), PTR(src), ByteCount, cudaMemcpyDefault, NULL, 0, 1);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return copy(PTR(dst), PTR(src), ByteCount, cudaMemcpyDefault, hStream, 1, 0);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return copy(PTR(dst), PTR(src), ByteCount, cudaMemcpyDefault, hStream, 1, 1);
}

/* Peer copies: both contexts checked (NULL is none here), then a device to
 * device copy, device memory being one address space. */
static CUresult peer_copy(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
			  CUstream stream, int async, int ptds)
{
	CUdevice dev;
	CUresult r = dst_ctx && src_ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;

	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice_v2(&dev, dst_ctx);
	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice_v2(&dev, src_ctx);
	return r != CUDA_SUCCESS ? r : copy(PTR(dst), PTR(src), n, cudaMemcpyDeviceToDevice, stream, async, ptds);
}

CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
		      size_t ByteCount)
{
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0, 0);
}

CUresult cuMemcpyPeer_ptds(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
			   size_t ByteCount)
{
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0, 1);
}

CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
			   size_t ByteCount, CUstream hStream)
{
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1, 0);
}

CUresult cuMemcpyPeerAsync_ptsz(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
				CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
	return peer_copy(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1, 1);
}

/* The directed copies: name, arguments, the runtime's kind. Each comes as
 * the synchronous _v2 / _v2_ptds and the Async _v2 / _v2_ptsz ABIs. */
#define DIRECTED(name, dst_t, src_t, dst_e, src_e, kind)                          \
	CUresult name##_v2(dst_t dst, src_t src, size_t n)                        \
	{                                                                         \
		return copy(dst_e, src_e, n, kind, NULL, 0, 0);                   \
	}                                                                         \
	CUresult name##_v2_ptds(dst_t dst, src_t src, size_t n);                  \
	CUresult name##_v2_ptds(dst_t dst, src_t src, size_t n)                   \
	{                                                                         \
		return copy(dst_e, src_e, n, kind, NULL, 0, 1);                   \
	}                                                                         \
	CUresult name##Async_v2(dst_t dst, src_t src, size_t n, CUstream s)       \
	{                                                                         \
		return copy(dst_e, src_e, n, kind, s, 1, 0);                      \
	}                                                                         \
	CUresult name##Async_v2_ptsz(dst_t dst, src_t src, size_t n, CUstream s); \
	CUresult name##Async_v2_ptsz(dst_t dst, src_t src, size_t n, CUstream s)  \
	{                                                                         \
		return copy(dst_e, src_e, n, kind, s, 1, 1);                      \
	}

DIRECTED(cuMemcpyHtoD, CUdeviceptr, const void *, PTR(dst), src, cudaMemcpyHostToDevice)
DIRECTED(cuMemcpyDtoH, void *, CUdeviceptr, dst, PTR(src), cudaMemcpyDeviceToHost)
DIRECTED(cuMemcpyDtoD, CUdeviceptr, CUdeviceptr, PTR(dst), PTR(src), cudaMemcpyDeviceToDevice)

/* 2D copies (the runtime's cudaMemcpy between host buffers and cudaMemcpy2D*
 * come here): copy3d.c's, one request whatever the row count. */
static CUresult copy_2d(const CUDA_MEMCPY2D *c, CUstream stream, int async, int ptds)
{
	return cu_memcpy2d(c, stream, async, ptds);
}

CU_COPY_ENTRIES(CUDA_MEMCPY2D, copy_2d, cuMemcpy2D_v2, cuMemcpy2D_v2_ptds, cuMemcpy2DAsync_v2, cuMemcpy2DAsync_v2_ptsz)

/* Unaligned: what the pitches may be does not matter here. */
CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(pCopy, NULL, 0, 0);
}

CUresult cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(pCopy, NULL, 0, 1);
}

/* --------------------------------------------------------------- memsets */

static CUresult memset8(CUdeviceptr dst, unsigned char v, size_t n, CUstream s, int async, int ptds)
{
	CUresult r;

	CU_ENTER(r);
	if (!async)
		return cu_result(ptds ? cudaMemset_ptds(PTR(dst), v, n) : cudaMemset(PTR(dst), v, n));
	return cu_result(ptds ? cudaMemsetAsync_ptsz(PTR(dst), v, n, (cudaStream_t)s)
			      : cudaMemsetAsync(PTR(dst), v, n, (cudaStream_t)s));
}

/* A 16- or 32-bit pattern whose bytes are all equal (zero, all ones: what
 * programs clear memory with) is a byte memset. Another pattern is written
 * as copies of a host buffer holding it, in stream order (the wire carries
 * byte memsets only; a copy from guest memory is done with the buffer when
 * its call returns). */
#define PATTERN_CHUNK (4u << 20)

static CUresult memset_wide(CUdeviceptr dst, uint32_t v, unsigned int width, size_t n, CUstream s, int async, int ptds)
{
	unsigned char b = v & 0xff, *buf;
	uint32_t splat = width == 2 ? b * 0x0101u : b * 0x01010101u;
	size_t total, chunk;
	CUresult r;

	if (dst % width || n > SIZE_MAX / width)
		return CUDA_ERROR_INVALID_VALUE;
	if (v == splat)
		return memset8(dst, b, n * width, s, async, ptds);
	r = cu_enter();
	if (r != CUDA_SUCCESS || n == 0)
		return r;
	if (async && qc_capture_active((cudaStream_t)s, ptds)) {
		/* In a capture, a memset node (the buffer below would be gone
		 * by the time the graph runs). */
		struct qc_node_op op = { .type = cudaGraphNodeTypeEmpty };
		cudaError_t e = qc_node_op_memset(&op, PTR(dst), n * width, v, width, n, 1);

		if (e == cudaSuccess && qc_capture_op((cudaStream_t)s, ptds, &op, &e))
			return cu_result(e);
		qc_node_op_free(&op);
		if (e != cudaSuccess)
			return cu_result(e);
	}
	total = n * width;
	chunk = total < PATTERN_CHUNK ? total : PATTERN_CHUNK;
	buf = malloc(chunk);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < chunk; i += width)
		memcpy(buf + i, &v, width); /* little-endian: the pattern's bytes in order */
	for (size_t off = 0; r == CUDA_SUCCESS && off < total; off += chunk) {
		size_t len = total - off < chunk ? total - off : chunk;

		r = copy(PTR(dst + off), buf, len, cudaMemcpyHostToDevice, s, async, ptds);
	}
	free(buf);
	return r;
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return memset8(dstDevice, uc, N, NULL, 0, 0);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	return memset8(dstDevice, uc, N, NULL, 0, 1);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return memset8(dstDevice, uc, N, hStream, 1, 0);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	return memset8(dstDevice, uc, N, hStream, 1, 1);
}

#define WIDE(name, type, width)                                                 \
	CUresult name##_v2(CUdeviceptr d, type v, size_t n)                     \
	{                                                                       \
		return memset_wide(d, v, width, n, NULL, 0, 0);                 \
	}                                                                       \
	CUresult name##_v2_ptds(CUdeviceptr d, type v, size_t n);               \
	CUresult name##_v2_ptds(CUdeviceptr d, type v, size_t n)                \
	{                                                                       \
		return memset_wide(d, v, width, n, NULL, 0, 1);                 \
	}                                                                       \
	CUresult name##Async(CUdeviceptr d, type v, size_t n, CUstream s)       \
	{                                                                       \
		return memset_wide(d, v, width, n, s, 1, 0);                    \
	}                                                                       \
	CUresult name##Async_ptsz(CUdeviceptr d, type v, size_t n, CUstream s); \
	CUresult name##Async_ptsz(CUdeviceptr d, type v, size_t n, CUstream s)  \
	{                                                                       \
		return memset_wide(d, v, width, n, s, 1, 1);                    \
	}

WIDE(cuMemsetD16, unsigned short, 2)
WIDE(cuMemsetD32, unsigned int, 4)

/* ----------------------------------------------------- pointer attributes */

static CUresult pointer_attribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr,
				  const struct cudaPointerAttributes *a, uint64_t base, uint64_t size)
{
	int known = a->type != cudaMemoryTypeUnregistered;

	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUcontext *)data = cu_device_ctx(a->device); /* the allocation's, whichever is current */
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(unsigned int *)data = a->type == cudaMemoryTypeHost ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (!known || !a->devicePointer)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)a->devicePointer;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!known || !a->hostPointer)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = a->hostPointer;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned int *)data = a->type == cudaMemoryTypeManaged;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(int *)data = a->device;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = base;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(size_t *)data = size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(unsigned int *)data = known;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		if (!known)
			return CUDA_ERROR_INVALID_VALUE;
		*(unsigned long long *)data = base; /* unique while the allocation lives */
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
		*(unsigned int *)data = 1; /* qcuda's copies are always synchronous memops */
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(unsigned int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		*(void **)data = NULL;
		return CUDA_SUCCESS;
	default:
		(void)ptr;
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* The runtime's view of ptr and the allocation holding it. */
static CUresult lookup(CUdeviceptr ptr, struct cudaPointerAttributes *a, uint64_t *base, uint64_t *size)
{
	struct qc_region *reg;
	CUresult r;

	CU_ENTER(r);
	r = cu_result(cudaPointerGetAttributes(a, PTR(ptr)));
	if (r != CUDA_SUCCESS)
		return r;
	*base = *size = 0;
	pthread_rwlock_rdlock(&qc_maps_lock);
	reg = qc_rmap_find(&qc_dev_map, ptr);
	if (reg) {
		*base = reg->dev;
		*size = reg->size;
	} else if ((reg = qc_rmap_find(&qc_host_map, ptr))) {
		*base = reg->host;
		*size = reg->size;
	}
	pthread_rwlock_unlock(&qc_maps_lock);
	return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	struct cudaPointerAttributes a;
	uint64_t base, size;
	CUresult r;

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	r = lookup(ptr, &a, &base, &size);
	return r != CUDA_SUCCESS ? r : pointer_attribute(data, attribute, ptr, &a, base, size);
}

/* Unlike cuPointerGetAttribute, memory CUDA does not know is not an error
 * here: its attributes read as zero. */
CUresult cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
				CUdeviceptr ptr)
{
	struct cudaPointerAttributes a;
	uint64_t base, size;
	CUresult r;

	if (!attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	r = lookup(ptr, &a, &base, &size);
	for (unsigned int i = 0; r == CUDA_SUCCESS && i < numAttributes; i++) {
		if (!data[i])
			continue;
		if (pointer_attribute(data[i], attributes[i], ptr, &a, base, size) != CUDA_SUCCESS)
			memset(data[i], 0,
			       attributes[i] == CU_POINTER_ATTRIBUTE_CONTEXT ||
					       attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
					       attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER ||
					       attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
					       attributes[i] == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
					       attributes[i] == CU_POINTER_ATTRIBUTE_BUFFER_ID
				       ? 8
				       : 4);
	}
	return r;
}
