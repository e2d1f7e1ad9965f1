/* SPDX-License-Identifier: MIT */
/*
 * fatbin.c on the host: what of a fat binary crosses to the device. Fat
 * binaries are built here, entry by entry (the layout of fatbin.c's opening
 * comment), each in a buffer of exactly its size so that the sanitizers
 * catch any read past it: for each SM the entries kept, byte for byte;
 * and the truncated or corrupt ones refused (sent whole, for the driver to
 * judge).
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "qcrt.h"

#define MAGIC 0xBA55ED50u
#define PTX 1
#define ELF 2
#define EH 64 /* entry header size: more than the 32 fatbin.c needs */

struct img {
	uint8_t *b;
	uint64_t n;
};

static void put(struct img *m, const void *p, uint64_t n)
{
	m->b = realloc(m->b, m->n + n);
	memcpy(m->b + m->n, p, n);
	m->n += n;
}

/* A fat binary header of hs bytes; its fat_size set by finish(). */
static struct img start(uint16_t hs)
{
	struct img m = { 0 };
	uint8_t h[64] = { 0 };
	uint32_t magic = MAGIC;
	uint16_t version = 1;

	memcpy(h, &magic, 4);
	memcpy(h + 4, &version, 2);
	memcpy(h + 6, &hs, 2);
	put(&m, h, hs);
	return m;
}

/* An entry of kind for arch, its payload len bytes of fill; eh: its header size. */
static void entry(struct img *m, uint16_t kind, uint32_t arch, uint64_t len, uint8_t fill, uint32_t eh)
{
	uint8_t h[EH] = { 0 }, *p = malloc(len);

	memcpy(h, &kind, 2);
	memcpy(h + 4, &eh, 4);
	memcpy(h + 8, &len, 8);
	memcpy(h + 28, &arch, 4);
	put(m, h, eh);
	memset(p, fill, len);
	put(m, p, len);
	free(p);
}

static void finish(struct img *m)
{
	uint16_t hs;
	uint64_t fat;

	memcpy(&hs, m->b + 6, 2);
	fat = m->n - hs;
	memcpy(m->b + 8, &fat, 8);
}

/* What qc_fatbin_select keeps of the first n bytes of m (copied to a buffer of
 * exactly n bytes), as a string of "kind arch fill" per entry ("whole" when
 * it keeps nothing out: the image goes as it is); checks the header it wrote. */
static const char *kept(const struct img *m, uint64_t n, int sm)
{
	static char s[256];
	uint8_t *copy = malloc(n);
	void *out;
	uint64_t len, at = 16, fat;
	const uint8_t *o;

	memcpy(copy, m->b, n);
	len = qc_fatbin_select(copy, n, sm, &out);
	free(copy);
	if (!len) {
		CHECK(out == NULL, "nothing kept, nothing allocated");
		return "whole";
	}
	o = out;
	s[0] = 0;
	memcpy(&fat, o + 8, 8);
	CHECK(!memcmp(o, m->b, 6) && o[6] == 16 && o[7] == 0 && fat + 16 == len,
	      "sm %d: header (magic, version, 16, %llu) of %llu bytes", sm, (unsigned long long)fat,
	      (unsigned long long)len);
	while (at + EH <= len) {
		uint16_t kind;
		uint32_t arch;
		uint64_t pl;
		int same = 1;

		memcpy(&kind, o + at, 2);
		memcpy(&pl, o + at + 8, 8);
		memcpy(&arch, o + at + 28, 4);
		for (uint64_t i = 1; i < pl && at + EH + i < len; i++)
			same &= o[at + EH + i] == o[at + EH];
		snprintf(s + strlen(s), sizeof(s) - strlen(s), "%s%s %u %c%s", s[0] ? ", " : "",
			 kind == ELF ? "elf" : "ptx", arch, o[at + EH], same ? "" : "(mixed)");
		at += EH + pl;
	}
	CHECK(at == len, "sm %d: entries end at %llu of %llu", sm, (unsigned long long)at, (unsigned long long)len);
	free(out);
	return s;
}

#define KEPT(m, sm, want)                                                                      \
	do {                                                                                   \
		const char *got_ = kept(&(m), (m).n, sm);                                      \
		CHECK(!strcmp(got_, want), "sm %d: kept \"%s\", want \"%s\"", sm, got_, want); \
	} while (0)

/* cuBLAS-like: SASS for several generations and PTX. */
static struct img typical(uint16_t hs)
{
	struct img m = start(hs);

	entry(&m, ELF, 80, 100, 'a', EH);
	entry(&m, PTX, 70, 30, 'b', EH);
	entry(&m, ELF, 90, 200, 'c', EH);
	entry(&m, PTX, 90, 50, 'd', EH);
	entry(&m, ELF, 86, 120, 'e', EH);
	entry(&m, ELF, 90, 60, 'f', EH); /* sm_90a: its arch field says 90 too */
	finish(&m);
	return m;
}

static void selects(void)
{
	struct img m = typical(16), wide = typical(32);

	KEPT(m, 90, "elf 90 c, elf 90 f"); /* every SASS of its own */
	KEPT(m, 89, "elf 80 a, elf 86 e");
	KEPT(m, 86, "elf 80 a, elf 86 e"); /* 8.x runs 8.0 and 8.6 code */
	KEPT(m, 80, "elf 80 a"); /* not 8.6's */
	KEPT(m, 100, "ptx 90 d"); /* no SASS of its generation: the newest PTX */
	KEPT(m, 75, "ptx 70 b");
	KEPT(m, 60, "whole"); /* nothing it runs: the driver says so */
	KEPT(m, 0, "whole"); /* no compute capability (the emu provider) */
	KEPT(m, -1, "whole");
	KEPT(wide, 90, "elf 90 c, elf 90 f"); /* a longer header: the new one is 16 bytes */
	free(m.b);
	free(wide.b);
}

/* Whole when everything would be kept: no copy for nothing. */
static void nothing_left_out(void)
{
	struct img m = start(16);

	entry(&m, ELF, 90, 200, 'c', EH);
	finish(&m);
	KEPT(m, 90, "whole");
	free(m.b);
}

static void refused(void)
{
	struct img m = typical(16);
	struct img c;
	uint64_t v;
	uint32_t u;
	uint16_t h;

	/* Cut short anywhere: in the header, an entry header, a payload. */
	for (uint64_t n = 0; n < m.n; n += n < 40 ? 1 : 37) {
		const char *got = kept(&m, n, 90);

		CHECK(!strcmp(got, "whole"), "cut to %llu of %llu bytes: kept \"%s\"", (unsigned long long)n,
		      (unsigned long long)m.n, got);
	}
	CHECK(!strcmp(kept(&m, m.n - 1, 90), "whole"), "one byte short: refused");

	c = m;
	c.b = malloc(m.n);
#define CORRUPT(at, val, what)                                                   \
	do {                                                                     \
		memcpy(c.b, m.b, m.n);                                           \
		memcpy(c.b + (at), &(val), sizeof(val));                         \
		CHECK(!strcmp(kept(&c, c.n, 90), "whole"), "%s: refused", what); \
	} while (0)
	u = 0x12345678;
	CORRUPT(0, u, "a wrong magic");
	h = 8;
	CORRUPT(6, h, "a header size under 16");
	h = 0xffff;
	CORRUPT(6, h, "a header size past the end");
	v = m.n; /* fat_size: one header too many */
	CORRUPT(8, v, "a fat size past the end");
	v = UINT64_MAX - 8;
	CORRUPT(8, v, "a fat size that wraps");
	u = 16;
	CORRUPT(16 + 4, u, "an entry header too short to hold its arch");
	u = 0xfffffff0;
	CORRUPT(16 + 4, u, "an entry header size past the end");
	v = m.n;
	CORRUPT(16 + 8, v, "an entry payload past the end");
	v = UINT64_MAX - EH + 1;
	CORRUPT(16 + 8, v, "an entry payload size that wraps");
	v = 99; /* one short of the entry's 100: the next header lands inside a payload */
	CORRUPT(16 + 8, v, "an entry payload size that misplaces the next entry");
#undef CORRUPT
	free(c.b);
	free(m.b);
}

/* Entries that end wrong at the end of the image: each must be refused, not
 * read past (the last entry, the one sm 90 keeps, is the one at fault). */
static void bad_endings(void)
{
	struct img m = typical(16);
	uint64_t last = m.n - EH - 60, v = 61; /* the last entry's header; one payload byte too many */
	struct img tail = typical(16), shortie = typical(16);
	uint8_t extra[8] = { 2, 0, 0, 0, 64, 0, 0, 0 };

	memcpy(m.b + last + 8, &v, 8);
	CHECK(!strcmp(kept(&m, m.n, 90), "whole"), "a last payload one byte past the end: refused");

	/* 8 bytes after the last entry, inside the fat size: too short for an
	 * entry header (whose payload size would lie past the end). */
	put(&tail, extra, sizeof(extra));
	finish(&tail);
	CHECK(!strcmp(kept(&tail, tail.n, 90), "whole"), "a partial entry header at the end: refused");

	/* A last entry whose header (16 bytes) cannot hold its arch field. */
	entry(&shortie, ELF, 90, 16, 'g', 16);
	finish(&shortie);
	CHECK(!strcmp(kept(&shortie, shortie.n, 90), "whole"), "an entry header of 16 bytes: refused");
	free(m.b);
	free(tail.b);
	free(shortie.b);
}

int main(void)
{
	selects();
	nothing_left_out();
	refused();
	bad_endings();
	return check_end();
}
