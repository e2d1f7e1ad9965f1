/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport (QCUDA_SHM=path): a region the backend created
 * and laid out (qcuda_shm.h) is mapped, claimed by this process, and
 * attached: the backend then serves its data area as a vhost-user
 * frontend's memory and polls its rings. From there the path is the
 * userspace transport's (transport_user.c: slots, chunks, staging, pinned
 * memory carved from the region), with polling in place of eventfds.
 *
 * What the region says is checked once here, against the file's size: a
 * region that is not the backend's, or cut short, is refused before any
 * access beyond its header could fault.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "qcuda_shm.h"
#include "transport_ops.h"
#include "vhu.h"

/* How long the backend may take to serve an attach (it polls every few ms
 * while idle; a worker's start is later, at the session's open). */
#define ATTACH_TIMEOUT_MS 10000
#define RING_BYTES (3u * 4096u)
#define MAX_RINGS 2u

static struct {
	volatile struct qcuda_shm_hdr *hdr;
	uint64_t bytes;
	uint32_t gen; /* the attach generation served to this process */
	pid_t pid;
} shm;

/* Reads the backend's layout once and checks it against the file. */
static int check_layout(const struct qcuda_shm_hdr *h, uint64_t file_bytes)
{
	if (h->magic != QCUDA_SHM_MAGIC || h->version != QCUDA_SHM_VERSION || h->hdr_bytes != QCUDA_SHM_HDR_BYTES)
		return -EPROTO;
	if (h->region_bytes > file_bytes || h->data_offset < QCUDA_SHM_HDR_BYTES || h->data_offset % 4096 ||
	    h->data_bytes < MAX_RINGS * RING_BYTES || h->data_bytes > h->region_bytes ||
	    h->data_offset > h->region_bytes - h->data_bytes || h->ring_size != VHU_RING_SIZE)
		return -EPROTO;
	return 0;
}

static int dead_process(uint64_t pid)
{
	return pid > 0 && pid < (1u << 31) && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* The region is this process's: free, or its claimant's process is gone
 * (the backend then drops what that one left when it sees the attach). */
static int claim(void)
{
	uint64_t was = __atomic_load_n(&shm.hdr->owner, __ATOMIC_ACQUIRE);

	if (was && !dead_process(was))
		return -EBUSY;
	return __atomic_compare_exchange_n(&shm.hdr->owner, &was, (uint64_t)shm.pid, 0, __ATOMIC_ACQ_REL,
					   __ATOMIC_ACQUIRE)
		       ? 0
		       : -EBUSY;
}

static void sleep_us(long us)
{
	struct timespec t = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&t, NULL);
}

/* Asks for a new generation and waits until the backend answers it. */
static int attach(void)
{
	uint32_t state;

	shm.gen = __atomic_load_n(&shm.hdr->attach, __ATOMIC_ACQUIRE) + 1;
	if (shm.gen == 0)
		shm.gen = 1;
	__atomic_store_n(&shm.hdr->attach, shm.gen, __ATOMIC_RELEASE);
	for (int waited = 0; waited < ATTACH_TIMEOUT_MS * 10; waited++) {
		if (__atomic_load_n(&shm.hdr->served, __ATOMIC_ACQUIRE) == shm.gen) {
			state = __atomic_load_n(&shm.hdr->state, __ATOMIC_ACQUIRE);
			if (state == QCUDA_SHM_READY)
				return 0;
			if (state == QCUDA_SHM_FAILED)
				return -ECONNREFUSED;
		}
		sleep_us(100);
	}
	return -ETIMEDOUT;
}

/* Whether the backend still serves this process's generation. */
static int alive(void)
{
	return __atomic_load_n(&shm.hdr->served, __ATOMIC_ACQUIRE) == shm.gen &&
	       __atomic_load_n(&shm.hdr->state, __ATOMIC_ACQUIRE) == QCUDA_SHM_READY &&
	       __atomic_load_n(&shm.hdr->owner, __ATOMIC_ACQUIRE) == (uint64_t)shm.pid;
}

/* At exit: the backend ends the session, and the region is free again. A
 * forked child has no mapping (MADV_DONTFORK) and nothing to let go. */
static void detach(void)
{
	uint64_t me = (uint64_t)shm.pid;

	if (getpid() != shm.pid)
		return;
	__atomic_store_n(&shm.hdr->detach, shm.gen, __ATOMIC_RELEASE);
	__atomic_compare_exchange_n(&shm.hdr->owner, &me, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static int map_region(const char *path, int *fd, uint64_t *bytes, void **va)
{
	struct stat st;
	int f = open(path, O_RDWR | O_CLOEXEC);

	if (f < 0)
		return -errno;
	if (fstat(f, &st) || st.st_size < (off_t)QCUDA_SHM_HDR_BYTES) {
		close(f);
		return -EPROTO;
	}
	*va = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
	if (*va == MAP_FAILED) {
		int e = -errno;

		close(f);
		return e;
	}
	*fd = f;
	*bytes = (uint64_t)st.st_size;
	return 0;
}

int qt_shm_open(const char *path, int *fd)
{
	struct qcuda_shm_hdr layout;
	struct virtio_qcuda_config config;
	uint8_t *va;
	int f = -1, e;

	if ((e = map_region(path, &f, &shm.bytes, (void **)&va)))
		return e;
	shm.hdr = (volatile struct qcuda_shm_hdr *)va;
	memcpy(&layout, va, sizeof(layout));
	shm.pid = getpid();
	if ((e = check_layout(&layout, shm.bytes)) || (e = claim()))
		goto fail;
	/* The rings start empty: the backend takes them from index 0. */
	memset(va + layout.data_offset, 0, MAX_RINGS * RING_BYTES);
	if ((e = attach())) {
		detach();
		goto fail;
	}
	memcpy(&config, (const void *)&shm.hdr->config, sizeof(config));
	/* The backend started the rings transport_user.c will use. */
	if (shm.hdr->num_rings != (config.num_queues > 1 ? 2u : 1u)) {
		detach();
		e = -EPROTO;
		goto fail;
	}
	madvise(va, shm.bytes, MADV_DONTFORK);
	vhu_mem_use_file(f, va + layout.data_offset, layout.data_gpa, layout.data_offset, layout.data_bytes);
	vhu_ring_use_polling(alive);
	if ((e = qt_user_start_polled(&config))) {
		detach();
		goto fail;
	}
	atexit(detach);
	*fd = f;
	return 0;
fail:
	munmap(va, shm.bytes);
	close(f);
	return e;
}
