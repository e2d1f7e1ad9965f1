/* SPDX-License-Identifier: MIT */
/*
 * qcuda's libcudart.so.13: internal declarations.
 *
 * The library implements the CUDA 13 runtime API on top of the virtio-qcuda
 * wire protocol (qcuda_proto.h). It is compiled against NVIDIA's
 * cuda_runtime_api.h / driver_types.h so that every type, enum value and
 * struct layout is CUDA 13's, and exports its symbols under the same soname
 * and version node as NVIDIA's library (libcudart.map).
 *
 * Files: transport.c (the only user of qcuda_ioctl.h), init.c (start-up,
 * errors, devices), memory.c (allocations, copies, host memory), managed.c
 * (managed memory hints: prefetch, advice, range attributes), stream.c
 * (streams, events), module.c (fat binaries, launches), batch.c (posted
 * work: launches and other enqueues sent together), devctl.c (limits,
 * peer access, profiler, driver entry points), callback.c (host functions),
 * handles.c (the stream and event handles held), output.c (device
 * printf and assert output), errtab.c (error
 * names and strings), stubs.c (entry points qcuda does not implement).
 *
 * Concurrency: no lock is ever held across a device call; the tables of
 * memory.c have one rwlock held for lookups/updates only (and, read, around
 * managed.c's callbacks, which take managed.c's own lock inside it); the
 * last error, the current device and the launch configuration stack are per
 * thread.
 */
#ifndef QCRT_H
#define QCRT_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qcuda_proto.h"

#define QC_API __attribute__((visibility("default")))

#include "transport.h"

/* ---- init.c ---- */

struct qc_state {
	int fd;
	cudaError_t init_err;		/* cudaSuccess once HELLO succeeded */
	int device_count;
	uint32_t driver_version;
	uint64_t capabilities;
	uint64_t memory_limit;
};
extern struct qc_state qc;

/* Opens the device and says HELLO once; returns qc.init_err. */
cudaError_t qc_init(void);
/* Records err as the calling thread's last error (unless it is cudaSuccess
 * or cudaErrorNotReady) and returns it. Every API function returns through
 * it. */
cudaError_t qc_ret(cudaError_t err);
/* qc_init(), then the sticky error if the context is dead, then makes the
 * thread's current device the session's. */
cudaError_t qc_ready(void);
/* One command; maps transport errors and QCUDA_ST_* to cudaError_t and
 * notes sticky errors. value may be NULL. */
cudaError_t qc_call(uint32_t cmd, const void *args, uint32_t args_len,
		    void *out, uint32_t out_len, enum qt_dir dir, void *data,
		    uint64_t data_len, uint64_t *value);
/* qc_call without flushing posted work first (batch.c sends batches with it). */
cudaError_t qc_call_unbatched(uint32_t cmd, const void *args, uint32_t args_len,
			      void *out, uint32_t out_len, enum qt_dir dir, void *data,
			      uint64_t data_len, uint64_t *value);
/* Prints "qcuda: <msg>" on stderr. */
void qc_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints only when QCUDA_DEBUG is set. */
void qc_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int qc_debug_on;
int qc_current_device(void);
/* Starts a detached thread of the library's own (stack: 0 for the default)
 * that takes no signals: they stay the program's. 0 on success. */
int qc_start_thread(void *(*fn)(void *), size_t stack);

/* ---- memory.c ---- */

/* Forgets every allocation after DEVICE_RESET (the backend freed them). */
void qc_mem_reset(void);
/* cudaMemcpy*'s core (not recording the error). */
cudaError_t qc_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
		      cudaStream_t stream, int async, int ptds);
/* A module variable's device range (VAR_GET), so that copies and
 * cudaPointerGetAttributes know it as device memory. */
void qc_mem_add_symbol(uint64_t dptr, uint64_t size);
void qc_mem_remove_symbol(uint64_t dptr);
/* For managed.c: calls fn on the managed allocation that holds all of
 * [p, p + n) (n > 0) with its start, its size and its hint slot, under the
 * maps' read lock (the allocation cannot be freed meanwhile); returns what
 * fn returns, or cudaErrorInvalidValue if no managed allocation holds the
 * whole range. */
typedef cudaError_t (*qc_managed_fn)(void **hints, uint64_t start, uint64_t size, void *arg);
cudaError_t qc_mem_managed(const void *p, size_t n, qc_managed_fn fn, void *arg);

/* ---- managed.c ---- */

/* Frees an allocation's hints (qc_mem_managed's slot) with the allocation. */
void qc_managed_free(void *hints);

/* ---- module.c ---- */

/* Forgets every module, function and variable handle after DEVICE_RESET
 * (the backend freed them; they are loaded again on next use). */
void qc_module_reset(void);

/* ---- stream.c ---- */

/* Stream handle on the wire for a cudaStream_t; ptds: the per-thread
 * default stream variant (_ptds/_ptsz entry points) was called. */
uint64_t qc_stream(cudaStream_t s, int ptds);
/* Whether s is a special stream or one the process created and holds. */
int qc_stream_known(cudaStream_t s, int ptds);

/* ---- batch.c ---- */

/* Posts a command that only enqueues work (see batch.c for which): it is sent
 * later with others, in order; errors come back through qc_deferred. */
cudaError_t qc_post(uint32_t cmd, const void *args, uint32_t len);
/* Sends posted work now (qc_call does it before every command). */
void qc_flush(void);
/* For synchronizing calls: e if it is an error, else the first error of
 * posted work since the last such call (cleared), else cudaSuccess. */
cudaError_t qc_deferred(cudaError_t e);

/* ---- callback.c ---- */

/* Forgets the host functions marked and not run, after DEVICE_RESET (the
 * backend forgot them too; natively they never run). */
void qc_callback_reset(void);

/* ---- handles.c ---- */

/* The stream and event handles the process holds (for posted work's checks). */
enum qc_handle_kind { QC_STREAM = 1, QC_EVENT = 2 };
cudaError_t qc_handle_add(enum qc_handle_kind kind, uint64_t h);
void qc_handle_remove(enum qc_handle_kind kind, uint64_t h);
int qc_handle_known(enum qc_handle_kind kind, uint64_t h);
void qc_handle_reset(void);

/* ---- output.c ---- */

/* After every reply to a command (cmd): strips QCUDA_ST_OUTPUT from *status
 * and, if it was set, fetches the device output (printf, asserts) waiting in
 * the backend and writes it to stdout / stderr as CUDA would. */
void qc_output_reply(uint32_t cmd, uint32_t *status);

/* ---- errtab.c ---- */
const char *qc_error_name(int err);	/* NULL if unknown */
const char *qc_error_string(int err);	/* NULL if unknown */

#endif
