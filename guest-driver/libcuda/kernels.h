/* SPDX-License-Identifier: MIT */
/* The kernels of a module image, by name (kernels.c): apart from cu.h so a
 * host-side test builds it alone. */
#ifndef QCUDA_KERNELS_H
#define QCUDA_KERNELS_H

#include <stdint.h>

/* Called with each kernel's name; returns non-zero to stop. */
typedef int (*cu_kernel_name_fn)(const char *name, void *arg);
/* Calls fn with the name of each kernel in image (a cubin, a fat binary's
 * entries for compute capability sm such as 90, or PTX); returns how many,
 * or -1 if it cannot tell. */
int cu_kernel_names(const void *image, uint64_t size, int sm, cu_kernel_name_fn fn, void *arg);

#endif
