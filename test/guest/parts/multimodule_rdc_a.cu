// SPDX-License-Identifier: MIT
// Part A of multimodule_rdc (see parts/multimodule_rdc.h).
#include "multimodule_rdc.h"

__device__ unsigned rdc_a_calls;

__device__ unsigned rdc_plus_coef(unsigned x, int i)
{
	atomicAdd(&rdc_a_calls, 1u);
	return x + rdc_coef[i % 4];
}

__global__ void rdc_kernel_a(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = rdc_plus_coef(rdc_twice(p[i]), i) + 1;
		atomicAdd(&rdc_total, 1u);
	}
}

static __global__ void scale(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = p[i] * 3 + 1;
}

rdc_kernel rdc_a_scale_ptr(void)
{
	return scale;
}
