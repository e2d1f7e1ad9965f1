/* SPDX-License-Identifier: MIT */
/*
 * What the driver-API test programs share: check() prints an "ok" or
 * "FAIL" line and counts; EXPECT and OK check a call's CUresult, by name;
 * primary_context() makes device 0's primary context current (or exits);
 * finish() prints PASS or FAIL with the counts and gives the exit status.
 */
#ifndef QCUDA_TEST_LIBCUDA_CHECK_H
#define QCUDA_TEST_LIBCUDA_CHECK_H

#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int checks, failed;

__attribute__((format(printf, 2, 3), unused)) static int check(int ok, const char *fmt, ...)
{
	va_list ap;

	checks++;
	failed += !ok;
	fputs(ok ? "ok   " : "FAIL ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	return ok;
}

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

/* "PASS: prog: N checks" or "FAIL: prog: F of N checks failed"; the exit status. */
__attribute__((unused)) static int finish(const char *prog)
{
	if (failed)
		printf("FAIL: %s: %d of %d checks failed\n", prog, failed, checks);
	else
		printf("PASS: %s: %d checks\n", prog, checks);
	return failed ? 1 : 0;
}

#endif
