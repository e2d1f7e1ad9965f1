/* SPDX-License-Identifier: MIT */
/*
 * IPC between the processes of one VM: a handle (cudaIpcMemHandle_t, 64
 * bytes) is what the backend minted for one allocation; another process of
 * the same VM opens it and may copy to and from that memory. Opening it in
 * the process that made it is CUDA's invalid context (201). An event
 * handle is the same for an event made interprocess.
 */
#include <string.h>
#include "qcrt.h"
#include "qc_calls.h"

_Static_assert(sizeof(struct qcuda_ipc_handle) == sizeof(cudaIpcMemHandle_t), "an IPC handle is 64 bytes");

QC_API cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr)
{
	struct qcuda_ipc_handle h;
	cudaError_t e;

	QC_ENTER(e);
	if (!handle || !devPtr)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_req_ipc_get((uintptr_t)devPtr, &h);
	if (e == cudaSuccess)
		memcpy(handle, &h, sizeof(h));
	return qc_ret(e);
}

/* Every flag value is accepted (on the GPU the backend opens with lazy peer access, so kernels reach it too). */
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
	cudaError_t e;

	QC_ENTER(e);
	e = qc_req_ipc_close((uintptr_t)devPtr);
	if (e == cudaSuccess)
		qc_mem_remove_symbol((uintptr_t)devPtr);
	return qc_ret(e);
}

_Static_assert(sizeof(struct qcuda_ipc_handle) == sizeof(cudaIpcEventHandle_t), "an IPC event handle is 64 bytes");

/* The backend refuses an event not made with cudaEventInterprocess | cudaEventDisableTiming. */
QC_API cudaError_t cudaIpcGetEventHandle(cudaIpcEventHandle_t *handle, cudaEvent_t event)
{
	struct qcuda_ipc_handle h;
	uint64_t ev = (uint64_t)(uintptr_t)event;
	cudaError_t e;

	QC_ENTER(e);
	if (!handle)
		return qc_ret(cudaErrorInvalidValue);
	if (!event || !qc_handle_known(QC_EVENT, ev))
		return qc_ret(cudaErrorInvalidResourceHandle);
	e = qc_req_ipc_event_get(ev, &h);
	if (e == cudaSuccess)
		memcpy(handle, &h, sizeof(h));
	return qc_ret(e);
}

/* An event of this process, destroyed as any (cudaEventDestroy), that another process's event completes. */
QC_API cudaError_t cudaIpcOpenEventHandle(cudaEvent_t *event, cudaIpcEventHandle_t handle)
{
	struct qcuda_ipc_handle h;
	uint64_t ev = 0;
	cudaError_t e;

	QC_ENTER(e);
	if (!event)
		return qc_ret(cudaErrorInvalidValue);
	memcpy(&h, &handle, sizeof(h));
	e = qc_req_ipc_event_open(&h, &ev);
	if (e == cudaSuccess && ev <= QCUDA_STREAM_PER_THREAD) {
		qc_msg("the backend returned the reserved handle %llu", (unsigned long long)ev);
		e = cudaErrorUnknown;
	} else if (e == cudaSuccess && (e = qc_handle_add(QC_EVENT, ev, 0)) != cudaSuccess) {
		qc_req_event_destroy(ev);
	}
	if (e == cudaSuccess)
		*event = (cudaEvent_t)(uintptr_t)ev;
	return qc_ret(e);
}
