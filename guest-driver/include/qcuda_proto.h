/* SPDX-License-Identifier: MIT */
/*
 * virtio-qcuda wire protocol: the one definition shared by the guest kernel
 * driver, the guest library and (mirrored, with a test proving they agree)
 * the TypeScript backend. All fields are little-endian.
 */
#ifndef QCUDA_PROTO_H
#define QCUDA_PROTO_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
typedef uint32_t __le32;
typedef uint64_t __le64;
#endif

/*
 * Virtio device id. 60 is unassigned in virtio 1.3 and the current draft
 * (assigned: 1-13, 16-36, 38-49) and keeps the modern PCI id 0x1040 + 60 =
 * 0x107c below Linux's 0x107f limit. To be replaced by an id reserved with
 * the virtio TC.
 */
#define VIRTIO_ID_QCUDA 60

#define QCUDA_MAGIC 0x44554351u /* "QCUD" */
#define QCUDA_PROTO_VERSION 1u

/* Device config space, read by the driver at probe (served by the backend). */
struct virtio_qcuda_config {
	__le32 magic;
	__le32 proto_version;
	__le32 num_queues;    /* request queues */
	__le32 queue_size;
	__le64 capabilities;  /* QCUDA_CAP_* */
	__le64 reserved[2];
};
#define QCUDA_CONFIG_SIZE 40

#define QCUDA_CAP_GPU (1ull << 0) /* a real GPU serves this device */

/* Every request: this header in the device-readable part of the chain,
 * followed by len payload bytes. */
struct qcuda_req_hdr {
	__le32 cmd;      /* QCUDA_CMD_* */
	__le32 len;      /* payload bytes after this header */
	__le64 session;  /* 0 before a session is opened */
};

/* Every reply: this header at the start of the device-writable part,
 * followed by len payload bytes. */
struct qcuda_resp_hdr {
	__le32 status;   /* 0 = ok, else QCUDA_ST_* or a cudaError_t */
	__le32 len;      /* payload bytes written after this header */
	__le64 value;    /* command-specific result */
};

enum qcuda_cmd {
	/* Echo: reply payload = request payload, value = the queue index the
	 * backend took the request from. */
	QCUDA_CMD_NOP = 0,
};

enum qcuda_status {
	QCUDA_ST_OK = 0,
	QCUDA_ST_BAD_REQUEST = 0x10000, /* above every cudaError_t */
	QCUDA_ST_UNKNOWN_CMD = 0x10001,
	QCUDA_ST_TOO_LARGE = 0x10002,
};

#endif
