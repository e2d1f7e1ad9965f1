/* SPDX-License-Identifier: MIT */
/*
 * Batches of copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync) and 3D peer
 * copies (cuMemcpy3DPeer): the runtime layer's copies (../lib/copy.c and
 * copy3d.c), under the current context. The batches come as CUDA 12.8's ABI
 * (with failIdx) and CUDA 13's (_v2, without), each with a _ptsz twin.
 */
#include <string.h>

#include "cu.h"

/* This file defines CUDA 12.8's ABIs too, under names cuda.h #defines to today's. */
#undef cuMemcpyBatchAsync
#undef cuMemcpy3DBatchAsync

/* The driver's operands are the runtime's, field for field (CUdeviceptr and CUarray as pointers). */
_Static_assert(sizeof(CUmemcpyAttributes) == sizeof(struct cudaMemcpyAttributes), "copy attributes");
_Static_assert(sizeof(CUDA_MEMCPY3D_BATCH_OP) == sizeof(struct cudaMemcpy3DBatchOp), "3D batch op");
_Static_assert(sizeof(CUdeviceptr) == sizeof(void *), "device pointers");

/* ---------------------------------------------------------------- batches */

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
		      size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream, int ptds)
{
	size_t fail = SIZE_MAX;
	CUresult r = cu_enter();

	if (r == CUDA_SUCCESS)
		r = cu_result(qc_memcpy_batch((void *const *)dsts, (const void *const *)srcs, sizes, count,
					      (const struct cudaMemcpyAttributes *)(const void *)attrs, attrsIdxs,
					      numAttrs, (cudaStream_t)hStream, ptds, &fail));
	if (failIdx)
		*failIdx = fail;
	return r;
}

CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			       CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream, 0);
}

CUresult cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
				    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream, 1);
}

CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
			    CUstream hStream);
CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
			    CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
			    CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, 0);
}

CUresult cuMemcpyBatchAsync_ptsz(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
				 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs, size_t *failIdx,
				 CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, 1);
}

static CUresult batch3d(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
			CUstream hStream, int ptds)
{
	size_t fail = SIZE_MAX;
	CUresult r = cu_enter();

	if (r == CUDA_SUCCESS)
		r = cu_result(qc_memcpy3d_batch(numOps, (const struct cudaMemcpy3DBatchOp *)(const void *)opList, flags,
						(cudaStream_t)hStream, ptds, &fail));
	if (failIdx)
		*failIdx = fail;
	return r;
}

CUresult cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
				 CUstream hStream)
{
	return batch3d(numOps, opList, NULL, flags, hStream, 0);
}

CUresult cuMemcpy3DBatchAsync_v2_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, unsigned long long flags,
				      CUstream hStream)
{
	return batch3d(numOps, opList, NULL, flags, hStream, 1);
}

CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
			      CUstream hStream);
CUresult cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
			      CUstream hStream)
{
	return batch3d(numOps, opList, failIdx, flags, hStream, 0);
}

CUresult cuMemcpy3DBatchAsync_ptsz(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
				   unsigned long long flags, CUstream hStream)
{
	return batch3d(numOps, opList, failIdx, flags, hStream, 1);
}

/* ---------------------------------------------------------------- 3D peer copies */

/* Both contexts checked (NULL is none here), then cuMemcpy3D's copy:
 * device memory is one address space. */
static CUresult peer3d(const CUDA_MEMCPY3D_PEER *p, CUstream stream, int async, int ptds)
{
	CUDA_MEMCPY3D c;
	CUdevice dev;
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = p->srcContext && p->dstContext ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice_v2(&dev, p->srcContext);
	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice_v2(&dev, p->dstContext);
	if (r != CUDA_SUCCESS)
		return r;
	memset(&c, 0, sizeof(c));
	c.srcXInBytes = p->srcXInBytes, c.srcY = p->srcY, c.srcZ = p->srcZ, c.srcLOD = p->srcLOD;
	c.srcMemoryType = p->srcMemoryType, c.srcHost = p->srcHost, c.srcDevice = p->srcDevice;
	c.srcArray = p->srcArray, c.srcPitch = p->srcPitch, c.srcHeight = p->srcHeight;
	c.dstXInBytes = p->dstXInBytes, c.dstY = p->dstY, c.dstZ = p->dstZ, c.dstLOD = p->dstLOD;
	c.dstMemoryType = p->dstMemoryType, c.dstHost = p->dstHost, c.dstDevice = p->dstDevice;
	c.dstArray = p->dstArray, c.dstPitch = p->dstPitch, c.dstHeight = p->dstHeight;
	c.WidthInBytes = p->WidthInBytes, c.Height = p->Height, c.Depth = p->Depth;
	if (async)
		return ptds ? cuMemcpy3DAsync_v2_ptsz(&c, stream) : cuMemcpy3DAsync_v2(&c, stream);
	return ptds ? cuMemcpy3D_v2_ptds(&c) : cuMemcpy3D_v2(&c);
}

CU_COPY_ENTRIES(CUDA_MEMCPY3D_PEER, peer3d, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds, cuMemcpy3DPeerAsync,
		cuMemcpy3DPeerAsync_ptsz)
