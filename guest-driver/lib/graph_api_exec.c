/* SPDX-License-Identifier: MIT */
/*
 * The runtime's entry points for executable graphs (see graph_api.c):
 * instantiating, launching, updating, a child graph node's graph, enabling
 * nodes.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_api.h"

/* ------------------------------------------------------------ executable graphs */

static cudaError_t instantiate(cudaGraphExec_t *out, cudaGraph_t graph, unsigned long long flags)
{
	/* Auto-free-on-launch and device launch need memory nodes and device
	 * graphs; upload and priority flags change nothing here. */
	const unsigned long long known = cudaGraphInstantiateFlagAutoFreeOnLaunch | cudaGraphInstantiateFlagUpload |
					 cudaGraphInstantiateFlagDeviceLaunch | cudaGraphInstantiateFlagUseNodePriority;

	if (!out || (flags & ~known))
		return cudaErrorInvalidValue;
	if (flags & cudaGraphInstantiateFlagDeviceLaunch)
		return qc_graph_not_served("cudaGraphInstantiateFlagDeviceLaunch");
	return qc_exec_new(G(graph), flags, (struct qc_exec **)out);
}

QC_API cudaError_t cudaGraphInstantiate(cudaGraphExec_t *pGraphExec, cudaGraph_t graph, unsigned long long flags)
{
	return qc_ret(instantiate(pGraphExec, graph, flags));
}

QC_API cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						 unsigned long long flags)
{
	return qc_ret(instantiate(pGraphExec, graph, flags));
}

static cudaError_t instantiate_params(cudaGraphExec_t *out, cudaGraph_t graph, cudaGraphInstantiateParams *p)
{
	cudaError_t e;

	if (!p)
		return cudaErrorInvalidValue;
	e = instantiate(out, graph, p->flags);
	p->errNode_out = NULL;
	p->result_out = e == cudaSuccess ? cudaGraphInstantiateSuccess : cudaGraphInstantiateError;
	return e;
}

QC_API cudaError_t cudaGraphInstantiateWithParams(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						  cudaGraphInstantiateParams *instantiateParams)
{
	return qc_ret(instantiate_params(pGraphExec, graph, instantiateParams));
}

QC_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						       cudaGraphInstantiateParams *instantiateParams);
QC_API cudaError_t cudaGraphInstantiateWithParams_ptsz(cudaGraphExec_t *pGraphExec, cudaGraph_t graph,
						       cudaGraphInstantiateParams *instantiateParams)
{
	return qc_ret(instantiate_params(pGraphExec, graph, instantiateParams));
}

QC_API cudaError_t cudaGraphExecGetFlags(cudaGraphExec_t graphExec, unsigned long long *flags)
{
	if (!qc_exec_known(X(graphExec)) || !flags)
		return qc_ret(cudaErrorInvalidValue);
	*flags = X(graphExec)->flags;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec)
{
	if (!qc_exec_known(X(graphExec)))
		return qc_ret(cudaErrorInvalidValue);
	qc_exec_free(X(graphExec));
	return cudaSuccess;
}

/* Launching into a captured stream is refused, and invalidates the
 * capture, as CUDA 13 does (measured on the H100). */
static cudaError_t launch(cudaGraphExec_t graphExec, cudaStream_t stream, int ptds)
{
	struct qc_exec *x = X(graphExec);
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!qc_exec_known(x))
		return cudaErrorInvalidValue;
	e = qc_capture_refuse(stream, ptds);
	return e != cudaSuccess ? e : qc_exec_launch(x, stream, ptds);
}

QC_API cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return qc_ret(launch(graphExec, stream, 0));
}

QC_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
QC_API cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return qc_ret(launch(graphExec, stream, 1));
}

/* Nothing to upload: a graph's work crosses when it is launched. */
static cudaError_t upload(cudaGraphExec_t graphExec, cudaStream_t stream, int ptds)
{
	if (!qc_exec_known(X(graphExec)))
		return cudaErrorInvalidValue;
	return qc_stream_known(stream, ptds) ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

QC_API cudaError_t cudaGraphUpload(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return qc_ret(upload(graphExec, stream, 0));
}

QC_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
QC_API cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream)
{
	return qc_ret(upload(graphExec, stream, 1));
}

QC_API cudaError_t cudaGraphExecUpdate(cudaGraphExec_t hGraphExec, cudaGraph_t hGraph,
				       cudaGraphExecUpdateResultInfo *resultInfo)
{
	enum cudaGraphExecUpdateResult result = cudaGraphExecUpdateError;
	const struct qc_node *node = NULL;
	cudaError_t e;

	if (!resultInfo)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_exec_update(X(hGraphExec), G(hGraph), &result, &node);
	resultInfo->result = result;
	resultInfo->errorNode = (cudaGraphNode_t)(void *)node;
	resultInfo->errorFromNode = NULL;
	return qc_ret(e);
}

/* ------------------------------------------------------------ node parameters */

QC_API cudaError_t cudaGraphExecChildGraphNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							cudaGraph_t childGraph)
{
	struct cudaGraphNodeParams p = { .type = cudaGraphNodeTypeGraph, .graph = { .graph = childGraph } };
	struct qc_node_call c = { .what = QC_NODE_EXEC_SET, .exec = X(hGraphExec), .node = N(node) };

	return qc_ret(qc_node_call(&c, &p, NULL));
}

/* ------------------------------------------------------------ enabling nodes */

/* A graph with conditional nodes runs on the host as one graph: its nodes
 * cannot be disabled here. */
static cudaError_t node_enabled(cudaGraphExec_t x, cudaGraphNode_t node, int set, unsigned int *enabled)
{
	cudaError_t e;

	if (!qc_exec_known(X(x)) || !qc_node_known(N(node)) || !enabled)
		return cudaErrorInvalidValue;
	e = qc_exec_enabled(X(x), N(node), set, enabled);
	return e == cudaErrorNotSupported ? qc_graph_not_served("enabling nodes of a graph with conditional nodes") : e;
}

QC_API cudaError_t cudaGraphNodeSetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int isEnabled)
{
	return qc_ret(node_enabled(hGraphExec, hNode, 1, &isEnabled));
}

QC_API cudaError_t cudaGraphNodeGetEnabled(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode, unsigned int *isEnabled)
{
	return qc_ret(node_enabled(hGraphExec, hNode, 0, isEnabled));
}
