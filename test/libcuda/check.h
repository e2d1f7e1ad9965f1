/* SPDX-License-Identifier: MIT */
/*
 * What the driver-API test programs share: check() and finish() of
 * check_core.h; EXPECT and OK check a call's CUresult, by name;
 * primary_context() makes device 0's primary context current (or exits).
 */
#ifndef QCUDA_TEST_LIBCUDA_CHECK_H
#define QCUDA_TEST_LIBCUDA_CHECK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_core.h"

__attribute__((unused)) static const char *name(CUresult r)
{
	const char *s = NULL;

	return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : "?";
}

/* EXPECT(call, result): the call returns that CUresult. */
#define EXPECT(call, want)                                        \
	do {                                                      \
		CUresult r_ = (call);                             \
		check(r_ == (want), "%s -> %s", #call, name(r_)); \
	} while (0)
#define OK(call) EXPECT(call, CUDA_SUCCESS)

__attribute__((unused)) static CUcontext primary_context(void)
{
	CUcontext c = NULL;
	CUdevice d;

	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&d, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&c, d) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) {
		printf("FAIL no CUDA context\n");
		exit(1);
	}
	return c;
}

#endif
