/* SPDX-License-Identifier: MIT */
/*
 * Graphs with conditional nodes, run by the host as CUDA graphs. A
 * conditional node's condition is set by a kernel (cudaGraphSetConditional,
 * a driver builtin) and read by the GPU, so the library cannot run such a
 * graph step by step as it runs others (graph.c). Instead:
 *   - the outermost graph gets a graph on the host (GRAPH_CREATE) at its
 *     first conditional handle, and every handle is made there
 *     (GRAPH_COND_HANDLE), since kernels take a handle as a parameter
 *     before any node exists;
 *   - instantiating sends every node (GRAPH_INSTANTIATE, the description
 *     staged like a module image), and a launch is one GRAPH_LAUNCH.
 * Child graphs are flattened between two empty nodes; memory alloc and free
 * nodes are empty nodes (their memory exists from the node's creation, as in
 * graph.c). Host nodes and copies of pageable memory have no place in a
 * graph the host runs: instantiating one is cudaErrorNotSupported.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"

int qc_graph_has_cond(const struct qc_graph *g)
{
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node_op *op = &g->nodes[i]->op;

		if (op->type == cudaGraphNodeTypeConditional ||
		    (op->type == cudaGraphNodeTypeGraph && qc_graph_has_cond(op->child)))
			return 1;
	}
	return 0;
}

/* The graph whose host graph holds the handles: a body's is its conditional node's graph's. */
static struct qc_graph *outermost(struct qc_graph *g)
{
	while (g->owner)
		g = g->owner->graph;
	return g;
}

cudaError_t qc_graph_cond_handle(struct qc_graph *g, unsigned int value, unsigned int flags,
				 cudaGraphConditionalHandle *out)
{
	struct qc_graph *top;
	uint64_t h = 0;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!out || !qc_graph_known(g) || (flags & ~(unsigned int)cudaGraphCondAssignDefault))
		return cudaErrorInvalidValue;
	top = outermost(g);
	if (!top->host) {
		e = qc_req_graph_create(&top->host);
		if (e != cudaSuccess)
			return e;
		top->owns_host = 1;
	}
	e = qc_req_graph_cond_handle(top->host, value, flags, &h);
	if (e == cudaSuccess)
		*out = h;
	return e;
}

cudaError_t qc_node_op_cond(struct qc_node_op *op, cudaGraphConditionalHandle handle,
			    enum cudaGraphConditionalNodeType type, unsigned int size)
{
	unsigned int most = type == cudaGraphCondTypeIf	      ? 2
			    : type == cudaGraphCondTypeWhile  ? 1
			    : type == cudaGraphCondTypeSwitch ? QCUDA_MAX_GRAPH_NODES
							      : 0;

	memset(op, 0, sizeof(*op));
	if (!handle || size < 1 || size > most)
		return cudaErrorInvalidValue;
	op->type = cudaGraphNodeTypeConditional;
	op->cond.handle = handle;
	op->cond.type = type;
	op->cond.size = size;
	op->cond.bodies = calloc(size, sizeof(*op->cond.bodies));
	for (unsigned int i = 0; op->cond.bodies && i < size; i++)
		if (!(op->cond.bodies[i] = qc_graph_new())) {
			qc_node_op_free(op);
			return cudaErrorMemoryAllocation;
		}
	return op->cond.bodies ? cudaSuccess : cudaErrorMemoryAllocation;
}

/* ------------------------------------------------------------ the description */

/* What GRAPH_INSTANTIATE sends: nodes, edges and the kernels' parameters, growing. */
struct desc {
	struct qcuda_graph_node *nodes;
	size_t n, ncap;
	struct qcuda_graph_edge *edges;
	size_t ne, ecap;
	unsigned char *params;
	size_t np, pcap;
};

static int grow(void **v, size_t *cap, size_t need, size_t elem)
{
	size_t c = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 1;
	while (c < need)
		c *= 2;
	p = realloc(*v, c * elem);
	if (!p)
		return 0;
	*v = p, *cap = c;
	return 1;
}

/* Appends a node in (parent, body); its index in *at. */
static cudaError_t put_node(struct desc *d, struct qcuda_graph_node *n, uint32_t parent, uint32_t body, uint32_t *at)
{
	if (d->n >= QCUDA_MAX_GRAPH_NODES)
		return cudaErrorNotSupported;
	if (!grow((void **)&d->nodes, &d->ncap, d->n + 1, sizeof(*d->nodes)))
		return cudaErrorMemoryAllocation;
	n->parent = parent, n->body = body;
	d->nodes[d->n] = *n;
	*at = (uint32_t)d->n++;
	return cudaSuccess;
}

static cudaError_t put_edge(struct desc *d, uint32_t from, uint32_t to)
{
	if (d->ne >= QCUDA_MAX_GRAPH_NODES)
		return cudaErrorNotSupported;
	if (!grow((void **)&d->edges, &d->ecap, d->ne + 1, sizeof(*d->edges)))
		return cudaErrorMemoryAllocation;
	d->edges[d->ne++] = (struct qcuda_graph_edge){ .from = from, .to = to };
	return cudaSuccess;
}

/* A device pointer for [p, p+n): device memory, or host memory the GPU reaches. */
static cudaError_t device_ptr(const void *p, size_t n, __typeof__(((struct qcuda_graph_node *)0)->dst) *out)
{
	struct qc_loc l;
	cudaError_t e = qc_resolve(p, n, 1, &l);

	if (e != cudaSuccess || !l.device)
		return cudaErrorNotSupported; /* pageable memory: no graph on the host reaches it */
	*out = l.dptr;
	return cudaSuccess;
}

static cudaError_t kernel_node(struct desc *d, const struct qc_node_op *op, struct qcuda_graph_node *n)
{
	const struct qc_kernel *k = op->kernel.k;
	uint64_t func;
	cudaError_t e = qc_kernel_get(op->kernel.k, &func);

	if (e != cudaSuccess)
		return e;
	if (op->kernel.cooperative)
		return cudaErrorNotSupported;
	if (!grow((void **)&d->params, &d->pcap, d->np + k->param_bytes, 1))
		return cudaErrorMemoryAllocation;
	memcpy(d->params + d->np, op->kernel.params, k->param_bytes);
	n->type = QCUDA_GNODE_KERNEL;
	n->handle = func;
	n->param_off = d->np;
	n->param_bytes = k->param_bytes;
	n->grid[0] = op->kernel.grid.x, n->grid[1] = op->kernel.grid.y, n->grid[2] = op->kernel.grid.z;
	n->block[0] = op->kernel.block.x, n->block[1] = op->kernel.block.y, n->block[2] = op->kernel.block.z;
	n->shared_mem = op->kernel.shmem;
	qc_node_op_cluster(op, n->cluster);
	d->np += k->param_bytes;
	return cudaSuccess;
}

static cudaError_t copy_node(const struct qc_node_op *op, struct qcuda_graph_node *n)
{
	const size_t w = op->copy.width, h = op->copy.height, z = op->copy.depth;
	const size_t dp = op->copy.dpitch, sp = op->copy.spitch;
	const size_t drows = dp ? op->copy.dslice / dp : h, srows = sp ? op->copy.sslice / sp : h;
	cudaError_t e;

	n->type = QCUDA_GNODE_MEMCPY;
	n->width = w, n->height = h, n->depth = z;
	n->pitch = dp, n->src_pitch = sp, n->rows = drows, n->src_rows = srows;
	e = device_ptr(op->copy.dst, (z - 1) * dp * drows + (h - 1) * dp + w, &n->dst);
	return e == cudaSuccess ? device_ptr(op->copy.src, (z - 1) * sp * srows + (h - 1) * sp + w, &n->src) : e;
}

static cudaError_t set_node(const struct qc_node_op *op, struct qcuda_graph_node *n)
{
	const size_t row = op->set.width * op->set.elem;

	n->type = QCUDA_GNODE_MEMSET;
	n->width = op->set.width, n->height = op->set.height;
	n->pitch = op->set.height > 1 ? op->set.pitch : row;
	n->value = op->set.value, n->elem = op->set.elem;
	return device_ptr(op->set.dst, (op->set.height - 1) * n->pitch + row, &n->dst);
}

static cudaError_t put_graph(struct desc *d, const struct qc_graph *g, uint32_t parent, uint32_t body,
			     const uint32_t *start);

/* Adds node op (after deps[0..ndeps)); where it ends (what its dependents follow) in *end. */
static cudaError_t put_op(struct desc *d, const struct qc_node_op *op, uint32_t parent, uint32_t body,
			  const uint32_t *deps, size_t ndeps, uint32_t *end)
{
	struct qcuda_graph_node n = { .type = QCUDA_GNODE_EMPTY };
	cudaError_t e = cudaSuccess;
	uint32_t at = 0;

	switch (op->type) {
	case cudaGraphNodeTypeKernel:
		e = kernel_node(d, op, &n);
		break;
	case cudaGraphNodeTypeMemcpy:
		e = copy_node(op, &n);
		break;
	case cudaGraphNodeTypeMemset:
		e = set_node(op, &n);
		break;
	case cudaGraphNodeTypeEventRecord:
	case cudaGraphNodeTypeWaitEvent:
		n.type = op->type == cudaGraphNodeTypeEventRecord ? QCUDA_GNODE_EVENT_RECORD : QCUDA_GNODE_EVENT_WAIT;
		n.handle = (uint64_t)(uintptr_t)op->event;
		break;
	case cudaGraphNodeTypeConditional:
		n.type = QCUDA_GNODE_COND;
		n.handle = op->cond.handle, n.cond_type = op->cond.type, n.size = op->cond.size;
		break;
	case cudaGraphNodeTypeEmpty:
	case cudaGraphNodeTypeMemAlloc:
	case cudaGraphNodeTypeMemFree:
	case cudaGraphNodeTypeGraph: /* its start; its nodes follow */
		break;
	default:
		return cudaErrorNotSupported; /* host nodes */
	}
	if (e == cudaSuccess)
		e = put_node(d, &n, parent, body, &at);
	for (size_t i = 0; e == cudaSuccess && i < ndeps; i++)
		e = put_edge(d, deps[i], at);
	*end = at;
	for (unsigned int b = 0; e == cudaSuccess && op->type == cudaGraphNodeTypeConditional && b < op->cond.size; b++)
		e = put_graph(d, op->cond.bodies[b], at, b, NULL);
	if (e == cudaSuccess && op->type == cudaGraphNodeTypeGraph) {
		/* The child between its start and an end node after all of it. */
		size_t first = d->n;
		struct qcuda_graph_node stop = { .type = QCUDA_GNODE_EMPTY };

		e = put_graph(d, op->child, parent, body, &at);
		if (e == cudaSuccess)
			e = put_node(d, &stop, parent, body, end);
		for (size_t i = first; e == cudaSuccess && i < *end; i++)
			if (d->nodes[i].parent == parent && d->nodes[i].body == body)
				e = put_edge(d, (uint32_t)i, *end);
	}
	return e;
}

/* Where put_graph puts one graph's nodes: the scope, the node its roots
 * follow (if any), and where each node (by index) ended. */
struct put_to {
	struct desc *d;
	uint32_t parent, body;
	const uint32_t *start;
	uint32_t *end;
};

static cudaError_t put_node_of(struct qc_node *n, void *arg)
{
	struct put_to *to = arg;
	uint32_t *deps = malloc((n->ndeps + 1) * sizeof(*deps));
	size_t nd = 0;
	cudaError_t e;

	if (!deps)
		return cudaErrorMemoryAllocation;
	for (size_t j = 0; j < n->ndeps; j++)
		deps[nd++] = to->end[n->deps[j]->index];
	if (!n->ndeps && to->start)
		deps[nd++] = *to->start;
	e = put_op(to->d, &n->op, to->parent, to->body, deps, nd, &to->end[n->index]);
	free(deps);
	return e;
}

/* Adds g's nodes to (parent, body) in a dependency order; its roots after *start if given. */
static cudaError_t put_graph(struct desc *d, const struct qc_graph *g, uint32_t parent, uint32_t body,
			     const uint32_t *start)
{
	struct put_to to = { d, parent, body, start, calloc(g->n ? g->n : 1, sizeof(uint32_t)) };
	cudaError_t e = to.end ? qc_graph_walk(g, put_node_of, &to) : cudaErrorMemoryAllocation;

	free(to.end);
	return e;
}

/* The description as one buffer: nodes, edges, parameters. */
static void *flatten(const struct desc *d, size_t *size)
{
	size_t nb = d->n * sizeof(*d->nodes), eb = d->ne * sizeof(*d->edges);
	unsigned char *b = malloc(nb + eb + d->np + 1);

	if (b) {
		memcpy(b, d->nodes, nb);
		memcpy(b + nb, d->edges, eb);
		memcpy(b + nb + eb, d->params, d->np);
	}
	*size = nb + eb + d->np;
	return b;
}

cudaError_t qc_graph_instantiate_host(const struct qc_graph *g, uint64_t *out)
{
	struct desc d = { 0 };
	size_t size = 0;
	void *buf = NULL;
	uint64_t id = qc_upload_id();
	cudaError_t e = g->host ? put_graph(&d, g, QCUDA_GRAPH_TOP, 0, NULL) : cudaErrorInvalidValue;

	if (e == cudaSuccess && !(buf = flatten(&d, &size)))
		e = cudaErrorMemoryAllocation;
	if (e == cudaSuccess && size)
		e = qc_req_module_upload(id, size, buf, size);
	if (e == cudaSuccess && !size)
		e = cudaErrorInvalidValue; /* an empty graph has no conditional node */
	if (e == cudaSuccess)
		e = qc_req_graph_instantiate(g->host, id, size, (uint32_t)d.n, (uint32_t)d.ne, out);
	qc_debug("graph with conditional nodes: %zu nodes, %zu edges, %zu parameter bytes: %s", d.n, d.ne, d.np,
		 qc_error_name(e) ? qc_error_name(e) : "?");
	free(buf);
	free(d.nodes);
	free(d.edges);
	free(d.params);
	return e;
}
