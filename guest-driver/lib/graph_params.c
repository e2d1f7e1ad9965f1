/* SPDX-License-Identifier: MIT */
/*
 * The generic node calls (see graph.h, qc_node_call), written once for the
 * runtime (cudaGraphAddNode, cudaGraphNodeSetParams,
 * cudaGraphExecNodeSetParams, here) and the driver API (their cuGraph*
 * twins in ../libcuda/graph.c, which pass their CUgraphNodeParams as the
 * runtime's struct). One switch turns the parameters of a node type into
 * its operation; one table says what a set may change.
 */
#include <string.h>

#include "graph_api.h"

/* The operation of p's node (an alloc node's for c's graph and deps). A
 * kernel's and a memcpy's come from the caller when it is the driver API
 * (api_op, taken over). */
static cudaError_t params_op(struct qc_node_op *op, const struct qc_node_call *c, struct cudaGraphNodeParams *p,
			     struct qc_node_op *api_op)
{
	if (api_op) {
		*op = *api_op;
		return cudaSuccess;
	}
	switch (p->type) {
	case cudaGraphNodeTypeKernel: {
		const struct cudaKernelNodeParamsV2 *k = &p->kernel;
		struct cudaKernelNodeParams v1 = { .func = k->func,
						   .gridDim = k->gridDim,
						   .blockDim = k->blockDim,
						   .sharedMemBytes = k->sharedMemBytes,
						   .kernelParams = k->kernelParams,
						   .extra = k->extra };

		return qc_graph_api_kernel_op(op, &v1);
	}
	case cudaGraphNodeTypeMemcpy:
		return p->memcpy.flags ? cudaErrorInvalidValue : qc_graph_api_memcpy_op(op, &p->memcpy.copyParams);
	case cudaGraphNodeTypeMemset:
		return qc_node_op_memset(op, p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
					 p->memset.width, p->memset.height);
	case cudaGraphNodeTypeHost:
		return qc_node_op_host(op, p->host.fn, p->host.userData);
	case cudaGraphNodeTypeGraph:
		if (p->graph.ownership != cudaGraphChildGraphOwnershipClone)
			return qc_graph_not_served("a child graph node that takes its graph over");
		return qc_node_op_child(op, G(p->graph.graph));
	case cudaGraphNodeTypeEmpty:
		memset(op, 0, sizeof(*op));
		op->type = cudaGraphNodeTypeEmpty;
		return cudaSuccess;
	case cudaGraphNodeTypeWaitEvent:
		return qc_node_op_event(op, p->type, p->eventWait.event);
	case cudaGraphNodeTypeEventRecord:
		return qc_node_op_event(op, p->type, p->eventRecord.event);
	case cudaGraphNodeTypeMemAlloc:
		return qc_node_op_alloc_after(op, &p->alloc.poolProps, p->alloc.bytesize, c->graph, c->deps, c->ndeps);
	case cudaGraphNodeTypeMemFree:
		return qc_node_op_free_mem(op, p->free.dptr);
	case cudaGraphNodeTypeConditional:
		return qc_node_op_cond(op, p->conditional.handle, p->conditional.type, p->conditional.size);
	default:
		return qc_graph_not_served("this graph node type");
	}
}

static cudaError_t node_add(const struct qc_node_call *c, struct cudaGraphNodeParams *p, struct qc_node_op *api_op)
{
	struct qc_node_op op;
	cudaError_t e;

	/* The parameters are checked first, as the per-type calls do, but an
	 * alloc node allocates only for a graph that is there. */
	if (!c->out || (p->type == cudaGraphNodeTypeMemAlloc && !qc_graph_known(c->graph))) {
		if (api_op)
			qc_node_op_free(api_op);
		return cudaErrorInvalidValue;
	}
	e = params_op(&op, c, p, api_op);
	if (e == cudaSuccess)
		e = qc_graph_add(c->graph, &op, c->deps, c->ndeps, c->out);
	if (e == cudaSuccess && p->type == cudaGraphNodeTypeMemAlloc)
		p->alloc.dptr = (*c->out)->op.alloc->ptr;
	/* The bodies are valid while the node lives, as in CUDA. */
	if (e == cudaSuccess && p->type == cudaGraphNodeTypeConditional)
		p->conditional.phGraph_out = (cudaGraph_t *)(void *)(*c->out)->op.cond.bodies;
	return e;
}

/* What a set does with a node type, in a graph and in an executable graph. */
enum set_rule {
	SET_OP = 1, /* a new operation from the parameters */
	SET_NOTHING, /* no parameters: success */
	SET_REFUSED, /* cudaErrorNotSupported, as CUDA 13 answers */
	SET_CHILD, /* exec only: the child graph's parameters (qc_exec_set_child) */
};

static const struct {
	enum cudaGraphNodeType type;
	enum set_rule in_graph, in_exec;
} set_rules[] = {
	{ cudaGraphNodeTypeKernel, SET_OP, SET_OP },
	{ cudaGraphNodeTypeMemcpy, SET_OP, SET_OP },
	{ cudaGraphNodeTypeMemset, SET_OP, SET_OP },
	{ cudaGraphNodeTypeHost, SET_OP, SET_OP },
	{ cudaGraphNodeTypeWaitEvent, SET_OP, SET_OP },
	{ cudaGraphNodeTypeEventRecord, SET_OP, SET_OP },
	{ cudaGraphNodeTypeEmpty, SET_NOTHING, SET_NOTHING },
	{ cudaGraphNodeTypeMemAlloc, SET_REFUSED, SET_REFUSED },
	{ cudaGraphNodeTypeMemFree, SET_REFUSED, SET_REFUSED },
	{ cudaGraphNodeTypeGraph, 0, SET_CHILD },
};

/* 0: not served (child graphs in a graph, conditional nodes). */
static enum set_rule set_rule(enum cudaGraphNodeType type, int in_exec)
{
	for (size_t i = 0; i < sizeof(set_rules) / sizeof(set_rules[0]); i++)
		if (set_rules[i].type == type)
			return in_exec ? set_rules[i].in_exec : set_rules[i].in_graph;
	return 0;
}

static cudaError_t exec_child(struct qc_exec *x, const struct qc_node *node, const struct qc_graph *child)
{
	cudaError_t e = qc_exec_set_child(x, node, child);

	return e == cudaErrorNotSupported
		       ? qc_graph_not_served("updating a child graph of a graph with conditional nodes")
		       : e;
}

static cudaError_t node_set(const struct qc_node_call *c, struct cudaGraphNodeParams *p, struct qc_node_op *api_op)
{
	int in_exec = c->what == QC_NODE_EXEC_SET;
	struct qc_node_op op;
	enum set_rule rule = set_rule(p->type, in_exec);
	cudaError_t e = cudaSuccess;

	if ((in_exec && !qc_exec_known(c->exec)) || !qc_node_known(c->node) || c->node->op.type != p->type)
		e = cudaErrorInvalidValue;
	else if (rule == SET_REFUSED)
		e = cudaErrorNotSupported;
	else if (!rule)
		e = qc_graph_not_served(
			in_exec ? "setting the parameters of this graph node type in an executable graph"
				: "setting the parameters of this graph node type");
	if (e != cudaSuccess || rule != SET_OP) {
		if (api_op)
			qc_node_op_free(api_op);
		if (e == cudaSuccess && rule == SET_CHILD)
			e = exec_child(c->exec, c->node, G(p->graph.graph));
		return e;
	}
	e = params_op(&op, c, p, api_op);
	if (e != cudaSuccess)
		return e;
	if (in_exec)
		return qc_exec_set_op(c->exec, c->node, &op);
	qc_node_set_op(c->node, &op); /* a kernel keeps its attributes */
	return cudaSuccess;
}

cudaError_t qc_node_call(const struct qc_node_call *c, struct cudaGraphNodeParams *p, struct qc_node_op *api_op)
{
	if (!p) {
		if (api_op)
			qc_node_op_free(api_op);
		return cudaErrorInvalidValue;
	}
	return c->what == QC_NODE_ADD ? node_add(c, p, api_op) : node_set(c, p, api_op);
}

int qc_graph_plain_edges(const cudaGraphEdgeData *edges, size_t n)
{
	for (size_t i = 0; edges && i < n; i++)
		if (edges[i].type || edges[i].from_port || edges[i].to_port)
			return 0;
	return 1;
}

/* ------------------------------------------------------------ the runtime's entry points */

QC_API cudaError_t cudaGraphAddNode(cudaGraphNode_t *pGraphNode, cudaGraph_t graph,
				    const cudaGraphNode_t *pDependencies, const cudaGraphEdgeData *dependencyData,
				    size_t numDependencies, struct cudaGraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_ADD,
				  .graph = G(graph),
				  .deps = (struct qc_node *const *)pDependencies,
				  .ndeps = numDependencies,
				  .out = (struct qc_node **)pGraphNode };
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (!nodeParams || !pGraphNode))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess && !qc_graph_plain_edges(dependencyData, numDependencies))
		e = qc_graph_not_served("a graph edge with data");
	return qc_ret(e == cudaSuccess ? qc_node_call(&c, nodeParams, NULL) : e);
}

QC_API cudaError_t cudaGraphNodeSetParams(cudaGraphNode_t node, struct cudaGraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_SET, .node = N(node) };

	return qc_ret(qc_node_call(&c, nodeParams, NULL));
}

QC_API cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t graphExec, cudaGraphNode_t node,
					      struct cudaGraphNodeParams *nodeParams)
{
	struct qc_node_call c = { .what = QC_NODE_EXEC_SET, .exec = X(graphExec), .node = N(node) };

	return qc_ret(qc_node_call(&c, nodeParams, NULL));
}
