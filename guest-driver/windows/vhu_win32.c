/* SPDX-License-Identifier: MIT */
/*
 * What vhu.h asks of the operating system on Windows, as far as it goes
 * now: the shared-memory region's data area carved into the regions
 * vhu_ring.c lays its rings, slots and staging in. Pinned host memory
 * (vhu_mem_alloc and its mappings) is not written yet: it fails, so data
 * goes through the slots' staging room. The socket transport's eventfds do
 * not exist here (the region is polled).
 */
#include <errno.h>

#include "vhu.h"

#define ALIGN (2ull << 20)

static struct {
	uint8_t *va;
	uint64_t gpa, size, next;
} file;

void vhu_mem_use_file(int fd, uint8_t *va, uint64_t gpa, uint64_t file_off, uint64_t size)
{
	file.va = va, file.gpa = gpa, file.size = size, file.next = 0;
}

int vhu_mem_region(uint64_t size, void **va, uint64_t *gpa)
{
	size = (size + ALIGN - 1) & ~(ALIGN - 1);
	if (!file.va || size > file.size - file.next)
		return -ENOSPC;
	*va = file.va + file.next;
	*gpa = file.gpa + file.next;
	file.next += size;
	return 0;
}

int vhu_mem_alloc(uint64_t size, uint64_t *gpa)
{
	return -ENOSYS;
}

int vhu_mem_free(uint64_t gpa)
{
	return -EINVAL;
}

void *vhu_mem_map(uint64_t gpa, size_t len, void *want)
{
	return NULL;
}

int vhu_mem_adopt(void *addr, uint64_t size, uint64_t *gpa)
{
	return -ENOSYS;
}

int vhu_mem_release(void *addr)
{
	return -EINVAL;
}

uint64_t vhu_mem_gpa(const void *p, uint64_t len)
{
	return 0;
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
