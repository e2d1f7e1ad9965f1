// SPDX-License-Identifier: MIT
/*
 * call_test: the qcuda driver's QCUDA_IOC_CALL data path and its host
 * memory ioctls, run in the guest against /dev/qcuda0.
 *
 * Without a v2 backend (HELLO not answered) only what the driver decides
 * alone is tested: argument checks, HOST_ALLOC/mmap/HOST_FREE,
 * HOST_REGISTER, GPA (checked against /proc/self/pagemap). With one, also
 * MALLOC + MEMCPY_HTOD/DTOH round trips checked byte by byte (1 byte,
 * unaligned, page-crossing, chunk edges, a chunk of scattered pages,
 * -b MiB), HOST_MAP end to end,
 * sessions (opened by the first CALL; SESSION_CLOSE at close and after
 * SIGKILL mid-copy), SIGALRM
 * during copies, and concurrent threads.
 *
 *   call_test [-b big_MiB (100)] [-d device]
 *   call_test -l    copy 64 MiB back and forth until a call fails (used to
 *                   test device removal), then report how it failed
 *   call_test -i    print the device's free and total memory (MEM_GET_INFO)
 *   -F fd           use (dups of) the inherited open file fd, not -d device
 *
 * Exit status: 0 all checks passed, 1 a check failed, 2 setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

#define MiB (UINT64_C(1) << 20)
#define PG 4096ul
#define CUDA_ERROR_INVALID_VALUE 1

static const char *dev = "/dev/qcuda0";
static uint64_t big = 100 * MiB;
static unsigned long checks, failures;
static pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(cond, ...)							\
	do {									\
		bool ok_ = (cond);						\
		pthread_mutex_lock(&count_lock);				\
		checks++;							\
		if (!ok_) {							\
			failures++;						\
			printf("FAIL %s:%d: ", __func__, __LINE__);		\
			printf(__VA_ARGS__);					\
			printf("\n");						\
		}								\
		pthread_mutex_unlock(&count_lock);				\
	} while (0)

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int use_fd = -1;	/* -F: an inherited open file instead of dev */

static int xopen(void)
{
	int fd = use_fd >= 0 ? dup(use_fd) : open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("call_test: cannot open %s: %s\n", dev, strerror(errno));
		exit(2);
	}
	return fd;
}

static void *xmap(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("call_test: mmap %zu: %s\n", n, strerror(errno));
		exit(2);
	}
	return p;
}

/* ioctl(QCUDA_IOC_CALL): 0 or -errno; the reply in *c. */
static int call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out,
		uint32_t out_len, uint32_t dir, const void *data, uint64_t data_len,
		struct qcuda_call *c)
{
	struct qcuda_call tmp;

	if (!c)
		c = &tmp;
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->args_len = args_len;
	c->args = (uintptr_t)args;
	c->out = (uintptr_t)out;
	c->out_len = out_len;
	c->data_dir = dir;
	c->data = (uintptr_t)data;
	c->data_len = data_len;
	c->status = c->out_written = 0xdead;
	return ioctl(fd, QCUDA_IOC_CALL, c) ? -errno : 0;
}

static uint64_t dmalloc(int fd, uint64_t size)
{
	struct qcuda_args_malloc a = { .size = size };
	struct qcuda_call c;
	int r = call(fd, QCUDA_CMD_MALLOC, &a, sizeof(a), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);

	CHECK(r == 0 && c.status == 0 && c.value, "MALLOC %" PRIu64 ": ret %d status %u", size, r, c.status);
	return c.value;
}

/* MEMCPY_HTOD / _DTOH: ioctl result, status in *st. */
static int copy(int fd, bool to_dev, uint64_t dptr, void *host, uint64_t n, uint32_t *st)
{
	struct qcuda_args_memcpy a = { .size = n };
	struct qcuda_call c;
	int r;

	if (to_dev)
		a.dst = dptr;
	else
		a.src = dptr;
	r = call(fd, to_dev ? QCUDA_CMD_MEMCPY_HTOD : QCUDA_CMD_MEMCPY_DTOH, &a, sizeof(a), NULL, 0,
		 to_dev ? QCUDA_DATA_TO_DEVICE : QCUDA_DATA_FROM_DEVICE, host, n, &c);
	*st = r ? 0xffffffff : c.status;
	return r;
}

static struct qcuda_out_mem_info meminfo(int fd)
{
	struct qcuda_out_mem_info m = { 0 };
	struct qcuda_call c;
	int r = call(fd, QCUDA_CMD_MEM_GET_INFO, NULL, 0, &m, sizeof(m), QCUDA_DATA_NONE, NULL, 0, &c);

	CHECK(r == 0 && c.status == 0 && c.out_written == sizeof(m), "MEM_GET_INFO: ret %d status %u", r, c.status);
	return m;
}

/* Pseudo-random bytes that never repeat at page or chunk periods. */
static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9e3779b97f4a7c15ull | 1;
	size_t i;

	for (i = 0; i + 8 <= n; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
	for (; i < n; i++)
		p[i] = (uint8_t)(x >> (8 * (i & 7)));
}

static ssize_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (!memcmp(a, b, n))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (ssize_t)i;
	return -1;
}

/* Physical address of a virtual address (root: /proc/self/pagemap), 0 if unknown. */
static uint64_t phys_of(const void *va)
{
	uint64_t e = 0;
	int fd = open("/proc/self/pagemap", O_RDONLY);

	if (fd < 0)
		return 0;
	if (pread(fd, &e, 8, (off_t)((uintptr_t)va / PG) * 8) != 8)
		e = 0;
	close(fd);
	if (!(e & (1ull << 63)) || !(e & ((1ull << 55) - 1)))
		return 0;
	return (e & ((1ull << 55) - 1)) * PG + (uintptr_t)va % PG;
}

/* Are the pages of [va, va+n) physically contiguous (per pagemap)? */
static bool phys_contig(const uint8_t *va, size_t n)
{
	uintptr_t first = (uintptr_t)va & ~(PG - 1), last = ((uintptr_t)va + n - 1) & ~(PG - 1);
	uint64_t p0 = phys_of((void *)first);

	for (uintptr_t a = first; a <= last; a += PG)
		if (!p0 || phys_of((void *)a) != p0 + (a - first))
			return false;
	return true;
}

static int host_alloc(int fd, uint64_t size, uint32_t flags, struct qcuda_host_alloc *a)
{
	memset(a, 0, sizeof(*a));
	a->size = size;
	a->flags = flags;
	return ioctl(fd, QCUDA_IOC_HOST_ALLOC, a) ? -errno : 0;
}

static int host_free(int fd, uint64_t token)
{
	struct qcuda_host_free f = { .mmap_offset = token };

	return ioctl(fd, QCUDA_IOC_HOST_FREE, &f) ? -errno : 0;
}

static int host_register(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_host_register r = { .addr = (uintptr_t)addr, .size = size };
	int ret = ioctl(fd, QCUDA_IOC_HOST_REGISTER, &r) ? -errno : 0;

	if (gpa)
		*gpa = r.gpa;
	return ret;
}

static int host_unregister(int fd, const void *addr)
{
	struct qcuda_host_unregister u = { .addr = (uintptr_t)addr };

	return ioctl(fd, QCUDA_IOC_HOST_UNREGISTER, &u) ? -errno : 0;
}

static int gpa_of(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_gpa g = { .addr = (uintptr_t)addr, .size = size };
	int ret = ioctl(fd, QCUDA_IOC_GPA, &g) ? -errno : 0;

	*gpa = ret ? 0 : g.gpa;
	return ret;
}

static void *map_alloc(int fd, uint64_t token, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)token);

	CHECK(p != MAP_FAILED, "mmap token %#" PRIx64 " len %zu: %s", token, len, strerror(errno));
	return p == MAP_FAILED ? NULL : p;
}

/* ---- argument checks (driver only) ---- */

static void test_validation(int fd)
{
	struct qcuda_args_memcpy mc = { .size = 4096 };
	uint8_t buf[64];
	uint8_t *two = xmap(2 * PG);
	int r;

	for (uint32_t cmd = 0; cmd < QCUDA_CMD_HELLO; cmd++) {
		r = call(fd, cmd, NULL, 0, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
		CHECK(r == -EINVAL, "driver command %u through CALL: %d", cmd, r);
	}
	r = call(fd, QCUDA_CMD_HELLO, buf, QCUDA_MAX_ARGS + 1, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EINVAL, "args_len %u: %d", QCUDA_MAX_ARGS + 1, r);
	r = call(fd, QCUDA_CMD_HELLO, NULL, 0, buf, QCUDA_MAX_OUT + 1, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EINVAL, "out_len %u: %d", QCUDA_MAX_OUT + 1, r);
	r = call(fd, QCUDA_CMD_HELLO, NULL, 0, NULL, 0, 3, buf, 1, NULL);
	CHECK(r == -EINVAL, "data_dir 3: %d", r);
	r = call(fd, QCUDA_CMD_HELLO, NULL, 0, NULL, 0, QCUDA_DATA_NONE, buf, 1, NULL);
	CHECK(r == -EINVAL, "data_len without data_dir: %d", r);
	r = ioctl(fd, QCUDA_IOC_CALL, NULL) ? -errno : 0;
	CHECK(r == -EFAULT, "CALL with a NULL struct: %d", r);
	r = ioctl(fd, QCUDA_IOC_CALL, (void *)8) ? -errno : 0;
	CHECK(r == -EFAULT, "CALL with struct at 8: %d", r);
	r = call(fd, QCUDA_CMD_HELLO, (void *)8, 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EFAULT, "args at 8: %d", r);
	r = call(fd, QCUDA_CMD_HELLO, two + PG - 4, 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == 0 || r != -EFAULT, "args crossing into a mapped page: %d", r);
	munmap(two + PG, PG);	/* now a hole after the first page */
	r = call(fd, QCUDA_CMD_HELLO, two + PG - 4, 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EFAULT, "args running into a hole: %d", r);
	r = call(fd, QCUDA_CMD_MEMCPY_HTOD, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_TO_DEVICE, NULL, 4096, NULL);
	CHECK(r == -EFAULT, "data at NULL: %d", r);
	r = call(fd, QCUDA_CMD_MEMCPY_HTOD, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_TO_DEVICE, two, 1ull << 62, NULL);
	CHECK(r == -EFAULT, "data_len 2^62: %d", r);
	r = call(fd, QCUDA_CMD_MEMCPY_HTOD, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_TO_DEVICE, two, ~0ull, NULL);
	CHECK(r == -EFAULT, "data_len 2^64-1: %d", r);
	r = call(fd, QCUDA_CMD_MEMCPY_HTOD, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_TO_DEVICE, two, 1ull << 40, NULL);
	CHECK(r == -EFAULT, "data_len 1 TiB from a 1-page buffer: %d", r);
	r = call(fd, QCUDA_CMD_MEMCPY_DTOH, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_FROM_DEVICE, two + 10, PG, NULL);
	CHECK(r == -EFAULT, "data running into a hole: %d", r);
	mprotect(two, PG, PROT_READ);
	r = call(fd, QCUDA_CMD_MEMCPY_DTOH, &mc, sizeof(mc), NULL, 0, QCUDA_DATA_FROM_DEVICE, two, 16, NULL);
	CHECK(r == -EFAULT, "FROM_DEVICE into read-only memory: %d", r);
	munmap(two, PG);

	struct qcuda_args_host_map hm = { .gpa = 0x100000, .size = PG };
	r = call(fd, QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EINVAL, "HOST_MAP of memory not ours: %d", r);
	r = call(fd, QCUDA_CMD_HOST_MAP, &hm, sizeof(hm) - 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == -EINVAL, "HOST_MAP with short args: %d", r);
	r = ioctl(fd, _IO(QCUDA_IOC_MAGIC, 0x7f)) ? -errno : 0;
	CHECK(r == -ENOTTY, "unknown ioctl: %d", r);
}

/* ---- HOST_ALLOC / mmap / HOST_FREE, GPA ---- */

static void test_host_alloc(int fd)
{
	struct qcuda_host_alloc a, c4, nc;
	uint64_t g;
	uint8_t *m1, *m2, *m3;
	int r;

	CHECK(host_alloc(fd, 0, 0, &a) == -EINVAL, "size 0");
	CHECK(host_alloc(fd, PG, 2, &a) == -EINVAL, "unknown flag");
	a = (struct qcuda_host_alloc){ .size = PG, .reserved = 1 };
	CHECK((ioctl(fd, QCUDA_IOC_HOST_ALLOC, &a) ? -errno : 0) == -EINVAL, "reserved set");
	CHECK(host_alloc(fd, 1ull << 50, 0, &a) == -ENOMEM, "1 PiB");
	CHECK(host_alloc(fd, 4 * MiB + 1, QCUDA_HOST_CONTIGUOUS, &a) == -ENOMEM, "contiguous 4 MiB + 1");
	CHECK(host_alloc(fd, 64 * MiB, QCUDA_HOST_CONTIGUOUS, &a) == -ENOMEM, "contiguous 64 MiB");

	/* Contiguous: gpa is where the pages really are. */
	r = host_alloc(fd, 4 * MiB, QCUDA_HOST_CONTIGUOUS, &c4);
	CHECK(r == 0 && c4.gpa && c4.gpa % (4 * MiB) == 0, "contiguous 4 MiB: %d gpa %#" PRIx64, r, (uint64_t)c4.gpa);
	m1 = map_alloc(fd, c4.mmap_offset, 4 * MiB);
	m2 = map_alloc(fd, c4.mmap_offset + PG, 2 * PG);	/* a window into it */
	if (m1 && m2) {
		CHECK(m1[0] == 0 && m1[4 * MiB - 1] == 0, "not zeroed");
		fill(m1, 4 * MiB, 1);
		CHECK(!memcmp(m1 + PG, m2, 2 * PG), "two mappings differ");
		CHECK(phys_of(m1) == c4.gpa && phys_contig(m1, 4 * MiB), "pagemap says %#" PRIx64 ", gpa %#" PRIx64,
		      phys_of(m1), (uint64_t)c4.gpa);
		r = gpa_of(fd, m1 + 100, 300, &g);
		CHECK(r == 0 && g == c4.gpa + 100, "GPA in mapping: %d %#" PRIx64, r, g);
		r = gpa_of(fd, m2 + 5, PG, &g);
		CHECK(r == 0 && g == c4.gpa + PG + 5, "GPA in window mapping: %d %#" PRIx64, r, g);
		r = gpa_of(fd, m2 + 5, 2 * PG, &g);
		CHECK(r == -EINVAL, "GPA past the window mapping: %d", r);
	}
	r = gpa_of(fd, &a, 8, &g);
	CHECK(r == -EINVAL, "GPA of the stack: %d", r);
	r = gpa_of(fd, m1, 0, &g);
	CHECK(r == -EINVAL, "GPA of size 0: %d", r);

	/* Mapping rules. */
	m3 = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, (off_t)c4.mmap_offset);
	CHECK(m3 == MAP_FAILED && errno == EINVAL, "MAP_PRIVATE accepted");
	m3 = mmap(NULL, 4 * MiB + PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)c4.mmap_offset);
	CHECK(m3 == MAP_FAILED && errno == EINVAL, "mapping longer than the allocation accepted");
	m3 = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(c4.mmap_offset + 4 * MiB + 1000 * PG));
	CHECK(m3 == MAP_FAILED && errno == EINVAL, "mapping of an unknown token accepted");

	/* Not contiguous, not page-sized: still one zeroed, mappable object. */
	r = host_alloc(fd, 3 * MiB + 5, 0, &nc);
	CHECK(r == 0, "3 MiB + 5: %d", r);
	m3 = map_alloc(fd, nc.mmap_offset, 3 * MiB + 5);
	if (m3) {
		fill(m3, 3 * MiB + 5, 2);
		CHECK(m3[3 * MiB + PG - 1] == 0, "tail of the last page not zero");
		r = gpa_of(fd, m3 + 7, 100, &g);
		CHECK(r == 0 && g == phys_of(m3 + 7), "GPA of one page: %d %#" PRIx64 " pagemap %#" PRIx64,
		      r, g, phys_of(m3 + 7));
		r = gpa_of(fd, m3, 3 * MiB, &g);
		CHECK((r == 0) == phys_contig(m3, 3 * MiB), "GPA of 3 MiB %d, pagemap contiguous %d",
		      r, phys_contig(m3, 3 * MiB));
		CHECK((nc.gpa != 0) == phys_contig(m3, 3 * MiB + 5), "alloc gpa %#" PRIx64 " vs pagemap", (uint64_t)nc.gpa);
	}

	/* HOST_FREE: the mapping keeps the pages until munmap. */
	CHECK(host_free(fd, c4.mmap_offset) == 0, "HOST_FREE");
	CHECK(host_free(fd, c4.mmap_offset) == -EINVAL, "second HOST_FREE");
	CHECK(host_free(fd, 12345 * PG) == -EINVAL, "HOST_FREE of an unknown token");
	if (m1) {
		uint8_t *ref = xmap(4 * MiB);

		fill(ref, 4 * MiB, 1);
		CHECK(!memcmp(m1, ref, 4 * MiB), "mapping changed after HOST_FREE");
		m1[PG + 5] = 9;
		CHECK(!m2 || m2[5] == 9, "mappings no longer share pages after HOST_FREE");
		r = gpa_of(fd, m1, 8, &g);
		CHECK(r == -EINVAL, "GPA of freed memory: %d", r);
		munmap(ref, 4 * MiB);
		munmap(m1, 4 * MiB);
	}
	if (m2)
		munmap(m2, 2 * PG);
	m1 = mmap(NULL, PG, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)c4.mmap_offset);
	CHECK(m1 == MAP_FAILED, "freed token still mappable");
	if (m3)
		munmap(m3, 3 * MiB + 5);
	CHECK(host_free(fd, nc.mmap_offset) == 0, "HOST_FREE 3 MiB");

	/* A mapping outlives close(fd). */
	int fd2 = xopen();

	r = host_alloc(fd2, 64 * 1024, 0, &a);
	m1 = r ? NULL : map_alloc(fd2, a.mmap_offset, 64 * 1024);
	close(fd2);
	if (m1) {
		memset(m1, 0x3c, 64 * 1024);
		CHECK(m1[64 * 1024 - 1] == 0x3c, "mapping after close");
		munmap(m1, 64 * 1024);
	}

	/* How many contiguous 4 MiB blocks can we get? (informational) */
	struct qcuda_host_alloc blocks[64];
	int n4 = 0;

	while (n4 < 64 && host_alloc(fd, 4 * MiB, QCUDA_HOST_CONTIGUOUS, &blocks[n4]) == 0)
		n4++;
	printf("  contiguous: 4 MiB ok, 4 MiB+1 ENOMEM; %d x 4 MiB blocks obtained%s\n", n4,
	       n4 == 64 ? " (stopped at 64)" : "");
	CHECK(n4 > 0, "no contiguous 4 MiB block at all");
	while (n4--)
		CHECK(host_free(fd, blocks[n4].mmap_offset) == 0, "free block %d", n4);
}

/* ---- HOST_REGISTER / UNREGISTER / GPA ---- */

static void test_register(int fd)
{
	uint8_t *buf = xmap(MiB + 2 * PG), *thp;
	uint64_t g, g2;
	int r;

	memset(buf, 1, MiB + 2 * PG);
	r = host_register(fd, buf + 100, MiB, &g);
	CHECK(r == 0, "register 1 MiB at +100: %d", r);
	CHECK((g != 0) == phys_contig(buf + 100, MiB) && (!g || g == phys_of(buf + 100)),
	      "register gpa %#" PRIx64 " vs pagemap", g);
	CHECK(host_register(fd, buf + PG, PG, NULL) == -EEXIST, "overlapping register");
	CHECK(host_register(fd, buf, 101, NULL) == -EEXIST, "register overlapping the start");
	r = gpa_of(fd, buf + 5000, 10, &g2);
	CHECK(r == 0 && g2 == phys_of(buf + 5000), "GPA inside one page: %d %#" PRIx64, r, g2);
	r = gpa_of(fd, buf + 100 + MiB - 10, 20, &g2);
	CHECK(r == -EINVAL, "GPA running past the registration: %d", r);
	CHECK(host_unregister(fd, buf) == -EINVAL, "unregister of a wrong address");
	CHECK(host_unregister(fd, buf + 100) == 0, "unregister");
	CHECK(host_unregister(fd, buf + 100) == -EINVAL, "second unregister");
	r = gpa_of(fd, buf + 5000, 10, &g2);
	CHECK(r == -EINVAL, "GPA after unregister: %d", r);

	CHECK(host_register(fd, buf, 0, NULL) == -EINVAL, "register size 0");
	struct qcuda_host_register hr = { .addr = (uintptr_t)buf, .size = PG, .flags = 1 };
	CHECK((ioctl(fd, QCUDA_IOC_HOST_REGISTER, &hr) ? -errno : 0) == -EINVAL, "register flags");
	CHECK(host_register(fd, NULL, PG, NULL) == -EFAULT, "register NULL");
	CHECK(host_register(fd, (void *)-4096l, PG, NULL) == -EFAULT, "register kernel address");
	munmap(buf + MiB + PG, PG);
	CHECK(host_register(fd, buf + MiB, 2 * PG, NULL) == -EFAULT, "register into a hole");
	mprotect(buf, PG, PROT_READ);
	CHECK(host_register(fd, buf, PG, NULL) == -EFAULT, "register read-only memory");
	munmap(buf, MiB + PG);

	/* A transparent huge page is 2 MiB of contiguous memory. */
	thp = xmap(4 * MiB);
	uint8_t *t2 = (uint8_t *)(((uintptr_t)thp + 2 * MiB - 1) & ~(2 * MiB - 1));

	madvise(t2, 2 * MiB, MADV_HUGEPAGE);
	memset(t2, 7, 2 * MiB);
	r = host_register(fd, t2, 2 * MiB, &g);
	CHECK(r == 0 && (g != 0) == phys_contig(t2, 2 * MiB), "register THP: %d gpa %#" PRIx64, r, g);
	printf("  2 MiB THP-backed range: %s\n", g ? "contiguous" : "not contiguous (no THP)");
	CHECK(host_unregister(fd, t2) == 0, "unregister THP");
	munmap(thp, 4 * MiB);

	/* Hugetlb pages, where the admin reserved some (informational). */
	static const struct { size_t sz; int flag; const char *name; } huge[] = {
		{ 2 * MiB, 21 << MAP_HUGE_SHIFT, "2 MiB" },
		{ 1024 * MiB, 30 << MAP_HUGE_SHIFT, "1 GiB" },
	};
	for (unsigned int i = 0; i < 2; i++) {
		void *h = mmap(NULL, huge[i].sz, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | huge[i].flag, -1, 0);

		if (h == MAP_FAILED) {
			printf("  hugetlb %s: none reserved\n", huge[i].name);
			continue;
		}
		memset(h, 1, huge[i].sz);
		r = host_register(fd, h, huge[i].sz, &g);
		CHECK(r == 0 && g && g == phys_of(h), "register hugetlb %s: %d gpa %#" PRIx64, huge[i].name, r, g);
		printf("  hugetlb %s page registered: gpa %#" PRIx64 " (contiguous)\n", huge[i].name, g);
		CHECK(host_unregister(fd, h) == 0, "unregister hugetlb");
		munmap(h, huge[i].sz);
	}

	/* Registering our own HOST_ALLOC mapping works too. */
	struct qcuda_host_alloc a;

	if (host_alloc(fd, 64 * 1024, QCUDA_HOST_CONTIGUOUS, &a) == 0) {
		uint8_t *m = map_alloc(fd, a.mmap_offset, 64 * 1024);

		if (m) {
			r = host_register(fd, m, 64 * 1024, &g);
			CHECK(r == 0 && g == a.gpa, "register of a HOST_ALLOC mapping: %d %#" PRIx64, r, g);
			CHECK(host_unregister(fd, m) == 0, "unregister");
			munmap(m, 64 * 1024);
		}
		CHECK(host_free(fd, a.mmap_offset) == 0, "free");
	}
}

/* ---- with the backend: data round trips ---- */

static uint64_t seed = 100;

/* HTOD n bytes from src+so to dptr+doff, DTOH back into dst+dso; every
 * byte, and the bytes around the destination, checked. */
static void roundtrip(int fd, uint64_t dptr, uint64_t doff, size_t n, uint8_t *src, size_t so,
		      uint8_t *dst, size_t dso, double *t_to, double *t_from)
{
	uint32_t st;
	ssize_t d;
	double t0;
	int r;

	fill(src + so, n, seed++);
	memset(dst + dso - (dso ? 1 : 0), 0xa5, n + 16 + (dso ? 1 : 0));
	t0 = now();
	r = copy(fd, true, dptr + doff, src + so, n, &st);
	if (t_to)
		*t_to = now() - t0;
	CHECK(r == 0 && st == 0, "HTOD %zu bytes (src +%zu, dev +%" PRIu64 "): ret %d status %u", n, so, doff, r, st);
	t0 = now();
	r = copy(fd, false, dptr + doff, dst + dso, n, &st);
	if (t_from)
		*t_from = now() - t0;
	CHECK(r == 0 && st == 0, "DTOH %zu bytes (dst +%zu): ret %d status %u", n, dso, r, st);
	d = first_diff(src + so, dst + dso, n);
	CHECK(d < 0, "%zu bytes (src +%zu dst +%zu dev +%" PRIu64 "): first wrong byte at %zd: %#x != %#x",
	      n, so, dso, doff, d, d < 0 ? 0 : dst[dso + d], d < 0 ? 0 : src[so + d]);
	CHECK((!dso || dst[dso - 1] == 0xa5) && dst[dso + n] == 0xa5 && dst[dso + n + 15] == 0xa5,
	      "%zu bytes at +%zu: bytes around the destination overwritten", n, dso);
}

static void test_copies(int fd)
{
	static const struct { size_t n, so, dso; uint64_t doff; } cases[] = {
		{ 1, 0, 0, 0 }, { 1, 4095, 4095, 1 }, { 2, 4095, 4095, 0 }, { 3, 4094, 1, 5 },
		{ 4095, 1, 0, 0 }, { 4096, 0, 0, 0 }, { 4096, 1, 4095, 0 }, { 4097, 4095, 7, 3 },
		{ 12, 4090, 4090, 0 }, { 65539, 100, 3000, 1 },
		{ QCUDA_CHUNK - 1, 1, 0, 0 }, { QCUDA_CHUNK, 0, 0, 0 }, { QCUDA_CHUNK, 4095, 1, 0 },
		{ QCUDA_CHUNK + 1, 4095, 1, 5 }, { 2 * QCUDA_CHUNK - 4096, 2048, 2048, 0 },
		{ 3 * QCUDA_CHUNK + 12345, 17, 4000, 0 },
	};
	size_t room = big + 2 * PG;
	uint8_t *src = xmap(room), *dst = xmap(room);
	uint64_t dptr = dmalloc(fd, big + PG);
	double tt, tf;
	uint32_t st;
	int r;

	for (unsigned int i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		roundtrip(fd, dptr, cases[i].doff, cases[i].n, src, cases[i].so, dst, cases[i].dso, NULL, NULL);

	roundtrip(fd, dptr, 0, big, src, 0, dst, 0, &tt, &tf);
	printf("  %" PRIu64 " MiB aligned: HTOD %.2f s (%.0f MB/s), DTOH %.2f s (%.0f MB/s)\n", big / MiB,
	       tt, big / tt / 1e6, tf, big / tf / 1e6);
	roundtrip(fd, dptr, 7, big - 7, src, 1, dst, 4095, &tt, &tf);
	printf("  %" PRIu64 " MiB - 7 unaligned: HTOD %.2f s, DTOH %.2f s\n", big / MiB, tt, tf);
	/* Warm: the device memory is touched, the host pages are present. */
	double best[2] = { 1e9, 1e9 };

	for (int i = 0; i < 6; i++) {
		double t0 = now();

		r = copy(fd, i & 1, dptr, (i & 1) ? dst : src, big, &st);
		CHECK(r == 0 && st == 0, "timed copy: %d %u", r, st);
		if (now() - t0 < best[i & 1])
			best[i & 1] = now() - t0;
	}
	printf("  %" PRIu64 " MiB warm, best of 3: HTOD %.1f ms (%.0f MB/s), DTOH %.1f ms (%.0f MB/s)\n",
	       big / MiB, best[1] * 1e3, big / best[1] / 1e6, best[0] * 1e3, big / best[0] / 1e6);

	r = copy(fd, true, dptr, src, 0, &st);
	CHECK(r == 0 && st == 0, "copy of 0 bytes: %d status %u", r, st);
	/* CUDA errors are a status, not an errno; every chunk's counts. */
	r = copy(fd, true, dptr + big + PG + 4096, src, 100, &st);
	CHECK(r == 0 && st == CUDA_ERROR_INVALID_VALUE, "HTOD outside the allocation: %d status %u", r, st);
	r = copy(fd, false, dptr + big - QCUDA_CHUNK - MiB, dst, QCUDA_CHUNK + 2 * MiB, &st);
	CHECK(r == 0 && st == CUDA_ERROR_INVALID_VALUE, "DTOH running past the allocation: %d status %u", r, st);
	/* A bad page in chunk 2: chunk 1 goes out, the call fails with EFAULT. */
	munmap(src + QCUDA_CHUNK + 2 * MiB, PG);
	r = copy(fd, true, dptr, src, 2 * QCUDA_CHUNK, &st);
	CHECK(r == -EFAULT, "HTOD with a hole in chunk 2: %d", r);

	/* The longest chains the driver sends: an unaligned chunk of pages none
	 * of which follows the one before (faulted in alternately with another
	 * mapping's): 4097 data descriptors, an indirect table of 4100. */
	size_t ns = QCUDA_CHUNK + 2 * PG, apart = 0;
	uint8_t *sa = xmap(ns), *sb = xmap(ns);

	for (size_t i = 0; i < ns; i += PG)
		sa[i] = sb[i] = 1;
	for (size_t i = PG; i < ns; i += PG)
		apart += phys_of(sa + i) != phys_of(sa + i - PG) + PG;
	printf("  scattered pages: %zu of %zu not next to the one before\n", apart, ns / PG - 1);
	fill(sa, ns, 33);
	r = copy(fd, true, dptr + 5, sa + 7, QCUDA_CHUNK, &st);
	CHECK(r == 0 && st == 0, "HTOD of a chunk of scattered pages: %d %u", r, st);
	r = copy(fd, false, dptr + 5, sb + PG - 1, QCUDA_CHUNK, &st);
	CHECK(r == 0 && st == 0, "DTOH into a chunk of scattered pages: %d %u", r, st);
	CHECK(first_diff(sa + 7, sb + PG - 1, QCUDA_CHUNK) < 0, "scattered pages: round trip differs");
	munmap(sa, ns);
	munmap(sb, ns);

	/* Pinned memory from HOST_ALLOC as the host side of copies (two chunks). */
	struct qcuda_host_alloc a, b;
	const size_t na = QCUDA_CHUNK + 9 * MiB + 3;

	if (host_alloc(fd, na, 0, &a) == 0 && host_alloc(fd, 4 * MiB, QCUDA_HOST_CONTIGUOUS, &b) == 0) {
		uint8_t *ma = map_alloc(fd, a.mmap_offset, na), *mb = map_alloc(fd, b.mmap_offset, 4 * MiB);

		if (ma && mb) {
			fill(ma, na, 77);
			r = copy(fd, true, dptr, ma, na, &st);
			CHECK(r == 0 && st == 0, "HTOD from HOST_ALLOC memory: %d %u", r, st);
			r = copy(fd, false, dptr + 5 * MiB, mb + 1, 4 * MiB - 1, &st);
			CHECK(r == 0 && st == 0, "DTOH into HOST_ALLOC memory: %d %u", r, st);
			CHECK(first_diff(ma + 5 * MiB, mb + 1, 4 * MiB - 1) < 0, "HOST_ALLOC round trip differs");
		}
		if (ma)
			munmap(ma, na);
		if (mb)
			munmap(mb, 4 * MiB);
		host_free(fd, a.mmap_offset);
		host_free(fd, b.mmap_offset);
	}
	struct qcuda_args_ptr fp = { .ptr = dptr };

	r = call(fd, QCUDA_CMD_FREE, &fp, sizeof(fp), NULL, 0, QCUDA_DATA_NONE, NULL, 0, NULL);
	CHECK(r == 0, "FREE: %d", r);
	munmap(src, room);
	munmap(dst, room);
}

/* HOST_MAP: the GPU writes into our pages through the gpa we named. */
static void test_host_map(int fd)
{
	struct qcuda_host_alloc a;
	struct qcuda_call c;
	uint64_t g, dptr, hptr;
	uint8_t *m, pat[3000], *page;
	int r;

	if (host_alloc(fd, 64 * 1024, QCUDA_HOST_CONTIGUOUS, &a)) {
		CHECK(0, "HOST_ALLOC 64 KiB contiguous");
		return;
	}
	m = map_alloc(fd, a.mmap_offset, 64 * 1024);
	if (!m)
		return;
	r = gpa_of(fd, m, 64 * 1024, &g);
	CHECK(r == 0 && g == a.gpa, "GPA: %d", r);
	struct qcuda_args_host_map hm = { .gpa = g, .size = 64 * 1024 };

	r = call(fd, QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0 && c.value, "HOST_MAP: %d status %u", r, c.status);
	hptr = c.value;
	struct qcuda_args_memset ms = { .dst = hptr + 100, .size = 1000, .value = 0x5a };

	r = call(fd, QCUDA_CMD_MEMSET, &ms, sizeof(ms), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0, "MEMSET through the host mapping: %d %u", r, c.status);
	CHECK(m[99] == 0 && m[100] == 0x5a && m[1099] == 0x5a && m[1100] == 0, "memset not seen in our pages");

	dptr = dmalloc(fd, 4096);
	fill(pat, sizeof(pat), 5);
	uint32_t st;

	copy(fd, true, dptr, pat, sizeof(pat), &st);
	struct qcuda_args_memcpy dd = { .dst = hptr + 60000, .src = dptr, .size = sizeof(pat) };

	r = call(fd, QCUDA_CMD_MEMCPY_DTOD, &dd, sizeof(dd), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0 && !memcmp(m + 60000, pat, sizeof(pat)), "DTOD into the host mapping: %d %u",
	      r, c.status);

	CHECK(host_free(fd, a.mmap_offset) == -EBUSY, "HOST_FREE while mapped into the device");
	struct qcuda_args_ptr up = { .ptr = hptr };

	r = call(fd, QCUDA_CMD_HOST_UNMAP, &up, sizeof(up), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0, "HOST_UNMAP: %d %u", r, c.status);
	CHECK(host_free(fd, a.mmap_offset) == 0, "HOST_FREE after HOST_UNMAP");
	munmap(m, 64 * 1024);

	/* One page of a registered range, then DEVICE_RESET drops the hold. */
	int fd2 = xopen();

	page = xmap(PG);
	memset(page, 0, PG);
	CHECK(host_register(fd2, page, PG, &g) == 0 && g, "register one page");
	hm = (struct qcuda_args_host_map){ .gpa = g + 16, .size = 32 };
	r = call(fd2, QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0, "HOST_MAP of a registered page: %d %u", r, c.status);
	hm.size = PG;
	r = call(fd2, QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == -EINVAL, "HOST_MAP running past the registered page: %d", r);
	CHECK(host_unregister(fd2, page) == -EBUSY, "unregister while mapped");
	r = call(fd2, QCUDA_CMD_DEVICE_RESET, NULL, 0, NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0, "DEVICE_RESET: %d %u", r, c.status);
	CHECK(host_unregister(fd2, page) == 0, "unregister after DEVICE_RESET");
	close(fd2);
	munmap(page, PG);
}

static void test_misc_calls(int fd)
{
	struct qcuda_out_hello h;
	struct qcuda_call c;
	int r;

	r = call(fd, 999, NULL, 0, NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == QCUDA_ST_UNKNOWN_CMD, "unknown command: %d status %#x", r, c.status);
	struct qcuda_args_hello ha = { .proto_version = QCUDA_PROTO_VERSION, .cuda_version = 13000 };

	r = call(fd, QCUDA_CMD_HELLO, &ha, sizeof(ha), (void *)8, sizeof(h), QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == -EFAULT, "HELLO with out at 8: %d", r);
	r = call(fd, QCUDA_CMD_HELLO, &ha, sizeof(ha), &h, sizeof(h) + 100, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == 0 && c.out_written == sizeof(h), "HELLO with more out room: %d %u %u",
	      r, c.status, c.out_written);
	r = call(fd, QCUDA_CMD_MALLOC, &ha, sizeof(ha) - 1, NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == QCUDA_ST_BAD_REQUEST, "MALLOC with short args: %d %#x", r, c.status);
}

/* Each open file is a session; closing it frees its device memory at once. */
static void test_sessions(int fd)
{
	struct qcuda_info i1, i2;
	int fd2 = xopen();
	uint64_t f0, f1, f2;

	CHECK(!ioctl(fd2, QCUDA_IOC_INFO, &i2) && !i2.session, "session before the first CALL");
	f0 = meminfo(fd).free;
	dmalloc(fd2, 32 * MiB);
	f1 = meminfo(fd).free;
	CHECK(!ioctl(fd, QCUDA_IOC_INFO, &i1) && !ioctl(fd2, QCUDA_IOC_INFO, &i2) && i1.session && i2.session &&
	      i1.session != i2.session, "sessions %#" PRIx64 " %#" PRIx64, (uint64_t)i1.session, (uint64_t)i2.session);
	close(fd2);
	f2 = meminfo(fd).free;
	CHECK(f1 == f0 - 32 * MiB && f2 == f0, "device free %" PRIu64 " -> %" PRIu64 " -> %" PRIu64 " after close",
	      f0, f1, f2);
}

/* A process killed in the middle of a big copy: its session is still closed. */
static void test_kill(int fd)
{
	uint64_t f0 = meminfo(fd).free, f;
	int p[2];
	pid_t pid;
	char ch;
	double t0;

	if (pipe(p))
		exit(2);
	pid = fork();
	if (pid == 0) {
		int cfd = xopen();
		uint8_t *buf = xmap(64 * MiB);
		uint64_t d;
		uint32_t st;

		memset(buf, 1, 64 * MiB);
		d = dmalloc(cfd, 128 * MiB);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		for (;;) {
			copy(cfd, true, d, buf, 64 * MiB, &st);
			copy(cfd, false, d, buf, 64 * MiB, &st);
		}
	}
	close(p[1]);
	CHECK(read(p[0], &ch, 1) == 1, "child did not start");
	f = meminfo(fd).free;
	CHECK(f == f0 - 128 * MiB, "child's allocation not seen: %" PRIu64 " -> %" PRIu64, f0, f);
	usleep(400 * 1000);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	t0 = now();
	while ((f = meminfo(fd).free) != f0 && now() - t0 < 30)
		usleep(10 * 1000);
	CHECK(f == f0, "killed child's memory not freed after %.1f s", now() - t0);
	printf("  SIGKILL mid-copy: session closed %.0f ms after waitpid\n", (now() - t0) * 1e3);
	close(p[0]);
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

/* Ordinary signals do not make calls fail (killable waits). */
static void test_signals(int fd)
{
	struct sigaction sa = { .sa_handler = on_alarm };	/* no SA_RESTART */
	struct itimerval it = { { 0, 500 }, { 0, 500 } };
	size_t n = 32 * MiB;
	uint8_t *a = xmap(n), *b = xmap(n);
	uint64_t d = dmalloc(fd, n);
	uint32_t st;
	int r, bad = 0;

	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	for (int i = 0; i < 3; i++) {
		fill(a, n, 900 + i);
		r = copy(fd, true, d, a, n, &st);
		bad += r != 0 || st != 0;
		r = copy(fd, false, d, b, n, &st);
		bad += r != 0 || st != 0;
		bad += memcmp(a, b, n) != 0;
		for (int k = 0; k < 50; k++) {
			struct qcuda_nop nop = { .queue = QCUDA_QUEUE_ANY, .cookie = k };

			bad += ioctl(fd, QCUDA_IOC_NOP, &nop) != 0 || nop.cookie != (uint64_t)k;
		}
	}
	memset(&it, 0, sizeof(it));
	setitimer(ITIMER_REAL, &it, NULL);
	CHECK(!bad && alarms > 0, "%d failures under SIGALRM (%d alarms)", bad, (int)alarms);
	printf("  %d SIGALRMs during copies and NOPs, no call failed\n", (int)alarms);
	munmap(a, n);
	munmap(b, n);
}

struct worker {
	pthread_t tid;
	int fd, id;
};

static void *run_worker(void *arg)
{
	struct worker *w = arg;
	size_t n = 6 * MiB + 333 * w->id;
	uint8_t *a = xmap(n + PG), *b = xmap(n + PG);
	uint64_t d = dmalloc(w->fd, n);
	uint32_t st;
	int r;

	for (int i = 0; i < 3; i++) {
		fill(a + w->id, n, 1000 * w->id + i);
		r = copy(w->fd, true, d, a + w->id, n, &st);
		CHECK(r == 0 && st == 0, "thread %d HTOD: %d %u", w->id, r, st);
		r = copy(w->fd, false, d, b + 3 * w->id, n, &st);
		CHECK(r == 0 && st == 0, "thread %d DTOH: %d %u", w->id, r, st);
		CHECK(!memcmp(a + w->id, b + 3 * w->id, n), "thread %d data differs", w->id);
	}
	munmap(a, n + PG);
	munmap(b, n + PG);
	return NULL;
}

static void test_threads(int fd)
{
	struct worker w[6];

	for (int i = 0; i < 6; i++) {
		w[i].fd = fd;
		w[i].id = i;
		pthread_create(&w[i].tid, NULL, run_worker, &w[i]);
	}
	for (int i = 0; i < 6; i++)
		pthread_join(w[i].tid, NULL);
}

/* -l: copy until a call fails (for device removal tests); 0 = killed first. */
static int loop_copies(void)
{
	int fd = xopen();
	size_t n = 64 * MiB;
	uint8_t *buf = xmap(n);
	uint64_t d = dmalloc(fd, n);
	unsigned long i;
	uint32_t st;
	int r = 0;

	memset(buf, 1, n);
	printf("looping\n");
	for (i = 0; !r; i++)
		r = copy(fd, i & 1, d, buf, n, &st);
	printf("call_test: copy %lu failed: %s\n", i, strerror(-r));
	r = ioctl(fd, QCUDA_IOC_NOP, &(struct qcuda_nop){ .queue = QCUDA_QUEUE_ANY }) ? errno : 0;
	printf("call_test: NOP after that: %s\n", strerror(r));
	close(fd);
	return 0;
}

/* The uapi layout: the same on 32- and 64-bit user space. */
_Static_assert(sizeof(struct qcuda_call) == 64 && offsetof(struct qcuda_call, status) == 48, "qcuda_call");
_Static_assert(sizeof(struct qcuda_info) == 40, "qcuda_info");
_Static_assert(sizeof(struct qcuda_host_alloc) == 32, "qcuda_host_alloc");
_Static_assert(sizeof(struct qcuda_host_register) == 32, "qcuda_host_register");
_Static_assert(sizeof(struct qcuda_gpa) == 24, "qcuda_gpa");

/* ---- main ---- */

#define RUN(fn, fd)								\
	do {									\
		unsigned long f0 = failures, c0 = checks;			\
		double t0 = now();						\
		fn(fd);								\
		printf("%s %s (%lu checks, %.2f s)\n", failures == f0 ? "ok  " : "FAIL", #fn, \
		       checks - c0, now() - t0);				\
		fflush(stdout);							\
	} while (0)

int main(int argc, char **argv)
{
	struct qcuda_args_hello ha = { .proto_version = QCUDA_PROTO_VERSION, .cuda_version = 13000 };
	struct qcuda_out_hello h;
	struct qcuda_info info;
	struct qcuda_call c;
	int opt, fd, r;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "b:d:F:ilh")) != -1) {
		switch (opt) {
		case 'b': big = strtoull(optarg, NULL, 0) * MiB; break;
		case 'd': dev = optarg; break;
		case 'F': use_fd = atoi(optarg); break;
		case 'l': return loop_copies();
		case 'i': {
			struct qcuda_out_mem_info m = meminfo(xopen());

			printf("device memory: free %" PRIu64 " total %" PRIu64 "\n", (uint64_t)m.free,
			       (uint64_t)m.total);
			return failures ? 1 : 0;
		}
		default:
			fprintf(stderr, "usage: %s [-b big_MiB (100)] [-d device | -F fd] [-l | -i]\n", argv[0]);
			return 2;
		}
	}
	if (big < 4 * QCUDA_CHUNK)	/* the chunk cases of test_copies() */
		big = 4 * QCUDA_CHUNK;
	fd = xopen();
	if (ioctl(fd, QCUDA_IOC_INFO, &info)) {
		printf("call_test: QCUDA_IOC_INFO: %s\n", strerror(errno));
		return 2;
	}
	printf("device %s: %u queues, vring %u, proto %u, session %#" PRIx64 "\n", dev, info.num_queues,
	       info.vring_size, info.proto_version, (uint64_t)info.session);
	CHECK(info.proto_version == QCUDA_PROTO_VERSION && !info.session, "proto %u session %#" PRIx64
	      " before the first CALL", info.proto_version, (uint64_t)info.session);

	RUN(test_validation, fd);
	RUN(test_host_alloc, fd);
	RUN(test_register, fd);

	r = call(fd, QCUDA_CMD_HELLO, &ha, sizeof(ha), &h, sizeof(h), QCUDA_DATA_NONE, NULL, 0, &c);
	if (r == 0 && c.status == 0 && c.out_written == sizeof(h)) {
		CHECK(!ioctl(fd, QCUDA_IOC_INFO, &info) && info.session, "no session after HELLO");
		printf("backend: proto %u, driver %u, %u device(s), caps %#" PRIx64 "; session %#" PRIx64 "\n",
		       h.proto_version, h.driver_version, h.device_count, (uint64_t)h.capabilities,
		       (uint64_t)info.session);
		RUN(test_misc_calls, fd);
		RUN(test_copies, fd);
		RUN(test_host_map, fd);
		RUN(test_sessions, fd);
		RUN(test_signals, fd);
		RUN(test_threads, fd);
		RUN(test_kill, fd);
	} else {
		printf("SKIP backend tests: HELLO answered ret %d status %#x\n", r, c.status);
	}
	close(fd);

	if (failures) {
		printf("call_test: FAIL %lu of %lu checks\n", failures, checks);
		return 1;
	}
	printf("call_test: PASS %lu checks\n", checks);
	return 0;
}
