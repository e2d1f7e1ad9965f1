/* SPDX-License-Identifier: MIT */
/*
 * User objects (cudaUserObject_t, CUuserObject; see graph.h): counted
 * references held by the program and by graphs, and the destructor run
 * once the last one goes.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"

struct qc_uobj {
	void *ptr;
	cudaHostFn_t destroy;
	unsigned long long refs; /* the program's and graphs' (under uobj_lock) */
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
static int dtor_state; /* 0: no thread yet, 1: running, -1: could not start */

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
	if (!qc_known_add(o, QC_KNOWN_UOBJ)) {
		free(o);
		return cudaErrorMemoryAllocation;
	}
	*out = o;
	return cudaSuccess;
}

void qc_uobj_get(struct qc_uobj *o, unsigned long long n)
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
	qc_known_forget(o);
	return 1;
}

static void uobj_destroy(struct qc_uobj *o)
{
	run_destructor(o->destroy, o->ptr);
	free(o);
}

void qc_uobj_put(struct qc_uobj *o, unsigned long long n)
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
	if (!count_ok(count) || !qc_known_is(o, QC_KNOWN_UOBJ))
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
	ok = count_ok(count) && qc_known_is(o, QC_KNOWN_UOBJ) && count <= o->refs;
	if (ok)
		last = uobj_drop_locked(o, count);
	pthread_mutex_unlock(&uobj_lock);
	if (last)
		uobj_destroy(o);
	return ok ? cudaSuccess : cudaErrorInvalidValue;
}

/* n more references of o in r (one entry per object). */
int qc_urefs_add(struct qc_urefs *r, struct qc_uobj *o, unsigned long long n)
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

void qc_urefs_release(struct qc_urefs *r)
{
	for (size_t i = 0; i < r->n; i++)
		qc_uobj_put(r->v[i].obj, r->v[i].count);
	free(r->v);
	*r = (struct qc_urefs){ 0 };
}

/* A clone's references: as many as the original's. */
int qc_urefs_copy(struct qc_urefs *dst, const struct qc_urefs *src)
{
	if (!src->n)
		return 0;
	dst->v = malloc(src->n * sizeof(*dst->v));
	if (!dst->v)
		return -1;
	memcpy(dst->v, src->v, src->n * sizeof(*dst->v));
	dst->n = src->n;
	for (size_t i = 0; i < src->n; i++)
		qc_uobj_get(src->v[i].obj, src->v[i].count);
	return 0;
}

cudaError_t qc_graph_retain_uobj(struct qc_graph *g, struct qc_uobj *o, unsigned int count, unsigned int flags)
{
	cudaError_t e = cudaSuccess;

	if (!qc_graph_known(g) || !count_ok(count) || (flags & ~(unsigned int)cudaGraphUserObjectMove))
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&uobj_lock);
	if (!qc_known_is(o, QC_KNOWN_UOBJ))
		e = cudaErrorInvalidValue;
	else if (qc_urefs_add(&g->urefs, o, count))
		e = cudaErrorMemoryAllocation;
	else if (!(flags & cudaGraphUserObjectMove))
		o->refs += count; /* moved: the caller's references become the graph's */
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
		return cudaErrorInvalidValue; /* not the graph's to release */
	if (!(g->urefs.v[i].count -= count))
		g->urefs.v[i] = g->urefs.v[--g->urefs.n];
	qc_uobj_put(o, count);
	return cudaSuccess;
}
