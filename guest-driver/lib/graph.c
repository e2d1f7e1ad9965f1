/* SPDX-License-Identifier: MIT */
/*
 * Graphs and their nodes (see graph.h): the topology: adding and removing nodes and edges, cloning, and walking a
 * graph in a dependency order. What a node does is graph_op.c's; executable
 * graphs are graph_exec.c's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* ------------------------------------------------------------ graphs */

struct qc_graph *qc_graph_new(void)
{
	struct qc_graph *g = calloc(1, sizeof(*g));

	if (g && !qc_known_add(g, QC_KNOWN_GRAPH)) {
		free(g);
		g = NULL;
	}
	return g;
}

static void node_free(struct qc_node *n)
{
	qc_known_forget(n);
	qc_node_op_free(&n->op);
	free(n->deps);
	free(n);
}

/* Frees g's host graph, if it made one (graph_native.c's). */
static void graph_free_host(struct qc_graph *g)
{
	if (g->host && g->owns_host)
		qc_req_graph_destroy(g->host);
	g->host = 0;
}

void qc_graph_free(struct qc_graph *g)
{
	if (!g)
		return;
	qc_known_forget(g);
	graph_free_host(g);
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	qc_urefs_release(&g->urefs);
	free(g);
}

static int in_graph(const struct qc_graph *g, const struct qc_node *n)
{
	return qc_node_known(n) && n->graph == g;
}

static cudaError_t add_dep(struct qc_node *n, struct qc_node *dep)
{
	struct qc_node **v;

	for (size_t i = 0; i < n->ndeps; i++)
		if (n->deps[i] == dep)
			return cudaErrorInvalidValue; /* CUDA refuses a duplicate edge */
	v = realloc(n->deps, (n->ndeps + 1) * sizeof(*v));
	if (!v)
		return cudaErrorMemoryAllocation;
	v[n->ndeps++] = dep;
	n->deps = v;
	return cudaSuccess;
}

cudaError_t qc_graph_add(struct qc_graph *g, struct qc_node_op *op, struct qc_node *const *deps, size_t ndeps,
			 struct qc_node **out)
{
	struct qc_node *n;
	cudaError_t e = cudaSuccess;

	if (!qc_graph_known(g) || (ndeps && !deps))
		e = cudaErrorInvalidValue;
	for (size_t i = 0; e == cudaSuccess && i < ndeps; i++)
		if (!in_graph(g, deps[i]))
			e = cudaErrorInvalidValue;
	n = e == cudaSuccess ? calloc(1, sizeof(*n)) : NULL;
	if (e == cudaSuccess && !n)
		e = cudaErrorMemoryAllocation;
	if (e == cudaSuccess && g->n == g->cap) {
		size_t cap = g->cap ? 2 * g->cap : 16;
		struct qc_node **v = realloc(g->nodes, cap * sizeof(*v));

		if (v)
			g->nodes = v, g->cap = cap;
		else
			e = cudaErrorMemoryAllocation;
	}
	if (e == cudaSuccess && ndeps) {
		n->deps = malloc(ndeps * sizeof(*n->deps));
		if (!n->deps)
			e = cudaErrorMemoryAllocation;
		for (size_t i = 0; e == cudaSuccess && i < ndeps; i++) {
			for (size_t j = 0; j < n->ndeps; j++)
				if (n->deps[j] == deps[i])
					e = cudaErrorInvalidValue;
			n->deps[n->ndeps++] = deps[i];
		}
	}
	if (e == cudaSuccess && !qc_known_add(n, QC_KNOWN_NODE))
		e = cudaErrorMemoryAllocation;
	if (e != cudaSuccess) {
		if (n)
			free(n->deps);
		free(n);
		qc_node_op_free(op);
		return e;
	}
	n->graph = g;
	n->op = *op;
	memset(op, 0, sizeof(*op));
	for (unsigned int i = 0; n->op.type == cudaGraphNodeTypeConditional && i < n->op.cond.size; i++)
		n->op.cond.bodies[i]->owner = n;
	n->index = g->n;
	g->nodes[g->n++] = n;
	if (out)
		*out = n;
	return cudaSuccess;
}

/* Whether b is reachable from a through dependencies (a depends on b). */
static int depends_on(const struct qc_node *a, const struct qc_node *b)
{
	if (a == b)
		return 1;
	for (size_t i = 0; i < a->ndeps; i++)
		if (depends_on(a->deps[i], b))
			return 1;
	return 0;
}

cudaError_t qc_graph_add_edges(struct qc_graph *g, struct qc_node *const *from, struct qc_node *const *to, size_t n)
{
	if (!qc_graph_known(g) || (n && (!from || !to)))
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < n; i++)
		if (!in_graph(g, from[i]) || !in_graph(g, to[i]) || depends_on(from[i], to[i]))
			return cudaErrorInvalidValue; /* unknown node, or a cycle */
	for (size_t i = 0; i < n; i++) {
		cudaError_t e = add_dep(to[i], from[i]);

		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

cudaError_t qc_graph_remove_edges(struct qc_graph *g, struct qc_node *const *from, struct qc_node *const *to, size_t n)
{
	if (!qc_graph_known(g) || (n && (!from || !to)))
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < n; i++) {
		struct qc_node *t = to[i];
		size_t j = 0;

		if (!in_graph(g, from[i]) || !in_graph(g, t))
			return cudaErrorInvalidValue;
		while (j < t->ndeps && t->deps[j] != from[i])
			j++;
		if (j == t->ndeps)
			return cudaErrorInvalidValue; /* no such edge */
		memmove(&t->deps[j], &t->deps[j + 1], (t->ndeps - j - 1) * sizeof(*t->deps));
		t->ndeps--;
	}
	return cudaSuccess;
}

cudaError_t qc_graph_remove(struct qc_node *node)
{
	struct qc_graph *g;
	size_t k = 0;

	if (!qc_node_known(node))
		return cudaErrorInvalidValue;
	g = node->graph;
	for (size_t i = 0; i < g->n; i++) {
		struct qc_node *m = g->nodes[i];
		size_t d = 0;

		if (m == node)
			continue;
		for (size_t j = 0; j < m->ndeps; j++)
			if (m->deps[j] != node)
				m->deps[d++] = m->deps[j];
		m->ndeps = d;
		m->index = k;
		g->nodes[k++] = m;
	}
	g->n = k;
	node_free(node);
	return cudaSuccess;
}

/* Depth first, with a stack of its own: a graph's depth is the program's. */
int qc_graph_ancestors(const struct qc_graph *g, struct qc_node *const *from, size_t n, char *mark)
{
	struct qc_node **stack = malloc((g->n + n + 1) * sizeof(*stack));
	size_t top = 0;

	if (!stack)
		return -1;
	memset(mark, 0, g->n);
	for (size_t i = 0; i < n; i++)
		if (!mark[from[i]->index])
			mark[from[i]->index] = 1, stack[top++] = from[i];
	while (top) {
		struct qc_node *m = stack[--top];

		for (size_t j = 0; j < m->ndeps; j++)
			if (!mark[m->deps[j]->index])
				mark[m->deps[j]->index] = 1, stack[top++] = m->deps[j];
	}
	free(stack);
	return 0;
}

static size_t index_of(const struct qc_graph *g, const struct qc_node *n)
{
	(void)g;
	return n->index;
}

/* Nodes first, edges after: an edge may point at a node added later. */
struct qc_graph *qc_graph_clone(const struct qc_graph *g, struct qc_node **map)
{
	struct qc_graph *c = qc_graph_new();
	struct qc_node **copy = map ? map : calloc(g->n ? g->n : 1, sizeof(*copy));

	if (!c || !copy || qc_urefs_copy(&c->urefs, &g->urefs))
		goto fail;
	c->host = g->host; /* its conditional handles are the original's */
	for (size_t i = 0; i < g->n; i++) {
		struct qc_node_op op;

		if (qc_node_op_copy(&op, &g->nodes[i]->op) != cudaSuccess) {
			qc_node_op_free(&op);
			goto fail;
		}
		if (qc_graph_add(c, &op, NULL, 0, &copy[i]) != cudaSuccess)
			goto fail;
	}
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node *n = g->nodes[i];

		if (!n->ndeps)
			continue;
		copy[i]->deps = malloc(n->ndeps * sizeof(*copy[i]->deps));
		if (!copy[i]->deps)
			goto fail;
		for (size_t j = 0; j < n->ndeps; j++)
			copy[i]->deps[j] = copy[index_of(g, n->deps[j])];
		copy[i]->ndeps = n->ndeps;
	}
	if (!map)
		free(copy);
	return c;
fail:
	if (!map)
		free(copy);
	qc_graph_free(c);
	return NULL;
}

cudaError_t qc_graph_walk(const struct qc_graph *g, cudaError_t (*visit)(struct qc_node *n, void *arg), void *arg)
{
	char *done = calloc(g->n ? g->n : 1, 1);
	size_t left = g->n;
	cudaError_t e = cudaSuccess;

	if (!done)
		return cudaErrorMemoryAllocation;
	while (left && e == cudaSuccess) {
		size_t before = left;

		for (size_t i = 0; i < g->n && e == cudaSuccess; i++) {
			struct qc_node *n = g->nodes[i];
			int ready = !done[i];

			for (size_t j = 0; ready && j < n->ndeps; j++)
				ready = done[index_of(g, n->deps[j])];
			if (!ready)
				continue;
			done[i] = 1, left--;
			e = visit(n, arg);
		}
		if (e == cudaSuccess && left == before)
			e = cudaErrorInvalidValue; /* a cycle (edges are checked when added) */
	}
	free(done);
	return e;
}
