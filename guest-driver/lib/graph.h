/* SPDX-License-Identifier: MIT */
/*
 * CUDA graphs, kept in the guest: a graph is a list of nodes, each one
 * operation the library already knows how to post (a launch, a copy, a
 * memset, a host function, an event record or wait), with the nodes it
 * depends on. Instantiating snapshots the graph in a dependency order;
 * launching posts that order onto the stream, where the batch layer
 * (batch.c) carries it to the host together: one round trip for a graph of
 * posted work. Stream capture (capture.c) records what a capturing stream is
 * given into such a graph instead of posting it.
 *
 * graph.c: graphs, nodes and their edges; graph_op.c: what a node does;
 * graph_mem.c: alloc nodes' memory; graph_uobj.c: user objects;
 * graph_exec.c: executable graphs; capture.c: capture state of streams and
 * events; graph_api*.c: the runtime's cudaGraph* and capture entry points;
 * graph_params.c: the generic node calls, shared with the driver API.
 * The driver API's cuGraph* (../libcuda/graph.c) use the same objects: a
 * CUgraph is a struct qc_graph *, a CUgraphNode a struct qc_node *.
 *
 * A graph with conditional nodes is the exception: a kernel sets the
 * condition through the driver, so the host builds and runs such a graph as
 * a CUDA graph (graph_native.c); the library keeps its nodes all the same.
 *
 * Not thread-safe per graph, as CUDA's graphs are not; capture state has a
 * lock of its own.
 */
#ifndef QC_GRAPH_H
#define QC_GRAPH_H

#include "qcrt.h"

/* A kernel node's launch attribute (cudaGraphKernelNodeSetAttribute), as
 * set: the cooperative one is the op's own field instead. */
struct qc_kattr {
	enum cudaLaunchAttributeID id;
	cudaLaunchAttributeValue val;
};

/* What a node does. type is CUDA's cudaGraphNodeType (Kernel, Memcpy,
 * Memset, Host, Graph, Empty, WaitEvent, EventRecord, MemAlloc, MemFree,
 * Conditional are served). */
struct qc_node_op {
	enum cudaGraphNodeType type;
	union {
		struct {
			struct qc_kernel *k;
			dim3 grid, block;
			uint32_t shmem;
			int cooperative;
			unsigned char *params; /* k's layout, k->param_bytes; owned */
			void **argv; /* pointers into params, made for GetParams; owned */
			struct qc_kattr *attrs; /* nattrs of them, one per id; owned */
			unsigned int nattrs;
		} kernel;
		/* width bytes x height rows x depth slices of linear memory;
		 * kind may be cudaMemcpyDefault (pointers say where they are). */
		struct {
			char *dst;
			const char *src;
			size_t width, height, depth;
			size_t dpitch, spitch, dslice, sslice;
			enum cudaMemcpyKind kind;
		} copy;
		/* width elements of elem (1, 2, 4) bytes x height rows */
		struct {
			char *dst;
			size_t pitch, width, height;
			uint32_t value;
			unsigned int elem;
			void *row; /* one row of the pattern, when it is not one byte; owned */
		} set;
		struct {
			cudaHostFn_t fn;
			void *data;
		} host;
		struct qc_graph *child; /* owned */
		cudaEvent_t event;
		/* A memory alloc node's allocation: made when the node is (its
		 * address is fixed for the graph's life, as CUDA's is), shared
		 * by the graph's copies and freed with the last of them; or
		 * one that an earlier free node of the graph gave back
		 * (graph_mem.c), of alloc_size bytes or more. */
		struct {
			struct qc_graph_mem *alloc;
			size_t alloc_size; /* the node's bytes */
		};
		void *free_ptr; /* a memory free node's */
		/* A conditional node: its handle (GRAPH_COND_HANDLE's) and bodies. */
		struct {
			cudaGraphConditionalHandle handle;
			enum cudaGraphConditionalNodeType type;
			unsigned int size;
			struct qc_graph **bodies; /* size of them; owned */
		} cond;
	};
};

/* Memory of alloc nodes (graph.c). */
struct qc_graph_mem {
	void *ptr;
	size_t size;
	struct cudaMemPoolProps props;
	int refs; /* nodes holding it (under graph.c's lock) */
};

struct qc_node {
	struct qc_graph *graph;
	struct qc_node_op op;
	struct qc_node **deps;
	size_t ndeps;
	size_t index; /* in graph->nodes */
};

/* A user object (cudaUserObject_t, CUuserObject; graph.c): the program's
 * destructor, run once no reference is left. */
struct qc_uobj;

/* User object references a graph (or an executable graph) owns: count of
 * obj each, one entry per object. */
struct qc_uref {
	struct qc_uobj *obj;
	unsigned long long count;
};
struct qc_urefs {
	struct qc_uref *v;
	size_t n;
};

struct qc_graph {
	struct qc_node **nodes; /* in the order they were added */
	size_t n, cap;
	struct qc_urefs urefs; /* released with the graph; a clone takes its own */
	/* The host's graph its conditional handles live in (GRAPH_CREATE; 0:
	 * none yet), freed with this graph if it made it (a clone shares it). */
	uint64_t host;
	int owns_host;
	struct qc_node *owner; /* the conditional node whose body this is */
};

/* An instantiated graph: a snapshot and the order its nodes run in. */
struct qc_step {
	const struct qc_node_op *op; /* in the snapshot */
	struct qc_node *snap; /* the snapshot's node (NULL inside a child) */
	const struct qc_node *orig; /* the node of the graph instantiated or last updated from */
	int disabled; /* cudaGraphNodeSetEnabled: runs as an empty node */
};
struct qc_exec {
	uint64_t host; /* GRAPH_INSTANTIATE's: a graph with conditional nodes (no snapshot, no steps) */
	/* GRAPH_INSTANTIATE's too, for any other graph the host can run (no host
	 * nodes, no pageable copies): a launch is one posted GRAPH_LAUNCH
	 * instead of a launch per step. 0 once a step is disabled or a node set
	 * after instantiation: the steps run then. */
	uint64_t replay;
	struct qc_graph *snapshot;
	const struct qc_node **orig; /* of each snapshot node: the node it is a copy of */
	struct qc_step *steps;
	size_t n;
	unsigned long long flags;
	/* The user objects a host-run graph holds (a snapshot holds its own). */
	struct qc_urefs urefs;
	/* Where it was last launched: references it gives up are released
	 * after that launch (as CUDA defers them until the launches end). */
	int launched, last_ptds;
	cudaStream_t last_stream;
};

/* ---- handles.c ---- */

/* The handles the library made, each with its kind, so that one the
 * program passes is checked before it is followed (and a node passed as a
 * graph is not taken for one). add: 0 when out of memory. */
enum qc_known { QC_KNOWN_GRAPH = 1, QC_KNOWN_NODE, QC_KNOWN_EXEC, QC_KNOWN_UOBJ };
int qc_known_add(const void *p, enum qc_known kind);
void qc_known_forget(const void *p);
int qc_known_is(const void *p, enum qc_known kind);
int qc_graph_known(const struct qc_graph *g);
int qc_node_known(const struct qc_node *n);
struct qc_exec;
int qc_exec_known(const struct qc_exec *x);

/* ---- graph.c ---- */

struct qc_graph *qc_graph_new(void);
void qc_graph_free(struct qc_graph *g);
/* Adds a node doing op (taken over: its owned buffers become the node's;
 * on error they are freed) after deps. */
cudaError_t qc_graph_add(struct qc_graph *g, struct qc_node_op *op, struct qc_node *const *deps, size_t ndeps,
			 struct qc_node **out);
/* Adds the edges from[i] -> to[i]. */
cudaError_t qc_graph_add_edges(struct qc_graph *g, struct qc_node *const *from, struct qc_node *const *to, size_t n);
/* Removes the edges from[i] -> to[i] (each must exist). */
cudaError_t qc_graph_remove_edges(struct qc_graph *g, struct qc_node *const *from, struct qc_node *const *to, size_t n);
/* Removes a node and the edges touching it. */
cudaError_t qc_graph_remove(struct qc_node *node);
/* Calls visit for each node of g in a dependency order (a node after all it
 * depends on; otherwise in the order added), up to the first error;
 * cudaErrorInvalidValue for a cycle. */
cudaError_t qc_graph_walk(const struct qc_graph *g, cudaError_t (*visit)(struct qc_node *n, void *arg), void *arg);
/* Marks (mark[i] = 1, g->n entries) the nodes of g that the n nodes of from
 * are or depend on, directly or not: -1 if out of memory, else 0. */
int qc_graph_ancestors(const struct qc_graph *g, struct qc_node *const *from, size_t n, char *mark);
/* A deep copy; map (optional, g->n entries) receives the copy of each node. */
struct qc_graph *qc_graph_clone(const struct qc_graph *g, struct qc_node **map);

/* ---- graph_op.c ---- */

/* Copies op's owned buffers so that the copy owns its own. */
cudaError_t qc_node_op_copy(struct qc_node_op *dst, const struct qc_node_op *src);
void qc_node_op_free(struct qc_node_op *op);
/* Replaces a node's operation with op (taken over); a kernel keeps the
 * attributes it had (they are not parameters). */
void qc_node_set_op(struct qc_node *n, struct qc_node_op *op);
/* Moves a kernel op's attributes (cooperative included) from old to op. */
void qc_node_op_keep_attrs(struct qc_node_op *op, struct qc_node_op *old);
/* A kernel op's attribute id: into *val (0s if never set), or set from *val. */
cudaError_t qc_kattr_get(const struct qc_node_op *op, enum cudaLaunchAttributeID id, cudaLaunchAttributeValue *val);
cudaError_t qc_kattr_set(struct qc_node_op *op, enum cudaLaunchAttributeID id, const cudaLaunchAttributeValue *val);
/* A kernel op's thread-block cluster (its cluster dimension attribute; 1, 1, 1 without one). */
void qc_node_op_cluster(const struct qc_node_op *op, unsigned int cluster[3]);
/* Every attribute of src's kernel op becomes dst's. */
cudaError_t qc_kattr_copy(struct qc_node_op *dst, const struct qc_node_op *src);
/* A kernel node's operation from a kernel and its arguments (one pointer per
 * parameter) or its packed parameters (extra form: packed, size bytes). */
cudaError_t qc_node_op_kernel(struct qc_node_op *op, struct qc_kernel *k, dim3 grid, dim3 block, size_t shmem,
			      void **args, const void *packed, size_t size);
/* A memset node's operation (checks elem and the sizes). */
cudaError_t qc_node_op_memset(struct qc_node_op *op, void *dst, size_t pitch, uint32_t value, unsigned int elem,
			      size_t width, size_t height);
/* A host node's, an event record or wait node's (type), a child graph node's. */
cudaError_t qc_node_op_host(struct qc_node_op *op, cudaHostFn_t fn, void *data);
cudaError_t qc_node_op_event(struct qc_node_op *op, enum cudaGraphNodeType type, cudaEvent_t event);
cudaError_t qc_node_op_child(struct qc_node_op *op, const struct qc_graph *child);

/* ---- graph_params.c ---- */

/*
 * The generic node calls of both APIs: cudaGraphAddNode and
 * cuGraphAddNode_v2 (QC_NODE_ADD: a node of p's type in graph, after deps,
 * into *out), cudaGraphNodeSetParams and cuGraphNodeSetParams (QC_NODE_SET:
 * node's parameters), cudaGraphExecNodeSetParams and
 * cuGraphExecNodeSetParams (QC_NODE_EXEC_SET: those of exec's copy of
 * node).
 */
struct qc_node_call {
	enum { QC_NODE_ADD, QC_NODE_SET, QC_NODE_EXEC_SET } what;
	struct qc_graph *graph;
	struct qc_node *const *deps;
	size_t ndeps;
	struct qc_node **out;
	struct qc_node *node;
	struct qc_exec *exec;
};
/*
 * c with p's parameters. The driver's CUgraphNodeParams has the runtime's
 * layout (libcuda asserts it) but for the kernel and memcpy members, which
 * mean other things there (a CUfunction, not a host stub; CUDA_MEMCPY3D):
 * for those two the caller passes the operation it made (api_op, taken
 * over); NULL: the runtime's own, made from p. An add writes the alloc
 * node's address or the conditional node's bodies back into p, as CUDA does.
 */
cudaError_t qc_node_call(const struct qc_node_call *c, struct cudaGraphNodeParams *p, struct qc_node_op *api_op);
/* Whether edges (n of them, or NULL) carry no data: the only edges served. */
int qc_graph_plain_edges(const cudaGraphEdgeData *edges, size_t n);

/* ---- graph_exec.c ---- */

cudaError_t qc_exec_new(const struct qc_graph *g, unsigned long long flags, struct qc_exec **out);
void qc_exec_free(struct qc_exec *x);
/* Posts the steps of x onto stream, in order. */
cudaError_t qc_exec_launch(struct qc_exec *x, cudaStream_t stream, int ptds);
/* Takes a new operation for the step of node (x's source graph's); a
 * kernel keeps its attributes. */
cudaError_t qc_exec_set_op(struct qc_exec *x, const struct qc_node *node, struct qc_node_op *op);
/* cudaGraphExecChildGraphNodeSetParams: child's parameters for x's copy of
 * node, a child graph node (child must have its shape). */
cudaError_t qc_exec_set_child(struct qc_exec *x, const struct qc_node *node, const struct qc_graph *child);
/* cudaGraphNodeSetEnabled / GetEnabled (set: 0 reads into *enabled). */
cudaError_t qc_exec_enabled(struct qc_exec *x, const struct qc_node *node, int set, unsigned int *enabled);
/* cudaGraphExecUpdate: g's parameters into x if g has x's shape; else why not. */
cudaError_t qc_exec_update(struct qc_exec *x, const struct qc_graph *g, enum cudaGraphExecUpdateResult *result,
			   const struct qc_node **err_node);
/* Runs one operation on a stream (what a step of a launch does). */
cudaError_t qc_node_op_run(const struct qc_node_op *op, cudaStream_t stream, int ptds);

/* ---- graph_mem.c ---- */

/* An alloc node's operation: size bytes allocated now (the pool's
 * properties: device memory of a device), or a free node's of ptr (which an
 * alloc node of some graph made). */
cudaError_t qc_node_op_alloc(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size);
/* The same for a node to be added to g after deps: the memory of an earlier
 * alloc node of g when a free node among deps' ancestors gave it back (as
 * CUDA reuses an address within a graph); else an allocation of its own. */
cudaError_t qc_node_op_alloc_after(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size,
				   const struct qc_graph *g, struct qc_node *const *deps, size_t ndeps);
cudaError_t qc_node_op_free_mem(struct qc_node_op *op, void *ptr);
/*
 * Whether ptr is the memory of a live alloc node. Such memory is the node's
 * own allocation for the node's life: freeing it outside the graph
 * (cudaFree, cudaFreeAsync, another graph's free node) gives it back to the
 * graph, which has it again at its next launch, as CUDA's graph memory does.
 */
int qc_graph_mem_owns(const void *ptr);
/* cudaDeviceGetGraphMemAttribute / Set: the alloc nodes' memory. */
cudaError_t qc_graph_mem_attr(enum cudaGraphMemAttributeType attr, uint64_t *value, int set);
/* One more holder of m (a copy of its node), one fewer (the last frees it). */
void qc_graph_mem_get(struct qc_graph_mem *m);
void qc_graph_mem_put(struct qc_graph_mem *m);

/* ---- graph_uobj.c ---- */

/* User objects: a count of references and a destructor, run on a thread
 * of the library's own once the last one goes (as CUDA runs it on one of
 * its own: never under a lock of the caller's). */
cudaError_t qc_uobj_create(void *ptr, cudaHostFn_t destroy, unsigned int count, unsigned int flags,
			   struct qc_uobj **out);
cudaError_t qc_uobj_retain(struct qc_uobj *o, unsigned int count);
cudaError_t qc_uobj_release(struct qc_uobj *o, unsigned int count);
/* References owned by g: new ones, or (flags cudaGraphUserObjectMove) the caller's. */
cudaError_t qc_graph_retain_uobj(struct qc_graph *g, struct qc_uobj *o, unsigned int count, unsigned int flags);
cudaError_t qc_graph_release_uobj(struct qc_graph *g, struct qc_uobj *o, unsigned int count);
/* n references of o more, or fewer (the last runs its destructor). */
void qc_uobj_get(struct qc_uobj *o, unsigned long long n);
void qc_uobj_put(struct qc_uobj *o, unsigned long long n);
/* n more references of o in r (one entry per object): 0, or -1 when out of memory. */
int qc_urefs_add(struct qc_urefs *r, struct qc_uobj *o, unsigned long long n);
/* Gives r's references up and empties it. */
void qc_urefs_release(struct qc_urefs *r);
/* A clone's references: as many as src's (0, or -1 when out of memory). */
int qc_urefs_copy(struct qc_urefs *dst, const struct qc_urefs *src);

/* ---- graph_native.c ---- */

/* Whether g (its child graphs too) holds a conditional node. */
int qc_graph_has_cond(const struct qc_graph *g);
/* cudaGraphConditionalHandleCreate: a handle of g's outermost graph's host graph. */
cudaError_t qc_graph_cond_handle(struct qc_graph *g, unsigned int value, unsigned int flags,
				 cudaGraphConditionalHandle *out);
/* A conditional node's operation, with size empty bodies. */
cudaError_t qc_node_op_cond(struct qc_node_op *op, cudaGraphConditionalHandle handle,
			    enum cudaGraphConditionalNodeType type, unsigned int size);
/* Sends g's nodes to the host, which makes the executable graph *out. */
cudaError_t qc_graph_instantiate_host(const struct qc_graph *g, uint64_t *out);

/* ---- capture.c ---- */

/* Whether stream is being captured (the mode of the calling thread aside). */
int qc_capture_active(cudaStream_t stream, int ptds);
/* If stream is being captured: op is recorded in its graph (taken over) and
 * 1 returned with *e the call's answer; else 0 (op untouched). */
int qc_capture_op(cudaStream_t stream, int ptds, struct qc_node_op *op, cudaError_t *e);
/* Event record / wait on a stream: 1 and *e if capture handled it, else 0. */
int qc_capture_event_record(cudaEvent_t event, cudaStream_t stream, int ptds, cudaError_t *e);
int qc_capture_event_wait(cudaStream_t stream, int ptds, cudaEvent_t event, cudaError_t *e);
/* For a synchronizing call on stream (synchronize, query): an error, and the
 * capture invalidated, if the stream is being captured; else cudaSuccess. */
cudaError_t qc_capture_refuse(cudaStream_t stream, int ptds);
/* Forgets the capture state of an event or stream being destroyed. */
void qc_capture_forget_event(cudaEvent_t event);

cudaError_t qc_capture_begin(cudaStream_t stream, int ptds, enum cudaStreamCaptureMode mode, struct qc_graph *to,
			     struct qc_node *const *deps, size_t ndeps);
cudaError_t qc_capture_end(cudaStream_t stream, int ptds, struct qc_graph **graph);
/* cudaStreamGetCaptureInfo: every output optional. */
cudaError_t qc_capture_info(cudaStream_t stream, int ptds, enum cudaStreamCaptureStatus *status, unsigned long long *id,
			    struct qc_graph **graph, struct qc_node *const **deps, const cudaGraphEdgeData **edges,
			    size_t *ndeps);
cudaError_t qc_capture_update_deps(cudaStream_t stream, int ptds, struct qc_node *const *deps, size_t n,
				   unsigned int flags);
/* cudaThreadExchangeStreamCaptureMode */
cudaError_t qc_capture_exchange_mode(enum cudaStreamCaptureMode *mode);

/* ---- copy.c, callback.c (what a step runs) ---- */

cudaError_t qc_memset(void *dst, int value, size_t n, cudaStream_t stream, int async, int ptds);
cudaError_t qc_host_fn(cudaStream_t stream, int ptds, cudaHostFn_t fn, void *data);
/* event.c-like helpers of stream.c: record / wait without the capture hooks. */
cudaError_t qc_event_record_now(cudaEvent_t event, cudaStream_t stream, int ptds);
cudaError_t qc_event_wait_now(cudaStream_t stream, cudaEvent_t event, int ptds);

#endif
