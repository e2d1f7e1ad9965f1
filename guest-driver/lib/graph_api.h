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
/* Whether edges (n of them, or NULL) carry no data: the only edges served. */
int qc_graph_plain_edges(const cudaGraphEdgeData *edges, size_t n);

#endif
