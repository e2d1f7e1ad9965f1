// SPDX-License-Identifier: MIT
/*
 * call_test's checks that need a backend: copies checked byte by byte,
 * HOST_MAP, sessions, SIGKILL mid-copy, signals during copies, threads; and
 * -l's copy loop.
 */
#include "call_test.h"

/* ---- with the backend: data round trips ---- */

static uint64_t seed = 100;

/* HTOD n bytes from src+so to dptr+doff, DTOH back into dst+dso; every
 * byte, and the bytes around the destination, checked. */
static void roundtrip(int fd, uint64_t dptr, uint64_t doff, size_t n, uint8_t *src, size_t so, uint8_t *dst, size_t dso,
		      double *t_to, double *t_from)
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
	CHECK(d < 0, "%zu bytes (src +%zu dst +%zu dev +%" PRIu64 "): first wrong byte at %zd: %#x != %#x", n, so, dso,
	      doff, d, d < 0 ? 0 : dst[dso + d], d < 0 ? 0 : src[so + d]);
	CHECK((!dso || dst[dso - 1] == 0xa5) && dst[dso + n] == 0xa5 && dst[dso + n + 15] == 0xa5,
	      "%zu bytes at +%zu: bytes around the destination overwritten", n, dso);
}

void test_copies(int fd)
{
	static const struct {
		size_t n, so, dso;
		uint64_t doff;
	} cases[] = {
		{ 1, 0, 0, 0 },
		{ 1, 4095, 4095, 1 },
		{ 2, 4095, 4095, 0 },
		{ 3, 4094, 1, 5 },
		{ 4095, 1, 0, 0 },
		{ 4096, 0, 0, 0 },
		{ 4096, 1, 4095, 0 },
		{ 4097, 4095, 7, 3 },
		{ 12, 4090, 4090, 0 },
		{ 65539, 100, 3000, 1 },
		{ QCUDA_CHUNK - 1, 1, 0, 0 },
		{ QCUDA_CHUNK, 0, 0, 0 },
		{ QCUDA_CHUNK, 4095, 1, 0 },
		{ QCUDA_CHUNK + 1, 4095, 1, 5 },
		{ 2 * QCUDA_CHUNK - 4096, 2048, 2048, 0 },
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
	printf("  %" PRIu64 " MiB aligned: HTOD %.2f s (%.0f MB/s), DTOH %.2f s (%.0f MB/s)\n", big / MiB, tt,
	       big / tt / 1e6, tf, big / tf / 1e6);
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
	printf("  %" PRIu64 " MiB warm, best of 3: HTOD %.1f ms (%.0f MB/s), DTOH %.1f ms (%.0f MB/s)\n", big / MiB,
	       best[1] * 1e3, big / best[1] / 1e6, best[0] * 1e3, big / best[0] / 1e6);

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
void test_host_map(int fd)
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
	CHECK(r == 0 && c.status == 0 && !memcmp(m + 60000, pat, sizeof(pat)), "DTOD into the host mapping: %d %u", r,
	      c.status);

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

void test_misc_calls(int fd)
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
	CHECK(r == 0 && c.status == 0 && c.out_written == sizeof(h), "HELLO with more out room: %d %u %u", r, c.status,
	      c.out_written);
	r = call(fd, QCUDA_CMD_MALLOC, &ha, sizeof(ha) - 1, NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	CHECK(r == 0 && c.status == QCUDA_ST_BAD_REQUEST, "MALLOC with short args: %d %#x", r, c.status);
}

/* Each open file is a session; closing it frees its device memory at once. */
void test_sessions(int fd)
{
	struct qcuda_info i1, i2;
	int fd2 = xopen();
	uint64_t f0, f1, f2;

	CHECK(!ioctl(fd2, QCUDA_IOC_INFO, &i2) && !i2.session, "session before the first CALL");
	f0 = meminfo(fd).free;
	dmalloc(fd2, 32 * MiB);
	f1 = meminfo(fd).free;
	CHECK(!ioctl(fd, QCUDA_IOC_INFO, &i1) && !ioctl(fd2, QCUDA_IOC_INFO, &i2) && i1.session && i2.session &&
		      i1.session != i2.session,
	      "sessions %#" PRIx64 " %#" PRIx64, (uint64_t)i1.session, (uint64_t)i2.session);
	close(fd2);
	f2 = meminfo(fd).free;
	CHECK(f1 == f0 - 32 * MiB && f2 == f0, "device free %" PRIu64 " -> %" PRIu64 " -> %" PRIu64 " after close", f0,
	      f1, f2);
}

/* A process killed in the middle of a big copy: its session is still closed. */
void test_kill(int fd)
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
void test_signals(int fd)
{
	struct sigaction sa = { .sa_handler = on_alarm }; /* no SA_RESTART */
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

void test_threads(int fd)
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
int loop_copies(void)
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
