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
#include "parts/call_test.h"

const char *dev = "/dev/qcuda0";
uint64_t big = 100 * MiB;
int use_fd = -1;
unsigned long checks, failures;
pthread_mutex_t count_lock = PTHREAD_MUTEX_INITIALIZER;

double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int xopen(void)
{
	int fd = use_fd >= 0 ? dup(use_fd) : open(dev, O_RDWR | O_CLOEXEC);

	if (fd < 0) {
		printf("call_test: cannot open %s: %s\n", dev, strerror(errno));
		exit(2);
	}
	return fd;
}

void *xmap(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		printf("call_test: mmap %zu: %s\n", n, strerror(errno));
		exit(2);
	}
	return p;
}

/* ioctl(QCUDA_IOC_CALL): 0 or -errno; the reply in *c. */
int call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, uint32_t dir,
	 const void *data, uint64_t data_len, struct qcuda_call *c)
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

uint64_t dmalloc(int fd, uint64_t size)
{
	struct qcuda_args_malloc a = { .size = size };
	struct qcuda_call c;
	int r = call(fd, QCUDA_CMD_MALLOC, &a, sizeof(a), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);

	CHECK(r == 0 && c.status == 0 && c.value, "MALLOC %" PRIu64 ": ret %d status %u", size, r, c.status);
	return c.value;
}

/* MEMCPY_HTOD / _DTOH: ioctl result, status in *st. */
int copy(int fd, bool to_dev, uint64_t dptr, void *host, uint64_t n, uint32_t *st)
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

struct qcuda_out_mem_info meminfo(int fd)
{
	struct qcuda_out_mem_info m = { 0 };
	struct qcuda_call c;
	int r = call(fd, QCUDA_CMD_MEM_GET_INFO, NULL, 0, &m, sizeof(m), QCUDA_DATA_NONE, NULL, 0, &c);

	CHECK(r == 0 && c.status == 0 && c.out_written == sizeof(m), "MEM_GET_INFO: ret %d status %u", r, c.status);
	return m;
}

/* Pseudo-random bytes that never repeat at page or chunk periods. */
void fill(uint8_t *p, size_t n, uint64_t seed)
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

ssize_t first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
	if (!memcmp(a, b, n))
		return -1;
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return (ssize_t)i;
	return -1;
}

/* Physical address of a virtual address (root: /proc/self/pagemap), 0 if unknown. */
uint64_t phys_of(const void *va)
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
bool phys_contig(const uint8_t *va, size_t n)
{
	uintptr_t first = (uintptr_t)va & ~(PG - 1), last = ((uintptr_t)va + n - 1) & ~(PG - 1);
	uint64_t p0 = phys_of((void *)first);

	for (uintptr_t a = first; a <= last; a += PG)
		if (!p0 || phys_of((void *)a) != p0 + (a - first))
			return false;
	return true;
}

int host_alloc(int fd, uint64_t size, uint32_t flags, struct qcuda_host_alloc *a)
{
	memset(a, 0, sizeof(*a));
	a->size = size;
	a->flags = flags;
	return ioctl(fd, QCUDA_IOC_HOST_ALLOC, a) ? -errno : 0;
}

int host_free(int fd, uint64_t token)
{
	struct qcuda_host_free f = { .mmap_offset = token };

	return ioctl(fd, QCUDA_IOC_HOST_FREE, &f) ? -errno : 0;
}

int host_register(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_host_register r = { .addr = (uintptr_t)addr, .size = size };
	int ret = ioctl(fd, QCUDA_IOC_HOST_REGISTER, &r) ? -errno : 0;

	if (gpa)
		*gpa = r.gpa;
	return ret;
}

int host_unregister(int fd, const void *addr)
{
	struct qcuda_host_unregister u = { .addr = (uintptr_t)addr };

	return ioctl(fd, QCUDA_IOC_HOST_UNREGISTER, &u) ? -errno : 0;
}

int gpa_of(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_gpa g = { .addr = (uintptr_t)addr, .size = size };
	int ret = ioctl(fd, QCUDA_IOC_GPA, &g) ? -errno : 0;

	*gpa = ret ? 0 : g.gpa;
	return ret;
}

void *map_alloc(int fd, uint64_t token, size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)token);

	CHECK(p != MAP_FAILED, "mmap token %#" PRIx64 " len %zu: %s", token, len, strerror(errno));
	return p == MAP_FAILED ? NULL : p;
}

/* The uapi layout: the same on 32- and 64-bit user space. */
_Static_assert(sizeof(struct qcuda_call) == 64 && offsetof(struct qcuda_call, status) == 48, "qcuda_call");
_Static_assert(sizeof(struct qcuda_info) == 40, "qcuda_info");
_Static_assert(sizeof(struct qcuda_host_alloc) == 32, "qcuda_host_alloc");
_Static_assert(sizeof(struct qcuda_host_register) == 32, "qcuda_host_register");
_Static_assert(sizeof(struct qcuda_gpa) == 24, "qcuda_gpa");

/* ---- main ---- */

#define RUN(fn, fd)                                                                                        \
	do {                                                                                               \
		unsigned long f0 = failures, c0 = checks;                                                  \
		double t0 = now();                                                                         \
		fn(fd);                                                                                    \
		printf("%s %s (%lu checks, %.2f s)\n", failures == f0 ? "ok  " : "FAIL", #fn, checks - c0, \
		       now() - t0);                                                                        \
		fflush(stdout);                                                                            \
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
		case 'b':
			big = strtoull(optarg, NULL, 0) * MiB;
			break;
		case 'd':
			dev = optarg;
			break;
		case 'F':
			use_fd = atoi(optarg);
			break;
		case 'l':
			return loop_copies();
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
	if (big < 4 * QCUDA_CHUNK) /* the chunk cases of test_copies() */
		big = 4 * QCUDA_CHUNK;
	fd = xopen();
	if (ioctl(fd, QCUDA_IOC_INFO, &info)) {
		printf("call_test: QCUDA_IOC_INFO: %s\n", strerror(errno));
		return 2;
	}
	printf("device %s: %u queues, vring %u, proto %u, session %#" PRIx64 "\n", dev, info.num_queues,
	       info.vring_size, info.proto_version, (uint64_t)info.session);
	CHECK(info.proto_version == QCUDA_PROTO_VERSION && !info.session,
	      "proto %u session %#" PRIx64 " before the first CALL", info.proto_version, (uint64_t)info.session);

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
