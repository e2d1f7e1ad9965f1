/* SPDX-License-Identifier: MIT */
/*
 * The userspace transport's parts (transport_user.c ties them together):
 * the library is the vhost-user frontend of a backend's socket, as QEMU and
 * the guest kernel driver are together in a VM.
 *
 *   vhu_conn.c  the socket: vhost-user messages, their replies and fds
 *   vhu_mem.c   "guest RAM": memfd regions this process shares with the
 *               backend (ADD_MEM_REG), pinned host memory carved from them,
 *               and the lookup of a user pointer's guest-physical address
 *   vhu_ring.c  the split virtqueue: request slots, submission, kicks, and
 *               the wait for answers (polled, then asleep on the call eventfd)
 *
 * Guest-physical addresses are ours to choose: each region gets the next
 * free range above VHU_GPA_BASE, and a pointer into a region (or into a
 * mapping of its memory, an alias) is translated to one by vhu_mem_gpa().
 */
#ifndef QCUDA_VHU_H
#define QCUDA_VHU_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "qcuda_proto.h"

/* ---------------------------------------------------------------- vhu_conn.c */

/* vhost-user requests the frontend sends (docs/interop/vhost-user.rst). */
enum vhu_req {
	VHU_GET_FEATURES = 1,
	VHU_SET_FEATURES = 2,
	VHU_SET_OWNER = 3,
	VHU_SET_VRING_NUM = 8,
	VHU_SET_VRING_ADDR = 9,
	VHU_SET_VRING_BASE = 10,
	VHU_SET_VRING_KICK = 12,
	VHU_SET_VRING_CALL = 13,
	VHU_GET_PROTOCOL_FEATURES = 15,
	VHU_SET_PROTOCOL_FEATURES = 16,
	VHU_GET_QUEUE_NUM = 17,
	VHU_SET_VRING_ENABLE = 18,
	VHU_GET_CONFIG = 24,
	VHU_GET_MAX_MEM_SLOTS = 36,
	VHU_ADD_MEM_REG = 37,
};

#define VHU_F_VERSION_1 (1ull << 32)
#define VHU_F_PROTOCOL_FEATURES (1ull << 30)
#define VHU_PF_MQ (1ull << 0)
#define VHU_PF_REPLY_ACK (1ull << 3)
#define VHU_PF_CONFIG (1ull << 9)
#define VHU_PF_CONFIGURE_MEM_SLOTS (1ull << 15)

/* Connects to the socket at path (close-on-exec). 0 or -errno. */
int vhu_connect(const char *path);
/* Sends a request (with fd if >= 0); with want_reply, waits for the reply
 * and copies up to reply_len bytes of its payload to reply. With REPLY_ACK
 * negotiated (vhu_conn_ack_on), a request that has no reply of its own is
 * acked and a non-zero ack is -EPROTO. 0 or -errno. Serialized. */
int vhu_request(enum vhu_req req, const void *payload, uint32_t len, int fd, int want_reply, void *reply,
		uint32_t reply_len);
int vhu_get_u64(enum vhu_req req, uint64_t *v);
int vhu_set_u64(enum vhu_req req, uint64_t v, int fd);
void vhu_conn_ack_on(void);
int vhu_conn_fd(void);

/* ----------------------------------------------------------------- vhu_mem.c */

#define VHU_GPA_BASE (1ull << 30)

/* A new region of size bytes (page-rounded), mapped here and sent to the
 * backend; *va its mapping, *gpa its guest-physical start. 0 or -errno. */
int vhu_mem_region(uint64_t size, void **va, uint64_t *gpa);
/* The shared-memory transport (transport_shm.c): regions are carved from
 * one file's data area, size bytes mapped at va, guest-physical gpa, at
 * file_off in fd, which the backend serves already (no ADD_MEM_REG). */
void vhu_mem_use_file(int fd, uint8_t *va, uint64_t gpa, uint64_t file_off, uint64_t size);
/* Pinned host memory of size bytes, zeroed, in a region: its token is its
 * guest-physical address. 0 or -errno. */
int vhu_mem_alloc(uint64_t size, uint64_t *gpa);
int vhu_mem_free(uint64_t gpa);
/* A new mapping of the allocation at gpa (at want if that is free), an
 * alias vhu_mem_gpa() knows until vhu_mem_free(gpa). */
void *vhu_mem_map(uint64_t gpa, size_t len, void *want);
/* Registered memory (cudaHostRegister) made shared where it lies: its
 * pages' bytes move into a piece of a region mapped in their place, so the
 * device can map it and copies need no staging; *gpa is addr's. -EEXIST if
 * its pages are shared already (another registration's). The program should
 * not write the range while it is registered or released (as CUDA asks). */
int vhu_mem_adopt(void *addr, uint64_t size, uint64_t *gpa);
/* Private pages again, as they are now, at addr as adopted. */
int vhu_mem_release(void *addr);
/* The guest-physical address of [p, p+len), if it lies whole in shared
 * memory (a region or an alias); else 0. */
uint64_t vhu_mem_gpa(const void *p, uint64_t len);

/* ---------------------------------------------------------------- vhu_ring.c */

/* Descriptors per ring, and the requests in flight at once: each request's
 * chain (header, arguments, data, response, output, data) takes at most
 * VHU_SLOT_DESCS descriptors, at a fixed place of the table. */
#define VHU_RING_SIZE 256
#define VHU_SLOT_DESCS 8
#define VHU_SLOTS (VHU_RING_SIZE / VHU_SLOT_DESCS)
/* Staging room of each slot, for data outside shared memory (pageable). */
#define VHU_STAGE (2u << 20)

/* A request and its room in shared memory. */
struct vhu_slot {
	struct qcuda_req_hdr *hdr;
	struct qcuda_resp_hdr *resp;
	uint8_t *args; /* QCUDA_MAX_ARGS */
	uint8_t *out; /* QCUDA_MAX_OUT */
	uint8_t *stage; /* VHU_STAGE */
	uint64_t gpa; /* of hdr: the others at fixed offsets */
	uint64_t stage_gpa;
	unsigned int q; /* the queue it went on */
	int done; /* answered (atomic) */
	uint32_t used_len; /* bytes the backend wrote */
};

/* Where the data of a request lies: its guest-physical address, or none. */
struct vhu_buf {
	uint64_t gpa;
	uint32_t len;
	int to_device;
};

/* The shared-memory transport: no eventfds and no socket; the backend polls
 * the rings, waits poll the used rings, then sleep in short steps, and end
 * with -ENODEV once alive() says the backend no longer serves. Before
 * vhu_ring_start. */
void vhu_ring_use_polling(int (*alive)(void));
/* The socket transport's notifications (vhu_ring_events.c, Linux only):
 * queue q's eventfds made and sent with its ring at va; a kick; a sleep of
 * up to 1 s on the call eventfd and the socket, 1 if the backend is gone. */
int vhu_events_start(unsigned int q, uint8_t *va, int *kick, int *call);
int vhu_events_kick(int kick);
int vhu_events_sleep(int call);
/* Lays the rings of queues 0..n-1 and the slots in a region, and starts the
 * queues on the backend. 0 or -errno. */
int vhu_ring_start(unsigned int nqueues);
/* A free slot (waits for one), or NULL if none is free. */
struct vhu_slot *vhu_slot_get(void);
struct vhu_slot *vhu_slot_tryget(void);
void vhu_slot_put(struct vhu_slot *s);
/* Puts the slot's request on queue q: header, args_len bytes of arguments,
 * out_len bytes of output room, and data (len 0: none). */
int vhu_submit(unsigned int q, struct vhu_slot *s, uint32_t args_len, uint32_t out_len, const struct vhu_buf *data);
/* Waits for the slot's answer: 0, or -ENODEV once the backend is gone. */
int vhu_wait(struct vhu_slot *s);
/* The backend went away: every wait ends with -ENODEV. */
int vhu_dead(void);

#endif
