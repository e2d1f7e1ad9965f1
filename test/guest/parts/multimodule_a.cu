// SPDX-License-Identifier: MIT
// Part A of multimodule (see parts/multimodule.h): its own fat binary, with
// kernels and variables whose names the other modules use too.
#include "multimodule.h"

static __constant__ unsigned coef[4];
static __device__ unsigned counter;

static __global__ void scale(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = p[i] * 3 + coef[i % 4];
		atomicAdd(&counter, 1u);
	}
}

namespace mm_a
{
__global__ void fill(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = (unsigned)i * 10 + 1;
}
} // namespace mm_a

namespace
{
__global__ void tag(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] ^= 0xa0a0u;
}
} // namespace

cudaError_t part_a_init(void)
{
	const unsigned c[4] = { 10 + 1, 10 + 2, 10 + 3, 10 + 4 }, zero = 0;
	cudaError_t e = cudaMemcpyToSymbol(coef, c, sizeof(c));

	return e != cudaSuccess ? e : cudaMemcpyToSymbol(counter, &zero, sizeof(zero));
}

cudaError_t part_a_scale(unsigned *d, int n, cudaStream_t s)
{
	scale<<<(n + 255) / 256, 256, 0, s>>>(d, n);
	return cudaGetLastError();
}

cudaError_t part_a_counter(unsigned *v)
{
	return cudaMemcpyFromSymbol(v, counter, sizeof(*v));
}

cudaError_t part_a_counter_address(void **p)
{
	return cudaGetSymbolAddress(p, counter);
}

cudaError_t part_a_add7(unsigned *d, int n)
{
	add_k<7><<<(n + 255) / 256, 256>>>(d, n);
	return cudaGetLastError();
}

mm_kernel part_a_scale_ptr(void)
{
	return scale;
}

mm_kernel part_a_fill_ptr(void)
{
	return mm_a::fill;
}

mm_kernel part_a_tag_ptr(void)
{
	return tag;
}
