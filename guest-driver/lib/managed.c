/* SPDX-License-Identifier: MIT */
/*
 * Managed memory hints: cudaMemPrefetchAsync, cudaMemPrefetchBatchAsync,
 * cudaMemAdvise, cudaMemRangeGetAttribute(s), cudaStreamAttachMemAsync.
 *
 * Managed memory in a qcuda guest is guest memory that the CPU and the GPU
 * both address where it lies (memory.c): nothing ever migrates, so
 * prefetches, advice and stream attachment have nothing to do and make no
 * device call. They check their arguments as CUDA 13 does on one GPU with
 * concurrentManagedAccess (which is what this memory behaves like, whatever
 * the provider reports), and the advice and last prefetch location of every
 * page are kept, so that cudaMemRangeGetAttribute(s) answer what the program
 * asked for. As in CUDA, a range stands for every CPU page it touches, and
 * the last prefetch location is recorded at the call (CUDA's answer says
 * nothing about whether the prefetch has run either).
 *
 * An allocation's record (struct hints, one entry per page) is made at its
 * first advice or prefetch and hangs on the allocation's region, one
 * malloc'd block that region.c frees with it. Locking: qc_mem_managed holds the
 * maps' read lock around our callbacks, so several threads can be in them at
 * once on one allocation: hints_lock orders them (maps first, then
 * hints_lock).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qc_os.h"
#include "qcrt.h"

/* A location as the range attributes report it. */
struct where {
	int type; /* enum cudaMemLocationType; cudaMemLocationTypeInvalid: none */
	int id; /* device ordinal, NUMA node, cudaCpuDeviceId (host) or
			 * cudaInvalidDeviceId (none) */
};

static const struct where none = { cudaMemLocationTypeInvalid, cudaInvalidDeviceId };

struct page_hint {
	uint64_t accessed_by; /* bit d: cudaMemAdviseSetAccessedBy device d */
	int32_t pref_id, last_id;
	uint8_t pref_type, last_type; /* cudaMemLocationType; 0: none */
	uint8_t read_mostly;
	uint8_t host_access; /* cudaMemAdviseSetAccessedBy the host */
};

struct hints {
	size_t pages;
	struct page_hint page[];
};

/* What one call works on (the arguments of qc_mem_managed's callbacks). */
struct job {
	const void *p;
	size_t n;
	int advice;
	struct where where;
	struct summary *out;
};

/* What cudaMemRangeGetAttribute(s) report: the pages of a range together. */
struct summary {
	int read_mostly;
	struct where pref, last;
	uint64_t accessed_by;
	int host_access;
};

static pthread_mutex_t hints_lock = PTHREAD_MUTEX_INITIALIZER;

_Static_assert(sizeof(enum cudaMemLocationType) == sizeof(int32_t), "location types are 4 bytes");

/* ------------------------------------------------------------- locations */

static int numa_node_exists(int id)
{
	char path[64];

	if (id < 0)
		return 0;
	snprintf(path, sizeof(path), "/sys/devices/system/node/node%d", id);
	if (access(path, F_OK) == 0)
		return 1;
	/* A kernel without NUMA (or no sysfs): all memory is node 0. */
	return id == 0 && access("/sys/devices/system/node", F_OK) != 0;
}

static int current_numa_node(void)
{
	return qc_os_numa_node();
}

/*
 * A location argument: a device (a valid ordinal, else
 * cudaErrorInvalidDevice) or the host (its id ignored); with numa_ok also a
 * host NUMA node (one that exists) or the calling thread's node (its id
 * ignored, the node recorded). Anything else: cudaErrorInvalidValue.
 */
static cudaError_t check_location(struct cudaMemLocation loc, int numa_ok, struct where *w)
{
	switch ((int)loc.type) {
	case cudaMemLocationTypeDevice:
		if (loc.id < 0 || loc.id >= qc.device_count)
			return cudaErrorInvalidDevice;
		*w = (struct where){ cudaMemLocationTypeDevice, loc.id };
		return cudaSuccess;
	case cudaMemLocationTypeHost:
		*w = (struct where){ cudaMemLocationTypeHost, cudaCpuDeviceId };
		return cudaSuccess;
	case cudaMemLocationTypeHostNuma:
		if (!numa_ok || !numa_node_exists(loc.id))
			return cudaErrorInvalidValue;
		*w = (struct where){ cudaMemLocationTypeHostNuma, loc.id };
		return cudaSuccess;
	case cudaMemLocationTypeHostNumaCurrent:
		if (!numa_ok)
			return cudaErrorInvalidValue;
		/* Reported as this type (measured natively), with the node. */
		*w = (struct where){ cudaMemLocationTypeHostNumaCurrent, current_numa_node() };
		return cudaSuccess;
	default:
		return cudaErrorInvalidValue;
	}
}

static struct where where_of(uint8_t type, int32_t id)
{
	return type ? (struct where){ type, id } : none;
}

static int same_where(struct where a, struct where b)
{
	return a.type == b.type && a.id == b.id;
}

/* cudaMemRangeAttributePreferredLocation / LastPrefetchLocation: a device,
 * cudaCpuDeviceId for any host location, else cudaInvalidDeviceId. */
static int legacy_id(struct where w)
{
	if (w.type == cudaMemLocationTypeDevice)
		return w.id;
	return w.type == cudaMemLocationTypeInvalid ? cudaInvalidDeviceId : cudaCpuDeviceId;
}

/* --------------------------------------------------------- page records */

static size_t page_bytes(void)
{
	return qc_os_page_size();
}

/* The pages [*first, *end) of the allocation at start that the job's range
 * touches (qc_mem_managed checked that the range is inside it). */
static void job_pages(const struct job *j, uint64_t start, size_t *first, size_t *end)
{
	uint64_t off = (uintptr_t)j->p - start;

	*first = off / page_bytes();
	*end = (off + j->n - 1) / page_bytes() + 1;
}

/* The allocation's record, made on first use; hints_lock held. */
static struct hints *record(void **slot, uint64_t size)
{
	size_t pages = (size + page_bytes() - 1) / page_bytes();
	struct hints *h = *slot;

	if (!h) {
		h = calloc(1, sizeof(*h) + pages * sizeof(h->page[0]));
		if (h)
			h->pages = pages;
		*slot = h;
	}
	return h;
}

/* qc_mem_managed callback: the range is managed memory, nothing more. */
static cudaError_t is_managed(void **slot, uint64_t start, uint64_t size, void *arg)
{
	return cudaSuccess;
}

/* The part of a qc_mem_managed callback that notes a hint: fn on each of
 * j's pages in the record at slot (made if need be), under hints_lock. */
static cudaError_t each_page(void **slot, uint64_t start, uint64_t size, const struct job *j,
			     void (*fn)(struct page_hint *pg, const struct job *j))
{
	struct hints *h;
	size_t first, end;

	job_pages(j, start, &first, &end);
	pthread_mutex_lock(&hints_lock);
	h = record(slot, size);
	for (size_t i = first; h && i < end; i++)
		fn(&h->page[i], j);
	pthread_mutex_unlock(&hints_lock);
	return h ? cudaSuccess : cudaErrorMemoryAllocation;
}

static void prefetch_page(struct page_hint *pg, const struct job *j)
{
	pg->last_type = (uint8_t)j->where.type;
	pg->last_id = j->where.id;
}

/* qc_mem_managed callback: records a prefetch to j->where. */
static cudaError_t note_prefetch(void **slot, uint64_t start, uint64_t size, void *arg)
{
	return each_page(slot, start, size, arg, prefetch_page);
}

static void set_accessed_by(struct page_hint *pg, struct where w, int on)
{
	uint64_t bit = w.type == cudaMemLocationTypeDevice ? 1ull << w.id : 0;

	if (w.type == cudaMemLocationTypeHost)
		pg->host_access = (uint8_t)on;
	else if (on)
		pg->accessed_by |= bit;
	else
		pg->accessed_by &= ~bit;
}

static void advise_page(struct page_hint *pg, int advice, struct where w)
{
	switch (advice) {
	case cudaMemAdviseSetReadMostly:
		pg->read_mostly = 1;
		break;
	case cudaMemAdviseUnsetReadMostly:
		pg->read_mostly = 0;
		break;
	case cudaMemAdviseSetPreferredLocation:
		pg->pref_type = (uint8_t)w.type;
		pg->pref_id = w.id;
		break;
	case cudaMemAdviseUnsetPreferredLocation:
		pg->pref_type = cudaMemLocationTypeInvalid;
		pg->pref_id = cudaInvalidDeviceId;
		break;
	case cudaMemAdviseSetAccessedBy:
	case cudaMemAdviseUnsetAccessedBy:
		set_accessed_by(pg, w, advice == cudaMemAdviseSetAccessedBy);
		break;
	}
}

static void advice_page(struct page_hint *pg, const struct job *j)
{
	advise_page(pg, j->advice, j->where);
}

/* qc_mem_managed callback: applies j->advice for j->where. */
static cudaError_t note_advice(void **slot, uint64_t start, uint64_t size, void *arg)
{
	return each_page(slot, start, size, arg, advice_page);
}

/* Adds one page to a summary: a hint holds for the range only if it holds
 * for every page, a location only if every page has the same one. */
static void summarize_page(struct summary *s, const struct page_hint *pg, int first)
{
	struct where pref = where_of(pg->pref_type, pg->pref_id);
	struct where last = where_of(pg->last_type, pg->last_id);

	if (first) {
		*s = (struct summary){ pg->read_mostly, pref, last, pg->accessed_by, pg->host_access };
		return;
	}
	s->read_mostly &= pg->read_mostly;
	s->accessed_by &= pg->accessed_by;
	s->host_access &= pg->host_access;
	if (!same_where(s->pref, pref))
		s->pref = none;
	if (!same_where(s->last, last))
		s->last = none;
}

/* qc_mem_managed callback: the summary of the job's range, in j->out. */
static cudaError_t summarize(void **slot, uint64_t start, uint64_t size, void *arg)
{
	const struct job *j = arg;
	const struct hints *h;
	size_t first, end;

	job_pages(j, start, &first, &end);
	*j->out = (struct summary){ 0, none, none, 0, 0 };
	pthread_mutex_lock(&hints_lock);
	h = *slot;
	for (size_t i = first; h && i < end; i++)
		summarize_page(j->out, &h->page[i], i == first);
	pthread_mutex_unlock(&hints_lock);
	return cudaSuccess;
}

/* -------------------------------------------------------------- prefetch */

static cudaError_t prefetch(const void *p, size_t n, struct cudaMemLocation loc, unsigned int flags,
			    cudaStream_t stream, int ptds)
{
	struct job j = { .p = p, .n = n };
	cudaError_t e = qc_ready_args(flags == 0);

	if (e != cudaSuccess)
		return e;
	e = check_location(loc, 1, &j.where);
	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	return qc_mem_managed(p, n, note_prefetch, &j);
}

QC_API cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location,
					unsigned int flags, cudaStream_t stream)
{
	return qc_ret(prefetch(devPtr, count, location, flags, stream, 0));
}

QC_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count, struct cudaMemLocation location,
					     unsigned int flags, cudaStream_t stream);
QC_API cudaError_t cudaMemPrefetchAsync_ptsz(const void *devPtr, size_t count, struct cudaMemLocation location,
					     unsigned int flags, cudaStream_t stream)
{
	return qc_ret(prefetch(devPtr, count, location, flags, stream, 1));
}

/* A batch's locations: idxs[] starts at 0 and rises strictly, each below
 * count; every location valid (a bad device too is cudaErrorInvalidValue
 * here: measured natively, CUDA 13). */
static cudaError_t check_batch_locations(const struct cudaMemLocation *locs, const size_t *idxs, size_t nlocs,
					 size_t count)
{
	struct where w;

	for (size_t k = 0; k < nlocs; k++) {
		if (k == 0 && idxs[0] != 0)
			return cudaErrorInvalidValue;
		if (k > 0 && (idxs[k] <= idxs[k - 1] || idxs[k] >= count))
			return cudaErrorInvalidValue;
		if (check_location(locs[k], 1, &w) != cudaSuccess)
			return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

static cudaError_t check_batch_ranges(void *const *dptrs, const size_t *sizes, size_t count)
{
	cudaError_t e = cudaSuccess;

	for (size_t i = 0; i < count && e == cudaSuccess; i++)
		e = qc_mem_managed(dptrs[i], sizes[i], is_managed, NULL);
	return e;
}

/* Records a checked batch: operation i goes to the last location k with
 * idxs[k] <= i. */
static cudaError_t note_batch(void *const *dptrs, const size_t *sizes, size_t count, const struct cudaMemLocation *locs,
			      const size_t *idxs, size_t nlocs)
{
	cudaError_t e = cudaSuccess;
	size_t k = 0;

	for (size_t i = 0; i < count && e == cudaSuccess; i++) {
		struct job j = { .p = dptrs[i], .n = sizes[i] };

		while (k + 1 < nlocs && idxs[k + 1] <= i)
			k++;
		e = check_location(locs[k], 1, &j.where);
		if (e == cudaSuccess)
			e = qc_mem_managed(j.p, j.n, note_prefetch, &j);
	}
	return e;
}

/* All checked before anything is recorded: a failing batch changes nothing. */
static cudaError_t prefetch_batch(void **dptrs, size_t *sizes, size_t count, struct cudaMemLocation *locs, size_t *idxs,
				  size_t nlocs, unsigned long long flags, cudaStream_t stream, int ptds)
{
	cudaError_t e = qc_ready_args(dptrs && sizes && count && locs && idxs && nlocs && nlocs <= count && !flags);

	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	/* Documented: "Must not be legacy NULL stream". */
	if (qc_stream(stream, ptds) == QCUDA_STREAM_LEGACY)
		return cudaErrorInvalidValue;
	e = check_batch_locations(locs, idxs, nlocs, count);
	if (e == cudaSuccess)
		e = check_batch_ranges(dptrs, sizes, count);
	if (e == cudaSuccess)
		e = note_batch(dptrs, sizes, count, locs, idxs, nlocs);
	return e;
}

QC_API cudaError_t cudaMemPrefetchBatchAsync(void **dptrs, size_t *sizes, size_t count,
					     struct cudaMemLocation *prefetchLocs, size_t *prefetchLocIdxs,
					     size_t numPrefetchLocs, unsigned long long flags, cudaStream_t stream)
{
	return qc_ret(
		prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream, 0));
}

QC_API cudaError_t cudaMemPrefetchBatchAsync_ptsz(void **dptrs, size_t *sizes, size_t count,
						  struct cudaMemLocation *prefetchLocs, size_t *prefetchLocIdxs,
						  size_t numPrefetchLocs, unsigned long long flags,
						  cudaStream_t stream);
QC_API cudaError_t cudaMemPrefetchBatchAsync_ptsz(void **dptrs, size_t *sizes, size_t count,
						  struct cudaMemLocation *prefetchLocs, size_t *prefetchLocIdxs,
						  size_t numPrefetchLocs, unsigned long long flags, cudaStream_t stream)
{
	return qc_ret(
		prefetch_batch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags, stream, 1));
}

/* ---------------------------------------------------------------- advice */

static cudaError_t advise(const void *p, size_t n, enum cudaMemoryAdvise advice, struct cudaMemLocation loc)
{
	struct job j = { .p = p, .n = n, .advice = (int)advice, .where = none };
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	/* The type is checked even where the location is ignored (measured
	 * natively: read-mostly advice with cudaMemLocationTypeInvalid fails). */
	if ((int)loc.type < cudaMemLocationTypeDevice || (int)loc.type > cudaMemLocationTypeHostNumaCurrent)
		return cudaErrorInvalidValue;
	switch ((int)advice) {
	case cudaMemAdviseSetReadMostly:
	case cudaMemAdviseUnsetReadMostly:
	case cudaMemAdviseUnsetPreferredLocation:
		break; /* the location is ignored */
	case cudaMemAdviseSetPreferredLocation:
		e = check_location(loc, 1, &j.where);
		break;
	case cudaMemAdviseSetAccessedBy:
	case cudaMemAdviseUnsetAccessedBy:
		/* A processor: a device or the host, not a NUMA node. */
		e = check_location(loc, 0, &j.where);
		break;
	default:
		e = cudaErrorInvalidValue;
	}
	/* Unlike cudaMemPrefetchAsync, cudaMemAdvise reports a bad device
	 * ordinal as cudaErrorInvalidValue (measured natively, CUDA 13). */
	if (e == cudaErrorInvalidDevice)
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return e;
	/* A host NUMA node as the preferred location is accepted and changes
	 * nothing the range attributes show: the pages keep the preferred
	 * location they had (measured natively on an H100 host with one NUMA
	 * node; the documentation would report the node). */
	if (advice == cudaMemAdviseSetPreferredLocation && j.where.type != cudaMemLocationTypeDevice &&
	    j.where.type != cudaMemLocationTypeHost)
		return qc_mem_managed(p, n, is_managed, NULL);
	return qc_mem_managed(p, n, note_advice, &j);
}

QC_API cudaError_t cudaMemAdvise(const void *devPtr, size_t count, enum cudaMemoryAdvise advice,
				 struct cudaMemLocation location)
{
	return qc_ret(advise(devPtr, count, advice, location));
}

/* ------------------------------------------------------ range attributes */

/* The data size each attribute takes: one 32-bit value, or for AccessedBy
 * an array of them. */
static int size_ok(enum cudaMemRangeAttribute attr, size_t size)
{
	switch ((int)attr) {
	case cudaMemRangeAttributeReadMostly:
	case cudaMemRangeAttributePreferredLocation:
	case cudaMemRangeAttributeLastPrefetchLocation:
	case cudaMemRangeAttributePreferredLocationType:
	case cudaMemRangeAttributePreferredLocationId:
	case cudaMemRangeAttributeLastPrefetchLocationType:
	case cudaMemRangeAttributeLastPrefetchLocationId:
		return size == sizeof(int32_t);
	case cudaMemRangeAttributeAccessedBy:
		return size > 0 && size % sizeof(int32_t) == 0;
	default:
		return 0;
	}
}

static void put(void *data, size_t i, int32_t v)
{
	memcpy((char *)data + i * sizeof(v), &v, sizeof(v));
}

/* The devices with AccessedBy over the whole range, then the host
 * (cudaCpuDeviceId), then cudaInvalidDeviceId to the end of the array. */
static void put_accessed_by(const struct summary *s, void *data, size_t slots)
{
	size_t i = 0;

	for (int d = 0; d < qc.device_count && i < slots; d++)
		if (s->accessed_by & (1ull << d))
			put(data, i++, d);
	if (s->host_access && i < slots)
		put(data, i++, cudaCpuDeviceId);
	while (i < slots)
		put(data, i++, cudaInvalidDeviceId);
}

/* The attributes that ask for one part of a location, the preferred one
 * or the last prefetch's: a legacy device id, the type or the id. */
enum where_part { LEGACY_ID, WHERE_TYPE, WHERE_ID };
static const struct {
	int attr;
	int last; /* the last prefetch's location, else the preferred one */
	enum where_part part;
} where_attrs[] = {
	{ cudaMemRangeAttributePreferredLocation, 0, LEGACY_ID },
	{ cudaMemRangeAttributePreferredLocationType, 0, WHERE_TYPE },
	{ cudaMemRangeAttributePreferredLocationId, 0, WHERE_ID },
	{ cudaMemRangeAttributeLastPrefetchLocation, 1, LEGACY_ID },
	{ cudaMemRangeAttributeLastPrefetchLocationType, 1, WHERE_TYPE },
	{ cudaMemRangeAttributeLastPrefetchLocationId, 1, WHERE_ID },
};

static int32_t where_part(struct where w, enum where_part part)
{
	return part == LEGACY_ID ? legacy_id(w) : part == WHERE_TYPE ? w.type : w.id;
}

static void answer(const struct summary *s, enum cudaMemRangeAttribute attr, void *data, size_t size)
{
	if (attr == cudaMemRangeAttributeReadMostly)
		put(data, 0, s->read_mostly);
	if (attr == cudaMemRangeAttributeAccessedBy)
		put_accessed_by(s, data, size / sizeof(int32_t));
	for (size_t i = 0; i < sizeof(where_attrs) / sizeof(where_attrs[0]); i++)
		if (where_attrs[i].attr == (int)attr)
			put(data, 0, where_part(where_attrs[i].last ? s->last : s->pref, where_attrs[i].part));
}

static cudaError_t range_summary(const void *p, size_t n, struct summary *s)
{
	struct job j = { .p = p, .n = n, .out = s };

	return qc_mem_managed(p, n, summarize, &j);
}

QC_API cudaError_t cudaMemRangeGetAttribute(void *data, size_t dataSize, enum cudaMemRangeAttribute attribute,
					    const void *devPtr, size_t count)
{
	struct summary s;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (!data || !size_ok(attribute, dataSize)))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = range_summary(devPtr, count, &s);
	if (e == cudaSuccess)
		answer(&s, attribute, data, dataSize);
	return qc_ret(e);
}

/* Every argument is checked before any answer is written. */
QC_API cudaError_t cudaMemRangeGetAttributes(void **data, size_t *dataSizes, enum cudaMemRangeAttribute *attributes,
					     size_t numAttributes, const void *devPtr, size_t count)
{
	struct summary s;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (!data || !dataSizes || !attributes || numAttributes == 0))
		e = cudaErrorInvalidValue;
	for (size_t i = 0; e == cudaSuccess && i < numAttributes; i++)
		if (!data[i] || !size_ok(attributes[i], dataSizes[i]))
			e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = range_summary(devPtr, count, &s);
	for (size_t i = 0; e == cudaSuccess && i < numAttributes; i++)
		answer(&s, attributes[i], data[i], dataSizes[i]);
	return qc_ret(e);
}

/* ----------------------------------------------------- stream attachment */

/* qc_mem_managed callback: the start of the allocation, with a length of 0
 * or its whole size (both mean all of it; measured natively: an interior
 * pointer is refused even with length 0). */
static cudaError_t whole_allocation(void **slot, uint64_t start, uint64_t size, void *arg)
{
	const struct job *j = arg;

	if ((uintptr_t)j->p != start || (j->n && j->n != size))
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

/* The association only limits which streams may use the memory while
 * others run; qcuda's managed memory is usable by all at all times, so
 * there is nothing to record. */
static cudaError_t attach(cudaStream_t stream, void *p, size_t length, unsigned int flags, int ptds)
{
	struct job j = { .p = p, .n = length };
	cudaError_t e = qc_ready_args(flags == cudaMemAttachGlobal || flags == cudaMemAttachHost ||
				      flags == cudaMemAttachSingle);

	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	/* The NULL stream stands for all streams: nothing can be attached to
	 * it alone (documented as an error). Measured natively: only the NULL
	 * handle is refused, cudaStreamLegacy is not, and in the _ptsz entry
	 * point NULL is the per-thread stream, which is allowed. */
	if (flags == cudaMemAttachSingle && stream == NULL && !ptds)
		return cudaErrorInvalidValue;
	return qc_mem_managed(p, length ? length : 1, whole_allocation, &j);
}

QC_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr, size_t length, unsigned int flags)
{
	return qc_ret(attach(stream, devPtr, length, flags, 0));
}

QC_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr, size_t length, unsigned int flags);
QC_API cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t stream, void *devPtr, size_t length, unsigned int flags)
{
	return qc_ret(attach(stream, devPtr, length, flags, 1));
}
