// SPDX-License-Identifier: MIT
// quota: cudaMemGetInfo and the device memory limit: free memory follows
// allocations, an allocation larger than free memory fails with
// cudaErrorMemoryAllocation (and leaves the context usable), and filling
// the memory in chunks of total/8 stops at the limit.
#include "qctest.h"

#define MiB (1ull << 20)

int main(void)
{
	size_t free0 = 0, total = 0, free1 = 0, free2 = 0;
	void *d = NULL, *chunk[16];
	int got = 0;
	cudaError_t last = cudaSuccess;

	qt_begin("quota");
	EXPECT(cudaMemGetInfo(&free0, &total), cudaSuccess);
	qt_check(total > 0 && free0 > 0 && free0 <= total, "0 < free <= total");

	EXPECT(cudaMalloc(&d, 64 * MiB), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free1, NULL), cudaSuccess);
	qt_check(free1 + 64 * MiB <= free0, "a 64 MiB allocation takes >= 64 MiB of free memory");
	EXPECT(cudaFree(d), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free2, NULL), cudaSuccess);
	qt_check(free2 >= free1 + 64 * MiB, "cudaFree gives it back");

	EXPECT(cudaMalloc(&d, free2 + 2 * MiB), cudaErrorMemoryAllocation);
	qt_check(d == NULL, "the failed allocation returned NULL");
	EXPECT(cudaMalloc(&d, total + 1), cudaErrorMemoryAllocation);
	EXPECT(cudaMalloc(&d, (size_t)-1), cudaErrorMemoryAllocation);
	EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMalloc(&d, MiB), cudaSuccess);
	EXPECT(cudaMemset(d, 1, MiB), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);

	/* Fill up in chunks of total/8: at most 8 fit. */
	{
		size_t c = (total / 8) & ~(2 * MiB - 1);
		for (got = 0; got < 16; got++) {
			chunk[got] = NULL;
			last = cudaMalloc(&chunk[got], c);
			if (last != cudaSuccess)
				break;
		}
		qt_check(got >= 6 && got <= 8, "%s chunks of total/8 fit",
			 got >= 6 && got <= 8 ? "6 to 8" : "not 6 to 8");
		qt_check(last == cudaErrorMemoryAllocation, "the next chunk fails with cudaErrorMemoryAllocation");
		EXPECT(cudaGetLastError(), cudaErrorMemoryAllocation);
		{
			size_t f = 0;
			EXPECT(cudaMemGetInfo(&f, NULL), cudaSuccess);
			qt_check(f < c, "less than a chunk is free when full");
		}
		{
			bool freed = true;
			for (int i = 0; i < got; i++)
				freed &= cudaFree(chunk[i]) == cudaSuccess;
			qt_check(freed, "the chunks are freed");
		}
		EXPECT(cudaMalloc(&d, c), cudaSuccess);
		EXPECT(cudaFree(d), cudaSuccess);
	}
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
