/* SPDX-License-Identifier: MIT */
/* The IVSHMEM device's memory as qc_os.h's mapping (ivshmem_win32.c). */
#ifndef QCUDA_IVSHMEM_WIN32_H
#define QCUDA_IVSHMEM_WIN32_H

#include "qc_os.h"

/* The name qc_os_map_file takes for the device ("ivshmem", "ivshmem:N"). */
#define QC_IVSHMEM_NAME "ivshmem"

/* 0, -ENODEV (no such device), -EBUSY (another process holds its memory),
 * -EPROTO (smaller than min_bytes) or -errno. */
int ivshmem_map(const char *name, uint64_t min_bytes, struct qc_os_map *m);
void ivshmem_unmap(struct qc_os_map *m);

#endif
