/* SPDX-License-Identifier: MIT */
/*
 * Contexts: each device's primary context, contexts cuCtxCreate makes, the
 * per-thread stack of current contexts, and context-local storage (the
 * runtime keeps its per-context state there).
 *
 * The session has one backend context per device, and every context of a
 * device here uses it: a created context is a separate handle with its own
 * flags and storage, not a separate address space (allocations made under
 * one are visible under another of the same device). What CUDA programs do
 * with created contexts (make one, work in it, destroy it) behaves as
 * natively; destroying one does not free what was allocated under it.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuDevicePrimaryCtxRelease
#undef cuDevicePrimaryCtxSetFlags
#undef cuDevicePrimaryCtxReset

struct cls_entry {
	void *key, *value;
	void (*dtor)(CUcontext, void *, void *);
	struct cls_entry *next;
};

struct CUctx_st {
	int device;
	int primary;
	unsigned int flags;
	int refs; /* primary: retains; active while > 0 */
	unsigned long long id;
	pthread_mutex_t lock; /* refs, flags, storage */
	struct cls_entry *storage;
	struct CUctx_st *next; /* created contexts */
};

int cu_initialized;

static struct CUctx_st primaries[QC_MAX_DEVICES];
static pthread_once_t primaries_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t created_lock = PTHREAD_MUTEX_INITIALIZER;
static struct CUctx_st *created;
static atomic_ullong next_id = 1;

#define STACK_DEPTH 32
static __thread CUcontext stack[STACK_DEPTH];
static __thread int depth;

static void primaries_init(void)
{
	for (int i = 0; i < QC_MAX_DEVICES; i++) {
		primaries[i].device = i;
		primaries[i].primary = 1;
		primaries[i].id = atomic_fetch_add(&next_id, 1);
		pthread_mutex_init(&primaries[i].lock, NULL);
	}
}

static CUcontext current(void)
{
	return depth ? stack[depth - 1] : NULL;
}

/* A context this library made and has not destroyed. */
static int ctx_valid(CUcontext c)
{
	int ok = 0;

	if (!c)
		return 0;
	if (c >= primaries && c < primaries + qc.device_count)
		return 1;
	pthread_mutex_lock(&created_lock);
	for (struct CUctx_st *p = created; p && !ok; p = p->next)
		ok = p == c;
	pthread_mutex_unlock(&created_lock);
	return ok;
}

static void make_current(CUcontext c)
{
	if (c)
		qc_set_thread_device(c->device);
}

CUresult cu_enter(void)
{
	CUcontext c;

	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	c = current();
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	make_current(c);
	return CUDA_SUCCESS;
}

/* The context a call names, or the current one for NULL. */
static CUresult ctx_or_current(CUcontext ctx, CUcontext *out)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx)
		ctx = current();
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = ctx;
	return CUDA_SUCCESS;
}

CUresult cu_primary_ctx(CUdevice dev, CUcontext *pctx)
{
	CUresult r = cu_device_check(dev);

	if (r != CUDA_SUCCESS)
		return r;
	pthread_once(&primaries_once, primaries_init);
	*pctx = &primaries[dev];
	return CUDA_SUCCESS;
}

CUcontext cu_device_ctx(int device)
{
	CUcontext c = current(), p = NULL;

	if (c && c->device == device)
		return c;
	return cu_primary_ctx(device, &p) == CUDA_SUCCESS ? p : NULL;
}

/* A stream's context: that of the device it was made on (the NULL stream's
 * is the current context). */
static CUresult stream_ctx(CUstream hStream, int ptds, CUcontext *pctx)
{
	int device = -1;
	CUresult r;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	CU_ENTER(r);
	/* The _ptsz entry points' NULL stream is the per-thread one. */
	r = cu_result(cudaStreamGetDevice(!hStream && ptds ? cudaStreamPerThread : (cudaStream_t)hStream, &device));
	if (r == CUDA_SUCCESS)
		*pctx = cu_device_ctx(device);
	return r;
}

CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	return stream_ctx(hStream, 0, pctx);
}

CUresult cuStreamGetCtx_ptsz(CUstream hStream, CUcontext *pctx)
{
	return stream_ctx(hStream, 1, pctx);
}

/* No green contexts here: *pGreenCtx is NULL, as for a stream of a plain context. */
CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	if (pGreenCtx)
		*pGreenCtx = NULL;
	return stream_ctx(hStream, 0, pCtx);
}

CUresult cuStreamGetCtx_v2_ptsz(CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	if (pGreenCtx)
		*pGreenCtx = NULL;
	return stream_ctx(hStream, 1, pCtx);
}

/* ------------------------------------------------------- primary contexts */

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_primary_ctx(dev, pctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&(*pctx)->lock);
	(*pctx)->refs++;
	pthread_mutex_unlock(&(*pctx)->lock);
	return CUDA_SUCCESS;
}

static CUresult primary_release(CUdevice dev)
{
	CUcontext c;
	CUresult r = cu_primary_ctx(dev, &c);

	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&c->lock);
	if (c->refs == 0)
		r = CUDA_ERROR_INVALID_CONTEXT;
	else
		c->refs--;
	pthread_mutex_unlock(&c->lock);
	return r;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return primary_release(dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	return primary_release(dev);
}

static CUresult primary_set_flags(CUdevice dev, unsigned int flags)
{
	CUcontext c;
	CUresult r = cu_primary_ctx(dev, &c);

	if (r != CUDA_SUCCESS)
		return r;
	/* Scheduling (0-4), map host (8), resize local memory (0x10),
	 * coredump/sync-memops bits (0x20, 0x80); the rest is invalid. */
	if (flags & ~0xbfu)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&c->lock);
	c->flags = flags;
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return primary_set_flags(dev, flags);
}

CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	return primary_set_flags(dev, flags);
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUcontext c;
	CUresult r;

	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_primary_ctx(dev, &c);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&c->lock);
	*flags = c->flags;
	*active = c->refs > 0;
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

/* Runs and drops a context's storage destructors (the runtime frees its
 * per-context state in them). */
static void cls_clear(CUcontext c)
{
	struct cls_entry *e;

	pthread_mutex_lock(&c->lock);
	e = c->storage;
	c->storage = NULL;
	pthread_mutex_unlock(&c->lock);
	while (e) {
		struct cls_entry *next = e->next;

		if (e->dtor)
			e->dtor(c, e->key, e->value);
		free(e);
		e = next;
	}
}

/* Frees everything of the device's context in the backend (as
 * cudaDeviceReset, which is this call natively). */
static CUresult primary_reset(CUdevice dev)
{
	CUcontext c;
	CUresult r = cu_primary_ctx(dev, &c);
	int prev = qc_current_device();

	if (r != CUDA_SUCCESS)
		return r;
	cls_clear(c);
	qc_set_thread_device(dev);
	r = cu_result(cudaDeviceReset());
	qc_set_thread_device(prev);
	pthread_mutex_lock(&c->lock);
	c->refs = 0;
	c->flags = 0;
	pthread_mutex_unlock(&c->lock);
	return r;
}

CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return primary_reset(dev);
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	return primary_reset(dev);
}

/* ------------------------------------------------------ created contexts */

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	struct CUctx_st *c;
	CUresult r;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_device_check(dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (depth >= STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->device = dev;
	c->flags = flags;
	c->refs = 1;
	c->id = atomic_fetch_add(&next_id, 1);
	pthread_mutex_init(&c->lock, NULL);
	/* The device's backend context is made now, as natively. */
	qc_set_thread_device(dev);
	r = cu_result(cudaSetDevice(dev));
	if (r != CUDA_SUCCESS) {
		free(c);
		return r;
	}
	pthread_mutex_lock(&created_lock);
	c->next = created;
	created = c;
	pthread_mutex_unlock(&created_lock);
	stack[depth++] = c;
	*pctx = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
			CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags,
			CUdevice dev)
{
	if (numParams > 0) /* execution affinity (MPS, green contexts) */
		return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
	return ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags, CUdevice dev)
{
	if (ctxCreateParams && (ctxCreateParams->execAffinityParams || ctxCreateParams->cigParams))
		return CUDA_ERROR_NOT_SUPPORTED;
	return ctx_create(pctx, flags, dev);
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	struct CUctx_st **pp;
	int found = 0;

	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx || ctx->primary || !ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&created_lock);
	for (pp = &created; *pp; pp = &(*pp)->next) {
		if (*pp == ctx) {
			*pp = ctx->next;
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&created_lock);
	if (!found)
		return CUDA_ERROR_INVALID_CONTEXT;
	/* Natively work in it is finished first. */
	qc_set_thread_device(ctx->device);
	cudaDeviceSynchronize();
	/* Unbound from the calling thread (other threads' stacks cannot be
	 * reached: a destroyed context there fails ctx_valid from then on). */
	for (int i = 0; i < depth; i++)
		if (stack[i] == ctx)
			stack[i] = NULL;
	while (depth && !stack[depth - 1])
		depth--;
	cls_clear(ctx);
	free(ctx);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------ current context */

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*pctx = current();
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && !ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx) {
		if (depth)
			depth--;
		return CUDA_SUCCESS;
	}
	if (depth)
		stack[depth - 1] = ctx;
	else
		stack[depth++] = ctx;
	make_current(ctx);
	return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (depth >= STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	stack[depth++] = ctx;
	make_current(ctx);
	return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	depth--;
	if (pctx)
		*pctx = stack[depth];
	make_current(current());
	return CUDA_SUCCESS;
}

static CUresult ctx_device(CUdevice *device, CUcontext ctx)
{
	CUresult r;

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	r = ctx_or_current(ctx, &ctx);
	if (r == CUDA_SUCCESS)
		*device = ctx->device;
	return r;
}

/* Peer access of the current context to peerContext's device's memory
 * (the backend keeps one context per device for the process). */
CUresult cuCtxEnablePeerAccess(CUcontext peerContext, unsigned int Flags)
{
	CUresult r;

	CU_ENTER(r);
	if (!ctx_valid(peerContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cu_result(cudaDeviceEnablePeerAccess(peerContext->device, Flags));
}

CUresult cuCtxDisablePeerAccess(CUcontext peerContext)
{
	CUresult r;

	CU_ENTER(r);
	if (!ctx_valid(peerContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cu_result(cudaDeviceDisablePeerAccess(peerContext->device));
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	return ctx_device(device, NULL);
}

CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	return ctx_device(device, ctx);
}

CUresult cuCtxGetFlags(unsigned int *flags)
{
	CUcontext c;
	CUresult r;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = ctx_or_current(NULL, &c);
	/* A primary context always maps host memory and says so (the runtime
	 * reports cudaDeviceMapHost from it); a created one reports its flags. */
	if (r == CUDA_SUCCESS)
		*flags = c->flags | (c->primary ? CU_CTX_MAP_HOST : 0);
	return r;
}

CUresult cuCtxSetFlags(unsigned int flags)
{
	CUcontext c;
	CUresult r = ctx_or_current(NULL, &c);

	if (r == CUDA_SUCCESS)
		c->flags = flags;
	return r;
}

CUresult cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	CUresult r;

	if (!ctxId)
		return CUDA_ERROR_INVALID_VALUE;
	r = ctx_or_current(ctx, &ctx);
	if (r == CUDA_SUCCESS)
		*ctxId = ctx->id;
	return r;
}

CUresult cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUresult r;

	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	r = ctx_or_current(ctx, &ctx);
	if (r == CUDA_SUCCESS)
		*version = 3020; /* every context since the _v2 ABI reports this */
	return r;
}

/* --------------------------------------------------- per-context calls */

static CUresult ctx_sync(CUcontext ctx)
{
	CUresult r = ctx_or_current(ctx, &ctx);
	int prev = qc_current_device();

	if (r != CUDA_SUCCESS)
		return r;
	qc_set_thread_device(ctx->device);
	r = cu_result(cudaDeviceSynchronize());
	qc_set_thread_device(prev);
	return r;
}

CUresult cuCtxSynchronize(void)
{
	return ctx_sync(NULL);
}

CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	return ctx_sync(ctx);
}

/* Profiling is the host's business: nothing to start or stop here. */
CUresult cuProfilerStart(void)
{
	return cu_enter();
}

CUresult cuProfilerStop(void)
{
	return cu_enter();
}

/* The runtime's limits, and the driver's own for CIG contexts (created
 * with graphics interop, which qcuda does not serve): a context here is
 * never one, so CU_LIMIT_CIG_ENABLED is 0, as NVIDIA's driver answers for
 * such a context (traced, docs/tracing.md). Refused as a limit the runtime
 * does not name, PyTorch asked it again before every launch: 16,897 round
 * trips of an fp16 LLM decode's 47,445 (H100). */
CUresult cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	CUresult r;

	if (limit != CU_LIMIT_CIG_ENABLED)
		CU_RUN(cudaDeviceGetLimit(pvalue, (enum cudaLimit)limit));
	r = cu_enter();
	if (r == CUDA_SUCCESS && !pvalue)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*pvalue = 0;
	return r;
}

/* Cache and shared memory configurations are hints: kept, never refused.
 * One getter and one setter serve both (their enums are ints). */
static __thread CUfunc_cache cache_config;

_Static_assert(sizeof(CUfunc_cache) == sizeof(int) && sizeof(CUsharedconfig) == sizeof(int),
	       "the hints' enums are ints");

static CUresult hint_get(void *out, int value)
{
	CUresult r = cu_enter();

	if (r == CUDA_SUCCESS && !out)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		memcpy(out, &value, sizeof(value));
	return r;
}

static CUresult hint_set(unsigned int config, unsigned int max)
{
	CUresult r = cu_enter();

	if (r == CUDA_SUCCESS && config > max)
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

CUresult cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	return hint_get(pconfig, cache_config);
}

CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	CUresult r = hint_set((unsigned int)config, CU_FUNC_CACHE_PREFER_EQUAL);

	if (r == CUDA_SUCCESS)
		cache_config = config;
	return r;
}

/* Bank sizes are fixed (four bytes) on every device CUDA 13 runs: that is
 * the answer, and a valid set does nothing (as the runtime layer's
 * cudaDevice*SharedMemConfig). */
CUresult cuCtxGetSharedMemConfig(CUsharedconfig *pConfig)
{
	return hint_get(pConfig, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
}

CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	return hint_set((unsigned int)config, CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE);
}

/* ------------------------------------------------ context-local storage */

CUresult cu_cls_put(CUcontext ctx, void *key, void *value, void (*dtor)(CUcontext, void *, void *))
{
	struct cls_entry *e;
	CUresult r = ctx_or_current(ctx, &ctx);

	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&ctx->lock);
	for (e = ctx->storage; e; e = e->next)
		if (e->key == key)
			break;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e) {
			pthread_mutex_unlock(&ctx->lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		e->key = key;
		e->next = ctx->storage;
		ctx->storage = e;
	}
	e->value = value;
	e->dtor = dtor;
	pthread_mutex_unlock(&ctx->lock);
	return CUDA_SUCCESS;
}

CUresult cu_cls_delete(CUcontext ctx, void *key)
{
	struct cls_entry **pp, *e = NULL;
	CUresult r = ctx_or_current(ctx, &ctx);

	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&ctx->lock);
	for (pp = &ctx->storage; *pp; pp = &(*pp)->next) {
		if ((*pp)->key == key) {
			e = *pp;
			*pp = e->next;
			break;
		}
	}
	pthread_mutex_unlock(&ctx->lock);
	free(e);
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cu_cls_get(void **value, CUcontext ctx, void *key)
{
	struct cls_entry *e;
	CUresult r;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	r = ctx_or_current(ctx, &ctx);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&ctx->lock);
	for (e = ctx->storage; e; e = e->next)
		if (e->key == key)
			break;
	if (e)
		*value = e->value;
	pthread_mutex_unlock(&ctx->lock);
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
