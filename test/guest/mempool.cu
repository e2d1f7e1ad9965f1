// SPDX-License-Identifier: MIT
// mempool: stream-ordered allocation (cudaMallocAsync, cudaFreeAsync,
// cudaMallocFromPoolAsync) and memory pools: the default and a created pool,
// the device's current pool, allocations on the NULL, a created and the
// per-thread stream used by async memsets and copies, reuse on the same
// stream, the release threshold, used / reserved and their high marks (and
// their reset), trimming, access, memory counted by cudaMemGetInfo, pool
// memory freed by cudaFree, the argument errors, and a pool made to be
// exported (its descriptor, a pointer's export data). No kernels. Prints no
// sizes: pools reserve at a granularity of their own, so only relations are
// checked.
#include <stdint.h>
#include "qctest.h"

#define MiB (1ull << 20)

static uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr a)
{
	uint64_t v = 0xdeadbeef;

	OK(cudaMemPoolGetAttribute(pool, a, &v));
	return v;
}

static uint64_t used(cudaMemPool_t pool)
{
	return attr(pool, cudaMemPoolAttrUsedMemCurrent);
}

static uint64_t reserved(cudaMemPool_t pool)
{
	return attr(pool, cudaMemPoolAttrReservedMemCurrent);
}

/* Fills n bytes at d with v on s, copies them back and checks them. */
static bool works(void *d, size_t n, int v, cudaStream_t s)
{
	unsigned char *h = (unsigned char *)malloc(n);
	bool ok;

	memset(h, ~v, n);
	ok = cudaMemsetAsync(d, v, n, s) == cudaSuccess &&
	     cudaMemcpyAsync(h, d, n, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
	     cudaStreamSynchronize(s) == cudaSuccess && qt_not_byte(h, v, n) < 0;
	free(h);
	return ok;
}

static void default_pool(cudaMemPool_t dp)
{
	cudaMemPool_t cur = NULL, other = NULL;
	int flag = -1;

	EXPECT(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
	qt_check(cur == dp, "the current pool is the default pool");
	EXPECT(cudaDeviceGetDefaultMemPool(&other, 0), cudaSuccess);
	qt_check(other == dp, "the default pool is the same each time");
	EXPECT(cudaDeviceGetDefaultMemPool(NULL, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetDefaultMemPool(&other, 99), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetDefaultMemPool(&other, -1), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetMemPool(&other, 99), cudaErrorInvalidValue);
	qt_check(attr(dp, cudaMemPoolAttrReleaseThreshold) == 0, "the release threshold is 0 by default");
	EXPECT(cudaMemPoolGetAttribute(dp, cudaMemPoolReuseFollowEventDependencies, &flag), cudaSuccess);
	qt_check(flag == 1, "reuse following event dependencies is on by default");
	EXPECT(cudaMemPoolGetAttribute(dp, cudaMemPoolReuseAllowOpportunistic, &flag), cudaSuccess);
	qt_check(flag == 1, "opportunistic reuse is on by default");
	EXPECT(cudaMemPoolGetAttribute(dp, cudaMemPoolReuseAllowInternalDependencies, &flag), cudaSuccess);
	qt_check(flag == 1, "reuse with internal dependencies is on by default");
	qt_check(used(dp) == 0, "nothing is used before the first allocation");
}

/* Allocation and free on one stream; the memory works between them. */
static void on_stream(cudaMemPool_t dp, cudaStream_t s, const char *name)
{
	void *a = NULL, *b = NULL;
	static unsigned char h[300000], g[300000];

	EXPECT(cudaMallocAsync(&a, MiB, s), cudaSuccess);
	qt_check(a != NULL, "%s: the allocation has an address", name);
	qt_check(works(a, MiB, 0x5a, s), "%s: memset and copy back", name);
	qt_check(used(dp) >= MiB, "%s: used >= what was allocated", name);
	qt_check(reserved(dp) >= used(dp), "%s: reserved >= used", name);
	/* Two allocations at once, a copy between them. */
	qt_fill(h, sizeof(h), 7);
	EXPECT(cudaMallocAsync(&b, sizeof(h), s), cudaSuccess);
	qt_check(b != NULL && b != a, "%s: a second allocation has its own address", name);
	OK(cudaMemcpyAsync(a, h, sizeof(h), cudaMemcpyHostToDevice, s));
	OK(cudaMemcpyAsync(b, a, sizeof(h), cudaMemcpyDeviceToDevice, s));
	OK(cudaMemcpyAsync(g, b, sizeof(h), cudaMemcpyDeviceToHost, s));
	EXPECT(cudaFreeAsync(a, s), cudaSuccess);
	EXPECT(cudaFreeAsync(b, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_diff(g, h, sizeof(h)) < 0, "%s: bytes came back through two allocations", name);
	qt_check(used(dp) == 0, "%s: nothing used after the frees", name);
}

/* With a high release threshold a freed block stays in the pool and the
 * next allocation on the same stream takes it again. */
static void reuse(cudaMemPool_t dp, cudaStream_t s)
{
	uint64_t max = UINT64_MAX, zero = 0, five = 5, r1, u1;
	void *a = NULL, *b = NULL;

	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReleaseThreshold, &max), cudaSuccess);
	qt_check(attr(dp, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX, "the threshold reads back");
	EXPECT(cudaMallocAsync(&a, MiB, s), cudaSuccess);
	OK(cudaMemsetAsync(a, 1, MiB, s));
	r1 = reserved(dp);
	u1 = used(dp);
	EXPECT(cudaFreeAsync(a, s), cudaSuccess);
	EXPECT(cudaMallocAsync(&b, MiB, s), cudaSuccess);
	qt_check(reserved(dp) == r1, "an allocation after a free on the same stream reserves nothing more");
	qt_check(used(dp) == u1, "used is the same again");
	qt_check(works(b, MiB, 0xc3, s), "the reused memory works");
	EXPECT(cudaFreeAsync(b, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(used(dp) == 0, "nothing used after the free");
	qt_check(reserved(dp) >= MiB, "a high threshold keeps the freed memory reserved");
	qt_check(attr(dp, cudaMemPoolAttrUsedMemHigh) >= MiB, "the used high mark saw the allocation");
	qt_check(attr(dp, cudaMemPoolAttrReservedMemHigh) >= reserved(dp), "reserved high >= reserved");

	EXPECT(cudaMemPoolTrimTo(dp, 0), cudaSuccess);
	qt_check(reserved(dp) == 0, "trimming to 0 releases what is not in use");
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemHigh, &zero), cudaSuccess);
	qt_check(attr(dp, cudaMemPoolAttrUsedMemHigh) == used(dp), "a reset used high mark is the current value");
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReservedMemHigh, &zero), cudaSuccess);
	qt_check(attr(dp, cudaMemPoolAttrReservedMemHigh) == reserved(dp),
		 "a reset reserved high mark is the current value");
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemHigh, &five), cudaErrorInvalidValue);
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReservedMemHigh, &five), cudaErrorInvalidValue);
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrUsedMemCurrent, &zero), cudaErrorInvalidValue);

	/* Keep some: trimming to a size keeps at least that much. */
	EXPECT(cudaMallocAsync(&a, 4 * MiB, s), cudaSuccess);
	EXPECT(cudaFreeAsync(a, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemPoolTrimTo(dp, 2 * MiB), cudaSuccess);
	qt_check(reserved(dp) >= 2 * MiB, "trimming keeps at least what it is asked to keep");
	EXPECT(cudaMemPoolTrimTo(dp, 0), cudaSuccess);
	qt_check(reserved(dp) == 0, "then trimming to 0 releases it");
	EXPECT(cudaMemPoolSetAttribute(dp, cudaMemPoolAttrReleaseThreshold, &zero), cudaSuccess);
}

/* cudaMemGetInfo counts pool memory; threshold 0 gives it back at a synchronize. */
static void counted(cudaStream_t s)
{
	size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
	void *a = NULL;

	EXPECT(cudaMemGetInfo(&free0, &total), cudaSuccess);
	EXPECT(cudaMallocAsync(&a, 64 * MiB, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free1, NULL), cudaSuccess);
	qt_check(free1 + 64 * MiB <= free0, "a 64 MiB async allocation takes >= 64 MiB of free memory");
	qt_check(works(a, 64 * MiB, 0x11, s), "all 64 MiB work");
	EXPECT(cudaFreeAsync(a, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemGetInfo(&free2, NULL), cudaSuccess);
	qt_check(free2 >= free1 + 64 * MiB, "freed and synchronized, the memory is free again");
}

/* cudaFree of pool memory is not asked: natively the pool goes on
 * counting it as used (CUDA 13, H100), which qcuda's pools do not mimic. */

/* A pool made with a POSIX file descriptor handle type is exported as a
 * descriptor, and its pointers as export data (test/libcuda/poolipc.c
 * imports them in another process); the default pool is not. Only success
 * or refusal is checked: the error a refusal names is not asked. */
static void exportable(cudaMemPool_t dp, cudaStream_t s)
{
	cudaMemPoolProps props;
	cudaMemPoolPtrExportData data;
	cudaMemPool_t pool = NULL;
	void *q = NULL;
	int fd = -1;

	qt_check(cudaMemPoolExportToShareableHandle(&fd, dp, cudaMemHandleTypePosixFileDescriptor, 0) != cudaSuccess,
		 "the default pool is not exported");
	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.handleTypes = cudaMemHandleTypePosixFileDescriptor;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	EXPECT(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	EXPECT(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 0), cudaSuccess);
	qt_check(fd >= 0 && close(fd) == 0, "the exported pool is a file descriptor");
	qt_check(cudaMemPoolExportToShareableHandle(&fd, pool, cudaMemHandleTypePosixFileDescriptor, 1) != cudaSuccess,
		 "an export with flags is refused");
	EXPECT(cudaMallocFromPoolAsync(&q, 3000, pool, s), cudaSuccess);
	EXPECT(cudaMemPoolExportPointer(&data, q), cudaSuccess);
	EXPECT(cudaFreeAsync(q, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemPoolDestroy(pool), cudaSuccess);
	(void)cudaGetLastError(); /* the refusals' */
}

static void created_pool(cudaMemPool_t dp, cudaStream_t s)
{
	cudaMemPoolProps props;
	cudaMemPool_t pool = NULL, cur = NULL;
	cudaMemAccessDesc desc;
	cudaMemLocation loc;
	cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
	void *q = NULL, *r = NULL;

	memset(&props, 0, sizeof(props));
	props.allocType = cudaMemAllocationTypePinned;
	props.handleTypes = cudaMemHandleTypeNone;
	props.location.type = cudaMemLocationTypeDevice;
	props.location.id = 0;
	EXPECT(cudaMemPoolCreate(&pool, &props), cudaSuccess);
	qt_check(pool != NULL && pool != dp, "a created pool is not the default pool");
	EXPECT(cudaMemPoolCreate(NULL, &props), cudaErrorInvalidValue);
	EXPECT(cudaMemPoolCreate(&cur, NULL), cudaErrorInvalidValue);
	props.allocType = cudaMemAllocationTypeInvalid;
	EXPECT(cudaMemPoolCreate(&cur, &props), cudaErrorInvalidValue);
	props.allocType = cudaMemAllocationTypePinned;
	qt_check(used(pool) == 0 && reserved(pool) == 0, "a new pool holds nothing");

	EXPECT(cudaMallocFromPoolAsync(&q, 3000, pool, s), cudaSuccess);
	qt_check(works(q, 3000, 0x77, s), "memory from a created pool works");
	qt_check(used(pool) >= 3000, "the created pool counts it");
	qt_check(reserved(pool) >= used(pool), "created pool: reserved >= used");
	qt_check(used(dp) == 0, "the default pool does not");
	EXPECT(cudaFreeAsync(q, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(used(pool) == 0, "created pool: nothing used after the free");

	loc.type = cudaMemLocationTypeDevice;
	loc.id = 0;
	EXPECT(cudaMemPoolGetAccess(&flags, pool, &loc), cudaSuccess);
	qt_check(flags == cudaMemAccessFlagsProtReadWrite, "the pool's device has read-write access");
	desc.location = loc;
	desc.flags = cudaMemAccessFlagsProtReadWrite;
	EXPECT(cudaMemPoolSetAccess(pool, &desc, 1), cudaSuccess);
	EXPECT(cudaMemPoolGetAccess(&flags, dp, &loc), cudaSuccess);
	qt_check(flags == cudaMemAccessFlagsProtReadWrite, "the default pool too");

	/* The device's current pool serves cudaMallocAsync. */
	EXPECT(cudaDeviceSetMemPool(0, pool), cudaSuccess);
	EXPECT(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
	qt_check(cur == pool, "the current pool is the one set");
	EXPECT(cudaMallocAsync(&r, 4096, s), cudaSuccess);
	qt_check(used(pool) >= 4096 && used(dp) == 0, "cudaMallocAsync takes from the current pool");
	qt_check(works(r, 4096, 0x42, s), "and the memory works");
	EXPECT(cudaFreeAsync(r, s), cudaSuccess);
	EXPECT(cudaDeviceSetMemPool(0, dp), cudaSuccess);
	EXPECT(cudaDeviceGetMemPool(&cur, 0), cudaSuccess);
	qt_check(cur == dp, "the default pool is current again");
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);

	EXPECT(cudaMemPoolDestroy(pool), cudaSuccess);
	EXPECT(cudaMemPoolDestroy(dp), cudaErrorInvalidValue);
}

static void errors(cudaMemPool_t dp, cudaStream_t s)
{
	void *p = (void *)1;
	uint64_t v = 0;
	char host[64];

	EXPECT(cudaMallocAsync(NULL, 16, s), cudaErrorInvalidValue);
	EXPECT(cudaMallocAsync(&p, 0, s), cudaSuccess);
	EXPECT(cudaMallocFromPoolAsync(NULL, 16, dp, s), cudaErrorInvalidValue);
	EXPECT(cudaMallocFromPoolAsync(&p, 16, NULL, s), cudaErrorInvalidValue);
	EXPECT(cudaFreeAsync(NULL, s), cudaSuccess);
	EXPECT(cudaFreeAsync(host, s), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemPoolGetAttribute(dp, cudaMemPoolAttrUsedMemCurrent, NULL), cudaErrorInvalidValue);
	EXPECT(cudaMemPoolGetAttribute(NULL, cudaMemPoolAttrUsedMemCurrent, &v), cudaErrorInvalidValue);
	/* Not asked: a NULL attribute value to set, a NULL pool to trim,
	 * destroy or make current (NVIDIA's runtime crashes on the first). */
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
}

int main(void)
{
	cudaMemPool_t dp = NULL;
	cudaStream_t s = NULL;

	qt_begin("mempool");
	EXPECT(cudaDeviceGetDefaultMemPool(&dp, 0), cudaSuccess);
	qt_check(dp != NULL, "device 0 has a default pool");
	default_pool(dp);
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	on_stream(dp, 0, "NULL stream");
	on_stream(dp, s, "created stream");
	on_stream(dp, cudaStreamPerThread, "per-thread stream");
	reuse(dp, s);
	counted(s);
	created_pool(dp, s);
	errors(dp, s);
	exportable(dp, s);
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
