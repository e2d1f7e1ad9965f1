/* SPDX-License-Identifier: MIT */
/*
 * Shared by test/guest/multimodule.cu and its other translation units
 * (parts/multimodule_a.cu, parts/multimodule_b.cu), each compiled on its own
 * (no -rdc): three fat binaries, three modules. Each TU has a static kernel
 * `scale`, a static __device__ `counter`, a static __constant__ `coef` (the
 * main TU's are not static, same names), a namespaced kernel `fill` and an
 * anonymous-namespace kernel `tag`, so that every one of those names exists
 * in several modules, and hands out pointers to its kernels for the main TU
 * to launch.
 */
#ifndef MULTIMODULE_H
#define MULTIMODULE_H

#include <cuda_runtime_api.h>

typedef void (*mm_kernel)(unsigned *p, int n);

/* Instantiated identically in every TU: the linker keeps one host stub,
 * which every module registers. */
template <int K> __global__ void add_k(unsigned *p, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] += K;
}

/* Part A: scale is p = p * 3 + coef[i % 4], fill is p = 10 i + 1, tag is p ^= 0xa0a0. */
cudaError_t part_a_init(void); /* sets A's coef = {11, 12, 13, 14}, counter = 0 */
cudaError_t part_a_scale(unsigned *d, int n, cudaStream_t s); /* launches A's scale in A */
cudaError_t part_a_counter(unsigned *v); /* A's counter: threads that ran A's scale */
cudaError_t part_a_counter_address(void **p);
cudaError_t part_a_add7(unsigned *d, int n); /* add_k<7>, launched in A */
mm_kernel part_a_scale_ptr(void);
mm_kernel part_a_fill_ptr(void);
mm_kernel part_a_tag_ptr(void);

/* Part B: scale is p = p * 5 + coef[i % 4], fill is p = 20 i + 2, tag is p ^= 0x0b0b. */
cudaError_t part_b_init(void); /* sets B's coef = {21, 22, 23, 24}, counter = 0 */
cudaError_t part_b_scale(unsigned *d, int n, cudaStream_t s);
cudaError_t part_b_counter(unsigned *v);
cudaError_t part_b_counter_address(void **p);
cudaError_t part_b_add7(unsigned *d, int n);
mm_kernel part_b_scale_ptr(void);
mm_kernel part_b_fill_ptr(void);
mm_kernel part_b_tag_ptr(void);

#endif
