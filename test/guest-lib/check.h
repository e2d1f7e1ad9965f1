/* SPDX-License-Identifier: MIT */
/*
 * The checks of the guest library's host-side unit tests: each prints
 * "FAIL file:line: what" when it does not hold; main ends with check_end(),
 * which prints "<N> checks, <K> failed" and gives the exit status
 * (guest-lib.test.ts reads both).
 */
#ifndef GUEST_LIB_CHECK_H
#define GUEST_LIB_CHECK_H

#include <stdio.h>

static unsigned int checks, failed;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		checks++;                                           \
		if (!(cond)) {                                      \
			failed++;                                   \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
	} while (0)

static inline int check_end(void)
{
	printf("%u checks, %u failed\n", checks, failed);
	return failed ? 1 : 0;
}

#endif
