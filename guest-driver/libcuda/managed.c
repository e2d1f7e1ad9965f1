/* SPDX-License-Identifier: MIT */
/*
 * Managed memory hints: prefetches, advice, range attributes and stream
 * attachment, as the runtime layer keeps them (CUmemLocation, CUmem_advise
 * and CUmem_range_attribute are the runtime's types bit for bit).
 */
#include "cu.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuMemPrefetchAsync
#undef cuMemAdvise

cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count, struct cudaMemLocation location,
				      unsigned int flags, cudaStream_t stream);
cudaError_t cudaMemPrefetchBatchAsync_ptsz(void **dptrs, size_t *sizes, size_t count,
					   struct cudaMemLocation *prefetchLocs, size_t *prefetchLocIdxs,
					   size_t numPrefetchLocs, unsigned long long flags,
					   cudaStream_t stream);
cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr, size_t length,
					  unsigned int flags);

_Static_assert(sizeof(CUmemLocation) == sizeof(struct cudaMemLocation), "CUmemLocation is cudaMemLocation");

static struct cudaMemLocation loc(CUmemLocation l)
{
	return (struct cudaMemLocation){ .type = (enum cudaMemLocationType)l.type, .id = l.id };
}

/* The CUDA 8 ABIs name a device, or CU_DEVICE_CPU for the host. */
static struct cudaMemLocation device_loc(CUdevice d)
{
	if (d == CU_DEVICE_CPU)
		return (struct cudaMemLocation){ .type = cudaMemLocationTypeHost, .id = 0 };
	return (struct cudaMemLocation){ .type = cudaMemLocationTypeDevice, .id = d };
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
			       unsigned int flags, CUstream hStream)
{
	CU_RUN(cudaMemPrefetchAsync(PTR(devPtr), count, loc(location), flags, (cudaStream_t)hStream));
}

CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
				    unsigned int flags, CUstream hStream);
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr devPtr, size_t count, CUmemLocation location,
				    unsigned int flags, CUstream hStream)
{
	CU_RUN(cudaMemPrefetchAsync_ptsz(PTR(devPtr), count, loc(location), flags, (cudaStream_t)hStream));
}

CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
CUresult cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
	CU_RUN(cudaMemPrefetchAsync(PTR(devPtr), count, device_loc(dstDevice), 0, (cudaStream_t)hStream));
}

CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream);
CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
	CU_RUN(cudaMemPrefetchAsync_ptsz(PTR(devPtr), count, device_loc(dstDevice), 0, (cudaStream_t)hStream));
}

CUresult cuMemPrefetchBatchAsync(CUdeviceptr *dptrs, size_t *sizes, size_t count, CUmemLocation *prefetchLocs,
				 size_t *prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags,
				 CUstream hStream)
{
	CU_RUN(cudaMemPrefetchBatchAsync((void **)dptrs, sizes, count, (struct cudaMemLocation *)prefetchLocs,
					 prefetchLocIdxs, numPrefetchLocs, flags, (cudaStream_t)hStream));
}

CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
				      CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
				      size_t numPrefetchLocs, unsigned long long flags, CUstream hStream);
CUresult cuMemPrefetchBatchAsync_ptsz(CUdeviceptr *dptrs, size_t *sizes, size_t count,
				      CUmemLocation *prefetchLocs, size_t *prefetchLocIdxs,
				      size_t numPrefetchLocs, unsigned long long flags, CUstream hStream)
{
	CU_RUN(cudaMemPrefetchBatchAsync_ptsz((void **)dptrs, sizes, count, (struct cudaMemLocation *)prefetchLocs,
					      prefetchLocIdxs, numPrefetchLocs, flags, (cudaStream_t)hStream));
}

CUresult cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
	CU_RUN(cudaMemAdvise(PTR(devPtr), count, (enum cudaMemoryAdvise)advice, loc(location)));
}

CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device);
CUresult cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
	CU_RUN(cudaMemAdvise(PTR(devPtr), count, (enum cudaMemoryAdvise)advice, device_loc(device)));
}

CUresult cuMemRangeGetAttribute(void *data, size_t dataSize, CUmem_range_attribute attribute,
				CUdeviceptr devPtr, size_t count)
{
	CU_RUN(cudaMemRangeGetAttribute(data, dataSize, (enum cudaMemRangeAttribute)attribute, PTR(devPtr), count));
}

CUresult cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
				 size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
	CU_RUN(cudaMemRangeGetAttributes(data, dataSizes, (enum cudaMemRangeAttribute *)attributes,
					 numAttributes, PTR(devPtr), count));
}

CUresult cuStreamAttachMemAsync(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
	CU_RUN(cudaStreamAttachMemAsync((cudaStream_t)hStream, PTR(dptr), length, flags));
}

CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags);
CUresult cuStreamAttachMemAsync_ptsz(CUstream hStream, CUdeviceptr dptr, size_t length, unsigned int flags)
{
	CU_RUN(cudaStreamAttachMemAsync_ptsz((cudaStream_t)hStream, PTR(dptr), length, flags));
}
