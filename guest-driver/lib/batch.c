/* SPDX-License-Identifier: MIT */
/*
 * Posted work (QCUDA_CMD_BATCH). Launches, async memsets and device-to-device
 * copies, event records and stream waits return at once, as in CUDA: they are
 * queued here and sent together
 *  - when the batch is full,
 *  - before any other command (qc_call flushes first, so the backend runs
 *    calls in the order the program made them),
 *  - by a flusher thread once the oldest entry has waited the batch delay
 *    (a program that posts a kernel and then spins on mapped memory must
 *    see it run; and the GPU should not idle while a program posts), and
 *    at exit.
 * A failure in a batch is kept and returned by the next synchronizing call
 * (qc_deferred), which is where CUDA reports errors of asynchronous work.
 * A synchronizing call itself (cudaDeviceSynchronize, cudaStreamSynchronize,
 * cudaEventSynchronize: qc_call_ending_batch) goes as the last entry of the
 * batch it flushes (QCUDA_BATCH_ENDS_SYNC), so a launch and the synchronize
 * after it take one round trip; the backend then reports the batch's failure
 * as that call's. A query (cudaEventQuery, cudaStreamQuery) goes so too
 * (QCUDA_BATCH_ENDS_QUERY): its status stays its own, and the batch's failure
 * comes back as the reply's value, kept here as a batch's is.
 *
 * Two buffers: entries go into `fill` (under fill_lock) while the previous
 * batch is being sent (under send_lock, taken before fill_lock), so posting
 * goes on during a send while batches are still sent strictly in order.
 * Back-pressure: at most one batch waits here and one is in flight per
 * process; a send returns once the backend has enqueued every entry on the
 * GPU, which itself waits when the GPU's queue is full.
 * QCUDA_BATCH=0 sends each posted command at once (debugging, comparisons).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "qcrt.h"

/*
 * How long posted work may wait for a batch to fill (QCUDA_BATCH_DELAY_US
 * sets it). On the host (the userspace transport, `qcuda run`) 50 us: a
 * framework posts a step's kernels over milliseconds, and natively each
 * reaches the GPU at once; at 1 ms, greedy decoding of a small GPT ran at
 * 0.63-0.84 of native on an H200, the GPU waiting for each token's first
 * batch. In a guest 1 ms: there (under TCG, in CI and on the GPU machines)
 * each wake-up of the flusher costs far more.
 */
#define QC_BATCH_DELAY_GUEST_US 1000
#define QC_BATCH_DELAY_HOST_US 50
/* How long the flusher goes on waking with nothing posted before it sleeps. */
#define QC_FLUSH_IDLE_US 100000

struct batch {
	uint32_t count;
	uint32_t used;
	_Alignas(8) unsigned char bytes[QCUDA_MAX_BATCH];
};

static struct batch buffers[2];
static struct batch *fill = &buffers[0], *spare = &buffers[1];
static pthread_mutex_t fill_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t send_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fill_cv = PTHREAD_COND_INITIALIZER;
static atomic_uint pending; /* entries in `fill`, read without the lock */
static atomic_uint sending; /* a batch is out (set before it leaves `fill`) */
static atomic_ullong posted; /* requests posted (QCUDA_STATS) */
static unsigned int swaps; /* batches taken out of `fill` (under fill_lock) */
static int flusher_asleep; /* waits on fill_cv for a post (under fill_lock) */
static _Atomic int deferred_err;
static pthread_once_t flusher_once = PTHREAD_ONCE_INIT;
static int posting = -1; /* -1: not decided yet */

static void note_deferred(cudaError_t e)
{
	int none = cudaSuccess;

	if (e != cudaSuccess)
		atomic_compare_exchange_strong(&deferred_err, &none, (int)e);
}

cudaError_t qc_deferred(cudaError_t e)
{
	if (e != cudaSuccess)
		return e;
	return (cudaError_t)atomic_exchange(&deferred_err, cudaSuccess);
}

/* Appends one entry to b if it fits (fill_lock held); 0 if b is full. */
static int put(struct batch *b, uint32_t cmd, const void *args, uint32_t len)
{
	struct qcuda_batch_entry h = { .cmd = cmd, .len = len };
	uint32_t need = sizeof(h) + ((len + 7) & ~7u);

	if (need > QCUDA_MAX_BATCH - b->used)
		return 0;
	memcpy(b->bytes + b->used, &h, sizeof(h));
	if (len)
		memcpy(b->bytes + b->used + sizeof(h), args, len);
	memset(b->bytes + b->used + sizeof(h) + len, 0, need - sizeof(h) - len);
	b->used += need;
	b->count++;
	return 1;
}

/*
 * Sends the filled batch, if any; called with send_lock held. With last (a
 * synchronizing call or a query: qc_call_ending_batch, which passes the
 * batch flag in last_flag), that call goes as the batch's final entry if it
 * fits, taken in under fill_lock with the others so that nothing posted
 * meanwhile comes after it: returns 1 and its result in *last_e if it went,
 * else 0 (no batch, or no room).
 */
static int send_locked(const struct qc_req *last, uint32_t last_flag, cudaError_t *last_e)
{
	struct qcuda_args_batch a;
	struct batch *b;
	uint64_t failed = 0;
	cudaError_t e;
	int ends = 0;

	atomic_store(&sending, 1);
	pthread_mutex_lock(&fill_lock);
	b = fill;
	if (b->count == 0) {
		pthread_mutex_unlock(&fill_lock);
		atomic_store(&sending, 0);
		return 0;
	}
	if (last)
		ends = put(b, last->cmd, last->args, last->args_len);
	fill = spare;
	spare = b;
	swaps++;
	atomic_store(&pending, 0);
	pthread_mutex_unlock(&fill_lock);

	memset(&a, 0, sizeof(a));
	a.count = b->count;
	a.flags = ends ? last_flag : 0;
	a.bytes = b->used;
	e = qc_call_unbatched(&(struct qc_req){ .cmd = QCUDA_CMD_BATCH,
						.args = &a,
						.args_len = sizeof(a),
						.dir = QT_TO_DEVICE,
						.data = b->bytes,
						.data_len = b->used,
						.value = &failed });
	if (ends) {
		/* The call's own result: a synchronize reports the batch's failure
		 * itself; after a query it is the reply's value (a CUDA error). */
		*last_e = e;
		if (last_flag == QCUDA_BATCH_ENDS_QUERY && failed != 0)
			note_deferred(failed < QCUDA_ST_BAD_REQUEST ? (cudaError_t)failed : cudaErrorInvalidValue);
	} else {
		if (e != cudaSuccess)
			qc_debug("batch of %u: entry %llu failed: %d", b->count, (unsigned long long)failed, (int)e);
		note_deferred(e);
	}
	b->count = 0;
	b->used = 0;
	atomic_store(&sending, 0);
	return ends;
}

/* Nothing posted and nothing being sent. A batch another thread (the
 * flusher) is sending counts: it may hold this thread's work, which must
 * reach the backend before this thread's next call. */
static int nothing_posted(void)
{
	return atomic_load(&pending) == 0 && atomic_load(&sending) == 0;
}

void qc_flush(void)
{
	if (nothing_posted())
		return;
	pthread_mutex_lock(&send_lock);
	send_locked(NULL, 0, NULL);
	pthread_mutex_unlock(&send_lock);
}

cudaError_t qc_call_ending_batch(const struct qc_req *r, uint32_t ends)
{
	cudaError_t e;
	int sent;

	if (nothing_posted())
		return qc_call_unbatched(r);
	pthread_mutex_lock(&send_lock);
	sent = send_locked(r, ends, &e);
	pthread_mutex_unlock(&send_lock);
	/* No batch was left (another thread sent it), or no room in it: on its own. */
	return sent ? e : qc_call_unbatched(r);
}

/* The batch delay: QCUDA_BATCH_DELAY_US, else the transport's default. */
static unsigned long batch_delay_us(void)
{
	const char *env = getenv("QCUDA_BATCH_DELAY_US");
	unsigned long us;

	if (env && *env && (us = strtoul(env, NULL, 10)) >= 2 && us <= 1000000)
		return us;
	return strcmp(qt_name(), "vhost-user") ? QC_BATCH_DELAY_GUEST_US : QC_BATCH_DELAY_HOST_US;
}

/*
 * Flushes a batch that has waited the batch delay and was not sent
 * meanwhile. While work is being posted the flusher wakes on its own every
 * half delay and sends a batch that was already filling at its previous
 * wake-up (so posted work waits the delay at most). Waking
 * it on each post instead cost the poster a futex wake and, the flusher
 * asleep on another CPU, an interrupt to that CPU: in a TCG guest an event
 * record + query took 330-440 us with that wake-up, 100-160 us without.
 * After QC_FLUSH_IDLE_US of wake-ups with nothing posted it sleeps until the
 * next post wakes it, so an idle process costs nothing.
 */
static void *flusher(void *arg)
{
	const unsigned long half = batch_delay_us() / 2;
	const unsigned int idle_ticks = (unsigned int)(QC_FLUSH_IDLE_US / half);
	const struct timespec tick = { (time_t)(half / 1000000), (long)(half % 1000000) * 1000L };
	unsigned long long posts = 0;
	unsigned int seen = 0, idle = 0;
	int filling = 0; /* a batch was filling at the last wake-up */

	(void)arg;
	for (;;) {
		struct timespec ts = tick;
		unsigned long long now;
		int due;

		pthread_mutex_lock(&fill_lock);
		while (fill->count == 0 && idle >= idle_ticks) {
			flusher_asleep = 1;
			pthread_cond_wait(&fill_cv, &fill_lock);
			flusher_asleep = 0;
			idle = 0;
		}
		/* Still the batch that was filling at the last wake-up. */
		due = filling && fill->count > 0 && seen == swaps;
		filling = !due && fill->count > 0;
		seen = swaps;
		pthread_mutex_unlock(&fill_lock);
		if (due) {
			pthread_mutex_lock(&send_lock);
			pthread_mutex_lock(&fill_lock);
			due = seen == swaps; /* not sent meanwhile */
			pthread_mutex_unlock(&fill_lock);
			if (due)
				send_locked(NULL, 0, NULL);
			pthread_mutex_unlock(&send_lock);
		}
		now = atomic_load(&posted);
		idle = now == posts ? idle + 1 : 0;
		posts = now;
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static void start_flusher(void)
{
	if (qc_start_thread(flusher, 64 << 10) != 0)
		qc_msg("no flusher thread: posted work waits for the next call");
}

static int posting_enabled(void)
{
	if (posting < 0) {
		const char *v = getenv("QCUDA_BATCH");

		posting = !(v && strcmp(v, "0") == 0);
	}
	return posting;
}

/* Appends one entry if it fits; returns 0 if the batch is full. */
static int append(uint32_t cmd, const void *args, uint32_t len)
{
	int was_empty;

	pthread_mutex_lock(&fill_lock);
	was_empty = fill->count == 0;
	if (!put(fill, cmd, args, len)) {
		pthread_mutex_unlock(&fill_lock);
		return 0;
	}
	atomic_store(&pending, fill->count);
	if (was_empty && flusher_asleep)
		pthread_cond_signal(&fill_cv);
	pthread_mutex_unlock(&fill_lock);
	return 1;
}

cudaError_t qc_post(uint32_t cmd, const void *args, uint32_t len)
{
	if (!posting_enabled())
		return qc_call(&(struct qc_req){ .cmd = cmd, .args = args, .args_len = len });
	pthread_once(&flusher_once, start_flusher);
	atomic_fetch_add(&posted, 1);
	while (!append(cmd, args, len)) {
		pthread_mutex_lock(&send_lock);
		send_locked(NULL, 0, NULL);
		pthread_mutex_unlock(&send_lock);
	}
	return cudaSuccess;
}

/* qcuda's own entry point, exported by both libraries beside CUDA's names:
 * what crossed to the host so far, so that a program (or a script through
 * ctypes) can count the round trips of one piece of work. out[0]: synchronous
 * calls, out[1]: batches of posted requests, out[2]: requests posted. */
QC_API void qcuda_stats(unsigned long long out[3])
{
	qc_stats(&out[0], &out[1]);
	out[2] = atomic_load(&posted);
}

/* Work posted just before exit runs, as it would natively. With
 * QCUDA_STATS set, what crossed to the host is said on stderr after it. */
__attribute__((destructor)) static void flush_at_exit(void)
{
	unsigned long long calls, batches;
	char by_cmd[256];

	if (qc.fd < 0)
		return;
	qc_flush();
	if (!getenv("QCUDA_STATS"))
		return;
	qc_stats(&calls, &batches);
	qc_stats_by_cmd(by_cmd, sizeof(by_cmd));
	qc_msg("%llu round trips to the host: %llu calls and %llu batches carrying %llu posted requests;"
	       " most often (qcuda_proto.h numbers):%s",
	       calls + batches, calls, batches, (unsigned long long)atomic_load(&posted), by_cmd);
}
