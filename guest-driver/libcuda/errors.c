/* SPDX-License-Identifier: MIT */
/*
 * CUresult: the mapping from the runtime layer's cudaError_t (the driver
 * API here is served by the runtime library's session code), names and
 * strings, and the note of an entry point qcuda does not implement.
 */
#include <stdatomic.h>

#include "cu.h"
#include "cu_errnames.h" /* generated from cuda.h's enum cudaError_enum */

CUresult cu_result(cudaError_t e)
{
	/* From 100 up the two enums agree on every code both have (the
	 * runtime took the driver's numbers); below, the runtime has codes of
	 * its own for what the driver calls an invalid value or handle. */
	switch ((int)e) {
	case cudaSuccess:
		return CUDA_SUCCESS;
	case cudaErrorInvalidValue:
	case cudaErrorInvalidConfiguration:
	case cudaErrorInvalidPitchValue:
	case cudaErrorInvalidHostPointer:
	case cudaErrorInvalidDevicePointer:
	case cudaErrorInvalidMemcpyDirection:
	case cudaErrorInvalidChannelDescriptor:
		return CUDA_ERROR_INVALID_VALUE;
	case cudaErrorMemoryAllocation:
		return CUDA_ERROR_OUT_OF_MEMORY;
	case cudaErrorInitializationError:
		return CUDA_ERROR_NOT_INITIALIZED;
	case cudaErrorCudartUnloading:
		return CUDA_ERROR_DEINITIALIZED;
	case cudaErrorProfilerDisabled:
	case cudaErrorProfilerNotInitialized:
	case cudaErrorProfilerAlreadyStarted:
	case cudaErrorProfilerAlreadyStopped:
	case cudaErrorStubLibrary:
	case cudaErrorCallRequiresNewerDriver:
	case cudaErrorDevicesUnavailable:
		return (CUresult)e;
	case cudaErrorInvalidSymbol:
		return CUDA_ERROR_NOT_FOUND;
	case cudaErrorInvalidDeviceFunction:
	case cudaErrorInvalidTexture:
	case cudaErrorInvalidSurface:
		return CUDA_ERROR_INVALID_HANDLE;
	case cudaErrorInsufficientDriver:
		return CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
	case cudaErrorMissingConfiguration:
	case cudaErrorNotYetImplemented:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return (int)e < 100 ? CUDA_ERROR_UNKNOWN : (CUresult)e;
	}
}

CUresult cu_unsupported(const char *name, int *warned)
{
	if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
		qc_msg("%s is not supported", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

static const char *name_of(CUresult r)
{
	for (unsigned int i = 0; i < sizeof(cu_errnames) / sizeof(cu_errnames[0]); i++)
		if (cu_errnames[i].code == (int)r)
			return cu_errnames[i].name;
	return NULL;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	const char *n = name_of(error);

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = n;
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The runtime's text for the same number where the runtime has the code
 * (their texts are shared), else the driver's name. */
CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	const char *n = name_of(error);
	const char *s;

	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n) {
		*pStr = NULL;
		return CUDA_ERROR_INVALID_VALUE;
	}
	s = error == CUDA_SUCCESS ? "no error" : qc_error_string((int)error);
	*pStr = s ? s : n;
	return CUDA_SUCCESS;
}
