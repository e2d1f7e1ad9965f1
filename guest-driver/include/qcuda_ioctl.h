/* SPDX-License-Identifier: (GPL-2.0 WITH Linux-syscall-note) OR MIT */
/*
 * qcuda character device (/dev/qcuda<N>) ioctl interface, shared by the
 * guest kernel driver (qcuda.ko) and guest user space. uapi style: only
 * fixed-size __u32/__u64 fields, explicit padding, same layout on 32- and
 * 64-bit user space (the driver uses compat_ptr_ioctl); user pointers are
 * passed as __u64.
 *
 * Each open file is one backend session: its first QCUDA_IOC_CALL sends
 * QCUDA_CMD_SESSION_OPEN (not open(), which runs under the misc core's
 * global mutex); the last close of the file sends QCUDA_CMD_SESSION_CLOSE
 * once every request of the file has come back from the device (at once,
 * and waiting for the reply, in the usual case that none is in flight), and
 * only after that reply frees the file's host memory. Every request of the
 * session goes on a request queue of its own while one of 1..num_queues-1
 * is free and the process that opened the file owns none yet
 * (QCUDA_SESSION_OWN_QUEUE), else on queue 0. The files a process opened
 * share its bounds: requests in the device (a quarter of the ring slots)
 * and user memory its transfers hold pinned (the transfer_pin_mib module
 * parameter); past either a call waits (killably).
 *
 * Waits for the device are killable, not interruptible: an ordinary signal
 * (SIGALRM, SIGCHLD...) never makes a call fail; a fatal signal makes it
 * return EINTR while the device may still complete it (what the device
 * still uses stays pinned until it is handed back).
 *
 * Common errors: ENODEV the device is gone, EIO the backend refused a
 * driver command (session open, NOP), EPROTO malformed reply, EFAULT bad
 * user pointer, EINVAL bad argument, EINTR fatal signal.
 */
#ifndef QCUDA_IOCTL_H
#define QCUDA_IOCTL_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define QCUDA_IOC_MAGIC 0xCE

/* Pass as qcuda_nop.queue to let the driver pick a queue (round robin over
 * the queues no session owns).
 */
#define QCUDA_QUEUE_ANY 0xffffffffu

/* QCUDA_IOC_INFO: what the device reported at probe. */
struct qcuda_info {
	__u32 num_queues;    /* request queues the driver set up */
	__u32 queue_size;    /* config space queue_size */
	__u64 capabilities;  /* QCUDA_CAP_* (qcuda_proto.h) */
	__u32 proto_version; /* QCUDA_PROTO_VERSION the device speaks */
	__u32 vring_size;    /* descriptors per virtqueue actually in use */
	__u64 session;       /* backend session of this file, 0 before its first CALL */
	__u64 reserved;      /* 0 */
};

/*
 * QCUDA_IOC_NOP: one QCUDA_CMD_NOP round trip (session 0).
 * in:  queue  = request queue index, or QCUDA_QUEUE_ANY
 *      cookie = any value, sent as the 8-byte payload
 * out: queue  = queue index the backend reported (resp.value)
 *      cookie = the payload the backend echoed
 * Errors: EINVAL bad queue, EIO non-zero reply status, EPROTO malformed reply.
 */
struct qcuda_nop {
	__u32 queue;
	__u32 reserved;      /* 0 */
	__u64 cookie;
};

/* qcuda_call.data_dir */
#define QCUDA_DATA_NONE        0u
#define QCUDA_DATA_TO_DEVICE   1u /* data is read by the device (HTOD) */
#define QCUDA_DATA_FROM_DEVICE 2u /* data is written by the device (DTOH) */

/*
 * QCUDA_IOC_CALL: one library command (cmd >= QCUDA_CMD_HELLO) of this
 * file's session. The data buffer is pinned, not copied, and sent in
 * chunks of at most QCUDA_CHUNK bytes (one request each, with the same
 * arguments, pipelined over all queues); any size and alignment works.
 * in:  cmd, args/args_len (<= QCUDA_MAX_ARGS), out/out_len (<=
 *      QCUDA_MAX_OUT: room for the command's output; with FROM_DEVICE it
 *      must be exactly the size of the command's output struct, since the
 *      device puts the data right after it), data_dir, data/data_len
 *      (data_len must be 0 with QCUDA_DATA_NONE).
 * out: status      = first failing status of any chunk, else 0 (a
 *                    cudaError_t or QCUDA_ST_*; not an errno), with
 *                    QCUDA_ST_OUTPUT OR-ed in if any chunk's reply had it
 *      out_written = output bytes copied to out (from chunk 0)
 *      value       = resp.value of chunk 0
 * The ioctl returns 0 whenever the device answered every chunk, whatever
 * the status. Errors: EIO the backend refused to open the file's session
 * (first call); EINVAL cmd < 16, sizes or data_dir out of range; a
 * call with an invalid HOST_MAP range (see below); EFAULT bad args, out or
 * data pointer (chunks before the bad page may have been executed);
 * ENOMEM no memory for a request, e.g. for the indirect descriptor table
 * of a chunk (just over 64 KiB for QCUDA_CHUNK bytes of scattered pages;
 * chunks before it may have been executed).
 *
 * QCUDA_CMD_HOST_MAP is checked here: [gpa, gpa+size) must lie in
 * physically contiguous pages of one live HOST_ALLOC or HOST_REGISTER of
 * this file (else EINVAL). Such memory cannot be freed/unregistered (EBUSY)
 * until a successful HOST_UNMAP of the returned device pointer, or a
 * successful DEVICE_RESET.
 */
struct qcuda_call {
	/* in */
	__u32 cmd;
	__u32 args_len;
	__u64 args;
	__u64 out;
	__u32 out_len;
	__u32 data_dir;
	__u64 data;
	__u64 data_len;
	/* out */
	__u32 status;
	__u32 out_written;
	__u64 value;
};

/* qcuda_host_alloc.flags */
#define QCUDA_HOST_CONTIGUOUS 1u /* one guest-physical range (<= 4 MiB) */

/*
 * QCUDA_IOC_HOST_ALLOC: zeroed, page-rounded guest memory owned by this
 * file, for cudaMallocHost/cudaHostAlloc/cudaMallocManaged. Map it with
 * mmap(NULL, size, PROT_READ|PROT_WRITE, MAP_SHARED, fd, mmap_offset)
 * (MAP_SHARED only; a sub-range of it may be mapped too).
 * in:  size (> 0), flags (QCUDA_HOST_*)
 * out: mmap_offset (the allocation's token), gpa (guest-physical start if
 *      contiguous, else 0)
 * Errors: EINVAL size 0 or unknown flag, ENOMEM (always for CONTIGUOUS
 * above 4 MiB, MAX_PAGE_ORDER of the guest kernel).
 * The pages are freed when the allocation is freed (HOST_FREE or the last
 * close) and no mapping of it is left.
 */
struct qcuda_host_alloc {
	__u64 size;
	__u32 flags;
	__u32 reserved;      /* 0 */
	__u64 mmap_offset;
	__u64 gpa;
};

/* QCUDA_IOC_HOST_FREE: in: mmap_offset of a HOST_ALLOC. Errors: EINVAL
 * unknown token, EBUSY still mapped into the device (HOST_MAP).
 */
struct qcuda_host_free {
	__u64 mmap_offset;
};

/*
 * QCUDA_IOC_HOST_REGISTER (cudaHostRegister): pin the user range [addr,
 * addr+size) (writable memory) until HOST_UNREGISTER or the last close.
 * in:  addr, size (> 0), flags (0)
 * out: gpa = guest-physical address of addr if the range is physically
 *      contiguous, else 0
 * Errors: EINVAL, EEXIST overlaps a registered range, EFAULT, ENOMEM.
 */
struct qcuda_host_register {
	__u64 addr;
	__u64 size;
	__u32 flags;
	__u32 reserved;      /* 0 */
	__u64 gpa;
};

/* QCUDA_IOC_HOST_UNREGISTER: in: addr as registered. Errors: EINVAL not a
 * registered start address, EBUSY still mapped into the device.
 */
struct qcuda_host_unregister {
	__u64 addr;
};

/*
 * QCUDA_IOC_GPA (cudaHostGetDevicePointer): guest-physical address of
 * [addr, addr+size) if it lies in one live HOST_REGISTER range or a
 * mapping of one live HOST_ALLOC of this file and its pages are physically
 * contiguous. in: addr, size (> 0); out: gpa. Errors: EINVAL otherwise.
 */
struct qcuda_gpa {
	__u64 addr;
	__u64 size;
	__u64 gpa;
};

#define QCUDA_IOC_INFO            _IOR(QCUDA_IOC_MAGIC, 0x00, struct qcuda_info)
#define QCUDA_IOC_NOP             _IOWR(QCUDA_IOC_MAGIC, 0x01, struct qcuda_nop)
#define QCUDA_IOC_CALL            _IOWR(QCUDA_IOC_MAGIC, 0x02, struct qcuda_call)
#define QCUDA_IOC_HOST_ALLOC      _IOWR(QCUDA_IOC_MAGIC, 0x03, struct qcuda_host_alloc)
#define QCUDA_IOC_HOST_FREE       _IOW(QCUDA_IOC_MAGIC, 0x04, struct qcuda_host_free)
#define QCUDA_IOC_HOST_REGISTER   _IOWR(QCUDA_IOC_MAGIC, 0x05, struct qcuda_host_register)
#define QCUDA_IOC_HOST_UNREGISTER _IOW(QCUDA_IOC_MAGIC, 0x06, struct qcuda_host_unregister)
#define QCUDA_IOC_GPA             _IOWR(QCUDA_IOC_MAGIC, 0x07, struct qcuda_gpa)

#endif
