// SPDX-License-Identifier: MIT
// launch: a program with kernels and device variables loads (its fat binary,
// kernels and variables register), and a launch either runs (NVIDIA's
// runtime) or fails cleanly with cudaErrorNotSupported (qcuda, which has no
// launch command yet): no crash, no fake success, and the context stays
// usable.
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
	cudaError_t launch, after;

	qt_begin("launch");
	for (int i = 0; i < n; i++)
		h[i] = i;
	EXPECT(cudaMalloc(&d, n * sizeof(int)), cudaSuccess);
	EXPECT(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
	add_one<<<(n + 255) / 256, 256>>>(d, n);
	launch = cudaGetLastError();
	after = cudaDeviceSynchronize();
	/* The same line either way, so that native and guest output diff. */
	if (!qt_check(qt_on_qcuda() ? launch == cudaErrorNotSupported : launch == cudaSuccess,
		      "launch: runs (NVIDIA) or fails with cudaErrorNotSupported (qcuda)"))
		printf("     (got %s)\n", cudaGetErrorName(launch));
	qt_check(after == cudaSuccess, "the context is usable after the launch");
	EXPECT(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	{
		int ran = 0, untouched = 0;
		for (int i = 0; i < n; i++)
			ran += h[i] == i + 1, untouched += h[i] == i;
		qt_check(ran == n || (qt_on_qcuda() && untouched == n),
			 "the data is either all updated or, where launches fail, untouched");
	}
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
