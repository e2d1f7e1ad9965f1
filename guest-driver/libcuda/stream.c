/* SPDX-License-Identifier: MIT */
/*
 * Streams and events: the runtime layer's (CU_STREAM_* and CU_EVENT_*
 * flags are the runtime's bit for bit, and CU_STREAM_LEGACY /
 * CU_STREAM_PER_THREAD are cudaStreamLegacy / cudaStreamPerThread), under
 * the thread's current context. The _ptsz entry points name the
 * per-thread default stream when given stream 0.
 */
#include "cu.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuEventElapsedTime

cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t hStream, int *priority);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);
cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr, cudaStreamAttrValue *value_out);
cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t hStream, cudaStreamAttrID attr, const cudaStreamAttrValue *value);
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags);
cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId);
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device);
cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src);
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
				       unsigned int flags);

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	CU_RUN(cudaStreamCreateWithFlags((cudaStream_t *)phStream, Flags));
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	CU_RUN(cudaStreamCreateWithPriority((cudaStream_t *)phStream, flags, priority));
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
	CU_RUN(cudaStreamDestroy((cudaStream_t)hStream));
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	CU_RUN(cudaStreamSynchronize((cudaStream_t)hStream));
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream);
CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	CU_RUN(cudaStreamSynchronize_ptsz((cudaStream_t)hStream));
}

CUresult cuStreamQuery(CUstream hStream)
{
	CU_RUN(cudaStreamQuery((cudaStream_t)hStream));
}

CUresult cuStreamQuery_ptsz(CUstream hStream);
CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	CU_RUN(cudaStreamQuery_ptsz((cudaStream_t)hStream));
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	CU_RUN(cudaStreamWaitEvent((cudaStream_t)hStream, (cudaEvent_t)hEvent, Flags));
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags);
CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	CU_RUN(cudaStreamWaitEvent_ptsz((cudaStream_t)hStream, (cudaEvent_t)hEvent, Flags));
}

CUresult cuStreamGetPriority(CUstream hStream, int *priority)
{
	CU_RUN(cudaStreamGetPriority((cudaStream_t)hStream, priority));
}

CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority);
CUresult cuStreamGetPriority_ptsz(CUstream hStream, int *priority)
{
	CU_RUN(cudaStreamGetPriority_ptsz((cudaStream_t)hStream, priority));
}

/* Flags, ids and devices: kept by the runtime layer since the stream's
 * creation (CUdevice is the runtime's device ordinal). */
CUresult cuStreamGetFlags(CUstream hStream, unsigned int *flags)
{
	CU_RUN(cudaStreamGetFlags((cudaStream_t)hStream, flags));
}

CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags);
CUresult cuStreamGetFlags_ptsz(CUstream hStream, unsigned int *flags)
{
	CU_RUN(cudaStreamGetFlags_ptsz((cudaStream_t)hStream, flags));
}

CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	CU_RUN(cudaStreamGetId((cudaStream_t)hStream, streamId));
}

CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId);
CUresult cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId)
{
	CU_RUN(cudaStreamGetId_ptsz((cudaStream_t)hStream, streamId));
}

CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
	CU_RUN(cudaStreamGetDevice((cudaStream_t)hStream, device));
}

CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device);
CUresult cuStreamGetDevice_ptsz(CUstream hStream, CUdevice *device)
{
	CU_RUN(cudaStreamGetDevice_ptsz((cudaStream_t)hStream, device));
}

CUresult cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	CU_RUN(cudaLaunchHostFunc((cudaStream_t)hStream, fn, userData));
}

CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData);
CUresult cuLaunchHostFunc_ptsz(CUstream hStream, CUhostFn fn, void *userData)
{
	CU_RUN(cudaLaunchHostFunc_ptsz((cudaStream_t)hStream, fn, userData));
}

/* CUstreamAttrValue is cudaStreamAttrValue, and the ids are the same. */
_Static_assert(sizeof(CUstreamAttrValue) == sizeof(cudaStreamAttrValue), "one union");

CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
	CU_RUN(cudaStreamGetAttribute((cudaStream_t)hStream, (cudaStreamAttrID)attr, (cudaStreamAttrValue *)value_out));
}

CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out);
CUresult cuStreamGetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
	CU_RUN(cudaStreamGetAttribute_ptsz((cudaStream_t)hStream, (cudaStreamAttrID)attr,
					   (cudaStreamAttrValue *)value_out));
}

CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
	CU_RUN(cudaStreamSetAttribute((cudaStream_t)hStream, (cudaStreamAttrID)attr, (const cudaStreamAttrValue *)value));
}

CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value);
CUresult cuStreamSetAttribute_ptsz(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
	CU_RUN(cudaStreamSetAttribute_ptsz((cudaStream_t)hStream, (cudaStreamAttrID)attr,
					   (const cudaStreamAttrValue *)value));
}

CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
	CU_RUN(cudaStreamCopyAttributes((cudaStream_t)dst, (cudaStream_t)src));
}

CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src);
CUresult cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src)
{
	CU_RUN(cudaStreamCopyAttributes_ptsz((cudaStream_t)dst, (cudaStream_t)src));
}

/* A CUstreamCallback is called with CUDA_SUCCESS where the runtime's gets
 * cudaSuccess: the same function type, bit for bit. */
CUresult cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData, unsigned int flags)
{
	CU_RUN(cudaStreamAddCallback((cudaStream_t)hStream, (cudaStreamCallback_t)(void *)callback, userData, flags));
}

CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
				  unsigned int flags);
CUresult cuStreamAddCallback_ptsz(CUstream hStream, CUstreamCallback callback, void *userData,
				  unsigned int flags)
{
	CU_RUN(cudaStreamAddCallback_ptsz((cudaStream_t)hStream, (cudaStreamCallback_t)(void *)callback,
					  userData, flags));
}

/* ---------------------------------------------------------------- events */

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	CU_RUN(cudaEventCreateWithFlags((cudaEvent_t *)phEvent, Flags));
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
	CU_RUN(cudaEventDestroy((cudaEvent_t)hEvent));
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	CU_RUN(cudaEventRecord((cudaEvent_t)hEvent, (cudaStream_t)hStream));
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream);
CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	CU_RUN(cudaEventRecord_ptsz((cudaEvent_t)hEvent, (cudaStream_t)hStream));
}

CUresult cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	CU_RUN(cudaEventRecordWithFlags((cudaEvent_t)hEvent, (cudaStream_t)hStream, flags));
}

CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags);
CUresult cuEventRecordWithFlags_ptsz(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	CU_RUN(cudaEventRecordWithFlags_ptsz((cudaEvent_t)hEvent, (cudaStream_t)hStream, flags));
}

CUresult cuEventQuery(CUevent hEvent)
{
	CU_RUN(cudaEventQuery((cudaEvent_t)hEvent));
}

CUresult cuEventSynchronize(CUevent hEvent)
{
	CU_RUN(cudaEventSynchronize((cudaEvent_t)hEvent));
}

static CUresult elapsed(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	CU_RUN(cudaEventElapsedTime(pMilliseconds, (cudaEvent_t)hStart, (cudaEvent_t)hEnd));
}

CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed(pMilliseconds, hStart, hEnd);
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	return elapsed(pMilliseconds, hStart, hEnd);
}
