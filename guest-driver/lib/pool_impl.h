/* SPDX-License-Identifier: MIT */
/*
 * Stream-ordered allocation's insides, shared by pool.c (blocks, allocation
 * and free) and mempool.c (the pools as objects: the device's, created ones,
 * attributes, access). pool.c's opening comment tells how it works.
 */
#ifndef QC_POOL_IMPL_H
#define QC_POOL_IMPL_H

#include <pthread.h>

#include "pool.h"

#define QC_POOL_ALIGN 512u
#define QC_POOL_BUCKETS 1024u

/* The stream a block was freed on: its handle, and for the per-thread
 * default stream the thread (a serial of the library's: thread ids are
 * reused). */
struct skey {
	uint64_t stream;
	uint64_t thread;
};

struct block {
	uint64_t dev, size, serial;
	struct qc_pool *pool;
	struct skey key; /* idle: the stream that freed it */
	struct block *prev, *next; /* the pool's live or idle list; a chain to release */
	struct block *hnext; /* live: the address table's chain */
};

struct blist {
	struct block *head, *tail;
};

/* A pool's name between processes (poolipc.c): random, not secret. */
#define QC_POOL_ID_BYTES 16

struct qc_pool {
	struct cudaMemPoolProps props;
	int is_default;
	int imported; /* another process's pool (poolipc.c): no allocations from it */
	unsigned char id[QC_POOL_ID_BYTES]; /* an exportable or imported pool's */
	int destroyed; /* destroyed with blocks out: freed with the last */
	uint64_t threshold;
	int reuse[3]; /* cudaMemPoolReuse* (attributes 1..3) */
	uint64_t used, used_high, reserved, reserved_high;
	struct blist live, idle;
	struct qc_pool *next; /* every pool, destroyed ones with blocks out too */
};

/* Every pool and the table of live blocks (pool.c). */
extern pthread_mutex_t qc_pool_lock;
/* A device's pool set by cudaDeviceSetMemPool; NULL: its default. */
extern struct qc_pool *qc_current_pool[QC_MAX_DEVICES];

/* A destroyed pool goes once nothing of it is left (pool lock held). */
void qc_pool_maybe_free(struct qc_pool *p);
/* Forgets the blocks cudaFree or a reset freed behind the pool's back
 * (pool lock held). */
void qc_pool_drop_stale(struct qc_pool *p);
/* Takes idle blocks, oldest first, off p while it reserves more than keep,
 * onto *chain for qc_pool_release_chain (pool lock held). */
void qc_pool_take_idle(struct qc_pool *p, uint64_t keep, struct block **chain);
/* Really frees each block of a chain (pool lock not held); the first error. */
cudaError_t qc_pool_release_chain(struct block *chain);
struct qc_pool *qc_pool_new(int device);
/* An exportable pool's id, random (poolipc.c): 0, or -1 (no randomness). */
int qc_pool_make_id(struct qc_pool *p);
/* The live block at dev (pool lock held), or NULL. */
struct block *qc_pool_block_at(uint64_t dev);
/* The device's default pool, made at first use (pool lock held; device checked). */
struct qc_pool *qc_pool_default_of(int device);
/* The device's current pool (pool lock held; device checked). */
struct qc_pool *qc_pool_current_of(int device);
/* A live pool the program holds, or NULL (pool lock held). */
struct qc_pool *qc_pool_find(cudaMemPool_t h);
/* cudaErrorInvalidDevice for a device out of range. */
cudaError_t qc_pool_check_device(int device);

#endif
