/* SPDX-License-Identifier: MIT */
/*
 * rtbasic: the CUDA runtime API with nothing of Linux in it, so that the
 * same source runs over libcudart.so.13 and, cross-built with mingw-w64 and
 * linked against cudart64_13.dll's import library, over that DLL
 * (test/windows/cudart-wine.test.ts compares their output): devices and
 * their properties, memory with copies host to device, device to device and
 * back and memsets (the bytes compared), a stream's asynchronous copies,
 * calls through the per-thread-stream names, errors as CUDA answers them,
 * and a kernel of a fat binary that nvcc built (rtbasic_kernels.cu),
 * registered before main and launched the ways nvcc's generated host code
 * and cudaLaunchKernel launch it. What the provider answers a launch is
 * printed rather than required (the emu provider runs no kernels: error
 * 209), so the lines are the same wherever the same backend serves them;
 * where the kernel ran, its output is checked. Ends with PASS / FAIL.
 */
#include <cuda_runtime_api.h>
#include <fatbinary_section.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../libcuda/check_core.h"
#include "rtbasic_fatbin.h" /* rtbasic_fatbin[]: nvcc -fatbin rtbasic_kernels.cu (windows.mk) */

#define N (1u << 18) /* 32-bit words: 1 MiB */

/* EXPECT(call, result): the call returns that cudaError_t, printed by name and number. */
#define EXPECT(call, want)                                                                  \
	do {                                                                                \
		cudaError_t r_ = (call);                                                    \
		check(r_ == (want), "%s -> %s (%d)", #call, cudaGetErrorName(r_), (int)r_); \
	} while (0)
#define OK(call) EXPECT(call, cudaSuccess)

/* What nvcc's generated host code declares and calls (CUDA 13's
 * crt/host_runtime.h and crt/device_functions.h; nvcc -cuda shows it). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream);
/* Names a program built with --default-stream per-thread imports. */
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);

static const __fatBinC_Wrapper_t fatbin_wrapper
	__attribute__((aligned(8))) = { FATBINC_MAGIC, 1, rtbasic_fatbin, NULL };
static void **fatbin_handle;

/* The kernel's host function, what qc_fill<<<grid, block>>>(...) calls
 * after __cudaPushCallConfiguration: nvcc's device stub, as it writes it. */
void qc_fill(unsigned *out, unsigned seed, int n)
{
	static cudaKernel_t kernel;
	void *args[] = { &out, &seed, &n };
	dim3 grid, block;
	size_t shared;
	cudaStream_t stream;

	if (!kernel)
		(void)__cudaGetKernel(&kernel, (const void *)qc_fill);
	if (__cudaPopCallConfiguration(&grid, &block, &shared, &stream) != cudaSuccess)
		return;
	(void)__cudaLaunchKernel(kernel, grid, block, args, shared, stream);
}

static void unregister_all(void)
{
	__cudaUnregisterFatBinary(fatbin_handle);
}

/* nvcc's __sti____cudaRegisterAll: a static constructor, before main. */
__attribute__((constructor)) static void register_all(void)
{
	fatbin_handle = __cudaRegisterFatBinary((void *)&fatbin_wrapper);
	__cudaRegisterFunction(fatbin_handle, (const char *)qc_fill, (char *)"qc_fill", "qc_fill", -1, NULL, NULL, NULL,
			       NULL, NULL);
	__cudaRegisterFatBinaryEnd(fatbin_handle);
	atexit(unregister_all);
}

static void devices(void)
{
	struct cudaDeviceProp p;
	int count = 0, version = 0, warp = 0;

	OK(cudaRuntimeGetVersion(&version));
	check(version >= 13000, "runtime version %d", version);
	OK(cudaGetDeviceCount(&count));
	check(count >= 1, "%d device(s)", count);
	memset(&p, 0, sizeof(p));
	OK(cudaGetDeviceProperties(&p, 0));
	check(p.name[0] != 0, "device 0: %s", p.name);
	check(p.major >= 0 && p.minor >= 0, "compute capability %d.%d", p.major, p.minor);
	check(p.totalGlobalMem > 0, "total memory %llu MiB", (unsigned long long)(p.totalGlobalMem >> 20));
	check(p.multiProcessorCount > 0 && p.maxThreadsPerBlock > 0, "%d multiprocessors, %d threads a block",
	      p.multiProcessorCount, p.maxThreadsPerBlock);
	OK(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
	check(warp == p.warpSize && warp == 32, "warp size %d", warp);
	EXPECT(cudaSetDevice(count), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaSuccess);
	OK(cudaSetDevice(0));
}

static unsigned word(unsigned i)
{
	return 0x9e3779b9u * (i + 1) ^ (i >> 3);
}

/* Host to device, device to device, device to host; a memset in the middle. */
static void copies(unsigned *a, unsigned *b)
{
	void *d1 = NULL, *d2 = NULL;
	size_t bytes = N * sizeof(unsigned), free_b = 0, total_b = 0;
	unsigned char *c = (unsigned char *)b;
	int ok = 1;

	OK(cudaMalloc(&d1, bytes));
	OK(cudaMalloc(&d2, bytes));
	check(d1 && d2 && d1 != d2, "two allocations of 1 MiB");
	OK(cudaMemGetInfo(&free_b, &total_b));
	check(free_b <= total_b && total_b > 0, "memory info: free at most total");
	for (unsigned i = 0; i < N; i++)
		a[i] = word(i);
	OK(cudaMemcpy(d1, a, bytes, cudaMemcpyHostToDevice));
	OK(cudaMemcpy(d2, d1, bytes, cudaMemcpyDeviceToDevice));
	memset(b, 0, bytes);
	OK(cudaMemcpy(b, d2, bytes, cudaMemcpyDeviceToHost));
	check(!memcmp(a, b, bytes), "1 MiB went host to device, device to device and back");
	OK(cudaMemset((char *)d2 + 4096, 0xab, 8192));
	OK(cudaMemcpy(b, d2, bytes, cudaMemcpyDefault));
	for (unsigned i = 0; i < bytes; i++)
		ok &= c[i] == (i >= 4096 && i < 4096 + 8192 ? 0xab : ((unsigned char *)a)[i]);
	check(ok, "cudaMemset of 8 KiB at 4 KiB, the rest as copied");
	EXPECT(cudaMemcpy(d1, a, 2 * bytes, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d1, d2, 16, (enum cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaFree((char *)d1 + 1), cudaErrorInvalidValue);
	OK(cudaFree(d1));
	EXPECT(cudaFree(d1), cudaErrorInvalidValue);
	EXPECT(cudaFree((void *)0x1234), cudaErrorInvalidValue);
	OK(cudaFree(NULL));
	OK(cudaFree(d2));
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	check(!strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument"), "cudaGetErrorString(1): %s",
	      cudaGetErrorString(cudaErrorInvalidValue));
}

/* A stream's asynchronous copies, and the per-thread-stream names. */
static void streams(unsigned *a, unsigned *b)
{
	cudaStream_t s = NULL;
	cudaEvent_t e = NULL;
	void *d = NULL;
	size_t bytes = N * sizeof(unsigned);
	int ok = 1;

	OK(cudaStreamCreate(&s));
	OK(cudaEventCreate(&e));
	OK(cudaMalloc(&d, bytes));
	OK(cudaMemcpyAsync(d, a, bytes, cudaMemcpyHostToDevice, s));
	OK(cudaMemsetAsync(d, 0x11, 64, s));
	OK(cudaEventRecord(e, s));
	memset(b, 0, bytes);
	OK(cudaMemcpyAsync(b, d, bytes, cudaMemcpyDeviceToHost, s));
	OK(cudaStreamSynchronize(s));
	OK(cudaEventQuery(e));
	for (unsigned i = 0; i < N; i++)
		ok &= b[i] == (i < 16 ? 0x11111111u : a[i]);
	check(ok, "a stream's copies and memset, in order");
	OK(cudaMemsetAsync_ptsz(d, 0x22, bytes, cudaStreamPerThread));
	OK(cudaStreamSynchronize_ptsz(cudaStreamPerThread));
	OK(cudaMemcpy_ptds(b, d, bytes, cudaMemcpyDeviceToHost));
	ok = 1;
	for (unsigned i = 0; i < N; i++)
		ok &= b[i] == 0x22222222u;
	check(ok, "the per-thread stream's memset, read back");
	OK(cudaFree(d));
	OK(cudaEventDestroy(e));
	OK(cudaStreamDestroy(s));
	EXPECT(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
}

/* The registered kernel, as qc_fill<<<>>> and through cudaLaunchKernel. */
static void kernel(unsigned *b)
{
	unsigned *d = NULL, seed = 0x5eed1234u;
	int n = (int)N, ok = 1;
	void *args[] = { &d, &seed, &n };
	dim3 grid = { N / 256, 1, 1 }, block = { 256, 1, 1 };
	cudaError_t r;

	OK(cudaMalloc((void **)&d, N * sizeof(unsigned)));
	OK(cudaMemset(d, 0, N * sizeof(unsigned)));
	check(__cudaPushCallConfiguration(grid, block, 0, NULL) == 0, "qc_fill<<<%u, %u>>> configured", grid.x,
	      block.x);
	qc_fill(d, seed, n);
	r = cudaGetLastError();
	check(r == cudaSuccess || r == cudaErrorNoKernelImageForDevice, "qc_fill<<<>>> -> %s (%d)", cudaGetErrorName(r),
	      (int)r);
	if (r == cudaSuccess) {
		OK(cudaDeviceSynchronize());
		OK(cudaMemcpy(b, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
		for (unsigned i = 0; i < N; i++)
			ok &= b[i] == (seed ^ (i * 2654435761u));
		check(ok, "qc_fill wrote its %u words", N);
	}
	OK(cudaMemset(d, 0, N * sizeof(unsigned)));
	r = cudaLaunchKernel((const void *)qc_fill, grid, block, args, 0, NULL);
	check(r == cudaSuccess || r == cudaErrorNoKernelImageForDevice, "cudaLaunchKernel(qc_fill) -> %s (%d)",
	      cudaGetErrorName(r), (int)r);
	if (r == cudaSuccess) {
		OK(cudaDeviceSynchronize());
		OK(cudaMemcpy(b, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
		ok = 1;
		for (unsigned i = 0; i < N; i++)
			ok &= b[i] == (seed ^ (i * 2654435761u));
		check(ok, "cudaLaunchKernel: qc_fill wrote its %u words", N);
	}
	cudaGetLastError();
	r = cudaLaunchKernel((const void *)devices, grid, block, args, 0, NULL);
	check(r == cudaErrorInvalidDeviceFunction, "cudaLaunchKernel(not a kernel) -> %s (%d)", cudaGetErrorName(r),
	      (int)r);
	cudaGetLastError();
	OK(cudaFree(d));
}

int main(void)
{
	unsigned *a = malloc(N * sizeof(unsigned)), *b = malloc(N * sizeof(unsigned));

	if (!a || !b)
		return 2;
	devices();
	copies(a, b);
	streams(a, b);
	kernel(b);
	OK(cudaDeviceReset());
	free(a);
	free(b);
	return finish("rtbasic");
}
