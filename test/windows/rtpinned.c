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
#include <string.h>

#define N (4u << 20)
#define PIECE (8u << 20)
#define MAX_PIECES 4096

static int failed;

static cudaError_t say(const char *call, cudaError_t r)
{
	printf("%s -> %s\n", call, cudaGetErrorName(r));
	failed += r != cudaSuccess;
	return r;
}

#define SAY(call) say(#call, call)

static void fill(void *p, const char *word)
{
	size_t n = strlen(word);

	for (size_t i = 0; i < N; i++)
		((char *)p)[i] = word[i % n];
}

static void same(const char *what, const void *a, const void *b)
{
	int eq = memcmp(a, b, N) == 0;

	printf("%s: %u bytes %s\n", what, N, eq ? "equal" : "DIFFER");
	failed += !eq;
}

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

static void to_the_bound(void)
{
	static void *p[MAX_PIECES];
	unsigned int n = 0;
	cudaError_t r = cudaSuccess;

	while (n < MAX_PIECES && (r = cudaMallocHost(&p[n], PIECE)) == cudaSuccess)
		n++;
	printf("cudaMallocHost of %u MiB pieces: %u, then %s\n", PIECE >> 20, n, cudaGetErrorName(r));
	failed += n == 0 || r != cudaErrorMemoryAllocation;
	cudaGetLastError(); /* the expected error is not the program's */
	while (n > 0)
		failed += cudaFreeHost(p[--n]) != cudaSuccess;
	while (n < MAX_PIECES && cudaMallocHost(&p[n], PIECE) == cudaSuccess)
		n++;
	cudaGetLastError();
	printf("after freeing them all: %u again\n", n);
	while (n > 0)
		failed += cudaFreeHost(p[--n]) != cudaSuccess;
}

int main(void)
{
	int count = 0;

	SAY(cudaGetDeviceCount(&count));
	SAY(cudaSetDevice(0));
	if (failed)
		return 1;
	copies();
	to_the_bound();
	SAY(cudaDeviceSynchronize());
	printf("%s: rtpinned\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
