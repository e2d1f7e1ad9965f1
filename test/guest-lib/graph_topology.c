// SPDX-License-Identifier: MIT
// graph_topology: the guest library's graph topology (guest-driver/lib/graph.c,
// with handles.c's known handles) on the host, with gcc: nodes and edges added and removed, the dependency
// order a walk takes, ancestors, cycles and duplicate or foreign edges
// refused, clones.
// What a node does (graph_op.c) is stubbed: every node here is an empty one.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

static int checks, failed;

#define CHECK(cond, what)                                             \
	do {                                                          \
		checks++;                                             \
		if (!(cond)) {                                        \
			failed++;                                     \
			printf("FAIL line %d: %s\n", __LINE__, what); \
		}                                                     \
	} while (0)

/* ---- stubs of what graph.c calls outside its concern ---- */

static int ops_freed, copies_left = -1; /* copies_left >= 0: that many copies, then out of memory */

void qc_node_op_free(struct qc_node_op *op)
{
	if (op->type == cudaGraphNodeTypeEmpty)
		ops_freed++;
	memset(op, 0, sizeof(*op));
}

cudaError_t qc_node_op_copy(struct qc_node_op *dst, const struct qc_node_op *src)
{
	*dst = *src;
	if (copies_left == 0)
		return cudaErrorMemoryAllocation;
	if (copies_left > 0)
		copies_left--;
	return cudaSuccess;
}

/* The call path (a graph's host graph is freed with GRAPH_DESTROY): never
 * reached here, where no graph has one. */
cudaError_t qc_call(const struct qc_req *r)
{
	(void)r;
	return cudaErrorNotSupported;
}
int qc_urefs_copy(struct qc_urefs *dst, const struct qc_urefs *src)
{
	(void)dst;
	(void)src;
	return 0;
}
void qc_urefs_release(struct qc_urefs *r)
{
	free(r->v);
	memset(r, 0, sizeof(*r));
}

/* ---- helpers ---- */

static struct qc_node *add(struct qc_graph *g, struct qc_node *const *deps, size_t n)
{
	struct qc_node_op op = { .type = cudaGraphNodeTypeEmpty };
	struct qc_node *node = NULL;

	return qc_graph_add(g, &op, deps, n, &node) == cudaSuccess ? node : NULL;
}

static cudaError_t edge(struct qc_graph *g, struct qc_node *from, struct qc_node *to)
{
	return qc_graph_add_edges(g, &from, &to, 1);
}

/* The order a walk visits g's nodes in, as their indexes. */
struct visits {
	size_t order[64];
	size_t n;
	size_t stop_at; /* visits after which the walk is stopped with an error (0: never) */
};

static cudaError_t visit(struct qc_node *n, void *arg)
{
	struct visits *v = arg;

	v->order[v->n++] = n->index;
	return v->stop_at && v->n == v->stop_at ? cudaErrorNotReady : cudaSuccess;
}

/* Where node index i came in the walk (or -1). */
static int position(const struct visits *v, size_t i)
{
	for (size_t k = 0; k < v->n; k++)
		if (v->order[k] == i)
			return (int)k;
	return -1;
}

/* Every node after all it depends on, each once. */
static int in_dependency_order(const struct qc_graph *g, const struct visits *v)
{
	if (v->n != g->n)
		return 0;
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node *n = g->nodes[i];

		for (size_t j = 0; j < n->ndeps; j++)
			if (position(v, n->deps[j]->index) >= position(v, i))
				return 0;
	}
	return 1;
}

static size_t edges(const struct qc_graph *g)
{
	size_t e = 0;

	for (size_t i = 0; i < g->n; i++)
		e += g->nodes[i]->ndeps;
	return e;
}

static int depends(const struct qc_node *n, const struct qc_node *on)
{
	for (size_t j = 0; j < n->ndeps; j++)
		if (n->deps[j] == on)
			return 1;
	return 0;
}

/* ---- tests ---- */

/* A diamond a -> b, c -> d, made with dependencies at add. */
static void diamond(void)
{
	struct qc_graph *g = qc_graph_new();
	struct qc_node *a = add(g, NULL, 0), *b = add(g, &a, 1), *c = add(g, &a, 1);
	struct qc_node *bc[] = { b, c };
	struct qc_node *d = add(g, bc, 2);
	struct visits v = { 0 };

	CHECK(g && a && b && c && d, "a diamond's four nodes are added");
	CHECK(g->n == 4 && edges(g) == 4, "four nodes, four edges");
	CHECK(qc_graph_known(g) && qc_node_known(d) && !qc_graph_known((struct qc_graph *)d),
	      "the graph and its nodes are known, each as its own kind");
	CHECK(qc_graph_walk(g, visit, &v) == cudaSuccess, "the walk succeeds");
	CHECK(in_dependency_order(g, &v) && v.order[0] == 0 && v.order[3] == 3,
	      "a first, d last, every node after its dependencies");
	CHECK(add(g, (struct qc_node *[]){ b, b }, 2) == NULL && g->n == 4,
	      "a node that names a dependency twice is refused");
	qc_graph_free(g);
	CHECK(!qc_graph_known(g) && !qc_node_known(a), "a freed graph and its nodes are no longer known");
}

/* Nodes added in reverse, the edges after: the walk follows the edges. */
static void edges_added_later(void)
{
	struct qc_graph *g = qc_graph_new();
	struct qc_node *n[5];
	struct visits v = { 0 };

	for (int i = 0; i < 5; i++)
		n[i] = add(g, NULL, 0);
	for (int i = 4; i > 0; i--)
		CHECK(edge(g, n[i], n[i - 1]) == cudaSuccess, "an edge from a later node to an earlier one");
	CHECK(qc_graph_walk(g, visit, &v) == cudaSuccess, "the walk succeeds");
	CHECK(v.n == 5 && v.order[0] == 4 && v.order[1] == 3 && v.order[2] == 2 && v.order[3] == 1 && v.order[4] == 0,
	      "the chain 4 -> 3 -> 2 -> 1 -> 0 is walked in that order");

	v = (struct visits){ .stop_at = 2 };
	CHECK(qc_graph_walk(g, visit, &v) == cudaErrorNotReady && v.n == 2,
	      "a visit's error stops the walk and is its answer");
	qc_graph_free(g);
}

static void refused_edges(void)
{
	struct qc_graph *g = qc_graph_new(), *other = qc_graph_new();
	struct qc_node *a = add(g, NULL, 0), *b = add(g, &a, 1), *c = add(g, &b, 1);
	struct qc_node *x = add(other, NULL, 0);
	struct qc_node *from[] = { a, c }, *to[] = { c, a };

	CHECK(edge(g, c, a) == cudaErrorInvalidValue, "an edge closing a cycle (c -> a over a -> b -> c) is refused");
	CHECK(edge(g, a, a) == cudaErrorInvalidValue, "an edge from a node to itself is refused");
	CHECK(edge(g, a, b) == cudaErrorInvalidValue, "a duplicate edge is refused");
	CHECK(edge(g, a, x) == cudaErrorInvalidValue && edge(g, x, a) == cudaErrorInvalidValue,
	      "an edge to or from another graph's node is refused");
	CHECK(edge(g, a, (struct qc_node *)g) == cudaErrorInvalidValue, "an edge to a graph handle is refused");
	CHECK(qc_graph_add_edges(g, from, to, 2) == cudaErrorInvalidValue && edges(g) == 2,
	      "a batch with one bad edge adds none");
	CHECK(edges(g) == 2 && depends(b, a) && depends(c, b), "the graph is as it was");
	CHECK(add(g, &x, 1) == NULL && g->n == 3, "a node depending on another graph's node is refused");
	CHECK(edge(g, a, c) == cudaSuccess && depends(c, a), "a shortcut a -> c is no cycle");
	qc_graph_free(g);
	qc_graph_free(other);
}

/* A cycle the edges' checks could not make (the library's own state
 * corrupted): the walk says so instead of looping. */
static void walk_finds_cycle(void)
{
	struct qc_graph *g = qc_graph_new();
	struct qc_node *a = add(g, NULL, 0), *b = add(g, &a, 1);
	struct visits v = { 0 };

	a->deps = malloc(sizeof(*a->deps));
	a->deps[0] = b;
	a->ndeps = 1;
	CHECK(qc_graph_walk(g, visit, &v) == cudaErrorInvalidValue && v.n == 0,
	      "a walk over a cycle answers cudaErrorInvalidValue, having visited nothing");
	qc_graph_free(g);
}

/* What a node is and depends on, directly or not (graph memory reuse asks). */
static void ancestors(void)
{
	struct qc_graph *g = qc_graph_new();
	struct qc_node *a = add(g, NULL, 0), *b = add(g, &a, 1), *c = add(g, &a, 1);
	struct qc_node *bc[] = { b, c };
	struct qc_node *d = add(g, bc, 2), *e = add(g, NULL, 0);
	char mark[5];

	CHECK(qc_graph_ancestors(g, &d, 1, mark) == 0 && mark[0] && mark[1] && mark[2] && mark[3] && !mark[4],
	      "d is, and depends on, a, b and c; not on e");
	CHECK(qc_graph_ancestors(g, &b, 1, mark) == 0 && mark[0] && mark[1] && !mark[2] && !mark[3] && !mark[4],
	      "b: a and itself only");
	CHECK(qc_graph_ancestors(g, (struct qc_node *[]){ c, e }, 2, mark) == 0 && mark[0] && !mark[1] && mark[2] &&
		      !mark[3] && mark[4],
	      "c and e together: a, c, e");
	memset(mark, 1, sizeof(mark));
	CHECK(qc_graph_ancestors(g, NULL, 0, mark) == 0 && !mark[0] && !mark[4], "no node: none marked");
	qc_graph_free(g);
}

static void removal(void)
{
	struct qc_graph *g = qc_graph_new();
	struct qc_node *a = add(g, NULL, 0), *b = add(g, &a, 1), *c = add(g, &b, 1);
	struct qc_node *ab[] = { a, b };
	struct qc_node *d = add(g, ab, 2);
	struct visits v = { 0 };
	int freed = ops_freed;

	CHECK(qc_graph_remove_edges(g, &a, &c, 1) == cudaErrorInvalidValue,
	      "removing an edge that is not there is refused");
	CHECK(qc_graph_remove_edges(g, &a, &d, 1) == cudaSuccess && !depends(d, a) && depends(d, b),
	      "removing a -> d leaves b -> d");
	CHECK(qc_graph_remove_edges(g, &a, &d, 1) == cudaErrorInvalidValue, "and it cannot be removed twice");
	CHECK(qc_graph_remove(b) == cudaSuccess, "removing b");
	CHECK(!qc_node_known(b) && ops_freed == freed + 1, "b is forgotten and its operation freed");
	CHECK(g->n == 3 && g->nodes[0] == a && g->nodes[1] == c && g->nodes[2] == d,
	      "the other nodes keep their order");
	CHECK(a->index == 0 && c->index == 1 && d->index == 2, "and their indexes follow");
	CHECK(c->ndeps == 0 && d->ndeps == 0, "the edges from b went with it");
	CHECK(qc_graph_remove(b) == cudaErrorInvalidValue, "a removed node cannot be removed again");
	CHECK(qc_graph_walk(g, visit, &v) == cudaSuccess && v.n == 3, "the walk visits the three left");
	qc_graph_free(g);
	CHECK(ops_freed == freed + 4, "freeing the graph frees every node's operation");
}

static void clone(void)
{
	struct qc_graph *g = qc_graph_new(), *c;
	struct qc_node *n[4], *map[4] = { 0 };
	struct visits v = { 0 }, w = { 0 };

	for (int i = 0; i < 4; i++)
		n[i] = add(g, NULL, 0);
	edge(g, n[3], n[1]);
	edge(g, n[1], n[0]);
	edge(g, n[3], n[2]);
	c = qc_graph_clone(g, map);
	CHECK(c && c != g && c->n == 4 && edges(c) == 3, "a clone has the nodes and edges of its original");
	for (int i = 0; c && i < 4; i++)
		CHECK(map[i] == c->nodes[i] && map[i] != n[i] && map[i]->graph == c && qc_node_known(map[i]),
		      "each node's copy is in the map, at the original's place, in the clone");
	CHECK(c && depends(map[1], map[3]) && depends(map[0], map[1]) && depends(map[2], map[3]) &&
		      !depends(map[0], map[3]),
	      "the clone's edges join the copies, as the original's join the nodes");
	CHECK(c && qc_graph_walk(g, visit, &v) == cudaSuccess && qc_graph_walk(c, visit, &w) == cudaSuccess &&
		      v.n == w.n && !memcmp(v.order, w.order, v.n * sizeof(v.order[0])),
	      "both are walked in the same order");
	CHECK(c && edge(c, map[0], map[2]) == cudaSuccess && !depends(n[2], n[0]) && edges(g) == 3,
	      "an edge added to the clone is not the original's");
	CHECK(c && edge(g, map[0], n[2]) == cudaErrorInvalidValue, "a clone's node is no node of the original");
	qc_graph_free(c);
	CHECK(qc_graph_known(g) && qc_node_known(n[0]) && g->n == 4, "freeing the clone leaves the original");

	copies_left = 2;
	c = qc_graph_clone(g, NULL);
	copies_left = -1;
	CHECK(c == NULL && qc_graph_known(g) && g->n == 4,
	      "a clone that runs out of memory is no clone, the original intact");
	qc_graph_free(g);
}

int main(void)
{
	diamond();
	edges_added_later();
	refused_edges();
	walk_finds_cycle();
	ancestors();
	removal();
	clone();
	if (failed) {
		printf("FAIL: graph_topology: %d of %d checks failed\n", failed, checks);
		return 1;
	}
	printf("PASS: graph_topology: %d checks\n", checks);
	return 0;
}
