// callbacks: host functions (cudaLaunchHostFunc, cudaStreamAddCallback) run
// in stream order: after the work queued before them, and before the work
// queued after them, which waits until they return; a stream with a host
// function still running is not ready; synchronizing waits for them. No
// kernels: this runs on every device (the emu provider too).
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "qctest.h"

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static char order[64];
static int order_len;

static void note(char c)
{
	pthread_mutex_lock(&log_lock);
	if (order_len < (int)sizeof(order) - 1)
		order[order_len++] = c;
	pthread_mutex_unlock(&log_lock);
}

static void CUDART_CB log_fn(void *arg)
{
	note(*(const char *)arg);
}

// Writes a value into pinned memory after a while: the copy queued after it
// must read that value, not the one before.
struct slow_write {
	int *where;
	int value;
};

static void CUDART_CB slow_write_fn(void *arg)
{
	struct slow_write *w = (struct slow_write *)arg;

	usleep(50 * 1000);
	*(volatile int *)w->where = w->value;
}

static void CUDART_CB flag_fn(void *arg)
{
	__atomic_store_n((int *)arg, 1, __ATOMIC_RELEASE);
}

// Spins, making no CUDA call, until *flag is set (true) or 5 s have passed.
static bool wait_flag(const int *flag)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		if (__atomic_load_n(flag, __ATOMIC_ACQUIRE))
			return true;
		sched_yield();
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < 5000000000LL);
	return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

static sem_t release;

static void CUDART_CB blocked_fn(void *arg)
{
	sem_wait(&release);
	*(volatile int *)arg = 1;
}

static cudaStream_t seen_stream;
static cudaError_t seen_status = cudaErrorUnknown;

static void CUDART_CB stream_cb(cudaStream_t s, cudaError_t status, void *arg)
{
	seen_stream = s;
	seen_status = status;
	*(int *)arg += 1;
}

static int per_stream_next[4], per_stream_bad;

struct seq {
	int stream, n;
};

static void CUDART_CB seq_fn(void *arg)
{
	struct seq *q = (struct seq *)arg;

	if (per_stream_next[q->stream] != q->n)
		per_stream_bad++;
	per_stream_next[q->stream] = q->n + 1;
}

int main(void)
{
	cudaStream_t s, many[4];
	cudaEvent_t e;
	int *d = NULL, *pinned = NULL, back = 0;
	static const char A = 'A', B = 'B', C = 'C';

	qt_begin("callbacks");
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	EXPECT(cudaMalloc(&d, 4096), cudaSuccess);
	EXPECT(cudaMallocHost(&pinned, 4096), cudaSuccess);

	// Order: work, A, work, B on one stream; synchronizing waits for both.
	OK(cudaMemsetAsync(d, 1, 4096, s));
	EXPECT(cudaLaunchHostFunc(s, log_fn, (void *)&A), cudaSuccess);
	OK(cudaMemsetAsync(d, 2, 4096, s));
	EXPECT(cudaLaunchHostFunc(s, log_fn, (void *)&B), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	note('.');
	qt_check(strcmp(order, "AB.") == 0, "host functions ran in order, before the synchronize returned (%s)", order);

	// Work after a host function waits for it: the copy reads what it wrote.
	{
		struct slow_write w = { pinned, 12345 };

		*pinned = 1;
		EXPECT(cudaLaunchHostFunc(s, slow_write_fn, &w), cudaSuccess);
		EXPECT(cudaMemcpyAsync(d, pinned, sizeof(int), cudaMemcpyHostToDevice, s), cudaSuccess);
		EXPECT(cudaMemcpyAsync(&back, d, sizeof(int), cudaMemcpyDeviceToHost, s), cudaSuccess);
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
		qt_check(back == 12345, "the copy queued after the host function saw its write (%d)", back);
	}

	// A stream whose host function has not returned is not ready; an
	// event recorded after it completes only once it has.
	{
		volatile int done = 0;

		sem_init(&release, 0, 0);
		EXPECT(cudaEventCreate(&e), cudaSuccess);
		EXPECT(cudaLaunchHostFunc(s, blocked_fn, (void *)&done), cudaSuccess);
		EXPECT(cudaEventRecord(e, s), cudaSuccess);
		usleep(100 * 1000);
		EXPECT(cudaStreamQuery(s), cudaErrorNotReady);
		qt_check(done == 0, "the host function is still waiting");
		sem_post(&release);
		EXPECT(cudaEventSynchronize(e), cudaSuccess);
		qt_check(done == 1, "the event after the host function completed after it");
		EXPECT(cudaStreamQuery(s), cudaSuccess);
		EXPECT(cudaEventDestroy(e), cudaSuccess);
	}

	// cudaStreamAddCallback gets the stream and cudaSuccess.
	{
		int calls = 0;

		EXPECT(cudaStreamAddCallback(s, stream_cb, &calls, 0), cudaSuccess);
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
		qt_check(calls == 1 && seen_stream == s && seen_status == cudaSuccess,
			 "the stream callback ran once with its stream and cudaSuccess");
		EXPECT(cudaStreamAddCallback(s, stream_cb, &calls, 1), cudaErrorInvalidValue);
	}

	// The NULL stream orders with the others: C runs after the work on s.
	order_len = 0;
	memset(order, 0, sizeof(order));
	EXPECT(cudaLaunchHostFunc(s, log_fn, (void *)&A), cudaSuccess);
	EXPECT(cudaLaunchHostFunc(0, log_fn, (void *)&C), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(strcmp(order, "AC") == 0, "the NULL stream's host function ran after the other stream's (%s)", order);

	// Many host functions on four streams: each stream's run in order.
	{
		static struct seq q[4][250];

		for (int i = 0; i < 4; i++)
			EXPECT(cudaStreamCreateWithFlags(&many[i], cudaStreamNonBlocking), cudaSuccess);
		for (int n = 0; n < 250; n++) {
			for (int i = 0; i < 4; i++) {
				q[i][n].stream = i;
				q[i][n].n = n;
				OK(cudaMemsetAsync(d + i, n & 0xff, sizeof(int), many[i]));
				OK(cudaLaunchHostFunc(many[i], seq_fn, &q[i][n]));
			}
		}
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		qt_check(per_stream_bad == 0 && per_stream_next[0] == 250 && per_stream_next[3] == 250,
			 "1000 host functions on 4 streams ran, each stream's in order");
		for (int i = 0; i < 4; i++)
			OK(cudaStreamDestroy(many[i]));
	}

	// Posted work goes out with no call after it (the library's flusher
	// sends it): right after other work, and after 300 ms with nothing
	// posted (the flusher asleep until a post wakes it).
	for (int round = 0; round < 2; round++) {
		int flag = 0;

		if (round)
			usleep(300 * 1000);
		EXPECT(cudaLaunchHostFunc(s, flag_fn, &flag), cudaSuccess);
		qt_check(wait_flag(&flag), "a host function posted %s ran with no call after it",
			 round ? "after 300 ms idle" : "after other work");
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	}

	// Bad arguments are refused at the call.
	EXPECT(cudaLaunchHostFunc(s, NULL, NULL), cudaErrorInvalidValue);
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFreeHost(pinned), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
