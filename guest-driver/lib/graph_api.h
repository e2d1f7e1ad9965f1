/* SPDX-License-Identifier: MIT */
/*
 * What the runtime's graph entry points (graph_api*.c) share: the casts of
 * CUDA's handles to the library's objects, and how they answer.
 */
#ifndef QC_GRAPH_API_H
#define QC_GRAPH_API_H

#include "graph.h"

#define G(x) ((struct qc_graph *)(void *)(x))
#define N(x) ((struct qc_node *)(void *)(x))
#define X(x) ((struct qc_exec *)(void *)(x))

/* What qcuda does not serve: a note on stderr, cudaErrorNotSupported. */
cudaError_t qc_graph_not_served(const char *what);

/* The runtime's kernel and memcpy node operations (graph_api_nodes.c),
 * which the generic calls (graph_params.c) make too. */
cudaError_t qc_graph_api_kernel_op(struct qc_node_op *op, const struct cudaKernelNodeParams *p);
cudaError_t qc_graph_api_memcpy_op(struct qc_node_op *op, const struct cudaMemcpy3DParms *p);

#endif
