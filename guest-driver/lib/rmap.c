/* SPDX-License-Identifier: MIT */
/*
 * The range maps that let the library tell device pointers from host
 * pointers (cudaMemcpyDefault, argument checks). Every allocation is a
 * region (qcrt.h), kept in up to two sorted range maps:
 *   dev_map   ranges of device pointers (cudaMalloc, and the device side of
 *             mapped host memory),
 *   host_map  ranges of guest host memory the library knows (cudaHostAlloc,
 *             cudaHostRegister, cudaMallocManaged).
 * Unified addressing in the guest: the library tries to make a device
 * pointer range unusable for anything else in the guest's address space, so
 * that no host pointer can be mistaken for a device pointer: device
 * allocations get a PROT_NONE reservation at their device address
 * (qc_reserve_range), and host allocations are mapped at their device
 * address when it is free (then the host and device pointers are the same,
 * as under CUDA's unified addressing). Both are best effort
 * (MAP_FIXED_NOREPLACE).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qc_os.h"
#include "qcrt.h"

pthread_rwlock_t qc_maps_lock = PTHREAD_RWLOCK_INITIALIZER;
struct qc_rmap qc_dev_map, qc_host_map;
size_t qc_page_size;

__attribute__((constructor)) static void init_page_size(void)
{
	qc_page_size = qc_os_page_size();
}

size_t qc_page_round(uint64_t n)
{
	return (size_t)((n + qc_page_size - 1) & ~(uint64_t)(qc_page_size - 1));
}

/* Index of the first entry with start > p. */
static size_t rmap_upper(const struct qc_rmap *m, uint64_t p)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].start <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

struct qc_region *qc_rmap_find(const struct qc_rmap *m, uint64_t p)
{
	size_t i = rmap_upper(m, p);

	if (i == 0 || p >= m->v[i - 1].end)
		return NULL;
	return m->v[i - 1].r;
}

/* Any entry overlapping [start, end)? */
int qc_rmap_overlaps(const struct qc_rmap *m, uint64_t start, uint64_t end)
{
	size_t i = rmap_upper(m, start);

	if (i > 0 && m->v[i - 1].end > start)
		return 1;
	return i < m->n && m->v[i].start < end;
}

static int rmap_insert(struct qc_rmap *m, uint64_t start, uint64_t size, struct qc_region *r)
{
	uint64_t end = start + size;
	size_t i;

	if (end < start || qc_rmap_overlaps(m, start, end))
		return -EEXIST;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct qc_rent *v = realloc(m->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		m->v = v;
		m->cap = cap;
	}
	i = rmap_upper(m, start);
	memmove(&m->v[i + 1], &m->v[i], (m->n - i) * sizeof(*m->v));
	m->v[i] = (struct qc_rent){ start, end, r };
	m->n++;
	return 0;
}

static void rmap_remove(struct qc_rmap *m, struct qc_region *r)
{
	for (size_t i = 0; i < m->n; i++) {
		if (m->v[i].r == r) {
			memmove(&m->v[i], &m->v[i + 1], (m->n - i - 1) * sizeof(*m->v));
			m->n--;
			return;
		}
	}
}

/* Adds r to the maps (both, if it has both sides). Memory is the device's
 * that was current when it was made, as CUDA's allocations are, whichever
 * device is current when it is asked about later. */
int qc_region_add(struct qc_region *r)
{
	int e = 0;

	if (!r->has_device) {
		r->device = qc_current_device();
		r->has_device = 1;
	}
	pthread_rwlock_wrlock(&qc_maps_lock);
	if (r->dev)
		e = rmap_insert(&qc_dev_map, r->dev, r->size, r);
	if (!e && r->host) {
		e = rmap_insert(&qc_host_map, r->host, r->size, r);
		if (e && r->dev)
			rmap_remove(&qc_dev_map, r);
	}
	pthread_rwlock_unlock(&qc_maps_lock);
	return e;
}

int qc_region_add_device(struct qc_region *r, enum qc_mem_kind kind, uint64_t dev, uint64_t size, const char *what)
{
	r->kind = kind;
	r->dev = dev;
	r->size = size;
	r->map_len = qc_page_round(size);
	r->res_start = dev;
	r->reserved = qc_reserve_range(dev, r->map_len);
	if (!qc_region_add(r))
		return 0;
	qc_msg("%s returned %#llx+%llu, which overlaps a live allocation", what, (unsigned long long)dev,
	       (unsigned long long)size);
	return -1; /* the caller releases r (region.c, libcuda/vmm.c) */
}

void qc_region_remove_locked(struct qc_region *r)
{
	if (r->dev)
		rmap_remove(&qc_dev_map, r);
	if (r->host)
		rmap_remove(&qc_host_map, r);
}

/* PROT_NONE placeholder at a device address, so that nothing else in the
 * guest is ever mapped there (best effort). */
int qc_reserve_range(uint64_t dev, size_t len)
{
	if (!len || (dev & (qc_page_size - 1)) || dev >= QC_USER_TOP || len > QC_USER_TOP - dev)
		return 0;
	if (qc_os_reserve_at(dev, len))
		return 1;
	qc_debug("device range %#llx+%zu overlaps guest memory: pointers there are ambiguous", (unsigned long long)dev,
		 len);
	return 0;
}
