/* SPDX-License-Identifier: MIT */
/*
 * The stream and event handles this process holds. Posted work (batch.c)
 * reaches the backend later, so its handles are checked here first: an
 * unknown handle fails at the call, as in CUDA, not at the next
 * synchronization. The backend still checks every handle itself; this is for
 * the program's sake, not for safety.
 *
 * An open-addressing set of nonzero 64-bit keys (kind in the top bits over
 * the backend's handle), grown at 3/4 full; removal re-inserts the rest of
 * the cluster so that lookups need no tombstones. Each key carries a value
 * of its owner's (stream.c keeps a stream's flags, device and id there:
 * what the queries of a stream answer without a round trip).
 */
#include <pthread.h>
#include <stdlib.h>

#include "qcrt.h"

static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static uint64_t *slots, *vals; /* vals[i]: the value of slots[i] */
static size_t cap, used; /* cap: a power of two, or 0 */

static uint64_t key(enum qc_handle_kind kind, uint64_t h)
{
	return h ^ ((uint64_t)kind << 62);
}

static size_t home(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdull;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static void put(uint64_t k, uint64_t v)
{
	size_t i = home(k);

	while (slots[i] && slots[i] != k)
		i = (i + 1) & (cap - 1);
	if (!slots[i])
		used++;
	slots[i] = k;
	vals[i] = v;
}

/* The slot of k, or -1 (lock held). */
static long find(uint64_t k)
{
	size_t i;

	if (!cap)
		return -1;
	for (i = home(k); slots[i] && slots[i] != k; i = (i + 1) & (cap - 1))
		;
	return slots[i] ? (long)i : -1;
}

static int grow(void)
{
	size_t old_cap = cap;
	uint64_t *old = slots, *old_vals = vals;
	size_t n = cap ? cap * 2 : 64;
	uint64_t *s = calloc(n, sizeof(*s)), *v = calloc(n, sizeof(*v));

	if (!s || !v) {
		free(s);
		free(v);
		return -1;
	}
	slots = s;
	vals = v;
	cap = n;
	used = 0;
	for (size_t i = 0; i < old_cap; i++)
		if (old[i])
			put(old[i], old_vals[i]);
	free(old);
	free(old_vals);
	return 0;
}

cudaError_t qc_handle_add(enum qc_handle_kind kind, uint64_t h, uint64_t value)
{
	cudaError_t e = cudaSuccess;

	pthread_rwlock_wrlock(&lock);
	if ((used + 1) * 4 > cap * 3 && grow())
		e = cudaErrorMemoryAllocation;
	else
		put(key(kind, h), value);
	pthread_rwlock_unlock(&lock);
	return e;
}

void qc_handle_remove(enum qc_handle_kind kind, uint64_t h)
{
	long at;
	size_t i;

	pthread_rwlock_wrlock(&lock);
	at = find(key(kind, h));
	if (at >= 0) {
		i = (size_t)at;
		slots[i] = 0;
		used--;
		for (i = (i + 1) & (cap - 1); slots[i]; i = (i + 1) & (cap - 1)) {
			uint64_t moved = slots[i];

			slots[i] = 0;
			used--;
			put(moved, vals[i]);
		}
	}
	pthread_rwlock_unlock(&lock);
}

int qc_handle_known(enum qc_handle_kind kind, uint64_t h)
{
	int found;

	pthread_rwlock_rdlock(&lock);
	found = find(key(kind, h)) >= 0;
	pthread_rwlock_unlock(&lock);
	return found;
}

int qc_handle_value(enum qc_handle_kind kind, uint64_t h, uint64_t *value)
{
	long at;

	pthread_rwlock_rdlock(&lock);
	at = find(key(kind, h));
	if (at >= 0)
		*value = vals[at];
	pthread_rwlock_unlock(&lock);
	return at >= 0;
}

void qc_handle_reset(void)
{
	pthread_rwlock_wrlock(&lock);
	for (size_t i = 0; i < cap; i++)
		slots[i] = 0;
	used = 0;
	pthread_rwlock_unlock(&lock);
}
