/* SPDX-License-Identifier: MIT */
/*
 * The part of check.h that needs no CUDA header, so that the runtime-API
 * programs (test/windows/rtbasic.c) count and print their checks the same
 * way: check() prints an "ok" or "FAIL" line and counts; finish() prints
 * PASS or FAIL with the counts and gives the exit status.
 */
#ifndef QCUDA_TEST_LIBCUDA_CHECK_CORE_H
#define QCUDA_TEST_LIBCUDA_CHECK_CORE_H

#include <stdarg.h>
#include <stdio.h>

static int checks, failed;

__attribute__((format(printf, 2, 3), unused)) static int check(int ok, const char *fmt, ...)
{
	va_list ap;

	checks++;
	failed += !ok;
	fputs(ok ? "ok   " : "FAIL ", stdout);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
	fflush(stdout);
	return ok;
}

/* "PASS: prog: N checks" or "FAIL: prog: F of N checks failed"; the exit status. */
__attribute__((unused)) static int finish(const char *prog)
{
	if (failed)
		printf("FAIL: %s: %d of %d checks failed\n", prog, failed, checks);
	else
		printf("PASS: %s: %d checks\n", prog, checks);
	return failed ? 1 : 0;
}

#endif
