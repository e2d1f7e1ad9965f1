/* SPDX-License-Identifier: MIT */
/*
 * What a graph node does (struct qc_node_op, see graph.h): making,
 * copying and freeing operations, and a kernel node's launch attributes.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

void qc_node_op_free(struct qc_node_op *op)
{
	switch (op->type) {
	case cudaGraphNodeTypeKernel:
		free(op->kernel.params);
		free(op->kernel.argv);
		free(op->kernel.attrs);
		break;
	case cudaGraphNodeTypeMemset:
		free(op->set.row);
		break;
	case cudaGraphNodeTypeGraph:
		qc_graph_free(op->child);
		break;
	case cudaGraphNodeTypeMemAlloc:
		if (op->alloc)
			qc_graph_mem_put(op->alloc);
		break;
	case cudaGraphNodeTypeConditional:
		for (unsigned int i = 0; op->cond.bodies && i < op->cond.size; i++)
			qc_graph_free(op->cond.bodies[i]);
		free(op->cond.bodies);
		break;
	default:
		break;
	}
	memset(op, 0, sizeof(*op));
}

static void *dup_bytes(const void *p, size_t n)
{
	void *d = malloc(n ? n : 1);

	if (d && n)
		memcpy(d, p, n);
	return d;
}

cudaError_t qc_node_op_copy(struct qc_node_op *dst, const struct qc_node_op *src)
{
	*dst = *src;
	switch (src->type) {
	case cudaGraphNodeTypeKernel:
		dst->kernel.argv = NULL;
		dst->kernel.attrs = NULL;
		dst->kernel.nattrs = 0;
		dst->kernel.params = dup_bytes(src->kernel.params, src->kernel.k->param_bytes);
		if (!dst->kernel.params)
			return cudaErrorMemoryAllocation;
		return qc_kattr_copy(dst, src);
	case cudaGraphNodeTypeMemset:
		if (!src->set.row)
			return cudaSuccess;
		dst->set.row = dup_bytes(src->set.row, src->set.width * src->set.elem);
		return dst->set.row ? cudaSuccess : cudaErrorMemoryAllocation;
	case cudaGraphNodeTypeGraph:
		dst->child = qc_graph_clone(src->child, NULL);
		return dst->child ? cudaSuccess : cudaErrorMemoryAllocation;
	case cudaGraphNodeTypeMemAlloc:
		qc_graph_mem_get(src->alloc);
		return cudaSuccess;
	case cudaGraphNodeTypeConditional:
		dst->cond.bodies = calloc(src->cond.size, sizeof(*dst->cond.bodies));
		if (!dst->cond.bodies)
			return cudaErrorMemoryAllocation;
		for (unsigned int i = 0; i < src->cond.size; i++)
			if (!(dst->cond.bodies[i] = qc_graph_clone(src->cond.bodies[i], NULL)))
				return cudaErrorMemoryAllocation; /* the caller frees dst */
		return cudaSuccess;
	default:
		return cudaSuccess;
	}
}

void qc_node_op_keep_attrs(struct qc_node_op *op, struct qc_node_op *old)
{
	if (op->type != cudaGraphNodeTypeKernel || old->type != cudaGraphNodeTypeKernel)
		return;
	free(op->kernel.attrs);
	op->kernel.attrs = old->kernel.attrs;
	op->kernel.nattrs = old->kernel.nattrs;
	op->kernel.cooperative = old->kernel.cooperative;
	old->kernel.attrs = NULL;
	old->kernel.nattrs = 0;
}

void qc_node_set_op(struct qc_node *n, struct qc_node_op *op)
{
	qc_node_op_keep_attrs(op, &n->op);
	qc_node_op_free(&n->op);
	n->op = *op;
	memset(op, 0, sizeof(*op));
}

void qc_node_op_cluster(const struct qc_node_op *op, unsigned int cluster[3])
{
	cudaLaunchAttributeValue v;

	qc_kattr_get(op, cudaLaunchAttributeClusterDimension, &v);
	cluster[0] = v.clusterDim.x ? v.clusterDim.x : 1;
	cluster[1] = v.clusterDim.y ? v.clusterDim.y : 1;
	cluster[2] = v.clusterDim.z ? v.clusterDim.z : 1;
}

/* The cooperative attribute is the op's flag (what a launch and the host's
 * graphs read); the others are kept as set. */
cudaError_t qc_kattr_get(const struct qc_node_op *op, enum cudaLaunchAttributeID id, cudaLaunchAttributeValue *val)
{
	memset(val, 0, sizeof(*val));
	if (id == cudaLaunchAttributeCooperative) {
		val->cooperative = op->kernel.cooperative;
		return cudaSuccess;
	}
	for (unsigned int i = 0; i < op->kernel.nattrs; i++)
		if (op->kernel.attrs[i].id == id)
			*val = op->kernel.attrs[i].val;
	return cudaSuccess;
}

cudaError_t qc_kattr_set(struct qc_node_op *op, enum cudaLaunchAttributeID id, const cudaLaunchAttributeValue *val)
{
	struct qc_kattr *v;

	if (id == cudaLaunchAttributeCooperative) {
		op->kernel.cooperative = val->cooperative;
		return cudaSuccess;
	}
	for (unsigned int i = 0; i < op->kernel.nattrs; i++)
		if (op->kernel.attrs[i].id == id) {
			op->kernel.attrs[i].val = *val;
			return cudaSuccess;
		}
	v = realloc(op->kernel.attrs, (op->kernel.nattrs + 1) * sizeof(*v));
	if (!v)
		return cudaErrorMemoryAllocation;
	v[op->kernel.nattrs++] = (struct qc_kattr){ id, *val };
	op->kernel.attrs = v;
	return cudaSuccess;
}

cudaError_t qc_kattr_copy(struct qc_node_op *dst, const struct qc_node_op *src)
{
	struct qc_kattr *v = NULL;

	if (src->kernel.nattrs) {
		v = dup_bytes(src->kernel.attrs, src->kernel.nattrs * sizeof(*v));
		if (!v)
			return cudaErrorMemoryAllocation;
	}
	free(dst->kernel.attrs);
	dst->kernel.attrs = v;
	dst->kernel.nattrs = src->kernel.nattrs;
	dst->kernel.cooperative = src->kernel.cooperative;
	return cudaSuccess;
}

/* Packs a launch's parameters in k's layout, as launch.c does. */
cudaError_t qc_node_op_kernel(struct qc_node_op *op, struct qc_kernel *k, dim3 grid, dim3 block, size_t shmem,
			      void **args, const void *packed, size_t size)
{
	uint64_t func;
	cudaError_t e;

	if (!k)
		return cudaErrorInvalidDeviceFunction;
	e = qc_kernel_get(k, &func); /* the layout comes with the handle */
	if (e != cudaSuccess)
		return e;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || shmem > UINT32_MAX)
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeKernel;
	op->kernel.k = k;
	op->kernel.grid = grid;
	op->kernel.block = block;
	op->kernel.shmem = (uint32_t)shmem;
	op->kernel.params = calloc(1, k->param_bytes ? k->param_bytes : 1);
	if (!op->kernel.params)
		return cudaErrorMemoryAllocation;
	if (packed) {
		if (size != k->param_bytes)
			e = cudaErrorInvalidValue;
		else
			memcpy(op->kernel.params, packed, size);
	} else if (k->num_params && !args) {
		e = cudaErrorInvalidValue;
	} else {
		for (uint32_t i = 0; i < k->num_params && e == cudaSuccess; i++) {
			if (!args[i])
				e = cudaErrorInvalidValue;
			else
				memcpy(op->kernel.params + k->offset[i], args[i], k->size[i]);
		}
	}
	if (e != cudaSuccess)
		qc_node_op_free(op);
	return e;
}

cudaError_t qc_node_op_memset(struct qc_node_op *op, void *dst, size_t pitch, uint32_t value, unsigned int elem,
			      size_t width, size_t height)
{
	int bytewise;

	if (!dst || (elem != 1 && elem != 2 && elem != 4) || !width || !height || (height > 1 && pitch < width * elem))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemset;
	op->set.dst = dst;
	op->set.pitch = pitch;
	op->set.width = width;
	op->set.height = height;
	op->set.elem = elem;
	op->set.value = elem == 4 ? value : elem == 2 ? value & 0xffff : value & 0xff;
	/* A pattern whose bytes are all the same is a byte memset; another goes
	 * as a copy of one row of it (the backend's memset sets bytes). */
	bytewise = elem == 1 || (elem == 2 && (value & 0xff) == ((value >> 8) & 0xff)) ||
		   (elem == 4 && value == (value & 0xff) * 0x01010101u);
	if (!bytewise) {
		op->set.row = malloc(width * elem);
		if (!op->set.row)
			return cudaErrorMemoryAllocation;
		for (size_t i = 0; i < width; i++)
			memcpy((char *)op->set.row + i * elem, &op->set.value, elem);
	}
	return cudaSuccess;
}

cudaError_t qc_node_op_host(struct qc_node_op *op, cudaHostFn_t fn, void *data)
{
	if (!fn)
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeHost;
	op->host.fn = fn;
	op->host.data = data;
	return cudaSuccess;
}

cudaError_t qc_node_op_event(struct qc_node_op *op, enum cudaGraphNodeType type, cudaEvent_t event)
{
	if (!event || !qc_handle_known(QC_EVENT, (uint64_t)(uintptr_t)event))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = type;
	op->event = event;
	return cudaSuccess;
}

/* The node holds a copy of child, as in CUDA. */
cudaError_t qc_node_op_child(struct qc_node_op *op, const struct qc_graph *child)
{
	if (!qc_graph_known(child))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeGraph;
	op->child = qc_graph_clone(child, NULL);
	return op->child ? cudaSuccess : cudaErrorMemoryAllocation;
}
