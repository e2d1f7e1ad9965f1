// SPDX-License-Identifier: MIT
// threads: several threads calling the runtime at once (allocations, copies,
// memsets, streams, events, pinned memory, errors), each checking its own
// data and its own last error.
#include <pthread.h>
#include "qctest.h"

#define THREADS 8
#define ROUNDS 12

struct worker {
	int id;
	int failures;
	char what[160];
};

static void fail(struct worker *w, const char *fmt, const char *call, cudaError_t e)
{
	if (!w->failures++)
		snprintf(w->what, sizeof(w->what), fmt, call, cudaGetErrorName(e));
}

#define W(call)                                         \
	do {                                            \
		cudaError_t e_ = (call);                \
		if (e_ != cudaSuccess)                  \
			fail(w, "%s -> %s", #call, e_); \
	} while (0)

static void *work(void *arg)
{
	struct worker *w = (struct worker *)arg;
	size_t n = (size_t)(w->id + 1) * 12345;
	unsigned char *h = (unsigned char *)malloc(n), *g = (unsigned char *)malloc(n), *pin = NULL;
	cudaStream_t s;
	cudaEvent_t e;

	W(cudaStreamCreateWithFlags(&s, w->id % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
	W(cudaEventCreate(&e));
	W(cudaMallocHost(&pin, n));
	for (int r = 0; r < ROUNDS && pin; r++) {
		char *a = NULL, *b = NULL;
		void *none;

		qt_fill(h, n, (uint64_t)w->id * 1000 + r);
		W(cudaMalloc(&a, n));
		W(cudaMalloc(&b, n));
		if (!a || !b)
			break;
		W(cudaMemcpyAsync(a, h, n, cudaMemcpyHostToDevice, s));
		W(cudaMemsetAsync(a + 7, w->id, 100, s));
		W(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
		W(cudaEventRecord(e, s));
		W(cudaMemcpyAsync(pin, b, n, cudaMemcpyDeviceToHost, s));
		W(cudaEventSynchronize(e));
		W(cudaStreamSynchronize(s));
		memset(h + 7, w->id, 100);
		if (memcmp(pin, h, n) && !w->failures++)
			snprintf(w->what, sizeof(w->what), "round %d: data differs", r);
		W(cudaMemcpy(g, pin, n, cudaMemcpyHostToHost));
		if (memcmp(g, h, n) && !w->failures++)
			snprintf(w->what, sizeof(w->what), "round %d: H2H data differs", r);
		/* An error of this thread, seen by this thread only. */
		if (cudaMalloc(&none, 1ull << 50) != cudaErrorMemoryAllocation ||
		    cudaGetLastError() != cudaErrorMemoryAllocation || cudaGetLastError() != cudaSuccess) {
			if (!w->failures++)
				snprintf(w->what, sizeof(w->what), "round %d: last error", r);
		}
		W(cudaFree(a));
		W(cudaFree(b));
	}
	W(cudaFreeHost(pin));
	W(cudaEventDestroy(e));
	W(cudaStreamDestroy(s));
	free(h);
	free(g);
	return NULL;
}

int main(void)
{
	pthread_t t[THREADS];
	struct worker w[THREADS];
	qt_begin("threads");
	/* No CUDA call before the threads: their first calls race the start-up. */
	memset(w, 0, sizeof(w));
	for (int i = 0; i < THREADS; i++) {
		w[i].id = i;
		pthread_create(&t[i], NULL, work, &w[i]);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < THREADS; i++)
		qt_check(w[i].failures == 0,
			 "thread %d: %d rounds of allocations, async copies, events, "
			 "errors%s%s",
			 i, ROUNDS, w[i].failures ? ": " : "", w[i].what);

	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaGetLastError(), cudaSuccess);
	return qt_end();
}
