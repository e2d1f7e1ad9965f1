/* SPDX-License-Identifier: MIT */
/*
 * A fat binary's entries and which of them a device runs (fatbin.c): apart
 * from qcrt.h so that libcuda's kernels.c and host-side tests build with it
 * alone.
 */
#ifndef QCUDA_FATBIN_H
#define QCUDA_FATBIN_H

#include <stdint.h>

#define QC_FATBIN_MAGIC 0xBA55ED50u
#define QC_FATBIN_PTX 1
#define QC_FATBIN_ELF 2

/* One entry: its header and payload at [at, at + len) of the image. */
struct qc_fatbin_entry {
	uint64_t at, len;
	uint16_t kind;
	uint32_t arch; /* e.g. 90 for sm_90 and compute_90 */
};

/* The entries of a fat binary of size bytes (*out malloc'd), each inside
 * it; -1 if it is not one this reads. */
int qc_fatbin_entries(const void *image, uint64_t size, struct qc_fatbin_entry **out);
/* Whether a device of compute capability sm runs e as SASS: of its major
 * version, not above it. */
int qc_fatbin_sass_runs(const struct qc_fatbin_entry *e, int sm);
/* Of e[0..n), the newest PTX not above sm (what the driver JIT-compiles
 * where no SASS runs), or -1. */
int qc_fatbin_newest_ptx(const struct qc_fatbin_entry *e, int n, int sm);

#endif
