/* SPDX-License-Identifier: MIT */
/*
 * qc_os.h on Linux: open/mmap, getpid and kill(pid, 0), nanosleep and
 * CLOCK_MONOTONIC. Every function returns what qc_os.h says.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qc_os.h"

int qc_os_map_file(const char *path, uint64_t min_bytes, struct qc_os_map *m)
{
	struct stat st;
	int f = open(path, O_RDWR | O_CLOEXEC);
	void *va;

	if (f < 0)
		return -errno;
	if (fstat(f, &st) || st.st_size < 0 || (uint64_t)st.st_size < min_bytes) {
		close(f);
		return -EPROTO;
	}
	va = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (va == MAP_FAILED) {
		int e = -errno;

		close(f);
		return e;
	}
	*m = (struct qc_os_map){ .va = va, .bytes = (uint64_t)st.st_size, .fd = f, .section = -1 };
	return 0;
}

void qc_os_unmap(struct qc_os_map *m)
{
	munmap(m->va, m->bytes);
	close((int)m->fd);
	m->va = NULL;
}

void qc_os_map_private_to_process(struct qc_os_map *m)
{
	madvise(m->va, m->bytes, MADV_DONTFORK);
}

const char *qc_os_default_region(void)
{
	return NULL; /* /dev/qcuda0 or a backend's socket */
}

int qc_os_is_socket(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

uint64_t qc_os_pid(void)
{
	return (uint64_t)getpid();
}

int qc_os_pid_gone(uint64_t pid)
{
	return pid > 0 && pid < (1u << 31) && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

void qc_os_sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&t, NULL);
}

uint64_t qc_os_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* /proc/self/maps: registering is rare. */
int qc_os_writable_range(const void *addr, uint64_t len, int *shared)
{
	uintptr_t a = (uintptr_t)addr, end = a + len, lo, hi;
	char line[512], perms[8];
	FILE *f = fopen("/proc/self/maps", "re");
	int ok = 0;

	*shared = 0;
	if (!f)
		return -errno;
	while (a < end && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &lo, &hi, perms) != 3 || hi <= a)
			continue;
		if (lo > a || perms[0] != 'r' || perms[1] != 'w')
			break;
		*shared |= perms[3] == 's';
		a = hi;
	}
	ok = a >= end;
	fclose(f);
	return ok ? 0 : -EFAULT;
}
