/* SPDX-License-Identifier: MIT */
/*
 * drvbasic: the driver API with nothing of Linux in it, so that the same
 * source runs over libcuda.so.1 and, cross-built with mingw-w64, over
 * nvcuda.dll (test/windows/dll-wine.test.ts compares their output): init and
 * devices, a created context, memory with copies of each direction and
 * memsets, a stream with asynchronous copies, events, a cubin loaded from
 * its file and from memory (argv[1]) and a launch of its kernel, a name
 * resolved by cuGetProcAddress, error names. What the provider answers a
 * module or a launch is printed rather than required (the emu provider
 * runs no kernels), so the lines are the same wherever the same backend
 * serves them. Ends with PASS / FAIL.
 */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

#define N (1u << 18) /* floats: 1 MiB */

static void devices(CUdevice *dev)
{
	char dev_name[256] = "";
	int count = 0, version = 0, major = 0, minor = 0;
	size_t total = 0;

	OK(cuInit(0));
	OK(cuDriverGetVersion(&version));
	check(version >= 13000, "driver version %d", version);
	OK(cuDeviceGetCount(&count));
	check(count >= 1, "%d device(s)", count);
	OK(cuDeviceGet(dev, 0));
	OK(cuDeviceGetName(dev_name, sizeof(dev_name), *dev));
	check(dev_name[0] != 0, "device 0: %s", dev_name);
	OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, *dev));
	OK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, *dev));
	check(major >= 0 && minor >= 0, "compute capability %d.%d", major, minor);
	OK(cuDeviceTotalMem(&total, *dev));
	check(total > 0, "total memory %llu MiB", (unsigned long long)(total >> 20));
	EXPECT(cuDeviceGet(dev, count), CUDA_ERROR_INVALID_DEVICE);
	OK(cuDeviceGet(dev, 0));
}

static void fill(float *p, float base)
{
	for (unsigned i = 0; i < N; i++)
		p[i] = base + (float)i;
}

static int same(const float *a, const float *b)
{
	return memcmp(a, b, N * sizeof(float)) == 0;
}

/* Host to device, device to device, device to host, memsets. */
static void copies(float *a, float *b)
{
	CUdeviceptr d1, d2;
	unsigned *u = (unsigned *)b;
	int ok = 1;

	OK(cuMemAlloc(&d1, N * sizeof(float)));
	OK(cuMemAlloc(&d2, N * sizeof(float)));
	fill(a, 1.0f);
	OK(cuMemcpyHtoD(d1, a, N * sizeof(float)));
	OK(cuMemcpyDtoD(d2, d1, N * sizeof(float)));
	memset(b, 0, N * sizeof(float));
	OK(cuMemcpyDtoH(b, d2, N * sizeof(float)));
	check(same(a, b), "1 MiB went host to device, device to device and back");
	OK(cuMemsetD32(d1, 0xdeadbeefu, N));
	OK(cuMemsetD8(d1, 0x5a, 16));
	OK(cuMemcpyDtoH(b, d1, N * sizeof(float)));
	for (unsigned i = 4; i < N; i++)
		ok &= u[i] == 0xdeadbeefu;
	check(ok && u[0] == 0x5a5a5a5au && u[3] == 0x5a5a5a5au, "memsets of 32 and 8 bits");
	EXPECT(cuMemcpyHtoD(d1, a, 2 * N * sizeof(float)), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemFree(d1));
	OK(cuMemFree(d2));
	EXPECT(cuMemFree(d1), CUDA_ERROR_INVALID_VALUE);
}

/* A stream's asynchronous copies, ordered between two events. */
static void streams(float *a, float *b)
{
	CUstream s;
	CUevent e0, e1;
	CUdeviceptr d;
	float ms = -1;

	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
	OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
	OK(cuMemAlloc(&d, N * sizeof(float)));
	fill(a, 7.0f);
	memset(b, 0, N * sizeof(float));
	OK(cuEventRecord(e0, s));
	OK(cuMemcpyHtoDAsync(d, a, N * sizeof(float), s));
	OK(cuMemcpyDtoHAsync(b, d, N * sizeof(float), s));
	OK(cuEventRecord(e1, s));
	OK(cuStreamSynchronize(s));
	check(same(a, b), "the stream's copies arrived in order");
	OK(cuStreamQuery(s));
	OK(cuEventSynchronize(e1));
	OK(cuEventQuery(e1));
	OK(cuEventElapsedTime(&ms, e0, e1));
	check(ms >= 0, "the events' elapsed time is not negative");
	OK(cuMemFree(d));
	OK(cuEventDestroy(e0));
	OK(cuEventDestroy(e1));
	OK(cuStreamDestroy(s));
}

/* The cubin's "scale" by file and from memory; what the device answers
 * the load and the launch is printed. */
static void modules(const char *cubin)
{
	static char image[1 << 20];
	CUmodule m;
	CUfunction f;
	CUdeviceptr d;
	unsigned n = 256;
	float two = 2;
	void *params[] = { &d, &two, &n };
	size_t got = 0;
	FILE *fp = fopen(cubin, "rb");
	CUresult r;

	if (fp) {
		got = fread(image, 1, sizeof(image), fp);
		fclose(fp);
	}
	check(got > 0, "read the cubin");
	OK(cuMemAlloc(&d, n * sizeof(float)));
	r = cuModuleLoad(&m, cubin);
	printf("cuModuleLoad(cubin) -> %s\n", name(r));
	if (r == CUDA_SUCCESS) {
		OK(cuModuleGetFunction(&f, m, "scale"));
		printf("cuLaunchKernel -> %s\n", name(cuLaunchKernel(f, 1, 1, 1, n, 1, 1, 0, NULL, params, NULL)));
		printf("cuCtxSynchronize -> %s\n", name(cuCtxSynchronize()));
		OK(cuModuleUnload(m));
	}
	r = cuModuleLoadData(&m, image);
	printf("cuModuleLoadData(cubin) -> %s\n", name(r));
	if (r == CUDA_SUCCESS)
		OK(cuModuleUnload(m));
	EXPECT(cuModuleLoad(&m, "no-such-dir/drvapi.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
	OK(cuMemFree(d));
}

/* cuGetProcAddress' table: cuMemAlloc (the _v2 entry) by name, called. */
static void proc_address(void)
{
	CUresult (*alloc)(CUdeviceptr *, size_t) = NULL;
	CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	CUdeviceptr d = 0;

	OK(cuGetProcAddress("cuMemAlloc", (void **)&alloc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q));
	check(alloc && q == CU_GET_PROC_ADDRESS_SUCCESS, "cuGetProcAddress found cuMemAlloc");
	if (alloc) {
		OK(alloc(&d, 4096));
		OK(cuMemFree(d));
	}
	alloc = NULL;
	printf("cuGetProcAddress(cuNoSuchCall) -> %s\n",
	       name(cuGetProcAddress("cuNoSuchCall", (void **)&alloc, 13000, CU_GET_PROC_ADDRESS_DEFAULT, &q)));
	check(!alloc && q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, "no entry point for an unknown name");
}

static void errors(void)
{
	const char *s = NULL;

	OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &s));
	check(s && !strcmp(s, "CUDA_ERROR_INVALID_VALUE"), "cuGetErrorName: %s", s);
	OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
	check(s && !strcmp(s, "out of memory"), "cuGetErrorString: %s", s);
}

int main(int argc, char **argv)
{
	float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
	CUcontext ctx = NULL, cur = NULL;
	CUdevice dev = 0, got = -1;

	if (argc != 2 || !a || !b) {
		fprintf(stderr, "usage: drvbasic CUBIN\n");
		return 2;
	}
	devices(&dev);
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	OK(cuCtxGetCurrent(&cur));
	check(cur == ctx, "the created context is current");
	OK(cuCtxGetDevice(&got));
	check(got == dev, "on device %d", got);
	copies(a, b);
	streams(a, b);
	modules(argv[1]);
	proc_address();
	errors();
	OK(cuCtxDestroy(ctx));
	OK(cuCtxGetCurrent(&cur));
	check(cur == NULL, "no current context after the destroy");
	free(a);
	free(b);
	return finish("drvbasic");
}
