/* SPDX-License-Identifier: MIT */
/*
 * qcuda's libcudart.so.13: internal declarations.
 *
 * The library implements the CUDA 13 runtime API on top of the virtio-qcuda
 * wire protocol (qcuda_proto.h). It is compiled against NVIDIA's
 * cuda_runtime_api.h / driver_types.h so that every type, enum value and
 * struct layout is CUDA 13's, and exports its symbols under the same soname
 * and version node as NVIDIA's library (libcudart.map).
 *
 * The declarations below are grouped by layer, from the bottom up, and
 * within a layer under the name of the file that defines them (as Linux's
 * virtgpu_drv.h). A file calls only into its own layer or those below
 * (test/guest-lib/layers.test.ts).
 *
 * Files: transport.c (the only user of qcuda_ioctl.h), log.c (messages),
 * thread.c (the library's own threads), init.c (start-up: HELLO; the
 * thread's device and the session's; device properties), call.c (the call
 * path: qc_call, status mapping, sticky and last errors), device.c
 * (devices' entry points, synchronization, reset, versions), rmap.c (the
 * range maps of allocations), region.c (allocations as regions, their
 * release, what a pointer is), memory.c (cudaMalloc, cudaFree, pointer
 * attributes), copy.c
 * (copies, memsets), hostmem.c (pinned, registered and managed host
 * memory), managed.c (managed memory hints: prefetch, advice, range
 * attributes), stream.c (streams, events), module.c (fat binaries, kernel
 * and variable registration and loading), launch.c (launch configuration,
 * launches), funcattr.c (function attributes, occupancy), funccache.c (their
 * answers and launch shapes kept), symbol.c (module
 * variables), batch.c (posted work: launches and other enqueues sent
 * together), devctl.c (limits, peer access, profiler, driver entry points),
 * callback.c (host functions), handles.c (the stream and event handles
 * held), output.c (device printf and assert output), errtab.c (error names
 * and strings), stubs.c (entry points qcuda does not implement).
 *
 * Concurrency: no lock is ever held across a device call; the tables of
 * rmap.c have one rwlock held for lookups/updates only (and, read, around
 * managed.c's callbacks, which take managed.c's own lock inside it); the
 * last error, the current device and the launch configuration stack are per
 * thread.
 */
#ifndef QCRT_H
#define QCRT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "qcuda_proto.h"

#define QC_API __attribute__((visibility("default")))

#include "transport.h"

/*
 * ==== Layer 0, base: messages, threads, error names, fat binaries.
 *
 * Layer 1, transport (transport.h, vhu.h): transport*.c, vhu_*.c.
 */

/* ---- log.c ---- */

/* Prints "qcuda: <msg>" on stderr. */
void qc_msg(const char *fmt, ...) __attribute__((format(gnu_printf, 1, 2)));
/* Prints only when QCUDA_DEBUG is set. */
void qc_debug(const char *fmt, ...) __attribute__((format(gnu_printf, 1, 2)));
extern int qc_debug_on;

/* ---- thread.c ---- */

/* Starts a detached thread of the library's own (stack: 0 for the default)
 * that takes no signals: they stay the program's. 0 on success. */
int qc_start_thread(void *(*fn)(void *), size_t stack);

/* ---- errtab.c ---- */

const char *qc_error_name(int err); /* NULL if unknown */
const char *qc_error_string(int err); /* NULL if unknown */

/* ---- fatbin.c, sha256.c ---- */

/* A fat binary of only the entries a device of compute capability sm (e.g.
 * 90) runs: its SASS of that major version not above sm, else its newest
 * PTX not above sm, in a new buffer (*out, malloc'd); returns its size, or 0
 * (and *out NULL) when the image should go as it is. */
uint64_t qc_fatbin_select(const void *image, uint64_t size, int sm, void **out);
void qc_sha256(const void *data, uint64_t n, uint8_t out[32]);

/*
 * ==== Layer 2, call: one command to the device, posted work, device output.
 * call.c calls only the transport and the base; batch.c's flush and
 * output.c's reply handling reach it through qc_call_hooks.
 */

/* ---- call.c ---- */

/* Devices the library knows at most (the backend's count is capped). */
#define QC_MAX_DEVICES 64
struct qc_state {
	int fd;
	cudaError_t init_err; /* cudaSuccess once HELLO succeeded */
	int device_count;
	uint32_t driver_version;
	uint64_t capabilities;
	uint64_t memory_limit;
};
extern struct qc_state qc;
/* One command to the device. Fields not set are 0/NULL (no args, no output, no data). */
struct qc_req {
	uint32_t cmd; /* QCUDA_CMD_* */
	const void *args; /* the argument struct (and what follows it), args_len bytes */
	uint32_t args_len;
	void *out; /* room for the output struct, out_len bytes */
	uint32_t out_len;
	enum qt_dir dir; /* data direction: QT_NONE, QT_TO_DEVICE, QT_FROM_DEVICE */
	void *data; /* guest user memory moved, data_len bytes */
	uint64_t data_len;
	uint64_t *value; /* the reply's value, or NULL */
};
/* One command; maps transport errors and QCUDA_ST_* to cudaError_t and
 * notes sticky errors. Sends posted work first (qc_flush). */
cudaError_t qc_call(const struct qc_req *r);
/* What runs before every qc_call (flush: batch.c's qc_flush) and after
 * every reply (reply: output.c's qc_output_reply); init.c sets them at
 * start-up, so that the call path calls nothing above it. */
void qc_call_hooks(void (*flush)(void), void (*reply)(uint32_t cmd, uint32_t *status));
/* qc_call without flushing posted work first (batch.c sends batches with it). */
cudaError_t qc_call_unbatched(const struct qc_req *r);
/* Round trips so far: synchronous calls and batches of posted work sent. */
void qc_stats(unsigned long long *calls, unsigned long long *batches);
/* The commands that crossed most often, as text (QCUDA_STATS). */
void qc_stats_by_cmd(char *buf, size_t len);
/* Records err as the calling thread's last error (unless it is cudaSuccess
 * or cudaErrorNotReady) and returns it. Every API function returns through
 * it. */
cudaError_t qc_ret(cudaError_t err);
/* The context's sticky error (cudaSuccess if none); cudaDeviceReset clears it. */
cudaError_t qc_sticky(void);
void qc_sticky_clear(void);
/* cudaGetErrorName's answer: the name, or "unrecognized error code". */
const char *qc_error_label(cudaError_t error);

/* ---- batch.c ---- */

/* A synchronizing call or a query (no data, no output): sent as the last
 * entry of the posted work waiting to go, if any (one round trip for both;
 * ends: QCUDA_BATCH_ENDS_SYNC or QCUDA_BATCH_ENDS_QUERY), else on its own
 * (batch.c). */
cudaError_t qc_call_ending_batch(const struct qc_req *r, uint32_t ends);
/* Posts a command that only enqueues work (see batch.c for which): it is sent
 * later with others, in order; errors come back through qc_deferred. */
cudaError_t qc_post(uint32_t cmd, const void *args, uint32_t len);
/* Sends posted work now (qc_call does it before every command). */
void qc_flush(void);
/* For synchronizing calls: e if it is an error, else the first error of
 * posted work since the last such call (cleared), else cudaSuccess. */
cudaError_t qc_deferred(cudaError_t e);

/* ---- output.c ---- */

/* After every reply to a command (cmd): strips QCUDA_ST_OUTPUT from *status
 * and, if it was set, fetches the device output (printf, asserts) waiting in
 * the backend and writes it to stdout / stderr as CUDA would. */
void qc_output_reply(uint32_t cmd, uint32_t *status);

/*
 * ==== Layer 3, state: start-up and the devices, the handles held, the
 * range maps and the regions (allocations) in them.
 */

/* ---- init.c ---- */

/* Opens the device and says HELLO once; returns qc.init_err. */
cudaError_t qc_init(void);
/* qc_init(), then the sticky error if the context is dead, then makes the
 * thread's current device the session's (qc_sync_device). */
cudaError_t qc_ready(void);
/* qc_ready(), then cudaErrorInvalidValue unless args_ok: the start of a
 * call whose arguments are checked before anything else (their test is
 * evaluated first, so it may only look at the arguments). Inline, so that
 * the static analyzer sees which pointers the caller went on with. */
static inline cudaError_t qc_ready_args(int args_ok)
{
	cudaError_t e = qc_ready();

	return e != cudaSuccess || args_ok ? e : cudaErrorInvalidValue;
}
/* The start of an entry point: e = qc_ready(), returned through qc_ret if
 * it is an error. */
#define QC_ENTER(e)                                    \
	do {                                           \
		if (((e) = qc_ready()) != cudaSuccess) \
			return qc_ret(e);              \
	} while (0)
/* The same for an entry point that answers through the pointer p: NULL is
 * refused (cudaErrorInvalidValue), *p = none before anything can fail. */
#define QC_ENTER_OUT(p, none, e)                              \
	do {                                                  \
		if (!(p))                                     \
			return qc_ret(cudaErrorInvalidValue); \
		*(p) = (none);                                \
		QC_ENTER(e);                                  \
	} while (0)
int qc_current_device(void);
/* Makes device the calling thread's current device (libcuda: the device of
 * the thread's current context); the session follows at the next call. */
void qc_set_thread_device(int device);
/* cudaSetDevice switched the session to device: the thread's device too. */
void qc_device_switched(int device);
/* The device's properties and attributes, fetched once (device checked by
 * the caller). */
cudaError_t qc_device_props(int device, const struct qcuda_out_device_props **out);
/* The session has one current device; CUDA has one per thread: switches the
 * session to the calling thread's if they differ (SET_DEVICE, only with
 * several devices). */
cudaError_t qc_sync_device(void);

/* ---- handles.c ---- */

/* Stream handle on the wire for a cudaStream_t; ptds: the per-thread
 * default stream variant (_ptds/_ptsz entry points) was called. */
uint64_t qc_stream(cudaStream_t s, int ptds);
/* Whether s is a special stream or one the process created and holds. */
int qc_stream_known(cudaStream_t s, int ptds);
/* Whether s is NULL, cudaStreamLegacy or cudaStreamPerThread. */
int qc_stream_special(cudaStream_t s);
/* The stream and event handles the process holds (for posted work's
 * checks), each with a value of its owner's (stream.c: a stream's flags,
 * device and id). */
enum qc_handle_kind { QC_STREAM = 1, QC_EVENT = 2 };
cudaError_t qc_handle_add(enum qc_handle_kind kind, uint64_t h, uint64_t value);
void qc_handle_remove(enum qc_handle_kind kind, uint64_t h);
int qc_handle_known(enum qc_handle_kind kind, uint64_t h);
/* 1 and *value if the process holds h, else 0. */
int qc_handle_value(enum qc_handle_kind kind, uint64_t h, uint64_t *value);
void qc_handle_reset(void);

/* ---- rmap.c ---- */

/* Top of x86-64 user space with 4-level page tables. */
#define QC_USER_TOP 0x7ffffffff000ull

/* QC_MEM_SYMBOL: a module's __device__/__constant__ variable (VAR_GET),
 * device memory that cudaFree refuses; dropped with its module or at reset. */
/* QC_MEM_VMM: an address reservation of virtual memory management
 * (libcuda/vmm.c): device addresses, mapped or not (the backend knows). */
enum qc_mem_kind { QC_MEM_DEVICE, QC_MEM_PINNED, QC_MEM_REGISTERED, QC_MEM_MANAGED, QC_MEM_SYMBOL, QC_MEM_VMM };

/* One allocation, in qc_dev_map by its device range, in qc_host_map by its
 * host range, or both. */
struct qc_region {
	enum qc_mem_kind kind;
	uint64_t dev; /* device pointer, 0 if none (not mapped) */
	uint64_t unmap_dev; /* what HOST_UNMAP takes, if not dev (a registered range mapped by pages) */
	uintptr_t host; /* host address, 0 for device memory */
	uint64_t size; /* as asked for */
	size_t map_len; /* page-rounded: mmap / reservation length */
	uint64_t token; /* HOST_ALLOC token (pinned, managed) */
	unsigned int flags; /* cudaHostAlloc / cudaHostRegister / managed flags */
	int reserved; /* [res_start, +map_len) reserved PROT_NONE here */
	uint64_t res_start;
	void *hints; /* managed: managed.c's advice and prefetch record, or NULL */
	int device; /* the device current when it was made (its pointer attributes' device) */
	int has_device; /* device is set: kept when the region is added again */
};

struct qc_rent {
	uint64_t start, end;
	struct qc_region *r;
};

/* Sorted, non-overlapping ranges. */
struct qc_rmap {
	struct qc_rent *v;
	size_t n, cap;
};

/* Held (read) for lookups, (write) for updates of the two maps. */
extern pthread_rwlock_t qc_maps_lock;

extern struct qc_rmap qc_dev_map, qc_host_map;

extern size_t qc_page_size;

size_t qc_page_round(uint64_t n);

/* The region holding p, or NULL (maps lock held). */
struct qc_region *qc_rmap_find(const struct qc_rmap *m, uint64_t p);

/* Any entry overlapping [start, end)? (maps lock held) */
int qc_rmap_overlaps(const struct qc_rmap *m, uint64_t start, uint64_t end);

/* Adds r to the maps (both, if it has both sides); takes the lock. 0 or
 * -EEXIST (overlap), -ENOMEM. */
int qc_region_add(struct qc_region *r);

/* r, of device memory the backend answered with at dev (what: its command,
 * for the note), set up and added: its guest address range reserved, then
 * the maps. 0, or -1 where it overlaps a live allocation, which only a
 * wrong answer makes: then the caller releases r (qc_region_release). */
int qc_region_add_device(struct qc_region *r, enum qc_mem_kind kind, uint64_t dev, uint64_t size, const char *what);

/* Removes r from the maps (write lock held). */
void qc_region_remove_locked(struct qc_region *r);

/* PROT_NONE placeholder at a device address, so that nothing else in the
 * guest is ever mapped there (best effort): 1 if reserved. */
int qc_reserve_range(uint64_t dev, size_t len);

/* ---- region.c ---- */

/* cudaMalloc's path, the one way device memory is allocated: size bytes
 * (MALLOC), kept as a QC_MEM_DEVICE region whose token is token (a pool
 * block's serial, else 0); its address in *dev. */
cudaError_t qc_alloc_device(uint64_t size, uint64_t token, uint64_t *dev);
/* cudaMalloc's core, without the thread's last error (qc_ready, then
 * qc_alloc_device): what the library's own callers use, never cudaMalloc. */
cudaError_t qc_malloc(void **devPtr, size_t size);
/* Frees device memory qc_malloc gave, as cudaFree would (after qc_ready),
 * without the thread's last error. */
cudaError_t qc_free_device(void *devPtr);
/* Releases what a region holds on both sides and frees it; r is out of the
 * maps. With after_reset, the backend already dropped its side. */
cudaError_t qc_region_release(struct qc_region *r, int after_reset);
/* Takes out of the maps the region of kind that starts at device address
 * dev, and returns it (the caller releases it), or NULL if there is none. */
struct qc_region *qc_region_take(uint64_t dev, enum qc_mem_kind kind);
/* Forgets every allocation after DEVICE_RESET (the backend freed them). */
void qc_mem_reset(void);
/* A module variable's device range (VAR_GET), so that copies and
 * cudaPointerGetAttributes know it as device memory. */
void qc_mem_add_symbol(uint64_t dptr, uint64_t size);
/* A QC_MEM_SYMBOL region of [dev, dev+size) with token added: 0, 1 if out
 * of memory, -1 if the maps refused it (an overlap). */
int qc_region_add_symbol(uint64_t dev, uint64_t size, uint64_t token);
void qc_mem_remove_symbol(uint64_t dptr);
/* Where one side of a copy lives. */
struct qc_loc {
	int device; /* 1: device memory (the backend's), 0: guest memory */
	uint64_t dptr; /* device pointer if device */
	void *hptr; /* guest address if !device */
};
/* [p, p+n): device memory (need_device: it must be a device-accessible
 * range), or guest memory (host memory seen through its device pointer
 * too); unknown pointers are pageable memory, as under unified addressing. */
cudaError_t qc_resolve(const void *p, size_t n, int need_device, struct qc_loc *l);

/*
 * ==== Layer 4, concepts: what one concept's file gives the others. Their
 * public entry points (cuda*) are never called from inside the library:
 * the qc_* cores are (test/guest-lib/layers.test.ts checks it all).
 */

/* ---- hostmem.c ---- */

/* HOST_UNMAP of a host allocation's device side. */
cudaError_t qc_host_unmap(uint64_t dev);
/* For managed.c: calls fn on the managed allocation that holds all of
 * [p, p + n) (n > 0) with its start, its size and its hint slot, under the
 * maps' read lock (the allocation cannot be freed meanwhile); returns what
 * fn returns, or cudaErrorInvalidValue if no managed allocation holds the
 * whole range. */
typedef cudaError_t (*qc_managed_fn)(void **hints, uint64_t start, uint64_t size, void *arg);
cudaError_t qc_mem_managed(const void *p, size_t n, qc_managed_fn fn, void *arg);

/* ---- poolipc.c ---- */

/* cudaFree and cudaFreeAsync of a pointer cudaMemPoolImportPointer gave:
 * closed, its result in *e, and 1; 0 if dev is no such pointer. */
int qc_pool_free_import(uint64_t dev, cudaError_t *e);

/* ---- copy.c, copy3d.c ---- */

/* cudaMemcpy*'s core (not recording the error). */
cudaError_t qc_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream, int async,
		      int ptds);
/* cudaMemcpyBatchAsync's and cudaMemcpy3DBatchAsync's (copy3d.c) cores:
 * *fail is the index of the copy that failed, SIZE_MAX if the error is of
 * no one copy (cuMemcpyBatchAsync's failIdx). */
cudaError_t qc_memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t n,
			    const struct cudaMemcpyAttributes *attrs, const size_t *idxs, size_t nattrs,
			    cudaStream_t stream, int ptds, size_t *fail);
cudaError_t qc_memcpy3d_batch(size_t n, const struct cudaMemcpy3DBatchOp *ops, unsigned long long flags,
			      cudaStream_t stream, int ptds, size_t *fail);

/* ---- module.c ---- */

struct qc_module;
/* A registered kernel (__cudaRegisterFunction); a cudaKernel_t and a
 * cudaFunction_t are pointers to one. */
struct qc_kernel {
	struct qc_module *module;
	const void *host_fun; /* the host stub, the program's key for it */
	const char *device_name; /* mangled name in the fat binary */
	pthread_mutex_t lock;
	unsigned int gen;
	cudaError_t err;
	uint64_t func; /* function handle */
	uint32_t num_params, param_bytes;
	uint32_t *offset, *size; /* the layout, set once */
	char *owned_name; /* device_name, for a driver-API kernel */
	struct qc_kernel *next;
};
/* Forgets every module, function and variable handle after DEVICE_RESET
 * (the backend freed them; they are loaded again on next use). */
void qc_module_reset(void);
/* The kernel whose host stub is host_fun, or NULL. */
struct qc_kernel *qc_kernel_find(const void *host_fun);
/* The kernel a cudaKernel_t (from __cudaGetKernel) is, or NULL. */
struct qc_kernel *qc_kernel_of(cudaKernel_t kernel);
/* A kernel's host stub or a cudaKernel_t from cudaGetKernel: the entry
 * points documented with \note_cudaKernel_t in CUDA's headers take both. */
struct qc_kernel *qc_kernel_by_func(const void *func);
/* The function handle (and layout) of k in the current generation, loading
 * its module and looking it up (FUNC_GET) if need be. */
cudaError_t qc_kernel_get(struct qc_kernel *k, uint64_t *func);
/* The start of a call that takes a kernel: qc_ready(), then k's function
 * handle (qc_kernel_get); a NULL k is cudaErrorInvalidDeviceFunction. */
cudaError_t qc_kernel_ready(struct qc_kernel *k, uint64_t *func);
/* A new id for a staged upload (MODULE_UPLOAD): module images, graph descriptions. */
uint64_t qc_upload_id(void);
/* The device range of the variable whose host shadow is symbol (VAR_GET on
 * first use in a generation); checks qc_ready() first. */
cudaError_t qc_var_get(const void *symbol, uint64_t *dptr, uint64_t *size);
/* The driver API's modules (../libcuda): an image (fat binary, cubin or
 * PTX) of size bytes, loaded at first use like a registered one; copy: the
 * library keeps its own copy (else the caller keeps image alive). NULL if
 * out of memory. */
struct qc_module *qc_module_add_image(const void *image, uint64_t size, int copy);
/* m's image (a driver-API image, or a registered fat binary) and its size;
 * NULL if it has none a driver would take. */
const void *qc_module_image(const struct qc_module *m, uint64_t *size);
/* Whether m is a module the library holds (a handle from the program). */
int qc_module_known(const struct qc_module *m);
/* Loads m now, if it is not loaded (cuModuleLoad* report image errors at once). */
cudaError_t qc_module_load(struct qc_module *m);
/* Unloads m and forgets it with its kernels and globals. */
void qc_module_remove(struct qc_module *m);
/* The kernel of m named name, found or made (not looked up yet: see
 * qc_kernel_get); NULL if out of memory. */
struct qc_kernel *qc_module_kernel(struct qc_module *m, const char *name);
/* A global of m: its device range (VAR_GET on first use), known to copies
 * as device memory. */
cudaError_t qc_module_global(struct qc_module *m, const char *name, uint64_t *dptr, uint64_t *size);

/* ---- funccache.c ---- */

/* Function attributes and occupancy, asked once per function until it
 * changes (funccache.c); qc_func_cache_clear when handles may be reused. */
cudaError_t qc_func_attrs(uint64_t fh, struct qcuda_out_func_attrs *out);
cudaError_t qc_occupancy_blocks(uint64_t fh, uint64_t smem, int32_t block_size, uint32_t flags, uint64_t *blocks);
cudaError_t qc_occupancy_clusters(uint64_t fh, const unsigned int grid[3], const unsigned int block[3], uint32_t smem,
				  const cudaLaunchAttribute *attrs, unsigned int nattrs, uint32_t query,
				  uint64_t *answer);
cudaError_t qc_func_set_attr(uint64_t fh, uint32_t attr, int32_t value);
void qc_func_cache_clear(void);
/* Cluster launch shapes known to launch (funccache.c, for launch.c):
 * posted from then on; forgotten with the function's cached attributes. */
struct qcuda_args_launch_ex;
int qc_launch_shape_known(const struct qcuda_args_launch_ex *x);
void qc_launch_shape_launched(const struct qcuda_args_launch_ex *x);

/* ---- funcattr.c ---- */

/* Where parameter index of k lies in its layout (what FUNC_GET gave with
 * its handle): *size may be NULL. */
cudaError_t qc_param_info(struct qc_kernel *k, size_t index, size_t *offset, size_t *size);

/* ---- devctl.c ---- */

/* Context limits kept once asked (devctl.c): forgotten for device dev (-1: every device). */
void qc_limits_forget(int dev);

/* ---- launch.c ---- */

/* How a launch runs beyond its grid: cooperative (every block resident at
 * once), in thread-block clusters of cluster[0] x [1] x [2] blocks (1 x 1 x
 * 1: none). Either makes the launch a call answered at once, not posted. */
struct qc_launch_mode {
	int cooperative;
	unsigned int cluster[3];
};
/* Launches k (its layout packs args: one pointer per parameter) on stream;
 * mode NULL: a plain launch. */
cudaError_t qc_launch(struct qc_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream,
		      int ptds, const struct qc_launch_mode *mode);
/* The packed parameters of cuLaunchKernel's `extra` form
 * (CU_LAUNCH_PARAM_BUFFER_POINTER, p, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
 * CU_LAUNCH_PARAM_END): *buf NULL and *size 0 where not given;
 * cudaErrorInvalidValue for another key. */
cudaError_t qc_extra_buffer(void **extra, const void **buf, size_t *size);
/* The same with the parameters already packed in the kernel's layout
 * (cuLaunchKernel's `extra` form): size must be the layout's size. */
cudaError_t qc_launch_packed(struct qc_kernel *k, dim3 grid, dim3 block, const void *params, size_t size, size_t shmem,
			     cudaStream_t stream, int ptds, const struct qc_launch_mode *mode);

/* ---- callback.c ---- */

/* Forgets the host functions marked and not run, after DEVICE_RESET (the
 * backend forgot them too; natively they never run). */
void qc_callback_reset(void);

/* The generated per-command request builders (qc_req_*, qc_post_*). */
#include "qc_calls.h"

#endif
