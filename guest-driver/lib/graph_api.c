/* SPDX-License-Identifier: MIT */
/*
 * The runtime's graph and stream capture entry points (see graph.h): a
 * cudaGraph_t is a struct qc_graph *, a cudaGraphNode_t a struct qc_node *,
 * a cudaGraphExec_t a struct qc_exec *, a cudaUserObject_t a struct
 * qc_uobj *. Not served: external semaphore nodes, copies from or to CUDA
 * arrays; they answer cudaErrorNotSupported with a note.
 *
 * graph_api.c: capture, graphs, listing and edges, user objects, DOT;
 * graph_api_nodes.c: the nodes of each type; graph_api_exec.c: executable
 * graphs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_api.h"

cudaError_t qc_graph_not_served(const char *what)
{
	qc_msg("%s is not supported by qcuda: returning cudaErrorNotSupported", what);
	return cudaErrorNotSupported;
}

/* ------------------------------------------------------------ capture */

static cudaError_t begin(cudaStream_t stream, int ptds, enum cudaStreamCaptureMode mode)
{
	cudaError_t e = qc_ready();

	return qc_ret(e == cudaSuccess ? qc_capture_begin(stream, ptds, mode, NULL, NULL, 0) : e);
}

QC_API cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return begin(stream, 0, mode);
}

QC_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode);
QC_API cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, enum cudaStreamCaptureMode mode)
{
	return begin(stream, 1, mode);
}

static cudaError_t begin_to(cudaStream_t stream, int ptds, cudaGraph_t graph, const cudaGraphNode_t *deps,
			    const cudaGraphEdgeData *edges, size_t n, enum cudaStreamCaptureMode mode)
{
	cudaError_t e;

	QC_ENTER(e);
	for (size_t i = 0; edges && i < n; i++)
		if (edges[i].type || edges[i].from_port || edges[i].to_port)
			return qc_ret(qc_graph_not_served("a graph edge with data"));
	return qc_ret(qc_capture_begin(stream, ptds, mode, G(graph), (struct qc_node *const *)deps, n));
}

QC_API cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t stream, cudaGraph_t graph,
						 const cudaGraphNode_t *dependencies,
						 const cudaGraphEdgeData *dependencyData, size_t numDependencies,
						 enum cudaStreamCaptureMode mode)
{
	return begin_to(stream, 0, graph, dependencies, dependencyData, numDependencies, mode);
}

QC_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
						      const cudaGraphNode_t *dependencies,
						      const cudaGraphEdgeData *dependencyData, size_t numDependencies,
						      enum cudaStreamCaptureMode mode);
QC_API cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
						      const cudaGraphNode_t *dependencies,
						      const cudaGraphEdgeData *dependencyData, size_t numDependencies,
						      enum cudaStreamCaptureMode mode)
{
	return begin_to(stream, 1, graph, dependencies, dependencyData, numDependencies, mode);
}

QC_API cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return qc_ret(qc_capture_end(stream, 0, (struct qc_graph **)pGraph));
}

QC_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph);
QC_API cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *pGraph)
{
	return qc_ret(qc_capture_end(stream, 1, (struct qc_graph **)pGraph));
}

QC_API cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return qc_ret(qc_capture_info(stream, 0, pCaptureStatus, NULL, NULL, NULL, NULL, NULL));
}

QC_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus);
QC_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *pCaptureStatus)
{
	return qc_ret(qc_capture_info(stream, 1, pCaptureStatus, NULL, NULL, NULL, NULL, NULL));
}

QC_API cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
					    unsigned long long *id, cudaGraph_t *graph, const cudaGraphNode_t **deps,
					    const cudaGraphEdgeData **edges, size_t *ndeps)
{
	return qc_ret(qc_capture_info(stream, 0, status, id, (struct qc_graph **)graph, (struct qc_node *const **)deps,
				      edges, ndeps));
}

QC_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
						 unsigned long long *id, cudaGraph_t *graph,
						 const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
						 size_t *ndeps);
QC_API cudaError_t cudaStreamGetCaptureInfo_ptsz(cudaStream_t stream, enum cudaStreamCaptureStatus *status,
						 unsigned long long *id, cudaGraph_t *graph,
						 const cudaGraphNode_t **deps, const cudaGraphEdgeData **edges,
						 size_t *ndeps)
{
	return qc_ret(qc_capture_info(stream, 1, status, id, (struct qc_graph **)graph, (struct qc_node *const **)deps,
				      edges, ndeps));
}

QC_API cudaError_t cudaStreamUpdateCaptureDependencies(cudaStream_t stream, cudaGraphNode_t *deps,
						       const cudaGraphEdgeData *edges, size_t n, unsigned int flags)
{
	(void)edges;
	return qc_ret(qc_capture_update_deps(stream, 0, (struct qc_node *const *)deps, n, flags));
}

QC_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream, cudaGraphNode_t *deps,
							    const cudaGraphEdgeData *edges, size_t n,
							    unsigned int flags);
QC_API cudaError_t cudaStreamUpdateCaptureDependencies_ptsz(cudaStream_t stream, cudaGraphNode_t *deps,
							    const cudaGraphEdgeData *edges, size_t n,
							    unsigned int flags)
{
	(void)edges;
	return qc_ret(qc_capture_update_deps(stream, 1, (struct qc_node *const *)deps, n, flags));
}

QC_API cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode)
{
	return qc_ret(qc_capture_exchange_mode(mode));
}

/* ------------------------------------------------------------ graphs */

QC_API cudaError_t cudaGraphCreate(cudaGraph_t *pGraph, unsigned int flags)
{
	struct qc_graph *g;

	if (!pGraph || flags)
		return qc_ret(cudaErrorInvalidValue);
	g = qc_graph_new();
	if (!g)
		return qc_ret(cudaErrorMemoryAllocation);
	*pGraph = (cudaGraph_t)(void *)g;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
	if (!qc_graph_known(G(graph)))
		return qc_ret(cudaErrorInvalidValue);
	qc_graph_free(G(graph));
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphClone(cudaGraph_t *pGraphClone, cudaGraph_t originalGraph)
{
	struct qc_graph *c;

	if (!pGraphClone || !qc_graph_known(G(originalGraph)))
		return qc_ret(cudaErrorInvalidValue);
	c = qc_graph_clone(G(originalGraph), NULL);
	if (!c)
		return qc_ret(cudaErrorMemoryAllocation);
	*pGraphClone = (cudaGraph_t)(void *)c;
	return cudaSuccess;
}

/* A clone has its original's nodes at the same places. */
QC_API cudaError_t cudaGraphNodeFindInClone(cudaGraphNode_t *pNode, cudaGraphNode_t originalNode,
					    cudaGraph_t clonedGraph)
{
	struct qc_node *o = N(originalNode);
	struct qc_graph *c = G(clonedGraph);

	if (!pNode || !qc_node_known(o) || !qc_graph_known(c) || o->index >= c->n ||
	    c->nodes[o->index]->op.type != o->op.type)
		return qc_ret(cudaErrorInvalidValue);
	*pNode = (cudaGraphNode_t)(void *)c->nodes[o->index];
	return cudaSuccess;
}

/* ------------------------------------------------------------ listing */

/* CUDA's convention for lists: with out NULL, *count is set to how many
 * there are; else up to *count are written, the rest of out is NULLed, and
 * *count becomes how many were written. */
static cudaError_t list(cudaGraphNode_t *out, size_t *count, struct qc_node *const *v, size_t n)
{
	if (!count)
		return cudaErrorInvalidValue;
	if (!out) {
		*count = n;
		return cudaSuccess;
	}
	for (size_t i = 0; i < *count; i++)
		out[i] = i < n ? (cudaGraphNode_t)(void *)v[i] : NULL;
	if (n < *count)
		*count = n;
	return cudaSuccess;
}

static void zero_edges(cudaGraphEdgeData *edges, size_t n)
{
	if (edges)
		memset(edges, 0, n * sizeof(*edges));
}

QC_API cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t *nodes, size_t *numNodes)
{
	if (!qc_graph_known(G(graph)))
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(list(nodes, numNodes, G(graph)->nodes, G(graph)->n));
}

/* A list built for one answer. */
static cudaError_t list_where(cudaGraphNode_t *out, size_t *count, const struct qc_graph *g,
			      int (*keep)(const struct qc_node *n, const void *arg), const void *arg)
{
	struct qc_node **v = malloc((g->n ? g->n : 1) * sizeof(*v));
	size_t k = 0;
	cudaError_t e;

	if (!v)
		return cudaErrorMemoryAllocation;
	for (size_t i = 0; i < g->n; i++)
		if (keep(g->nodes[i], arg))
			v[k++] = g->nodes[i];
	e = list(out, count, v, k);
	free(v);
	return e;
}

static int is_root(const struct qc_node *n, const void *arg)
{
	(void)arg;
	return n->ndeps == 0;
}

static int depends_on_arg(const struct qc_node *n, const void *arg)
{
	for (size_t i = 0; i < n->ndeps; i++)
		if (n->deps[i] == arg)
			return 1;
	return 0;
}

QC_API cudaError_t cudaGraphGetRootNodes(cudaGraph_t graph, cudaGraphNode_t *pRootNodes, size_t *pNumRootNodes)
{
	if (!qc_graph_known(G(graph)))
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(list_where(pRootNodes, pNumRootNodes, G(graph), is_root, NULL));
}

QC_API cudaError_t cudaGraphNodeGetDependencies(cudaGraphNode_t node, cudaGraphNode_t *pDependencies,
						cudaGraphEdgeData *edgeData, size_t *pNumDependencies)
{
	cudaError_t e;

	if (!qc_node_known(N(node)))
		return qc_ret(cudaErrorInvalidValue);
	e = list(pDependencies, pNumDependencies, N(node)->deps, N(node)->ndeps);
	if (e == cudaSuccess && pDependencies)
		zero_edges(edgeData, *pNumDependencies);
	return qc_ret(e);
}

QC_API cudaError_t cudaGraphNodeGetDependentNodes(cudaGraphNode_t node, cudaGraphNode_t *pDependentNodes,
						  cudaGraphEdgeData *edgeData, size_t *pNumDependentNodes)
{
	cudaError_t e;

	if (!qc_node_known(N(node)))
		return qc_ret(cudaErrorInvalidValue);
	e = list_where(pDependentNodes, pNumDependentNodes, N(node)->graph, depends_on_arg, N(node));
	if (e == cudaSuccess && pDependentNodes)
		zero_edges(edgeData, *pNumDependentNodes);
	return qc_ret(e);
}

QC_API cudaError_t cudaGraphGetEdges(cudaGraph_t graph, cudaGraphNode_t *from, cudaGraphNode_t *to,
				     cudaGraphEdgeData *edgeData, size_t *numEdges)
{
	struct qc_graph *g = G(graph);
	size_t n = 0, k = 0;

	if (!qc_graph_known(g) || !numEdges || (!from) != (!to))
		return qc_ret(cudaErrorInvalidValue);
	for (size_t i = 0; i < g->n; i++)
		n += g->nodes[i]->ndeps;
	if (!from) {
		*numEdges = n;
		return cudaSuccess;
	}
	for (size_t i = 0; i < g->n; i++)
		for (size_t j = 0; j < g->nodes[i]->ndeps && k < *numEdges; j++, k++) {
			from[k] = (cudaGraphNode_t)(void *)g->nodes[i]->deps[j];
			to[k] = (cudaGraphNode_t)(void *)g->nodes[i];
		}
	for (size_t i = k; i < *numEdges; i++)
		from[i] = to[i] = NULL;
	zero_edges(edgeData, k);
	*numEdges = k;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphAddDependencies(cudaGraph_t graph, const cudaGraphNode_t *from, const cudaGraphNode_t *to,
					    const cudaGraphEdgeData *edgeData, size_t numDependencies)
{
	if (!qc_graph_plain_edges(edgeData, numDependencies))
		return qc_ret(qc_graph_not_served("a graph edge with data"));
	return qc_ret(qc_graph_add_edges(G(graph), (struct qc_node *const *)from, (struct qc_node *const *)to,
					 numDependencies));
}

QC_API cudaError_t cudaGraphRemoveDependencies(cudaGraph_t graph, const cudaGraphNode_t *from,
					       const cudaGraphNode_t *to, const cudaGraphEdgeData *edgeData,
					       size_t numDependencies)
{
	if (!qc_graph_plain_edges(edgeData, numDependencies))
		return qc_ret(cudaErrorInvalidValue);
	return qc_ret(qc_graph_remove_edges(G(graph), (struct qc_node *const *)from, (struct qc_node *const *)to,
					    numDependencies));
}

/* ------------------------------------------------------------ user objects */

#define U(x) ((struct qc_uobj *)(void *)(x))

QC_API cudaError_t cudaUserObjectCreate(cudaUserObject_t *object_out, void *ptr, cudaHostFn_t destroy,
					unsigned int initialRefcount, unsigned int flags)
{
	return qc_ret(qc_uobj_create(ptr, destroy, initialRefcount, flags, (struct qc_uobj **)object_out));
}

QC_API cudaError_t cudaUserObjectRetain(cudaUserObject_t object, unsigned int count)
{
	return qc_ret(qc_uobj_retain(U(object), count));
}

QC_API cudaError_t cudaUserObjectRelease(cudaUserObject_t object, unsigned int count)
{
	return qc_ret(qc_uobj_release(U(object), count));
}

QC_API cudaError_t cudaGraphRetainUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count,
					     unsigned int flags)
{
	return qc_ret(qc_graph_retain_uobj(G(graph), U(object), count, flags));
}

QC_API cudaError_t cudaGraphReleaseUserObject(cudaGraph_t graph, cudaUserObject_t object, unsigned int count)
{
	return qc_ret(qc_graph_release_uobj(G(graph), U(object), count));
}

/* ------------------------------------------------------------ DOT */

static const char *type_name(enum cudaGraphNodeType t)
{
	switch (t) {
	case cudaGraphNodeTypeKernel:
		return "KERNEL";
	case cudaGraphNodeTypeMemcpy:
		return "MEMCPY";
	case cudaGraphNodeTypeMemset:
		return "MEMSET";
	case cudaGraphNodeTypeHost:
		return "HOST";
	case cudaGraphNodeTypeGraph:
		return "GRAPH";
	case cudaGraphNodeTypeEmpty:
		return "EMPTY";
	case cudaGraphNodeTypeWaitEvent:
		return "EVENT_WAIT";
	case cudaGraphNodeTypeEventRecord:
		return "EVENT_RECORD";
	default:
		return "NODE";
	}
}

/* The nodes and edges in Graphviz's DOT language (CUDA's own output has
 * more detail; flags are accepted and ignored). */
QC_API cudaError_t cudaGraphDebugDotPrint(cudaGraph_t graph, const char *path, unsigned int flags)
{
	struct qc_graph *g = G(graph);
	FILE *f;

	(void)flags;
	if (!qc_graph_known(g) || !path)
		return qc_ret(cudaErrorInvalidValue);
	f = fopen(path, "w");
	if (!f)
		return qc_ret(cudaErrorOperatingSystem);
	fprintf(f, "digraph qcuda_graph {\n");
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node *n = g->nodes[i];

		fprintf(f, "  n%zu [label=\"%zu %s%s%s\"];\n", i, i, type_name(n->op.type),
			n->op.type == cudaGraphNodeTypeKernel ? " " : "",
			n->op.type == cudaGraphNodeTypeKernel ? n->op.kernel.k->device_name : "");
		for (size_t j = 0; j < n->ndeps; j++)
			fprintf(f, "  n%zu -> n%zu;\n", n->deps[j]->index, i);
	}
	fprintf(f, "}\n");
	return qc_ret(fclose(f) ? cudaErrorOperatingSystem : cudaSuccess);
}
