/* SPDX-License-Identifier: MIT */
/*
 * rtdrv: the runtime API and the driver API in one process, each using
 * what the other allocated, built for Windows against cudart64_13.dll and
 * nvcuda.dll and for Linux against libcudart.so.13 and libcuda.so.1, to
 * compare (test/windows/rtdrv-wine.test.ts; on Linux the runtime is
 * NVIDIA's, over qcuda's libcuda.so.1: one session, as on Windows). Prints
 * each call's answer by name and no address.
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#define N (1u << 20)

static int failed;

static void rt(const char *call, cudaError_t r)
{
	printf("%s -> %s\n", call, cudaGetErrorName(r));
	failed += r != cudaSuccess;
}

static void drv(const char *call, CUresult r)
{
	const char *s = "?";

	cuGetErrorName(r, &s);
	printf("%s -> %s\n", call, s);
	failed += r != CUDA_SUCCESS;
}

#define RT(call) rt(#call, call)
#define DRV(call) drv(#call, call)

static void same(const char *what, const unsigned char *a, const unsigned char *b)
{
	int eq = memcmp(a, b, N) == 0;

	printf("%s: %u bytes %s\n", what, N, eq ? "equal" : "DIFFER");
	failed += !eq;
}

int main(void)
{
	static unsigned char src[N], dst[N];
	CUdeviceptr dd = 0;
	CUcontext ctx = NULL;
	void *rd = NULL, *host = NULL;
	int count = 0;

	for (unsigned int i = 0; i < N; i++)
		src[i] = (unsigned char)(i * 7 + 3);
	RT(cudaGetDeviceCount(&count));
	RT(cudaSetDevice(0));
	RT(cudaMalloc(&rd, N));
	DRV(cuInit(0));
	/* The runtime's context is the device's primary context: made current
	 * here (NVIDIA's runtime has made it so already; qcuda's does not). */
	DRV(cuDevicePrimaryCtxRetain(&ctx, 0));
	DRV(cuCtxSetCurrent(ctx));
	/* Allocated by the runtime, written and read by the driver API. */
	DRV(cuMemcpyHtoD((CUdeviceptr)(uintptr_t)rd, src, N));
	DRV(cuMemcpyDtoH(dst, (CUdeviceptr)(uintptr_t)rd, N));
	same("cudaMalloc'd memory through cuMemcpy", src, dst);
	/* Allocated by the driver API, used by the runtime. */
	DRV(cuMemAlloc(&dd, N));
	RT(cudaMemcpy((void *)(uintptr_t)dd, rd, N, cudaMemcpyDeviceToDevice));
	memset(dst, 0, N);
	RT(cudaMemcpy(dst, (void *)(uintptr_t)dd, N, cudaMemcpyDeviceToHost));
	same("cuMemAlloc'd memory through cudaMemcpy", src, dst);
	/* Pinned memory of one freed by the other. */
	DRV(cuMemAllocHost(&host, N));
	RT(cudaFreeHost(host));
	RT(cudaFree((void *)(uintptr_t)dd));
	DRV(cuMemFree((CUdeviceptr)(uintptr_t)rd));
	RT(cudaDeviceSynchronize());
	DRV(cuDevicePrimaryCtxRelease(0));
	printf("%s: rtdrv\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
