/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered allocation and memory pools: the runtime layer's (../lib/
 * pool.c), so NVIDIA's static runtime, which calls these, gets the very
 * pools and behaviour qcuda's libcudart.so.13 gives. A CUmemoryPool is a
 * cudaMemPool_t (one struct type), and the pool attributes, locations,
 * access descriptors and pool properties of cuda.h are the runtime's value
 * for value and field for field. The _ptsz entry points name the
 * per-thread default stream when given stream 0.
 */
#include "cu.h"
#include "../lib/pool.h"

/* Pools are not a context's: these need cuInit, not a current context. */
#define CU_POOL_RUN(call)                                                              \
	do {                                                                           \
		return !cu_initialized ? CUDA_ERROR_NOT_INITIALIZED : cu_result(call); \
	} while (0)

/* ------------------------------------------------------ allocation, free */

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, int from_pool, CUstream hStream,
			    int ptds)
{
	cudaStream_t s = (cudaStream_t)hStream;
	void *p = NULL;
	CUresult r;

	CU_ENTER_OUT(dptr, 0, r);
	if (from_pool)
		r = cu_result(ptds ? cudaMallocFromPoolAsync_ptsz(&p, bytesize, pool, s)
				   : cudaMallocFromPoolAsync(&p, bytesize, pool, s));
	else
		r = cu_result(ptds ? cudaMallocAsync_ptsz(&p, bytesize, s) : cudaMallocAsync(&p, bytesize, s));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, 0, hStream, 0);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, 0, hStream, 1);
}

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, 1, hStream, 0);
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	return alloc_async(dptr, bytesize, pool, 1, hStream, 1);
}

/* -------------------------------------------------------- device's pools */

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : cu_result(cudaDeviceGetDefaultMemPool(pool_out, dev));
}

/* A device that does not exist: CUDA_ERROR_INVALID_VALUE, as CUDA 13's
 * driver answers (NVIDIA's runtime passes it on; H100). */
CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	if (r == CUDA_ERROR_INVALID_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return r != CUDA_SUCCESS ? r : cu_result(cudaDeviceGetMemPool(pool, dev));
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : cu_result(cudaDeviceSetMemPool(dev, pool));
}

CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
	CU_POOL_RUN(cudaMemGetDefaultMemPool(pool_out, (struct cudaMemLocation *)location,
					     (enum cudaMemAllocationType)type));
}

CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
	CU_POOL_RUN(cudaMemGetMemPool(pool, (struct cudaMemLocation *)location, (enum cudaMemAllocationType)type));
}

CUresult cuMemSetMemPool(CUmemLocation *location, CUmemAllocationType type, CUmemoryPool pool)
{
	CU_POOL_RUN(cudaMemSetMemPool((struct cudaMemLocation *)location, (enum cudaMemAllocationType)type, pool));
}

/* ---------------------------------------------------------------- pools */

CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CU_POOL_RUN(cudaMemPoolCreate(pool, (const struct cudaMemPoolProps *)poolProps));
}

CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	CU_POOL_RUN(cudaMemPoolDestroy(pool));
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	CU_POOL_RUN(cudaMemPoolTrimTo(pool, minBytesToKeep));
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	CU_POOL_RUN(cudaMemPoolSetAttribute(pool, (enum cudaMemPoolAttr)attr, value));
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	CU_POOL_RUN(cudaMemPoolGetAttribute(pool, (enum cudaMemPoolAttr)attr, value));
}

CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	CU_POOL_RUN(cudaMemPoolSetAccess(pool, (const struct cudaMemAccessDesc *)map, count));
}

CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	CU_POOL_RUN(
		cudaMemPoolGetAccess((enum cudaMemAccessFlags *)flags, memPool, (struct cudaMemLocation *)location));
}

/* ------------------------------------------- sharing between processes */

/* flags is a 64-bit value here, 32 in the runtime: anything set is refused. */
CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool, CUmemAllocationHandleType handleType,
					  unsigned long long flags)
{
	CU_POOL_RUN(flags ? cudaErrorInvalidValue
			  : cudaMemPoolExportToShareableHandle(handle_out, pool,
							       (enum cudaMemAllocationHandleType)handleType, 0));
}

CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle, CUmemAllocationHandleType handleType,
					    unsigned long long flags)
{
	CU_POOL_RUN(flags ? cudaErrorInvalidValue
			  : cudaMemPoolImportFromShareableHandle(pool_out, handle,
								 (enum cudaMemAllocationHandleType)handleType, 0));
}

/* These reach memory: a context is needed, as for an allocation. */
CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
	CU_RUN(cudaMemPoolExportPointer((struct cudaMemPoolPtrExportData *)shareData_out, (void *)(uintptr_t)ptr));
}

CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
	void *p = NULL;
	CUresult r;

	if (!ptr_out)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(cudaMemPoolImportPointer(&p, pool, (struct cudaMemPoolPtrExportData *)shareData));
	if (r == CUDA_SUCCESS)
		*ptr_out = (CUdeviceptr)(uintptr_t)p;
	return r;
}

/* The layouts this file relies on. */
_Static_assert(sizeof(CUmemPoolProps) == sizeof(struct cudaMemPoolProps), "pool properties");
_Static_assert(sizeof(CUmemAccessDesc) == sizeof(struct cudaMemAccessDesc), "access descriptors");
_Static_assert(sizeof(CUmemLocation) == sizeof(struct cudaMemLocation), "locations");
_Static_assert((int)CU_MEMPOOL_ATTR_USED_MEM_HIGH == (int)cudaMemPoolAttrUsedMemHigh, "pool attributes");
_Static_assert((int)CU_MEMPOOL_ATTR_RELEASE_THRESHOLD == (int)cudaMemPoolAttrReleaseThreshold, "pool attributes");
_Static_assert((int)CU_MEM_ACCESS_FLAGS_PROT_READWRITE == (int)cudaMemAccessFlagsProtReadWrite, "access flags");
_Static_assert(sizeof(CUmemPoolPtrExportData) == sizeof(struct cudaMemPoolPtrExportData), "pointer export data");
_Static_assert((int)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR == (int)cudaMemHandleTypePosixFileDescriptor,
	       "handle types");
