/* SPDX-License-Identifier: MIT */
/*
 * The kernels a driver-API module holds, by name, read from its image: a
 * cubin's entry functions (ELF symbols marked STO_CUDA_ENTRY), the same in
 * each uncompressed SASS entry of a fat binary for this device's major
 * version, or a PTX text's `.entry` directives. A fat binary's entries may
 * be LZ4-compressed (entry flag 0x2000: cuFFT's are), and are then expanded
 * here; zstd-compressed ones (nvcc 13's default --compress-mode) are not, and
 * a module of only those cannot be listed. Which entries count is the rule
 * the library sends modules by (../lib/fatbin.c). The image is the program's
 * own memory, read with every offset bounds-checked.
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "../lib/fatbin.h"
#include "../lib/qc_os.h" /* memmem on Windows */
#include "kernels.h"
#include "qcuda_proto.h" /* QCUDA_MAX_MODULE */

#define ELF_MAGIC \
	"\x7f"    \
	"ELF"
#define STT_FUNC 2
#define STO_CUDA_ENTRY 0x10
#define SHT_SYMTAB 2
#define FATBIN_FLAGS_END 48 /* an entry header through its flags (at 40) */
#define FATBIN_COMPRESSED 0x2000 /* entry flags: payload LZ4-compressed */
#define FATBIN_ZSTD 0x8000 /* payload zstd-compressed: not expanded here */
#define FATBIN_HEADER_MIN 64 /* through the expanded size at 56 */

static uint64_t rd(const unsigned char *p, int n)
{
	uint64_t v = 0;

	memcpy(&v, p, n);
	return v;
}

/* Whether [off, off + len) lies inside size bytes. */
static int inside(uint64_t off, uint64_t len, uint64_t size)
{
	return off <= size && len <= size - off;
}

static int elf_kernels(const unsigned char *p, uint64_t size, cu_kernel_name_fn fn, void *arg)
{
	uint64_t shoff;
	unsigned int shnum, shentsize, n = 0;

	if (size < 64 || memcmp(p, ELF_MAGIC, 4) || p[4] != 2)
		return -1;
	shoff = rd(p + 0x28, 8);
	shentsize = (unsigned int)rd(p + 0x3a, 2);
	shnum = (unsigned int)rd(p + 0x3c, 2);
	if (shentsize < 64 || !inside(shoff, (uint64_t)shnum * shentsize, size))
		return -1;
	for (unsigned int i = 0; i < shnum; i++) {
		const unsigned char *sh = p + shoff + (uint64_t)i * shentsize, *strsh;
		uint64_t off = rd(sh + 0x18, 8), len = rd(sh + 0x20, 8), ent = rd(sh + 0x38, 8);
		uint64_t stroff, strlen_;
		unsigned int link = (unsigned int)rd(sh + 0x28, 4);

		if (rd(sh + 4, 4) != SHT_SYMTAB || ent < 24 || !inside(off, len, size) || link >= shnum)
			continue;
		strsh = p + shoff + (uint64_t)link * shentsize;
		stroff = rd(strsh + 0x18, 8);
		strlen_ = rd(strsh + 0x20, 8);
		if (!inside(stroff, strlen_, size))
			continue;
		for (uint64_t s = 0; s + ent <= len; s += ent) {
			const unsigned char *sym = p + off + s;
			uint64_t name = rd(sym, 4);

			if ((sym[4] & 0xf) != STT_FUNC || !(sym[5] & STO_CUDA_ENTRY) || name >= strlen_ ||
			    !memchr(p + stroff + name, 0, strlen_ - name))
				continue;
			if (fn((const char *)p + stroff + name, arg))
				return 0;
			n++;
		}
	}
	return (int)n;
}

/* PTX: each ".entry NAME(" outside comments (PTX names are [A-Za-z0-9_$.]). */
static int ptx_kernels(const char *t, uint64_t size, cu_kernel_name_fn fn, void *arg)
{
	const char *end = t + size, *s = t;
	int n = 0;

	while ((s = memmem(s, (size_t)(end - s), ".entry", 6)) != NULL) {
		const char *b = s + 6, *e;
		char name[1024];

		s = b;
		while (b < end && (*b == ' ' || *b == '\t'))
			b++;
		for (e = b; e < end &&
			    (strchr("_$.", *e) || (*e >= '0' && *e <= '9') || ((*e | 32) >= 'a' && (*e | 32) <= 'z'));
		     e++)
			;
		if (e == b || e - b >= (long)sizeof(name))
			continue;
		memcpy(name, b, (size_t)(e - b));
		name[e - b] = 0;
		if (fn(name, arg))
			return 0;
		n++;
	}
	return n;
}

/* An LZ4 block of n bytes into out (cap bytes); returns the bytes written,
 * or -1 if src is not a well-formed block that fits. */
static int64_t lz4_block(const unsigned char *src, uint64_t n, unsigned char *out, uint64_t cap)
{
	uint64_t i = 0, o = 0;

	while (i < n) {
		unsigned int token = src[i++];
		uint64_t lit = token >> 4, match = (token & 15) + 4, off;

		if (lit == 15)
			do {
				if (i >= n)
					return -1;
				lit += src[i];
			} while (src[i++] == 255);
		if (lit > n - i || lit > cap - o)
			return -1;
		memcpy(out + o, src + i, lit);
		i += lit, o += lit;
		if (i == n)
			return (int64_t)o; /* the last sequence has no match */
		if (n - i < 2)
			return -1;
		off = src[i] | (uint64_t)src[i + 1] << 8;
		i += 2;
		if (!off || off > o)
			return -1;
		if ((token & 15) == 15)
			do {
				if (i >= n)
					return -1;
				match += src[i];
			} while (src[i++] == 255);
		if (match > cap - o)
			return -1;
		for (uint64_t k = 0; k < match; k++, o++) /* may overlap itself */
			out[o] = out[o - off];
	}
	return (int64_t)o;
}

/* An entry's payload as the driver reads it: expanded into *owned (to be
 * freed) if compressed. NULL if it cannot be expanded. */
static const unsigned char *entry_payload(const unsigned char *h, uint64_t hsize, uint64_t len, uint64_t *size,
					  unsigned char **owned)
{
	uint64_t flags = hsize >= FATBIN_FLAGS_END ? rd(h + 40, 8) : 0, packed, full;
	int64_t got;

	*owned = NULL;
	*size = len;
	if (flags & FATBIN_ZSTD)
		return NULL;
	if (!(flags & FATBIN_COMPRESSED))
		return h + hsize;
	if (hsize < FATBIN_HEADER_MIN)
		return NULL;
	packed = rd(h + 16, 4);
	full = rd(h + 56, 8);
	if (packed > len || !full || full > QCUDA_MAX_MODULE)
		return NULL;
	*owned = malloc(full);
	if (!*owned)
		return NULL;
	got = lz4_block(h + hsize, packed, *owned, full);
	if (got < 0) {
		free(*owned);
		*owned = NULL;
		return NULL;
	}
	*size = (uint64_t)got;
	return *owned;
}

/* A fat binary's entries for a device of compute capability sm: its SASS
 * entries of that major version not above sm, else its newest PTX. */
/* The kernels of one entry: an ELF's entry symbols or a PTX's `.entry`
 * lines, its payload expanded if need be. */
static int entry_kernels(const unsigned char *image, const struct qc_fatbin_entry *e, cu_kernel_name_fn fn, void *arg)
{
	const unsigned char *h = image + e->at, *payload;
	uint64_t hsize = rd(h + 4, 4), n;
	unsigned char *owned;
	int found = -1;

	payload = entry_payload(h, hsize, e->len - hsize, &n, &owned);
	if (payload && e->kind == QC_FATBIN_ELF)
		found = elf_kernels(payload, n, fn, arg);
	else if (payload)
		found = ptx_kernels((const char *)payload, strnlen((const char *)payload, n), fn, arg);
	free(owned);
	return found;
}

/* A fat binary's kernels, from the entries a device of compute capability
 * sm runs: its SASS (the first that can be read), else its newest PTX. */
static int fatbin_kernels(const unsigned char *p, uint64_t size, int sm, cu_kernel_name_fn fn, void *arg)
{
	struct qc_fatbin_entry *e = NULL;
	int n = qc_fatbin_entries(p, size, &e), found = -1, ptx;

	for (int i = 0; i < n && found < 0; i++)
		if (qc_fatbin_sass_runs(&e[i], sm))
			found = entry_kernels(p, &e[i], fn, arg);
	ptx = n > 0 ? qc_fatbin_newest_ptx(e, n, sm) : -1;
	if (found < 0 && ptx >= 0)
		found = entry_kernels(p, &e[ptx], fn, arg);
	free(e);
	return found;
}

int cu_kernel_names(const void *image, uint64_t size, int sm, cu_kernel_name_fn fn, void *arg)
{
	const unsigned char *p = image;

	if (!p || size < 4)
		return -1;
	if (!memcmp(p, ELF_MAGIC, 4))
		return elf_kernels(p, size, fn, arg);
	if (rd(p, 4) == QC_FATBIN_MAGIC)
		return fatbin_kernels(p, size, sm, fn, arg);
	return ptx_kernels(image, strnlen(image, size), fn, arg);
}
