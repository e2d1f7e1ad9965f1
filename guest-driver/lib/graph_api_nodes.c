/* SPDX-License-Identifier: MIT */
/*
 * The runtime's entry points for graph nodes of each type (see
 * graph_api.c): adding them, their parameters in a graph and in an
 * executable graph, kernel node attributes, memcpy nodes of symbols.
 */
#include <stdlib.h>
#include <string.h>

#include "graph_api.h"

static struct cudaPitchedPtr pitched(void *p, size_t pitch, size_t xsize, size_t ysize)
{
	return (struct cudaPitchedPtr){ .ptr = p, .pitch = pitch, .xsize = xsize, .ysize = ysize };
}

static struct cudaExtent extent(size_t w, size_t h, size_t d)
{
	return (struct cudaExtent){ .width = w, .height = h, .depth = d };
}

static cudaError_t add(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
		       struct qc_node_op *op)
{
	if (!out) {
		qc_node_op_free(op);
		return qc_ret(cudaErrorInvalidValue);
	}
	return qc_ret(qc_graph_add(G(graph), op, (struct qc_node *const *)deps, n, (struct qc_node **)out));
}

/* The packed parameters of kernelParams or of extra's buffer. */
cudaError_t qc_graph_api_kernel_op(struct qc_node_op *op, const struct cudaKernelNodeParams *p)
{
	const void *packed = NULL;
	size_t size = 0;

	if (!p)
		return cudaErrorInvalidValue;
	if (p->kernelParams && p->extra)
		return cudaErrorInvalidValue;
	if (p->extra && (qc_extra_buffer(p->extra, &packed, &size) != cudaSuccess || !packed))
		return cudaErrorInvalidValue;
	return qc_node_op_kernel(op, qc_kernel_by_func(p->func), p->gridDim, p->blockDim, p->sharedMemBytes,
				 p->kernelParams, packed, size);
}

QC_API cudaError_t cudaGraphAddKernelNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					  const cudaGraphNode_t *pDependencies, size_t numDependencies,
					  const struct cudaKernelNodeParams *pNodeParams)
{
	struct qc_node_op op;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_graph_api_kernel_op(&op, pNodeParams);
	if (e != cudaSuccess)
		return qc_ret(e);
	return add(pGraphNode, graph, pDependencies, numDependencies, &op);
}

static struct qc_node *typed(cudaGraphNode_t node, enum cudaGraphNodeType type)
{
	struct qc_node *n = N(node);

	return qc_node_known(n) && n->op.type == type ? n : NULL;
}

QC_API cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, struct cudaKernelNodeParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeKernel);
	struct qc_kernel *k;

	if (!n || !p)
		return qc_ret(cudaErrorInvalidValue);
	k = n->op.kernel.k;
	if (!n->op.kernel.argv) {
		n->op.kernel.argv = calloc(k->num_params + 1, sizeof(void *));
		if (!n->op.kernel.argv)
			return qc_ret(cudaErrorMemoryAllocation);
		for (uint32_t i = 0; i < k->num_params; i++)
			n->op.kernel.argv[i] = n->op.kernel.params + k->offset[i];
	}
	memset(p, 0, sizeof(*p));
	p->func = (void *)k->host_fun;
	p->gridDim = n->op.kernel.grid;
	p->blockDim = n->op.kernel.block;
	p->sharedMemBytes = n->op.kernel.shmem;
	p->kernelParams = n->op.kernel.argv;
	return cudaSuccess;
}

/* Replaces a node's operation with op (taken over; a kernel keeps its attributes). */
static cudaError_t replace(struct qc_node *n, struct qc_node_op *op)
{
	qc_node_set_op(n, op);
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphKernelNodeSetParams(cudaGraphNode_t node, const struct cudaKernelNodeParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeKernel);
	struct qc_node_op op;
	cudaError_t e = n ? qc_graph_api_kernel_op(&op, p) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

/* A copy of linear memory (pitched pointers, or host/device pointers with
 * cudaMemcpyDefault); copies of CUDA arrays are not served. */
cudaError_t qc_graph_api_memcpy_op(struct qc_node_op *op, const struct cudaMemcpy3DParms *p)
{
	const struct cudaPitchedPtr *s, *d;

	if (!p)
		return cudaErrorInvalidValue;
	if (p->srcArray || p->dstArray)
		return qc_graph_not_served("a graph memcpy node with a CUDA array");
	if ((unsigned)p->kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	s = &p->srcPtr, d = &p->dstPtr;
	if (!s->ptr || !d->ptr || !p->extent.width || !p->extent.height || !p->extent.depth ||
	    (p->extent.height * p->extent.depth > 1 && (s->pitch < p->extent.width || d->pitch < p->extent.width)))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemcpy;
	op->copy.width = p->extent.width;
	op->copy.height = p->extent.height;
	op->copy.depth = p->extent.depth;
	op->copy.spitch = s->pitch ? s->pitch : p->extent.width;
	op->copy.dpitch = d->pitch ? d->pitch : p->extent.width;
	op->copy.sslice = op->copy.spitch * (s->ysize ? s->ysize : p->extent.height);
	op->copy.dslice = op->copy.dpitch * (d->ysize ? d->ysize : p->extent.height);
	op->copy.src =
		(const char *)s->ptr + p->srcPos.x + p->srcPos.y * op->copy.spitch + p->srcPos.z * op->copy.sslice;
	op->copy.dst = (char *)d->ptr + p->dstPos.x + p->dstPos.y * op->copy.dpitch + p->dstPos.z * op->copy.dslice;
	op->copy.kind = p->kind;
	return cudaSuccess;
}

static cudaError_t memcpy1d_op(struct qc_node_op *op, void *dst, const void *src, size_t count,
			       enum cudaMemcpyKind kind)
{
	struct cudaMemcpy3DParms p;

	memset(&p, 0, sizeof(p));
	p.srcPtr = pitched((void *)src, count, count, 1);
	p.dstPtr = pitched(dst, count, count, 1);
	p.extent = extent(count, 1, 1);
	p.kind = kind;
	return qc_graph_api_memcpy_op(op, &p);
}

QC_API cudaError_t cudaGraphAddMemcpyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					  const cudaGraphNode_t *pDependencies, size_t numDependencies,
					  const struct cudaMemcpy3DParms *pCopyParams)
{
	struct qc_node_op op;
	cudaError_t e = qc_graph_api_memcpy_op(&op, pCopyParams);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphAddMemcpyNode1D(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					    const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dst,
					    const void *src, size_t count, enum cudaMemcpyKind kind)
{
	struct qc_node_op op;
	cudaError_t e = memcpy1d_op(&op, dst, src, count, kind);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphMemcpyNodeGetParams(cudaGraphNode_t node, struct cudaMemcpy3DParms *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemcpy);
	const struct qc_node_op *op;

	if (!n || !p)
		return qc_ret(cudaErrorInvalidValue);
	op = &n->op;
	memset(p, 0, sizeof(*p));
	p->srcPtr = pitched((void *)op->copy.src, op->copy.spitch, op->copy.width, op->copy.sslice / op->copy.spitch);
	p->dstPtr = pitched(op->copy.dst, op->copy.dpitch, op->copy.width, op->copy.dslice / op->copy.dpitch);
	p->extent = extent(op->copy.width, op->copy.height, op->copy.depth);
	p->kind = op->copy.kind;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphMemcpyNodeSetParams(cudaGraphNode_t node, const struct cudaMemcpy3DParms *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemcpy);
	struct qc_node_op op;
	cudaError_t e = n ? qc_graph_api_memcpy_op(&op, p) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

QC_API cudaError_t cudaGraphMemcpyNodeSetParams1D(cudaGraphNode_t node, void *dst, const void *src, size_t count,
						  enum cudaMemcpyKind kind)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemcpy);
	struct qc_node_op op;
	cudaError_t e = n ? memcpy1d_op(&op, dst, src, count, kind) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

static cudaError_t memset_op(struct qc_node_op *op, const struct cudaMemsetParams *p)
{
	if (!p)
		return cudaErrorInvalidValue;
	return qc_node_op_memset(op, p->dst, p->pitch, p->value, p->elementSize, p->width, p->height);
}

QC_API cudaError_t cudaGraphAddMemsetNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					  const cudaGraphNode_t *pDependencies, size_t numDependencies,
					  const struct cudaMemsetParams *pMemsetParams)
{
	struct qc_node_op op;
	cudaError_t e = memset_op(&op, pMemsetParams);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphMemsetNodeGetParams(cudaGraphNode_t node, struct cudaMemsetParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemset);

	if (!n || !p)
		return qc_ret(cudaErrorInvalidValue);
	memset(p, 0, sizeof(*p));
	p->dst = n->op.set.dst;
	p->pitch = n->op.set.pitch;
	p->value = n->op.set.value;
	p->elementSize = n->op.set.elem;
	p->width = n->op.set.width;
	p->height = n->op.set.height;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphMemsetNodeSetParams(cudaGraphNode_t node, const struct cudaMemsetParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemset);
	struct qc_node_op op;
	cudaError_t e = n ? memset_op(&op, p) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

static cudaError_t host_op(struct qc_node_op *op, const struct cudaHostNodeParams *p)
{
	return p ? qc_node_op_host(op, p->fn, p->userData) : cudaErrorInvalidValue;
}

QC_API cudaError_t cudaGraphAddHostNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					const cudaGraphNode_t *pDependencies, size_t numDependencies,
					const struct cudaHostNodeParams *pNodeParams)
{
	struct qc_node_op op;
	cudaError_t e = host_op(&op, pNodeParams);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphHostNodeGetParams(cudaGraphNode_t node, struct cudaHostNodeParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeHost);

	if (!n || !p)
		return qc_ret(cudaErrorInvalidValue);
	p->fn = n->op.host.fn;
	p->userData = n->op.host.data;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphHostNodeSetParams(cudaGraphNode_t node, const struct cudaHostNodeParams *p)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeHost);
	struct qc_node_op op;
	cudaError_t e = n ? host_op(&op, p) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

QC_API cudaError_t cudaGraphAddChildGraphNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					      const cudaGraphNode_t *pDependencies, size_t numDependencies,
					      cudaGraph_t childGraph)
{
	struct qc_node_op op;
	cudaError_t e = qc_node_op_child(&op, G(childGraph));

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphChildGraphNodeGetGraph(cudaGraphNode_t node, cudaGraph_t *pGraph)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeGraph);

	if (!n || !pGraph)
		return qc_ret(cudaErrorInvalidValue);
	*pGraph = (cudaGraph_t)(void *)n->op.child;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphAddEmptyNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					 const cudaGraphNode_t *pDependencies, size_t numDependencies)
{
	struct qc_node_op op = { .type = cudaGraphNodeTypeEmpty };

	return add(pGraphNode, graph, pDependencies, numDependencies, &op);
}

static cudaError_t add_event_node(cudaGraphNode_t *out, cudaGraph_t graph, const cudaGraphNode_t *deps, size_t n,
				  cudaEvent_t event, enum cudaGraphNodeType type)
{
	struct qc_node_op op;
	cudaError_t e = qc_node_op_event(&op, type, event);

	return e == cudaSuccess ? add(out, graph, deps, n, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphAddEventRecordNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					       const cudaGraphNode_t *pDependencies, size_t numDependencies,
					       cudaEvent_t event)
{
	return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event, cudaGraphNodeTypeEventRecord);
}

QC_API cudaError_t cudaGraphAddEventWaitNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					     const cudaGraphNode_t *pDependencies, size_t numDependencies,
					     cudaEvent_t event)
{
	return add_event_node(pGraphNode, graph, pDependencies, numDependencies, event, cudaGraphNodeTypeWaitEvent);
}

static cudaError_t node_event(cudaGraphNode_t node, enum cudaGraphNodeType type, cudaEvent_t *get, cudaEvent_t set)
{
	struct qc_node *n = typed(node, type);

	if (!n || (get == NULL && !qc_handle_known(QC_EVENT, (uint64_t)(uintptr_t)set)))
		return qc_ret(cudaErrorInvalidValue);
	if (get)
		*get = n->op.event;
	else
		n->op.event = set;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphEventRecordNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
	return event_out ? node_event(node, cudaGraphNodeTypeEventRecord, event_out, NULL)
			 : qc_ret(cudaErrorInvalidValue);
}

QC_API cudaError_t cudaGraphEventRecordNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
	return node_event(node, cudaGraphNodeTypeEventRecord, NULL, event);
}

QC_API cudaError_t cudaGraphEventWaitNodeGetEvent(cudaGraphNode_t node, cudaEvent_t *event_out)
{
	return event_out ? node_event(node, cudaGraphNodeTypeWaitEvent, event_out, NULL)
			 : qc_ret(cudaErrorInvalidValue);
}

QC_API cudaError_t cudaGraphEventWaitNodeSetEvent(cudaGraphNode_t node, cudaEvent_t event)
{
	return node_event(node, cudaGraphNodeTypeWaitEvent, NULL, event);
}

/* Memory alloc and free nodes: the allocation is made when the node is
 * (the address is the node's for the graph's life, as in CUDA) and freed
 * with the last graph holding it; launching them does nothing. */
QC_API cudaError_t cudaGraphAddMemAllocNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					    const cudaGraphNode_t *pDependencies, size_t numDependencies,
					    struct cudaMemAllocNodeParams *nodeParams)
{
	struct qc_node_op op;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (!nodeParams || !pGraphNode || !qc_graph_known(G(graph))))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = qc_node_op_alloc_after(&op, &nodeParams->poolProps, nodeParams->bytesize, G(graph),
					   (struct qc_node *const *)pDependencies, numDependencies);
	if (e != cudaSuccess)
		return qc_ret(e);
	nodeParams->dptr = op.alloc->ptr;
	return add(pGraphNode, graph, pDependencies, numDependencies, &op);
}

QC_API cudaError_t cudaGraphMemAllocNodeGetParams(cudaGraphNode_t node, struct cudaMemAllocNodeParams *params_out)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemAlloc);

	if (!n || !params_out)
		return qc_ret(cudaErrorInvalidValue);
	memset(params_out, 0, sizeof(*params_out));
	params_out->poolProps = n->op.alloc->props;
	params_out->bytesize = n->op.alloc_size;
	params_out->dptr = n->op.alloc->ptr;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphAddMemFreeNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
					   const cudaGraphNode_t *pDependencies, size_t numDependencies, void *dptr)
{
	struct qc_node_op op;
	cudaError_t e = qc_node_op_free_mem(&op, dptr);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphMemFreeNodeGetParams(cudaGraphNode_t node, void *dptr_out)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemFree);

	if (!n || !dptr_out)
		return qc_ret(cudaErrorInvalidValue);
	*(void **)dptr_out = n->op.free_ptr;
	return cudaSuccess;
}

static cudaError_t graph_mem_device(int device)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (device < 0 || device >= qc.device_count))
		e = cudaErrorInvalidDevice;
	return e;
}

/* Nothing is cached beyond the alloc nodes' own memory. */
QC_API cudaError_t cudaDeviceGraphMemTrim(int device)
{
	return qc_ret(graph_mem_device(device));
}

QC_API cudaError_t cudaDeviceGetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	cudaError_t e = graph_mem_device(device);

	return qc_ret(e == cudaSuccess ? qc_graph_mem_attr(attr, value, 0) : e);
}

QC_API cudaError_t cudaDeviceSetGraphMemAttribute(int device, enum cudaGraphMemAttributeType attr, void *value)
{
	cudaError_t e = graph_mem_device(device);

	return qc_ret(e == cudaSuccess ? qc_graph_mem_attr(attr, value, 1) : e);
}

QC_API cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, enum cudaGraphNodeType *pType)
{
	if (!qc_node_known(N(node)) || !pType)
		return qc_ret(cudaErrorInvalidValue);
	*pType = N(node)->op.type;
	return cudaSuccess;
}

QC_API cudaError_t cudaGraphDestroyNode(cudaGraphNode_t node)
{
	return qc_ret(qc_graph_remove(N(node)));
}

/* ------------------------------------------------------------ conditional nodes */

QC_API cudaError_t cudaGraphConditionalHandleCreate(cudaGraphConditionalHandle *pHandle_out, cudaGraph_t graph,
						    unsigned int defaultLaunchValue, unsigned int flags)
{
	return qc_ret(qc_graph_cond_handle(G(graph), defaultLaunchValue, flags, pHandle_out));
}

/* The exec's copy of node gets op, built by make from the caller's params. */
static cudaError_t exec_set(cudaGraphExec_t graphExec, cudaGraphNode_t node, struct qc_node_op *op, cudaError_t made)
{
	if (made != cudaSuccess)
		return qc_ret(made);
	if (!qc_exec_known(X(graphExec)) || !qc_node_known(N(node))) {
		qc_node_op_free(op);
		return qc_ret(cudaErrorInvalidValue);
	}
	return qc_ret(qc_exec_set_op(X(graphExec), N(node), op));
}

QC_API cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						    const struct cudaKernelNodeParams *pNodeParams)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, qc_graph_api_kernel_op(&op, pNodeParams));
}

QC_API cudaError_t cudaGraphExecMemcpyNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						    const struct cudaMemcpy3DParms *pNodeParams)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, qc_graph_api_memcpy_op(&op, pNodeParams));
}

QC_API cudaError_t cudaGraphExecMemcpyNodeSetParams1D(cudaGraphExec_t hGraphExec, cudaGraphNode_t node, void *dst,
						      const void *src, size_t count, enum cudaMemcpyKind kind)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, memcpy1d_op(&op, dst, src, count, kind));
}

QC_API cudaError_t cudaGraphExecMemsetNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						    const struct cudaMemsetParams *pNodeParams)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, memset_op(&op, pNodeParams));
}

QC_API cudaError_t cudaGraphExecHostNodeSetParams(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
						  const struct cudaHostNodeParams *pNodeParams)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, host_op(&op, pNodeParams));
}

QC_API cudaError_t cudaGraphExecEventRecordNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
							cudaEvent_t event)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, hNode, &op, qc_node_op_event(&op, cudaGraphNodeTypeEventRecord, event));
}

QC_API cudaError_t cudaGraphExecEventWaitNodeSetEvent(cudaGraphExec_t hGraphExec, cudaGraphNode_t hNode,
						      cudaEvent_t event)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, hNode, &op, qc_node_op_event(&op, cudaGraphNodeTypeWaitEvent, event));
}

/* ------------------------------------------------------------ kernel node attributes */

/*
 * The launch attributes a kernel node takes. Those that change nothing a
 * program sees here (priority, the L2 access policy window, memory
 * synchronization domains, scheduling and carveout hints) are kept and
 * answered as set, as launch.c accepts them for a launch; cooperative and
 * the cluster dimension are honoured when the node runs. Preferred
 * clusters of more than one block and device updates are not served; attributes of streams or launches only are not
 * a node's (cudaErrorInvalidValue). val NULL: only whether id is one.
 */
static cudaError_t kattr_check(enum cudaLaunchAttributeID id, const cudaLaunchAttributeValue *val)
{
	switch (id) {
	case cudaLaunchAttributeAccessPolicyWindow:
	case cudaLaunchAttributeCooperative:
	case cudaLaunchAttributeClusterSchedulingPolicyPreference:
	case cudaLaunchAttributePriority:
	case cudaLaunchAttributeMemSyncDomainMap:
	case cudaLaunchAttributeMemSyncDomain:
	case cudaLaunchAttributePreferredSharedMemoryCarveout:
	case cudaLaunchAttributeNvlinkUtilCentricScheduling:
		return cudaSuccess;
	case cudaLaunchAttributeClusterDimension:
		return cudaSuccess;
	case cudaLaunchAttributePreferredClusterDimension:
		if (!val || (val->preferredClusterDim.x <= 1 && val->preferredClusterDim.y <= 1 &&
			     val->preferredClusterDim.z <= 1))
			return cudaSuccess;
		return qc_graph_not_served("a kernel node of clusters of more than one block");
	case cudaLaunchAttributeDeviceUpdatableKernelNode:
		if (!val || !val->deviceUpdatableKernelNode.deviceUpdatable)
			return cudaSuccess;
		return qc_graph_not_served("a device-updatable kernel node");
	default:
		return cudaErrorInvalidValue;
	}
}

QC_API cudaError_t cudaGraphKernelNodeGetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
						   cudaKernelNodeAttrValue *value_out)
{
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeKernel);
	cudaError_t e = n && value_out ? kattr_check(attr, NULL) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? qc_kattr_get(&n->op, attr, value_out) : e);
}

QC_API cudaError_t cudaGraphKernelNodeSetAttribute(cudaGraphNode_t hNode, cudaKernelNodeAttrID attr,
						   const cudaKernelNodeAttrValue *value)
{
	struct qc_node *n = typed(hNode, cudaGraphNodeTypeKernel);
	cudaError_t e = n && value ? kattr_check(attr, value) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? qc_kattr_set(&n->op, attr, value) : e);
}

QC_API cudaError_t cudaGraphKernelNodeCopyAttributes(cudaGraphNode_t hDst, cudaGraphNode_t hSrc)
{
	struct qc_node *d = typed(hDst, cudaGraphNodeTypeKernel), *s = typed(hSrc, cudaGraphNodeTypeKernel);

	if (!d || !s)
		return qc_ret(cudaErrorInvalidValue);
	return d == s ? cudaSuccess : qc_ret(qc_kattr_copy(&d->op, &s->op));
}

/* ------------------------------------------------------------ memcpy nodes of symbols */

/* The device address of [offset, offset+count) of a module variable (as
 * cudaMemcpyToSymbol finds it); to: the copy goes to it. The kinds are
 * cudaMemcpyToSymbol's and cudaMemcpyFromSymbol's. */
static cudaError_t symbol_at(const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind, int to,
			     void **at)
{
	uint64_t dptr, size;
	cudaError_t e;

	if (kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault &&
	    kind != (to ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost))
		return cudaErrorInvalidMemcpyDirection;
	e = qc_var_get(symbol, &dptr, &size);
	if (e != cudaSuccess)
		return e;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	*at = (void *)(uintptr_t)(dptr + offset);
	return cudaSuccess;
}

/* A 1D memcpy node's operation to (to) or from a symbol. */
static cudaError_t symbol_op(struct qc_node_op *op, const void *symbol, void *mem, size_t count, size_t offset,
			     enum cudaMemcpyKind kind, int to)
{
	void *at;
	cudaError_t e = symbol_at(symbol, count, offset, kind, to, &at);

	if (e != cudaSuccess)
		return e;
	return to ? memcpy1d_op(op, at, mem, count, kind) : memcpy1d_op(op, mem, at, count, kind);
}

QC_API cudaError_t cudaGraphAddMemcpyNodeToSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						  const cudaGraphNode_t *pDependencies, size_t numDependencies,
						  const void *symbol, const void *src, size_t count, size_t offset,
						  enum cudaMemcpyKind kind)
{
	struct qc_node_op op;
	cudaError_t e = symbol_op(&op, symbol, (void *)src, count, offset, kind, 1);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphAddMemcpyNodeFromSymbol(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
						    const cudaGraphNode_t *pDependencies, size_t numDependencies,
						    void *dst, const void *symbol, size_t count, size_t offset,
						    enum cudaMemcpyKind kind)
{
	struct qc_node_op op;
	cudaError_t e = symbol_op(&op, symbol, dst, count, offset, kind, 0);

	return e == cudaSuccess ? add(pGraphNode, graph, pDependencies, numDependencies, &op) : qc_ret(e);
}

QC_API cudaError_t cudaGraphMemcpyNodeSetParamsToSymbol(cudaGraphNode_t node, const void *symbol, const void *src,
							size_t count, size_t offset, enum cudaMemcpyKind kind)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemcpy);
	struct qc_node_op op;
	cudaError_t e = n ? symbol_op(&op, symbol, (void *)src, count, offset, kind, 1) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

QC_API cudaError_t cudaGraphMemcpyNodeSetParamsFromSymbol(cudaGraphNode_t node, void *dst, const void *symbol,
							  size_t count, size_t offset, enum cudaMemcpyKind kind)
{
	struct qc_node *n = typed(node, cudaGraphNodeTypeMemcpy);
	struct qc_node_op op;
	cudaError_t e = n ? symbol_op(&op, symbol, dst, count, offset, kind, 0) : cudaErrorInvalidValue;

	return qc_ret(e == cudaSuccess ? replace(n, &op) : e);
}

QC_API cudaError_t cudaGraphExecMemcpyNodeSetParamsToSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							    const void *symbol, const void *src, size_t count,
							    size_t offset, enum cudaMemcpyKind kind)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, symbol_op(&op, symbol, (void *)src, count, offset, kind, 1));
}

QC_API cudaError_t cudaGraphExecMemcpyNodeSetParamsFromSymbol(cudaGraphExec_t hGraphExec, cudaGraphNode_t node,
							      void *dst, const void *symbol, size_t count,
							      size_t offset, enum cudaMemcpyKind kind)
{
	struct qc_node_op op;

	return exec_set(hGraphExec, node, &op, symbol_op(&op, symbol, dst, count, offset, kind, 0));
}
