/* SPDX-License-Identifier: MIT */
/*
 * qc_os.h's part for the rest of the library on Windows (the transports'
 * part is os_win32.c): the page size, the processor's NUMA node,
 * BCryptGenRandom, winpthreads' threads (Windows has no signals to keep off
 * them), VirtualAlloc reservations. Shareable handles as POSIX fds have no
 * Windows counterpart here: -ENOSYS, which the callers answer as
 * CUDA_ERROR_NOT_SUPPORTED (docs/windows.md).
 */
#include <errno.h>
#include <string.h>
#include <windows.h>
#include <bcrypt.h>

#include "qc_os.h"

size_t qc_os_page_size(void)
{
	SYSTEM_INFO si;

	GetSystemInfo(&si);
	return si.dwPageSize;
}

int qc_os_numa_node(void)
{
	PROCESSOR_NUMBER pn;
	USHORT node;

	GetCurrentProcessorNumberEx(&pn);
	return GetNumaProcessorNodeEx(&pn, &node) ? (int)node : 0;
}

int qc_os_random(void *buf, size_t len)
{
	return BCryptGenRandom(NULL, buf, (ULONG)len, BCRYPT_USE_SYSTEM_PREFERRED_RNG) == 0 ? 0 : -1;
}

int qc_os_start_thread(void *(*fn)(void *), size_t stack)
{
	return qc_os_start_detached(fn, stack);
}

/* VirtualAlloc rounds addr down to 64 KiB: a reservation that would not
 * start at addr is given back, as a taken range is on Linux. */
int qc_os_reserve_at(uint64_t addr, size_t len)
{
	void *p = VirtualAlloc((void *)(uintptr_t)addr, len, MEM_RESERVE, PAGE_NOACCESS);

	if (p == (void *)(uintptr_t)addr)
		return 1;
	if (p)
		VirtualFree(p, 0, MEM_RELEASE);
	return 0;
}

void qc_os_release(uint64_t addr, size_t len)
{
	VirtualFree((void *)(uintptr_t)addr, 0, MEM_RELEASE);
}

/* vhu_win32.c hands out pinned memory where it lies in the region's one
 * view (its vhu_mem_map maps nothing): there is nothing to unmap; the view
 * goes at detach. */
void qc_os_unmap_pages(void *va, size_t len)
{
}

int qc_os_sealed_file(const char *name, const void *data, size_t len, int *fd)
{
	return -ENOSYS;
}

int qc_os_read_sealed(int fd, void *buf, size_t len)
{
	return -ENOSYS;
}

void *memmem(const void *hay, size_t n, const void *needle, size_t m)
{
	const unsigned char *h = hay;
	size_t i;

	if (!m)
		return (void *)hay;
	for (i = 0; m <= n && i <= n - m; i++)
		if (h[i] == *(const unsigned char *)needle && !memcmp(h + i, needle, m))
			return (void *)(h + i);
	return NULL;
}
