/* SPDX-License-Identifier: MIT */
/* fatbin_select FILE SM...: what qc_fatbin_select keeps of a fat binary for
 * each compute capability (lines "sm N: kind arch ..." or "sm N: whole"),
 * and the SHA-256 of the file, for test/cli/libcuda.test.ts. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"

int main(int argc, char **argv)
{
	static unsigned char img[1 << 20];
	FILE *f = fopen(argv[1], "rb");
	size_t n = f ? fread(img, 1, sizeof(img), f) : 0;
	uint8_t sha[32];

	if (!n)
		return 2;
	qc_sha256(img, n, sha);
	printf("sha256 ");
	for (int i = 0; i < 32; i++)
		printf("%02x", sha[i]);
	printf("\n");
	for (int a = 2; a < argc; a++) {
		void *out;
		uint64_t m = qc_fatbin_select(img, n, atoi(argv[a]), &out);
		const uint8_t *b = out;
		uint64_t at = 16, end;

		printf("sm %s:", argv[a]);
		if (!m) {
			printf(" whole\n");
			continue;
		}
		memcpy(&end, b + 8, 8);
		end += 16;
		if (end != m)
			printf(" (header says %llu of %llu)", (unsigned long long)end, (unsigned long long)m);
		while (at < end) {
			uint16_t kind;
			uint32_t eh, arch;
			uint64_t pl;

			memcpy(&kind, b + at, 2);
			memcpy(&eh, b + at + 4, 4);
			memcpy(&pl, b + at + 8, 8);
			memcpy(&arch, b + at + 28, 4);
			printf(" %s%u", kind == 2 ? "sass" : "ptx", arch);
			at += eh + pl;
		}
		printf("\n");
		free(out);
	}
	return 0;
}
