/* SPDX-License-Identifier: MIT */
/*
 * shm_calls: requests over the qcuda shared-memory region QCUDA_SHM names,
 * through the guest library's transport (transport.h: transport_shm.c, then
 * transport_user.c's chunks and staging over vhu_ring.c), as nvcuda.dll
 * will make them: HELLO (the session opens with it), 8 MiB of device memory
 * written from and read back into ordinary memory (staged, 2 MiB chunks
 * pipelined), freed, a double free refused. Prints one line per step, the
 * same on every build (the test compares this Windows build under Wine with
 * the Linux build). Exit 0 if every step did what it should.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcuda_proto.h"
#include "transport.h"

#define BYTES (8u << 20)

static int failed;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	failed |= !ok;
}

int main(void)
{
	struct qcuda_args_hello hello = { .proto_version = QCUDA_PROTO_VERSION, .cuda_version = 13000 };
	struct qcuda_out_hello ho = { 0 };
	struct qcuda_args_malloc ma = { .size = BYTES };
	struct qcuda_args_memcpy mc = { .size = BYTES };
	struct qcuda_args_ptr fr;
	uint8_t *pattern = malloc(BYTES), *back = malloc(BYTES);
	struct qt_result r;
	struct qt_info info;
	int fd, e;

	if (!pattern || !back || !getenv("QCUDA_SHM"))
		return 2;
	e = qt_open(getenv("QCUDA_SHM"), &fd);
	check(!e, "qt_open: the region attached");
	if (e)
		return 1;
	printf("     transport %s\n", qt_name());
	e = qt_info(fd, &info);
	check(!e && info.proto_version == QCUDA_PROTO_VERSION && info.num_queues > 0, "qt_info: the device's config");
	e = qt_call(fd, QCUDA_CMD_HELLO, &hello, sizeof(hello), &ho, sizeof(ho), QT_NONE, NULL, 0, &r);
	check(!e && r.status == 0 && ho.proto_version == QCUDA_PROTO_VERSION, "HELLO: the backend speaks our protocol");
	printf("     %u device(s)\n", ho.device_count);
	e = qt_call(fd, QCUDA_CMD_MALLOC, &ma, sizeof(ma), NULL, 0, QT_NONE, NULL, 0, &r);
	check(!e && r.status == 0 && r.value != 0, "MALLOC 8 MiB");
	mc.dst = mc.src = fr.ptr = r.value;
	for (size_t i = 0; i < BYTES; i++)
		pattern[i] = (uint8_t)(i * 7 + (i >> 12));
	e = qt_call(fd, QCUDA_CMD_MEMCPY_HTOD, &mc, sizeof(mc), NULL, 0, QT_TO_DEVICE, pattern, BYTES, &r);
	check(!e && r.status == 0, "MEMCPY_HTOD 8 MiB from ordinary memory (staged)");
	memset(back, 0, BYTES);
	e = qt_call(fd, QCUDA_CMD_MEMCPY_DTOH, &mc, sizeof(mc), NULL, 0, QT_FROM_DEVICE, back, BYTES, &r);
	check(!e && r.status == 0 && !memcmp(pattern, back, BYTES), "MEMCPY_DTOH: the same bytes back");
	e = qt_call(fd, QCUDA_CMD_FREE, &fr, sizeof(fr), NULL, 0, QT_NONE, NULL, 0, &r);
	check(!e && r.status == 0, "FREE");
	e = qt_call(fd, QCUDA_CMD_FREE, &fr, sizeof(fr), NULL, 0, QT_NONE, NULL, 0, &r);
	check(!e && r.status != 0, "FREE again: an error");
	printf("%s: shm_calls\n", failed ? "FAIL" : "PASS");
	free(pattern);
	free(back);
	/* The region is let go at exit (transport_shm.c). */
	return failed;
}
