// SPDX-License-Identifier: MIT
// Part B of multimodule (see parts/multimodule.h): its own fat binary, with
// kernels and variables whose names the other modules use too.
#include "multimodule.h"

static __constant__ unsigned coef[4];
static __device__ unsigned counter;

static __global__ void scale(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = p[i] * 5 + coef[i % 4];
		atomicAdd(&counter, 1u);
	}
}

namespace mm_b
{
__global__ void fill(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = (unsigned)i * 20 + 2;
}
} // namespace mm_b

namespace
{
__global__ void tag(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] ^= 0x0b0bu;
}
} // namespace

cudaError_t part_b_init(void)
{
	const unsigned c[4] = { 20 + 1, 20 + 2, 20 + 3, 20 + 4 }, zero = 0;
	cudaError_t e = cudaMemcpyToSymbol(coef, c, sizeof(c));

	return e != cudaSuccess ? e : cudaMemcpyToSymbol(counter, &zero, sizeof(zero));
}

cudaError_t part_b_scale(unsigned *d, int n, cudaStream_t s)
{
	scale<<<(n + 255) / 256, 256, 0, s>>>(d, n);
	return cudaGetLastError();
}

cudaError_t part_b_counter(unsigned *v)
{
	return cudaMemcpyFromSymbol(v, counter, sizeof(*v));
}

cudaError_t part_b_counter_address(void **p)
{
	return cudaGetSymbolAddress(p, counter);
}

cudaError_t part_b_add7(unsigned *d, int n)
{
	add_k<7><<<(n + 255) / 256, 256>>>(d, n);
	return cudaGetLastError();
}

mm_kernel part_b_scale_ptr(void)
{
	return scale;
}

mm_kernel part_b_fill_ptr(void)
{
	return mm_b::fill;
}

mm_kernel part_b_tag_ptr(void)
{
	return tag;
}
