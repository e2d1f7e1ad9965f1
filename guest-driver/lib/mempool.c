/* SPDX-License-Identifier: MIT */
/*
 * Memory pools as objects: each device's default and current pool, pools
 * made with cudaMemPoolCreate, their attributes and access. The blocks they
 * hand out, and how they are reused and released, are pool.c's.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "pool_impl.h"

/* ------------------------------------------------------- device's pools */

/* The default (dflt) or current pool of a device. */
static cudaError_t device_pool(cudaMemPool_t *memPool, int device, int dflt)
{
	struct qc_pool *p;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_pool_check_device(device);
	if (e == cudaSuccess && !memPool)
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&qc_pool_lock);
	p = dflt ? qc_pool_default_of(device) : qc_pool_current_of(device);
	pthread_mutex_unlock(&qc_pool_lock);
	if (!p)
		return cudaErrorMemoryAllocation;
	*memPool = (cudaMemPool_t)p;
	return cudaSuccess;
}

static cudaError_t set_device_pool(int device, cudaMemPool_t memPool)
{
	struct qc_pool *p;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_pool_check_device(device);
	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_find(memPool);
	/* The pool must be of that device, and its own (an imported one
	 * makes no allocations). */
	if (p && !p->imported && p->props.location.type == cudaMemLocationTypeDevice && p->props.location.id == device)
		qc_current_pool[device] = p->is_default ? NULL : p;
	else
		e = cudaErrorInvalidValue;
	pthread_mutex_unlock(&qc_pool_lock);
	return e;
}

QC_API cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *memPool, int device)
{
	return qc_ret(device_pool(memPool, device, 1));
}

/* A device that does not exist is an invalid value here, not an invalid
 * device as for the default pool (what CUDA 13 answers, on the H100). */
QC_API cudaError_t cudaDeviceGetMemPool(cudaMemPool_t *memPool, int device)
{
	cudaError_t e = device_pool(memPool, device, 0);

	return qc_ret(e == cudaErrorInvalidDevice ? cudaErrorInvalidValue : e);
}

QC_API cudaError_t cudaDeviceSetMemPool(int device, cudaMemPool_t memPool)
{
	return qc_ret(set_device_pool(device, memPool));
}

/* CUDA 13's location forms: a device's pinned memory is what qcuda serves;
 * host, host NUMA and managed pools are not. */
static cudaError_t location_device(const struct cudaMemLocation *loc, enum cudaMemAllocationType type, int *device)
{
	if (!loc)
		return cudaErrorInvalidValue;
	if (type == cudaMemAllocationTypeManaged)
		return loc->type == cudaMemLocationTypeDevice || loc->type == cudaMemLocationTypeHost ||
				       loc->type == cudaMemLocationTypeHostNuma || loc->type == cudaMemLocationTypeNone
			       ? cudaErrorNotSupported
			       : cudaErrorInvalidValue;
	if (type != cudaMemAllocationTypePinned)
		return cudaErrorInvalidValue;
	if (loc->type == cudaMemLocationTypeHost || loc->type == cudaMemLocationTypeHostNuma)
		return cudaErrorNotSupported;
	if (loc->type != cudaMemLocationTypeDevice)
		return cudaErrorInvalidValue;
	*device = loc->id;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemGetDefaultMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
					    enum cudaMemAllocationType type)
{
	int device = 0;
	cudaError_t e = location_device(location, type, &device);

	return qc_ret(e != cudaSuccess ? e : device_pool(memPool, device, 1));
}

QC_API cudaError_t cudaMemGetMemPool(cudaMemPool_t *memPool, struct cudaMemLocation *location,
				     enum cudaMemAllocationType type)
{
	int device = 0;
	cudaError_t e = location_device(location, type, &device);

	return qc_ret(e != cudaSuccess ? e : device_pool(memPool, device, 0));
}

QC_API cudaError_t cudaMemSetMemPool(struct cudaMemLocation *location, enum cudaMemAllocationType type,
				     cudaMemPool_t memPool)
{
	int device = 0;
	cudaError_t e = location_device(location, type, &device);

	return qc_ret(e != cudaSuccess ? e : set_device_pool(device, memPool));
}

/* ------------------------------------------------------- created pools */

static int all_zero(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

static cudaError_t pool_create(cudaMemPool_t *memPool, const struct cudaMemPoolProps *props)
{
	struct qc_pool *p;
	cudaError_t e = qc_ready_args(memPool && props);

	if (e != cudaSuccess)
		return e;
	if (props->allocType == cudaMemAllocationTypeManaged || props->location.type == cudaMemLocationTypeHost ||
	    props->location.type == cudaMemLocationTypeHostNuma)
		return cudaErrorNotSupported;
	if (props->allocType != cudaMemAllocationTypePinned || props->location.type != cudaMemLocationTypeDevice ||
	    props->win32SecurityAttributes || !all_zero(props->reserved, sizeof(props->reserved)))
		return cudaErrorInvalidValue;
	if (qc_pool_check_device(props->location.id) != cudaSuccess)
		return cudaErrorInvalidDevice;
	/* Exported as a file descriptor between the processes of the VM
	 * (poolipc.c); Windows and fabric handles are not served. */
	if (props->handleTypes != cudaMemHandleTypeNone && props->handleTypes != cudaMemHandleTypePosixFileDescriptor)
		return cudaErrorNotSupported;
	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_new(props->location.id);
	if (p) {
		p->props.maxSize = props->maxSize;
		p->props.usage = props->usage;
		p->props.handleTypes = props->handleTypes;
		if (p->props.handleTypes != cudaMemHandleTypeNone && qc_pool_make_id(p)) {
			p->destroyed = 1;
			qc_pool_maybe_free(p);
			p = NULL;
		}
	}
	pthread_mutex_unlock(&qc_pool_lock);
	if (!p)
		return cudaErrorMemoryAllocation;
	*memPool = (cudaMemPool_t)p;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolCreate(cudaMemPool_t *memPool, const struct cudaMemPoolProps *poolProps)
{
	return qc_ret(pool_create(memPool, poolProps));
}

/* Its idle memory goes now; what is still allocated when it is freed. */
static cudaError_t pool_destroy(cudaMemPool_t memPool)
{
	struct block *chain = NULL;
	struct qc_pool *p;
	int device;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_find(memPool);
	if (!p || p->is_default) { /* a device's default pool stays */
		pthread_mutex_unlock(&qc_pool_lock);
		return cudaErrorInvalidValue;
	}
	device = p->props.location.id;
	if (device >= 0 && device < QC_MAX_DEVICES && qc_current_pool[device] == p)
		qc_current_pool[device] = NULL;
	p->destroyed = 1;
	qc_pool_drop_stale(p);
	qc_pool_take_idle(p, 0, &chain);
	qc_pool_maybe_free(p);
	pthread_mutex_unlock(&qc_pool_lock);
	return qc_pool_release_chain(chain);
}

QC_API cudaError_t cudaMemPoolDestroy(cudaMemPool_t memPool)
{
	return qc_ret(pool_destroy(memPool));
}

/* --------------------------------------------------------- attributes */

/* qc_ready_args(args_ok), then memPool's pool in *out with its stale
 * blocks dropped, the pool lock held for the caller to release; a pool
 * not found is cudaErrorInvalidValue, the lock not held. */
static cudaError_t lock_pool(cudaMemPool_t memPool, int args_ok, struct qc_pool **out)
{
	cudaError_t e = qc_ready_args(args_ok);

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&qc_pool_lock);
	*out = qc_pool_find(memPool);
	if (!*out) {
		pthread_mutex_unlock(&qc_pool_lock);
		return cudaErrorInvalidValue;
	}
	qc_pool_drop_stale(*out);
	return cudaSuccess;
}

static cudaError_t pool_trim(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	struct block *chain = NULL;
	struct qc_pool *p;
	cudaError_t e = lock_pool(memPool, 1, &p);

	if (e != cudaSuccess)
		return e;
	qc_pool_take_idle(p, minBytesToKeep, &chain);
	pthread_mutex_unlock(&qc_pool_lock);
	return qc_pool_release_chain(chain);
}

QC_API cudaError_t cudaMemPoolTrimTo(cudaMemPool_t memPool, size_t minBytesToKeep)
{
	return qc_ret(pool_trim(memPool, minBytesToKeep));
}

/* Sets attr of p (pool lock held); lowering the threshold releases now. */
static cudaError_t set_attr(struct qc_pool *p, enum cudaMemPoolAttr attr, const void *value, struct block **chain)
{
	uint64_t v64;

	switch (attr) {
	case cudaMemPoolReuseFollowEventDependencies:
	case cudaMemPoolReuseAllowOpportunistic:
	case cudaMemPoolReuseAllowInternalDependencies:
		p->reuse[attr - cudaMemPoolReuseFollowEventDependencies] = *(const int *)value != 0;
		return cudaSuccess;
	case cudaMemPoolAttrReleaseThreshold:
		memcpy(&p->threshold, value, sizeof(p->threshold));
		qc_pool_take_idle(p, p->threshold, chain);
		return cudaSuccess;
	case cudaMemPoolAttrReservedMemHigh:
	case cudaMemPoolAttrUsedMemHigh:
		/* Only 0, which resets the mark to the current value. */
		memcpy(&v64, value, sizeof(v64));
		if (v64)
			return cudaErrorInvalidValue;
		if (attr == cudaMemPoolAttrUsedMemHigh)
			p->used_high = p->used;
		else
			p->reserved_high = p->reserved;
		return cudaSuccess;
	default: /* the Current ones are read-only */
		return cudaErrorInvalidValue;
	}
}

/* The 64-bit attributes (cuuint64_t), each one of the pool's counters. */
static const struct {
	enum cudaMemPoolAttr attr;
	size_t offset; /* of the uint64_t in struct qc_pool */
} counters[] = {
	{ cudaMemPoolAttrReleaseThreshold, offsetof(struct qc_pool, threshold) },
	{ cudaMemPoolAttrReservedMemCurrent, offsetof(struct qc_pool, reserved) },
	{ cudaMemPoolAttrReservedMemHigh, offsetof(struct qc_pool, reserved_high) },
	{ cudaMemPoolAttrUsedMemCurrent, offsetof(struct qc_pool, used) },
	{ cudaMemPoolAttrUsedMemHigh, offsetof(struct qc_pool, used_high) },
};

static cudaError_t get_attr(struct qc_pool *p, enum cudaMemPoolAttr attr, void *value)
{
	if (attr >= cudaMemPoolReuseFollowEventDependencies && attr <= cudaMemPoolReuseAllowInternalDependencies) {
		*(int *)value = p->reuse[attr - cudaMemPoolReuseFollowEventDependencies];
		return cudaSuccess;
	}
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		if (counters[i].attr == attr) {
			memcpy(value, (const char *)p + counters[i].offset, sizeof(uint64_t));
			return cudaSuccess;
		}
	return cudaErrorInvalidValue;
}

static cudaError_t pool_attr(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value, int set)
{
	struct block *chain = NULL;
	struct qc_pool *p;
	cudaError_t e = lock_pool(memPool, value != NULL, &p);

	if (e != cudaSuccess)
		return e;
	e = set ? set_attr(p, attr, value, &chain) : get_attr(p, attr, value);
	pthread_mutex_unlock(&qc_pool_lock);
	qc_pool_release_chain(chain);
	return e;
}

QC_API cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	return qc_ret(pool_attr(memPool, attr, value, 1));
}

QC_API cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t memPool, enum cudaMemPoolAttr attr, void *value)
{
	return qc_ret(pool_attr(memPool, attr, value, 0));
}

/* ------------------------------------------------------------- access */

/* The device a pool lives on (-1 if p is not a pool). */
static int pool_device(cudaMemPool_t memPool)
{
	struct qc_pool *p;
	int device;

	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_find(memPool);
	device = p ? p->props.location.id : -1;
	pthread_mutex_unlock(&qc_pool_lock);
	return device;
}

/* With one device per pool and no peers served, the pool's own device has
 * read-write access, always; it cannot be taken away (as natively) and no
 * other device can be given any. */
static cudaError_t pool_set_access(cudaMemPool_t memPool, const struct cudaMemAccessDesc *desc, size_t count)
{
	int device;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	device = pool_device(memPool);
	if (device < 0 || (count && !desc))
		return cudaErrorInvalidValue;
	for (size_t i = 0; i < count; i++) {
		if (desc[i].location.type != cudaMemLocationTypeDevice)
			return cudaErrorInvalidValue;
		if (qc_pool_check_device(desc[i].location.id) != cudaSuccess)
			return cudaErrorInvalidDevice;
		if (desc[i].location.id != device)
			return cudaErrorInvalidDevice; /* a peer: not served */
		if (desc[i].flags != cudaMemAccessFlagsProtReadWrite)
			return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolSetAccess(cudaMemPool_t memPool, const struct cudaMemAccessDesc *descList, size_t count)
{
	return qc_ret(pool_set_access(memPool, descList, count));
}

static cudaError_t pool_get_access(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
				   struct cudaMemLocation *location)
{
	int device;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	device = pool_device(memPool);
	if (device < 0 || !flags || !location || location->type != cudaMemLocationTypeDevice)
		return cudaErrorInvalidValue;
	if (qc_pool_check_device(location->id) != cudaSuccess)
		return cudaErrorInvalidDevice;
	*flags = location->id == device ? cudaMemAccessFlagsProtReadWrite : cudaMemAccessFlagsProtNone;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolGetAccess(enum cudaMemAccessFlags *flags, cudaMemPool_t memPool,
					struct cudaMemLocation *location)
{
	return qc_ret(pool_get_access(flags, memPool, location));
}
