/* SPDX-License-Identifier: MIT */
/*
 * drvapi: a program written against CUDA's driver API, as the CUDA samples'
 * *Drv programs are (linked with -lcuda, kernels in PTX loaded at run time):
 * devices, a created context and the context stack, memory, copies and
 * memsets, a PTX module and a library (JIT-compiled by the host's driver),
 * a cubin (SASS for sm_90, drvapi.cubin beside the program) by file and from
 * memory,
 * functions and globals by name, cuLaunchKernel with parameter pointers and
 * with the packed `extra` buffer, cuLaunchKernelEx on a stream, events,
 * attributes, occupancy, error names. Prints deterministic lines (the GPU run
 * diffs them against NVIDIA's libcuda.so.1) and ends with PASS / FAIL, or
 * SKIP (exit 77) at the first module where the device runs no kernels.
 */
#include <cuda.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static const char ptx[] = ".version 7.0\n"
			  ".target sm_52\n"
			  ".address_size 64\n"
			  ".visible .global .align 4 .u32 counter;\n"
			  ".visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)\n"
			  "{\n"
			  "	.reg .pred p;\n"
			  "	.reg .b32 r<6>;\n"
			  "	.reg .f32 f<4>;\n"
			  "	.reg .b64 rd<11>;\n"
			  "	ld.param.u64 rd1, [a];\n"
			  "	ld.param.u64 rd2, [b];\n"
			  "	ld.param.u64 rd3, [c];\n"
			  "	ld.param.u32 r1, [n];\n"
			  "	mov.u32 r2, %ctaid.x;\n"
			  "	mov.u32 r3, %ntid.x;\n"
			  "	mov.u32 r4, %tid.x;\n"
			  "	mad.lo.s32 r5, r2, r3, r4;\n"
			  "	setp.ge.u32 p, r5, r1;\n"
			  "	@p bra DONE;\n"
			  "	cvta.to.global.u64 rd4, rd1;\n"
			  "	cvta.to.global.u64 rd5, rd2;\n"
			  "	cvta.to.global.u64 rd6, rd3;\n"
			  "	mul.wide.u32 rd7, r5, 4;\n"
			  "	add.s64 rd8, rd4, rd7;\n"
			  "	add.s64 rd9, rd5, rd7;\n"
			  "	add.s64 rd10, rd6, rd7;\n"
			  "	ld.global.f32 f1, [rd8];\n"
			  "	ld.global.f32 f2, [rd9];\n"
			  "	add.f32 f3, f1, f2;\n"
			  "	st.global.f32 [rd10], f3;\n"
			  "DONE:\n"
			  "	ret;\n"
			  "}\n"
			  ".visible .entry bump(.param .u32 by)\n"
			  "{\n"
			  "	.reg .b32 r<3>;\n"
			  "	ld.param.u32 r1, [by];\n"
			  "	atom.global.add.u32 r2, [counter], r1;\n"
			  "	ret;\n"
			  "}\n";

#define N 100000

/* c == a + b, element by element. */
static int sums_ok(const float *a, const float *b, const float *c)
{
	for (int i = 0; i < N; i++)
		if (c[i] != a[i] + b[i])
			return 0;
	return 1;
}

int main(void)
{
	CUdevice dev;
	CUcontext ctx = NULL, cur = NULL, popped = NULL;
	CUmodule mod;
	CUlibrary lib;
	CUkernel kern;
	CUfunction vadd, bump, f;
	CUdeviceptr da, db, dc, gptr;
	CUstream s;
	CUevent e0, e1;
	size_t gsize = 0, free_b = 0, total_b = 0;
	int count = 0, v = 0, major = 0, active = -1, blocks = 0;
	unsigned int flags = 99, n = N, by;
	char devname[256] = "";
	float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float)), *c = malloc(N * sizeof(float));
	const char *str = NULL;
	CUresult r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# drvapi\n");
	EXPECT(cuDeviceGetCount(&count), CUDA_ERROR_NOT_INITIALIZED);
	OK(cuInit(0));
	OK(cuDriverGetVersion(&v));
	check(v >= 13000, "driver version >= 13000");
	OK(cuDeviceGetCount(&count));
	check(count >= 1, "at least one device");
	OK(cuDeviceGet(&dev, 0));
	EXPECT(cuDeviceGet(&dev, 999), CUDA_ERROR_INVALID_DEVICE);
	OK(cuDeviceGet(&dev, 0));
	OK(cuDeviceGetName(devname, sizeof(devname), dev));
	check(devname[0] != 0, "device name is not empty");
	OK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	EXPECT(cuDeviceGetAttribute(&major, (CUdevice_attribute)100000, dev), CUDA_ERROR_INVALID_VALUE);
	OK(cuDeviceTotalMem(&total_b, dev));
	check(total_b > 0, "device memory > 0");
	OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	check(active == 0, "primary context inactive before anything retains it");

	/* No context yet. */
	OK(cuCtxGetCurrent(&cur));
	check(cur == NULL, "no current context at start");
	EXPECT(cuMemAlloc(&da, 16), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);

	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	OK(cuCtxGetCurrent(&cur));
	check(cur == ctx, "cuCtxCreate makes the context current");
	OK(cuCtxGetDevice(&dev));
	check(dev == 0, "the context's device is 0");
	OK(cuCtxPopCurrent(&popped));
	check(popped == ctx, "popped the created context");
	OK(cuCtxGetCurrent(&cur));
	check(cur == NULL, "nothing current after the pop");
	OK(cuCtxPushCurrent(ctx));
	OK(cuCtxGetCurrent(&cur));
	check(cur == ctx, "current again after the push");
	OK(cuCtxGetFlags(&flags));
	check(flags == 0, "a context created with flags 0 reports 0 (%#x)", flags);

	/* Memory. */
	OK(cuMemGetInfo(&free_b, &total_b));
	check(free_b > 0 && free_b <= total_b, "0 < free <= total");
	EXPECT(cuMemAlloc(&da, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemAlloc(&da, N * sizeof(float)));
	OK(cuMemAlloc(&db, N * sizeof(float)));
	OK(cuMemAlloc(&dc, N * sizeof(float)));
	for (int i = 0; i < N; i++) {
		a[i] = (float)i * 0.5f;
		b[i] = (float)(N - i);
		c[i] = -1;
	}
	OK(cuMemcpyHtoD(da, a, N * sizeof(float)));
	OK(cuMemcpyHtoD(db, b, N * sizeof(float)));
	OK(cuMemsetD32(dc, 0, N));
	OK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
	check(c[0] == 0 && c[N - 1] == 0, "cuMemsetD32 zeroed the buffer");
	OK(cuMemsetD32(dc, 0x3f800000, N)); /* 1.0f: a pattern of four different bytes */
	OK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
	check(c[0] == 1.0f && c[N / 2] == 1.0f && c[N - 1] == 1.0f, "cuMemsetD32 wrote 1.0f everywhere");
	OK(cuMemsetD16(dc, 0x1234, 2 * N));
	OK(cuMemcpyDtoH(c, dc, 8));
	check(((unsigned short *)c)[0] == 0x1234 && ((unsigned short *)c)[3] == 0x1234,
	      "cuMemsetD16 wrote its pattern");
	EXPECT(cuMemsetD32(dc + 2, 0, 4), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemsetD8(dc, 0xff, 4));
	OK(cuMemcpyDtoD(dc + 4, da + 4, 8));
	OK(cuMemcpyDtoH(c, dc, 12));
	check(((unsigned char *)c)[0] == 0xff && c[1] == a[1] && c[2] == a[2],
	      "cuMemsetD8 and cuMemcpyDtoD wrote what they should");

	/* A PTX module: JIT-compiled for the device by its driver. */
	r = cuModuleLoadData(&mod, ptx);
	if (r == CUDA_ERROR_NO_BINARY_FOR_GPU) {
		printf("SKIP: drvapi: no kernel support on this device (%s)\n", name(r));
		return failed ? 1 : 77;
	}
	check(r == CUDA_SUCCESS, "cuModuleLoadData(&mod, ptx) -> %s", name(r));
	OK(cuModuleGetFunction(&vadd, mod, "vadd"));
	OK(cuModuleGetFunction(&bump, mod, "bump"));
	EXPECT(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	OK(cuModuleGetGlobal(&gptr, &gsize, mod, "counter"));
	check(gsize == 4, "the global's size is 4");
	{
		CUdeviceptr none;

		EXPECT(cuModuleGetGlobal(&none, NULL, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND);
	}

	/* cuLaunchKernel with parameter pointers. */
	{
		void *params[] = { &da, &db, &dc, &n };

		OK(cuLaunchKernel(vadd, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
		OK(cuCtxSynchronize());
		OK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
		check(sums_ok(a, b, c), "vadd through kernel parameters: c = a + b");
		EXPECT(cuLaunchKernel(vadd, 0, 1, 1, 256, 1, 1, 0, NULL, params, NULL), CUDA_ERROR_INVALID_VALUE);
	}

	/* The packed form: the parameters laid out as the kernel takes them. */
	{
		struct {
			CUdeviceptr a, b, c;
			unsigned int n;
		} packed = { da, da, dc, N };
		size_t size = 28; /* 3 pointers and an int, no tail padding */
		void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
				  CU_LAUNCH_PARAM_END };

		OK(cuMemsetD32(dc, 0, N));
		OK(cuLaunchKernel(vadd, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
		OK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
		check(sums_ok(a, a, c), "vadd through the extra buffer: c = a + a");
	}

	/* cuLaunchKernelEx on a stream, timed with events; the global. */
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
	OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
	OK(cuMemsetD32(gptr, 0, 1));
	OK(cuEventRecord(e0, s));
	for (by = 1; by <= 10; by++) {
		void *params[] = { &by };
		/* NCCL's hints on every launch of its kernels (enqueue.cc): accepted. */
		CUlaunchAttribute hints[2] = {
			{ .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
			  .value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD },
			{ .id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
			  .value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE },
		};
		CUlaunchConfig cfg = { .gridDimX = 4,
				       .gridDimY = 1,
				       .gridDimZ = 1,
				       .blockDimX = 32,
				       .blockDimY = 1,
				       .blockDimZ = 1,
				       .hStream = s,
				       .attrs = by % 2 ? hints : NULL,
				       .numAttrs = by % 2 ? 2 : 0 };

		OK(cuLaunchKernelEx(&cfg, bump, params, NULL));
	}
	OK(cuEventRecord(e1, s));
	OK(cuEventSynchronize(e1));
	{
		float ms = -1;
		unsigned int total = 0;

		OK(cuEventElapsedTime(&ms, e0, e1));
		check(ms >= 0, "elapsed time >= 0");
		OK(cuMemcpyDtoH(&total, gptr, 4));
		check(total == 55 * 128, "the global counted every thread of 10 launches: %u", total);
	}
	OK(cuStreamSynchronize(s));
	OK(cuStreamQuery(s));

	/* Attributes and occupancy. */
	{
		int threads = 0, regs = -1;

		OK(cuFuncGetAttribute(&threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, vadd));
		check(threads >= 256, "vadd takes blocks of 256");
		OK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, vadd));
		check(regs > 0, "vadd uses registers");
		OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, vadd, 256, 0));
		check(blocks >= 1, "at least one block of 256 per multiprocessor");
	}

	/* A library: loaded lazily, its kernel looked up by name. */
	OK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&kern, lib, "vadd"));
	EXPECT(cuLibraryGetKernel(&kern, lib, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	OK(cuLibraryGetKernel(&kern, lib, "vadd"));
	OK(cuKernelGetFunction(&f, kern));
	{
		void *params[] = { &db, &db, &dc, &n };

		OK(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, s, params, NULL));
		OK(cuStreamSynchronize(s));
		OK(cuMemcpyDtoH(c, dc, N * sizeof(float)));
		check(sums_ok(b, b, c), "vadd of the library: c = b + b");
	}
	OK(cuLibraryUnload(lib));

	/* A cubin, from its file and from memory: x *= 2, then x *= 0.5. */
	{
		char path[4096];
		ssize_t len = readlink("/proc/self/exe", path, sizeof(path) - 32);
		CUmodule cm, cm2;
		CUfunction sc;
		float two = 2.0f, half = 0.5f;
		void *p1[] = { &db, &two, &n }, *p2[] = { &db, &half, &n };
		FILE *f;
		static char image[1 << 20];
		size_t got = 0;

		path[len > 0 ? len : 0] = 0;
		strcpy(strrchr(path, '/') ? strrchr(path, '/') + 1 : path, "drvapi.cubin");
		OK(cuModuleLoad(&cm, path));
		OK(cuModuleGetFunction(&sc, cm, "scale"));
		OK(cuLaunchKernel(sc, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, p1, NULL));
		OK(cuMemcpyDtoH(c, db, N * sizeof(float)));
		check(c[0] == 2 * b[0] && c[N - 1] == 2 * b[N - 1] && c[N / 3] == 2 * b[N / 3],
		      "the cubin's kernel doubled b");
		f = fopen(path, "rb");
		if (f) {
			got = fread(image, 1, sizeof(image), f);
			fclose(f);
		}
		check(got > 0, "read the cubin");
		OK(cuModuleLoadData(&cm2, image));
		OK(cuModuleGetFunction(&sc, cm2, "scale"));
		OK(cuLaunchKernel(sc, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, p2, NULL));
		OK(cuMemcpyDtoH(c, db, N * sizeof(float)));
		check(c[0] == b[0] && c[N - 1] == b[N - 1], "the cubin loaded from memory halved it back");
		EXPECT(cuModuleLoad(&cm2, "/nonexistent/drvapi.cubin"), CUDA_ERROR_FILE_NOT_FOUND);
		OK(cuModuleUnload(cm));
	}

	/* Error names and strings. */
	OK(cuGetErrorName(CUDA_ERROR_INVALID_VALUE, &str));
	check(!strcmp(str, "CUDA_ERROR_INVALID_VALUE"), "cuGetErrorName: %s", str);
	OK(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &str));
	check(!strcmp(str, "out of memory"), "cuGetErrorString: %s", str);
	EXPECT(cuGetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);

	/* Tear down. */
	OK(cuEventDestroy(e0));
	OK(cuEventDestroy(e1));
	OK(cuStreamDestroy(s));
	OK(cuModuleUnload(mod));
	OK(cuMemFree(da));
	OK(cuMemFree(db));
	OK(cuMemFree(dc));
	OK(cuCtxDestroy(ctx));
	OK(cuCtxGetCurrent(&cur));
	check(cur == NULL, "no current context after the destroy");
	free(a);
	free(b);
	free(c);
	return finish("drvapi");
}
