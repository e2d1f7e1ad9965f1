/* SPDX-License-Identifier: MIT */
/*
 * cublas_sgemm: NVIDIA's cuBLAS (libcublas.so.13 and libcublasLt.so.13,
 * each with its own static CUDA runtime over libcuda.so.1) multiplies
 * matrices in memory the driver API allocated: sgemm at three shapes, with
 * and without transposes, on the NULL stream and a created one. Entries
 * are small integers, so every product is exact whatever order the GPU sums
 * in, and checked element by element against the CPU. cuBLAS is opened at
 * run time (the project builds no cuBLAS headers in); on a machine without
 * it the program says SKIP (exit 77).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*create_fn)(void **handle);
typedef int (*destroy_fn)(void *handle);
typedef int (*set_stream_fn)(void *handle, CUstream s);
typedef int (*sgemm_fn)(void *handle, int transa, int transb, int m, int n, int k, const float *alpha,
			const float *A, int lda, const float *B, int ldb, const float *beta, float *C, int ldc);

static int checks, failed;

static void check(int ok, const char *what, int status)
{
	checks++;
	failed += !ok;
	printf("%s %s -> %d\n", ok ? "ok  " : "FAIL", what, status);
}

/* C = op(A) * op(B) in column-major order, as BLAS defines it. */
static void reference(int ta, int tb, int m, int n, int k, const float *A, const float *B, float *C)
{
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0;

			for (int p = 0; p < k; p++)
				s += (ta ? A[p + i * k] : A[i + p * m]) * (tb ? B[j + p * n] : B[p + j * k]);
			C[i + j * m] = s;
		}
}

static int gemm(void *h, sgemm_fn sgemm, CUstream s, int ta, int tb, int m, int n, int k)
{
	size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
	float *A = malloc(na * 4), *B = malloc(nb * 4), *C = malloc(nc * 4), *R = malloc(nc * 4);
	const float one = 1, zero = 0;
	CUdeviceptr dA, dB, dC;
	char what[128];
	int st, bad = 0;

	for (size_t i = 0; i < na; i++)
		A[i] = (float)((int)(i * 7 % 5) - 2);
	for (size_t i = 0; i < nb; i++)
		B[i] = (float)((int)(i * 3 % 5) - 2);
	reference(ta, tb, m, n, k, A, B, R);
	if (cuMemAlloc(&dA, na * 4) || cuMemAlloc(&dB, nb * 4) || cuMemAlloc(&dC, nc * 4) ||
	    cuMemcpyHtoD(dA, A, na * 4) || cuMemcpyHtoD(dB, B, nb * 4) || cuMemsetD32(dC, 0, nc)) {
		printf("FAIL device memory for %dx%dx%d\n", m, n, k);
		failed++;
		return 1;
	}
	st = sgemm(h, ta, tb, m, n, k, &one, (const float *)(uintptr_t)dA, ta ? k : m,
		   (const float *)(uintptr_t)dB, tb ? n : k, &zero, (float *)(uintptr_t)dC, m);
	snprintf(what, sizeof(what), "cublasSgemm %c%c %dx%dx%d%s", ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k,
		 s ? " on a stream" : "");
	check(st == 0, what, st);
	if (cuCtxSynchronize() || cuMemcpyDtoH(C, dC, nc * 4)) {
		printf("FAIL reading the result back\n");
		failed++;
	} else {
		for (size_t i = 0; i < nc; i++)
			bad += C[i] != R[i];
		snprintf(what, sizeof(what), "%dx%d result equals the CPU's, element by element (wrong:", m, n);
		check(bad == 0, what, bad);
	}
	cuMemFree(dA);
	cuMemFree(dB);
	cuMemFree(dC);
	free(A);
	free(B);
	free(C);
	free(R);
	return 0;
}

int main(void)
{
	void *lib = dlopen("libcublas.so.13", RTLD_NOW), *h = NULL;
	create_fn create;
	destroy_fn destroy;
	set_stream_fn set_stream;
	sgemm_fn sgemm;
	CUcontext ctx;
	CUstream s;
	int st;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# cublas_sgemm\n");
	if (!lib) {
		printf("SKIP: cublas_sgemm: no libcublas.so.13 here\n");
		return 77;
	}
	create = (create_fn)dlsym(lib, "cublasCreate_v2");
	destroy = (destroy_fn)dlsym(lib, "cublasDestroy_v2");
	set_stream = (set_stream_fn)dlsym(lib, "cublasSetStream_v2");
	sgemm = (sgemm_fn)dlsym(lib, "cublasSgemm_v2");
	if (!create || !destroy || !set_stream || !sgemm || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
	    cuCtxSetCurrent(ctx)) {
		printf("FAIL: cublas_sgemm: cuBLAS entry points or a context missing\n");
		return 1;
	}
	st = create(&h);
	check(st == 0, "cublasCreate", st);
	if (st)
		return 1;
	gemm(h, sgemm, NULL, 0, 0, 256, 256, 256);
	gemm(h, sgemm, NULL, 1, 0, 384, 320, 512);
	gemm(h, sgemm, NULL, 0, 1, 1000, 30, 77);
	cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
	st = set_stream(h, s);
	check(st == 0, "cublasSetStream", st);
	gemm(h, sgemm, s, 1, 1, 512, 512, 512);
	st = destroy(h);
	check(st == 0, "cublasDestroy", st);
	cuStreamDestroy(s);
	cuDevicePrimaryCtxRelease(0);
	if (failed)
		printf("FAIL: cublas_sgemm: %d of %d checks failed\n", failed, checks);
	else
		printf("PASS: cublas_sgemm: %d checks\n", checks);
	return failed ? 1 : 0;
}
