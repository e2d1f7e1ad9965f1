// SPDX-License-Identifier: MIT
// multimodule_rdc: relocatable device code. Three translation units (this
// one, parts/multimodule_rdc_a.cu, parts/multimodule_rdc_b.cu) built with
// nvcc -rdc=true and linked on the device: nvcc's link stub registers ONE
// linked fat binary (__cudaRegisterLinkedBinary_* of each TU collect the
// TUs' registrations for it). Checks: kernels calling __device__ functions of
// other TUs (B's rdc_twice from A and from here, A's rdc_plus_coef from
// here), a __device__ function pointer defined in B called here, a
// __constant__ array defined in B set from here with cudaMemcpyToSymbol
// (extern) and read by kernels of all three TUs, a __device__ counter of B
// counted by kernels of all TUs and read here, a kernel defined in B launched
// here by name (extern __global__) and static kernels named `scale` in A and
// B (nvcc gives them distinct names in the linked module) launched here
// through pointers.
#include "qctest.h"
#include "parts/multimodule_rdc.h"

#define N 10000

/* p = op(p) + plus_coef(0, i): twice through B's function pointer, A's coef helper. */
__global__ void rdc_kernel_main(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = rdc_op(p[i]) + rdc_plus_coef(0, i);
		atomicAdd(&rdc_total, 1u);
	}
}

static unsigned h[N], g[N];

static unsigned init(int i)
{
	return (unsigned)i * 2654435761u;
}

static void upload(unsigned *d)
{
	for (int i = 0; i < N; i++)
		h[i] = init(i);
	OK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
}

/* g = d; index of the first g[i] != want, or -1. */
#define FIRST_BAD(d, want)                                               \
	({                                                               \
		long long _bad = -1;                                     \
		OK(cudaMemcpy(g, d, sizeof(g), cudaMemcpyDeviceToHost)); \
		for (int i = 0; i < N; i++)                              \
			if (g[i] != (unsigned)(want)) {                  \
				_bad = i;                                \
				break;                                   \
			}                                                \
		_bad;                                                    \
	})

int main(void)
{
	const unsigned coef[4] = { 100, 200, 300, 400 }, zero = 0;
	unsigned *d = NULL, total = ~0u, acalls = ~0u;
	long long bad;
	const int blocks = (N + 255) / 256;

	qt_begin("multimodule_rdc");
	EXPECT(cudaMalloc(&d, sizeof(h)), cudaSuccess);
	upload(d);
	FIRST_KERNEL_USE(cudaMemcpyToSymbol(rdc_coef, coef, sizeof(coef)));
	EXPECT(cudaMemcpyToSymbol(rdc_total, &zero, sizeof(zero)), cudaSuccess);
	EXPECT(cudaMemcpyToSymbol(rdc_a_calls, &zero, sizeof(zero)), cudaSuccess);

	rdc_kernel_main<<<blocks, 256>>>(d, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	bad = FIRST_BAD(d, init(i) * 2 + coef[i % 4]);
	qt_check(bad < 0, "this TU's kernel: B's function pointer and A's coef helper (first bad %lld)", bad);

	upload(d);
	rdc_kernel_a<<<blocks, 256>>>(d, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	bad = FIRST_BAD(d, init(i) * 2 + coef[i % 4] + 1);
	qt_check(bad < 0, "A's kernel calling B's rdc_twice and its own helper (first bad %lld)", bad);

	upload(d);
	rdc_kernel_b<<<blocks, 256>>>(d, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	bad = FIRST_BAD(d, init(i) * 2 + coef[i % 4]);
	qt_check(bad < 0, "B's kernel launched from here by its extern declaration (first bad %lld)", bad);

	EXPECT(cudaMemcpyFromSymbol(&total, rdc_total, sizeof(total)), cudaSuccess);
	EXPECT(cudaMemcpyFromSymbol(&acalls, rdc_a_calls, sizeof(acalls)), cudaSuccess);
	qt_check(total == 3 * N && acalls == 2 * N,
		 "B's counter counted the kernels of all three TUs, A's its helper's calls (%u, %u)", total, acalls);

	/* The two static kernels called scale. */
	{
		rdc_kernel sa = rdc_a_scale_ptr(), sb = rdc_b_scale_ptr();
		int n = N;
		void *args[] = { &d, &n };

		qt_check(sa != sb, "the static scale kernels of A and B are distinct host stubs");
		upload(d);
		sa<<<blocks, 256>>>(d, N);
		EXPECT(cudaGetLastError(), cudaSuccess);
		EXPECT(cudaLaunchKernel((const void *)sb, dim3(blocks), dim3(256), args, 0, 0), cudaSuccess);
		bad = FIRST_BAD(d, (init(i) * 3 + 1) * 5 + 2);
		qt_check(bad < 0, "A's static scale then B's, through pointers (first bad %lld)", bad);
	}

	/* A different constant, seen by every TU's kernel at once. */
	{
		const unsigned c2[4] = { 7, 7, 7, 7 };

		EXPECT(cudaMemcpyToSymbol(rdc_coef, c2, sizeof(c2)), cudaSuccess);
		upload(d);
		rdc_kernel_main<<<blocks, 256>>>(d, N);
		rdc_kernel_a<<<blocks, 256>>>(d, N);
		rdc_kernel_b<<<blocks, 256>>>(d, N);
		EXPECT(cudaGetLastError(), cudaSuccess);
		bad = FIRST_BAD(d, ((init(i) * 2 + 7) * 2 + 7 + 1) * 2 + 7);
		qt_check(bad < 0,
			 "after a new cudaMemcpyToSymbol of B's constant, all three kernels use it "
			 "(first bad %lld)",
			 bad);
	}

	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
