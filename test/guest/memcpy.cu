// SPDX-License-Identifier: MIT
// memcpy: data round trips of many sizes and alignments through every copy
// kind (H2D, D2H, D2D, H2H, Default), memset, and the argument checks of
// both. One transfer above 64 MiB.
#include "qctest.h"

#define GUARD 64 /* bytes checked on each side of a copy */
#define PAGE 4096

/* The large ones sit at and across the edges of the driver's 16 MiB chunks (QCUDA_CHUNK). */
static const size_t sizes[] = {
	1,
	2,
	3,
	7,
	8,
	15,
	16,
	17,
	63,
	64,
	100,
	255,
	4095,
	4096,
	4097,
	8191,
	8192,
	65536 + 13,
	(1 << 20) + 1,
	(16 << 20) - 1,
	16 << 20,
	(16 << 20) + 1,
	(33 << 20) + 3,
};
static const size_t offsets[] = { 0, 1, 3, 7, 8, PAGE - 1, PAGE - 8 };

#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define NOFFS (sizeof(offsets) / sizeof(offsets[0]))

static unsigned char *src_h, *dst_h, *want_h;
static char *dev_a, *dev_b;
static const size_t cap = (33 << 20) + 3 + 2 * PAGE + 2 * GUARD;

/* One round trip of n bytes: host(src+so) -H2D-> a+ao -D2D-> b+bo -D2H->
 * host(dst+do), each with the given kind for its direction (Default or the
 * explicit one), checking the data and the guard bytes around it. */
static void round_trip(size_t n, size_t so, size_t ao, size_t bo, size_t dof, bool dflt, uint64_t seed)
{
	cudaMemcpyKind h2d = dflt ? cudaMemcpyDefault : cudaMemcpyHostToDevice;
	cudaMemcpyKind d2d = dflt ? cudaMemcpyDefault : cudaMemcpyDeviceToDevice;
	cudaMemcpyKind d2h = dflt ? cudaMemcpyDefault : cudaMemcpyDeviceToHost;
	size_t win = n + 2 * GUARD;
	long long at;

	qt_fill(src_h + so, n, seed);
	/* Known guard bytes on the device and in the destination. */
	OK(cudaMemset(dev_a, 0xA5, ao + n + GUARD));
	OK(cudaMemset(dev_b, 0x5A, bo + n + GUARD));
	memset(dst_h, 0xC3, dof + n + GUARD);

	if (!OK(cudaMemcpy(dev_a + ao, src_h + so, n, h2d)) || !OK(cudaMemcpy(dev_b + bo, dev_a + ao, n, d2d)) ||
	    !OK(cudaMemcpy(dst_h + dof, dev_b + bo, n, d2h)))
		return;
	at = qt_diff(dst_h + dof, src_h + so, n);
	qt_quiet(at < 0, "size %zu offsets %zu/%zu/%zu/%zu %s: data differs at byte %lld", n, so, ao, bo, dof,
		 dflt ? "default" : "explicit", at);
	qt_quiet(qt_not_byte(dst_h + dof + n, 0xC3, GUARD) < 0 &&
			 (dof < GUARD || qt_not_byte(dst_h + dof - GUARD, 0xC3, GUARD) < 0),
		 "size %zu: D2H wrote outside its range", n);
	/* The device guards: read the window around b's range back. */
	if (bo >= GUARD) {
		OK(cudaMemcpy(want_h, dev_b + bo - GUARD, win, cudaMemcpyDeviceToHost));
		qt_quiet(qt_not_byte(want_h, 0x5A, GUARD) < 0 && qt_not_byte(want_h + GUARD + n, 0x5A, GUARD) < 0,
			 "size %zu: H2D/D2D wrote outside its range", n);
	}
}

static void copies(void)
{
	int bad_before = qt_failed;

	for (size_t i = 0; i < NSIZES; i++) {
		for (size_t j = 0; j < NOFFS; j++) {
			size_t o = offsets[j], n = sizes[i];
			/* All offset combinations for small sizes, a few for large ones. */
			if (n > 65536 && j % 3)
				continue;
			round_trip(n, o, GUARD + o, GUARD + (o * 5) % PAGE, (o * 3) % PAGE, (i + j) % 2, i * 131 + j);
		}
		printf("round trips of %zu bytes: %s\n", sizes[i], qt_failed == bad_before ? "ok" : "FAILED");
	}
	qt_check(qt_failed == bad_before, "round trips H2D -> D2D -> D2H, every size and alignment");
}

static void host_to_host(void)
{
	static unsigned char a[3 * PAGE], b[3 * PAGE];

	qt_fill(a, sizeof(a), 77);
	memset(b, 0, sizeof(b));
	EXPECT(cudaMemcpy(b + 1, a + 3, 2 * PAGE + 5, cudaMemcpyHostToHost), cudaSuccess);
	qt_check(qt_diff(b + 1, a + 3, 2 * PAGE + 5) < 0 && b[0] == 0 && b[2 * PAGE + 6] == 0,
		 "H2H copies exactly the range");
	memset(b, 0, sizeof(b));
	EXPECT(cudaMemcpy(b, a, 100, cudaMemcpyDefault), cudaSuccess);
	qt_check(qt_diff(b, a, 100) < 0, "Default between host buffers copies");
	EXPECT(cudaMemcpyAsync(b, a + 50, 100, cudaMemcpyHostToHost, 0), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	qt_check(qt_diff(b, a + 50, 100) < 0, "async H2H copies");
}

/* Device pointers through the "host" side of explicit kinds (unified
 * addressing infers them) and Default in every direction. */
static void inferred(void)
{
	unsigned char h[256], g[256];

	qt_fill(h, sizeof(h), 5);
	EXPECT(cudaMemcpy(dev_a, h, 256, cudaMemcpyDefault), cudaSuccess);
	EXPECT(cudaMemcpy(dev_b, dev_a, 256, cudaMemcpyDefault), cudaSuccess);
	EXPECT(cudaMemcpy(dev_b + 256, dev_a, 256, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(dev_b + 512, dev_b + 256, 256, cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaMemcpy(dev_b + 768, dev_b + 512, 256, cudaMemcpyHostToHost), cudaSuccess);
	memset(g, 0, sizeof(g));
	EXPECT(cudaMemcpy(g, dev_b + 768, 256, cudaMemcpyDefault), cudaSuccess);
	qt_check(qt_diff(g, h, 256) < 0, "Default and inferred device pointers carry the data");
}

static void memsets(void)
{
	static const size_t ms[] = { 1, 2, 3, 15, 4095, 4096, 4097, (1 << 20) + 7, (5 << 20) + 1 };
	static const int vals[] = { 0, 1, 0x7f, 0x80, 0xff, 0x1ab, -1 };
	int bad_before = qt_failed;

	for (size_t i = 0; i < sizeof(ms) / sizeof(ms[0]); i++) {
		size_t n = ms[i], o = (i * 7) % PAGE + GUARD;
		int v = vals[i % (sizeof(vals) / sizeof(vals[0]))];
		long long at;

		OK(cudaMemset(dev_a, 0x11, n + o + GUARD));
		OK(cudaMemset(dev_a + o, v, n));
		OK(cudaMemcpy(dst_h, dev_a + o - GUARD, n + 2 * GUARD, cudaMemcpyDeviceToHost));
		at = qt_not_byte(dst_h + GUARD, v & 0xff, n);
		qt_quiet(at < 0, "memset of %zu bytes to %#x: byte %lld differs", n, v, at);
		qt_quiet(qt_not_byte(dst_h, 0x11, GUARD) < 0 && qt_not_byte(dst_h + GUARD + n, 0x11, GUARD) < 0,
			 "memset of %zu bytes wrote outside its range", n);
	}
	qt_check(qt_failed == bad_before, "memset: sizes, alignments, values (low byte only)");
	EXPECT(cudaMemsetAsync(dev_a + 1, 0x42, 1000, 0), cudaSuccess);
	EXPECT(cudaMemcpyAsync(dst_h, dev_a + 1, 1000, cudaMemcpyDeviceToHost, 0), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	qt_check(qt_not_byte(dst_h, 0x42, 1000) < 0, "memsetAsync + memcpyAsync on the NULL stream");
}

static void big(void)
{
	const size_t n = (64 << 20) + 4099; /* > 64 MiB, odd size */
	unsigned char *h = (unsigned char *)malloc(n), *g = (unsigned char *)malloc(n);
	char *d = NULL;

	if (!qt_check(h && g, "host buffers for a %zu-byte transfer", n))
		return;
	qt_fill(h, n, 4242);
	memset(g, 0, n);
	EXPECT(cudaMalloc(&d, n + 1), cudaSuccess);
	EXPECT(cudaMemcpy(d + 1, h, n, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(g, d + 1, n, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(g, h, n) < 0, "a %zu-byte round trip (> 64 MiB, unaligned)", n);
	EXPECT(cudaFree(d), cudaSuccess);
	free(h);
	free(g);
}

static void bad_arguments(void)
{
	char h[8192], *d = NULL, *f = NULL;

	EXPECT(cudaMalloc(&d, 4096), cudaSuccess);
	EXPECT(cudaMemcpy(d, h, 16, (cudaMemcpyKind)7), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaMemcpy(d, h, 16, (cudaMemcpyKind)-1), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaMemcpyAsync(d, h, 16, (cudaMemcpyKind)9, 0), cudaErrorInvalidMemcpyDirection);
	EXPECT(cudaMemcpy(d, h, 0, (cudaMemcpyKind)9), cudaSuccess);
	EXPECT(cudaMemcpy(d, h, 0, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(NULL, NULL, 0, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(d, h, 4097, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d + 4095, h, 2, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d + 4095, h, 1, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(h, d, 4097, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d, d + 1, 4096, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(NULL, h, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d, NULL, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(NULL, h, 16, cudaMemcpyHostToHost), cudaErrorInvalidValue);
	/* A pageable host pointer where the kind says device. */
	EXPECT(cudaMemcpy(h, h + 4096, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(h, h + 4096, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(h, h + 4096, 16, cudaMemcpyDeviceToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy((void *)0x7000deadbeefull, h, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	/* Freed memory. */
	EXPECT(cudaMalloc(&f, 4096), cudaSuccess);
	EXPECT(cudaFree(f), cudaSuccess);
	EXPECT(cudaMemcpy(f, h, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(h, f, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	/* Memset. */
	EXPECT(cudaMemset(NULL, 0, 16), cudaErrorInvalidValue);
	EXPECT(cudaMemset(NULL, 0, 0), cudaSuccess);
	EXPECT(cudaMemset(h, 0, 16), cudaErrorInvalidValue);
	EXPECT(cudaMemset(d, 0, 4097), cudaErrorInvalidValue);
	EXPECT(cudaMemset(d + 4096, 0, 1), cudaErrorInvalidValue);
	EXPECT(cudaMemset(d + 4095, 0, 1), cudaSuccess);
	EXPECT(cudaMemsetAsync(d, 0, 4097, 0), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
}

int main(void)
{
	qt_begin("memcpy");
	src_h = (unsigned char *)malloc(cap);
	dst_h = (unsigned char *)malloc(cap);
	want_h = (unsigned char *)malloc(cap);
	EXPECT(cudaMalloc(&dev_a, cap), cudaSuccess);
	EXPECT(cudaMalloc(&dev_b, cap), cudaSuccess);
	if (!src_h || !dst_h || !want_h || !dev_a || !dev_b)
		return qt_end();
	copies();
	host_to_host();
	inferred();
	memsets();
	big();
	bad_arguments();
	EXPECT(cudaFree(dev_a), cudaSuccess);
	EXPECT(cudaFree(dev_b), cudaSuccess);
	return qt_end();
}
