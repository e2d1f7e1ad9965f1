/* SPDX-License-Identifier: MIT */
/*
 * What of a fat binary crosses to the host: only the code objects the device
 * runs. A fat binary holds one entry per target (cuBLAS's hold SASS for
 * several GPU generations and PTX); the driver loads its SM's SASS, else JIT-
 * compiles PTX. So the library sends the SASS entries of the device's major
 * version not above its SM, or, with none, the newest PTX not above it: a
 * new fat binary of those entries, copied unchanged. Where nothing fits (or
 * the device reports no compute capability: the emu provider), the image
 * goes whole and the driver answers as it would.
 *
 * Layout (as module-image.ts checks it on the host): a 16-byte header {u32
 * magic, u16 version, u16 header_size, u64 fat_size}, then entries {u16 kind
 * (1 PTX, 2 ELF), u16 version, u32 header_size, u64 payload_size, ..., u32
 * arch at 28 (e.g. 90 for sm_90 and compute_90)}, each payload after its header.
 */
#include <stdlib.h>
#include <string.h>

#include "fatbin.h"
#include "qcrt.h"

#define ENTRY_HEADER_MIN 32 /* the arch field lies inside */

static uint16_t rd16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return v;
}

static uint32_t rd32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t rd64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

int qc_fatbin_entries(const void *image, uint64_t size, struct qc_fatbin_entry **out)
{
	const uint8_t *b = image;
	uint64_t hs, end, at;
	struct qc_fatbin_entry *v = NULL;
	int n = 0;

	if (size < 16 || rd32(b) != QC_FATBIN_MAGIC)
		return -1;
	hs = rd16(b + 6);
	end = hs + rd64(b + 8);
	if (hs < 16 || end > size || end < hs)
		return -1;
	for (at = hs; at < end; n++) {
		uint64_t eh, pl;
		struct qc_fatbin_entry *nv;

		if (end - at < ENTRY_HEADER_MIN)
			goto bad;
		eh = rd32(b + at + 4);
		pl = rd64(b + at + 8);
		if (eh < ENTRY_HEADER_MIN || eh > end - at || pl > end - at - eh)
			goto bad;
		nv = realloc(v, (size_t)(n + 1) * sizeof(*v));
		if (!nv)
			goto bad;
		v = nv;
		v[n] = (struct qc_fatbin_entry){
			.at = at, .len = eh + pl, .kind = rd16(b + at), .arch = rd32(b + at + 28)
		};
		at += eh + pl;
	}
	*out = v;
	return n;
bad:
	free(v);
	return -1;
}

int qc_fatbin_sass_runs(const struct qc_fatbin_entry *e, int sm)
{
	return e->kind == QC_FATBIN_ELF && e->arch / 10 == (uint32_t)sm / 10 && e->arch <= (uint32_t)sm;
}

int qc_fatbin_newest_ptx(const struct qc_fatbin_entry *e, int n, int sm)
{
	int ptx = -1;

	for (int i = 0; i < n; i++)
		if (e[i].kind == QC_FATBIN_PTX && e[i].arch <= (uint32_t)sm && (ptx < 0 || e[i].arch > e[ptx].arch))
			ptx = i;
	return ptx;
}

uint64_t qc_fatbin_select(const void *image, uint64_t size, int sm, void **out)
{
	const uint8_t *b = image;
	struct qc_fatbin_entry *e = NULL;
	int n = qc_fatbin_entries(b, size, &e), ptx, keep_elf = 0;
	uint64_t total = 16;
	uint8_t *nb, *p;

	*out = NULL;
	if (n <= 0 || sm <= 0) {
		free(e);
		return 0;
	}
	for (int i = 0; i < n; i++) {
		if (qc_fatbin_sass_runs(&e[i], sm)) {
			keep_elf = 1;
			total += e[i].len;
		}
	}
	ptx = qc_fatbin_newest_ptx(e, n, sm);
	if (!keep_elf) {
		if (ptx < 0) {
			free(e);
			return 0;
		}
		total += e[ptx].len;
	}
	if (total >= size) { /* nothing to leave out */
		free(e);
		return 0;
	}
	nb = malloc(total);
	if (!nb) {
		free(e);
		return 0;
	}
	memcpy(nb, b, 8); /* magic, version */
	nb[6] = 16, nb[7] = 0; /* header_size */
	total -= 16;
	memcpy(nb + 8, &total, 8);
	p = nb + 16;
	for (int i = 0; i < n; i++) {
		int take = keep_elf ? qc_fatbin_sass_runs(&e[i], sm) : i == ptx;

		if (take) {
			memcpy(p, b + e[i].at, e[i].len);
			p += e[i].len;
		}
	}
	free(e);
	*out = nb;
	return total + 16;
}
