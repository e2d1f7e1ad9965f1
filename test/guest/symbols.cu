// SPDX-License-Identifier: MIT
// symbols: __device__ and __constant__ variables through cudaMemcpyToSymbol /
// FromSymbol (+ Async, offsets), cudaGetSymbolAddress / Size, kernels that
// read and write them, and the symbol calls' argument errors.
#include "qctest.h"

__device__ int counters[16];
__constant__ float coeffs[8];
__device__ double scalar;
struct Pair {
	int a;
	float b;
};
__device__ Pair pair;

__global__ void use_symbols(float *out)
{
	int i = threadIdx.x;

	if (i < 8)
		out[i] = coeffs[i] * 2.0f + (float)scalar;
	if (i < 16)
		atomicAdd(&counters[i], i + 1);
	if (i == 0)
		pair.b = (float)pair.a * 0.5f;
}

int main(void)
{
	float hc[8], out[8], *d_out;
	int hz[16], hcnt[16];
	double sc = 0.25;
	size_t sz = 0;
	void *addr = NULL;
	cudaStream_t s;
	Pair p = { 42, 0.0f };
	int not_a_symbol = 0;

	qt_begin("symbols");
	for (int i = 0; i < 8; i++)
		hc[i] = (float)i * 1.5f;
	memset(hz, 0, sizeof(hz));
	FIRST_KERNEL_USE(cudaMemcpyToSymbol(coeffs, hc, sizeof(hc)));
	EXPECT(cudaMemcpyToSymbol(counters, hz, sizeof(hz)), cudaSuccess);
	EXPECT(cudaMemcpyToSymbol(scalar, &sc, sizeof(sc)), cudaSuccess);
	EXPECT(cudaMemcpyToSymbol(pair, &p, sizeof(p)), cudaSuccess);
	EXPECT(cudaGetSymbolSize(&sz, counters), cudaSuccess);
	qt_check(sz == sizeof(hz), "cudaGetSymbolSize(counters) == %zu", sz);
	EXPECT(cudaGetSymbolSize(&sz, coeffs), cudaSuccess);
	qt_check(sz == sizeof(hc), "cudaGetSymbolSize(coeffs) == %zu", sz);
	EXPECT(cudaGetSymbolSize(&sz, pair), cudaSuccess);
	qt_check(sz == sizeof(Pair), "cudaGetSymbolSize(pair) == %zu", sz);

	EXPECT(cudaMalloc(&d_out, sizeof(out)), cudaSuccess);
	use_symbols<<<1, 32>>>(d_out);
	EXPECT(cudaGetLastError(), cudaSuccess);
	use_symbols<<<1, 32>>>(d_out);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(out, d_out, sizeof(out), cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaMemcpyFromSymbol(hcnt, counters, sizeof(hcnt)), cudaSuccess);
	EXPECT(cudaMemcpyFromSymbol(&p, pair, sizeof(p)), cudaSuccess);
	{
		bool ok = true;
		for (int i = 0; i < 8; i++)
			ok &= out[i] == hc[i] * 2.0f + 0.25f;
		qt_check(ok, "the kernel read __constant__ coeffs and __device__ scalar");
		ok = true;
		for (int i = 0; i < 16; i++)
			ok &= hcnt[i] == 2 * (i + 1);
		qt_check(ok, "two launches added to __device__ counters (read back by cudaMemcpyFromSymbol)");
		qt_check(p.a == 42 && p.b == 21.0f, "a struct variable written by the kernel");
	}

	/* Offsets, async on a stream, through the symbol's address. */
	int seven = 7, back[3];
	EXPECT(cudaMemcpyToSymbol(counters, &seven, sizeof(int), 5 * sizeof(int)), cudaSuccess);
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	EXPECT(cudaMemcpyToSymbolAsync(counters, &seven, sizeof(int), 6 * sizeof(int), cudaMemcpyHostToDevice, s),
	       cudaSuccess);
	EXPECT(cudaMemcpyFromSymbolAsync(back, counters, sizeof(back), 4 * sizeof(int), cudaMemcpyDeviceToHost, s),
	       cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(back[0] == 10 && back[1] == 7 && back[2] == 7, "offsets: counters[4..6] = %d %d %d", back[0], back[1],
		 back[2]);
	EXPECT(cudaGetSymbolAddress(&addr, counters), cudaSuccess);
	EXPECT(cudaMemcpy(back, (int *)addr + 4, sizeof(back), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(back[0] == 10 && back[1] == 7 && back[2] == 7, "cudaMemcpy through cudaGetSymbolAddress");
	EXPECT(cudaMemset(addr, 0, sizeof(hz)), cudaSuccess);
	EXPECT(cudaMemcpyFromSymbol(hcnt, counters, sizeof(hcnt)), cudaSuccess);
	qt_check(qt_not_byte(hcnt, 0, sizeof(hcnt)) < 0, "cudaMemset through the symbol's address");
	/* Device to device: symbol <- device buffer, device buffer <- symbol. */
	EXPECT(cudaMemcpyToSymbol(coeffs, d_out, sizeof(out), 0, cudaMemcpyDeviceToDevice), cudaSuccess);
	EXPECT(cudaMemcpyFromSymbol(hc, coeffs, sizeof(hc)), cudaSuccess);
	qt_check(!memcmp(hc, out, sizeof(out)), "cudaMemcpyToSymbol device to device");

	/* Errors. */
	EXPECT(cudaMemcpyToSymbol(counters, hz, sizeof(hz) + 4), cudaErrorInvalidValue);
	EXPECT(cudaMemcpyToSymbol(counters, hz, 8, sizeof(hz) - 4), cudaErrorInvalidValue);
	EXPECT(cudaMemcpyFromSymbol(hcnt, counters, 4, sizeof(hz)), cudaErrorInvalidValue);
	EXPECT(cudaMemcpyToSymbol(counters, hz, 4, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaMemcpyFromSymbol(hcnt, counters, 4, 0, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaMemcpyToSymbol(not_a_symbol, hz, 4), cudaErrorInvalidSymbol);
	EXPECT(cudaGetSymbolAddress(&addr, not_a_symbol), cudaErrorInvalidSymbol);
	EXPECT(cudaGetSymbolSize(&sz, not_a_symbol), cudaErrorInvalidSymbol);
	cudaGetLastError();
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFree(d_out), cudaSuccess);
	return qt_end();
}
