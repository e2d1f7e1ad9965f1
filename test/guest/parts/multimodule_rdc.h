/* SPDX-License-Identifier: MIT */
/*
 * Shared by test/guest/multimodule_rdc.cu and its other translation units
 * (parts/multimodule_rdc_a.cu, parts/multimodule_rdc_b.cu), compiled with
 * -rdc=true and linked on the device (nvcc's device link): one linked module,
 * registered through __cudaRegisterLinkedBinary_* by every TU. Device
 * functions and variables defined in one TU are used by the others.
 */
#ifndef MULTIMODULE_RDC_H
#define MULTIMODULE_RDC_H

#include <cuda_runtime_api.h>

typedef void (*rdc_kernel)(unsigned *p, int n);

/* Defined in part B. */
extern __device__ unsigned rdc_twice(unsigned x);
extern __device__ unsigned rdc_total; /* atomically counted by every kernel */
extern __constant__ unsigned rdc_coef[4];
extern __device__ unsigned (*rdc_op)(unsigned); /* points to rdc_twice */
__global__ void rdc_kernel_b(unsigned *p, int n); /* p = twice(p) + coef[i % 4] */

/* Defined in part A. */
extern __device__ unsigned rdc_plus_coef(unsigned x, int i); /* x + rdc_coef[i % 4] */
extern __device__ unsigned rdc_a_calls; /* part A's own counter */
__global__ void rdc_kernel_a(unsigned *p, int n); /* p = plus_coef(twice(p), i) + 1 */

/* Static kernels named `scale` in A and B (p = p * 3 + 1 in A, p * 5 + 2 in B). */
rdc_kernel rdc_a_scale_ptr(void);
rdc_kernel rdc_b_scale_ptr(void);

#endif
