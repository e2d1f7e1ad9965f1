// SPDX-License-Identifier: MIT
// stream: streams (create/flags/priority/destroy/sync/query/wait), ordering of
// asynchronous work on a stream and across streams through events, events
// (record/query/synchronize/elapsed time), and their argument checks.
#include "qctest.h"

#define N (256 << 10)

/* On one stream: H2D, memset part of it, D2D, D2H: the result is only
 * right if they ran in order. */
static void ordering(cudaStream_t s, const char *name)
{
	static unsigned char h[N], g[N], want[N];
	char *a = NULL, *b = NULL;

	qt_fill(h, N, 99);
	memcpy(want, h, N);
	memset(want + 1000, 0x3c, 5000);
	memset(g, 0, N);
	OK(cudaMalloc(&a, N));
	OK(cudaMalloc(&b, N));
	EXPECT(cudaMemcpyAsync(a, h, N, cudaMemcpyHostToDevice, s), cudaSuccess);
	EXPECT(cudaMemsetAsync(a + 1000, 0x3c, 5000, s), cudaSuccess);
	EXPECT(cudaMemcpyAsync(b, a, N, cudaMemcpyDeviceToDevice, s), cudaSuccess);
	EXPECT(cudaMemsetAsync(a, 0, N, s), cudaSuccess);
	EXPECT(cudaMemcpyAsync(g, b, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaStreamQuery(s), cudaSuccess);
	qt_check(qt_diff(g, want, N) < 0, "async work on %s ran in order", name);
	OK(cudaFree(a));
	OK(cudaFree(b));
}

static void streams(void)
{
	cudaStream_t s1, s2, s3, nb;

	EXPECT(cudaStreamCreate(&s1), cudaSuccess);
	EXPECT(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
	EXPECT(cudaStreamCreateWithPriority(&s2, cudaStreamDefault, -1), cudaSuccess);
	EXPECT(cudaStreamCreateWithPriority(&s3, cudaStreamNonBlocking, -100), cudaSuccess);
	qt_check(s1 && nb && s2 && s3 && s1 != nb && s1 != s2 && s2 != s3, "stream handles are distinct");
	EXPECT(cudaStreamCreate(NULL), cudaErrorInvalidValue);
	EXPECT(cudaStreamCreateWithFlags(&s2, 5), cudaErrorInvalidValue);
	EXPECT(cudaStreamCreateWithPriority(&s2, 7, 0), cudaErrorInvalidValue);
	EXPECT(cudaStreamCreateWithFlags(NULL, 0), cudaErrorInvalidValue);

	ordering(s1, "a blocking stream");
	ordering(nb, "a non-blocking stream");
	ordering(0, "the NULL stream");
	ordering(cudaStreamLegacy, "cudaStreamLegacy");
	ordering(cudaStreamPerThread, "cudaStreamPerThread");

	EXPECT(cudaStreamQuery(0), cudaSuccess);
	EXPECT(cudaStreamQuery(cudaStreamPerThread), cudaSuccess);
	EXPECT(cudaStreamSynchronize(cudaStreamLegacy), cudaSuccess);
	EXPECT(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
	EXPECT(cudaStreamDestroy(0), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamDestroy(cudaStreamLegacy), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamDestroy(cudaStreamPerThread), cudaErrorInvalidResourceHandle);
	EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamDestroy(s1), cudaSuccess);
	EXPECT(cudaStreamDestroy(nb), cudaSuccess);
	EXPECT(cudaStreamDestroy(s2), cudaSuccess);
	EXPECT(cudaStreamDestroy(s3), cudaSuccess);
}

/* Stream b waits for an event recorded on stream a after a copy. */
static void cross_stream(void)
{
	static unsigned char h[N], g[N];
	cudaStream_t a, b;
	cudaEvent_t e;
	char *x = NULL, *y = NULL;

	qt_fill(h, N, 7);
	OK(cudaMalloc(&x, N));
	OK(cudaMalloc(&y, N));
	OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
	OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
	OK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
	EXPECT(cudaMemcpyAsync(x, h, N, cudaMemcpyHostToDevice, a), cudaSuccess);
	EXPECT(cudaEventRecord(e, a), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(b, e, 0), cudaSuccess);
	EXPECT(cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b), cudaSuccess);
	EXPECT(cudaMemcpyAsync(g, y, N, cudaMemcpyDeviceToHost, b), cudaSuccess);
	EXPECT(cudaStreamSynchronize(b), cudaSuccess);
	qt_check(qt_diff(g, h, N) < 0, "a stream waiting on another stream's event sees its work");
	EXPECT(cudaEventQuery(e), cudaSuccess);
	/* Waiting on an event never recorded does not wait. */
	{
		cudaEvent_t never;
		OK(cudaEventCreate(&never));
		EXPECT(cudaStreamWaitEvent(b, never, 0), cudaSuccess);
		EXPECT(cudaStreamSynchronize(b), cudaSuccess);
		OK(cudaEventDestroy(never));
	}
	EXPECT(cudaStreamWaitEvent(0, e, 0), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(b, e, 8), cudaErrorInvalidValue);
	EXPECT(cudaStreamWaitEvent(b, NULL, 0), cudaErrorInvalidResourceHandle);
	OK(cudaStreamDestroy(a));
	OK(cudaStreamDestroy(b));
	OK(cudaEventDestroy(e));
	OK(cudaFree(x));
	OK(cudaFree(y));
}

static void events(void)
{
	cudaEvent_t e1, e2, nt, bs, ip;
	cudaStream_t s;
	float ms = -1;
	char *d = NULL;
	static unsigned char h[4 << 20];

	EXPECT(cudaEventCreate(&e1), cudaSuccess);
	EXPECT(cudaEventCreateWithFlags(&e2, cudaEventDefault), cudaSuccess);
	EXPECT(cudaEventCreateWithFlags(&nt, cudaEventDisableTiming), cudaSuccess);
	EXPECT(cudaEventCreateWithFlags(&bs, cudaEventBlockingSync), cudaSuccess);
	EXPECT(cudaEventCreateWithFlags(&ip, cudaEventInterprocess | cudaEventDisableTiming), cudaSuccess);
	EXPECT(cudaEventCreate(NULL), cudaErrorInvalidValue);
	EXPECT(cudaEventCreateWithFlags(&e2, 0x100), cudaErrorInvalidValue);
	EXPECT(cudaEventCreateWithFlags(&e2, 8), cudaErrorInvalidValue);
	EXPECT(cudaEventCreateWithFlags(&e2, cudaEventInterprocess), cudaErrorInvalidValue);

	/* Never recorded: complete, but no time. */
	EXPECT(cudaEventQuery(e1), cudaSuccess);
	EXPECT(cudaEventSynchronize(e1), cudaSuccess);
	EXPECT(cudaEventElapsedTime(&ms, e1, e2), cudaErrorInvalidResourceHandle);

	OK(cudaStreamCreate(&s));
	OK(cudaMalloc(&d, sizeof(h)));
	EXPECT(cudaEventRecord(e1, s), cudaSuccess);
	EXPECT(cudaEventElapsedTime(&ms, e1, e2), cudaErrorInvalidResourceHandle);
	EXPECT(cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, s), cudaSuccess);
	EXPECT(cudaMemsetAsync(d, 1, sizeof(h), s), cudaSuccess);
	EXPECT(cudaEventRecord(e2, s), cudaSuccess);
	EXPECT(cudaEventRecord(nt, s), cudaSuccess);
	EXPECT(cudaEventRecord(bs, s), cudaSuccess);
	EXPECT(cudaEventSynchronize(e2), cudaSuccess);
	EXPECT(cudaEventQuery(e2), cudaSuccess);
	EXPECT(cudaEventSynchronize(bs), cudaSuccess);
	EXPECT(cudaEventQuery(nt), cudaSuccess);
	ms = -1;
	EXPECT(cudaEventElapsedTime(&ms, e1, e2), cudaSuccess);
	qt_check(ms >= 0, "elapsed time between ordered events is >= 0");
	EXPECT(cudaEventElapsedTime(&ms, e1, e1), cudaSuccess);
	qt_check(ms == 0, "elapsed time of an event to itself is 0");
	EXPECT(cudaEventElapsedTime(NULL, e1, e2), cudaErrorInvalidValue);
	EXPECT(cudaEventElapsedTime(&ms, e1, nt), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventElapsedTime(&ms, nt, e1), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventElapsedTime(&ms, NULL, e2), cudaErrorInvalidResourceHandle);
	/* Re-recording moves the event. */
	EXPECT(cudaEventRecord(e1, 0), cudaSuccess);
	EXPECT(cudaEventRecord(e2, cudaStreamPerThread), cudaSuccess);
	EXPECT(cudaEventSynchronize(e2), cudaSuccess);
	EXPECT(cudaEventSynchronize(e1), cudaSuccess);
	EXPECT(cudaEventRecordWithFlags(e1, s, cudaEventRecordDefault), cudaSuccess);
	EXPECT(cudaEventRecordWithFlags(e1, s, 0x10), cudaErrorInvalidValue);
	EXPECT(cudaEventSynchronize(e1), cudaSuccess);

	EXPECT(cudaEventRecord(NULL, 0), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventQuery(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventSynchronize(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventDestroy(NULL), cudaErrorInvalidResourceHandle);
	EXPECT(cudaGetLastError(), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventDestroy(e1), cudaSuccess);
	EXPECT(cudaEventDestroy(e2), cudaSuccess);
	EXPECT(cudaEventDestroy(nt), cudaSuccess);
	EXPECT(cudaEventDestroy(bs), cudaSuccess);
	EXPECT(cudaEventDestroy(ip), cudaSuccess);
	OK(cudaStreamDestroy(s));
	OK(cudaFree(d));
}

/* Many streams and events at once (handles must stay distinct and valid). */
static void many(void)
{
	enum { K = 64 };
	cudaStream_t s[K];
	cudaEvent_t e[K];
	int ok = 1;

	for (int i = 0; i < K; i++)
		ok &= cudaStreamCreate(&s[i]) == cudaSuccess && cudaEventCreate(&e[i]) == cudaSuccess;
	for (int i = 0; i < K; i++)
		ok &= cudaEventRecord(e[i], s[i]) == cudaSuccess &&
		      cudaStreamWaitEvent(s[(i + 1) % K], e[i], 0) == cudaSuccess;
	for (int i = 0; i < K; i++)
		ok &= cudaStreamSynchronize(s[i]) == cudaSuccess && cudaEventQuery(e[i]) == cudaSuccess;
	for (int i = 0; i < K; i++)
		ok &= cudaStreamDestroy(s[i]) == cudaSuccess && cudaEventDestroy(e[i]) == cudaSuccess;
	qt_check(ok, "%d streams and events: create, record, wait, synchronize, destroy", K);
}

int main(void)
{
	qt_begin("stream");
	streams();
	cross_stream();
	events();
	many();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
