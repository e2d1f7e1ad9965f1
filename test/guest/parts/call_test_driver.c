// SPDX-License-Identifier: MIT
/*
 * call_test's checks of what the qcuda driver decides alone (no backend
 * needed): argument checks, HOST_ALLOC/mmap/HOST_FREE, HOST_REGISTER, GPA.
 */
#include "call_test.h"

/* ---- argument checks (driver only) ---- */

void test_validation(int fd)
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
	munmap(two + PG, PG); /* now a hole after the first page */
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

void test_host_alloc(int fd)
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
	m2 = map_alloc(fd, c4.mmap_offset + PG, 2 * PG); /* a window into it */
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
		CHECK(r == 0 && g == phys_of(m3 + 7), "GPA of one page: %d %#" PRIx64 " pagemap %#" PRIx64, r, g,
		      phys_of(m3 + 7));
		r = gpa_of(fd, m3, 3 * MiB, &g);
		CHECK((r == 0) == phys_contig(m3, 3 * MiB), "GPA of 3 MiB %d, pagemap contiguous %d", r,
		      phys_contig(m3, 3 * MiB));
		CHECK((nc.gpa != 0) == phys_contig(m3, 3 * MiB + 5), "alloc gpa %#" PRIx64 " vs pagemap",
		      (uint64_t)nc.gpa);
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

void test_register(int fd)
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
	static const struct {
		size_t sz;
		int flag;
		const char *name;
	} huge[] = {
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
