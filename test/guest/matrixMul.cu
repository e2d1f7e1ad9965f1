// SPDX-License-Identifier: MIT
// matrixMul: C = A * B (A 256x320, B 320x192) with a shared-memory tiled
// kernel (16x16 tiles, 2D grid) and a naive one, both checked exactly
// against the CPU (small integer entries: every sum is exact in float).
#include "qctest.h"

#define TILE 16

__global__ void matmul_tiled(const float *A, const float *B, float *C, int M, int K, int N)
{
	__shared__ float As[TILE][TILE], Bs[TILE][TILE];
	int row = blockIdx.y * TILE + threadIdx.y, col = blockIdx.x * TILE + threadIdx.x;
	float acc = 0.0f;

	for (int t = 0; t < K; t += TILE) {
		As[threadIdx.y][threadIdx.x] = row < M && t + threadIdx.x < K ? A[row * K + t + threadIdx.x] : 0.0f;
		Bs[threadIdx.y][threadIdx.x] = col < N && t + threadIdx.y < K ? B[(t + threadIdx.y) * N + col] : 0.0f;
		__syncthreads();
		for (int k = 0; k < TILE; k++)
			acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
		__syncthreads();
	}
	if (row < M && col < N)
		C[row * N + col] = acc;
}

__global__ void matmul_naive(const float *A, const float *B, float *C, int M, int K, int N)
{
	int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;

	if (row < M && col < N) {
		float acc = 0.0f;
		for (int k = 0; k < K; k++)
			acc += A[row * K + k] * B[k * N + col];
		C[row * N + col] = acc;
	}
}

int main(void)
{
	const int M = 256, K = 320, N = 192;
	float *A = (float *)malloc(M * K * sizeof(float)), *B = (float *)malloc(K * N * sizeof(float));
	float *C = (float *)malloc(M * N * sizeof(float)), *R = (float *)malloc(M * N * sizeof(float));
	float *dA, *dB, *dC;
	int bad;

	qt_begin("matrixMul");
	for (int i = 0; i < M * K; i++)
		A[i] = (float)((i * 7) % 13 - 6);
	for (int i = 0; i < K * N; i++)
		B[i] = (float)((i * 5) % 11 - 5);
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++) {
			float acc = 0.0f;
			for (int k = 0; k < K; k++)
				acc += A[r * K + k] * B[k * N + c];
			R[r * N + c] = acc;
		}
	EXPECT(cudaMalloc(&dA, M * K * sizeof(float)), cudaSuccess);
	EXPECT(cudaMalloc(&dB, K * N * sizeof(float)), cudaSuccess);
	EXPECT(cudaMalloc(&dC, M * N * sizeof(float)), cudaSuccess);
	EXPECT(cudaMemcpy(dA, A, M * K * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(dB, B, K * N * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);

	dim3 block(TILE, TILE), grid((N + TILE - 1) / TILE, (M + TILE - 1) / TILE);
	matmul_tiled<<<grid, block>>>(dA, dB, dC, M, K, N);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaMemcpy(C, dC, M * N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	bad = 0;
	for (int i = 0; i < M * N; i++)
		bad += C[i] != R[i];
	qt_check(bad == 0, "tiled %dx%d * %dx%d matches the CPU (%d wrong)", M, K, K, N, bad);

	EXPECT(cudaMemset(dC, 0, M * N * sizeof(float)), cudaSuccess);
	dim3 block2(32, 8), grid2((N + 31) / 32, (M + 7) / 8);
	matmul_naive<<<grid2, block2>>>(dA, dB, dC, M, K, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(C, dC, M * N * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
	bad = 0;
	for (int i = 0; i < M * N; i++)
		bad += C[i] != R[i];
	qt_check(bad == 0, "naive kernel matches the CPU (%d wrong)", bad);
	EXPECT(cudaFree(dA), cudaSuccess);
	EXPECT(cudaFree(dB), cudaSuccess);
	EXPECT(cudaFree(dC), cudaSuccess);
	free(A), free(B), free(C), free(R);
	return qt_end();
}
