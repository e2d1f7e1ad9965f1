// Launch benchmark that runs unchanged natively and in a qcuda guest: the
// rate of asynchronous null-kernel launches (N launches, then one
// synchronize), the round trip of one launch + synchronize, and an event
// record + query until it is done (the median of 2000). One JSON line.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(x)                                                                 \
	do {                                                                     \
		cudaError_t e_ = (x);                                            \
		if (e_ != cudaSuccess) {                                         \
			fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); \
			exit(1);                                                 \
		}                                                                \
	} while (0)

// nop: also the fake driver's name for a kernel that does nothing (test/qcuda/fixtures/fakecuda.c),
// so the benchmark runs on it too, in a guest without a GPU (test/vm/ring-server.test.ts).
__global__ void nop(void)
{
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	nop<<<1, 1>>>(); // loads the module
	CHECK(cudaDeviceSynchronize());
	double best = 1e9;
	for (int rep = 0; rep < 3; rep++) {
		double t0 = now();
		for (int i = 0; i < n; i++)
			nop<<<1, 1>>>();
		CHECK(cudaGetLastError());
		CHECK(cudaDeviceSynchronize());
		double t = now() - t0;
		if (t < best)
			best = t;
	}
	double rt = 1e9;
	for (int i = 0; i < 200; i++) {
		double t0 = now();
		nop<<<1, 1>>>();
		CHECK(cudaDeviceSynchronize());
		double t = now() - t0;
		if (t < rt)
			rt = t;
	}
	cudaEvent_t ev;
	CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
	enum { REC = 2000 };
	static double rec[REC];
	for (int i = -200; i < REC; i++) {
		double t0 = now();
		CHECK(cudaEventRecord(ev, 0));
		cudaError_t q;
		while ((q = cudaEventQuery(ev)) == cudaErrorNotReady) {
		}
		CHECK(q);
		if (i >= 0)
			rec[i] = now() - t0;
	}
	qsort(rec, REC, sizeof(rec[0]), by_value);
	CHECK(cudaEventDestroy(ev));
	printf("{\"launches\":%d,\"launches_per_s\":%.0f,\"launch_sync_us\":%.2f,\"event_record_query_us\":%.2f}\n", n,
	       n / best, rt * 1e6, rec[REC / 2] * 1e6);
	return 0;
}
