/* SPDX-License-Identifier: MIT */
/*
 * rtbasic's kernel (test/windows/rtbasic.c), built by nvcc into a fat
 * binary that rtbasic embeds and registers as nvcc's generated host code
 * would. extern "C": its device name is its source name.
 */
extern "C" __global__ void qc_fill(unsigned *out, unsigned seed, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		out[i] = seed ^ ((unsigned)i * 2654435761u);
}
