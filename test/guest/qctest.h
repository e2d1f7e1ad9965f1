/* SPDX-License-Identifier: MIT */
/*
 * Helpers of the guest CUDA test programs (test/guest/NAME.cu). Every program
 * prints deterministic lines (no pointers, no timings), so that its output
 * on a real GPU with NVIDIA's runtime and in a qcuda guest can be diffed,
 * and ends with "PASS: <name>: N checks" or "FAIL: <name>: K of N checks
 * failed" (exit status 0 / 1).
 */
#ifndef QCTEST_H
#define QCTEST_H

#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int qt_checks, qt_failed;
static const char *qt_name = "test";

/* One check: prints "ok   <what>" or "FAIL <what>" (+ detail on stdout). */
static inline __attribute__((unused)) bool qt_check(bool ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline __attribute__((unused)) bool qt_check(bool ok, const char *fmt, ...)
{
	va_list ap;

	__atomic_add_fetch(&qt_checks, 1, __ATOMIC_RELAXED);
	if (!ok)
		__atomic_add_fetch(&qt_failed, 1, __ATOMIC_RELAXED);
	flockfile(stdout);
	fputs(ok ? "ok   " : "FAIL ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	funlockfile(stdout);
	return ok;
}

/* A check that prints nothing when it passes (for checks in loops). */
static inline __attribute__((unused)) bool qt_quiet(bool ok, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline __attribute__((unused)) bool qt_quiet(bool ok, const char *fmt, ...)
{
	va_list ap;

	__atomic_add_fetch(&qt_checks, 1, __ATOMIC_RELAXED);
	if (ok)
		return true;
	__atomic_add_fetch(&qt_failed, 1, __ATOMIC_RELAXED);
	flockfile(stdout);
	fputs("FAIL ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	funlockfile(stdout);
	return false;
}

/* EXPECT(call, err): the call returns err; prints "<call text> -> <name>". */
#define EXPECT(call, want) qt_expect((call), (want), #call)
static inline __attribute__((unused)) bool qt_expect(cudaError_t got, cudaError_t want, const char *what)
{
	if (got == want)
		return qt_check(true, "%s -> %s", what, cudaGetErrorName(got));
	return qt_check(false, "%s -> %s (expected %s)", what, cudaGetErrorName(got), cudaGetErrorName(want));
}

/* OK(call): the call succeeds, quietly. */
#define OK(call) qt_ok((call), #call, __LINE__)
static inline __attribute__((unused)) bool qt_ok(cudaError_t got, const char *what, int line)
{
	return qt_quiet(got == cudaSuccess, "line %d: %s -> %s", line, what, cudaGetErrorName(got));
}

static inline __attribute__((unused)) void qt_begin(const char *name)
{
	qt_name = name;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("# %s\n", name);
}

static inline __attribute__((unused)) int qt_end(void)
{
	/* A leftover error would hide in the next program's first check. */
	cudaGetLastError();
	if (qt_failed) {
		printf("FAIL: %s: %d of %d checks failed\n", qt_name, qt_failed, qt_checks);
		return 1;
	}
	printf("PASS: %s: %d checks\n", qt_name, qt_checks);
	return 0;
}

/* Deterministic bytes: xorshift64* seeded per buffer. */
static inline __attribute__((unused)) void qt_fill(void *buf, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
	unsigned char *p = (unsigned char *)buf;
	size_t i = 0;

	for (; i + 8 <= n; i += 8) {
		x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
		uint64_t v = x * 0x2545F4914F6CDD1Dull;
		memcpy(p + i, &v, 8);
	}
	x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
	uint64_t v = x * 0x2545F4914F6CDD1Dull;
	memcpy(p + i, &v, n - i);
}

/* Offset of the first byte that differs, or -1. */
static inline __attribute__((unused)) long long qt_diff(const void *a, const void *b, size_t n)
{
	const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
	size_t i = 0;

	if (!memcmp(a, b, n))
		return -1;
	while (i < n && x[i] == y[i])
		i++;
	return (long long)i;
}

/* Offset of the first byte not equal to v, or -1. */
static inline __attribute__((unused)) long long qt_not_byte(const void *a, int v, size_t n)
{
	const unsigned char *x = (const unsigned char *)a;

	for (size_t i = 0; i < n; i++)
		if (x[i] != (unsigned char)v)
			return (long long)i;
	return -1;
}

/* true when running in a qcuda guest (some checks differ by design). */
static inline __attribute__((unused)) bool qt_on_qcuda(void)
{
	return access("/dev/qcuda0", F_OK) == 0;
}

/*
 * Kernel programs: the result of the first launch (or first use of a module,
 * e.g. cudaMemcpyToSymbol). A qcuda device without kernel support (the host
 * provider, CI) refuses it with cudaErrorNoKernelImageForDevice, as CUDA
 * does for a program without code for the GPU: the program prints
 * "SKIP: <name>: no kernel support on this device (<error>)" and exits 77,
 * which is not a pass. Otherwise the call must have succeeded.
 */
#define QT_EXIT_SKIP 77
#define FIRST_KERNEL_USE(call) qt_first_kernel_use((call), #call)
static inline __attribute__((unused)) bool qt_first_kernel_use(cudaError_t got, const char *what)
{
	if (got == cudaErrorNoKernelImageForDevice && qt_on_qcuda()) {
		printf("SKIP: %s: no kernel support on this device (%s)\n", qt_name, cudaGetErrorName(got));
		fflush(stdout);
		exit(QT_EXIT_SKIP);
	}
	return qt_expect(got, cudaSuccess, what);
}

#endif
