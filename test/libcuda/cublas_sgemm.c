/* SPDX-License-Identifier: MIT */
/*
 * cublas_sgemm: NVIDIA's cuBLAS (libcublas.so.13 and libcublasLt.so.13,
 * each with its own static CUDA runtime over libcuda.so.1) multiplies
 * matrices in memory the driver API allocated: sgemm at four shapes, with
 * and without transposes, on the NULL stream and a created one, and dgemm.
 * `cublas_sgemm bench` times sgemm 4096x4096x4096 instead and prints
 * {"gflops": N} (the GPU run compares the guest with native). Entries
 * are small integers, so every product is exact whatever order the GPU sums
 * in, and checked element by element against the CPU. cuBLAS is opened at
 * run time (the project builds no cuBLAS headers in); on a machine without
 * it the program says SKIP (exit 77).
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*create_fn)(void **handle);
typedef int (*destroy_fn)(void *handle);
typedef int (*set_stream_fn)(void *handle, CUstream s);
typedef int (*sgemm_fn)(void *handle, int transa, int transb, int m, int n, int k, const float *alpha, const float *A,
			int lda, const float *B, int ldb, const float *beta, float *C, int ldc);
typedef int (*dgemm_fn)(void *handle, int transa, int transb, int m, int n, int k, const double *alpha, const double *A,
			int lda, const double *B, int ldb, const double *beta, double *C, int ldc);

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
	st = sgemm(h, ta, tb, m, n, k, &one, (const float *)(uintptr_t)dA, ta ? k : m, (const float *)(uintptr_t)dB,
		   tb ? n : k, &zero, (float *)(uintptr_t)dC, m);
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

/* dgemm once: C = A * B, 300x200x100, integer-valued entries, exact. */
static void dgemm_check(void *h, dgemm_fn dgemm)
{
	enum { M = 300, N = 200, K = 100 };
	static double A[M * K], B[K * N], C[M * N];
	const double one = 1, zero = 0;
	CUdeviceptr dA, dB, dC;
	int st, bad = 0;

	for (int i = 0; i < M * K; i++)
		A[i] = (i * 7 % 9) - 4;
	for (int i = 0; i < K * N; i++)
		B[i] = (i * 5 % 7) - 3;
	if (cuMemAlloc(&dA, sizeof(A)) || cuMemAlloc(&dB, sizeof(B)) || cuMemAlloc(&dC, sizeof(C)) ||
	    cuMemcpyHtoD(dA, A, sizeof(A)) || cuMemcpyHtoD(dB, B, sizeof(B))) {
		printf("FAIL device memory for dgemm\n");
		failed++;
		return;
	}
	st = dgemm(h, 0, 0, M, N, K, &one, (const double *)(uintptr_t)dA, M, (const double *)(uintptr_t)dB, K, &zero,
		   (double *)(uintptr_t)dC, M);
	check(st == 0, "cublasDgemm NN 300x200x100", st);
	if (cuMemcpyDtoH(C, dC, sizeof(C)) == CUDA_SUCCESS) {
		for (int j = 0; j < N; j++)
			for (int i = 0; i < M; i++) {
				double s = 0;

				for (int p = 0; p < K; p++)
					s += A[i + p * M] * B[p + j * K];
				bad += C[i + j * M] != s;
			}
		check(bad == 0, "dgemm result equals the CPU's, element by element (wrong:", bad);
	}
	cuMemFree(dA);
	cuMemFree(dB);
	cuMemFree(dC);
}

/* sgemm 4096^3, 20 timed after 3 warm-up runs: GFLOP/s. */
static int bench(void *h, sgemm_fn sgemm)
{
	const int n = 4096, reps = 20;
	const float one = 1, zero = 0;
	CUdeviceptr dA, dB, dC;
	CUevent e0, e1;
	float ms = 0;

	if (cuMemAlloc(&dA, (size_t)n * n * 4) || cuMemAlloc(&dB, (size_t)n * n * 4) ||
	    cuMemAlloc(&dC, (size_t)n * n * 4) || cuMemsetD32(dA, 0x3f800000, (size_t)n * n) ||
	    cuMemsetD32(dB, 0x3f800000, (size_t)n * n) || cuEventCreate(&e0, 0) || cuEventCreate(&e1, 0))
		return 1;
	for (int i = 0; i < 3 + reps; i++) {
		if (i == 3)
			cuEventRecord(e0, NULL);
		if (sgemm(h, 0, 0, n, n, n, &one, (const float *)(uintptr_t)dA, n, (const float *)(uintptr_t)dB, n,
			  &zero, (float *)(uintptr_t)dC, n))
			return 1;
	}
	cuEventRecord(e1, NULL);
	cuEventSynchronize(e1);
	cuEventElapsedTime(&ms, e0, e1);
	printf("{\"gflops\": %.1f, \"ms_per_sgemm\": %.3f}\n", 2.0 * n * n * n * reps / (ms * 1e6), ms / reps);
	return 0;
}

int main(int argc, char **argv)
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
	if (argc < 2)
		printf("# cublas_sgemm\n");
	if (!lib) {
		printf("SKIP: cublas_sgemm: no libcublas.so.13 here\n");
		return 77;
	}
	create = (create_fn)dlsym(lib, "cublasCreate_v2");
	destroy = (destroy_fn)dlsym(lib, "cublasDestroy_v2");
	set_stream = (set_stream_fn)dlsym(lib, "cublasSetStream_v2");
	sgemm = (sgemm_fn)dlsym(lib, "cublasSgemm_v2");
	dgemm_fn dgemm = (dgemm_fn)dlsym(lib, "cublasDgemm_v2");
	if (!create || !destroy || !set_stream || !sgemm || !dgemm || cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) ||
	    cuCtxSetCurrent(ctx)) {
		printf("FAIL: cublas_sgemm: cuBLAS entry points or a context missing\n");
		return 1;
	}
	if (argc > 1 && !strcmp(argv[1], "bench")) {
		if (create(&h) || bench(h, sgemm)) {
			printf("{\"error\": \"cuBLAS failed\"}\n");
			return 1;
		}
		return 0;
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
	dgemm_check(h, dgemm);
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
