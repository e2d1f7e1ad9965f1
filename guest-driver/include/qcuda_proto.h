/* SPDX-License-Identifier: MIT */
/*
 * virtio-qcuda wire protocol: the one definition shared by the guest kernel
 * driver, the guest library and (mirrored, with a test proving they agree)
 * the TypeScript backend. All fields are little-endian; every struct has
 * explicit padding and a size that is a multiple of 8.
 *
 * A request is one descriptor chain:
 *   device-readable:  struct qcuda_req_hdr, then hdr.len bytes of arguments
 *                     (struct qcuda_args_<cmd>), then, for commands that move
 *                     data to the device, hdr.data_len bytes of data;
 *   device-writable:  struct qcuda_resp_hdr, then room for the command's
 *                     output (struct qcuda_out_<cmd>), then, for commands
 *                     that move data from the device, hdr.data_len bytes:
 *                     the data always fills the LAST data_len writable bytes.
 * Data is guest user memory, pinned by the driver and passed page by page
 * (no copies). A transfer larger than one chunk is split by the driver into
 * several requests that differ only in data_offset/data_len; the backend
 * applies each chunk at data_offset and they may complete in any order.
 */
#ifndef QCUDA_PROTO_H
#define QCUDA_PROTO_H

#if defined(__KERNEL__) || defined(__linux__)
#include <linux/types.h> /* __le32/__le64, also in user space: no clash with qcuda_ioctl.h */
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
/* Bumped on any incompatible change of this file (new commands and structs are compatible). */
#define QCUDA_PROTO_VERSION 3u

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

struct qcuda_req_hdr {
	__le32 cmd;          /* QCUDA_CMD_* */
	__le32 len;          /* argument bytes after this header */
	__le64 session;      /* from QCUDA_CMD_SESSION_OPEN; 0 before */
	__le64 data_offset;  /* where this chunk's data starts in the transfer */
	__le64 data_len;     /* data bytes in this chunk (0 if none) */
};

struct qcuda_resp_hdr {
	__le32 status;       /* 0, a cudaError_t, or QCUDA_ST_* */
	__le32 len;          /* output bytes written after this header */
	__le64 value;        /* command-specific result */
};

/* Largest argument block and output block of any command. */
#define QCUDA_MAX_ARGS 4096
#define QCUDA_MAX_OUT 4096
/* The driver splits transfers into chunks of at most this many bytes. The
 * backend takes data chunks of any size (it bounds only OUTPUT_READ, a
 * single chunk, by this). Large, since each request costs the backend time
 * on the GPU (~12 us); a chunk of scattered pages is a chain of up to 4097
 * data descriptors + 4, which the backend's indirect tables must admit. */
#define QCUDA_CHUNK (16u << 20)

enum qcuda_cmd {
	/* Echo: out = the arguments, value = the queue index. */
	QCUDA_CMD_NOP = 0,
	/* Sent by the driver when a process opens / closes the device: the
	 * backend creates / frees the session (every handle and allocation
	 * of that process). OPEN: value = the new session id. */
	QCUDA_CMD_SESSION_OPEN = 1,
	QCUDA_CMD_SESSION_CLOSE = 2,

	/* From the guest library (hdr.session filled in by the driver). */
	QCUDA_CMD_HELLO = 16,          /* args hello, out hello */
	QCUDA_CMD_DEVICE_PROPS = 17,   /* args device, out device_props */
	QCUDA_CMD_SET_DEVICE = 18,     /* args device */
	QCUDA_CMD_DEVICE_SYNC = 19,    /* no args */
	QCUDA_CMD_DEVICE_RESET = 20,   /* no args: frees the session's resources */
	QCUDA_CMD_MEM_GET_INFO = 21,   /* out mem_info */
	QCUDA_CMD_MALLOC = 22,         /* args malloc, value = device pointer */
	QCUDA_CMD_FREE = 23,           /* args ptr */
	QCUDA_CMD_MEMCPY_HTOD = 24,    /* args memcpy (src unused), data to device */
	QCUDA_CMD_MEMCPY_DTOH = 25,    /* args memcpy (dst unused), data from device */
	QCUDA_CMD_MEMCPY_DTOD = 26,    /* args memcpy */
	QCUDA_CMD_MEMSET = 27,         /* args memset */
	QCUDA_CMD_HOST_MAP = 28,       /* args host_map: guest memory the GPU may
	                                  address; value = its device pointer */
	QCUDA_CMD_HOST_UNMAP = 29,     /* args ptr (the device pointer) */
	QCUDA_CMD_STREAM_CREATE = 32,  /* args stream_create, value = handle */
	QCUDA_CMD_STREAM_DESTROY = 33, /* args handle */
	QCUDA_CMD_STREAM_SYNC = 34,    /* args handle */
	QCUDA_CMD_STREAM_QUERY = 35,   /* args handle; status = cudaSuccess or cudaErrorNotReady */
	QCUDA_CMD_STREAM_WAIT_EVENT = 36, /* args stream_wait_event */
	QCUDA_CMD_EVENT_CREATE = 40,   /* args event_create, value = handle */
	QCUDA_CMD_EVENT_DESTROY = 41,  /* args handle */
	QCUDA_CMD_EVENT_RECORD = 42,   /* args event_record */
	QCUDA_CMD_EVENT_SYNC = 43,     /* args handle */
	QCUDA_CMD_EVENT_QUERY = 44,    /* args handle */
	QCUDA_CMD_EVENT_ELAPSED = 45,  /* args event_elapsed, out event_elapsed */

	/* Modules and launches. A fat binary crosses once per module: first
	 * MODULE_UPLOAD (data to device, chunked like any transfer) into a
	 * staging buffer of the session named by upload_id, then MODULE_LOAD
	 * of that buffer (value = module handle; the staging buffer is freed). */
	QCUDA_CMD_MODULE_UPLOAD = 48,  /* args module_upload, data = the image bytes */
	QCUDA_CMD_MODULE_LOAD = 49,    /* args module_load, value = module handle */
	QCUDA_CMD_MODULE_UNLOAD = 50,  /* args handle */
	QCUDA_CMD_FUNC_GET = 51,       /* args symbol, out func_info, value = function handle */
	QCUDA_CMD_VAR_GET = 52,        /* args symbol, out var_info (the variable becomes
	                                  addressable memory of the session) */
	QCUDA_CMD_LAUNCH = 53,         /* args launch + param_bytes of packed parameters;
	                                  enqueued, not waited for: errors of the kernel
	                                  surface at the next synchronizing call */

	/* Posted work: several commands in one request (data to device:
	 * args.bytes of entries, each a struct qcuda_batch_entry, then its
	 * argument struct as the command takes it, then padding to 8 bytes).
	 * Only commands that enqueue and never wait may be posted: LAUNCH,
	 * MEMSET and MEMCPY_DTOD with async = 1, EVENT_RECORD and
	 * STREAM_WAIT_EVENT. They run in order; one that fails does not stop
	 * the others. status = the first failure's, value = its entry index
	 * (the entry count if none failed). A malformed batch runs nothing. */
	QCUDA_CMD_BATCH = 54,          /* args batch, data = the entries */

	/* Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) run in
	 * the guest process, in stream order. HOST_FUNC (postable) marks a
	 * point in a stream: work on that stream after it waits until the
	 * guest says the function has run. The library's callback thread
	 * sends CALLBACK_WAIT, which says that callback `done` (0: none) has
	 * run and waits for the next marked point the GPU has reached. */
	QCUDA_CMD_HOST_FUNC = 55,      /* args host_func */
	QCUDA_CMD_CALLBACK_WAIT = 70,  /* args callback_wait, out callback */

	/* Function attributes, occupancy, limits, stream attributes and
	 * cooperative launches (60-69). */
	QCUDA_CMD_FUNC_ATTRS = 60,     /* args handle (function), out func_attrs */
	QCUDA_CMD_FUNC_SET_ATTR = 61,  /* args func_attr (a cudaFuncAttribute) */
	QCUDA_CMD_OCCUPANCY_BLOCKS = 62, /* args occupancy, value = active blocks per SM */
	QCUDA_CMD_OCCUPANCY_SMEM = 63, /* args occupancy, value = dynamic shared memory
	                                  bytes per block that lets num_blocks blocks fit */
	QCUDA_CMD_LIMIT_SET = 64,      /* args limit (a cudaLimit of the session's context) */
	QCUDA_CMD_LIMIT_GET = 65,      /* args limit (value unused), value = the limit */
	QCUDA_CMD_STREAM_SET_ATTR = 66, /* args stream_attr */
	QCUDA_CMD_STREAM_GET_ATTR = 67, /* args stream_attr (value unused), out stream_attr_value */
	QCUDA_CMD_LAUNCH_COOPERATIVE = 68, /* as LAUNCH, for a grid whose blocks synchronize
	                                      (cudaLaunchCooperativeKernel) */

	/* Device-side printf and assert output of the session's kernels
	 * (56-59). The backend keeps what CUDA flushed for the session (at
	 * synchronizing calls, blocking copies, module load/unload, context
	 * destruction; some at other moments) and OR-s QCUDA_ST_OUTPUT into
	 * the status of every reply to the session while any is waiting.
	 * OUTPUT_READ takes the oldest waiting output, up to data_len bytes of
	 * one kind, into the data (from device, written from its start; one
	 * chunk: data_offset 0, data_len 1..QCUDA_CHUNK, since reading
	 * consumes); value = the bytes written (0: nothing was waiting). */
	QCUDA_CMD_OUTPUT_READ = 56,    /* no args, out output_read, data from device */
};

/* Not a status: a flag OR-ed into resp.status of any reply to a session
 * with device output waiting ("fetch it with OUTPUT_READ"); the rest of the
 * status is the command's own. Statuses stay below it. */
#define QCUDA_ST_OUTPUT 0x40000000u

enum qcuda_status {
	QCUDA_ST_OK = 0,
	QCUDA_ST_BAD_REQUEST = 0x10000, /* above every cudaError_t */
	QCUDA_ST_UNKNOWN_CMD = 0x10001,
	QCUDA_ST_TOO_LARGE = 0x10002,
	QCUDA_ST_VERSION = 0x10003,     /* the guest library speaks another version */
	QCUDA_ST_NO_SESSION = 0x10004,  /* unknown or missing session id */
};

/* Stream handles with a meaning of their own (as in CUDA). */
#define QCUDA_STREAM_LEGACY 0ull      /* the NULL stream */
#define QCUDA_STREAM_PER_THREAD 2ull  /* cudaStreamPerThread */

struct qcuda_args_hello {
	__le32 proto_version;    /* QCUDA_PROTO_VERSION of the guest library */
	__le32 cuda_version;     /* CUDART_VERSION the library implements */
};
struct qcuda_out_hello {
	__le32 proto_version;    /* the backend's */
	__le32 driver_version;   /* cuDriverGetVersion on the host */
	__le32 device_count;
	__le32 reserved;
	__le64 capabilities;     /* QCUDA_CAP_* */
	__le64 memory_limit;     /* per-VM device memory quota in bytes, 0 = none */
};

struct qcuda_args_device {
	__le32 device;
	__le32 reserved;
};

/* Attributes are indexed by CUdevice_attribute (== cudaDeviceAttr). */
#define QCUDA_NUM_ATTRS 160
struct qcuda_out_device_props {
	char name[256];
	unsigned char uuid[16];
	__le64 total_mem;        /* what the guest may use (the quota if set) */
	__le32 attrs[QCUDA_NUM_ATTRS];
};

struct qcuda_out_mem_info {
	__le64 free;
	__le64 total;
};

struct qcuda_args_malloc {
	__le64 size;
};

struct qcuda_args_ptr {
	__le64 ptr;
};

struct qcuda_args_handle {
	__le64 handle;
};

/* Copies: size is the whole transfer; chunks carry data_offset/data_len. */
struct qcuda_args_memcpy {
	__le64 dst;              /* device pointer (HTOD, DTOD) */
	__le64 src;              /* device pointer (DTOH, DTOD) */
	__le64 size;
	__le64 stream;           /* stream handle */
	__le32 async;            /* 1: enqueue on the stream and return */
	__le32 reserved;
};

struct qcuda_args_memset {
	__le64 dst;
	__le64 size;
	__le64 stream;
	__le32 value;            /* the byte value in the low 8 bits */
	__le32 async;
};

struct qcuda_args_host_map {
	__le64 gpa;              /* guest-physical start (contiguous) */
	__le64 size;
};

struct qcuda_args_stream_create {
	__le32 flags;            /* cudaStreamDefault / cudaStreamNonBlocking */
	__le32 priority;         /* signed, as cudaStreamCreateWithPriority */
};

struct qcuda_args_stream_wait_event {
	__le64 stream;
	__le64 event;
	__le32 flags;
	__le32 reserved;
};

struct qcuda_args_event_create {
	__le32 flags;            /* cudaEventDefault, BlockingSync, DisableTiming */
	__le32 reserved;
};

struct qcuda_args_event_record {
	__le64 event;
	__le64 stream;
};

struct qcuda_args_event_elapsed {
	__le64 start;
	__le64 end;
};
struct qcuda_out_event_elapsed {
	__le32 ms_bits;          /* the float milliseconds, bit for bit */
	__le32 reserved;
};

/* Largest fat binary the backend accepts, and most kernel parameters. */
#define QCUDA_MAX_MODULE (64u << 20)
#define QCUDA_MAX_PARAMS 256
#define QCUDA_MAX_PARAM_BYTES 4000 /* what fits in QCUDA_MAX_ARGS after struct launch */
#define QCUDA_MAX_NAME 256

struct qcuda_args_module_upload {
	__le64 upload_id;        /* chosen by the library, unique in its session */
	__le64 size;             /* the whole image (QCUDA_MAX_MODULE at most) */
};

struct qcuda_args_module_load {
	__le64 upload_id;
};

struct qcuda_args_symbol {
	__le64 module;
	char name[QCUDA_MAX_NAME]; /* NUL-terminated mangled name */
};

/* The kernel's parameter layout as the host driver reports it
 * (cuFuncGetParamInfo): the library packs launch parameters exactly so,
 * and the backend refuses a launch whose parameter block differs in size. */
struct qcuda_out_func_info {
	__le32 num_params;
	__le32 param_bytes;      /* offset + size of the last parameter */
	__le32 offset[QCUDA_MAX_PARAMS];
	__le32 size[QCUDA_MAX_PARAMS];
};

struct qcuda_out_var_info {
	__le64 dptr;
	__le64 size;
};

struct qcuda_args_launch {
	__le64 func;             /* handle from FUNC_GET */
	__le64 stream;
	__le32 grid[3];
	__le32 block[3];
	__le32 shared_mem;
	__le32 param_bytes;      /* bytes of packed parameters after this struct */
	/* followed by param_bytes of parameters */
};

/* FUNC_ATTRS: every CUfunction_attribute (cuFuncGetAttribute), indexed by
 * it (CU_FUNC_ATTRIBUTE_MAX in CUDA 13); each an int, as its bits. */
#define QCUDA_NUM_FUNC_ATTRS 16
struct qcuda_out_func_attrs {
	__le32 values[QCUDA_NUM_FUNC_ATTRS];
};

struct qcuda_args_func_attr {
	__le64 func;             /* handle from FUNC_GET */
	__le32 attr;             /* cudaFuncAttribute (== CUfunction_attribute) */
	__le32 value;            /* signed, as cudaFuncSetAttribute's int */
};

/* OCCUPANCY_BLOCKS uses dynamic_smem and flags, OCCUPANCY_SMEM num_blocks. */
struct qcuda_args_occupancy {
	__le64 func;
	__le64 dynamic_smem;     /* bytes per block */
	__le32 block_size;       /* threads per block (signed int in CUDA) */
	__le32 flags;            /* cudaOccupancyDefault / DisableCachingOverride */
	__le32 num_blocks;       /* signed int in CUDA */
	__le32 reserved;
};

struct qcuda_args_limit {
	__le32 limit;            /* cudaLimit (== CUlimit) */
	__le32 reserved;
	__le64 value;            /* LIMIT_SET only */
};

/* A stream attribute's value: cudaLaunchAttributeValue / CUstreamAttrValue,
 * the same 64-byte union in both APIs. */
#define QCUDA_ATTR_VALUE_BYTES 64
struct qcuda_args_stream_attr {
	__le64 stream;
	__le32 attr;             /* cudaStreamAttrID (== CUstreamAttrID) */
	__le32 reserved;
	unsigned char value[QCUDA_ATTR_VALUE_BYTES]; /* STREAM_SET_ATTR only */
};
struct qcuda_out_stream_attr_value {
	unsigned char value[QCUDA_ATTR_VALUE_BYTES];
};

struct qcuda_args_host_func {
	__le64 stream;
	__le64 id;               /* chosen by the library: nonzero, unique in its session */
};

struct qcuda_args_callback_wait {
	__le64 done;             /* the callback that has run, 0 if none */
};
struct qcuda_out_callback {
	__le64 id;               /* the callback to run now */
	__le32 status;           /* the stream's error at that point (cudaStreamAddCallback's status) */
	__le32 reserved;
};

/* A batch carries at most this many bytes of entries. */
#define QCUDA_MAX_BATCH (64u << 10)

struct qcuda_args_batch {
	__le32 count;            /* entries */
	__le32 reserved;
	__le64 bytes;            /* == hdr.data_len; QCUDA_MAX_BATCH at most */
};

struct qcuda_batch_entry {
	__le32 cmd;              /* QCUDA_CMD_* (a postable one) */
	__le32 len;              /* argument bytes after this header (unpadded) */
};

/* OUTPUT_READ: what the data holds. */
#define QCUDA_OUTPUT_STDOUT 1u /* device printf: for the program's stdout */
#define QCUDA_OUTPUT_STDERR 2u /* failed device asserts, qcuda's notes of dropped
                                  output: for its stderr */
struct qcuda_out_output_read {
	__le32 kind;             /* QCUDA_OUTPUT_*; 0 when nothing was waiting */
	__le32 more;             /* 1: more output is waiting */
};

#endif
