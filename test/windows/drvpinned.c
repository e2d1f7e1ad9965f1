/* SPDX-License-Identifier: MIT */
/*
 * drvpinned: pinned host memory through the driver API, built for Windows
 * against nvcuda.dll and for Linux against libcuda.so.1, to compare
 * (test/windows/pinned-wine.test.ts): cuMemAllocHost, cuMemHostAlloc with
 * and without DEVICEMAP, cuMemAllocManaged; bytes copied host -> device ->
 * host through them and compared; the mapped memory read by the device
 * through its device pointer; everything freed; then the pinned area
 * filled to its bound (the out-of-memory answer) and given back. Prints
 * each call's CUresult by name and no address, so both systems print the
 * same. A pageable buffer is copied too, with other bytes: the test finds
 * those in the region's staging room and the pinned ones not.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#include "pinned.h"

static const char *nm(CUresult r)
{
	const char *s = "?";

	cuGetErrorName(r, &s);
	return s;
}

/* Prints the call and its answer; a failure is counted unless expected. */
static CUresult say(const char *call, CUresult r)
{
	printf("%s -> %s\n", call, nm(r));
	failed += r != CUDA_SUCCESS;
	return r;
}

#define SAY(call) say(#call, call)

/* host -> device -> host through two pinned buffers and the mapped one,
 * and ordinary memory for the staged bytes the test looks for. */
static void copies(void)
{
	void *a = NULL, *b = NULL, *m = NULL, *pageable = malloc(N);
	CUdeviceptr d = 0, dm = 0, mg = 0;

	SAY(cuMemAllocHost(&a, N));
	SAY(cuMemHostAlloc(&b, N, 0));
	SAY(cuMemHostAlloc(&m, N, CU_MEMHOSTALLOC_DEVICEMAP));
	SAY(cuMemAllocManaged(&mg, N, CU_MEM_ATTACH_GLOBAL));
	SAY(cuMemAlloc(&d, N));
	if (failed || !pageable)
		exit(1);
	/* First: a pinned copy staged after it would overwrite its bytes. */
	fill(pageable, "PAGEABLE-STAGED!");
	SAY(cuMemcpyHtoD(d, pageable, N));
	fill(a, "PINNED-BYTES-OK!");
	SAY(cuMemcpyHtoD(d, a, N));
	SAY(cuMemcpyDtoH(b, d, N));
	same("cuMemAllocHost -> device -> cuMemHostAlloc", a, b);
	/* The device reads the mapped memory through its device pointer. */
	fill(m, "MAPPED-BYTES-OK!");
	SAY(cuMemHostGetDevicePointer(&dm, m, 0));
	SAY(cuMemcpyDtoD(d, dm, N));
	SAY(cuMemcpyDtoH(b, d, N));
	same("DEVICEMAP memory read by the device", m, b);
	/* Managed memory is host memory here too. */
	fill((void *)(uintptr_t)mg, "MANAGED-BYTESOK!");
	SAY(cuMemcpyHtoD(d, (void *)(uintptr_t)mg, N));
	SAY(cuMemcpyDtoH(b, d, N));
	same("cuMemAllocManaged -> device -> host", (void *)(uintptr_t)mg, b);
	SAY(cuMemFreeHost(a));
	SAY(cuMemFreeHost(b));
	SAY(cuMemFreeHost(m));
	SAY(cuMemFree(mg));
	SAY(cuMemFree(d));
	free(pageable);
}

static int alloc_host(void **p, size_t bytes)
{
	return cuMemAllocHost(p, bytes);
}

static int free_host(void *p)
{
	return cuMemFreeHost(p);
}

static const char *error_name(int r)
{
	return nm((CUresult)r);
}

static const struct pin_api driver_pins = {
	.alloc_name = "cuMemAllocHost",
	.alloc = alloc_host,
	.release = free_host,
	.error_name = error_name,
	.out_of_memory = CUDA_ERROR_OUT_OF_MEMORY,
};

int main(void)
{
	CUcontext c = NULL;
	CUdevice dev = 0;

	SAY(cuInit(0));
	SAY(cuDeviceGet(&dev, 0));
	SAY(cuCtxCreate(&c, NULL, 0, dev));
	if (failed)
		return 1;
	copies();
	to_the_bound(&driver_pins);
	SAY(cuCtxDestroy(c));
	printf("%s: drvpinned\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
