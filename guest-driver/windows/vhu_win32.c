/* SPDX-License-Identifier: MIT */
/*
 * What vhu.h asks of the operating system on Windows: the shared-memory
 * region's data area carved into the regions vhu_ring.c lays its rings,
 * slots and staging in, and the pinned host memory (cudaHostAlloc,
 * cudaMallocHost, managed memory) carved from what is left after them, as
 * vhu_mem.c carves it on Linux over the same region. The one difference:
 * the region is mapped once (a file's view, or the IVSHMEM device's, which
 * cannot be mapped twice), so a piece's host address is where it lies in
 * that view (vhu_mem_map makes no new mapping, and cannot place it at its
 * device address). Registered memory (vhu_mem_adopt) stays where it is:
 * its copies are staged. The socket transport's eventfds do not exist here
 * (the region is polled).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "vhu.h"

#define ALIGN (2ull << 20)
/* x64 Windows' page: pieces are rounded as vhu_mem.c rounds them on Linux. */
#define PAGE 4096ull

static struct {
	uint8_t *va;
	uint64_t gpa, size, next;
	/* Pinned memory: [heap, size) of the data area, from the first
	 * allocation on (no region is carved after it, as on Linux). */
	uint64_t heap;
} file;

/* A piece of pinned memory: its offset in the data area and its size. */
struct piece {
	uint64_t off, size;
};

static struct piece *pieces; /* sorted by offset */
static size_t npieces, cap_pieces;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

void vhu_mem_use_file(int fd, uint8_t *va, uint64_t gpa, uint64_t file_off, uint64_t size)
{
	pthread_mutex_lock(&lock);
	file.va = va, file.gpa = gpa, file.size = size, file.next = 0, file.heap = 0;
	npieces = 0;
	pthread_mutex_unlock(&lock);
}

int vhu_mem_region(uint64_t size, void **va, uint64_t *gpa)
{
	int e = 0;

	size = (size + ALIGN - 1) & ~(ALIGN - 1);
	pthread_mutex_lock(&lock);
	if (!file.va || file.heap || size > file.size - file.next)
		e = -ENOSPC;
	if (!e) {
		*va = file.va + file.next;
		*gpa = file.gpa + file.next;
		file.next += size;
	}
	pthread_mutex_unlock(&lock);
	return e;
}

/* The first gap of size bytes in the heap (first fit), or UINT64_MAX;
 * *at: where a piece there goes in the list. Under the lock. */
static uint64_t gap(uint64_t size, size_t *at)
{
	uint64_t start = file.heap;
	size_t i;

	for (i = 0; i < npieces; i++) {
		if (pieces[i].off - start >= size)
			break;
		start = pieces[i].off + pieces[i].size;
	}
	*at = i;
	return file.size - start >= size ? start : UINT64_MAX;
}

static int grow(void)
{
	size_t cap = cap_pieces ? cap_pieces * 2 : 64;
	struct piece *p;

	if (npieces < cap_pieces)
		return 0;
	p = realloc(pieces, cap * sizeof(*p));
	if (!p)
		return -ENOMEM;
	pieces = p, cap_pieces = cap;
	return 0;
}

/* Bounded by the data area: -ENOSPC when no gap is left (the library
 * answers it as out of memory). Zeroed: the region may hold an earlier
 * process's bytes. */
int vhu_mem_alloc(uint64_t size, uint64_t *gpa)
{
	uint64_t off;
	size_t at;
	int e;

	size = (size + PAGE - 1) & ~(PAGE - 1);
	pthread_mutex_lock(&lock);
	if (!file.va) {
		pthread_mutex_unlock(&lock);
		return -ENOSPC;
	}
	if (!file.heap)
		file.heap = file.next = (file.next + ALIGN - 1) & ~(ALIGN - 1);
	off = gap(size, &at);
	e = off == UINT64_MAX ? -ENOSPC : grow();
	if (!e) {
		memmove(&pieces[at + 1], &pieces[at], (npieces - at) * sizeof(*pieces));
		pieces[at] = (struct piece){ .off = off, .size = size };
		npieces++;
		memset(file.va + off, 0, size);
		*gpa = file.gpa + off;
	}
	pthread_mutex_unlock(&lock);
	return e;
}

int vhu_mem_free(uint64_t gpa)
{
	int e = -EINVAL;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < npieces; i++) {
		if (file.gpa + pieces[i].off != gpa)
			continue;
		memmove(&pieces[i], &pieces[i + 1], (npieces - i - 1) * sizeof(*pieces));
		npieces--;
		e = 0;
		break;
	}
	pthread_mutex_unlock(&lock);
	return e;
}

/* The piece's own place in the region's view (want cannot be had: see
 * above). qc_os_unmap_pages, which the library calls on free, has nothing
 * to unmap. */
void *vhu_mem_map(uint64_t gpa, size_t len, void *want)
{
	void *p = NULL;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < npieces && !p; i++)
		if (file.gpa + pieces[i].off == gpa && len <= pieces[i].size)
			p = file.va + pieces[i].off;
	pthread_mutex_unlock(&lock);
	return p;
}

int vhu_mem_adopt(void *addr, uint64_t size, uint64_t *gpa)
{
	return -ENOSYS;
}

int vhu_mem_release(void *addr)
{
	return -EINVAL;
}

/* Pinned memory is where it lies in the view: a pointer into a live
 * piece is its guest-physical address, and copies from it are not staged. */
uint64_t vhu_mem_gpa(const void *p, uint64_t len)
{
	uintptr_t a = (uintptr_t)p, base = (uintptr_t)file.va;
	uint64_t gpa = 0;

	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < npieces && !gpa && a >= base; i++)
		if (a - base >= pieces[i].off && len <= pieces[i].size &&
		    a - base - pieces[i].off <= pieces[i].size - len)
			gpa = file.gpa + (a - base);
	pthread_mutex_unlock(&lock);
	return gpa;
}

int vhu_events_start(unsigned int q, uint8_t *va, int *kick, int *call)
{
	return -ENOSYS;
}

int vhu_events_kick(int kick)
{
	return -ENOSYS;
}

int vhu_events_sleep(int call)
{
	return 1;
}
