/* SPDX-License-Identifier: MIT */
/*
 * shm_calls REGION: requests over a qcuda shared-memory region through the
 * guest library's own ring code (vhu_ring.c, polled) from Windows, as
 * nvcuda.dll will make them: a session, HELLO, 1 MiB of device memory
 * written and read back through a slot's staging room, freed, the session
 * closed. Prints one line per call, the same on every build (the test
 * compares this Windows build under Wine with the Linux build). Exit 0 if
 * every call did what it should.
 */
#include <stdio.h>
#include <string.h>

#include "shm_attach.h"
#include "vhu.h"

static struct shm_attach shm;
static int failed;

static int alive(void)
{
	return shm_alive(&shm);
}

/* One request on queue 0 from a slot: args in, out back; data through the
 * slot's stage (to or from the device, len bytes). */
static int call(uint32_t cmd, uint64_t session, const void *args, uint32_t args_len, void *out, uint32_t out_len,
		int to_device, uint32_t len, struct qcuda_resp_hdr *resp, uint8_t **stage)
{
	struct vhu_slot *s = vhu_slot_get();
	struct vhu_buf data = { .len = len, .to_device = to_device };
	int e;

	*s->hdr = (struct qcuda_req_hdr){ .cmd = cmd, .len = args_len, .session = session, .data_len = len };
	memcpy(s->args, args, args_len);
	data.gpa = s->stage_gpa;
	if (stage && to_device)
		memcpy(s->stage, *stage, len);
	e = vhu_submit(0, s, args_len, out_len, &data);
	if (!e)
		e = vhu_wait(s);
	if (!e) {
		*resp = *s->resp;
		if (out_len && resp->len <= out_len)
			memcpy(out, s->out, resp->len);
		if (stage && !to_device)
			memcpy(*stage, s->stage, len);
	}
	vhu_slot_put(s);
	return e;
}

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	failed |= !ok;
}

int main(int argc, char **argv)
{
	static uint8_t pattern[1 << 20], back[1 << 20];
	struct qcuda_args_hello hello = { .proto_version = QCUDA_PROTO_VERSION, .cuda_version = 13000 };
	struct qcuda_out_hello ho = { 0 };
	struct qcuda_args_malloc ma = { .size = sizeof(pattern) };
	struct qcuda_args_memcpy mc = { .size = sizeof(pattern) };
	struct qcuda_args_ptr fr;
	struct qcuda_resp_hdr r;
	uint8_t *p = pattern, *b = back;
	uint64_t session;
	int e;

	if (argc < 2) {
		fprintf(stderr, "usage: shm_calls REGION\n");
		return 2;
	}
	if ((e = shm_attach(argv[1], VHU_RING_SIZE, &shm))) {
		printf("attach failed (%d)\n", -e);
		return 1;
	}
	vhu_mem_use_file(-1, shm.map.va + shm.layout.data_offset, shm.layout.data_gpa, shm.layout.data_offset,
			 shm.layout.data_bytes);
	vhu_ring_use_polling(alive);
	if ((e = vhu_ring_start(shm.rings))) {
		printf("rings failed (%d)\n", -e);
		shm_detach(&shm);
		return 1;
	}
	e = call(QCUDA_CMD_SESSION_OPEN, 0, NULL, 0, NULL, 0, 0, 0, &r, NULL);
	session = r.value;
	check(!e && r.status == 0 && session != 0, "SESSION_OPEN: a session");
	e = call(QCUDA_CMD_HELLO, session, &hello, sizeof(hello), &ho, sizeof(ho), 0, 0, &r, NULL);
	check(!e && r.status == 0 && ho.proto_version == QCUDA_PROTO_VERSION, "HELLO: the backend speaks our protocol");
	printf("     %u device(s)\n", ho.device_count);
	e = call(QCUDA_CMD_MALLOC, session, &ma, sizeof(ma), NULL, 0, 0, 0, &r, NULL);
	check(!e && r.status == 0 && r.value != 0, "MALLOC 1 MiB");
	mc.dst = mc.src = fr.ptr = r.value;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)(i * 7 + (i >> 12));
	e = call(QCUDA_CMD_MEMCPY_HTOD, session, &mc, sizeof(mc), NULL, 0, 1, sizeof(pattern), &r, &p);
	check(!e && r.status == 0, "MEMCPY_HTOD 1 MiB through the region");
	e = call(QCUDA_CMD_MEMCPY_DTOH, session, &mc, sizeof(mc), NULL, 0, 0, sizeof(back), &r, &b);
	check(!e && r.status == 0 && !memcmp(pattern, back, sizeof(back)), "MEMCPY_DTOH: the same bytes back");
	e = call(QCUDA_CMD_FREE, session, &fr, sizeof(fr), NULL, 0, 0, 0, &r, NULL);
	check(!e && r.status == 0, "FREE");
	e = call(QCUDA_CMD_FREE, session, &fr, sizeof(fr), NULL, 0, 0, 0, &r, NULL);
	check(!e && r.status != 0, "FREE again: an error");
	e = call(QCUDA_CMD_SESSION_CLOSE, session, NULL, 0, NULL, 0, 0, 0, &r, NULL);
	check(!e && r.status == 0, "SESSION_CLOSE");
	shm_detach(&shm);
	printf("%s: shm_calls\n", failed ? "FAIL" : "PASS");
	return failed;
}
