// SPDX-License-Identifier: MIT
// errors: the last-error semantics (per thread; cudaGetLastError resets it,
// cudaPeekAtLastError does not; successful calls leave it alone), error
// names and strings of every cudaError_t, and the error paths of invalid
// arguments: bad devices, invalid/freed/double-freed pointers, NULL and
// special handles.
#include <pthread.h>
#include "qctest.h"

static void *other_thread(void *arg)
{
	void *p;

	(void)arg;
	EXPECT(cudaGetLastError(), cudaSuccess); /* main's error is not ours */
	EXPECT(cudaMalloc(&p, 1ull << 50), cudaErrorMemoryAllocation);
	EXPECT(cudaPeekAtLastError(), cudaErrorMemoryAllocation);
	return NULL;
}

static void last_error(void)
{
	pthread_t t;
	void *d = NULL;

	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaPeekAtLastError(), cudaSuccess);
	EXPECT(cudaSetDevice(99), cudaErrorInvalidDevice);
	EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaMalloc(&d, 64), cudaSuccess); /* success does not clear it */
	EXPECT(cudaPeekAtLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaMemcpy(d, d, 16, (cudaMemcpyKind)42), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaPeekAtLastError(), cudaErrorInvalidMemcpyDirection); /* the latest wins */
	pthread_create(&t, NULL, other_thread, NULL);
	pthread_join(t, NULL);
	EXPECT(cudaGetLastError(), cudaErrorInvalidMemcpyDirection); /* the thread's did not leak here */
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaPeekAtLastError(), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
}

static void names(void)
{
	/* Every value the CUDA 13 cudaError enum has, and a few it has not. */
	static const int codes[] = {
		0,   1,	  2,   3,   4,	 5,   6,   7,	8,   9,	  10,  11,  12,	  13,	 14,  15,  16,	17,  18,  19,
		20,  21,  22,  23,  24,	 25,  26,  27,	28,  29,  30,  31,  32,	  33,	 34,  35,  36,	37,  38,  39,
		40,  41,  42,  43,  44,	 45,  46,  49,	50,  51,  52,  53,  54,	  55,	 65,  66,  67,	68,  69,  98,
		99,  100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111,  112,	 113, 114, 115, 116, 117, 118,
		119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131,  132,	 133, 134, 135, 136, 137, 138,
		139, 140, 141, 200, 201, 205, 206, 207, 208, 209, 210, 211, 212,  213,	 214, 215, 216, 217, 218, 219,
		220, 221, 222, 223, 224, 225, 226, 227, 228, 300, 301, 302, 303,  304,	 400, 401, 402, 500, 600, 700,
		701, 702, 703, 704, 705, 706, 707, 708, 709, 710, 711, 712, 713,  714,	 715, 716, 717, 718, 719, 720,
		721, 800, 801, 802, 803, 804, 805, 806, 807, 808, 809, 810, 811,  812,	 900, 901, 902, 903, 904, 905,
		906, 907, 908, 909, 910, 911, 912, 913, 914, 915, 916, 999, 1000, 10000, -1,
	};

	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		printf("error %d: %s: %s\n", codes[i], cudaGetErrorName((cudaError_t)codes[i]),
		       cudaGetErrorString((cudaError_t)codes[i]));
	qt_check(!strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") &&
			 !strcmp(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument") &&
			 !strcmp(cudaGetErrorString(cudaSuccess), "no error"),
		 "error names and strings");
	qt_check(!strcmp(cudaGetErrorName((cudaError_t)12345), "unrecognized error code"), "unknown error codes");
}

static void bad_arguments(void)
{
	void *d = NULL, *p = NULL;
	char h[64];

	/* Devices. */
	EXPECT(cudaSetDevice(-1), cudaErrorInvalidDevice);
	{
		cudaDeviceProp prop;
		int v;
		EXPECT(cudaGetDeviceProperties(&prop, 1000), cudaErrorInvalidDevice);
		EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 1000), cudaErrorInvalidDevice);
	}
	/* Allocations. */
	EXPECT(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
	p = (void *)1;
	EXPECT(cudaMalloc(&p, 0), cudaSuccess);
	qt_check(p == NULL, "cudaMalloc of 0 bytes gives NULL");
	EXPECT(cudaMalloc(&p, 1ull << 50), cudaErrorMemoryAllocation);
	qt_check(p == NULL, "a failed cudaMalloc gives NULL");
	EXPECT(cudaMalloc(&d, 4096), cudaSuccess);
	EXPECT(cudaFree((char *)d + 1), cudaErrorInvalidValue);
	EXPECT(cudaFree(d), cudaSuccess);
	EXPECT(cudaFree(d), cudaErrorInvalidValue); /* double free */
	EXPECT(cudaFree(NULL), cudaSuccess);
	EXPECT(cudaFree(h), cudaErrorInvalidValue);
	EXPECT(cudaFree((void *)0x1234), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d, h, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue); /* freed */
	EXPECT(cudaMemcpy(h, d, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	/* Special and NULL handles. */
	EXPECT(cudaStreamDestroy(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamDestroy(cudaStreamPerThread), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventDestroy(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventQuery(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamCreate(NULL), cudaErrorInvalidValue);
	EXPECT(cudaEventCreate(NULL), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaSuccess);
	/* The context still works after all that. */
	EXPECT(cudaMalloc(&d, 16), cudaSuccess);
	EXPECT(cudaMemset(d, 0, 16), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
}

int main(void)
{
	qt_begin("errors");
	last_error();
	names();
	bad_arguments();
	return qt_end();
}
