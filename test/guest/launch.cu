// SPDX-License-Identifier: MIT
// launch: the basics of a launch: a kernel with device variables runs, the
// <<<>>> configuration errors (zero-sized grid or block: cudaErrorInvalidValue
// in CUDA 13) are reported at the launch, and the context stays usable.
#include "qctest.h"

__device__ int counter;
__constant__ int table[4];

__global__ void add_one(int *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] += 1 + table[i % 4] * 0;
}

int main(void)
{
	const int n = 1000;
	int h[n], *d = NULL;

	qt_begin("launch");
	for (int i = 0; i < n; i++)
		h[i] = i;
	EXPECT(cudaMalloc(&d, n * sizeof(int)), cudaSuccess);
	EXPECT(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
	add_one<<<(n + 255) / 256, 256>>>(d, n);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	{
		int ran = 0;
		for (int i = 0; i < n; i++)
			ran += h[i] == i + 1;
		qt_check(ran == n, "every element was incremented once");
	}
	add_one<<<0, 256>>>(d, n);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	add_one<<<1, 0>>>(d, n);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
