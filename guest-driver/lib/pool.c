/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered allocation: cudaMallocAsync, cudaFreeAsync and memory
 * pools, kept in the guest on top of cudaMalloc's path (MALLOC / FREE and
 * memory.c's regions), so that the backend's per-session pointer checks and
 * the VM's memory quota apply unchanged and the backend has no call of its
 * own for them. libcuda's cuMemAllocAsync and cuMemPool* (../libcuda/pool.c)
 * are these same functions and pools.
 *
 * Blocks. A pool hands out blocks; each is one device allocation, a
 * QC_MEM_DEVICE region whose token (unused for device memory) is the
 * block's serial. A block is alive exactly while a region with its address
 * and serial is in qc_dev_map: cudaFree (which natively may free pool
 * memory too) and cudaDeviceReset drop regions behind the pool's back, and
 * the pool notices when it next looks at the block (stale blocks leave the
 * counts then).
 *
 * Reuse. cudaFreeAsync makes a block idle, tagged with the stream it was
 * freed on; only an allocation on that same stream takes it again, at once:
 * stream order makes that safe (work queued before the free runs before
 * work queued after the allocation). Blocks are never reused across streams
 * (the simplest correct choice: no event has to be waited for), so the
 * three reuse attributes are kept and reported but change nothing. The
 * per-thread default stream is a different stream in each thread and is
 * tagged with the thread; stream handles are never reused in a session, so
 * a tag never names a later stream (blocks freed on a stream since
 * destroyed wait for a trim, a lower threshold or an allocation short of
 * memory).
 *
 * Release. Idle blocks are really freed (FREE, as cudaFree frees) while the
 * pool holds more than its release threshold (oldest first, and none whose
 * release would take it below the threshold): in cudaFreeAsync itself, and
 * when the threshold is lowered - earlier than CUDA, which releases at the
 * next synchronize, and correct because a real free is cudaFree's: qc_call
 * sends the posted work first, and the backend frees on the context's queue
 * after it with cuMemFree, which waits for the device as cudaFree does, so
 * work queued before the free, on any stream, is done first. The cost is
 * that with the default threshold (0) cudaFreeAsync waits as cudaFree does;
 * raise the threshold and it returns at once. Also released: by
 * cudaMemPoolTrimTo, cudaMemPoolDestroy, and when an allocation fails for
 * want of memory (every pool's idle blocks, then one more try).
 *
 * Sizes. A block is its request rounded up to QC_POOL_ALIGN bytes.
 * UsedMemCurrent is the sum of the live blocks, ReservedMemCurrent that plus
 * the idle blocks (and allocations under way), each High the largest its
 * Current has been since it was reset. So reserved >= used, high >=
 * current, a trim releases idle blocks while reserved exceeds its argument
 * but never below it (as CUDA's keeps at least minBytesToKeep), trimming to
 * 0 leaves only the live blocks, and an empty pool reserves 0. CUDA maps pool
 * memory in larger granules (2 MiB on the H100), so its numbers differ from
 * these; the relations do not.
 *
 * Sharing. A pool made with a POSIX file descriptor handle type is exported
 * to other processes of the VM, and its blocks' pointers with it (poolipc.c).
 *
 * Locking: one mutex for every pool and the table of live blocks, never
 * held across a device call; it is taken before qc_maps_lock, never after.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "pool_impl.h"

pthread_mutex_t qc_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_pool *pools;
static struct qc_pool *default_pool[QC_MAX_DEVICES];
struct qc_pool *qc_current_pool[QC_MAX_DEVICES];
static struct block *live_table[QC_POOL_BUCKETS];
static uint64_t serials;
static atomic_ullong thread_serials;
static __thread uint64_t thread_serial;

/* ------------------------------------------------------------ bookkeeping */

static struct skey key_of(cudaStream_t s, int ptds)
{
	struct skey k = { qc_stream(s, ptds), 0 };

	if (k.stream == QCUDA_STREAM_PER_THREAD) {
		if (!thread_serial)
			thread_serial = atomic_fetch_add(&thread_serials, 1) + 1;
		k.thread = thread_serial;
	}
	return k;
}

static void blist_add(struct blist *l, struct block *b)
{
	b->next = NULL;
	b->prev = l->tail;
	if (l->tail)
		l->tail->next = b;
	else
		l->head = b;
	l->tail = b;
}

static void blist_del(struct blist *l, struct block *b)
{
	if (b->prev)
		b->prev->next = b->next;
	else
		l->head = b->next;
	/* The analyzer loses the links' invariant across reuse_block's free
	 * of a stale neighbour (blist_del unlinked it first). */
	if (b->next)
		b->next->prev = b->prev; // NOLINT(clang-analyzer-unix.Malloc)
	else
		l->tail = b->prev;
	b->prev = b->next = NULL;
}

static struct block **bucket(uint64_t dev)
{
	return &live_table[(dev / QC_POOL_ALIGN * 0x9E3779B97F4A7C15ull) >> 54 & (QC_POOL_BUCKETS - 1)];
}

static struct block *table_find(uint64_t dev)
{
	struct block *b = *bucket(dev);

	while (b && b->dev != dev)
		b = b->hnext;
	return b;
}

static void table_del(struct block *b)
{
	struct block **p = bucket(b->dev);

	while (*p && *p != b)
		p = &(*p)->hnext;
	if (*p)
		*p = b->hnext;
	b->hnext = NULL;
}

static void note_highs(struct qc_pool *p)
{
	if (p->used > p->used_high)
		p->used_high = p->used;
	if (p->reserved > p->reserved_high)
		p->reserved_high = p->reserved;
}

/* The region of a block, if the block is alive (maps lock held). */
static struct qc_region *block_region(const struct block *b)
{
	struct qc_region *r = qc_rmap_find(&qc_dev_map, b->dev);

	if (r && r->kind == QC_MEM_DEVICE && r->dev == b->dev && r->token == b->serial)
		return r;
	return NULL;
}

static int block_alive(const struct block *b)
{
	int alive;

	pthread_rwlock_rdlock(&qc_maps_lock);
	alive = block_region(b) != NULL;
	pthread_rwlock_unlock(&qc_maps_lock);
	return alive;
}

struct block *qc_pool_block_at(uint64_t dev)
{
	struct block *b = table_find(dev);

	return b && block_alive(b) ? b : NULL;
}

/* A destroyed pool goes once nothing of it is left (pool lock held). */
void qc_pool_maybe_free(struct qc_pool *p)
{
	struct qc_pool **pp = &pools;

	if (!p->destroyed || p->reserved || p->live.head || p->idle.head)
		return;
	while (*pp && *pp != p)
		pp = &(*pp)->next;
	if (*pp)
		*pp = p->next;
	free(p);
}

/* Forgets the blocks cudaFree or a reset freed behind the pool's back
 * (pool lock held). */
void qc_pool_drop_stale(struct qc_pool *p)
{
	struct block *b, *n;

	for (b = p->live.head; b; b = n) {
		n = b->next;
		if (block_alive(b))
			continue;
		blist_del(&p->live, b);
		table_del(b);
		p->used -= b->size;
		p->reserved -= b->size;
		free(b);
	}
	for (b = p->idle.head; b; b = n) {
		n = b->next;
		if (block_alive(b))
			continue;
		blist_del(&p->idle, b);
		p->reserved -= b->size;
		free(b);
	}
}

/* Takes idle blocks, oldest first, off p while it reserves more than keep,
 * but none whose release would leave it less (CUDA's trim keeps at least
 * what it is asked to), onto *chain for qc_pool_release_chain (pool lock held). */
void qc_pool_take_idle(struct qc_pool *p, uint64_t keep, struct block **chain)
{
	struct block *b, *n;

	for (b = p->idle.head; b && p->reserved > keep; b = n) {
		n = b->next;
		if (p->reserved - b->size < keep)
			continue;
		blist_del(&p->idle, b);
		p->reserved -= b->size;
		b->next = *chain;
		*chain = b;
	}
}

/* Really frees each block of a chain (pool lock not held); the first error. */
cudaError_t qc_pool_release_chain(struct block *chain)
{
	cudaError_t first = cudaSuccess;

	/* Explicit, though qc_call does it too: the FREEs must follow every
	 * piece of work posted before them. */
	if (chain)
		qc_flush();
	while (chain) {
		struct block *b = chain;
		struct qc_region *r;
		cudaError_t e = cudaSuccess;

		chain = b->next;
		pthread_rwlock_wrlock(&qc_maps_lock);
		r = block_region(b);
		if (r)
			qc_region_remove_locked(r);
		pthread_rwlock_unlock(&qc_maps_lock);
		if (r)
			e = qc_region_release(r, 0);
		if (first == cudaSuccess)
			first = e;
		free(b);
	}
	return first;
}

/* Every pool's idle blocks, for an allocation that found no memory. */
static void release_all_idle(void)
{
	struct block *chain = NULL;

	pthread_mutex_lock(&qc_pool_lock);
	for (struct qc_pool *p = pools; p; p = p->next)
		qc_pool_take_idle(p, 0, &chain);
	pthread_mutex_unlock(&qc_pool_lock);
	qc_pool_release_chain(chain);
}

/* ------------------------------------------------------------------ pools */

struct qc_pool *qc_pool_new(int device)
{
	struct qc_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->props.allocType = cudaMemAllocationTypePinned;
	p->props.handleTypes = cudaMemHandleTypeNone;
	p->props.location.type = cudaMemLocationTypeDevice;
	p->props.location.id = device;
	p->reuse[0] = p->reuse[1] = p->reuse[2] = 1; /* CUDA's defaults */
	p->next = pools;
	pools = p;
	return p;
}

/* The device's default pool, made at first use (pool lock held; device checked). */
struct qc_pool *qc_pool_default_of(int device)
{
	if (!default_pool[device]) {
		default_pool[device] = qc_pool_new(device);
		if (default_pool[device])
			default_pool[device]->is_default = 1;
	}
	return default_pool[device];
}

struct qc_pool *qc_pool_current_of(int device)
{
	return qc_current_pool[device] ? qc_current_pool[device] : qc_pool_default_of(device);
}

/* A live pool the program holds, or NULL (pool lock held). */
struct qc_pool *qc_pool_find(cudaMemPool_t h)
{
	for (struct qc_pool *p = pools; p; p = p->next)
		if ((cudaMemPool_t)p == h)
			return p->destroyed ? NULL : p;
	return NULL;
}

cudaError_t qc_pool_check_device(int device)
{
	return device < 0 || device >= qc.device_count || device >= QC_MAX_DEVICES ? cudaErrorInvalidDevice
										   : cudaSuccess;
}

/* -------------------------------------------------------- allocation, free */

/* An idle block of p freed on key, fitting size without wasting more than
 * its size again (pool lock held), off the idle list; stale ones dropped. */
static struct block *reuse_block(struct qc_pool *p, struct skey key, uint64_t size)
{
	struct block *best = NULL, *b, *n;

	for (b = p->idle.head; b; b = n) {
		n = b->next;
		if (b->key.stream != key.stream || b->key.thread != key.thread || b->size < size ||
		    b->size / 2 > size || (best && best->size <= b->size))
			continue;
		if (!block_alive(b)) {
			blist_del(&p->idle, b);
			p->reserved -= b->size;
			free(b);
			continue;
		}
		best = b;
	}
	if (best)
		blist_del(&p->idle, best);
	return best;
}

/* Makes b a live block of p (pool lock held). */
static void go_live(struct qc_pool *p, struct block *b)
{
	blist_add(&p->live, b);
	b->hnext = *bucket(b->dev);
	*bucket(b->dev) = b;
	p->used += b->size;
	note_highs(p);
}

/* Room for size more bytes under the pool's maxSize, releasing its idle
 * blocks if need be (pool lock held; *chain for the caller to release). */
static int room_for(struct qc_pool *p, uint64_t size, struct block **chain)
{
	uint64_t max = p->props.maxSize;

	if (!max)
		return 1;
	if (size > max)
		return 0;
	if (p->reserved > max - size)
		qc_pool_take_idle(p, 0, chain);
	return p->reserved <= max - size;
}

/* A new block b of size bytes for p (reserved while it is being made), its
 * address in *ptr. */
static cudaError_t new_block(struct qc_pool *p, uint64_t size, struct block *b, void **ptr)
{
	struct block *chain = NULL;
	cudaError_t e;

	pthread_mutex_lock(&qc_pool_lock);
	if (!room_for(p, size, &chain)) {
		pthread_mutex_unlock(&qc_pool_lock);
		qc_pool_release_chain(chain);
		return cudaErrorMemoryAllocation;
	}
	p->reserved += size;
	b->serial = ++serials;
	pthread_mutex_unlock(&qc_pool_lock);
	qc_pool_release_chain(chain);

	e = qc_alloc_device(size, b->serial, &b->dev);
	if (e == cudaErrorMemoryAllocation) {
		release_all_idle();
		e = qc_alloc_device(size, b->serial, &b->dev);
	}
	pthread_mutex_lock(&qc_pool_lock);
	if (e == cudaSuccess) {
		b->pool = p;
		b->size = size;
		go_live(p, b);
		*ptr = (void *)(uintptr_t)b->dev;
	} else {
		p->reserved -= size;
		qc_pool_maybe_free(p);
	}
	pthread_mutex_unlock(&qc_pool_lock);
	return e;
}

/* The common checks of an allocation or free on a stream. */
static cudaError_t stream_checks(cudaStream_t stream, int ptds)
{
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	return cudaSuccess;
}

/* In a captured stream, an allocation is a memory alloc node of the
 * capture's graph, a free a memory free node (graph.c): 1 and *e if so. */
static int capture_malloc(void **ptr, size_t size, cudaStream_t stream, int ptds, cudaError_t *e)
{
	struct cudaMemPoolProps props;
	struct qc_node_op op;

	if (!qc_capture_active(stream, ptds))
		return 0;
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = qc_current_device();
	*e = qc_node_op_alloc(&op, &props, size);
	if (*e != cudaSuccess)
		return 1;
	*ptr = op.alloc->ptr;
	if (!qc_capture_op(stream, ptds, &op, e)) {
		qc_node_op_free(&op); /* the capture ended meanwhile */
		*ptr = NULL;
		return 0;
	}
	if (*e != cudaSuccess)
		*ptr = NULL;
	return 1;
}

static int capture_free(void *ptr, cudaStream_t stream, int ptds, cudaError_t *e)
{
	struct qc_node_op op;

	if (!qc_capture_active(stream, ptds))
		return 0;
	*e = qc_node_op_free_mem(&op, ptr);
	return *e != cudaSuccess || qc_capture_op(stream, ptds, &op, e);
}

/* cudaMallocAsync (h NULL: the current pool of the thread's device) and
 * cudaMallocFromPoolAsync. */
static cudaError_t malloc_async(void **ptr, size_t size, cudaMemPool_t h, int from_pool, cudaStream_t stream, int ptds)
{
	struct qc_pool *p;
	struct block *b;
	struct skey key;
	uint64_t need;
	cudaError_t e;

	if (!ptr)
		return cudaErrorInvalidValue;
	*ptr = NULL;
	e = stream_checks(stream, ptds);
	if (e != cudaSuccess)
		return e;
	/* An empty allocation is NULL, as cudaMalloc's (CUDA 13 answers
	 * cudaSuccess, measured on the H100). */
	if (size == 0)
		return cudaSuccess;
	if (size > UINT64_MAX - QC_POOL_ALIGN)
		return cudaErrorInvalidValue;
	if (capture_malloc(ptr, size, stream, ptds, &e))
		return e;
	need = (size + QC_POOL_ALIGN - 1) / QC_POOL_ALIGN * QC_POOL_ALIGN;
	key = key_of(stream, ptds);

	pthread_mutex_lock(&qc_pool_lock);
	p = from_pool ? qc_pool_find(h) : qc_pool_current_of(qc_current_device());
	if (!p || p->imported) {
		pthread_mutex_unlock(&qc_pool_lock);
		/* Another process's pool hands out only what that process
		 * exports (cudaMemPoolImportPointer). */
		return p ? cudaErrorNotSupported : from_pool ? cudaErrorInvalidValue : cudaErrorMemoryAllocation;
	}
	b = reuse_block(p, key, need);
	if (b) {
		go_live(p, b);
		*ptr = (void *)(uintptr_t)b->dev;
		pthread_mutex_unlock(&qc_pool_lock);
		return cudaSuccess;
	}
	pthread_mutex_unlock(&qc_pool_lock);

	b = calloc(1, sizeof(*b));
	if (!b)
		return cudaErrorMemoryAllocation;
	e = new_block(p, need, b, ptr);
	if (e != cudaSuccess)
		free(b);
	return e;
}

/* cudaFreeAsync of memory that is no pool's: a device allocation of
 * cudaMalloc is freed as cudaFree frees it (after the work queued before);
 * anything else is refused. */
static cudaError_t free_plain(uint64_t dev)
{
	struct qc_region *r = qc_region_take(dev, QC_MEM_DEVICE);

	return r ? qc_region_release(r, 0) : cudaErrorInvalidValue;
}

static cudaError_t free_async(void *ptr, cudaStream_t stream, int ptds)
{
	uint64_t dev = (uintptr_t)ptr;
	struct block *b, *chain = NULL;
	struct qc_pool *p;
	cudaError_t e = stream_checks(stream, ptds);

	if (e != cudaSuccess)
		return e;
	if (!ptr)
		return cudaSuccess; /* as cudaFree(NULL) (CUDA 13, H100) */
	if (capture_free(ptr, stream, ptds, &e))
		return e;
	if (qc_graph_mem_owns(ptr))
		return cudaSuccess; /* back to its graph (graph.h) */
	if (qc_pool_free_import(dev, &e))
		return e;

	pthread_mutex_lock(&qc_pool_lock);
	b = table_find(dev);
	if (b && !block_alive(b)) { /* cudaFree or a reset took it: forget it */
		p = b->pool;
		qc_pool_drop_stale(p); /* frees b */
		qc_pool_maybe_free(p);
		b = NULL;
	}
	if (!b) {
		pthread_mutex_unlock(&qc_pool_lock);
		return free_plain(dev);
	}
	p = b->pool;
	table_del(b);
	blist_del(&p->live, b);
	p->used -= b->size;
	b->key = key_of(stream, ptds);
	blist_add(&p->idle, b);
	/* A destroyed pool keeps nothing; a live one its threshold. */
	qc_pool_take_idle(p, p->destroyed ? 0 : p->threshold, &chain);
	qc_pool_maybe_free(p);
	pthread_mutex_unlock(&qc_pool_lock);
	return qc_pool_release_chain(chain);
}

QC_API cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
	return qc_ret(malloc_async(devPtr, size, NULL, 0, hStream, 0));
}

QC_API cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
	return qc_ret(malloc_async(devPtr, size, NULL, 0, hStream, 1));
}

QC_API cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	return qc_ret(malloc_async(ptr, size, memPool, 1, stream, 0));
}

QC_API cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool, cudaStream_t stream)
{
	return qc_ret(malloc_async(ptr, size, memPool, 1, stream, 1));
}

QC_API cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
	return qc_ret(free_async(devPtr, hStream, 0));
}

QC_API cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
	return qc_ret(free_async(devPtr, hStream, 1));
}
