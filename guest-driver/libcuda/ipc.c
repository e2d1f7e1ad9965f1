/* SPDX-License-Identifier: MIT */
/*
 * IPC memory and event handles between the processes of one VM: the runtime layer's
 * (lib/ipc.c), under the thread's current context. The handles of the two
 * APIs are the same 64 bytes.
 */
#include <string.h>

#include "cu.h"

CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	CUresult r;

	CU_ENTER(r);
	return cu_result(cudaIpcGetMemHandle((cudaIpcMemHandle_t *)pHandle, (void *)(uintptr_t)dptr));
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	cudaIpcMemHandle_t h;
	void *p = NULL;
	CUresult r;

	CU_ENTER(r);
	if (!pdptr)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&h, &handle, sizeof(h));
	r = cu_result(cudaIpcOpenMemHandle(&p, h, Flags));
	if (r == CUDA_SUCCESS)
		*pdptr = (CUdeviceptr)(uintptr_t)p;
	return r;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	CUresult r;

	CU_ENTER(r);
	return cu_result(cudaIpcCloseMemHandle((void *)(uintptr_t)dptr));
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	CUresult r;

	CU_ENTER(r);
	return cu_result(cudaIpcGetEventHandle((cudaIpcEventHandle_t *)pHandle, (cudaEvent_t)event));
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	cudaIpcEventHandle_t h;
	CUresult r;

	CU_ENTER(r);
	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&h, &handle, sizeof(h));
	return cu_result(cudaIpcOpenEventHandle((cudaEvent_t *)phEvent, h));
}
