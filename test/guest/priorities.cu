// Stream priorities and L2 persistence: cudaDeviceGetStreamPriorityRange,
// cudaStreamGetPriority (created streams clamped into the range, the special
// streams, bad arguments) and cudaCtxResetPersistingL2Cache. No kernels: it
// runs on the host-memory device too, which reports the H100's range.
#include <cstdio>
#include <cuda_runtime.h>
#include "qctest.h"

int main()
{
	qt_begin("priorities");
	int least = 99, greatest = 99;
	EXPECT(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
	qt_check(least == 0 && greatest == -5, "range least %d greatest %d (0, -5)", least, greatest);
	qt_check(greatest <= least, "greatest <= least");
	int only = 99;
	EXPECT(cudaDeviceGetStreamPriorityRange(&only, NULL), cudaSuccess);
	qt_check(only == least, "least alone %d", only);
	only = 99;
	EXPECT(cudaDeviceGetStreamPriorityRange(NULL, &only), cudaSuccess);
	qt_check(only == greatest, "greatest alone %d", only);
	EXPECT(cudaDeviceGetStreamPriorityRange(NULL, NULL), cudaSuccess);

	const int asked[] = { 0, -1, -3, -5, -6, -100, 1, 7 };
	for (int a : asked) {
		cudaStream_t s;
		int got = 99;
		if (!OK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, a)))
			continue;
		EXPECT(cudaStreamGetPriority(s, &got), cudaSuccess);
		int want = a < greatest ? greatest : a > least ? least : a;
		qt_check(got == want, "priority %d asked, %d got (%d)", a, got, want);
		OK(cudaStreamDestroy(s));
	}
	cudaStream_t plain;
	int p = 99;
	OK(cudaStreamCreate(&plain));
	EXPECT(cudaStreamGetPriority(plain, &p), cudaSuccess);
	qt_check(p == 0, "cudaStreamCreate's priority %d", p);
	EXPECT(cudaStreamGetPriority(plain, NULL), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	OK(cudaStreamDestroy(plain));
	p = 99;
	EXPECT(cudaStreamGetPriority(0, &p), cudaSuccess);
	qt_check(p == 0, "NULL stream's priority %d", p);
	p = 99;
	EXPECT(cudaStreamGetPriority(cudaStreamLegacy, &p), cudaSuccess);
	qt_check(p == 0, "cudaStreamLegacy's priority %d", p);
	p = 99;
	EXPECT(cudaStreamGetPriority(cudaStreamPerThread, &p), cudaSuccess);
	qt_check(p == 0, "cudaStreamPerThread's priority %d", p);

	EXPECT(cudaCtxResetPersistingL2Cache(), cudaSuccess);
	EXPECT(cudaCtxResetPersistingL2Cache(), cudaSuccess);
	EXPECT(cudaGetLastError(), cudaSuccess);
	return qt_end();
}
