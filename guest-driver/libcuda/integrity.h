/* SPDX-License-Identifier: MIT */
/* integrity.c: MD2 and the runtime's integrity check (host-testable: no CUDA). */
#ifndef QCUDA_INTEGRITY_H
#define QCUDA_INTEGRITY_H

#include <stddef.h>
#include <stdint.h>

struct md2 {
	uint8_t x[48], c[16], buf[16];
	uint8_t l;
	unsigned int n;
};
void md2_init(struct md2 *m);
void md2_update(struct md2 *m, const void *data, size_t n);
void md2_final(struct md2 *m, uint8_t out[16]);

/* What the runtime's check hashes, in this layout (48 bytes, then 28 per device). */
struct cu_integrity_input {
	uint32_t driver_version; /* as cuDriverGetVersion reports it */
	uint32_t version; /* the check's version argument */
	uint32_t pid;
	uint32_t thread; /* pthread_self(), truncated */
	const void *cudart_table; /* the CUDART_INTERFACE table's address */
	const void *integrity_table; /* the INTEGRITY_CHECK table's address */
	const void *check_fn; /* the check function's own address */
	uint64_t unix_seconds; /* as the runtime passes it */
};
struct cu_integrity_device {
	uint8_t uuid[16]; /* as cuDeviceGetUuid reports it */
	int32_t pci_domain, pci_bus, pci_device; /* as the attributes report them */
};

void cu_integrity_hash(uint32_t version, const struct cu_integrity_input *in, const struct cu_integrity_device *devs,
		       unsigned int ndev, uint64_t out[2]);

#endif
