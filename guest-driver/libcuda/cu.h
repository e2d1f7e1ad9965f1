/* SPDX-License-Identifier: MIT */
/*
 * qcuda's libcuda.so.1: internal declarations.
 *
 * The guest's CUDA driver API, for programs built with nvcc's defaults
 * (static cudart), programs written against the driver API, and NVIDIA's
 * libraries (each embeds a static cudart). It is built from this directory
 * plus every object of the runtime library (../lib): the driver API is
 * served by the same session, the same range maps of allocations, the same
 * posted-work batches and module loading as qcuda's libcudart.so.13, with
 * the runtime's cuda* names kept local (libcuda.map exports cu* only).
 *
 * Entry points are defined under the names cuda.h gives today's ABI (it
 * #defines cuMemAlloc to cuMemAlloc_v2): the files here write those names
 * out. Older ABIs (cuMemAlloc taking 32-bit sizes) are declared where they
 * are defined; the _ptsz/_ptds variants in the generated cu_twins.h. Entry
 * points that are one runtime-layer call are not written here: forwards.def
 * lists them and the build generates forwards.c.
 *
 * Files: entry.c (cuInit, versions, cuGetExportTable), procaddr.c and the
 * generated procs.c (cuGetProcAddress), export.c (the tables cudart asks
 * for), integrity.c (the runtime's integrity check), context.c (primary and
 * created contexts, the current context per thread, context-local storage),
 * device.c (devices and their attributes), memory.c (allocations, copies,
 * memsets, pointer attributes), vmm.c (virtual memory management:
 * reservations, physical allocations, mappings), copy_batch.c (batched and 3D peer copies),
 * capture.c (stream capture), module.c
 * (libraries, modules, kernels, functions, globals), link.c (JIT linking
 * on the host's linker), launch.c (launches,
 * function attributes, occupancy), errors.c (CUresult names, strings and the
 * mapping from the runtime's cudaError_t), the generated stubs.c (every
 * other name of cuda.h: CUDA_ERROR_NOT_SUPPORTED).
 */
#ifndef QCUDA_CU_H
#define QCUDA_CU_H

#include <cuda.h>

#include "../lib/qcrt.h"
/* Prototypes of cuda.h's _ptsz/_ptds entry points (generated from cuda.h). */
#include "cu_twins.h"

/* A device pointer as the runtime layer's void *. */
#define PTR(d) ((void *)(uintptr_t)(d))

/* Types the forwards (forwards.def) cast between: the runtime's bit for bit. */
_Static_assert(sizeof(CUmemLocation) == sizeof(struct cudaMemLocation), "CUmemLocation is cudaMemLocation");
_Static_assert(sizeof(CUstreamAttrValue) == sizeof(cudaStreamAttrValue), "one union");
_Static_assert(sizeof(CUlaunchAttribute) == sizeof(cudaLaunchAttribute), "one attribute layout");

static inline struct cudaMemLocation cu_loc(CUmemLocation l)
{
	return (struct cudaMemLocation){ .type = (enum cudaMemLocationType)l.type, .id = l.id };
}

/* The CUDA 8 ABIs name a device, or CU_DEVICE_CPU for the host. */
static inline struct cudaMemLocation cu_device_loc(CUdevice d)
{
	if (d == CU_DEVICE_CPU)
		return (struct cudaMemLocation){ .type = cudaMemLocationTypeHost, .id = 0 };
	return (struct cudaMemLocation){ .type = cudaMemLocationTypeDevice, .id = d };
}

/* The start of an entry point: r = cu_enter(), returned if it is an error. */
#define CU_ENTER(r)                                     \
	do {                                            \
		if (((r) = cu_enter()) != CUDA_SUCCESS) \
			return r;                       \
	} while (0)
/* The same for an entry point that answers through the pointer p: NULL is
 * refused (CUDA_ERROR_INVALID_VALUE), *p = none before anything can fail. */
#define CU_ENTER_OUT(p, none, r)                         \
	do {                                             \
		if (!(p))                                \
			return CUDA_ERROR_INVALID_VALUE; \
		*(p) = (none);                           \
		CU_ENTER(r);                             \
	} while (0)

/* The four entry points of a copy that take one descriptor (of type T):
 * sync and async, each with its per-thread default stream form (_ptds,
 * _ptsz), all run by fn(desc, stream, async, ptds). */
#define CU_COPY_ENTRIES(T, fn, sync, sync_ptds, async, async_ptsz) \
	CUresult sync(const T *pCopy)                              \
	{                                                          \
		return fn(pCopy, NULL, 0, 0);                      \
	}                                                          \
	CUresult sync_ptds(const T *pCopy)                         \
	{                                                          \
		return fn(pCopy, NULL, 0, 1);                      \
	}                                                          \
	CUresult async(const T *pCopy, CUstream hStream)           \
	{                                                          \
		return fn(pCopy, hStream, 1, 0);                   \
	}                                                          \
	CUresult async_ptsz(const T *pCopy, CUstream hStream)      \
	{                                                          \
		return fn(pCopy, hStream, 1, 1);                   \
	}

/* The body of an entry point that is one runtime-layer call under the
 * thread's current context: its CUresult. */
#define CU_RUN(call)                                              \
	do {                                                      \
		CUresult r_ = cu_enter();                         \
		return r_ != CUDA_SUCCESS ? r_ : cu_result(call); \
	} while (0)

/* ---- errors.c ---- */

/* The driver API's status for what the runtime layer returned. */
CUresult cu_result(cudaError_t e);
/* For entry points qcuda does not implement: notes the name once on stderr
 * ("qcuda: cuFoo is not supported") and returns CUDA_ERROR_NOT_SUPPORTED. */
CUresult cu_unsupported(const char *name, int *warned);

/* ---- procaddr.c / procs.c ---- */

/* One row of the generated cuGetProcAddress table: the entry point of `name`
 * for programs built against CUDA `version` and later (until the next row of
 * the same name and stream kind), ptds: the per-thread default stream one. */
struct cu_proc {
	const char *name;
	int version;
	int ptds;
	void *fn;
};
extern const struct cu_proc cu_procs[];
extern const unsigned int cu_nprocs;

/* ---- context.c ---- */

/* cuInit has succeeded. */
extern int cu_initialized;
/* Checks that cuInit ran and the thread has a current context, and points
 * the runtime layer's per-thread device at its device. */
CUresult cu_enter(void);
/* The device's primary context (not retained, as cudart's interface asks). */
CUresult cu_primary_ctx(CUdevice dev, CUcontext *pctx);
/* The context that owns what was made on device (an allocation, a stream):
 * the current context if it is that device's, else the device's primary
 * context (every context of a device shares the session's one there). */
CUcontext cu_device_ctx(int device);
/* CONTEXT_LOCAL_STORAGE (export.c's table). */
CUresult cu_cls_put(CUcontext ctx, void *key, void *value, void (*dtor)(CUcontext, void *, void *));
CUresult cu_cls_delete(CUcontext ctx, void *key);
CUresult cu_cls_get(void **value, CUcontext ctx, void *key);

/* ---- device.c ---- */

/* Checks cuInit ran and dev is a device. */
CUresult cu_device_check(CUdevice dev);

/* ---- array.c ---- */

/* cuMemcpy2D*'s core: linear memory and arrays, one request (../lib/copy3d.c). */
CUresult cu_memcpy2d(const CUDA_MEMCPY2D *c, CUstream stream, int async, int ptds);

/* ---- link.c: JIT options, shared by cuLinkCreate and the loads that take them ---- */

/* PTX (size bytes) linked alone on the host with the caller's JIT options,
 * the logs, their sizes and the wall time written back into values as
 * cuLinkComplete writes them: the cubin, malloc'd, in *cubin. */
CUresult cu_link_one(const void *ptx, size_t size, unsigned int n, CUjit_option *options, void **values, void **cubin);
/* Options given where nothing is compiled (a cubin): hints, and the logs
 * answered empty (NUL at [0], 0 bytes written). */
CUresult cu_jit_no_compile(unsigned int n, CUjit_option *options, void **values);

/* ---- module.c ---- */

/* ---- kernels.c: kernels.h ---- */
#include "kernels.h"

/* A CUkernel or CUfunction the program holds (both are a kernel of the
 * runtime layer), or NULL. */
struct qc_kernel *cu_kernel(const void *h);
/* A whole file (at most QCUDA_MAX_MODULE bytes) in a malloc'd buffer with a
 * NUL after it; size (may be NULL): its bytes. */
CUresult cu_read_file(const char *path, void **buf, size_t *size);

#endif
