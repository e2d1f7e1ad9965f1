/* SPDX-License-Identifier: MIT */
/*
 * Host functions: cudaLaunchHostFunc and cudaStreamAddCallback. The function
 * runs in this process, on one callback thread (as CUDA runs them on a
 * thread of its own), once the stream has reached it; work queued on the
 * stream after it waits until it has returned (the backend holds that work
 * back: see backend/src/qcuda/session/callbacks.ts). The mark is posted like a
 * launch. The callback thread starts with the first host function and then
 * lives in CALLBACK_WAIT; it never flushes posted work itself, since a flush
 * may be waiting for the very function it is to run. cudaDeviceReset
 * forgets the functions marked and not run (natively they never run), and
 * answers a parked wait with id 0: the thread parks again.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "graph.h"

struct host_fn {
	uint64_t id;
	cudaHostFn_t fn; /* cudaLaunchHostFunc, or */
	cudaStreamCallback_t cb; /* cudaStreamAddCallback */
	cudaStream_t stream;
	void *data;
	struct host_fn *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_fn *marked;
static uint64_t next_id = 1;
static int thread_state; /* 0: none, 1: running, -1: could not start */

static struct host_fn *take(uint64_t id)
{
	struct host_fn **p, *f;

	pthread_mutex_lock(&lock);
	for (p = &marked; *p && (*p)->id != id; p = &(*p)->next)
		;
	f = *p;
	if (f)
		*p = f->next;
	pthread_mutex_unlock(&lock);
	return f;
}

static void *callback_thread(void *arg)
{
	uint64_t done = 0;

	(void)arg;
	for (;;) {
		struct qcuda_out_callback out;
		struct host_fn *f;
		cudaError_t e;

		e = qc_req_callback_wait(done, &out);
		if (e == cudaErrorInvalidValue && done) {
			/* A cudaDeviceReset forgot the function that just ran:
			 * nothing to report, park again. */
			qc_debug("host function %llu forgotten by a reset", (unsigned long long)done);
			done = 0;
			continue;
		}
		if (e != cudaSuccess) {
			/* The session or device is gone: nothing more can run. */
			qc_debug("callback thread ends: %d", (int)e);
			break;
		}
		done = out.id;
		if (!done) {
			/* cudaDeviceReset answered the wait: nothing to run. The
			 * thread parks again rather than end, so that a host
			 * function launched right after the reset finds it. */
			continue;
		}
		f = take(out.id);
		if (!f) {
			qc_msg("the backend named an unknown host function %llu", (unsigned long long)out.id);
			continue;
		}
		if (f->fn)
			f->fn(f->data);
		else
			f->cb(f->stream, (cudaError_t)out.status, f->data);
		free(f);
	}
	pthread_mutex_lock(&lock);
	thread_state = 0;
	pthread_mutex_unlock(&lock);
	return NULL;
}

void qc_callback_reset(void)
{
	struct host_fn *f;

	pthread_mutex_lock(&lock);
	while ((f = marked) != NULL) {
		marked = f->next;
		free(f);
	}
	pthread_mutex_unlock(&lock);
}

/* Called with lock held. */
static int ensure_thread(void)
{
	if (thread_state != 1)
		thread_state = qc_start_thread(callback_thread, 0) == 0 ? 1 : -1;
	return thread_state == 1 ? 0 : -1;
}

static cudaError_t add_host_fn(cudaStream_t stream, int ptds, cudaHostFn_t fn, cudaStreamCallback_t cb, void *data)
{
	struct host_fn *f;
	uint64_t id;
	cudaError_t e = qc_ready_args(fn || cb);

	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	if (fn && qc_capture_active(stream, ptds)) { /* a host node instead */
		struct qc_node_op op = { .type = cudaGraphNodeTypeHost, .host = { fn, data } };

		if (qc_capture_op(stream, ptds, &op, &e))
			return e;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return cudaErrorMemoryAllocation;
	f->fn = fn;
	f->cb = cb;
	f->stream = stream;
	f->data = data;
	pthread_mutex_lock(&lock);
	if (ensure_thread()) {
		pthread_mutex_unlock(&lock);
		free(f);
		qc_msg("cannot start the callback thread");
		return cudaErrorOperatingSystem;
	}
	/* Once marked and unlocked, f may be taken and freed by the callback
	 * thread or a reset: only its id is used after this. */
	id = next_id++;
	f->id = id;
	f->next = marked;
	marked = f;
	pthread_mutex_unlock(&lock);
	e = qc_post_host_func(qc_stream(stream, ptds), id);
	/*
	 * Not flushed here: the call that usually follows (a synchronize)
	 * takes the batch with it in one round trip. Flushing cost JAX's
	 * jit step a second round trip (0.25 of native, against 0.45
	 * without, H100). A program that waits for it outside CUDA waits
	 * for the flusher: the batch delay at most.
	 */
	if (e != cudaSuccess)
		free(take(id));
	return e;
}

cudaError_t qc_host_fn(cudaStream_t stream, int ptds, cudaHostFn_t fn, void *data)
{
	return add_host_fn(stream, ptds, fn, NULL, data);
}

QC_API cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return qc_ret(add_host_fn(stream, 0, fn, NULL, userData));
}

QC_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData);
QC_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void *userData)
{
	return qc_ret(add_host_fn(stream, 1, fn, NULL, userData));
}

QC_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
					 unsigned int flags)
{
	if (flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(add_host_fn(stream, 0, NULL, callback, userData));
}

QC_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
					      unsigned int flags);
QC_API cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
					      unsigned int flags)
{
	if (flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(add_host_fn(stream, 1, NULL, callback, userData));
}
