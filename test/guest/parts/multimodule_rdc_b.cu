// SPDX-License-Identifier: MIT
// Part B of multimodule_rdc (see parts/multimodule_rdc.h).
#include "multimodule_rdc.h"

__device__ unsigned rdc_total;
__constant__ unsigned rdc_coef[4];

__device__ unsigned rdc_twice(unsigned x)
{
	return 2 * x;
}

__device__ unsigned (*rdc_op)(unsigned) = rdc_twice;

__global__ void rdc_kernel_b(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = rdc_twice(p[i]) + rdc_coef[i % 4];
		atomicAdd(&rdc_total, 1u);
	}
}

static __global__ void scale(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = p[i] * 5 + 2;
}

rdc_kernel rdc_b_scale_ptr(void)
{
	return scale;
}
