/* SPDX-License-Identifier: MIT */
/*
 * IPC between the processes of one VM: a handle (cudaIpcMemHandle_t, 64
 * bytes) is what the backend minted for one allocation; another process of
 * the same VM opens it and may copy to and from that memory. Opening it in
 * the process that made it is CUDA's invalid context (201).
 */
#include <string.h>
#include "qcrt.h"
#include "qc_calls.h"

_Static_assert(sizeof(struct qcuda_ipc_handle) == sizeof(cudaIpcMemHandle_t), "an IPC handle is 64 bytes");

QC_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	struct qcuda_ipc_handle h;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!handle || !devPtr)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_req_ipc_get((uintptr_t)devPtr, &h);
	if (e == cudaSuccess)
		memcpy(handle, &h, sizeof(h));
	return qc_ret(e);
}

/* Every flag value is accepted: the memory is reached by copies only. */
QC_API cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags)
{
	struct qcuda_ipc_handle h;
	uint64_t p = 0;
	cudaError_t e = qc_ready();

	(void)flags;
	if (e != cudaSuccess)
		return qc_ret(e);
	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	memcpy(&h, &handle, sizeof(h));
	e = qc_req_ipc_open(&h, &p);
	if (e == cudaSuccess) {
		/* Known as device memory for copies, as a module's variable is:
		 * device memory that cudaFree does not take. */
		qc_mem_add_symbol(p, h.size);
		*devPtr = (void *)(uintptr_t)p;
	}
	return qc_ret(e);
}

QC_API cudaError_t cudaIpcCloseMemHandle(void *devPtr)
{
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	e = qc_req_ipc_close((uintptr_t)devPtr);
	if (e == cudaSuccess)
		qc_mem_remove_symbol((uintptr_t)devPtr);
	return qc_ret(e);
}
