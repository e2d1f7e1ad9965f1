/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory transport's region (transport_shm.c; the backend's side
 * is backend/src/shm/, whose layout.ts mirrors these offsets): one file (or
 * an ivshmem device's BAR) that the backend creates and lays out, and that
 * one guest process at a time claims.
 *
 *   [0, 4 KiB)             this header: the backend's layout, the guest's
 *                          claim and attach generation, the backend's answer
 *   [data_offset, +bytes)  "guest RAM" at data_gpa: the library's split rings
 *                          (num_rings of them, 3 pages each, at its start),
 *                          its request slots and staging room, then its
 *                          pinned host memory
 *
 * The backend serves the data area as one vhost-user frontend's memory, so a
 * request takes the path a guest's does; it polls the rings' avail indexes
 * in place of kicks, and the library polls the used rings in place of
 * interrupts. The backend writes its fields once (layout) or only as
 * answers, and never reads a value the guest wrote here as an offset.
 */
#ifndef QCUDA_SHM_H
#define QCUDA_SHM_H

#include <stdint.h>

#include "qcuda_proto.h"

#define QCUDA_SHM_MAGIC 0x4d48534144554351ull /* "QCUDASHM" */
#define QCUDA_SHM_VERSION 1u
#define QCUDA_SHM_HDR_BYTES 4096u
#define QCUDA_SHM_RING_SIZE 256u

/* state: the backend's answer to attach generation `served`. */
#define QCUDA_SHM_IDLE 0u /* no guest served */
#define QCUDA_SHM_READY 1u /* served: config holds the device's */
#define QCUDA_SHM_FAILED 2u /* the backend dropped it (a fault, or it stopped) */

struct qcuda_shm_hdr {
	/* The backend's layout, written before any guest. */
	uint64_t magic;
	uint32_t version;
	uint32_t hdr_bytes;
	uint64_t region_bytes;
	uint64_t data_offset;
	uint64_t data_bytes;
	uint64_t data_gpa;
	uint32_t num_rings;
	uint32_t ring_size;
	uint8_t pad0[8];
	/* The guest's (offset 64): its claim (a process id, 0 = free) and the
	 * generation it attaches as; detach = attach: it let go.
	 */
	uint64_t owner;
	uint32_t attach;
	uint32_t detach;
	uint8_t pad1[48];
	/* The backend's (offset 128): which generation it serves, and how. */
	uint32_t served;
	uint32_t state;
	uint8_t pad2[56];
	/* offset 192: the device's config space, while READY. */
	struct virtio_qcuda_config config;
};

_Static_assert(__builtin_offsetof(struct qcuda_shm_hdr, owner) == 64, "qcuda_shm_hdr.owner");
_Static_assert(__builtin_offsetof(struct qcuda_shm_hdr, served) == 128, "qcuda_shm_hdr.served");
_Static_assert(__builtin_offsetof(struct qcuda_shm_hdr, config) == 192, "qcuda_shm_hdr.config");

#endif
