/* SPDX-License-Identifier: MIT */
/*
 * rmap.c on the host: the range maps that tell device pointers from host
 * pointers. Lookups at a range's edges, overlapping and wrapping ranges
 * refused, a region with both sides added whole or not at all, removal,
 * many regions in any order, and qc_region_add_device's answer to an
 * overlapping (wrong) backend answer; a region keeps the device that was
 * current when it was made. Linked with rmap.c and log.c;
 * qc_current_device (init.c) is replaced here.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "qcrt.h"

/* init.c's: the calling thread's current device, set by the test. */
static int current_device;

int qc_current_device(void)
{
	return current_device;
}

static struct qc_region *region(uint64_t dev, uintptr_t host, uint64_t size)
{
	struct qc_region *r = calloc(1, sizeof(*r));

	r->kind = QC_MEM_DEVICE;
	r->dev = dev;
	r->host = host;
	r->size = size;
	return r;
}

static void drop(struct qc_region *r)
{
	pthread_rwlock_wrlock(&qc_maps_lock);
	qc_region_remove_locked(r);
	pthread_rwlock_unlock(&qc_maps_lock);
	free(r);
}

static void edges(void)
{
	struct qc_region *a = region(0x10000, 0, 0x1000);

	CHECK(qc_region_add(a) == 0, "a first region is added");
	CHECK(qc_rmap_find(&qc_dev_map, 0x10000) == a, "found at its first byte");
	CHECK(qc_rmap_find(&qc_dev_map, 0x10fff) == a, "found at its last byte");
	CHECK(qc_rmap_find(&qc_dev_map, 0x11000) == NULL, "not found at its end");
	CHECK(qc_rmap_find(&qc_dev_map, 0xffff) == NULL, "not found before it");
	CHECK(qc_rmap_find(&qc_host_map, 0x10000) == NULL, "a device region is not in the host map");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0x11000, 0x12000) == 0, "a range from its end does not overlap");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0xf000, 0x10000) == 0, "a range up to its start does not overlap");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0xf000, 0x10001) == 1, "a range into its first byte overlaps");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0x10fff, 0x20000) == 1, "a range from its last byte overlaps");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0x10100, 0x10200) == 1, "a range inside it overlaps");
	CHECK(qc_rmap_overlaps(&qc_dev_map, 0x0, 0x100000) == 1, "a range around it overlaps");
	drop(a);
	CHECK(qc_rmap_find(&qc_dev_map, 0x10000) == NULL && qc_dev_map.n == 0, "gone once removed");
}

static void overlaps_refused(void)
{
	struct qc_region *a = region(0x20000, 0, 0x1000);
	struct qc_region *inside = region(0x20800, 0, 0x100), *across = region(0x1f000, 0, 0x1001);
	struct qc_region *before = region(0x1f000, 0, 0x1000), *after = region(0x21000, 0, 0x1000);
	struct qc_region *wrap = region(UINT64_MAX - 0xff, 0, 0x1000);

	CHECK(qc_region_add(a) == 0, "added");
	CHECK(qc_region_add(inside) == -EEXIST, "a region inside a live one is refused");
	CHECK(qc_region_add(across) == -EEXIST, "a region reaching one byte into a live one is refused");
	CHECK(qc_region_add(wrap) == -EEXIST, "a region wrapping past the top of the address space is refused");
	CHECK(qc_dev_map.n == 1, "refused regions leave the map as it was (%zu entries)", qc_dev_map.n);
	CHECK(qc_region_add(before) == 0, "a region ending at a live one's start is added");
	CHECK(qc_region_add(after) == 0, "a region starting at a live one's end is added");
	CHECK(qc_rmap_find(&qc_dev_map, 0x1ffff) == before && qc_rmap_find(&qc_dev_map, 0x20000) == a &&
		      qc_rmap_find(&qc_dev_map, 0x20fff) == a && qc_rmap_find(&qc_dev_map, 0x21000) == after,
	      "adjacent regions each own their bytes");
	drop(a);
	drop(before);
	drop(after);
	free(inside);
	free(across);
	free(wrap);
}

/* A region with a device and a host side goes into both maps or neither. */
static void both_sides(void)
{
	struct qc_region *pinned = region(0x40000, 0x90000, 0x2000);
	struct qc_region *clash = region(0x50000, 0x91000, 0x1000); /* device side free, host side not */

	CHECK(qc_region_add(pinned) == 0, "a two-sided region is added");
	CHECK(qc_rmap_find(&qc_dev_map, 0x41fff) == pinned && qc_rmap_find(&qc_host_map, 0x91fff) == pinned,
	      "found by either side");
	CHECK(qc_region_add(clash) == -EEXIST, "a region whose host side overlaps is refused");
	CHECK(qc_rmap_find(&qc_dev_map, 0x50000) == NULL, "and its device side was taken back out");
	drop(pinned);
	CHECK(qc_dev_map.n == 0 && qc_host_map.n == 0, "removal empties both maps");
	CHECK(qc_region_add(clash) == 0, "the range is free again");
	drop(clash);
}

/* Past the first allocation of the entry vector, inserted out of order. */
static void many(void)
{
	enum { N = 1000 };
	static struct qc_region *r[N];
	int bad = 0;

	for (int i = 0; i < N; i++) {
		int k = (i * 7919) % N; /* 7919 is prime: every k once */

		r[k] = region(0x100000 + (uint64_t)k * 0x3000, 0, 0x2000);
		bad += qc_region_add(r[k]) != 0;
	}
	CHECK(!bad && qc_dev_map.n == N, "%d of %d refused, %zu in the map", bad, N, qc_dev_map.n);
	bad = 0;
	for (int k = 0; k < N; k++) {
		uint64_t s = 0x100000 + (uint64_t)k * 0x3000;

		bad += qc_rmap_find(&qc_dev_map, s) != r[k] || qc_rmap_find(&qc_dev_map, s + 0x1fff) != r[k];
		bad += qc_rmap_find(&qc_dev_map, s + 0x2000) != NULL || qc_rmap_find(&qc_dev_map, s + 0x2fff) != NULL;
	}
	CHECK(!bad, "%d wrong lookups among %d regions", bad, N);
	bad = 0;
	for (int k = 1; k < N; k++)
		bad += qc_dev_map.v[k - 1].end > qc_dev_map.v[k].start;
	CHECK(!bad, "the map is kept sorted");
	for (int k = 0; k < N; k += 2)
		drop(r[k]);
	bad = 0;
	for (int k = 0; k < N; k++)
		bad += qc_rmap_find(&qc_dev_map, 0x100000 + (uint64_t)k * 0x3000 + 1) != (k % 2 ? r[k] : NULL);
	CHECK(!bad && qc_dev_map.n == N / 2, "removing every other region leaves the rest found");
	for (int k = 1; k < N; k += 2)
		drop(r[k]);
}

/* A backend answer overlapping a live allocation is refused, the new
 * region not added (its caller releases it: memory.c sends FREE). */
static void add_device(void)
{
	uint64_t base = 0x500000000000ull;
	struct qc_region *a = calloc(1, sizeof(*a)), *b = calloc(1, sizeof(*b));

	CHECK(qc_region_add_device(a, QC_MEM_DEVICE, base, 5000, "MALLOC") == 0, "added");
	CHECK(a->kind == QC_MEM_DEVICE && a->dev == base && a->size == 5000 && a->map_len == qc_page_round(5000) &&
		      a->res_start == base,
	      "set up from the answer");
	CHECK(qc_rmap_find(&qc_dev_map, base + 4999) == a && !qc_rmap_find(&qc_dev_map, base + 5000),
	      "its size, not its page-rounded length, is in the map");
	CHECK(qc_region_add_device(b, QC_MEM_VMM, base + 4096, 100, "VMM_RESERVE") == -1,
	      "an answer overlapping a live allocation is refused");
	CHECK(!qc_rmap_find(&qc_dev_map, base + 5000) && !qc_rmap_find(&qc_host_map, base + 4096),
	      "and the region not added");
	free(b);
	CHECK(qc_rmap_find(&qc_dev_map, base + 4096) == a, "the live allocation stays");
	drop(a);
}

/* A region is its allocation's device's, whichever is current when it is added again. */
static void device_kept(void)
{
	struct qc_region *r = region(0x600000000000ull, 0, 64);

	current_device = 1;
	CHECK(qc_region_add(r) == 0 && r->device == 1, "a region made with device 1 current is device 1's");
	pthread_rwlock_wrlock(&qc_maps_lock);
	qc_region_remove_locked(r);
	pthread_rwlock_unlock(&qc_maps_lock);
	current_device = 0;
	CHECK(qc_region_add(r) == 0 && r->device == 1, "and stays so, added again with device 0 current");
	drop(r);
}

int main(void)
{
	CHECK(qc_page_size >= 4096, "page size %zu", qc_page_size);
	CHECK(qc_page_round(1) == qc_page_size && qc_page_round(qc_page_size) == qc_page_size &&
		      qc_page_round(qc_page_size + 1) == 2 * qc_page_size && qc_page_round(0) == 0,
	      "page rounding");
	edges();
	overlaps_refused();
	both_sides();
	many();
	add_device();
	device_kept();
	return check_end();
}
