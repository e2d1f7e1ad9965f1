/* SPDX-License-Identifier: MIT */
/*
 * Graphs, the driver API's: the runtime layer's graphs (../lib/graph.h),
 * under the thread's current context. CUgraph, CUgraphNode and CUgraphExec
 * are cudaGraph_t, cudaGraphNode_t and cudaGraphExec_t (the same struct
 * pointers), so most entry points are the runtime's call; nodes whose
 * parameters differ between the two APIs (kernel, memcpy, memset) are built
 * here; the generic calls (cuGraphAddNode_v2, cuGraphNodeSetParams,
 * cuGraphExecNodeSetParams) are the runtime layer's (../lib/graph_params.c).
 * Not served, as in the runtime: batch memop and external semaphore nodes,
 * copies of CUDA arrays. Executable graphs: graph_exec.c.
 */
#include <stddef.h>
#include <string.h>

#include "cu.h"
#include "../lib/graph.h"
#include "cu_graph.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuGraphAddKernelNode
#undef cuGraphKernelNodeGetParams
#undef cuGraphKernelNodeSetParams
#undef cuGraphGetEdges
#undef cuGraphNodeGetDependencies
#undef cuGraphNodeGetDependentNodes
#undef cuGraphAddDependencies
#undef cuGraphRemoveDependencies
#undef cuGraphAddNode

/* ------------------------------------------------------------ graphs */

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	CU_RUN(cudaGraphCreate((cudaGraph_t *)phGraph, flags));
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
	CU_RUN(cudaGraphDestroy(RG(hGraph)));
}

CUresult cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	CU_RUN(cudaGraphClone((cudaGraph_t *)phGraphClone, RG(originalGraph)));
}

CUresult cuGraphNodeFindInClone(CUgraphNode *phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph)
{
	CU_RUN(cudaGraphNodeFindInClone((cudaGraphNode_t *)phNode, RN(hOriginalNode), RG(hClonedGraph)));
}

static CUresult add(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n, struct qc_node_op *op)
{
	if (!out) {
		qc_node_op_free(op);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return cu_result(qc_graph_add((struct qc_graph *)(void *)g, op, (struct qc_node *const *)deps, n,
				      (struct qc_node **)out));
}

/* A kernel node from CUDA_KERNEL_NODE_PARAMS: the kernel (kern) or function
 * (func), kernelParams or extra's buffer. */
cudaError_t cu_graph_kernel_op(struct qc_node_op *op, const CUDA_KERNEL_NODE_PARAMS *p)
{
	const void *packed = NULL;
	size_t size = 0;
	struct qc_kernel *k;

	if (!p || (p->kernelParams && p->extra))
		return cudaErrorInvalidValue;
	k = cu_kernel(p->kern ? (const void *)p->kern : (const void *)p->func);
	if (!k)
		return cudaErrorInvalidResourceHandle;
	if (p->extra && (qc_extra_buffer(p->extra, &packed, &size) != cudaSuccess || !packed))
		return cudaErrorInvalidValue;
	return qc_node_op_kernel(op, k, (dim3){ p->gridDimX, p->gridDimY, p->gridDimZ },
				 (dim3){ p->blockDimX, p->blockDimY, p->blockDimZ }, p->sharedMemBytes, p->kernelParams,
				 packed, size);
}

/* The CUDA 10 ABI's params are the first fields of today's. */
CUDA_KERNEL_NODE_PARAMS cu_graph_kernel_v1(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS q;

	memset(&q, 0, sizeof(q));
	memcpy(&q, p, sizeof(*p));
	return q;
}

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps, size_t n,
			   const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct qc_node_op op;
	CUresult r = cu_enter();

	if (r == CUDA_SUCCESS)
		r = cu_result(cu_graph_kernel_op(&op, p));
	return r == CUDA_SUCCESS ? add(out, g, deps, n, &op) : r;
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	CUDA_KERNEL_NODE_PARAMS p;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = cu_graph_kernel_v1(nodeParams);
	return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, &p);
}

static struct qc_node *typed(CUgraphNode node, enum cudaGraphNodeType type)
{
	struct qc_node *n = (struct qc_node *)(void *)node;

	return qc_node_known(n) && n->op.type == type ? n : NULL;
}

CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *p)
{
	struct cudaKernelNodeParams rp;
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeKernel);
	CUresult r;

	CU_ENTER(r);
	if (!n || !p)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cudaGraphKernelNodeGetParams(RN(hNode), &rp));
	if (r != CUDA_SUCCESS)
		return r;
	memset(p, 0, sizeof(*p));
	/* The kernel as a function and as a CUkernel (the same record here):
	 * NVIDIA's runtime finds its kernel by the CUkernel. */
	p->func = (CUfunction)(void *)n->op.kernel.k;
	p->kern = (CUkernel)(void *)n->op.kernel.k;
	cuCtxGetCurrent(&p->ctx);
	p->gridDimX = rp.gridDim.x, p->gridDimY = rp.gridDim.y, p->gridDimZ = rp.gridDim.z;
	p->blockDimX = rp.blockDim.x, p->blockDimY = rp.blockDim.y, p->blockDimZ = rp.blockDim.z;
	p->sharedMemBytes = rp.sharedMemBytes;
	p->kernelParams = rp.kernelParams;
	return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS q;
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuGraphKernelNodeGetParams_v2(hNode, &q);
	if (r == CUDA_SUCCESS)
		memcpy(p, &q, sizeof(*p));
	return r;
}

static CUresult set_kernel(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeKernel);
	struct qc_node_op op;
	CUresult r;

	CU_ENTER(r);
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cu_graph_kernel_op(&op, p));
	if (r == CUDA_SUCCESS)
		qc_node_set_op(n, &op); /* its attributes stay */
	return r;
}

CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *p)
{
	return set_kernel(hNode, p);
}

CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p);
CUresult cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS q;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	q = cu_graph_kernel_v1(p);
	return set_kernel(hNode, &q);
}

/* One side of a CUDA_MEMCPY3D as an address (arrays are not served). */
static cudaError_t side(CUmemorytype type, const void *host, CUdeviceptr dev, size_t x, size_t y, size_t z,
			size_t pitch, size_t height, const char **out)
{
	const char *base;

	switch (type) {
	case CU_MEMORYTYPE_HOST:
		base = host;
		break;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		base = PTR(dev);
		break;
	case CU_MEMORYTYPE_ARRAY:
		qc_msg("a graph memcpy node with a CUDA array is not supported by qcuda: "
		       "returning CUDA_ERROR_NOT_SUPPORTED");
		return cudaErrorNotSupported;
	default:
		return cudaErrorInvalidValue;
	}
	if (!base)
		return cudaErrorInvalidValue;
	*out = base + x + y * pitch + z * pitch * height;
	return cudaSuccess;
}

cudaError_t cu_graph_memcpy_op(struct qc_node_op *op, const CUDA_MEMCPY3D *c)
{
	const char *src, *dst;
	size_t spitch, dpitch, sheight, dheight;
	cudaError_t e;

	if (!c || !c->WidthInBytes || !c->Height || !c->Depth)
		return cudaErrorInvalidValue;
	spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
	dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
	sheight = c->srcHeight ? c->srcHeight : c->Height;
	dheight = c->dstHeight ? c->dstHeight : c->Height;
	if (c->Height * c->Depth > 1 && (spitch < c->WidthInBytes || dpitch < c->WidthInBytes))
		return cudaErrorInvalidValue;
	e = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcZ, spitch, sheight, &src);
	if (e == cudaSuccess)
		e = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstZ, dpitch, dheight,
			 &dst);
	if (e != cudaSuccess)
		return e;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemcpy;
	op->copy.src = src;
	op->copy.dst = (char *)dst;
	op->copy.width = c->WidthInBytes;
	op->copy.height = c->Height;
	op->copy.depth = c->Depth;
	op->copy.spitch = spitch;
	op->copy.dpitch = dpitch;
	op->copy.sslice = spitch * sheight;
	op->copy.dslice = dpitch * dheight;
	op->copy.kind = cudaMemcpyDefault;
	return cudaSuccess;
}

CUresult cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	struct qc_node_op op;
	CUresult r = cu_enter();

	(void)ctx;
	if (r == CUDA_SUCCESS)
		r = cu_result(cu_graph_memcpy_op(&op, copyParams));
	return r == CUDA_SUCCESS ? add(phGraphNode, hGraph, dependencies, numDependencies, &op) : r;
}

CUresult cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *p)
{
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeMemcpy);

	if (!n || !p)
		return CUDA_ERROR_INVALID_VALUE;
	memset(p, 0, sizeof(*p));
	p->srcMemoryType = p->dstMemoryType = CU_MEMORYTYPE_UNIFIED;
	p->srcDevice = (CUdeviceptr)(uintptr_t)n->op.copy.src;
	p->dstDevice = (CUdeviceptr)(uintptr_t)n->op.copy.dst;
	p->srcPitch = n->op.copy.spitch;
	p->dstPitch = n->op.copy.dpitch;
	p->srcHeight = n->op.copy.sslice / n->op.copy.spitch;
	p->dstHeight = n->op.copy.dslice / n->op.copy.dpitch;
	p->WidthInBytes = n->op.copy.width;
	p->Height = n->op.copy.height;
	p->Depth = n->op.copy.depth;
	return CUDA_SUCCESS;
}

CUresult cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *p)
{
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeMemcpy);
	struct qc_node_op op;
	CUresult r;

	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cu_graph_memcpy_op(&op, p));
	if (r == CUDA_SUCCESS)
		qc_node_set_op(n, &op);
	return r;
}

struct cudaMemsetParams cu_graph_memset_params(const CUDA_MEMSET_NODE_PARAMS *p)
{
	return (struct cudaMemsetParams){ .dst = PTR(p->dst),
					  .pitch = p->pitch,
					  .value = p->value,
					  .elementSize = p->elementSize,
					  .width = p->width,
					  .height = p->height };
}

CUresult cuGraphAddMemsetNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			      size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	struct cudaMemsetParams p;

	(void)ctx;
	if (!memsetParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = cu_graph_memset_params(memsetParams);
	CU_RUN(cudaGraphAddMemsetNode((cudaGraphNode_t *)phGraphNode, RG(hGraph), (const cudaGraphNode_t *)dependencies,
				      numDependencies, &p));
}

CUresult cuGraphMemsetNodeGetParams(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	struct cudaMemsetParams p;
	CUresult r;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cudaGraphMemsetNodeGetParams(RN(hNode), &p));
	if (r == CUDA_SUCCESS)
		*nodeParams = (CUDA_MEMSET_NODE_PARAMS){ .dst = (CUdeviceptr)(uintptr_t)p.dst,
							 .pitch = p.pitch,
							 .value = p.value,
							 .elementSize = p.elementSize,
							 .width = p.width,
							 .height = p.height };
	return r;
}

CUresult cuGraphMemsetNodeSetParams(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	struct cudaMemsetParams p;

	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	p = cu_graph_memset_params(nodeParams);
	return cu_result(cudaGraphMemsetNodeSetParams(RN(hNode), &p));
}

/* CUDA_HOST_NODE_PARAMS is cudaHostNodeParams field for field. */
_Static_assert(sizeof(CUDA_HOST_NODE_PARAMS) == sizeof(struct cudaHostNodeParams), "host node params");

CUresult cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			    size_t numDependencies, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CU_RUN(cudaGraphAddHostNode((cudaGraphNode_t *)phGraphNode, RG(hGraph), (const cudaGraphNode_t *)dependencies,
				    numDependencies, (const struct cudaHostNodeParams *)(const void *)nodeParams));
}

CUresult cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
	return cu_result(cudaGraphHostNodeGetParams(RN(hNode), (struct cudaHostNodeParams *)(void *)nodeParams));
}

CUresult cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	return cu_result(
		cudaGraphHostNodeSetParams(RN(hNode), (const struct cudaHostNodeParams *)(const void *)nodeParams));
}

CUresult cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				  size_t numDependencies, CUgraph childGraph)
{
	CU_RUN(cudaGraphAddChildGraphNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
					  (const cudaGraphNode_t *)dependencies, numDependencies, RG(childGraph)));
}

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode hNode, CUgraph *phGraph)
{
	return cu_result(cudaGraphChildGraphNodeGetGraph(RN(hNode), (cudaGraph_t *)phGraph));
}

CUresult cuGraphAddEmptyNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			     size_t numDependencies)
{
	return cu_result(cudaGraphAddEmptyNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
					       (const cudaGraphNode_t *)dependencies, numDependencies));
}

CUresult cuGraphAddEventRecordNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				   size_t numDependencies, CUevent event)
{
	CU_RUN(cudaGraphAddEventRecordNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
					   (const cudaGraphNode_t *)dependencies, numDependencies, (cudaEvent_t)event));
}

CUresult cuGraphAddEventWaitNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				 size_t numDependencies, CUevent event)
{
	CU_RUN(cudaGraphAddEventWaitNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
					 (const cudaGraphNode_t *)dependencies, numDependencies, (cudaEvent_t)event));
}

CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
	return cu_result(cudaGraphEventRecordNodeGetEvent(RN(hNode), (cudaEvent_t *)event_out));
}

CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode hNode, CUevent event)
{
	return cu_result(cudaGraphEventRecordNodeSetEvent(RN(hNode), (cudaEvent_t)event));
}

CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode hNode, CUevent *event_out)
{
	return cu_result(cudaGraphEventWaitNodeGetEvent(RN(hNode), (cudaEvent_t *)event_out));
}

CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode hNode, CUevent event)
{
	return cu_result(cudaGraphEventWaitNodeSetEvent(RN(hNode), (cudaEvent_t)event));
}

CUresult cuGraphNodeGetType(CUgraphNode hNode, CUgraphNodeType *type)
{
	return cu_result(cudaGraphNodeGetType(RN(hNode), (enum cudaGraphNodeType *)type));
}

CUresult cuGraphDestroyNode(CUgraphNode hNode)
{
	return cu_result(cudaGraphDestroyNode(RN(hNode)));
}

/* ------------------------------------------------------------ listing and edges */

CUresult cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	return cu_result(cudaGraphGetNodes(RG(hGraph), (cudaGraphNode_t *)nodes, numNodes));
}

CUresult cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	return cu_result(cudaGraphGetRootNodes(RG(hGraph), (cudaGraphNode_t *)rootNodes, numRootNodes));
}

CUresult cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edgeData,
			    size_t *numEdges)
{
	return cu_result(cudaGraphGetEdges(RG(hGraph), (cudaGraphNode_t *)from, (cudaGraphNode_t *)to,
					   (cudaGraphEdgeData *)(void *)edgeData, numEdges));
}

CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges);
CUresult cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
	return cuGraphGetEdges_v2(hGraph, from, to, NULL, numEdges);
}

/* A node's neighbours one way, with their edges' data (_v2) and, in the
 * older ABI, without: the runtime's call with the same parameters. */
#define NODE_NEIGHBOURS(cu_name, rt_call)                                                                        \
	CUresult cu_name##_v2(CUgraphNode hNode, CUgraphNode *nodes, CUgraphEdgeData *edgeData, size_t *n)       \
	{                                                                                                        \
		return cu_result(                                                                                \
			rt_call(RN(hNode), (cudaGraphNode_t *)nodes, (cudaGraphEdgeData *)(void *)edgeData, n)); \
	}                                                                                                        \
	CUresult cu_name(CUgraphNode hNode, CUgraphNode *nodes, size_t *n);                                      \
	CUresult cu_name(CUgraphNode hNode, CUgraphNode *nodes, size_t *n)                                       \
	{                                                                                                        \
		return cu_name##_v2(hNode, nodes, NULL, n);                                                      \
	}

NODE_NEIGHBOURS(cuGraphNodeGetDependencies, cudaGraphNodeGetDependencies)
NODE_NEIGHBOURS(cuGraphNodeGetDependentNodes, cudaGraphNodeGetDependentNodes)

CUresult cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
				   const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	return cu_result(cudaGraphAddDependencies(RG(hGraph), (const cudaGraphNode_t *)from,
						  (const cudaGraphNode_t *)to,
						  (const cudaGraphEdgeData *)(const void *)edgeData, numDependencies));
}

CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies);
CUresult cuGraphAddDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to, size_t numDependencies)
{
	return cuGraphAddDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

CUresult cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
				      const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	return cu_result(
		cudaGraphRemoveDependencies(RG(hGraph), (const cudaGraphNode_t *)from, (const cudaGraphNode_t *)to,
					    (const cudaGraphEdgeData *)(const void *)edgeData, numDependencies));
}

CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
				   size_t numDependencies);
CUresult cuGraphRemoveDependencies(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
				   size_t numDependencies)
{
	return cuGraphRemoveDependencies_v2(hGraph, from, to, NULL, numDependencies);
}

CUresult cuGraphDebugDotPrint(CUgraph hGraph, const char *path, unsigned int flags)
{
	return cu_result(cudaGraphDebugDotPrint(RG(hGraph), path, flags));
}

/* ------------------------------------------------------------ memory nodes */

_Static_assert(sizeof(CUmemPoolProps) == sizeof(struct cudaMemPoolProps), "pool properties");

CUresult cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	struct cudaMemAllocNodeParams p;
	CUresult r;

	CU_ENTER(r);
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	memset(&p, 0, sizeof(p));
	memcpy(&p.poolProps, &nodeParams->poolProps, sizeof(p.poolProps));
	p.bytesize = nodeParams->bytesize;
	r = cu_result(cudaGraphAddMemAllocNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
					       (const cudaGraphNode_t *)dependencies, numDependencies, &p));
	if (r == CUDA_SUCCESS)
		nodeParams->dptr = (CUdeviceptr)(uintptr_t)p.dptr;
	return r;
}

CUresult cuGraphMemAllocNodeGetParams(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	struct cudaMemAllocNodeParams p;
	CUresult r;

	if (!params_out)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cudaGraphMemAllocNodeGetParams(RN(hNode), &p));
	if (r != CUDA_SUCCESS)
		return r;
	memset(params_out, 0, sizeof(*params_out));
	memcpy(&params_out->poolProps, &p.poolProps, sizeof(params_out->poolProps));
	params_out->bytesize = p.bytesize;
	params_out->dptr = (CUdeviceptr)(uintptr_t)p.dptr;
	return CUDA_SUCCESS;
}

CUresult cuGraphAddMemFreeNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			       size_t numDependencies, CUdeviceptr dptr)
{
	CU_RUN(cudaGraphAddMemFreeNode((cudaGraphNode_t *)phGraphNode, RG(hGraph),
				       (const cudaGraphNode_t *)dependencies, numDependencies, PTR(dptr)));
}

CUresult cuGraphMemFreeNodeGetParams(CUgraphNode hNode, CUdeviceptr *dptr_out)
{
	void *p = NULL;
	CUresult r;

	if (!dptr_out)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_result(cudaGraphMemFreeNodeGetParams(RN(hNode), &p));
	if (r == CUDA_SUCCESS)
		*dptr_out = (CUdeviceptr)(uintptr_t)p;
	return r;
}

CUresult cuDeviceGraphMemTrim(CUdevice device)
{
	CUresult r = cu_device_check(device);

	return r != CUDA_SUCCESS ? r : cu_result(cudaDeviceGraphMemTrim(device));
}

CUresult cuDeviceGetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	CUresult r = cu_device_check(device);

	return r != CUDA_SUCCESS
		       ? r
		       : cu_result(cudaDeviceGetGraphMemAttribute(device, (enum cudaGraphMemAttributeType)attr, value));
}

CUresult cuDeviceSetGraphMemAttribute(CUdevice device, CUgraphMem_attribute attr, void *value)
{
	CUresult r = cu_device_check(device);

	return r != CUDA_SUCCESS
		       ? r
		       : cu_result(cudaDeviceSetGraphMemAttribute(device, (enum cudaGraphMemAttributeType)attr, value));
}

/* ------------------------------------------------------------ conditional nodes */

CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *pHandle_out, CUgraph hGraph, CUcontext ctx,
					unsigned int defaultLaunchValue, unsigned int flags)
{
	CUresult r = cu_enter();

	(void)ctx; /* the thread's context is the one the library serves */
	if (r != CUDA_SUCCESS)
		return r;
	return cu_result(qc_graph_cond_handle((struct qc_graph *)(void *)hGraph, defaultLaunchValue, flags,
					      (cudaGraphConditionalHandle *)pHandle_out));
}

/* ------------------------------------------------------------ generic node calls */

/*
 * CUgraphNodeParams is cudaGraphNodeParams member for member (asserted
 * here), so the runtime layer's generic calls (qc_node_call) take it as it
 * is, except for what a kernel node and a memcpy node take: those two
 * operations are made here, from the driver's structs.
 */
#define SAME_MEMBER(m)                                                                                              \
	_Static_assert(offsetof(CUgraphNodeParams, m) == offsetof(struct cudaGraphNodeParams, m) &&                 \
			       sizeof(((CUgraphNodeParams *)0)->m) == sizeof(((struct cudaGraphNodeParams *)0)->m), \
		       #m)
#define SAME_VALUE(a, b) _Static_assert((int)(a) == (int)(b), #a)
_Static_assert(sizeof(CUgraphNodeParams) == sizeof(struct cudaGraphNodeParams), "generic node params");
SAME_MEMBER(type);
SAME_MEMBER(memcpy.flags);
SAME_MEMBER(memset.dst);
SAME_MEMBER(memset.pitch);
SAME_MEMBER(memset.value);
SAME_MEMBER(memset.elementSize);
SAME_MEMBER(memset.width);
SAME_MEMBER(memset.height);
SAME_MEMBER(host.fn);
SAME_MEMBER(host.userData);
SAME_MEMBER(graph.graph);
SAME_MEMBER(graph.ownership);
SAME_MEMBER(eventWait.event);
SAME_MEMBER(eventRecord.event);
SAME_MEMBER(alloc.poolProps);
SAME_MEMBER(alloc.bytesize);
SAME_MEMBER(alloc.dptr);
SAME_MEMBER(free.dptr);
SAME_MEMBER(conditional.handle);
SAME_MEMBER(conditional.type);
SAME_MEMBER(conditional.size);
SAME_MEMBER(conditional.phGraph_out);
SAME_VALUE(CU_GRAPH_NODE_TYPE_KERNEL, cudaGraphNodeTypeKernel);
SAME_VALUE(CU_GRAPH_NODE_TYPE_MEMCPY, cudaGraphNodeTypeMemcpy);
SAME_VALUE(CU_GRAPH_NODE_TYPE_MEMSET, cudaGraphNodeTypeMemset);
SAME_VALUE(CU_GRAPH_NODE_TYPE_HOST, cudaGraphNodeTypeHost);
SAME_VALUE(CU_GRAPH_NODE_TYPE_GRAPH, cudaGraphNodeTypeGraph);
SAME_VALUE(CU_GRAPH_NODE_TYPE_EMPTY, cudaGraphNodeTypeEmpty);
SAME_VALUE(CU_GRAPH_NODE_TYPE_WAIT_EVENT, cudaGraphNodeTypeWaitEvent);
SAME_VALUE(CU_GRAPH_NODE_TYPE_EVENT_RECORD, cudaGraphNodeTypeEventRecord);
SAME_VALUE(CU_GRAPH_NODE_TYPE_MEM_ALLOC, cudaGraphNodeTypeMemAlloc);
SAME_VALUE(CU_GRAPH_NODE_TYPE_MEM_FREE, cudaGraphNodeTypeMemFree);
SAME_VALUE(CU_GRAPH_NODE_TYPE_CONDITIONAL, cudaGraphNodeTypeConditional);
SAME_VALUE(CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE, cudaGraphChildGraphOwnershipClone);
SAME_VALUE(CU_GRAPH_COND_TYPE_IF, cudaGraphCondTypeIf);
SAME_VALUE(CU_GRAPH_COND_TYPE_WHILE, cudaGraphCondTypeWhile);
SAME_VALUE(CU_GRAPH_COND_TYPE_SWITCH, cudaGraphCondTypeSwitch);
_Static_assert(sizeof(CUgraphEdgeData) == sizeof(cudaGraphEdgeData) &&
		       offsetof(CUgraphEdgeData, type) == offsetof(cudaGraphEdgeData, type) &&
		       offsetof(CUgraphEdgeData, from_port) == offsetof(cudaGraphEdgeData, from_port) &&
		       offsetof(CUgraphEdgeData, to_port) == offsetof(cudaGraphEdgeData, to_port),
	       "edge data");

static CUresult node_call(const struct qc_node_call *c, CUgraphNodeParams *p)
{
	struct qc_node_op op, *api_op = NULL;
	cudaError_t e = cudaSuccess;
	CUresult r;

	CU_ENTER(r);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
		CUDA_KERNEL_NODE_PARAMS k;

		_Static_assert(sizeof(k) == sizeof(p->kernel), "CUDA_KERNEL_NODE_PARAMS v2 and v3");
		memcpy(&k, &p->kernel, sizeof(k));
		e = cu_graph_kernel_op(&op, &k);
		api_op = &op;
	} else if (p->type == CU_GRAPH_NODE_TYPE_MEMCPY) {
		e = p->memcpy.flags ? cudaErrorInvalidValue : cu_graph_memcpy_op(&op, &p->memcpy.copyParams);
		api_op = &op;
	}
	if (e == cudaSuccess)
		e = qc_node_call(c, (struct cudaGraphNodeParams *)(void *)p, api_op);
	return cu_result(e);
}

CUresult cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			   const CUgraphEdgeData *dependencyData, size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_ADD,
				  .graph = (struct qc_graph *)(void *)hGraph,
				  .deps = (struct qc_node *const *)dependencies,
				  .ndeps = numDependencies,
				  .out = (struct qc_node **)phGraphNode };

	if (!qc_graph_plain_edges((const cudaGraphEdgeData *)(const void *)dependencyData, numDependencies))
		return CUDA_ERROR_NOT_SUPPORTED; /* edges with data, as in the runtime */
	return node_call(&c, nodeParams);
}

CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			size_t numDependencies, CUgraphNodeParams *nodeParams);
CUresult cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
			size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	return cuGraphAddNode_v2(phGraphNode, hGraph, dependencies, NULL, numDependencies, nodeParams);
}

CUresult cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_SET, .node = (struct qc_node *)(void *)hNode };

	return node_call(&c, nodeParams);
}

CUresult cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_EXEC_SET,
				  .exec = (struct qc_exec *)(void *)hGraphExec,
				  .node = (struct qc_node *)(void *)hNode };

	return node_call(&c, nodeParams);
}

/* ------------------------------------------------------------ user objects */

/* A CUuserObject is the runtime layer's cudaUserObject_t; CUhostFn is cudaHostFn_t. */
#define RU(x) ((cudaUserObject_t)(void *)(x))

CUresult cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy, unsigned int initialRefcount,
			    unsigned int flags)
{
	return cu_result(cudaUserObjectCreate((cudaUserObject_t *)object_out, ptr, (cudaHostFn_t)destroy,
					      initialRefcount, flags));
}

CUresult cuUserObjectRetain(CUuserObject object, unsigned int count)
{
	return cu_result(cudaUserObjectRetain(RU(object), count));
}

CUresult cuUserObjectRelease(CUuserObject object, unsigned int count)
{
	return cu_result(cudaUserObjectRelease(RU(object), count));
}

CUresult cuGraphRetainUserObject(CUgraph graph, CUuserObject object, unsigned int count, unsigned int flags)
{
	return cu_result(cudaGraphRetainUserObject(RG(graph), RU(object), count, flags));
}

CUresult cuGraphReleaseUserObject(CUgraph graph, CUuserObject object, unsigned int count)
{
	return cu_result(cudaGraphReleaseUserObject(RG(graph), RU(object), count));
}
