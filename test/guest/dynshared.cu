// SPDX-License-Identifier: MIT
// dynshared: dynamic shared memory (extern __shared__) of launch-time sizes,
// from 4 bytes to 48 KB, alongside static shared memory.
#include "qctest.h"

extern __shared__ int dyn[];

/* Each block reverses its slice of n ints through shared memory. */
__global__ void reverse_blocks(const int *in, int *out, int per_block)
{
	__shared__ int bias;
	const int *src = in + blockIdx.x * per_block;
	int *dst = out + blockIdx.x * per_block;

	if (threadIdx.x == 0)
		bias = (int)blockIdx.x;
	for (int i = threadIdx.x; i < per_block; i += blockDim.x)
		dyn[i] = src[i];
	__syncthreads();
	for (int i = threadIdx.x; i < per_block; i += blockDim.x)
		dst[i] = dyn[per_block - 1 - i] + bias;
}

int main(void)
{
	static const int sizes[] = { 1, 7, 256, 1000, 4096, 12000 }; /* ints per block: 48 KB with the static int */
	const int blocks = 5, max = 12000;
	int *h_in = (int *)malloc(blocks * max * sizeof(int)), *h_out = (int *)malloc(blocks * max * sizeof(int));
	int *d_in, *d_out;

	qt_begin("dynshared");
	for (int i = 0; i < blocks * max; i++)
		h_in[i] = i * 3 + 1;
	EXPECT(cudaMalloc(&d_in, blocks * max * sizeof(int)), cudaSuccess);
	EXPECT(cudaMalloc(&d_out, blocks * max * sizeof(int)), cudaSuccess);
	EXPECT(cudaMemcpy(d_in, h_in, blocks * max * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
	for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
		int per = sizes[t];
		bool ok = true;

		EXPECT(cudaMemset(d_out, 0, blocks * max * sizeof(int)), cudaSuccess);
		reverse_blocks<<<blocks, 128, per * sizeof(int)>>>(d_in, d_out, per);
		if (t == 0)
			FIRST_KERNEL_USE(cudaGetLastError());
		else
			OK(cudaGetLastError());
		OK(cudaMemcpy(h_out, d_out, blocks * per * sizeof(int), cudaMemcpyDeviceToHost));
		for (int b = 0; b < blocks; b++)
			for (int i = 0; i < per; i++)
				ok &= h_out[b * per + i] == h_in[b * per + per - 1 - i] + b;
		qt_check(ok, "%d blocks reverse %d ints each in %zu bytes of dynamic shared memory", blocks, per,
			 per * sizeof(int));
	}
	EXPECT(cudaFree(d_in), cudaSuccess);
	EXPECT(cudaFree(d_out), cudaSuccess);
	free(h_in), free(h_out);
	return qt_end();
}
