/* SPDX-License-Identifier: MIT */
/*
 * Memory pools shared between the processes of one VM
 * (cudaMemPoolExportToShareableHandle and ...ImportFromShareableHandle,
 * cudaMemPoolExportPointer and ...ImportPointer), built on IPC memory
 * handles (ipc.c) as pools are built on cudaMalloc (pool.c). Only the POSIX
 * file descriptor handle type is served.
 *
 * Pools. A pool made with handleTypes cudaMemHandleTypePosixFileDescriptor
 * gets a random id. Its shareable handle is a sealed memfd holding that id
 * and the pool's device: nothing secret, since an id reaches no memory.
 * Importing it makes a pool of the importer's that only names the
 * exporter's: nothing is allocated from it (CUDA's rule too), its
 * attributes read 0, and it is destroyed as any.
 *
 * Pointers. Each pool block is one device allocation (pool.c), so a
 * pointer's export data (64 bytes) is the IPC handle of its block - the
 * token the backend minted, the only way to the memory, so forged data
 * opens nothing - with the pool's id in the handle's reserved bytes.
 * Importing checks the id against the imported pool's and opens the handle.
 * The imported pointer is known as device memory for copies (a region of
 * kind QC_MEM_SYMBOL tagged as an import, so that a reset forgets it as it
 * forgets other regions) and is closed by cudaFree or cudaFreeAsync; CUDA
 * requires that before the exporter frees the block, and the exporter's
 * real free takes it from importers anyway (backend ipc.ts).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "pool_impl.h"
#include "qc_os.h"
#include "qc_calls.h"

/* The shareable handle's contents. */
#define POOL_FD_MAGIC "qcudapol"
struct pool_fd_header {
	char magic[8];
	unsigned char id[QC_POOL_ID_BYTES];
	int32_t device;
	uint32_t zero;
};

/* What a pointer's export data holds in its IPC handle's reserved bytes. */
#define PTR_MAGIC "qcpoolpt"
struct ptr_tag {
	char magic[8];
	unsigned char pool[QC_POOL_ID_BYTES];
	unsigned char zero[16];
};
_Static_assert(sizeof(struct ptr_tag) == sizeof(((struct qcuda_ipc_handle *)0)->reserved), "the tag fills reserved");
_Static_assert(sizeof(struct qcuda_ipc_handle) == sizeof(struct cudaMemPoolPtrExportData), "export data is 64 bytes");

/* The token of an imported pointer's region (unused for QC_MEM_SYMBOL). */
#define IMPORT_TAG 0x716370696d706f72ull /* "qcpimpor" */

/* Imported pointers not yet freed (a reset leaves it high: harmless), so
 * that every cudaFree and cudaFreeAsync of a process that imports none
 * skips the maps' write lock. */
static atomic_int imports;

int qc_pool_make_id(struct qc_pool *p)
{
	return qc_os_random(p->id, sizeof(p->id));
}

/* ------------------------------------------------------------------ pools */

/* An exportable pool of this process (pool lock held), or NULL. */
static struct qc_pool *exportable(cudaMemPool_t h)
{
	struct qc_pool *p = qc_pool_find(h);

	return p && !p->imported && (p->props.handleTypes & cudaMemHandleTypePosixFileDescriptor) ? p : NULL;
}

/* A sealed memfd holding hdr, in *fd (none on Windows). */
static cudaError_t sealed_fd(const struct pool_fd_header *hdr, int *fd)
{
	switch (qc_os_sealed_file("qcuda-pool", hdr, sizeof(*hdr), fd)) {
	case 0:
		return cudaSuccess;
	case -ENOSYS:
		return cudaErrorNotSupported;
	case -EIO:
		return cudaErrorOperatingSystem;
	default:
		return cudaErrorMemoryAllocation;
	}
}

static cudaError_t pool_export(void *handle, cudaMemPool_t memPool, enum cudaMemAllocationHandleType type,
			       unsigned int flags)
{
	struct pool_fd_header hdr = { .magic = POOL_FD_MAGIC };
	struct qc_pool *p;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	/* A type the pool was not made with is CUDA's invalid value too. */
	if (!handle || flags || type != cudaMemHandleTypePosixFileDescriptor)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&qc_pool_lock);
	p = exportable(memPool);
	if (p) {
		memcpy(hdr.id, p->id, sizeof(hdr.id));
		hdr.device = p->props.location.id;
	}
	pthread_mutex_unlock(&qc_pool_lock);
	return p ? sealed_fd(&hdr, (int *)handle) : cudaErrorInvalidValue;
}

QC_API cudaError_t cudaMemPoolExportToShareableHandle(void *shareableHandle, cudaMemPool_t memPool,
						      enum cudaMemAllocationHandleType handleType, unsigned int flags)
{
	return qc_ret(pool_export(shareableHandle, memPool, handleType, flags));
}

static cudaError_t pool_import(cudaMemPool_t *memPool, void *handle, enum cudaMemAllocationHandleType type,
			       unsigned int flags)
{
	struct pool_fd_header hdr;
	struct qc_pool *p;
	cudaError_t e = qc_ready_args(memPool && !flags && type == cudaMemHandleTypePosixFileDescriptor);
	int r;

	if (e != cudaSuccess)
		return e;
	/* Not one of ours (or no file at all): what the driver answers a
	 * descriptor it did not make. */
	r = qc_os_read_sealed((int)(intptr_t)handle, &hdr, sizeof(hdr));
	if (r == -ENOSYS)
		return cudaErrorNotSupported;
	if (r || memcmp(hdr.magic, POOL_FD_MAGIC, sizeof(hdr.magic)) != 0 || hdr.zero ||
	    qc_pool_check_device(hdr.device) != cudaSuccess)
		return cudaErrorInvalidValue;
	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_new(hdr.device);
	if (p) {
		p->imported = 1;
		p->props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
		memcpy(p->id, hdr.id, sizeof(p->id));
	}
	pthread_mutex_unlock(&qc_pool_lock);
	if (!p)
		return cudaErrorMemoryAllocation;
	*memPool = (cudaMemPool_t)p;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolImportFromShareableHandle(cudaMemPool_t *memPool, void *shareableHandle,
							enum cudaMemAllocationHandleType handleType, unsigned int flags)
{
	return qc_ret(pool_import(memPool, shareableHandle, handleType, flags));
}

/* --------------------------------------------------------------- pointers */

static cudaError_t ptr_export(struct cudaMemPoolPtrExportData *data, void *ptr)
{
	struct ptr_tag tag = { .magic = PTR_MAGIC };
	struct qcuda_ipc_handle h;
	struct block *b;
	cudaError_t e = qc_ready_args(data && ptr);

	if (e != cudaSuccess)
		return e;
	/* The start of a live block of an exportable pool. */
	pthread_mutex_lock(&qc_pool_lock);
	b = qc_pool_block_at((uintptr_t)ptr);
	if (b && exportable((cudaMemPool_t)b->pool))
		memcpy(tag.pool, b->pool->id, sizeof(tag.pool));
	else
		b = NULL;
	pthread_mutex_unlock(&qc_pool_lock);
	if (!b)
		return cudaErrorInvalidValue;
	e = qc_req_ipc_get((uintptr_t)ptr, &h);
	if (e != cudaSuccess)
		return e;
	memcpy(h.reserved, &tag, sizeof(tag));
	memcpy(data, &h, sizeof(h));
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolExportPointer(struct cudaMemPoolPtrExportData *exportData, void *ptr)
{
	return qc_ret(ptr_export(exportData, ptr));
}

/* Known as device memory for copies, and as an import for cudaFree. */
static cudaError_t add_import(uint64_t dev, uint64_t size)
{
	int rc = qc_region_add_symbol(dev, size, IMPORT_TAG);

	if (rc > 0)
		return cudaErrorMemoryAllocation;
	if (rc < 0) {
		qc_msg("an imported pool pointer at %#llx+%llu overlaps a known range", (unsigned long long)dev,
		       (unsigned long long)size);
		return cudaErrorUnknown;
	}
	atomic_fetch_add(&imports, 1);
	return cudaSuccess;
}

/* The tag of data, if it names the imported pool h: 0, else -1. */
static int tag_matches(cudaMemPool_t h, const struct ptr_tag *tag)
{
	static const unsigned char zero[sizeof(tag->zero)];
	struct qc_pool *p;
	int ok;

	if (memcmp(tag->magic, PTR_MAGIC, sizeof(tag->magic)) || memcmp(tag->zero, zero, sizeof(zero)))
		return -1;
	pthread_mutex_lock(&qc_pool_lock);
	p = qc_pool_find(h);
	ok = p && p->imported && !memcmp(p->id, tag->pool, sizeof(p->id));
	pthread_mutex_unlock(&qc_pool_lock);
	return ok ? 0 : -1;
}

static cudaError_t ptr_import(void **ptr, cudaMemPool_t memPool, const struct cudaMemPoolPtrExportData *data)
{
	struct qcuda_ipc_handle h;
	struct ptr_tag tag;
	uint64_t p = 0;
	cudaError_t e = qc_ready_args(ptr && data);

	if (e != cudaSuccess)
		return e;
	memcpy(&h, data, sizeof(h));
	memcpy(&tag, h.reserved, sizeof(tag));
	if (tag_matches(memPool, &tag))
		return cudaErrorInvalidValue;
	memset(h.reserved, 0, sizeof(h.reserved));
	e = qc_req_ipc_open(&h, &p);
	/* A token this VM never minted, or whose block was freed: bad data,
	 * which is all CUDA's import answers. */
	if (e == cudaErrorInvalidResourceHandle || e == cudaErrorDeviceUninitialized)
		return cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return e;
	e = add_import(p, h.size);
	if (e != cudaSuccess) {
		qc_req_ipc_close(p);
		return e;
	}
	*ptr = (void *)(uintptr_t)p;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemPoolImportPointer(void **ptr, cudaMemPool_t memPool,
					    struct cudaMemPoolPtrExportData *exportData)
{
	return qc_ret(ptr_import(ptr, memPool, exportData));
}

int qc_pool_free_import(uint64_t dev, cudaError_t *e)
{
	struct qc_region *r;

	if (atomic_load(&imports) <= 0)
		return 0;
	pthread_rwlock_wrlock(&qc_maps_lock);
	r = qc_rmap_find(&qc_dev_map, dev);
	if (r && r->kind == QC_MEM_SYMBOL && r->dev == dev && r->token == IMPORT_TAG)
		qc_region_remove_locked(r);
	else
		r = NULL;
	pthread_rwlock_unlock(&qc_maps_lock);
	if (!r)
		return 0;
	atomic_fetch_sub(&imports, 1);
	free(r);
	*e = qc_req_ipc_close(dev);
	return 1;
}
