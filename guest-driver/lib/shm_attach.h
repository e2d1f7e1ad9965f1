/* SPDX-License-Identifier: MIT */
/*
 * The attach protocol of a shared-memory region (qcuda_shm.h), apart from
 * what is carried over it, and apart from the operating system (qc_os.h):
 * the Linux library's transport_shm.c and the Windows one use it as it is.
 */
#ifndef QCUDA_SHM_ATTACH_H
#define QCUDA_SHM_ATTACH_H

#include "qc_os.h"
#include "qcuda_shm.h"

/* Rings the library may use, each 3 pages at the data area's start. */
#define SHM_MAX_RINGS 2u
#define SHM_RING_BYTES (3u * 4096u)

struct shm_attach {
	struct qc_os_map map;
	volatile struct qcuda_shm_hdr *hdr;
	struct qcuda_shm_hdr layout; /* the backend's, read once and checked */
	struct virtio_qcuda_config config; /* the device's, at the attach */
	uint32_t rings; /* the backend started */
	uint32_t gen; /* the attach generation served to this process */
	uint64_t pid;
};

/* Maps the region at path, checks its layout against the file (ring_size:
 * what the caller's rings hold), claims it (-EBUSY if a live process has
 * it), empties the rings, attaches and waits for the backend's answer
 * (-ECONNREFUSED: it refused; -ETIMEDOUT). 0 or -errno; on an error nothing
 * is left mapped or claimed. */
int shm_attach(const char *path, uint32_t ring_size, struct shm_attach *a);
/* Whether the backend still serves this attach. */
int shm_alive(const struct shm_attach *a);
/* Lets go of the region (the backend ends the session); stays mapped. */
void shm_detach(struct shm_attach *a);

#endif
