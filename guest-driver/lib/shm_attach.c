/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory region's attach protocol (shm_attach.h): what the
 * region says is checked once, against the file's size, so a region that
 * is not the backend's, or cut short, is refused before any access beyond
 * its header could fault; then the claim and the attach generation.
 */
#include <errno.h>
#include <string.h>

#include "shm_attach.h"

/* How long the backend may take to serve an attach (it polls every few ms
 * while idle; a worker's start is later, at the session's open). */
#define ATTACH_TIMEOUT_MS 10000

static int check_layout(const struct qcuda_shm_hdr *h, uint64_t file_bytes, uint32_t ring_size)
{
	if (h->magic != QCUDA_SHM_MAGIC || h->version != QCUDA_SHM_VERSION || h->hdr_bytes != QCUDA_SHM_HDR_BYTES)
		return -EPROTO;
	if (h->region_bytes > file_bytes || h->data_offset < QCUDA_SHM_HDR_BYTES || h->data_offset % 4096 ||
	    h->data_bytes < SHM_MAX_RINGS * SHM_RING_BYTES || h->data_bytes > h->region_bytes ||
	    h->data_offset > h->region_bytes - h->data_bytes || h->ring_size != ring_size)
		return -EPROTO;
	return 0;
}

/* The region is this process's: free, or its claimant's process is gone
 * (the backend then drops what that one left when it sees the attach). */
static int claim(struct shm_attach *a)
{
	uint64_t was = __atomic_load_n(&a->hdr->owner, __ATOMIC_ACQUIRE);

	if (was && !qc_os_pid_gone(was))
		return -EBUSY;
	return __atomic_compare_exchange_n(&a->hdr->owner, &was, a->pid, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
		       ? 0
		       : -EBUSY;
}

/* Asks for a new generation and waits until the backend answers it. */
static int ask(struct shm_attach *a)
{
	const uint64_t until = qc_os_now_ns() + ATTACH_TIMEOUT_MS * 1000000ull;
	uint32_t state;

	a->gen = __atomic_load_n(&a->hdr->attach, __ATOMIC_ACQUIRE) + 1;
	if (a->gen == 0)
		a->gen = 1;
	__atomic_store_n(&a->hdr->attach, a->gen, __ATOMIC_RELEASE);
	while (qc_os_now_ns() < until) {
		if (__atomic_load_n(&a->hdr->served, __ATOMIC_ACQUIRE) == a->gen) {
			state = __atomic_load_n(&a->hdr->state, __ATOMIC_ACQUIRE);
			if (state == QCUDA_SHM_READY)
				return 0;
			if (state == QCUDA_SHM_FAILED)
				return -ECONNREFUSED;
		}
		qc_os_sleep_us(100);
	}
	return -ETIMEDOUT;
}

int shm_alive(const struct shm_attach *a)
{
	return __atomic_load_n(&a->hdr->served, __ATOMIC_ACQUIRE) == a->gen &&
	       __atomic_load_n(&a->hdr->state, __ATOMIC_ACQUIRE) == QCUDA_SHM_READY &&
	       __atomic_load_n(&a->hdr->owner, __ATOMIC_ACQUIRE) == a->pid;
}

void shm_detach(struct shm_attach *a)
{
	uint64_t me = a->pid;

	__atomic_store_n(&a->hdr->detach, a->gen, __ATOMIC_RELEASE);
	__atomic_compare_exchange_n(&a->hdr->owner, &me, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

int shm_attach(const char *path, uint32_t ring_size, struct shm_attach *a)
{
	int e;

	memset(a, 0, sizeof(*a));
	if ((e = qc_os_map_file(path, QCUDA_SHM_HDR_BYTES, &a->map)))
		return e;
	a->hdr = (volatile struct qcuda_shm_hdr *)a->map.va;
	memcpy(&a->layout, a->map.va, sizeof(a->layout));
	a->pid = qc_os_pid();
	if ((e = check_layout(&a->layout, a->map.bytes, ring_size)) || (e = claim(a)))
		goto fail;
	/* The rings start empty: the backend takes them from index 0. */
	memset(a->map.va + a->layout.data_offset, 0, SHM_MAX_RINGS * SHM_RING_BYTES);
	if ((e = ask(a)))
		goto detach;
	memcpy(&a->config, (const void *)&a->hdr->config, sizeof(a->config));
	a->rings = a->hdr->num_rings;
	/* The backend started the rings the userspace transport will use. */
	if (a->rings != (a->config.num_queues > 1 ? 2u : 1u)) {
		e = -EPROTO;
		goto detach;
	}
	return 0;
detach:
	shm_detach(a);
fail:
	qc_os_unmap(&a->map);
	return e;
}
