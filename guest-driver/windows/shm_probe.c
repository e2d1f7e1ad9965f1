/* SPDX-License-Identifier: MIT */
/*
 * shm_probe REGION [hold-ms]: attaches to a qcuda shared-memory region
 * (shm_attach.c over os_win32.c, the code the Windows library will use),
 * prints what the backend answered, holds the attach for hold-ms, then
 * detaches. Exit 0 if attached; 1 and the reason if not. Windows' first
 * piece of issue 48, run under Wine by test/windows/shm-wine.test.ts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "shm_attach.h"

/* The same words on every C library (errno numbers and strerror differ). */
static const char *err_name(int e)
{
	switch (e) {
	case EPROTO:
		return "EPROTO (not a qcuda region, or cut short)";
	case EBUSY:
		return "EBUSY (another process holds it)";
	case ENOENT:
		return "ENOENT";
	case EACCES:
		return "EACCES";
	case ECONNREFUSED:
		return "ECONNREFUSED (the backend refused the attach)";
	case ETIMEDOUT:
		return "ETIMEDOUT (no backend serves it)";
	default:
		return "another error";
	}
}

int main(int argc, char **argv)
{
	struct shm_attach a;
	int e;

	if (argc < 2) {
		fprintf(stderr, "usage: shm_probe REGION [hold-ms]\n");
		return 2;
	}
	e = shm_attach(argv[1], QCUDA_SHM_RING_SIZE, &a);
	if (e) {
		printf("attach failed: %s\n", err_name(-e));
		return 1;
	}
	printf("attached: protocol %u, %u queues, %u rings, data %llu MiB at 0x%llx\n", a.config.proto_version,
	       a.config.num_queues, a.rings, (unsigned long long)(a.layout.data_bytes >> 20),
	       (unsigned long long)a.layout.data_gpa);
	printf("generation %u\n", a.gen);
	fflush(stdout);
	if (argc > 2)
		qc_os_sleep_us(atol(argv[2]) * 1000);
	printf("alive: %d\n", shm_alive(&a));
	shm_detach(&a);
	qc_os_unmap(&a.map);
	return 0;
}
