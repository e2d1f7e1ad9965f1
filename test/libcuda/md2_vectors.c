/* SPDX-License-Identifier: MIT */
/* Prints MD2 (RFC 1319) of each argument and the integrity check's fixed
 * answers, for test/cli/libcuda-integrity.test.ts (built on the host with
 * guest-driver/libcuda/integrity.c). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "integrity.h"

int main(int argc, char **argv)
{
	struct cu_integrity_input in = { 0 };
	uint64_t out[2];

	for (int i = 1; i < argc; i++) {
		struct md2 m;
		uint8_t d[16];

		md2_init(&m);
		md2_update(&m, argv[i], strlen(argv[i]));
		md2_final(&m, d);
		for (int j = 0; j < 16; j++)
			printf("%02x", d[j]);
		printf(" %s\n", argv[i]);
	}
	for (uint32_t v = 13000; v <= 13002; v++) {
		cu_integrity_hash(v, &in, NULL, 0, out);
		printf("%" PRIu32 " %016" PRIx64 " %016" PRIx64 "\n", v, out[0], out[1]);
	}
	return 0;
}
