/* SPDX-License-Identifier: MIT */
/*
 * The runtime's integrity check (export table INTEGRITY_CHECK, slot 1).
 *
 * CUDA 13's runtime refuses to work (cudaErrorSoftwareValidityNotEstablished)
 * unless libcuda answers it with an HMAC over values the runtime can check
 * against what the same libcuda reports elsewhere: the driver version, the
 * process and thread, the addresses of two export tables and of the check
 * itself, the time the runtime passes in, and each device's UUID and PCI
 * location. The MAC is HMAC-MD2 (RFC 2104 over RFC 1319: 16-byte blocks)
 * with a fixed key; versions ending in 0 or 1 expect fixed answers.
 * ZLUDA documented this (vosen/ZLUDA, dark_api); this is written from the
 * RFCs. It is tied to cudart 13.0's layout: re-check on each CUDA release.
 */
#include <stdint.h>
#include <string.h>

#include "integrity.h"

/* RFC 1319's permutation of 0..255 built from the digits of pi. */
static const uint8_t md2_s[256] = {
	41,  46,  67,  201, 162, 216, 124, 1,	61,  54,  84,  161, 236, 240, 6,   19,	98,  167, 5,   243, 192, 199,
	115, 140, 152, 147, 43,	 217, 188, 76,	130, 202, 30,  155, 87,	 60,  253, 212, 224, 22,  103, 66,  111, 24,
	138, 23,  229, 18,  190, 78,  196, 214, 218, 158, 222, 73,  160, 251, 245, 142, 187, 47,  238, 122, 169, 104,
	121, 145, 21,  178, 7,	 63,  148, 194, 16,  137, 11,  34,  95,	 33,  128, 127, 93,  154, 90,  144, 50,	 39,
	53,  62,  204, 231, 191, 247, 151, 3,	255, 25,  48,  179, 72,	 165, 181, 209, 215, 94,  146, 42,  172, 86,
	170, 198, 79,  184, 56,	 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4,   241, 69,  157, 112, 89,
	100, 113, 135, 32,  134, 91,  207, 101, 230, 45,  168, 2,   27,	 96,  37,  173, 174, 176, 185, 246, 28,	 70,
	97,  105, 52,  64,  126, 15,  85,  71,	163, 35,  221, 81,  175, 58,  195, 92,	249, 206, 186, 197, 234, 38,
	44,  83,  13,  110, 133, 40,  132, 9,	211, 223, 205, 244, 65,	 129, 77,  82,	106, 220, 55,  200, 108, 193,
	171, 250, 36,  225, 123, 8,   12,  189, 177, 74,  120, 136, 149, 139, 227, 99,	232, 109, 233, 203, 213, 254,
	59,  0,	  29,  57,  242, 239, 183, 14,	102, 88,  208, 228, 166, 119, 114, 248, 235, 117, 75,  10,  49,	 68,
	80,  180, 143, 237, 31,	 26,  219, 153, 141, 51,  159, 17,  131, 20,
};

void md2_init(struct md2 *m)
{
	memset(m, 0, sizeof(*m));
}

static void md2_block(struct md2 *m)
{
	uint8_t t = 0;

	for (int j = 0; j < 16; j++) {
		m->x[16 + j] = m->buf[j];
		m->x[32 + j] = m->buf[j] ^ m->x[j];
		/* The checksum, with RFC 1319's erratum: C[j] ^= S[c ^ L]. */
		m->c[j] ^= md2_s[m->buf[j] ^ m->l];
		m->l = m->c[j];
	}
	for (int j = 0; j < 18; j++) {
		for (int k = 0; k < 48; k++)
			t = m->x[k] ^= md2_s[t];
		t = (uint8_t)(t + j);
	}
}

void md2_update(struct md2 *m, const void *data, size_t n)
{
	const uint8_t *p = data;

	while (n--) {
		m->buf[m->n++] = *p++;
		if (m->n == 16) {
			md2_block(m);
			m->n = 0;
		}
	}
}

void md2_final(struct md2 *m, uint8_t out[16])
{
	uint8_t pad[16], sum[16];
	unsigned int k = 16 - m->n;

	memset(pad, (int)k, k);
	md2_update(m, pad, k);
	memcpy(sum, m->c, 16);
	md2_update(m, sum, 16);
	memcpy(out, m->x, 16);
}

/* The key the runtime and libcuda share. */
static const uint8_t hmac_key[16] = {
	0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f,
};

static void hmac_pad(struct md2 *m, uint8_t x)
{
	uint8_t k[16];

	for (int i = 0; i < 16; i++)
		k[i] = hmac_key[i] ^ x;
	md2_update(m, k, 16);
}

void cu_integrity_hash(uint32_t version, const struct cu_integrity_input *in, const struct cu_integrity_device *devs,
		       unsigned int ndev, uint64_t out[2])
{
	struct md2 m;
	uint8_t inner[16], mac[16];

	if (version % 10 == 0 || version % 10 == 1) {
		out[0] = version % 10 ? 0x1841181C03CB675Cull : 0x3341181C03CB675Cull;
		out[1] = 0x8ED383AA1F4CD1E8ull;
		return;
	}
	md2_init(&m);
	hmac_pad(&m, 0x36);
	md2_update(&m, in, sizeof(*in));
	for (unsigned int i = 0; i < ndev; i++)
		md2_update(&m, &devs[i], sizeof(devs[i]));
	md2_final(&m, inner);
	md2_init(&m);
	hmac_pad(&m, 0x5c);
	md2_update(&m, inner, 16);
	md2_final(&m, mac);
	memcpy(out, mac, 16);
}
