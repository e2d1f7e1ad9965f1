/* SPDX-License-Identifier: MIT */
/*
 * Executable graphs, the driver API's (see graph.c): instantiating,
 * launching, updating, the parameters of nodes in an executable graph,
 * enabling nodes; and kernel node attributes.
 */
#include <stddef.h>
#include <string.h>

#include "cu.h"
#include "../lib/graph.h"
#include "cu_graph.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuGraphExecKernelNodeSetParams
#undef cuGraphInstantiate

/* ------------------------------------------------------------ executable graphs */

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph, unsigned long long flags)
{
	CU_RUN(cudaGraphInstantiateWithFlags((cudaGraphExec_t *)phGraphExec, RG(hGraph), flags));
}

/* CUDA_GRAPH_INSTANTIATE_PARAMS is the runtime's cudaGraphInstantiateParams
 * (the flags, an upload stream, what went wrong; the same result values):
 * the runtime's call answers it. */
_Static_assert(sizeof(CUDA_GRAPH_INSTANTIATE_PARAMS) == sizeof(cudaGraphInstantiateParams), "instantiate params");
_Static_assert(offsetof(CUDA_GRAPH_INSTANTIATE_PARAMS, result_out) == offsetof(cudaGraphInstantiateParams, result_out),
	       "instantiate result");
_Static_assert((int)CUDA_GRAPH_INSTANTIATE_ERROR == (int)cudaGraphInstantiateError, "instantiate result values");

static CUresult instantiate_params(CUgraphExec *phGraphExec, CUgraph hGraph, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	CU_RUN(cudaGraphInstantiateWithParams((cudaGraphExec_t *)phGraphExec, RG(hGraph),
					      (cudaGraphInstantiateParams *)(void *)p));
}

CUresult cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
				      CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec *phGraphExec, CUgraph hGraph,
					   CUDA_GRAPH_INSTANTIATE_PARAMS *instantiateParams)
{
	return instantiate_params(phGraphExec, hGraph, instantiateParams);
}

CUresult cuGraphExecGetFlags(CUgraphExec hGraphExec, cuuint64_t *flags)
{
	unsigned long long f = 0;
	CUresult r;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cudaGraphExecGetFlags(RX(hGraphExec), &f));
	if (r == CUDA_SUCCESS)
		*flags = f;
	return r;
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	return cu_result(cudaGraphExecDestroy(RX(hGraphExec)));
}

cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphUpload_ptsz(cudaGraphExec_t graphExec, cudaStream_t stream);

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	CU_RUN(cudaGraphLaunch(RX(hGraphExec), (cudaStream_t)hStream));
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	CU_RUN(cudaGraphLaunch_ptsz(RX(hGraphExec), (cudaStream_t)hStream));
}

CUresult cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream)
{
	CU_RUN(cudaGraphUpload(RX(hGraphExec), (cudaStream_t)hStream));
}

CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	CU_RUN(cudaGraphUpload_ptsz(RX(hGraphExec), (cudaStream_t)hStream));
}

_Static_assert(sizeof(CUgraphExecUpdateResultInfo) == sizeof(cudaGraphExecUpdateResultInfo), "update result info");

CUresult cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo *resultInfo)
{
	CU_RUN(cudaGraphExecUpdate(RX(hGraphExec), RG(hGraph), (cudaGraphExecUpdateResultInfo *)(void *)resultInfo));
}

static CUresult exec_set(CUgraphExec x, CUgraphNode node, struct qc_node_op *op, cudaError_t made)
{
	if (made != cudaSuccess)
		return cu_result(made);
	if (!qc_exec_known((struct qc_exec *)(void *)x) || !qc_node_known((struct qc_node *)(void *)node)) {
		qc_node_op_free(op);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return cu_result(qc_exec_set_op((struct qc_exec *)(void *)x, (struct qc_node *)(void *)node, op));
}

CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
					   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	struct qc_node_op op;
	CUresult r = cu_enter();

	return r != CUDA_SUCCESS ? r : exec_set(hGraphExec, hNode, &op, cu_graph_kernel_op(&op, nodeParams));
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS q;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	q = cu_graph_kernel_v1(nodeParams);
	return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &q);
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, const CUDA_MEMCPY3D *copyParams,
					CUcontext ctx)
{
	struct qc_node_op op;

	(void)ctx;
	return exec_set(hGraphExec, hNode, &op, cu_graph_memcpy_op(&op, copyParams));
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
					const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	struct cudaMemsetParams p;

	(void)ctx;
	if (!memsetParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = cu_graph_memset_params(memsetParams);
	return cu_result(cudaGraphExecMemsetNodeSetParams(RX(hGraphExec), RN(hNode), &p));
}

CUresult cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
				      const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	return cu_result(cudaGraphExecHostNodeSetParams(RX(hGraphExec), RN(hNode),
							(const struct cudaHostNodeParams *)(const void *)nodeParams));
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	return cu_result(cudaGraphExecEventRecordNodeSetEvent(RX(hGraphExec), RN(hNode), (cudaEvent_t)event));
}

CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event)
{
	return cu_result(cudaGraphExecEventWaitNodeSetEvent(RX(hGraphExec), RN(hNode), (cudaEvent_t)event));
}

/* The CUDA 10 and 11.0 ABIs: an error node and a log instead of flags. */
static CUresult instantiate_old(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
				size_t bufferSize)
{
	CUresult r = cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);

	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = 0;
	return r;
}

CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
			    size_t bufferSize);
CUresult cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
			    size_t bufferSize)
{
	return instantiate_old(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
			       size_t bufferSize)
{
	return instantiate_old(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph childGraph)
{
	return cu_result(cudaGraphExecChildGraphNodeSetParams(RX(hGraphExec), RN(hNode), RG(childGraph)));
}

/* ------------------------------------------------------------ enabling nodes, kernel node attributes */

CUresult cuGraphNodeSetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled)
{
	return cu_result(cudaGraphNodeSetEnabled(RX(hGraphExec), RN(hNode), isEnabled));
}

CUresult cuGraphNodeGetEnabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int *isEnabled)
{
	return cu_result(cudaGraphNodeGetEnabled(RX(hGraphExec), RN(hNode), isEnabled));
}

/* The driver's launch attributes are the runtime's, value for value. */
_Static_assert(sizeof(CUkernelNodeAttrValue) == sizeof(cudaKernelNodeAttrValue), "kernel node attribute value");
_Static_assert((int)CU_LAUNCH_ATTRIBUTE_PRIORITY == (int)cudaLaunchAttributePriority &&
		       (int)CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING ==
			       (int)cudaLaunchAttributeNvlinkUtilCentricScheduling,
	       "launch attribute ids");

CUresult cuGraphKernelNodeGetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr, CUkernelNodeAttrValue *value_out)
{
	return cu_result(cudaGraphKernelNodeGetAttribute(RN(hNode), (cudaKernelNodeAttrID)attr,
							 (cudaKernelNodeAttrValue *)(void *)value_out));
}

CUresult cuGraphKernelNodeSetAttribute(CUgraphNode hNode, CUkernelNodeAttrID attr, const CUkernelNodeAttrValue *value)
{
	return cu_result(cudaGraphKernelNodeSetAttribute(RN(hNode), (cudaKernelNodeAttrID)attr,
							 (const cudaKernelNodeAttrValue *)(const void *)value));
}

CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	return cu_result(cudaGraphKernelNodeCopyAttributes(RN(dst), RN(src)));
}
