/* SPDX-License-Identifier: MIT */
/*
 * What the driver API's graph files (graph.c, graph_exec.c) share: the
 * casts of its handles to the runtime's, and the node operations made from
 * the driver's own parameter structs (graph.c).
 */
#ifndef QCUDA_CU_GRAPH_H
#define QCUDA_CU_GRAPH_H

#include "cu.h"
#include "../lib/graph.h"

#define RG(x) ((cudaGraph_t)(x))
#define RN(x) ((cudaGraphNode_t)(x))
#define RX(x) ((cudaGraphExec_t)(x))

/* A kernel node from CUDA_KERNEL_NODE_PARAMS: the kernel (kern) or function
 * (func), kernelParams or extra's buffer. */
cudaError_t cu_graph_kernel_op(struct qc_node_op *op, const CUDA_KERNEL_NODE_PARAMS *p);
/* The CUDA 10 ABI's kernel node params as today's. */
CUDA_KERNEL_NODE_PARAMS cu_graph_kernel_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p);
/* A memcpy node from CUDA_MEMCPY3D (linear memory; arrays are not served). */
cudaError_t cu_graph_memcpy_op(struct qc_node_op *op, const CUDA_MEMCPY3D *c);
/* The runtime's memset parameters of the driver's. */
struct cudaMemsetParams cu_graph_memset_params(const CUDA_MEMSET_NODE_PARAMS *p);

#endif
