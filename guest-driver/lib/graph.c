/* SPDX-License-Identifier: MIT */
/*
 * Graphs, nodes and executable graphs (see graph.h): building, copying,
 * instantiating in a dependency order, launching and updating.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

/* Graphs, nodes, executable graphs and user objects the program holds,
 * each with its kind, so that a handle it passes is checked before it is
 * followed (and a node passed as a graph is not taken for one). */
enum kind { GRAPH = 1, NODE, EXEC, UOBJ };

struct known_obj {
	const void *p;
	enum kind kind;
};

static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct known_obj *known;
static size_t nknown, known_cap;

static int remember(const void *p, enum kind kind)
{
	int ok = 1;

	pthread_mutex_lock(&known_lock);
	if (nknown == known_cap) {
		size_t cap = known_cap ? 2 * known_cap : 64;
		struct known_obj *v = realloc(known, cap * sizeof(*v));

		if (v)
			known = v, known_cap = cap;
		else
			ok = 0;
	}
	if (ok)
		known[nknown++] = (struct known_obj){ p, kind };
	pthread_mutex_unlock(&known_lock);
	return ok;
}

static void forget(const void *p)
{
	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < nknown; i++)
		if (known[i].p == p) {
			known[i] = known[--nknown];
			break;
		}
	pthread_mutex_unlock(&known_lock);
}

static int is_known(const void *p, enum kind kind)
{
	int found = 0;

	if (!p)
		return 0;
	pthread_mutex_lock(&known_lock);
	for (size_t i = 0; i < nknown && !found; i++)
		found = known[i].p == p && known[i].kind == kind;
	pthread_mutex_unlock(&known_lock);
	return found;
}

int qc_graph_known(const struct qc_graph *g) { return is_known(g, GRAPH); }
int qc_node_known(const struct qc_node *n) { return is_known(n, NODE); }
int qc_exec_known(const struct qc_exec *x) { return is_known(x, EXEC); }

/* ------------------------------------------------------------ user objects */

struct qc_uobj {
	void *ptr;
	cudaHostFn_t destroy;
	unsigned long long refs;	/* the program's and graphs' (under uobj_lock) */
};

static pthread_mutex_t uobj_lock = PTHREAD_MUTEX_INITIALIZER;

/* Destructors queued for the destructor thread, in the order their objects went. */
struct dtor {
	cudaHostFn_t fn;
	void *ptr;
	struct dtor *next;
};

static pthread_mutex_t dtor_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t dtor_cond = PTHREAD_COND_INITIALIZER;
static struct dtor *dtor_head, **dtor_tail = &dtor_head;
static int dtor_state;	/* 0: no thread yet, 1: running, -1: could not start */

static void *dtor_thread(void *arg)
{
	(void)arg;
	for (;;) {
		struct dtor *d;

		pthread_mutex_lock(&dtor_lock);
		while (!dtor_head)
			pthread_cond_wait(&dtor_cond, &dtor_lock);
		d = dtor_head;
		dtor_head = d->next;
		if (!dtor_head)
			dtor_tail = &dtor_head;
		pthread_mutex_unlock(&dtor_lock);
		d->fn(d->ptr);
		free(d);
	}
	return NULL;
}

/* The last reference can go where the library holds a lock (a capture
 * ending with its graph), and a destructor may block: it runs on a thread
 * of its own, as CUDA's run on an internal thread. Only when that thread
 * cannot be had (no memory, no thread) does it run here. */
static void run_destructor(cudaHostFn_t fn, void *ptr)
{
	struct dtor *d = malloc(sizeof(*d));

	pthread_mutex_lock(&dtor_lock);
	if (d && dtor_state == 0)
		dtor_state = qc_start_thread(dtor_thread, 0) == 0 ? 1 : -1;
	if (d && dtor_state == 1) {
		*d = (struct dtor){ fn, ptr, NULL };
		*dtor_tail = d;
		dtor_tail = &d->next;
		pthread_cond_signal(&dtor_cond);
		d = NULL;
		fn = NULL;
	}
	pthread_mutex_unlock(&dtor_lock);
	free(d);
	if (fn)
		fn(ptr);
}

/* CUDA takes counts of references from 1 to INT_MAX. */
static int count_ok(unsigned int count)
{
	return count && count <= INT_MAX;
}

cudaError_t qc_uobj_create(void *ptr, cudaHostFn_t destroy, unsigned int count, unsigned int flags,
			   struct qc_uobj **out)
{
	struct qc_uobj *o;

	/* cudaUserObjectNoDestructorSync, the only flag, is required. */
	if (!out || !destroy || !count_ok(count) || flags != cudaUserObjectNoDestructorSync)
		return cudaErrorInvalidValue;
	o = malloc(sizeof(*o));
	if (!o)
		return cudaErrorMemoryAllocation;
	*o = (struct qc_uobj){ ptr, destroy, count };
	if (!remember(o, UOBJ)) {
		free(o);
		return cudaErrorMemoryAllocation;
	}
	*out = o;
	return cudaSuccess;
}

static void uobj_get(struct qc_uobj *o, unsigned long long n)
{
	pthread_mutex_lock(&uobj_lock);
	o->refs += n;
	pthread_mutex_unlock(&uobj_lock);
}

/* n references go (uobj_lock held): whether they were the last, the
 * object then forgotten (uobj_destroy is the caller's, unlocked). */
static int uobj_drop_locked(struct qc_uobj *o, unsigned long long n)
{
	o->refs -= n;
	if (o->refs)
		return 0;
	forget(o);
	return 1;
}

static void uobj_destroy(struct qc_uobj *o)
{
	run_destructor(o->destroy, o->ptr);
	free(o);
}

static void uobj_put(struct qc_uobj *o, unsigned long long n)
{
	int last;

	pthread_mutex_lock(&uobj_lock);
	last = uobj_drop_locked(o, n);
	pthread_mutex_unlock(&uobj_lock);
	if (last)
		uobj_destroy(o);
}

cudaError_t qc_uobj_retain(struct qc_uobj *o, unsigned int count)
{
	cudaError_t e = cudaSuccess;

	pthread_mutex_lock(&uobj_lock);
	if (!count_ok(count) || !is_known(o, UOBJ))
		e = cudaErrorInvalidValue;
	else
		o->refs += count;
	pthread_mutex_unlock(&uobj_lock);
	return e;
}

/* Releasing more than there are is undefined in CUDA: refused here. */
cudaError_t qc_uobj_release(struct qc_uobj *o, unsigned int count)
{
	int ok, last = 0;

	pthread_mutex_lock(&uobj_lock);
	ok = count_ok(count) && is_known(o, UOBJ) && count <= o->refs;
	if (ok)
		last = uobj_drop_locked(o, count);
	pthread_mutex_unlock(&uobj_lock);
	if (last)
		uobj_destroy(o);
	return ok ? cudaSuccess : cudaErrorInvalidValue;
}

/* n more references of o in r (one entry per object). */
static int urefs_add(struct qc_urefs *r, struct qc_uobj *o, unsigned long long n)
{
	struct qc_uref *v;

	for (size_t i = 0; i < r->n; i++)
		if (r->v[i].obj == o) {
			r->v[i].count += n;
			return 0;
		}
	v = realloc(r->v, (r->n + 1) * sizeof(*v));
	if (!v)
		return -1;
	v[r->n++] = (struct qc_uref){ o, n };
	r->v = v;
	return 0;
}

static void urefs_release(struct qc_urefs *r)
{
	for (size_t i = 0; i < r->n; i++)
		uobj_put(r->v[i].obj, r->v[i].count);
	free(r->v);
	*r = (struct qc_urefs){ 0 };
}

/* A clone's references: as many as the original's. */
static int urefs_copy(struct qc_urefs *dst, const struct qc_urefs *src)
{
	if (!src->n)
		return 0;
	dst->v = malloc(src->n * sizeof(*dst->v));
	if (!dst->v)
		return -1;
	memcpy(dst->v, src->v, src->n * sizeof(*dst->v));
	dst->n = src->n;
	for (size_t i = 0; i < src->n; i++)
		uobj_get(src->v[i].obj, src->v[i].count);
	return 0;
}

cudaError_t qc_graph_retain_uobj(struct qc_graph *g, struct qc_uobj *o, unsigned int count, unsigned int flags)
{
	cudaError_t e = cudaSuccess;

	if (!qc_graph_known(g) || !count_ok(count) || (flags & ~(unsigned int)cudaGraphUserObjectMove))
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&uobj_lock);
	if (!is_known(o, UOBJ))
		e = cudaErrorInvalidValue;
	else if (urefs_add(&g->urefs, o, count))
		e = cudaErrorMemoryAllocation;
	else if (!(flags & cudaGraphUserObjectMove))
		o->refs += count;	/* moved: the caller's references become the graph's */
	pthread_mutex_unlock(&uobj_lock);
	return e;
}

cudaError_t qc_graph_release_uobj(struct qc_graph *g, struct qc_uobj *o, unsigned int count)
{
	size_t i = 0;

	if (!qc_graph_known(g) || !count_ok(count))
		return cudaErrorInvalidValue;
	while (i < g->urefs.n && g->urefs.v[i].obj != o)
		i++;
	if (i == g->urefs.n || count > g->urefs.v[i].count)
		return cudaErrorInvalidValue;	/* not the graph's to release */
	if (!(g->urefs.v[i].count -= count))
		g->urefs.v[i] = g->urefs.v[--g->urefs.n];
	uobj_put(o, count);
	return cudaSuccess;
}

/* ------------------------------------------------------------ alloc nodes' memory */

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_graph_mem **mems;	/* live, for free nodes' checks */
static size_t nmems, mems_cap;
static uint64_t mem_used, mem_high;	/* bytes of alloc nodes, as CUDA's attributes count them */

static void mem_get(struct qc_graph_mem *m)
{
	pthread_mutex_lock(&mem_lock);
	m->refs++;
	pthread_mutex_unlock(&mem_lock);
}

static void mem_put(struct qc_graph_mem *m)
{
	int last;

	pthread_mutex_lock(&mem_lock);
	last = --m->refs == 0;
	if (last) {
		for (size_t i = 0; i < nmems; i++)
			if (mems[i] == m) {
				mems[i] = mems[--nmems];
				break;
			}
		mem_used -= m->size;
	}
	pthread_mutex_unlock(&mem_lock);
	if (last) {
		cudaFree(m->ptr);
		free(m);
	}
}

/* Whether ptr is the memory of a live alloc node. */
int qc_graph_mem_owns(const void *ptr)
{
	int found = 0;

	pthread_mutex_lock(&mem_lock);
	for (size_t i = 0; i < nmems && !found; i++)
		found = mems[i]->ptr == ptr;
	pthread_mutex_unlock(&mem_lock);
	return found;
}

cudaError_t qc_node_op_alloc(struct qc_node_op *op, const struct cudaMemPoolProps *props, size_t size)
{
	struct qc_graph_mem *m;
	cudaError_t e;

	if (!props || !size)
		return cudaErrorInvalidValue;
	if (props->allocType != cudaMemAllocationTypePinned ||
	    props->handleTypes != cudaMemHandleTypeNone ||
	    props->location.type != cudaMemLocationTypeDevice)
		return cudaErrorInvalidValue;
	if (props->location.id < 0 || props->location.id >= qc.device_count)
		return cudaErrorInvalidDevice;
	m = calloc(1, sizeof(*m));
	if (!m)
		return cudaErrorMemoryAllocation;
	e = cudaMalloc(&m->ptr, size);	/* the session's allocation: quota and checks apply */
	if (e == cudaSuccess) {
		pthread_mutex_lock(&mem_lock);
		if (nmems == mems_cap) {
			size_t cap = mems_cap ? 2 * mems_cap : 16;
			struct qc_graph_mem **v = realloc(mems, cap * sizeof(*v));

			if (v)
				mems = v, mems_cap = cap;
		}
		if (nmems < mems_cap) {
			mems[nmems++] = m;
			mem_used += size;
			if (mem_used > mem_high)
				mem_high = mem_used;
		} else {
			e = cudaErrorMemoryAllocation;
		}
		pthread_mutex_unlock(&mem_lock);
		if (e != cudaSuccess)
			cudaFree(m->ptr);
	}
	if (e != cudaSuccess) {
		free(m);
		return e;
	}
	m->size = size;
	m->props = *props;
	m->refs = 1;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemAlloc;
	op->alloc = m;
	return cudaSuccess;
}

cudaError_t qc_node_op_free_mem(struct qc_node_op *op, void *ptr)
{
	if (!ptr || !qc_graph_mem_owns(ptr))
		return cudaErrorInvalidValue;
	memset(op, 0, sizeof(*op));
	op->type = cudaGraphNodeTypeMemFree;
	op->free_ptr = ptr;
	return cudaSuccess;
}

/* Used and reserved are the same here: an alloc node's memory is its own
 * allocation (CUDA's reserved grows in larger granules). */
cudaError_t qc_graph_mem_attr(enum cudaGraphMemAttributeType attr, uint64_t *value, int set)
{
	cudaError_t e = cudaSuccess;

	if (!value)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&mem_lock);
	switch (attr) {
	case cudaGraphMemAttrUsedMemCurrent:
	case cudaGraphMemAttrReservedMemCurrent:
		if (set)
			e = cudaErrorInvalidValue;
		else
			*value = mem_used;
		break;
	case cudaGraphMemAttrUsedMemHigh:
	case cudaGraphMemAttrReservedMemHigh:
		if (set && *value != 0)
			e = cudaErrorInvalidValue;
		else if (set)
			mem_high = mem_used;
		else
			*value = mem_high;
		break;
	default:
		e = cudaErrorInvalidValue;
	}
	pthread_mutex_unlock(&mem_lock);
	return e;
}

/* ------------------------------------------------------------ operations */

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
			mem_put(op->alloc);
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
		mem_get(src->alloc);
		return cudaSuccess;
	case cudaGraphNodeTypeConditional:
		dst->cond.bodies = calloc(src->cond.size, sizeof(*dst->cond.bodies));
		if (!dst->cond.bodies)
			return cudaErrorMemoryAllocation;
		for (unsigned int i = 0; i < src->cond.size; i++)
			if (!(dst->cond.bodies[i] = qc_graph_clone(src->cond.bodies[i], NULL)))
				return cudaErrorMemoryAllocation;	/* the caller frees dst */
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

/* The cooperative attribute is the op's flag (what a launch and the host's
 * graphs read); the others are kept as set. */
cudaError_t qc_kattr_get(const struct qc_node_op *op, enum cudaLaunchAttributeID id,
			 cudaLaunchAttributeValue *val)
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

cudaError_t qc_kattr_set(struct qc_node_op *op, enum cudaLaunchAttributeID id,
			 const cudaLaunchAttributeValue *val)
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
cudaError_t qc_node_op_kernel(struct qc_node_op *op, struct qc_kernel *k, dim3 grid, dim3 block,
			      size_t shmem, void **args, const void *packed, size_t size)
{
	uint64_t func;
	cudaError_t e;

	if (!k)
		return cudaErrorInvalidDeviceFunction;
	e = qc_kernel_get(k, &func);	/* the layout comes with the handle */
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

cudaError_t qc_node_op_memset(struct qc_node_op *op, void *dst, size_t pitch, uint32_t value,
			      unsigned int elem, size_t width, size_t height)
{
	int bytewise;

	if (!dst || (elem != 1 && elem != 2 && elem != 4) || !width || !height ||
	    (height > 1 && pitch < width * elem))
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

/* ------------------------------------------------------------ graphs */

struct qc_graph *qc_graph_new(void)
{
	struct qc_graph *g = calloc(1, sizeof(*g));

	if (g && !remember(g, GRAPH)) {
		free(g);
		g = NULL;
	}
	return g;
}

static void node_free(struct qc_node *n)
{
	forget(n);
	qc_node_op_free(&n->op);
	free(n->deps);
	free(n);
}

void qc_graph_free(struct qc_graph *g)
{
	if (!g)
		return;
	forget(g);
	qc_graph_free_host(g);
	for (size_t i = 0; i < g->n; i++)
		node_free(g->nodes[i]);
	free(g->nodes);
	urefs_release(&g->urefs);
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
			return cudaErrorInvalidValue;	/* CUDA refuses a duplicate edge */
	v = realloc(n->deps, (n->ndeps + 1) * sizeof(*v));
	if (!v)
		return cudaErrorMemoryAllocation;
	v[n->ndeps++] = dep;
	n->deps = v;
	return cudaSuccess;
}

cudaError_t qc_graph_add(struct qc_graph *g, struct qc_node_op *op, struct qc_node *const *deps,
			 size_t ndeps, struct qc_node **out)
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
	if (e == cudaSuccess && !remember(n, NODE))
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

cudaError_t qc_graph_add_edges(struct qc_graph *g, struct qc_node *const *from,
			       struct qc_node *const *to, size_t n)
{
	if (!qc_graph_known(g) || (n && (!from || !to)))
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < n; i++)
		if (!in_graph(g, from[i]) || !in_graph(g, to[i]) || depends_on(from[i], to[i]))
			return cudaErrorInvalidValue;	/* unknown node, or a cycle */
	for (size_t i = 0; i < n; i++) {
		cudaError_t e = add_dep(to[i], from[i]);

		if (e != cudaSuccess)
			return e;
	}
	return cudaSuccess;
}

cudaError_t qc_graph_remove_edges(struct qc_graph *g, struct qc_node *const *from,
				  struct qc_node *const *to, size_t n)
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
			return cudaErrorInvalidValue;	/* no such edge */
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

	if (!c || !copy || urefs_copy(&c->urefs, &g->urefs))
		goto fail;
	c->host = g->host;	/* its conditional handles are the original's */
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

/* ------------------------------------------------------------ executable graphs */

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
			e = cudaErrorInvalidValue;	/* a cycle (edges are checked when added) */
	}
	free(done);
	return e;
}

/* What order() appends to: the executable graph, and whether its nodes are the top level's. */
struct order_to {
	struct qc_exec *x;
	int top;
};

static cudaError_t order(struct qc_exec *x, struct qc_graph *g, int top);

/* A node's step (a child graph's in its place); nothing for nodes with nothing to run. */
static cudaError_t order_node(struct qc_node *n, void *arg)
{
	struct order_to *to = arg;
	struct qc_step *v;

	if (n->op.type == cudaGraphNodeTypeGraph)
		return order(to->x, n->op.child, 0);
	/* Nothing to run: an alloc node's memory exists from
	 * the node's creation, a free node's until the graph's end. */
	if (n->op.type == cudaGraphNodeTypeEmpty || n->op.type == cudaGraphNodeTypeMemAlloc ||
	    n->op.type == cudaGraphNodeTypeMemFree)
		return cudaSuccess;
	v = realloc(to->x->steps, (to->x->n + 1) * sizeof(*v));
	if (!v)
		return cudaErrorMemoryAllocation;
	to->x->steps = v;
	to->x->steps[to->x->n++] = (struct qc_step){ &n->op, to->top ? n : NULL, NULL, 0 };
	return cudaSuccess;
}

/* Appends the steps of g's nodes in a dependency order. */
static cudaError_t order(struct qc_exec *x, struct qc_graph *g, int top)
{
	struct order_to to = { x, top };

	return qc_graph_walk(g, order_node, &to);
}

/* The steps of the top-level nodes know the nodes they came from (a
 * snapshot has its graph's nodes at the same places). */
static void link_origins(struct qc_exec *x)
{
	for (size_t s = 0; s < x->n; s++)
		x->steps[s].orig = x->steps[s].snap ? x->orig[x->steps[s].snap->index] : NULL;
}

/* The references g and the graphs inside it (child graphs, conditional
 * bodies) own, added to into: moved out of them (take), or new ones. */
static int urefs_gather(struct qc_graph *g, struct qc_urefs *into, int take)
{
	int err = 0;

	for (size_t i = 0; i < g->urefs.n; i++) {
		struct qc_uref *r = &g->urefs.v[i];

		if (!urefs_add(into, r->obj, r->count)) {
			if (!take)
				uobj_get(r->obj, r->count);
		} else if (take) {
			uobj_put(r->obj, r->count);	/* out of memory: now, not after the launches */
		} else {
			err = -1;
		}
	}
	if (take) {
		free(g->urefs.v);
		g->urefs = (struct qc_urefs){ 0 };
	}
	for (size_t i = 0; i < g->n; i++) {
		const struct qc_node_op *op = &g->nodes[i]->op;

		if (op->type == cudaGraphNodeTypeGraph)
			err |= urefs_gather(op->child, into, take);
		for (unsigned int b = 0; op->type == cudaGraphNodeTypeConditional && b < op->cond.size; b++)
			err |= urefs_gather(op->cond.bodies[b], into, take);
	}
	return err;
}

static void release_later(void *arg)
{
	urefs_release(arg);
	free(arg);
}

/* References x gives up (taken from r): released once its last launch is
 * done, by a host function queued after it on that stream (CUDA holds them
 * until the launches end); at once if it never ran or the stream is gone. */
static void release_after(struct qc_exec *x, struct qc_urefs *r)
{
	struct qc_urefs *held;

	if (!r->n) {
		urefs_release(r);
		return;
	}
	if (x->launched && qc_stream_known(x->last_stream, x->last_ptds) &&
	    !qc_capture_active(x->last_stream, x->last_ptds) && (held = malloc(sizeof(*held)))) {
		*held = *r;
		if (qc_host_fn(x->last_stream, x->last_ptds, release_later, held) == cudaSuccess) {
			*r = (struct qc_urefs){ 0 };
			return;
		}
		free(held);
	}
	urefs_release(r);
}

/* Frees a graph x no longer runs (its snapshot, or a child graph of it),
 * the user objects it holds released after x's launches. */
static void exec_drop(struct qc_exec *x, struct qc_graph *g)
{
	struct qc_urefs r = { 0 };

	if (!g)
		return;
	urefs_gather(g, &r, 1);
	qc_graph_free(g);
	release_after(x, &r);
}

/* A graph with conditional nodes: the host's executable graph, holding
 * references to the user objects of g (and of the graphs in it). */
static cudaError_t exec_new_host(const struct qc_graph *g, unsigned long long flags, struct qc_exec **out)
{
	struct qc_exec *x = calloc(1, sizeof(*x));
	cudaError_t e = x ? qc_graph_instantiate_host(g, &x->host) : cudaErrorMemoryAllocation;

	if (e == cudaSuccess && (urefs_gather((struct qc_graph *)g, &x->urefs, 0) || !remember(x, EXEC))) {
		urefs_release(&x->urefs);
		qc_req_graph_exec_destroy(x->host);
		e = cudaErrorMemoryAllocation;
	}
	if (e != cudaSuccess) {
		free(x);
		return e;
	}
	x->flags = flags;
	*out = x;
	return cudaSuccess;
}

/* The snapshot is a clone: it holds its own references to g's user
 * objects, as CUDA's instantiation retains them. */
cudaError_t qc_exec_new(const struct qc_graph *g, unsigned long long flags, struct qc_exec **out)
{
	struct qc_exec *x;
	cudaError_t e;

	if (!qc_graph_known(g))
		return cudaErrorInvalidValue;
	if (qc_graph_has_cond(g))
		return exec_new_host(g, flags, out);
	x = calloc(1, sizeof(*x));
	if (x)
		x->orig = malloc((g->n ? g->n : 1) * sizeof(*x->orig));
	if (!x || !x->orig || !(x->snapshot = qc_graph_clone(g, NULL))) {
		if (x)
			free(x->orig);
		free(x);
		return cudaErrorMemoryAllocation;
	}
	for (size_t i = 0; i < g->n; i++)
		x->orig[i] = g->nodes[i];
	x->flags = flags;
	e = order(x, x->snapshot, 1);
	if (e == cudaSuccess && !remember(x, EXEC))
		e = cudaErrorMemoryAllocation;
	if (e != cudaSuccess) {
		qc_graph_free(x->snapshot);
		free(x->orig);
		free(x->steps);
		free(x);
		return e;
	}
	link_origins(x);
	*out = x;
	return cudaSuccess;
}

void qc_exec_free(struct qc_exec *x)
{
	forget(x);
	if (x->host)
		qc_req_graph_exec_destroy(x->host);
	exec_drop(x, x->snapshot);
	release_after(x, &x->urefs);
	free(x->orig);
	free(x->steps);
	free(x);
}

cudaError_t qc_node_op_run(const struct qc_node_op *op, cudaStream_t stream, int ptds)
{
	switch (op->type) {
	case cudaGraphNodeTypeKernel: {
		const struct qc_launch_mode coop = { .cooperative = 1, .cluster = { 1, 1, 1 } };

		return qc_launch_packed(op->kernel.k, op->kernel.grid, op->kernel.block,
					op->kernel.params, op->kernel.k->param_bytes, op->kernel.shmem,
					stream, ptds, op->kernel.cooperative ? &coop : NULL);
	}
	case cudaGraphNodeTypeMemcpy: {
		cudaError_t e = cudaSuccess;
		const struct qc_node_op *c = op;

		if (c->copy.height * c->copy.depth == 1 ||
		    (c->copy.dpitch == c->copy.width && c->copy.spitch == c->copy.width &&
		     c->copy.dslice == c->copy.width * c->copy.height &&
		     c->copy.sslice == c->copy.width * c->copy.height))
			return qc_memcpy(c->copy.dst, c->copy.src,
					 c->copy.width * c->copy.height * c->copy.depth, c->copy.kind,
					 stream, 1, ptds);
		for (size_t z = 0; z < c->copy.depth && e == cudaSuccess; z++)
			for (size_t y = 0; y < c->copy.height && e == cudaSuccess; y++)
				e = qc_memcpy(c->copy.dst + z * c->copy.dslice + y * c->copy.dpitch,
					      c->copy.src + z * c->copy.sslice + y * c->copy.spitch,
					      c->copy.width, c->copy.kind, stream, 1, ptds);
		return e;
	}
	case cudaGraphNodeTypeMemset: {
		cudaError_t e = cudaSuccess;
		size_t row = op->set.width * op->set.elem;

		for (size_t y = 0; y < op->set.height && e == cudaSuccess; y++) {
			char *d = op->set.dst + y * op->set.pitch;

			e = op->set.row ? qc_memcpy(d, op->set.row, row, cudaMemcpyHostToDevice, stream, 1, ptds) :
					  qc_memset(d, (int)(op->set.value & 0xff), row, stream, 1, ptds);
		}
		return e;
	}
	case cudaGraphNodeTypeHost:
		return qc_host_fn(stream, ptds, op->host.fn, op->host.data);
	case cudaGraphNodeTypeEventRecord:
		return qc_event_record_now(op->event, stream, ptds);
	case cudaGraphNodeTypeWaitEvent:
		return qc_event_wait_now(stream, op->event, ptds);
	case cudaGraphNodeTypeEmpty:
		return cudaSuccess;
	default:
		return cudaErrorNotSupported;
	}
}

/* A disabled step runs as an empty node: nothing to post. */
cudaError_t qc_exec_launch(struct qc_exec *x, cudaStream_t stream, int ptds)
{
	cudaError_t e = cudaSuccess;

	if (!qc_exec_known(x))
		return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	x->launched = 1;
	x->last_stream = stream;
	x->last_ptds = ptds;
	if (x->host)
		return qc_req_graph_launch(x->host, qc_stream(stream, ptds));
	for (size_t i = 0; i < x->n && e == cudaSuccess; i++)
		if (!x->steps[i].disabled)
			e = qc_node_op_run(x->steps[i].op, stream, ptds);
	return e;
}

cudaError_t qc_exec_set_op(struct qc_exec *x, const struct qc_node *node, struct qc_node_op *op)
{
	for (size_t i = 0; i < x->n; i++) {
		struct qc_node *snap = x->steps[i].snap;

		if (x->steps[i].orig != node || !snap)
			continue;
		if (snap->op.type != op->type) {
			qc_node_op_free(op);
			return cudaErrorInvalidValue;
		}
		qc_node_set_op(snap, op);
		return cudaSuccess;
	}
	qc_node_op_free(op);
	return cudaErrorInvalidValue;
}

/* Only kernel, memset and memcpy nodes can be disabled, as in CUDA 13. A
 * graph the host runs has no steps here. */
cudaError_t qc_exec_enabled(struct qc_exec *x, const struct qc_node *node, int set, unsigned int *enabled)
{
	struct qc_step *s = NULL;

	if (x->host)
		return cudaErrorNotSupported;
	for (size_t i = 0; i < x->n && !s; i++)
		if (x->steps[i].orig == node && x->steps[i].snap)
			s = &x->steps[i];
	if (!s || (s->op->type != cudaGraphNodeTypeKernel && s->op->type != cudaGraphNodeTypeMemset &&
		   s->op->type != cudaGraphNodeTypeMemcpy))
		return cudaErrorInvalidValue;
	if (set)
		s->disabled = !*enabled;
	else
		*enabled = !s->disabled;
	return cudaSuccess;
}

/* Same shape: as many nodes, of the same types, with the same edges. */
static const struct qc_node *shape_differs(const struct qc_graph *a, const struct qc_graph *b,
					   enum cudaGraphExecUpdateResult *why)
{
	if (a->n != b->n) {
		*why = cudaGraphExecUpdateErrorTopologyChanged;
		return NULL;
	}
	for (size_t i = 0; i < a->n; i++) {
		const struct qc_node *p = a->nodes[i], *q = b->nodes[i];

		if (p->op.type != q->op.type) {
			*why = cudaGraphExecUpdateErrorNodeTypeChanged;
			return q;
		}
		if (p->ndeps != q->ndeps) {
			*why = cudaGraphExecUpdateErrorTopologyChanged;
			return q;
		}
		for (size_t j = 0; j < p->ndeps; j++)
			if (index_of(a, p->deps[j]) != index_of(b, q->deps[j])) {
				*why = cudaGraphExecUpdateErrorTopologyChanged;
				return q;
			}
		if (p->op.type == cudaGraphNodeTypeGraph &&
		    shape_differs(p->op.child, q->op.child, why)) {
			return q;
		}
	}
	return NULL;
}

/* The same shape orders its nodes the same way: the steps disabled stay
 * so, the references of the old snapshot go after x's launches. */
cudaError_t qc_exec_update(struct qc_exec *x, const struct qc_graph *g,
			   enum cudaGraphExecUpdateResult *result, const struct qc_node **err_node)
{
	struct qc_exec *fresh;
	enum cudaGraphExecUpdateResult why = cudaGraphExecUpdateSuccess;
	cudaError_t e;

	*err_node = NULL;
	if (!qc_exec_known(x) || !qc_graph_known(g))
		return cudaErrorInvalidValue;
	if (x->host || qc_graph_has_cond(g)) {	/* the host's graph is not updated in place */
		*result = cudaGraphExecUpdateErrorNotSupported;
		return cudaErrorGraphExecUpdateFailure;
	}
	*err_node = shape_differs(x->snapshot, g, &why);
	if (why != cudaGraphExecUpdateSuccess) {
		*result = why;
		return cudaErrorGraphExecUpdateFailure;
	}
	/* The same shape: a new snapshot of g replaces the old one. */
	e = qc_exec_new(g, x->flags, &fresh);
	if (e != cudaSuccess) {
		*result = cudaGraphExecUpdateError;
		return e;
	}
	forget(fresh);
	for (size_t i = 0; i < fresh->n && i < x->n; i++)
		fresh->steps[i].disabled = x->steps[i].disabled;
	exec_drop(x, x->snapshot);
	free(x->orig);
	free(x->steps);
	x->snapshot = fresh->snapshot;
	x->orig = fresh->orig;
	x->steps = fresh->steps;
	x->n = fresh->n;
	free(fresh);
	*result = cudaGraphExecUpdateSuccess;
	return cudaSuccess;
}

/* The steps of x again, after a child graph of its snapshot changed (a
 * disabled step stays so). */
static cudaError_t restep(struct qc_exec *x)
{
	struct qc_exec fresh = { .orig = x->orig };
	cudaError_t e = order(&fresh, x->snapshot, 1);

	if (e != cudaSuccess) {
		free(fresh.steps);
		return e;
	}
	link_origins(&fresh);
	for (size_t i = 0; i < fresh.n; i++)
		for (size_t j = 0; fresh.steps[i].orig && j < x->n; j++)
			if (x->steps[j].orig == fresh.steps[i].orig)
				fresh.steps[i].disabled = x->steps[j].disabled;
	free(x->steps);
	x->steps = fresh.steps;
	x->n = fresh.n;
	return cudaSuccess;
}

/* x's copy of node takes a clone of child, which must have the shape of
 * the graph it replaces (as cudaGraphExecUpdate asks; CUDA 13 answers
 * cudaErrorGraphExecUpdateFailure otherwise, measured on the H100). The
 * host's graphs are not updated in place. */
cudaError_t qc_exec_set_child(struct qc_exec *x, const struct qc_node *node, const struct qc_graph *child)
{
	enum cudaGraphExecUpdateResult why = cudaGraphExecUpdateSuccess;
	struct qc_node *snap = NULL;
	struct qc_graph *c, *old;
	cudaError_t e;

	if (x->host)
		return cudaErrorNotSupported;
	for (size_t i = 0; i < x->snapshot->n && !snap; i++)
		if (x->orig[i] == node)
			snap = x->snapshot->nodes[i];
	if (!snap || snap->op.type != cudaGraphNodeTypeGraph || !qc_graph_known(child))
		return cudaErrorInvalidValue;
	if (qc_graph_has_cond(child) || shape_differs(snap->op.child, child, &why) ||
	    why != cudaGraphExecUpdateSuccess)
		return cudaErrorGraphExecUpdateFailure;
	c = qc_graph_clone(child, NULL);
	if (!c)
		return cudaErrorMemoryAllocation;
	old = snap->op.child;
	snap->op.child = c;
	e = restep(x);
	if (e != cudaSuccess) {
		snap->op.child = old;
		qc_graph_free(c);
		return e;
	}
	exec_drop(x, old);
	return cudaSuccess;
}
