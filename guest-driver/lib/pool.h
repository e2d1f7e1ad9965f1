/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered allocation (pool.c, mempool.c): what the driver API
 * (../libcuda/pool.c) needs beside the runtime's own entry points, which it
 * calls directly.
 */
#ifndef QC_POOL_H
#define QC_POOL_H

#include "qcrt.h"

/* Whether stream is being captured into a graph (capture.c). ptds: the
 * _ptsz entry point. */
int qc_capture_active(cudaStream_t stream, int ptds);

/* The runtime's per-thread-default-stream twins (cuda_runtime_api.h
 * declares them only for programs built with --default-stream per-thread). */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream);

#endif
