// SPDX-License-Identifier: MIT
// streams: several streams working at once, as CUDA's asyncAPI and
// simpleStreams samples do: H2D copies from pinned memory (cudaMallocHost),
// kernels and D2H copies split in chunks over 4 streams (depth-first and
// breadth-first issue orders, so that copies and kernels of different
// streams may overlap), the CPU polling cudaEventQuery / cudaStreamQuery
// until the work is done, and dependencies between streams: a consumer
// waiting (cudaStreamWaitEvent) on a slow producer kernel, a fan-in from
// three producers, a ring of streams that only gives the right numbers if
// every wait holds, and the legacy NULL stream's implicit synchronization
// with blocking streams. The slow kernels spin on %globaltimer first, so that
// a missing dependency would let the consumer read stale data. Every result
// is checked element by element against the same computation on the CPU.
// How often a query loop went round depends on timing: it is never printed.
#include <time.h>
#include "qctest.h"

#define NSTREAMS 4
#define N (256 << 10) /* elements per buffer (1 MiB of unsigned) */
#define CHUNK (N / NSTREAMS)
#define MS 1000000ull /* one millisecond in %globaltimer units (ns) */

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Thread 0 of each block waits spin_ns first (all blocks are resident at
 * once, so the kernel takes about spin_ns); then a[i] = a[i] * mul + add. */
__global__ void madd(unsigned *a, int n, unsigned mul, unsigned add, unsigned long long spin_ns)
{
	if (spin_ns && threadIdx.x == 0) {
		unsigned long long t0 = gtimer();

		while (gtimer() - t0 < spin_ns)
			;
	}
	__syncthreads();
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		a[i] = a[i] * mul + add;
}

/* asyncAPI's kernel. */
__global__ void increment(unsigned *a, unsigned v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] += v;
}

/* out[i] = a[i] + b[i] + c[i] (c may be NULL). */
__global__ void sum3(unsigned *out, const unsigned *a, const unsigned *b, const unsigned *c, int n)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = a[i] + b[i] + (c ? c[i] : 0u);
}

static unsigned init_value(int i)
{
	return (unsigned)i * 2654435761u ^ 0x5a5a5a5au;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Index of the first h[i] != want(i), or -1. */
#define FIRST_BAD(h, n, want)                   \
	({                                      \
		long long _bad = -1;            \
		for (int i = 0; i < (n); i++)   \
			if ((h)[i] != (want)) { \
				_bad = i;       \
				break;          \
			}                       \
		_bad;                           \
	})

static bool check_all(const unsigned *h, int n, long long bad, const char *what)
{
	if (qt_check(bad < 0, "%s", what))
		return true;
	printf("     first wrong element at %lld: %u\n", bad, h[bad]);
	(void)n;
	return false;
}

/* asyncAPI: one stream, the CPU busy while the GPU works. */
static void async_api(unsigned *h, unsigned *d)
{
	cudaEvent_t start, stop;
	cudaError_t q;
	double t0;

	for (int i = 0; i < N; i++)
		h[i] = init_value(i);
	OK(cudaEventCreate(&start));
	OK(cudaEventCreate(&stop));
	EXPECT(cudaEventRecord(start, 0), cudaSuccess);
	EXPECT(cudaMemcpyAsync(d, h, N * sizeof(unsigned), cudaMemcpyHostToDevice, 0), cudaSuccess);
	increment<<<N / 512, 512, 0, 0>>>(d, 26, N);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaMemcpyAsync(h, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost, 0), cudaSuccess);
	EXPECT(cudaEventRecord(stop, 0), cudaSuccess);
	t0 = now_s();
	while ((q = cudaEventQuery(stop)) == cudaErrorNotReady && now_s() - t0 < 60)
		;
	qt_check(q == cudaSuccess, "asyncAPI: cudaEventQuery polled until the stop event completed -> %s",
		 cudaGetErrorName(q));
	/* Whether a NotReady answer is kept as the last error is not what this
	 * checks (eventtiming prints it): forget it either way. */
	cudaGetLastError();
	check_all(h, N, FIRST_BAD(h, N, init_value(i) + 26), "asyncAPI: every element incremented by 26");
	OK(cudaEventDestroy(start));
	OK(cudaEventDestroy(stop));
}

/* simpleStreams: chunk k goes H2D, through the kernel and D2H on stream k. */
static void simple_streams(unsigned *hin, unsigned *hout, unsigned *d, cudaStream_t *s, int breadth)
{
	const char *order = breadth ? "breadth-first" : "depth-first";
	const size_t cb = CHUNK * sizeof(unsigned);
	cudaEvent_t done[NSTREAMS];
	int ok = 1;

	for (int i = 0; i < N; i++)
		hin[i] = init_value(i) + (unsigned)breadth;
	memset(hout, 0, N * sizeof(unsigned));
	OK(cudaMemset(d, 0, N * sizeof(unsigned)));
	for (int k = 0; k < NSTREAMS; k++)
		OK(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
	if (!breadth) {
		for (int k = 0; k < NSTREAMS; k++) {
			ok &= cudaMemcpyAsync(d + k * CHUNK, hin + k * CHUNK, cb, cudaMemcpyHostToDevice, s[k]) ==
			      cudaSuccess;
			madd<<<CHUNK / 256, 256, 0, s[k]>>>(d + k * CHUNK, CHUNK, 3, k + 1, 0);
			ok &= cudaGetLastError() == cudaSuccess;
			ok &= cudaMemcpyAsync(hout + k * CHUNK, d + k * CHUNK, cb, cudaMemcpyDeviceToHost, s[k]) ==
			      cudaSuccess;
			ok &= cudaEventRecord(done[k], s[k]) == cudaSuccess;
		}
	} else {
		for (int k = 0; k < NSTREAMS; k++)
			ok &= cudaMemcpyAsync(d + k * CHUNK, hin + k * CHUNK, cb, cudaMemcpyHostToDevice, s[k]) ==
			      cudaSuccess;
		for (int k = 0; k < NSTREAMS; k++) {
			madd<<<CHUNK / 256, 256, 0, s[k]>>>(d + k * CHUNK, CHUNK, 3, k + 1, 0);
			ok &= cudaGetLastError() == cudaSuccess;
		}
		for (int k = 0; k < NSTREAMS; k++)
			ok &= cudaMemcpyAsync(hout + k * CHUNK, d + k * CHUNK, cb, cudaMemcpyDeviceToHost, s[k]) ==
			      cudaSuccess;
		for (int k = 0; k < NSTREAMS; k++)
			ok &= cudaEventRecord(done[k], s[k]) == cudaSuccess;
	}
	qt_check(ok, "simpleStreams %s: copies, launches and records on %d streams succeed", order, NSTREAMS);
	/* Poll: streams first, then their events (both must end in cudaSuccess). */
	for (int k = 0; k < NSTREAMS; k++) {
		double t0 = now_s();
		cudaError_t q;

		while ((q = cudaStreamQuery(s[k])) == cudaErrorNotReady && now_s() - t0 < 60)
			;
		ok &= q == cudaSuccess;
		ok &= cudaEventQuery(done[k]) == cudaSuccess;
	}
	qt_check(ok, "simpleStreams %s: cudaStreamQuery polled until every stream was idle, then its event is complete",
		 order);
	cudaGetLastError();
	check_all(hout, N, FIRST_BAD(hout, N, hin[i] * 3 + (unsigned)(i / CHUNK) + 1),
		  breadth ? "simpleStreams breadth-first: out == in * 3 + chunk + 1 everywhere"
			  : "simpleStreams depth-first: out == in * 3 + chunk + 1 everywhere");
	for (int k = 0; k < NSTREAMS; k++)
		OK(cudaEventDestroy(done[k]));
}

/* A consumer stream waits on a slow producer; then a fan-in of three. */
static void dependencies(unsigned *h, unsigned *hout, unsigned *d, cudaStream_t *s)
{
	unsigned *e = NULL, *f = NULL, *g = NULL;
	cudaEvent_t ev[3];
	const size_t nb = N * sizeof(unsigned);

	OK(cudaMalloc(&e, nb));
	OK(cudaMalloc(&f, nb));
	OK(cudaMalloc(&g, nb));
	for (int k = 0; k < 3; k++)
		OK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
	for (int i = 0; i < N; i++)
		h[i] = init_value(i);
	OK(cudaMemcpy(d, h, nb, cudaMemcpyHostToDevice));
	OK(cudaMemset(e, 0, nb));

	/* s[0] produces d = d * 2 + 1 slowly (20 ms); s[1] waits, then e = d + d. */
	madd<<<64, 256, 0, s[0]>>>(d, N, 2, 1, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaEventRecord(ev[0], s[0]), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(s[1], ev[0], 0), cudaSuccess);
	sum3<<<64, 256, 0, s[1]>>>(e, d, d, NULL, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(hout, e, nb, cudaMemcpyDeviceToHost, s[1]), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s[1]), cudaSuccess);
	EXPECT(cudaEventQuery(ev[0]), cudaSuccess);
	check_all(hout, N, FIRST_BAD(hout, N, (h[i] * 2 + 1) * 2),
		  "a consumer stream waiting on a slow producer's event reads the produced data");

	/* Fan-in: three producers of different speeds, one consumer waiting on all three. */
	OK(cudaMemcpy(d, h, nb, cudaMemcpyHostToDevice));
	OK(cudaMemcpy(e, h, nb, cudaMemcpyHostToDevice));
	OK(cudaMemcpy(f, h, nb, cudaMemcpyHostToDevice));
	OK(cudaMemset(g, 0, nb));
	madd<<<64, 256, 0, s[0]>>>(d, N, 3, 1, 10 * MS);
	madd<<<64, 256, 0, s[1]>>>(e, N, 5, 2, 20 * MS);
	madd<<<64, 256, 0, s[2]>>>(f, N, 7, 3, 5 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	for (int k = 0; k < 3; k++)
		EXPECT(cudaEventRecord(ev[k], s[k]), cudaSuccess);
	for (int k = 0; k < 3; k++)
		EXPECT(cudaStreamWaitEvent(s[3], ev[k], 0), cudaSuccess);
	sum3<<<64, 256, 0, s[3]>>>(g, d, e, f, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(hout, g, nb, cudaMemcpyDeviceToHost, s[3]), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s[3]), cudaSuccess);
	check_all(hout, N, FIRST_BAD(hout, N, (h[i] * 3 + 1) + (h[i] * 5 + 2) + (h[i] * 7 + 3)),
		  "fan-in: a stream waiting on three producers' events sums all three results");
	for (int k = 0; k < 3; k++)
		OK(cudaEventDestroy(ev[k]));
	OK(cudaFree(e));
	OK(cudaFree(f));
	OK(cudaFree(g));
}

/* A ring: stream k waits on stream k-1 (and stream 0 on the last stream of
 * the previous round); each applies x = x * 2 + (round * 10 + k + 1) after a
 * short spin. The order of the 12 steps shows in the result. */
static void ring(unsigned *h, unsigned *hout, unsigned *d, cudaStream_t *s)
{
	const int rounds = 3;
	cudaEvent_t ev[NSTREAMS];
	int ok = 1, prev = -1;

	for (int k = 0; k < NSTREAMS; k++)
		OK(cudaEventCreateWithFlags(&ev[k], cudaEventDisableTiming));
	for (int i = 0; i < N; i++)
		h[i] = init_value(i);
	OK(cudaMemcpy(d, h, N * sizeof(unsigned), cudaMemcpyHostToDevice));
	for (int r = 0; r < rounds; r++) {
		for (int k = 0; k < NSTREAMS; k++) {
			if (prev >= 0)
				ok &= cudaStreamWaitEvent(s[k], ev[prev], 0) == cudaSuccess;
			madd<<<64, 256, 0, s[k]>>>(d, N, 2, (unsigned)(r * 10 + k + 1), 2 * MS);
			ok &= cudaGetLastError() == cudaSuccess;
			ok &= cudaEventRecord(ev[k], s[k]) == cudaSuccess;
			prev = k;
		}
	}
	ok &= cudaMemcpyAsync(hout, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost, s[prev]) == cudaSuccess;
	ok &= cudaStreamSynchronize(s[prev]) == cudaSuccess;
	qt_check(ok, "ring of %d streams x %d rounds: waits, launches and records succeed", NSTREAMS, rounds);
	for (int i = 0; i < N; i++) {
		unsigned x = h[i];

		for (int r = 0; r < rounds; r++)
			for (int k = 0; k < NSTREAMS; k++)
				x = x * 2 + (unsigned)(r * 10 + k + 1);
		h[i] = x;
	}
	check_all(hout, N, FIRST_BAD(hout, N, h[i]), "ring: the result of the 12 steps in ring order");
	for (int k = 0; k < NSTREAMS; k++)
		OK(cudaEventDestroy(ev[k]));
}

/* The legacy NULL stream waits for blocking streams, and they wait for it. */
static void legacy_sync(unsigned *h, unsigned *hout, unsigned *d)
{
	cudaStream_t b;

	OK(cudaStreamCreate(&b));
	for (int i = 0; i < N; i++)
		h[i] = init_value(i);
	OK(cudaMemcpy(d, h, N * sizeof(unsigned), cudaMemcpyHostToDevice));
	madd<<<64, 256, 0, b>>>(d, N, 2, 9, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(hout, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost, 0), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	check_all(hout, N, FIRST_BAD(hout, N, h[i] * 2 + 9),
		  "a copy on the NULL stream waits for a slow kernel on a blocking stream");

	madd<<<64, 256, 0, 0>>>(d, N, 3, 4, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(hout, d, N * sizeof(unsigned), cudaMemcpyDeviceToHost, b), cudaSuccess);
	EXPECT(cudaStreamSynchronize(b), cudaSuccess);
	check_all(hout, N, FIRST_BAD(hout, N, (h[i] * 2 + 9) * 3 + 4),
		  "a copy on a blocking stream waits for a slow kernel on the NULL stream");
	OK(cudaStreamDestroy(b));
}

int main(void)
{
	unsigned *hin = NULL, *hout = NULL, *d = NULL;
	cudaStream_t s[NSTREAMS];

	qt_begin("streams");
	EXPECT(cudaMallocHost(&hin, N * sizeof(unsigned)), cudaSuccess);
	EXPECT(cudaMallocHost(&hout, N * sizeof(unsigned)), cudaSuccess);
	EXPECT(cudaMalloc(&d, N * sizeof(unsigned)), cudaSuccess);
	if (!hin || !hout || !d)
		return qt_end();
	for (int k = 0; k < NSTREAMS; k++)
		EXPECT(cudaStreamCreateWithFlags(&s[k], k % 2 ? cudaStreamNonBlocking : cudaStreamDefault),
		       cudaSuccess);

	async_api(hout, d);
	simple_streams(hin, hout, d, s, 0);
	simple_streams(hin, hout, d, s, 1);
	dependencies(hin, hout, d, s);
	ring(hin, hout, d, s);
	legacy_sync(hin, hout, d);

	for (int k = 0; k < NSTREAMS; k++) {
		EXPECT(cudaStreamQuery(s[k]), cudaSuccess);
		EXPECT(cudaStreamDestroy(s[k]), cudaSuccess);
	}
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFreeHost(hin), cudaSuccess);
	EXPECT(cudaFreeHost(hout), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
