// SPDX-License-Identifier: MIT
// mapreset: HOST_MAP racing DEVICE_RESET (qcuda only; it skips elsewhere).
// While a HOST_MAP of a HOST_ALLOC is in flight its memory must stay held
// (HOST_FREE answers EBUSY), and a DEVICE_RESET that completes meanwhile
// drops only the mappings that had completed: never the hold of the one in
// flight, which the driver keeps or drops when its reply comes. One thread
// maps, checks that HOST_FREE is refused and unmaps, over and over, through
// raw ioctls; another resets the device all the while.
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/ioctl.h>
#include <time.h>

#include "qctest.h"

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

#define ROUNDS 6000
/* ... or as many as fit in this time: on the GPU each reset ends the
 * session's worker and the next call starts one (about half a second). */
#define SECONDS 20
#define SIZE (64 << 10)

static int qfd = -1;
static int stop, resets_ok, mapped;
/* Bumped before and after each reset: odd while one is in progress. */
static unsigned int reset_seq;

/* One QCUDA_IOC_CALL: 0 if the device answered success, else -1. */
static int call(uint32_t cmd, const void *args, uint32_t args_len, uint64_t *value)
{
	struct qcuda_call c;

	memset(&c, 0, sizeof(c));
	c.cmd = cmd;
	c.args = (uintptr_t)args;
	c.args_len = args_len;
	if (ioctl(qfd, QCUDA_IOC_CALL, &c) || c.status)
		return -1;
	if (value)
		*value = c.value;
	return 0;
}

/* Resets at random moments, with gaps in between, some long. */
static void *resetter(void *arg)
{
	unsigned int seed = 1;
	int maps_seen = 0, barren = 0;

	(void)arg;
	while (!__atomic_load_n(&stop, __ATOMIC_RELAXED)) {
		__atomic_add_fetch(&reset_seq, 1, __ATOMIC_SEQ_CST);
		if (call(QCUDA_CMD_DEVICE_RESET, NULL, 0, NULL) == 0)
			resets_ok++;
		__atomic_add_fetch(&reset_seq, 1, __ATOMIC_SEQ_CST);
		/* Where a context takes long to make (a GPU worker: about half
		 * a second), resets must leave room for maps now and then. */
		barren = __atomic_load_n(&mapped, __ATOMIC_RELAXED) == maps_seen ? barren + 1 : 0;
		maps_seen = __atomic_load_n(&mapped, __ATOMIC_RELAXED);
		if (barren >= 8) {
			usleep(2000000);
			barren = 0;
			continue;
		}
		/* Now and then a long gap: rounds no reset comes near. */
		usleep(rand_r(&seed) % 8 ? rand_r(&seed) % 1000 : 20000);
	}
	return NULL;
}

/* A contiguous HOST_ALLOC (mappable); false if none could be had. */
static bool host_alloc(struct qcuda_host_alloc *a)
{
	memset(a, 0, sizeof(*a));
	a->size = SIZE;
	a->flags = QCUDA_HOST_CONTIGUOUS;
	return ioctl(qfd, QCUDA_IOC_HOST_ALLOC, a) == 0 && a->gpa;
}

int main(void)
{
	struct qcuda_host_alloc a;
	struct qcuda_args_host_map m;
	struct qcuda_host_free f;
	struct qcuda_args_ptr u;
	int freed_while_mapped = 0, i;
	pthread_t t;
	uint64_t dev;

	qt_begin("mapreset");
	if (!qt_on_qcuda()) {
		printf("SKIP: mapreset: no /dev/qcuda0 (this program drives qcuda's device directly)\n");
		return 0;
	}
	qfd = open("/dev/qcuda0", O_RDWR | O_CLOEXEC);
	if (!qt_check(qfd >= 0, "open /dev/qcuda0"))
		return qt_end();
	if (!qt_check(call(QCUDA_CMD_DEVICE_SYNC, NULL, 0, NULL) == 0, "a session"))
		return qt_end();
	if (!qt_check(host_alloc(&a), "a contiguous HOST_ALLOC of 64 KiB"))
		return qt_end();
	qt_check(pthread_create(&t, NULL, resetter, NULL) == 0, "a thread resets the device over and over");

	time_t until = time(NULL) + SECONDS;

	for (i = 0; i < ROUNDS && time(NULL) < until; i++) {
		unsigned int s0 = __atomic_load_n(&reset_seq, __ATOMIC_SEQ_CST);

		m.gpa = a.gpa;
		m.size = SIZE;
		if (call(QCUDA_CMD_HOST_MAP, &m, sizeof(m), &dev))
			continue;
		__atomic_add_fetch(&mapped, 1, __ATOMIC_RELAXED);
		f.mmap_offset = a.mmap_offset;
		if (ioctl(qfd, QCUDA_IOC_HOST_FREE, &f) == 0) {
			/* Fine if a reset ran meanwhile (it may have dropped the
			 * mapping after it completed). In a round no reset came
			 * near, only a hold lost in an earlier race lets it go. */
			if (!(s0 & 1) && __atomic_load_n(&reset_seq, __ATOMIC_SEQ_CST) == s0)
				freed_while_mapped++;
			if (!host_alloc(&a))
				break;
			continue;
		}
		u.ptr = dev;
		call(QCUDA_CMD_HOST_UNMAP, &u, sizeof(u), NULL);
	}
	__atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
	pthread_join(t, NULL);
	qt_check(i >= 10, "rounds ran");
	qt_check(mapped > 0 && resets_ok > 0, "maps and resets succeeded, racing each other");
	qt_check(freed_while_mapped == 0, "HOST_FREE refused whenever a HOST_MAP had succeeded (%d freed)",
		 freed_while_mapped);
	if (getenv("MAPRESET_VERBOSE"))
		printf("info %d maps of %d, %d resets\n", mapped, ROUNDS, resets_ok);
	close(qfd);
	return qt_end();
}
