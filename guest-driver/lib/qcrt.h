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
 * errors, devices), memory.c (allocations, copies, host memory), stream.c
 * (streams, events), module.c (fat binaries, launches), errtab.c (error
 * names and strings), stubs.c (entry points qcuda does not implement).
 *
 * Concurrency: no lock is ever held across a device call; the tables of
 * memory.c have one rwlock held for lookups/updates only; the last error,
 * the current device and the launch configuration stack are per thread.
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
/* Prints "qcuda: <msg>" on stderr. */
void qc_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints only when QCUDA_DEBUG is set. */
void qc_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int qc_debug_on;
int qc_current_device(void);

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

/* ---- module.c ---- */

/* Forgets every module, function and variable handle after DEVICE_RESET
 * (the backend freed them; they are loaded again on next use). */
void qc_module_reset(void);

/* ---- stream.c ---- */

/* Stream handle on the wire for a cudaStream_t; ptds: the per-thread
 * default stream variant (_ptds/_ptsz entry points) was called. */
uint64_t qc_stream(cudaStream_t s, int ptds);

/* ---- errtab.c ---- */
const char *qc_error_name(int err);	/* NULL if unknown */
const char *qc_error_string(int err);	/* NULL if unknown */

#endif
