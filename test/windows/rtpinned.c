/* SPDX-License-Identifier: MIT */
/*
 * rtpinned: drvpinned.c's checks through the runtime API, built for
 * Windows against cudart64_13.dll and for Linux against libcudart.so.13,
 * to compare (test/windows/pinned-wine.test.ts): cudaMallocHost,
 * cudaHostAlloc with and without cudaHostAllocMapped, cudaMallocManaged;
 * bytes copied host -> device -> host through them and compared; the
 * mapped memory read by the device through its device pointer; all freed;
 * the pinned area filled to its bound and given back. Prints each call's
 * answer by name and no address. A pageable buffer is copied too, with
 * other bytes, which the test finds in the region's staging room.
 */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pinned.h"

static cudaError_t say(const char *call, cudaError_t r)
{
	printf("%s -> %s\n", call, cudaGetErrorName(r));
	failed += r != cudaSuccess;
	return r;
}

#define SAY(call) say(#call, call)

static void copies(void)
{
	void *a = NULL, *b = NULL, *m = NULL, *dm = NULL, *mg = NULL, *d = NULL, *pageable = malloc(N);
	const enum cudaMemcpyKind h2d = cudaMemcpyHostToDevice, d2h = cudaMemcpyDeviceToHost;

	SAY(cudaMallocHost(&a, N));
	SAY(cudaHostAlloc(&b, N, cudaHostAllocDefault));
	SAY(cudaHostAlloc(&m, N, cudaHostAllocMapped));
	SAY(cudaMallocManaged(&mg, N, cudaMemAttachGlobal));
	SAY(cudaMalloc(&d, N));
	if (failed || !pageable)
		exit(1);
	/* First: a pinned copy staged after it would overwrite its bytes. */
	fill(pageable, "PAGEABLE-STAGED!");
	SAY(cudaMemcpy(d, pageable, N, h2d));
	fill(a, "PINNED-BYTES-OK!");
	SAY(cudaMemcpy(d, a, N, h2d));
	SAY(cudaMemcpy(b, d, N, d2h));
	same("cudaMallocHost -> device -> cudaHostAlloc", a, b);
	fill(m, "MAPPED-BYTES-OK!");
	SAY(cudaHostGetDevicePointer(&dm, m, 0));
	SAY(cudaMemcpy(d, dm, N, cudaMemcpyDeviceToDevice));
	SAY(cudaMemcpy(b, d, N, d2h));
	same("cudaHostAllocMapped memory read by the device", m, b);
	fill(mg, "MANAGED-BYTESOK!");
	SAY(cudaMemcpy(d, mg, N, h2d));
	SAY(cudaMemcpy(b, d, N, d2h));
	same("cudaMallocManaged -> device -> host", mg, b);
	SAY(cudaFreeHost(a));
	SAY(cudaFreeHost(b));
	SAY(cudaFreeHost(m));
	SAY(cudaFree(mg));
	SAY(cudaFree(d));
	free(pageable);
}

/* A failure's error is also the thread's last one: cleared, as it is
 * the expected answer at the bound, not the program's. */
static int alloc_host(void **p, size_t bytes)
{
	cudaError_t r = cudaMallocHost(p, bytes);

	if (r != cudaSuccess)
		cudaGetLastError();
	return r;
}

static int free_host(void *p)
{
	return cudaFreeHost(p);
}

static const char *error_name(int r)
{
	return cudaGetErrorName((cudaError_t)r);
}

static const struct pin_api runtime_pins = {
	.alloc_name = "cudaMallocHost",
	.alloc = alloc_host,
	.release = free_host,
	.error_name = error_name,
	.out_of_memory = cudaErrorMemoryAllocation,
};

int main(void)
{
	int count = 0;

	SAY(cudaGetDeviceCount(&count));
	SAY(cudaSetDevice(0));
	if (failed)
		return 1;
	copies();
	to_the_bound(&runtime_pins);
	SAY(cudaDeviceSynchronize());
	printf("%s: rtpinned\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
