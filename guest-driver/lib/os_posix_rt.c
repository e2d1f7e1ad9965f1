/* SPDX-License-Identifier: MIT */
/*
 * qc_os.h's part for the rest of the library on Linux (the transports' part
 * is os_posix.c, which the probes link alone): the page size, getcpu,
 * getrandom, threads with signals blocked, PROT_NONE reservations and
 * sealed memfds.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "qc_os.h"

size_t qc_os_page_size(void)
{
	return (size_t)sysconf(_SC_PAGESIZE);
}

int qc_os_numa_node(void)
{
	unsigned cpu, node;

	return syscall(SYS_getcpu, &cpu, &node, NULL) == 0 ? (int)node : 0;
}

int qc_os_random(void *buf, size_t len)
{
	return getrandom(buf, len, 0) == (ssize_t)len ? 0 : -1;
}

/* Signals blocked while it is made, so that the new thread starts with all
 * of them blocked: the program's handlers run on its own threads only. */
int qc_os_start_thread(void *(*fn)(void *), size_t stack)
{
	sigset_t all, old;
	int err;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = qc_os_start_detached(fn, stack);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return err;
}

int qc_os_reserve_at(uint64_t addr, size_t len)
{
	void *p = mmap((void *)(uintptr_t)addr, len, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);

	if (p == (void *)(uintptr_t)addr)
		return 1;
	if (p != MAP_FAILED)
		munmap(p, len);
	return 0;
}

void qc_os_release(uint64_t addr, size_t len)
{
	munmap((void *)(uintptr_t)addr, len);
}

void qc_os_unmap_pages(void *va, size_t len)
{
	munmap(va, len);
}

int qc_os_sealed_file(const char *name, const void *data, size_t len, int *fd)
{
	int f = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (f < 0)
		return -errno;
	if (pwrite(f, data, len, 0) != (ssize_t)len ||
	    fcntl(f, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
		close(f);
		return -EIO;
	}
	*fd = f;
	return 0;
}

int qc_os_read_sealed(int fd, void *buf, size_t len)
{
	return pread(fd, buf, len, 0) == (ssize_t)len ? 0 : -1;
}
