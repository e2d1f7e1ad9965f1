/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * qcuda character device (/dev/qcuda<N>) ioctl interface, shared by the
 * guest kernel driver (qcuda.ko) and guest user space. uapi style: only
 * fixed-size __u32/__u64 fields, explicit padding, same layout on 32- and
 * 64-bit user space (the driver uses compat_ptr_ioctl).
 */
#ifndef QCUDA_IOCTL_H
#define QCUDA_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define QCUDA_IOC_MAGIC 0xCE

/* Pass as qcuda_nop.queue to let the driver pick a queue (round robin). */
#define QCUDA_QUEUE_ANY 0xffffffffu

/* QCUDA_IOC_INFO: what the device reported at probe. */
struct qcuda_info {
	__u32 num_queues;    /* request queues the driver set up */
	__u32 queue_size;    /* config space queue_size */
	__u64 capabilities;  /* QCUDA_CAP_* (qcuda_proto.h) */
	__u32 proto_version; /* QCUDA_PROTO_VERSION the device speaks */
	__u32 vring_size;    /* descriptors per virtqueue actually in use */
	__u64 reserved[2];   /* 0 */
};

/*
 * QCUDA_IOC_NOP: one QCUDA_CMD_NOP round trip.
 * in:  queue  = request queue index, or QCUDA_QUEUE_ANY
 *      cookie = any value, sent as the 8-byte payload
 * out: queue  = queue index the backend reported (resp.value)
 *      cookie = the payload the backend echoed
 * Errors: EINVAL bad queue, EIO non-zero reply status, EPROTO malformed
 * reply, ENODEV device gone, EINTR interrupted by a signal (the request
 * may still be executed by the backend; its reply is discarded).
 */
struct qcuda_nop {
	__u32 queue;
	__u32 reserved;      /* 0 */
	__u64 cookie;
};

#define QCUDA_IOC_INFO _IOR(QCUDA_IOC_MAGIC, 0x00, struct qcuda_info)
#define QCUDA_IOC_NOP  _IOWR(QCUDA_IOC_MAGIC, 0x01, struct qcuda_nop)

#endif
