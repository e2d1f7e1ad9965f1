// SPDX-License-Identifier: MIT
// memadvise: CUDA 13's managed-memory hints. cudaMemPrefetchAsync (device,
// host, host NUMA node; sub-ranges; every stream kind), cudaMemAdvise (read
// mostly, preferred location, accessed by, and their unsets),
// cudaMemRangeGetAttribute(s) answering what was set, page by page (a range
// stands for every CPU page it touches), cudaMemPrefetchBatchAsync,
// cudaStreamAttachMemAsync; the argument errors of each (non-managed
// pointers, out-of-range counts, count 0, bad devices and locations, bad
// flags, bad streams, NULL); 8 threads advising and querying one allocation;
// then kernels on prefetched / advised / attached memory, the CPU checking
// every element after each.
//
// Everything before the kernels needs no kernel support, so a device without
// it (the emu provider) runs those checks and then skips at the first
// launch. The expected answers are CUDA 13's as measured natively on an H100
// (driver 580), also where the documentation says nothing (which error,
// the ids reported for the host). Lines starting with "info" print answers
// that depend on the system (host NUMA nodes; pinned and pageable memory,
// with cudaDevAttrPageableMemoryAccess), on the build (stream 0 is the
// per-thread stream in memadvise_ptds) or that CUDA does not promise (the
// order of the AccessedBy list): not checked, the outputs are diffed.
// Calls that crash NVIDIA's runtime or are undefined there (flags 0 for
// cudaStreamAttachMemAsync, a destroyed stream) are made in a qcuda guest
// only.
#include <pthread.h>

#include "qctest.h"

#define N (64 << 10) /* unsigned per kernel buffer: 256 KiB */

static size_t PAGE; /* the CPU page size */

static cudaMemLocation loc(cudaMemLocationType type, int id)
{
	cudaMemLocation l;

	l.type = type;
	l.id = id;
	return l;
}

static cudaMemLocation dev(int id)
{
	return loc(cudaMemLocationTypeDevice, id);
}

static cudaMemLocation host(void)
{
	return loc(cudaMemLocationTypeHost, 0);
}

/* An answer printed, not checked. */
#define INFO(call) print_info((call), #call)
static void print_info(cudaError_t got, const char *what)
{
	printf("info %s -> %s\n", what, cudaGetErrorName(got));
}

/*
 * A call made only in a qcuda guest, which refuses it with want: natively it
 * is undefined (a destroyed stream's handle) or crashes NVIDIA's runtime
 * (measured), so it is not made there. The line reads the same either way.
 */
#define QCUDA_ONLY(call, want, what)                                                                \
	do {                                                                                        \
		cudaError_t e_ = qt_on_qcuda() ? (call) : (want);                                   \
		qt_check(e_ == (want), "%s -> %s in a qcuda guest (not called natively)%s%s", what, \
			 cudaGetErrorName(want), e_ == (want) ? "" : ", got ",                      \
			 e_ == (want) ? "" : cudaGetErrorName(e_));                                 \
		cudaGetLastError();                                                                 \
	} while (0)

static const char *attr_name(cudaMemRangeAttribute a)
{
	switch (a) {
	case cudaMemRangeAttributeReadMostly:
		return "ReadMostly";
	case cudaMemRangeAttributePreferredLocation:
		return "PreferredLocation";
	case cudaMemRangeAttributeAccessedBy:
		return "AccessedBy";
	case cudaMemRangeAttributeLastPrefetchLocation:
		return "LastPrefetchLocation";
	case cudaMemRangeAttributePreferredLocationType:
		return "PreferredLocationType";
	case cudaMemRangeAttributePreferredLocationId:
		return "PreferredLocationId";
	case cudaMemRangeAttributeLastPrefetchLocationType:
		return "LastPrefetchLocationType";
	case cudaMemRangeAttributeLastPrefetchLocationId:
		return "LastPrefetchLocationId";
	}
	return "?";
}

/* One 32-bit range attribute of [p, p + n); 12345 if the query failed. */
static int rattr(cudaMemRangeAttribute a, const void *p, size_t n)
{
	int v = 12345;

	OK(cudaMemRangeGetAttribute(&v, sizeof(v), a, p, n));
	return v;
}

/* "ok   <what>: <attribute> -> <value>" if it is want. */
static void expect_attr(cudaMemRangeAttribute a, const void *p, size_t n, int want, const char *what)
{
	int v = rattr(a, p, n);

	qt_check(v == want, "%s: %s -> %d%s", what, attr_name(a), v, v == want ? "" : " (unexpected)");
}

static void info_attr(cudaMemRangeAttribute a, const void *p, size_t n, const char *what)
{
	printf("info %s: %s -> %d\n", what, attr_name(a), rattr(a, p, n));
}

/* The AccessedBy list of [p, p + n) in 3 slots. */
static void accessed_by(const void *p, size_t n, int out[3])
{
	out[0] = out[1] = out[2] = 12345;
	OK(cudaMemRangeGetAttribute(out, 3 * sizeof(int), cudaMemRangeAttributeAccessedBy, p, n));
}

/* ------------------------------------------------------------ prefetch */

static void prefetch_args(void)
{
	const size_t sz = 4 * PAGE;
	char *m = NULL, *d = NULL, *pinned = NULL, *pageable = (char *)malloc(sz);
	cudaStream_t s, dead;
	int count = 0;

	OK(cudaGetDeviceCount(&count));
	EXPECT(cudaMallocManaged(&m, sz, cudaMemAttachGlobal), cudaSuccess);
	OK(cudaMalloc(&d, sz));
	OK(cudaMallocHost(&pinned, sz));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaStreamCreate(&dead));
	OK(cudaStreamDestroy(dead));
	if (!m || !d || !pinned)
		return;

	EXPECT(cudaMemPrefetchAsync(m, sz, dev(0), 0, 0), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m, sz, host(), 0, 0), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(0), 0, s), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m, sz, host(), 0, cudaStreamPerThread), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(0), 0, cudaStreamLegacy), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m + 100, PAGE + 5, dev(0), 0, s), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(m + sz - 1, 1, host(), 0, s), cudaSuccess);
	/* The host's id is ignored. */
	EXPECT(cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHost, 77), 0, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);

	EXPECT(cudaMemPrefetchAsync(m, 0, dev(0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m, sz + 1, dev(0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m + sz - 4, 8, host(), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(NULL, sz, dev(0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(d, sz, dev(0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(0), 1, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(count), 0, 0), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaSuccess);

	EXPECT(cudaMemPrefetchAsync(m, sz, dev(cudaCpuDeviceId), 0, 0), cudaErrorInvalidDevice);
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(cudaInvalidDeviceId), 0, 0), cudaErrorInvalidDevice);
	EXPECT(cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeInvalid, 0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m, sz, loc((cudaMemLocationType)7, 0), 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHostNuma, 4095), 0, 0), cudaErrorInvalidValue);
	/* The host's NUMA nodes: node 0 exists on every Linux system, but whether
	 * the driver can place managed memory on one depends on the system. */
	INFO(cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHostNuma, 0), 0, 0));
	INFO(cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHostNumaCurrent, 0), 0, 0));
	/* Pinned and pageable memory: not managed memory, but CUDA takes
	 * pageable memory where cudaDevAttrPageableMemoryAccess is 1 (HMM). */
	INFO(cudaMemPrefetchAsync(pinned, sz, dev(0), 0, 0));
	INFO(cudaMemPrefetchAsync(pageable, sz, dev(0), 0, 0));
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	cudaGetLastError();

	QCUDA_ONLY(cudaMemPrefetchAsync(m, sz, dev(0), 0, dead), cudaErrorInvalidResourceHandle,
		   "cudaMemPrefetchAsync on a destroyed stream");

	OK(cudaStreamDestroy(s));
	EXPECT(cudaFree(m), cudaSuccess);
	/* Freed managed memory is no longer managed memory. */
	EXPECT(cudaMemPrefetchAsync(m, sz, dev(0), 0, 0), cudaErrorInvalidValue);
	OK(cudaFree(d));
	OK(cudaFreeHost(pinned));
	free(pageable);
	cudaGetLastError();
}

/* -------------------------------------------------------------- advice */

static void advise_args(void)
{
	const size_t sz = 4 * PAGE;
	char *m = NULL, *d = NULL;
	int count = 0;

	OK(cudaGetDeviceCount(&count));
	EXPECT(cudaMallocManaged(&m, sz, cudaMemAttachGlobal), cudaSuccess);
	OK(cudaMalloc(&d, sz));
	if (!m || !d)
		return;

	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetReadMostly, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, host()), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetPreferredLocation, host()), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, host()), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, host()), cudaSuccess);
	EXPECT(cudaMemAdvise(m + 1, 10, cudaMemAdviseSetReadMostly, host()), cudaSuccess);
	/* Unsetting what was never set is fine. */
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, dev(0)), cudaSuccess);

	EXPECT(cudaMemAdvise(m, 0, cudaMemAdviseSetReadMostly, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz + 1, cudaMemAdviseSetPreferredLocation, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(NULL, sz, cudaMemAdviseSetAccessedBy, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(d, sz, cudaMemAdviseSetReadMostly, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(d, sz, cudaMemAdviseSetPreferredLocation, dev(0)), cudaErrorInvalidValue);
	/* A bad device ordinal is cudaErrorInvalidValue here (cudaErrorInvalidDevice for a prefetch). */
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, dev(count)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, dev(count)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, dev(cudaInvalidDeviceId)),
	       cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);

	/* The location is ignored by read-mostly advice and by unsetting the
	 * preferred location, but its type must be one. */
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, dev(cudaInvalidDeviceId)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetPreferredLocation, dev(count)), cudaSuccess);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, loc(cudaMemLocationTypeInvalid, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, loc(cudaMemLocationTypeInvalid, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, loc(cudaMemLocationTypeHostNuma, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, (cudaMemoryAdvise)0, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, (cudaMemoryAdvise)7, dev(0)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetPreferredLocation, loc(cudaMemLocationTypeInvalid, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetReadMostly, loc((cudaMemLocationType)7, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, dev(count)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, dev(cudaCpuDeviceId)), cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, loc(cudaMemLocationTypeHostNumaCurrent, 0)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, loc(cudaMemLocationTypeHostNuma, 4095)),
	       cudaErrorInvalidValue);
	EXPECT(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, loc(cudaMemLocationTypeHostNuma, 4095)), cudaSuccess);
	/* The host's NUMA nodes (depends on the system). */
	INFO(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, loc(cudaMemLocationTypeHostNuma, 0)));
	INFO(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, loc(cudaMemLocationTypeHostNumaCurrent, 0)));
	cudaGetLastError();

	EXPECT(cudaFree(m), cudaSuccess);
	OK(cudaFree(d));
}

/* ---------------------------------------------------- range attributes */

static void attributes(void)
{
	const size_t sz = 4 * PAGE;
	char *m = NULL;
	int list[3];

	EXPECT(cudaMallocManaged(&m, sz, cudaMemAttachGlobal), cudaSuccess);
	if (!m)
		return;

	/* Nothing set yet. */
	expect_attr(cudaMemRangeAttributeReadMostly, m, sz, 0, "fresh");
	expect_attr(cudaMemRangeAttributePreferredLocation, m, sz, cudaInvalidDeviceId, "fresh");
	expect_attr(cudaMemRangeAttributePreferredLocationType, m, sz, cudaMemLocationTypeInvalid, "fresh");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, cudaInvalidDeviceId, "fresh");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationType, m, sz, cudaMemLocationTypeInvalid, "fresh");
	/* The ids of no location and of the host (undocumented, measured): cudaInvalidDeviceId and cudaCpuDeviceId. */
	expect_attr(cudaMemRangeAttributePreferredLocationId, m, sz, cudaInvalidDeviceId, "fresh");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationId, m, sz, cudaInvalidDeviceId, "fresh");
	accessed_by(m, sz, list);
	qt_check(list[0] == cudaInvalidDeviceId && list[1] == cudaInvalidDeviceId && list[2] == cudaInvalidDeviceId,
		 "fresh: AccessedBy -> %d %d %d", list[0], list[1], list[2]);

	/* Read mostly on page 0 only (10 bytes of it). */
	OK(cudaMemAdvise(m + 10, 10, cudaMemAdviseSetReadMostly, host()));
	expect_attr(cudaMemRangeAttributeReadMostly, m, PAGE, 1, "read mostly on page 0, page 0");
	expect_attr(cudaMemRangeAttributeReadMostly, m + PAGE - 8, 4, 1, "read mostly on page 0, its last 4 bytes");
	expect_attr(cudaMemRangeAttributeReadMostly, m + PAGE - 1, 2, 0,
		    "read mostly on page 0, 2 bytes over pages 0-1");
	expect_attr(cudaMemRangeAttributeReadMostly, m, sz, 0, "read mostly on page 0, all 4 pages");
	OK(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, host()));
	expect_attr(cudaMemRangeAttributeReadMostly, m, sz, 1, "read mostly on all, all 4 pages");
	OK(cudaMemAdvise(m + 2 * PAGE, 1, cudaMemAdviseUnsetReadMostly, host()));
	expect_attr(cudaMemRangeAttributeReadMostly, m, 2 * PAGE, 1, "read mostly unset on page 2, pages 0-1");
	expect_attr(cudaMemRangeAttributeReadMostly, m, sz, 0, "read mostly unset on page 2, all 4 pages");
	OK(cudaMemAdvise(m, sz, cudaMemAdviseUnsetReadMostly, host()));
	expect_attr(cudaMemRangeAttributeReadMostly, m, PAGE, 0, "read mostly unset on all, page 0");

	/* Preferred location: device 0 on pages 0-1 (a range from byte 100 of page 0 into page 1),
	 * the host on pages 2-3. */
	OK(cudaMemAdvise(m + 100, PAGE, cudaMemAdviseSetPreferredLocation, dev(0)));
	OK(cudaMemAdvise(m + 2 * PAGE, 2 * PAGE, cudaMemAdviseSetPreferredLocation, host()));
	expect_attr(cudaMemRangeAttributePreferredLocation, m, 2 * PAGE, 0, "preferred device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributePreferredLocationType, m, 2 * PAGE, cudaMemLocationTypeDevice,
		    "preferred device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributePreferredLocationId, m, 2 * PAGE, 0, "preferred device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributePreferredLocation, m + 2 * PAGE, 2 * PAGE, cudaCpuDeviceId,
		    "preferred host, pages 2-3");
	expect_attr(cudaMemRangeAttributePreferredLocationType, m + 2 * PAGE, 2 * PAGE, cudaMemLocationTypeHost,
		    "preferred host, pages 2-3");
	expect_attr(cudaMemRangeAttributePreferredLocationId, m + 2 * PAGE, 2 * PAGE, cudaCpuDeviceId,
		    "preferred host, pages 2-3");
	expect_attr(cudaMemRangeAttributePreferredLocation, m, sz, cudaInvalidDeviceId, "preferred mixed, all 4 pages");
	expect_attr(cudaMemRangeAttributePreferredLocationType, m, sz, cudaMemLocationTypeInvalid,
		    "preferred mixed, all 4 pages");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, cudaInvalidDeviceId,
		    "advice is no prefetch, all 4 pages");
	OK(cudaMemAdvise(m, PAGE, cudaMemAdviseUnsetPreferredLocation, host()));
	expect_attr(cudaMemRangeAttributePreferredLocation, m, 2 * PAGE, cudaInvalidDeviceId,
		    "preferred unset on page 0, pages 0-1");
	expect_attr(cudaMemRangeAttributePreferredLocation, m + PAGE, PAGE, 0, "preferred unset on page 0, page 1");
	OK(cudaMemAdvise(m, sz, cudaMemAdviseUnsetPreferredLocation, host()));
	expect_attr(cudaMemRangeAttributePreferredLocation, m + 2 * PAGE, PAGE, cudaInvalidDeviceId,
		    "preferred unset on all, page 2");
	/* A host NUMA node as the preferred location, over device 0 on page 0. */
	OK(cudaMemAdvise(m, PAGE, cudaMemAdviseSetPreferredLocation, dev(0)));
	if (cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, loc(cudaMemLocationTypeHostNuma, 0)) ==
	    cudaSuccess) {
		info_attr(cudaMemRangeAttributePreferredLocation, m, sz, "preferred host NUMA node 0");
		info_attr(cudaMemRangeAttributePreferredLocationType, m, sz, "preferred host NUMA node 0");
		info_attr(cudaMemRangeAttributePreferredLocationId, m, sz, "preferred host NUMA node 0");
		info_attr(cudaMemRangeAttributePreferredLocation, m, PAGE, "preferred host NUMA node 0, page 0");
	} else {
		printf("info cudaMemAdviseSetPreferredLocation to host NUMA node 0 refused\n");
	}
	OK(cudaMemAdvise(m, sz, cudaMemAdviseUnsetPreferredLocation, host()));
	cudaGetLastError();

	/* Accessed by: device 0, then also the host, then each unset. */
	OK(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, dev(0)));
	accessed_by(m, sz, list);
	qt_check(list[0] == 0 && list[1] == cudaInvalidDeviceId && list[2] == cudaInvalidDeviceId,
		 "accessed by device 0: AccessedBy -> %d %d %d", list[0], list[1], list[2]);
	OK(cudaMemAdvise(m + PAGE, PAGE, cudaMemAdviseSetAccessedBy, host()));
	accessed_by(m, sz, list);
	qt_check(list[0] == 0 && list[1] == cudaInvalidDeviceId && list[2] == cudaInvalidDeviceId,
		 "accessed by device 0, and by the host on page 1: all 4 pages AccessedBy -> %d %d %d", list[0],
		 list[1], list[2]);
	accessed_by(m + PAGE, PAGE, list);
	qt_check(((list[0] == 0 && list[1] == cudaCpuDeviceId) || (list[0] == cudaCpuDeviceId && list[1] == 0)) &&
			 list[2] == cudaInvalidDeviceId,
		 "accessed by device 0 and the host: page 1 AccessedBy holds 0 and cudaCpuDeviceId, then "
		 "cudaInvalidDeviceId");
	printf("info accessed by device 0 and the host: page 1 AccessedBy in this order -> %d %d %d\n", list[0],
	       list[1], list[2]);
	{
		int one = 12345;

		EXPECT(cudaMemRangeGetAttribute(&one, sizeof(one), cudaMemRangeAttributeAccessedBy, m + PAGE, PAGE),
		       cudaSuccess);
		qt_check(one == 0 || one == cudaCpuDeviceId, "a one-slot AccessedBy array gets one of them");
	}
	OK(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, dev(0)));
	accessed_by(m + PAGE, PAGE, list);
	qt_check(list[0] == cudaCpuDeviceId && list[1] == cudaInvalidDeviceId && list[2] == cudaInvalidDeviceId,
		 "device 0 unset: page 1 AccessedBy -> %d %d %d", list[0], list[1], list[2]);
	OK(cudaMemAdvise(m, sz, cudaMemAdviseUnsetAccessedBy, host()));
	accessed_by(m, sz, list);
	qt_check(list[0] == cudaInvalidDeviceId && list[1] == cudaInvalidDeviceId && list[2] == cudaInvalidDeviceId,
		 "both unset: AccessedBy -> %d %d %d", list[0], list[1], list[2]);

	/* Last prefetch location: device 0 on pages 0-1, then the host on all, then device 0 on page 3. */
	OK(cudaMemPrefetchAsync(m, 2 * PAGE, dev(0), 0, 0));
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, 2 * PAGE, 0, "prefetched to device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationType, m, 2 * PAGE, cudaMemLocationTypeDevice,
		    "prefetched to device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationId, m, 2 * PAGE, 0, "prefetched to device 0, pages 0-1");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, cudaInvalidDeviceId,
		    "pages 0-1 prefetched, all 4 pages");
	OK(cudaMemPrefetchAsync(m, sz, host(), 0, 0));
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, cudaCpuDeviceId, "prefetched to the host, all");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationType, m, sz, cudaMemLocationTypeHost,
		    "prefetched to the host, all");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocationId, m, sz, cudaCpuDeviceId, "prefetched to the host, all");
	OK(cudaMemPrefetchAsync(m + 3 * PAGE + 7, 1, dev(0), 0, 0));
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m + 3 * PAGE, PAGE, 0,
		    "1 byte of page 3 to device 0, page 3");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, 3 * PAGE, cudaCpuDeviceId,
		    "1 byte of page 3 to device 0, pages 0-2");
	expect_attr(cudaMemRangeAttributePreferredLocation, m, sz, cudaInvalidDeviceId, "a prefetch is no advice");
	if (cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHostNuma, 0), 0, 0) == cudaSuccess) {
		info_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, "prefetched to host NUMA node 0");
		info_attr(cudaMemRangeAttributeLastPrefetchLocationType, m, sz, "prefetched to host NUMA node 0");
		info_attr(cudaMemRangeAttributeLastPrefetchLocationId, m, sz, "prefetched to host NUMA node 0");
	} else {
		printf("info cudaMemPrefetchAsync to host NUMA node 0 refused\n");
	}
	if (cudaMemPrefetchAsync(m, sz, loc(cudaMemLocationTypeHostNumaCurrent, 0), 0, 0) == cudaSuccess) {
		info_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, "prefetched to the current host NUMA node");
		info_attr(cudaMemRangeAttributeLastPrefetchLocationType, m, sz,
			  "prefetched to the current host NUMA node");
		info_attr(cudaMemRangeAttributeLastPrefetchLocationId, m, sz,
			  "prefetched to the current host NUMA node");
	} else {
		printf("info cudaMemPrefetchAsync to the current host NUMA node refused\n");
	}
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	cudaGetLastError();

	/* All of them at once. */
	{
		cudaMemRangeAttribute attrs[8] = {
			cudaMemRangeAttributeReadMostly,
			cudaMemRangeAttributePreferredLocation,
			cudaMemRangeAttributeAccessedBy,
			cudaMemRangeAttributeLastPrefetchLocation,
			cudaMemRangeAttributePreferredLocationType,
			cudaMemRangeAttributePreferredLocationId,
			cudaMemRangeAttributeLastPrefetchLocationType,
			cudaMemRangeAttributeLastPrefetchLocationId,
		};
		int v[8][2];
		void *data[8];
		size_t sizes[8];

		for (int i = 0; i < 8; i++) {
			data[i] = v[i];
			sizes[i] = attrs[i] == cudaMemRangeAttributeAccessedBy ? 2 * sizeof(int) : sizeof(int);
			v[i][0] = v[i][1] = 12345;
		}
		OK(cudaMemAdvise(m, sz, cudaMemAdviseSetReadMostly, host()));
		OK(cudaMemAdvise(m, sz, cudaMemAdviseSetPreferredLocation, dev(0)));
		OK(cudaMemAdvise(m, sz, cudaMemAdviseSetAccessedBy, dev(0)));
		OK(cudaMemPrefetchAsync(m, sz, host(), 0, 0));
		EXPECT(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, sz), cudaSuccess);
		qt_check(v[0][0] == 1 && v[1][0] == 0 && v[2][0] == 0 && v[2][1] == cudaInvalidDeviceId &&
				 v[3][0] == cudaCpuDeviceId && v[4][0] == cudaMemLocationTypeDevice && v[5][0] == 0 &&
				 v[6][0] == cudaMemLocationTypeHost && v[7][0] == cudaCpuDeviceId,
			 "cudaMemRangeGetAttributes of all 8: %d, %d, %d %d, %d, %d, %d, %d, %d", v[0][0], v[1][0],
			 v[2][0], v[2][1], v[3][0], v[4][0], v[5][0], v[6][0], v[7][0]);

		/* Argument errors. */
		EXPECT(cudaMemRangeGetAttributes(NULL, sizes, attrs, 8, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, NULL, attrs, 8, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, sizes, NULL, 8, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, sizes, attrs, 0, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, sizes, attrs, 8, NULL, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, 0), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, sz + 1), cudaErrorInvalidValue);
		data[3] = NULL;
		qt_expect(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, sz), cudaErrorInvalidValue,
			  "cudaMemRangeGetAttributes with data[3] NULL");
		data[3] = v[3];
		sizes[1] = 8;
		qt_expect(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, sz), cudaErrorInvalidValue,
			  "cudaMemRangeGetAttributes with 8 bytes for PreferredLocation");
		sizes[1] = 4;
		attrs[6] = (cudaMemRangeAttribute)99;
		qt_expect(cudaMemRangeGetAttributes(data, sizes, attrs, 8, m, sz), cudaErrorInvalidValue,
			  "cudaMemRangeGetAttributes with attribute 99");
	}

	/* cudaMemRangeGetAttribute's argument errors. */
	{
		int v = 0, two[2];
		char *d = NULL, *pinned = NULL, *pageable = (char *)malloc(sz);

		OK(cudaMalloc(&d, sz));
		OK(cudaMallocHost(&pinned, sz));
		EXPECT(cudaMemRangeGetAttribute(NULL, 4, cudaMemRangeAttributeReadMostly, m, sz),
		       cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 0, cudaMemRangeAttributeReadMostly, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(two, 8, cudaMemRangeAttributeReadMostly, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(two, 8, cudaMemRangeAttributePreferredLocation, m, sz),
		       cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(two, 8, cudaMemRangeAttributeLastPrefetchLocation, m, sz),
		       cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(two, 6, cudaMemRangeAttributeAccessedBy, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, (cudaMemRangeAttribute)0, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, (cudaMemRangeAttribute)9, m, sz), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, NULL, sz),
		       cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, m, 0), cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, m, sz + 1),
		       cudaErrorInvalidValue);
		EXPECT(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, d, sz), cudaErrorInvalidValue);
		INFO(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, pinned, sz));
		INFO(cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributeReadMostly, pageable, sz));
		cudaGetLastError();
		OK(cudaFree(d));
		OK(cudaFreeHost(pinned));
		free(pageable);
	}
	EXPECT(cudaFree(m), cudaSuccess);

	/* A new allocation starts with no hints, even at the same address. */
	m = NULL;
	EXPECT(cudaMallocManaged(&m, sz, cudaMemAttachGlobal), cudaSuccess);
	if (m) {
		expect_attr(cudaMemRangeAttributeReadMostly, m, sz, 0, "a new allocation");
		expect_attr(cudaMemRangeAttributePreferredLocation, m, sz, cudaInvalidDeviceId, "a new allocation");
		expect_attr(cudaMemRangeAttributeLastPrefetchLocation, m, sz, cudaInvalidDeviceId, "a new allocation");
		OK(cudaFree(m));
	}
}

/* ------------------------------------------------------ batch prefetch */

static void batch(void)
{
	char *a = NULL, *b = NULL, *d = NULL;
	cudaStream_t s;
	void *ptrs[3];
	size_t sizes[3], idxs[2] = { 0, 2 }, bad_idxs[2] = { 1, 2 };
	cudaMemLocation locs[2] = { dev(0), host() };

	EXPECT(cudaMallocManaged(&a, 2 * PAGE, cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaMallocManaged(&b, 2 * PAGE, cudaMemAttachGlobal), cudaSuccess);
	OK(cudaMalloc(&d, PAGE));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (!a || !b || !d)
		return;
	/* a's page 0 and all of b to device 0, a's page 1 to the host. */
	ptrs[0] = a, sizes[0] = PAGE;
	ptrs[1] = b, sizes[1] = 2 * PAGE;
	ptrs[2] = a + PAGE, sizes[2] = PAGE;
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, a, PAGE, 0, "batch: a page 0");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, b, 2 * PAGE, 0, "batch: b");
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, a + PAGE, PAGE, cudaCpuDeviceId, "batch: a page 1");
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 1, 0, cudaStreamPerThread), cudaSuccess);
	EXPECT(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, a, 2 * PAGE, 0, "batch with one location: a");

	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 0, locs, idxs, 1, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(NULL, sizes, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, NULL, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, NULL, idxs, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, NULL, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 0, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 1, locs, idxs, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, bad_idxs, 2, 0, s), cudaErrorInvalidValue);
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 1, s), cudaErrorInvalidValue);
	sizes[1] = 2 * PAGE + 1;
	qt_expect(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue,
		  "cudaMemPrefetchBatchAsync with an operation one byte past its allocation");
	sizes[1] = 0;
	qt_expect(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue,
		  "cudaMemPrefetchBatchAsync with an operation of 0 bytes");
	sizes[1] = 2 * PAGE;
	ptrs[1] = d;
	qt_expect(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue,
		  "cudaMemPrefetchBatchAsync with an operation on device memory");
	ptrs[1] = b;
	locs[1] = dev(99);
	/* cudaErrorInvalidValue here, where cudaMemPrefetchAsync says cudaErrorInvalidDevice. */
	qt_expect(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, s), cudaErrorInvalidValue,
		  "cudaMemPrefetchBatchAsync with a location on device 99");
	locs[1] = host();
	/* "Must not be legacy NULL stream"; stream 0 is the per-thread stream
	 * in the memadvise_ptds build, where this succeeds. */
	EXPECT(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, cudaStreamLegacy), cudaErrorInvalidValue);
	INFO(cudaMemPrefetchBatchAsync(ptrs, sizes, 3, locs, idxs, 2, 0, 0));
	cudaGetLastError();

	OK(cudaStreamDestroy(s));
	OK(cudaFree(a));
	OK(cudaFree(b));
	OK(cudaFree(d));
}

/* ---------------------------------------------------- stream attachment */

static void attach_args(void)
{
	const size_t sz = 4 * PAGE;
	char *m = NULL, *d = NULL, *pageable = (char *)malloc(sz);
	cudaStream_t s, dead;

	EXPECT(cudaMallocManaged(&m, sz, cudaMemAttachGlobal), cudaSuccess);
	OK(cudaMalloc(&d, sz));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaStreamCreate(&dead));
	OK(cudaStreamDestroy(dead));
	if (!m || !d)
		return;

	EXPECT(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(s, m, sz, cudaMemAttachHost), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(s, m), cudaSuccess); /* the C++ defaults: 0, cudaMemAttachSingle */
	EXPECT(cudaStreamAttachMemAsync(0, m, 0, cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(0, m, sz, cudaMemAttachHost), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);

	EXPECT(cudaStreamAttachMemAsync(s, m, sz - 1, cudaMemAttachSingle), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, m, PAGE, cudaMemAttachGlobal), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, m, sz + 1, cudaMemAttachGlobal), cudaErrorInvalidValue);
	/* Flags 0 crash NVIDIA's runtime (CUDA 13, driver 580). */
	QCUDA_ONLY(cudaStreamAttachMemAsync(s, m, 0, 0), cudaErrorInvalidValue,
		   "cudaStreamAttachMemAsync with flags 0");
	EXPECT(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle | cudaMemAttachHost), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, m, 0, 8), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, NULL, 0, cudaMemAttachSingle), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, d, 0, cudaMemAttachSingle), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);

	/* Not at the allocation's start, even with length 0 (measured). */
	EXPECT(cudaStreamAttachMemAsync(s, m + PAGE, 0, cudaMemAttachSingle), cudaErrorInvalidValue);
	EXPECT(cudaStreamAttachMemAsync(s, m + PAGE, 3 * PAGE, cudaMemAttachSingle), cudaErrorInvalidValue);
	/* Single attachment to the NULL stream is documented as an error; only
	 * the NULL handle is refused (measured), and in the memadvise_ptds build
	 * stream 0 is the per-thread stream, where it succeeds. */
	INFO(cudaStreamAttachMemAsync(0, m, 0, cudaMemAttachSingle));
	EXPECT(cudaStreamAttachMemAsync(cudaStreamLegacy, m, 0, cudaMemAttachSingle), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(cudaStreamPerThread, m, 0, cudaMemAttachSingle), cudaSuccess);
	INFO(cudaStreamAttachMemAsync(s, pageable, sz, cudaMemAttachSingle));
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	cudaGetLastError();

	QCUDA_ONLY(cudaStreamAttachMemAsync(dead, m, 0, cudaMemAttachSingle), cudaErrorInvalidResourceHandle,
		   "cudaStreamAttachMemAsync on a destroyed stream");

	OK(cudaStreamDestroy(s));
	EXPECT(cudaFree(m), cudaSuccess);
	OK(cudaFree(d));
	free(pageable);
}

/* ----------------------------------------------------------- threads */

#define THREADS 8
#define ROUNDS 100

static char *shared_m;

/* Each thread owns 2 pages of shared_m: advises, prefetches and queries them
 * while the others do the same, and allocates and frees memory of its own. */
static void *hint_thread(void *arg)
{
	int t = (int)(intptr_t)arg, bad = 0;
	char *mine = shared_m + 2 * PAGE * t;

	for (int r = 0; r < ROUNDS; r++) {
		cudaMemLocation where = (r + t) % 2 ? dev(0) : host();
		int v = 12345, w = 12345;
		char *own = NULL;

		bad |= cudaMemAdvise(mine, 2 * PAGE, cudaMemAdviseSetPreferredLocation, where) != cudaSuccess;
		bad |= cudaMemPrefetchAsync(mine + PAGE, 1, where, 0, cudaStreamPerThread) != cudaSuccess;
		bad |= cudaMemRangeGetAttribute(&v, 4, cudaMemRangeAttributePreferredLocation, mine, 2 * PAGE) !=
		       cudaSuccess;
		bad |= cudaMemRangeGetAttribute(&w, 4, cudaMemRangeAttributeLastPrefetchLocation, mine + PAGE, PAGE) !=
		       cudaSuccess;
		/* The answers are not checked here: natively, advice given at once by
		 * several threads to pages that share a driver block is not kept page
		 * by page (11 native runs in 20 failed such a check on the H100). The
		 * single-threaded checks above cover the values. */
		bad |= cudaMallocManaged(&own, PAGE, cudaMemAttachGlobal) != cudaSuccess;
		bad |= cudaMemAdvise(own, PAGE, cudaMemAdviseSetReadMostly, host()) != cudaSuccess;
		bad |= cudaFree(own) != cudaSuccess;
	}
	return (void *)(intptr_t)bad;
}

static void threads(void)
{
	pthread_t th[THREADS];
	int bad = 0;

	EXPECT(cudaMallocManaged(&shared_m, 2 * PAGE * THREADS, cudaMemAttachGlobal), cudaSuccess);
	if (!shared_m)
		return;
	for (int t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, hint_thread, (void *)(intptr_t)t);
	for (int t = 0; t < THREADS; t++) {
		void *r;

		pthread_join(th[t], &r);
		bad |= r != NULL;
	}
	qt_check(!bad,
		 "%d threads x %d rounds of advice, prefetches and queries on their own pages of one "
		 "allocation (and allocations of their own): every call succeeds",
		 THREADS, ROUNDS);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(shared_m), cudaSuccess);
}

/* ------------------------------------------------------------ kernels */

/* out[i] = in[i] * mul + add */
__global__ void madd(unsigned *out, const unsigned *in, int n, unsigned mul, unsigned add)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		out[i] = in[i] * mul + add;
}

static unsigned val(int i, unsigned seed)
{
	return (unsigned)i * 2654435761u ^ seed;
}

static long long first_bad(const unsigned *p, int n, unsigned seed, unsigned mul, unsigned add)
{
	for (int i = 0; i < n; i++)
		if (p[i] != val(i, seed) * mul + add)
			return i;
	return -1;
}

static void kernels(void)
{
	const size_t bytes = N * sizeof(unsigned);
	unsigned *in = NULL, *out = NULL;
	cudaStream_t s;
	long long bad;

	EXPECT(cudaMallocManaged(&in, bytes, cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaMallocManaged(&out, bytes, cudaMemAttachGlobal), cudaSuccess);
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (!in || !out)
		return;

	/* CPU writes, prefetch to the device, kernel, prefetch back, CPU reads. */
	for (int i = 0; i < N; i++)
		in[i] = val(i, 1), out[i] = 0;
	EXPECT(cudaMemAdvise(in, bytes, cudaMemAdviseSetReadMostly, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(out, bytes, cudaMemAdviseSetPreferredLocation, dev(0)), cudaSuccess);
	EXPECT(cudaMemAdvise(out, bytes, cudaMemAdviseSetAccessedBy, host()), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(in, bytes, dev(0), 0, s), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(out, bytes, dev(0), 0, s), cudaSuccess);
	madd<<<64, 256, 0, s>>>(out, in, N, 3, 7);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaMemPrefetchAsync(out, bytes, host(), 0, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = first_bad(out, N, 1, 3, 7);
	qt_check(bad < 0,
		 "CPU writes, prefetch to device 0, kernel, prefetch to the host, CPU reads: every element "
		 "(first bad %lld)",
		 bad);
	expect_attr(cudaMemRangeAttributeLastPrefetchLocation, out, bytes, cudaCpuDeviceId, "after the kernel, out");
	expect_attr(cudaMemRangeAttributeReadMostly, in, bytes, 1, "after the kernel, in");

	/* The CPU changes the read-mostly input; the next kernel must see it. */
	for (int i = 0; i < N; i++)
		in[i] = val(i, 2);
	EXPECT(cudaMemPrefetchAsync(in, bytes, dev(0), 0, s), cudaSuccess);
	madd<<<64, 256, 0, s>>>(out, in, N, 5, 1);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = first_bad(out, N, 2, 5, 1);
	qt_check(bad < 0, "the CPU rewrote read-mostly memory, prefetch, kernel: it used the new data (first bad %lld)",
		 bad);

	/* The NULL stream, a prefetch of half to the host in between. */
	for (int i = 0; i < N; i++)
		in[i] = val(i, 3);
	EXPECT(cudaMemAdvise(in, bytes, cudaMemAdviseUnsetReadMostly, dev(0)), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(in, bytes, dev(0), 0, 0), cudaSuccess);
	madd<<<64, 256>>>(out, in, N, 9, 9);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemPrefetchAsync(out, bytes / 2, host(), 0, 0), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = first_bad(out, N, 3, 9, 9);
	qt_check(bad < 0,
		 "NULL stream: prefetch, kernel, half prefetched back, cudaDeviceSynchronize: every element "
		 "(first bad %lld)",
		 bad);

	/* Attached to one stream (the UnifiedMemoryStreams pattern): kernel, stream sync, CPU reads. */
	for (int i = 0; i < N; i++)
		in[i] = val(i, 4);
	EXPECT(cudaStreamAttachMemAsync(s, in, 0, cudaMemAttachSingle), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(s, out, 0, cudaMemAttachSingle), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	madd<<<64, 256, 0, s>>>(out, in, N, 11, 3);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = first_bad(out, N, 4, 11, 3);
	qt_check(bad < 0,
		 "attached to a stream: kernel, cudaStreamSynchronize, CPU reads: every element "
		 "(first bad %lld)",
		 bad);
	EXPECT(cudaStreamAttachMemAsync(s, in, 0, cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaStreamAttachMemAsync(s, out, 0, cudaMemAttachGlobal), cudaSuccess);

	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	OK(cudaStreamDestroy(s));
	EXPECT(cudaFree(in), cudaSuccess);
	EXPECT(cudaFree(out), cudaSuccess);
}

int main(void)
{
	int v = -1;

	PAGE = (size_t)sysconf(_SC_PAGESIZE);
	qt_begin("memadvise");
	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0), cudaSuccess);
	qt_check(v == 1, "cudaDevAttrManagedMemory is 1");
	prefetch_args();
	advise_args();
	attributes();
	batch();
	attach_args();
	threads();
	kernels();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
