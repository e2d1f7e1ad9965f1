// SPDX-License-Identifier: MIT
// vectorAdd: c = a + b over 1M floats (4096 blocks of 256 threads), checked
// element by element against the CPU's sums (IEEE addition is exact to the bit).
#include "qctest.h"

__global__ void vector_add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		c[i] = a[i] + b[i];
}

int main(void)
{
	const int n = 1 << 20;
	const size_t bytes = n * sizeof(float);
	float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
	float *da = NULL, *db = NULL, *dc = NULL;
	int bad = 0, first = -1;

	qt_begin("vectorAdd");
	for (int i = 0; i < n; i++) {
		a[i] = (float)i * 0.5f;
		b[i] = (float)(i % 1000) * 0.25f - 100.0f;
	}
	EXPECT(cudaMalloc(&da, bytes), cudaSuccess);
	EXPECT(cudaMalloc(&db, bytes), cudaSuccess);
	EXPECT(cudaMalloc(&dc, bytes), cudaSuccess);
	EXPECT(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemset(dc, 0xff, bytes), cudaSuccess);
	vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
	for (int i = 0; i < n; i++) {
		if (c[i] != a[i] + b[i]) {
			bad++;
			if (first < 0)
				first = i;
		}
	}
	if (!qt_check(bad == 0, "c[i] == a[i] + b[i] for all %d elements", n))
		printf("     %d wrong, first at %d: %g\n", bad, first, c[first]);
	/* A second launch over half of the vector, on a stream, in place. */
	cudaStream_t s;
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	vector_add<<<(n / 2 + 127) / 128, 128, 0, s>>>(dc, db, dc, n / 2);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
	bad = 0;
	for (int i = 0; i < n; i++)
		bad += c[i] != (i < n / 2 ? (a[i] + b[i]) + b[i] : a[i] + b[i]);
	qt_check(bad == 0, "second launch on a stream updated exactly the first half");
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFree(da), cudaSuccess);
	EXPECT(cudaFree(db), cudaSuccess);
	EXPECT(cudaFree(dc), cudaSuccess);
	free(a), free(b), free(c);
	return qt_end();
}
