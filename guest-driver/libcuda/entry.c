/* SPDX-License-Identifier: MIT */
/*
 * cuInit and the versions. cuInit opens the device and says HELLO (the
 * runtime layer's qc_init); until it has succeeded every other call answers
 * CUDA_ERROR_NOT_INITIALIZED, as natively.
 */
#include "cu.h"

/* CUDA 13.0: the runtime refuses a driver older than itself. */
#define CU_DRIVER_VERSION_MIN 13000

CUresult cuInit(unsigned int flags)
{
	cudaError_t e;

	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	e = qc_init();
	if (e != cudaSuccess)
		return e == cudaErrorNoDevice ? CUDA_ERROR_NO_DEVICE : cu_result(e);
	if (qc.device_count == 0)
		return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&cu_initialized, 1, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

/* The host driver's version (HELLO), and at least 13.0: this library is
 * CUDA 13's driver API whatever serves it (the emu provider reports its
 * own). Answered before cuInit too, as natively. */
CUresult cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	if (qc_init() == cudaSuccess && qc.driver_version >= CU_DRIVER_VERSION_MIN)
		*driverVersion = (int)qc.driver_version;
	else
		*driverVersion = CU_DRIVER_VERSION_MIN;
	return CUDA_SUCCESS;
}
