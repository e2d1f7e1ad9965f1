// SPDX-License-Identifier: MIT
// hostile: a program that attacks the virtual device (qcuda only; it skips
// elsewhere). Everything must fail cleanly, and the backend must keep
// serving this and other processes:
//  1. garbage through QCUDA_IOC_CALL and the other ioctls (bad sizes, bad
//     pointers, unknown commands, malformed arguments), then a seeded fuzz;
//  2. pointers and handles of another process (another session): process A
//     allocates and publishes its device pointer, stream, event and mapped
//     host pointer; process B tries to read, write, free and use them, both
//     through the library and through raw ioctls; A then checks its data;
//  3. forged and stale handles through the library, in one process.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "qctest.h"

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

static int qfd = -1;

struct reply {
	int err; /* errno of the ioctl, 0 if it returned 0 */
	uint32_t status;
	uint64_t value;
};

static struct reply call(uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, uint32_t dir,
			 void *data, uint64_t data_len)
{
	struct qcuda_call c;
	struct reply r = { 0, 0, 0 };

	memset(&c, 0, sizeof(c));
	c.cmd = cmd;
	c.args = (uintptr_t)args;
	c.args_len = args_len;
	c.out = (uintptr_t)out;
	c.out_len = out_len;
	c.data_dir = dir;
	c.data = (uintptr_t)data;
	c.data_len = data_len;
	if (ioctl(qfd, QCUDA_IOC_CALL, &c))
		r.err = errno;
	r.status = c.status;
	r.value = c.value;
	return r;
}

/* The call was refused: the ioctl failed with one of errs, or the device
 * answered with a non-zero status. */
static bool refused(struct reply r)
{
	return r.err != 0 || r.status != 0;
}

static const char *how(struct reply r)
{
	static char buf[64];

	if (r.err)
		snprintf(buf, sizeof(buf), "errno %s", strerror(r.err));
	else if (r.status)
		snprintf(buf, sizeof(buf), "status %#x", r.status);
	else
		snprintf(buf, sizeof(buf), "ACCEPTED");
	return buf;
}

#define REFUSED(r, what)                                    \
	do {                                                \
		struct reply r_ = (r);                      \
		qt_check(refused(r_), "%s: refused", what); \
		if (!refused(r_))                           \
			printf("     (%s)\n", how(r_));     \
	} while (0)
#define ERRNO(r, e, what)                                    \
	do {                                                 \
		struct reply r_ = (r);                       \
		qt_check(r_.err == (e), "%s: %s", what, #e); \
		if (r_.err != (e))                           \
			printf("     (%s)\n", how(r_));      \
	} while (0)

static uint64_t raw_malloc(uint64_t size)
{
	struct qcuda_args_malloc a = { size };
	struct reply r = call(QCUDA_CMD_MALLOC, &a, sizeof(a), NULL, 0, QCUDA_DATA_NONE, NULL, 0);

	return refused(r) ? 0 : r.value;
}

static struct reply raw_copy(uint32_t cmd, uint64_t dst, uint64_t src, uint64_t size, uint32_t dir, void *data,
			     uint64_t data_len)
{
	struct qcuda_args_memcpy a;

	memset(&a, 0, sizeof(a));
	a.dst = dst;
	a.src = src;
	a.size = size;
	return call(cmd, &a, sizeof(a), NULL, 0, dir, data, data_len);
}

static struct reply raw_handle(uint32_t cmd, uint64_t h)
{
	struct qcuda_args_handle a = { h };

	return call(cmd, &a, sizeof(a), NULL, 0, QCUDA_DATA_NONE, NULL, 0);
}

/* This session still works: HELLO, MALLOC, a round trip, FREE. */
static bool alive(void)
{
	struct qcuda_args_hello ha = { QCUDA_PROTO_VERSION, CUDART_VERSION };
	struct qcuda_out_hello ho;
	unsigned char in[1000], out[1000];
	uint64_t d;
	bool ok;

	if (refused(call(QCUDA_CMD_HELLO, &ha, sizeof(ha), &ho, sizeof(ho), QCUDA_DATA_NONE, NULL, 0)))
		return false;
	d = raw_malloc(sizeof(in));
	if (!d)
		return false;
	qt_fill(in, sizeof(in), 1);
	memset(out, 0, sizeof(out));
	ok = !refused(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d, 0, sizeof(in), QCUDA_DATA_TO_DEVICE, in, sizeof(in))) &&
	     !refused(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, d, sizeof(in), QCUDA_DATA_FROM_DEVICE, out, sizeof(out))) &&
	     !memcmp(in, out, sizeof(in));
	struct qcuda_args_ptr fa = { d };
	return !refused(call(QCUDA_CMD_FREE, &fa, sizeof(fa), NULL, 0, QCUDA_DATA_NONE, NULL, 0)) && ok;
}

static void garbage(void)
{
	unsigned char buf[256], big[QCUDA_MAX_ARGS + 8];
	struct qcuda_info info;
	void *bad = (void *)0x10; /* never mapped */

	memset(buf, 0, sizeof(buf));
	memset(&info, 0, sizeof(info));
	qt_check(ioctl(qfd, QCUDA_IOC_INFO, &info) == 0 && info.proto_version == QCUDA_PROTO_VERSION,
		 "QCUDA_IOC_INFO: protocol v%u", QCUDA_PROTO_VERSION);
	qt_check(alive(), "raw session works");
	memset(&info, 0, sizeof(info));
	qt_check(ioctl(qfd, QCUDA_IOC_INFO, &info) == 0 && info.session != 0, "the file has a session");

	for (uint32_t cmd = 0; cmd < QCUDA_CMD_HELLO; cmd++)
		qt_quiet(call(cmd, buf, 8, buf, 8, QCUDA_DATA_NONE, NULL, 0).err == EINVAL,
			 "driver command %u through QCUDA_IOC_CALL: EINVAL", cmd);
	qt_check(true, "driver commands (< 16) through QCUDA_IOC_CALL: EINVAL");
	REFUSED(call(999, buf, 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0), "unknown command 999");
	REFUSED(call(0xffffffffu, NULL, 0, NULL, 0, QCUDA_DATA_NONE, NULL, 0), "unknown command 0xffffffff");
	ERRNO(call(QCUDA_CMD_MALLOC, big, sizeof(big), NULL, 0, QCUDA_DATA_NONE, NULL, 0), EINVAL,
	      "args_len > QCUDA_MAX_ARGS");
	ERRNO(call(QCUDA_CMD_MEM_GET_INFO, NULL, 0, big, QCUDA_MAX_OUT + 8, QCUDA_DATA_NONE, NULL, 0), EINVAL,
	      "out_len > QCUDA_MAX_OUT");
	ERRNO(call(QCUDA_CMD_MALLOC, bad, 8, NULL, 0, QCUDA_DATA_NONE, NULL, 0), EFAULT, "args at an unmapped address");
	ERRNO(call(QCUDA_CMD_MEM_GET_INFO, NULL, 0, bad, 16, QCUDA_DATA_NONE, NULL, 0), EFAULT,
	      "out at an unmapped address");
	ERRNO(call(QCUDA_CMD_MEMCPY_HTOD, buf, 40, NULL, 0, 3, buf, 8), EINVAL, "data_dir 3");
	ERRNO(call(QCUDA_CMD_MEMCPY_HTOD, buf, 40, NULL, 0, QCUDA_DATA_NONE, buf, 8), EINVAL,
	      "data_len with QCUDA_DATA_NONE");

	{
		uint64_t d = raw_malloc(4096);
		unsigned char page[4096];

		qt_check(d != 0, "raw MALLOC");
		ERRNO(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d, 0, 4096, QCUDA_DATA_TO_DEVICE, bad, 4096), EFAULT,
		      "HTOD from an unmapped address");
		ERRNO(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, d, 4096, QCUDA_DATA_FROM_DEVICE, bad, 4096), EFAULT,
		      "DTOH to an unmapped address");
		ERRNO(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, d, 4096, QCUDA_DATA_FROM_DEVICE, (void *)garbage, 4096),
		      EFAULT, "DTOH into read-only program text");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d, 0, 8, QCUDA_DATA_TO_DEVICE, page, 16),
			"HTOD with more data than size");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d + 4000, 0, 200, QCUDA_DATA_TO_DEVICE, page, 200),
			"HTOD past the allocation");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d - 8, 0, 16, QCUDA_DATA_TO_DEVICE, page, 16),
			"HTOD before the allocation");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, d + 4095, 2, QCUDA_DATA_FROM_DEVICE, page, 2),
			"DTOH past the allocation");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, 0x7000deadbeefull, 16, QCUDA_DATA_FROM_DEVICE, page, 16),
			"DTOH from a forged pointer");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, d, 0x7000deadbeefull, 16, QCUDA_DATA_NONE, NULL, 0),
			"DTOD from a forged pointer");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, d + 1, d, 4096, QCUDA_DATA_NONE, NULL, 0),
			"DTOD past the allocation");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, d, d, 1ull << 63, QCUDA_DATA_NONE, NULL, 0),
			"DTOD of 2^63 bytes");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, d + 4096, d, ~0ull - 4095, QCUDA_DATA_NONE, NULL, 0),
			"DTOD with a wrapping size");
		{
			struct qcuda_args_memset m;
			memset(&m, 0, sizeof(m));
			m.dst = d + 1;
			m.size = 4096;
			REFUSED(call(QCUDA_CMD_MEMSET, &m, sizeof(m), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"MEMSET past the allocation");
			m.dst = 0x1000;
			m.size = 1;
			REFUSED(call(QCUDA_CMD_MEMSET, &m, sizeof(m), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"MEMSET at a forged pointer");
		}
		REFUSED(call(QCUDA_CMD_MALLOC, buf, 4, NULL, 0, QCUDA_DATA_NONE, NULL, 0),
			"MALLOC with 4 argument bytes");
		REFUSED(call(QCUDA_CMD_MEMCPY_HTOD, buf, 8, NULL, 0, QCUDA_DATA_TO_DEVICE, page, 8),
			"HTOD with 8 argument bytes");
		{
			struct qcuda_args_malloc a = { 1ull << 62 };
			struct reply r = call(QCUDA_CMD_MALLOC, &a, sizeof(a), NULL, 0, QCUDA_DATA_NONE, NULL, 0);
			qt_check(r.err == 0 && r.status == cudaErrorMemoryAllocation,
				 "MALLOC of 2^62 bytes: cudaErrorMemoryAllocation");
		}
		{
			struct qcuda_args_ptr p = { d + 16 };
			REFUSED(call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"FREE inside an allocation");
			p.ptr = 0x123456789ull;
			REFUSED(call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"FREE of a forged pointer");
			p.ptr = d;
			qt_check(!refused(call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0)),
				 "FREE");
			REFUSED(call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0), "FREE twice");
			REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, d, 0, 16, QCUDA_DATA_TO_DEVICE, page, 16),
				"HTOD into freed memory");
			REFUSED(call(QCUDA_CMD_HOST_UNMAP, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"HOST_UNMAP of a device allocation");
		}
	}

	/* Handles that were never handed out. */
	{
		static const uint64_t forged[] = { 1, 3, 4, 0x1234, 0xffffffffull, 1ull << 40, ~0ull };
		int bad_ones = 0;

		for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
			uint64_t h = forged[i];
			struct qcuda_args_stream_wait_event w = { h, h, 0, 0 };
			struct qcuda_args_event_record er = { h, 0 };
			struct qcuda_args_event_elapsed el = { h, h };
			struct qcuda_out_event_elapsed eo;
			bad_ones += !refused(raw_handle(QCUDA_CMD_STREAM_DESTROY, h));
			bad_ones += !refused(raw_handle(QCUDA_CMD_STREAM_SYNC, h));
			bad_ones += !refused(raw_handle(QCUDA_CMD_STREAM_QUERY, h));
			bad_ones += !refused(raw_handle(QCUDA_CMD_EVENT_DESTROY, h));
			bad_ones += !refused(raw_handle(QCUDA_CMD_EVENT_SYNC, h));
			bad_ones += !refused(raw_handle(QCUDA_CMD_EVENT_QUERY, h));
			bad_ones += !refused(
				call(QCUDA_CMD_STREAM_WAIT_EVENT, &w, sizeof(w), NULL, 0, QCUDA_DATA_NONE, NULL, 0));
			bad_ones += !refused(
				call(QCUDA_CMD_EVENT_RECORD, &er, sizeof(er), NULL, 0, QCUDA_DATA_NONE, NULL, 0));
			bad_ones += !refused(call(QCUDA_CMD_EVENT_ELAPSED, &el, sizeof(el), &eo, sizeof(eo),
						  QCUDA_DATA_NONE, NULL, 0));
			bad_ones += !refused(raw_handle(QCUDA_CMD_HOST_UNMAP, h));
		}
		qt_check(bad_ones == 0, "forged stream/event handles and device pointers: every use refused");
	}
	{
		struct qcuda_args_device dv = { 9999, 0 };
		struct qcuda_out_device_props props;
		REFUSED(call(QCUDA_CMD_DEVICE_PROPS, &dv, sizeof(dv), &props, sizeof(props), QCUDA_DATA_NONE, NULL, 0),
			"DEVICE_PROPS of device 9999");
		REFUSED(call(QCUDA_CMD_SET_DEVICE, &dv, sizeof(dv), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
			"SET_DEVICE 9999");
		struct qcuda_args_stream_create sc = { 0x12345, 0 };
		struct reply r = call(QCUDA_CMD_STREAM_CREATE, &sc, sizeof(sc), NULL, 0, QCUDA_DATA_NONE, NULL, 0);
		if (!refused(r))
			raw_handle(QCUDA_CMD_STREAM_DESTROY, r.value);
		qt_check(refused(r), "STREAM_CREATE with flags 0x12345: refused");
	}

	/* Host memory ioctls and HOST_MAP (checked by the driver). */
	{
		struct qcuda_host_alloc ha;
		struct qcuda_host_free hf = { 0xdead000 };
		struct qcuda_host_unregister hu = { (uintptr_t)buf };
		struct qcuda_gpa g;
		struct qcuda_args_host_map hm = { 0x1000, 4096 };

		memset(&ha, 0, sizeof(ha));
		qt_check(ioctl(qfd, QCUDA_IOC_HOST_ALLOC, &ha) < 0 && errno == EINVAL, "HOST_ALLOC of 0 bytes: EINVAL");
		ha.size = 4096;
		ha.flags = 0x80;
		qt_check(ioctl(qfd, QCUDA_IOC_HOST_ALLOC, &ha) < 0 && errno == EINVAL,
			 "HOST_ALLOC with flag 0x80: EINVAL");
		ha.flags = QCUDA_HOST_CONTIGUOUS;
		ha.size = 64 << 20;
		qt_check(ioctl(qfd, QCUDA_IOC_HOST_ALLOC, &ha) < 0 && errno == ENOMEM,
			 "HOST_ALLOC contiguous 64 MiB: ENOMEM");
		qt_check(ioctl(qfd, QCUDA_IOC_HOST_FREE, &hf) < 0 && errno == EINVAL,
			 "HOST_FREE of an unknown token: EINVAL");
		qt_check(ioctl(qfd, QCUDA_IOC_HOST_UNREGISTER, &hu) < 0 && errno == EINVAL,
			 "HOST_UNREGISTER of unregistered memory: EINVAL");
		memset(&g, 0, sizeof(g));
		g.addr = (uintptr_t)buf;
		g.size = 16;
		qt_check(ioctl(qfd, QCUDA_IOC_GPA, &g) < 0 && errno == EINVAL, "GPA of unregistered memory: EINVAL");
		qt_check(mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, qfd, 0x7ff000) == MAP_FAILED,
			 "mmap at an unknown offset fails");
		ERRNO(call(QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0), EINVAL,
		      "HOST_MAP of guest memory this process does not own");
		hm.gpa = 0;
		hm.size = 1ull << 40;
		ERRNO(call(QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0), EINVAL,
		      "HOST_MAP of all guest memory");
		/* A real allocation: mapped, then freed while mapped. */
		memset(&ha, 0, sizeof(ha));
		ha.size = 8192;
		ha.flags = QCUDA_HOST_CONTIGUOUS;
		if (qt_check(ioctl(qfd, QCUDA_IOC_HOST_ALLOC, &ha) == 0 && ha.gpa != 0,
			     "HOST_ALLOC contiguous 8 KiB")) {
			struct reply r;
			hm.gpa = ha.gpa + 4096;
			hm.size = 8192;
			ERRNO(call(QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0), EINVAL,
			      "HOST_MAP past the end of an allocation");
			hm.gpa = ha.gpa;
			r = call(QCUDA_CMD_HOST_MAP, &hm, sizeof(hm), NULL, 0, QCUDA_DATA_NONE, NULL, 0);
			qt_check(!refused(r) && r.value != 0, "HOST_MAP of an own allocation");
			hf.mmap_offset = ha.mmap_offset;
			qt_check(ioctl(qfd, QCUDA_IOC_HOST_FREE, &hf) < 0 && errno == EBUSY,
				 "HOST_FREE while mapped: EBUSY");
			qt_check(!refused(raw_handle(QCUDA_CMD_HOST_UNMAP, r.value)), "HOST_UNMAP");
			REFUSED(raw_handle(QCUDA_CMD_HOST_UNMAP, r.value), "HOST_UNMAP twice");
			qt_check(ioctl(qfd, QCUDA_IOC_HOST_FREE, &hf) == 0, "HOST_FREE after HOST_UNMAP");
		}
	}
	qt_check(alive(), "raw session still works after the garbage");
}

/* Seeded random calls: nothing may crash, and the session must survive. */
static void fuzz(void)
{
	uint64_t x = 0x5eed;
	unsigned char args[160], out[128], data[4096];
	int answered = 0;
	const int N = 3000;

	for (int i = 0; i < N; i++) {
		uint32_t cmd, alen, olen, dir;
		uint64_t dlen;

		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		cmd = QCUDA_CMD_HELLO + (uint32_t)(x % 34);
		if (cmd == QCUDA_CMD_DEVICE_RESET)
			continue; /* would free what other checks use; tested elsewhere */
		alen = (uint32_t)((x >> 8) % sizeof(args));
		olen = (uint32_t)((x >> 16) % sizeof(out));
		dir = (uint32_t)((x >> 24) % 3);
		dlen = dir ? (x >> 32) % sizeof(data) : 0;
		for (uint32_t j = 0; j < alen; j++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			/* Mostly small numbers and pointers near earlier results. */
			args[j] = (unsigned char)(j % 8 < 3 ? x : (j % 8 == 7 ? 0 : x % 3));
		}
		if (cmd == QCUDA_CMD_MALLOC && alen >= 8)
			memset(args + 2, 0, 6); /* < 64 KiB: a fuzzer, not a memory hog */
		struct reply r = call(cmd, args, alen, out, olen, dir, data, dlen);
		answered += r.err == 0;
		qt_quiet(r.err == 0 || r.err == EINVAL || r.err == EFAULT, "fuzz call %d (command %u): %s", i, cmd,
			 strerror(r.err));
	}
	qt_check(answered > N / 4, "fuzz: %d seeded random calls", N);
	qt_check(alive(), "raw session still works after the fuzz");
}

/* ---------------------------------------------------------------- part 2 */

struct published {
	uint64_t dev, stream, event, mapped;
};

static int run_owner(int wfd, int rfd)
{
	enum { SZ = 64 << 10 };
	unsigned char *h = (unsigned char *)malloc(SZ), *g = (unsigned char *)malloc(SZ);
	struct published pub;
	void *d = NULL, *pin = NULL, *dp = NULL;
	cudaStream_t s;
	cudaEvent_t e;
	char c;
	bool ok = true;

	qt_fill(h, SZ, 31337);
	ok &= cudaMalloc(&d, SZ) == cudaSuccess && cudaMemcpy(d, h, SZ, cudaMemcpyHostToDevice) == cudaSuccess;
	ok &= cudaStreamCreate(&s) == cudaSuccess && cudaEventCreate(&e) == cudaSuccess;
	ok &= cudaHostAlloc(&pin, 4096, cudaHostAllocMapped) == cudaSuccess;
	ok &= cudaHostGetDevicePointer(&dp, pin, 0) == cudaSuccess;
	if (pin)
		memset(pin, 0x77, 4096);
	pub.dev = (uintptr_t)d;
	pub.stream = (uintptr_t)s;
	pub.event = (uintptr_t)e;
	pub.mapped = (uintptr_t)dp;
	if (write(wfd, &pub, sizeof(pub)) != sizeof(pub) || read(rfd, &c, 1) != 1)
		return 2;
	/* The other process has done its worst. */
	memset(g, 0, SZ);
	ok &= cudaMemcpy(g, d, SZ, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(g, h, SZ);
	ok &= cudaEventRecord(e, s) == cudaSuccess && cudaStreamSynchronize(s) == cudaSuccess;
	ok &= cudaEventQuery(e) == cudaSuccess;
	ok &= pin && qt_not_byte(pin, 0x77, 4096) < 0;
	ok &= cudaStreamDestroy(s) == cudaSuccess && cudaEventDestroy(e) == cudaSuccess;
	ok &= cudaFree(d) == cudaSuccess && cudaFreeHost(pin) == cudaSuccess;
	return ok ? 0 : 1;
}

static void other_process(void)
{
	int to_b[2], to_a[2], status = -1;
	struct published pub;
	pid_t a;
	unsigned char buf[4096];

	fflush(stdout);
	if (pipe(to_b) || pipe(to_a))
		return;
	a = fork();
	if (a == 0) {
		/* A fresh process: its own open file, its own session. */
		close(qfd);
		_exit(run_owner(to_b[1], to_a[0]));
	}
	if (!qt_check(read(to_b[0], &pub, sizeof(pub)) == sizeof(pub) && pub.dev && pub.stream && pub.event,
		      "process A published a device pointer, a stream, an event and a mapped pointer")) {
		kill(a, SIGKILL);
		waitpid(a, &status, 0);
		return;
	}

	/* Through the library: this process's tables do not know A's pointers,
	 * and the backend does not know A's handles in this session. */
	void *d = (void *)(uintptr_t)pub.dev;
	cudaStream_t s = (cudaStream_t)(uintptr_t)pub.stream;
	cudaEvent_t e = (cudaEvent_t)(uintptr_t)pub.event;
	EXPECT(cudaMemcpy(buf, d, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(d, buf, 16, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
	EXPECT(cudaMemset(d, 0, 16), cudaErrorInvalidValue);
	EXPECT(cudaFree(d), cudaErrorInvalidValue);
	EXPECT(cudaMemcpy(buf, (void *)(uintptr_t)pub.mapped, 16, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
	qt_check(cudaStreamSynchronize(s) != cudaSuccess, "cudaStreamSynchronize(A's stream) fails");
	qt_check(cudaStreamDestroy(s) != cudaSuccess, "cudaStreamDestroy(A's stream) fails");
	qt_check(cudaEventQuery(e) != cudaSuccess, "cudaEventQuery(A's event) fails");
	qt_check(cudaEventRecord(e, 0) != cudaSuccess, "cudaEventRecord(A's event) fails");
	qt_check(cudaEventDestroy(e) != cudaSuccess, "cudaEventDestroy(A's event) fails");
	qt_check(cudaMemcpyAsync(buf, buf + 2048, 16, cudaMemcpyHostToHost, 0) == cudaSuccess,
		 "this process's own work is unaffected");
	cudaGetLastError();

	/* Raw, bypassing the library's checks, in a session of its own that
	 * has created nothing else: the backend must refuse. */
	int main_fd = qfd;
	qfd = open("/dev/qcuda0", O_RDWR | O_CLOEXEC);
	{
		uint64_t own = raw_malloc(4096);
		qt_check(own && (own + 4096 <= pub.dev || own >= pub.dev + (64 << 10)),
			 "an allocation of this session is distinct from A's");
		struct qcuda_args_ptr p = { pub.dev };
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, pub.dev, 16, QCUDA_DATA_FROM_DEVICE, buf, 16),
			"raw DTOH from A's memory");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, pub.dev, 0, 16, QCUDA_DATA_TO_DEVICE, buf, 16),
			"raw HTOD into A's memory");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, own, pub.dev, 16, QCUDA_DATA_NONE, NULL, 0),
			"raw DTOD from A's memory");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOD, pub.dev, own, 16, QCUDA_DATA_NONE, NULL, 0),
			"raw DTOD into A's memory");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, pub.mapped, 16, QCUDA_DATA_FROM_DEVICE, buf, 16),
			"raw DTOH from A's mapped memory");
		REFUSED(raw_copy(QCUDA_CMD_MEMCPY_HTOD, pub.mapped, 0, 16, QCUDA_DATA_TO_DEVICE, buf, 16),
			"raw HTOD into A's mapped memory");
		{
			struct qcuda_args_memset m;
			memset(&m, 0, sizeof(m));
			m.dst = pub.dev;
			m.size = 16;
			REFUSED(call(QCUDA_CMD_MEMSET, &m, sizeof(m), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"raw MEMSET of A's memory");
		}
		REFUSED(call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
			"raw FREE of A's memory");
		REFUSED(raw_handle(QCUDA_CMD_HOST_UNMAP, pub.mapped), "raw HOST_UNMAP of A's mapping");
		REFUSED(raw_handle(QCUDA_CMD_STREAM_SYNC, pub.stream), "raw STREAM_SYNC of A's stream");
		REFUSED(raw_handle(QCUDA_CMD_STREAM_DESTROY, pub.stream), "raw STREAM_DESTROY of A's stream");
		REFUSED(raw_handle(QCUDA_CMD_EVENT_DESTROY, pub.event), "raw EVENT_DESTROY of A's event");
		{
			struct qcuda_args_event_record er = { pub.event, 0 };
			REFUSED(call(QCUDA_CMD_EVENT_RECORD, &er, sizeof(er), NULL, 0, QCUDA_DATA_NONE, NULL, 0),
				"raw EVENT_RECORD of A's event");
		}
		/* Neighbours of A's handles and pointer. */
		int accepted = 0;
		for (int k = -3; k <= 3; k++) {
			accepted += !refused(raw_handle(QCUDA_CMD_STREAM_QUERY, pub.stream + k)) && pub.stream + k > 2;
			accepted += !refused(raw_handle(QCUDA_CMD_EVENT_QUERY, pub.event + k));
			accepted += !refused(raw_copy(QCUDA_CMD_MEMCPY_DTOH, 0, pub.dev + k * 4096, 16,
						      QCUDA_DATA_FROM_DEVICE, buf, 16));
		}
		qt_check(accepted == 0, "A's neighbouring handles and pointers: refused");
		p.ptr = own;
		call(QCUDA_CMD_FREE, &p, sizeof(p), NULL, 0, QCUDA_DATA_NONE, NULL, 0);
	}
	close(qfd);
	qfd = main_fd;

	if (write(to_a[1], "x", 1) != 1)
		kill(a, SIGKILL);
	waitpid(a, &status, 0);
	qt_check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		 "process A's memory, mapping, stream and event are intact and usable");
}

/* Forged and stale handles through the library. */
static void forged_handles(void)
{
	cudaStream_t s;
	cudaEvent_t e;
	float ms;

	EXPECT(cudaStreamSynchronize((cudaStream_t)0x12345), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamQuery((cudaStream_t)0x12345), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventRecord((cudaEvent_t)0x999, 0), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventElapsedTime(&ms, (cudaEvent_t)0x999, (cudaEvent_t)0x998), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
	EXPECT(cudaMemsetAsync(NULL, 0, 0, s), cudaSuccess); /* nothing to do */
	EXPECT(cudaEventCreate(&e), cudaSuccess);
	EXPECT(cudaEventDestroy(e), cudaSuccess);
	EXPECT(cudaEventQuery(e), cudaErrorInvalidResourceHandle);
	EXPECT(cudaEventDestroy(e), cudaErrorInvalidResourceHandle);
	EXPECT(cudaStreamWaitEvent(0, e, 0), cudaErrorInvalidResourceHandle);
	{
		char h[16];
		void *d = NULL;
		EXPECT(cudaMalloc(&d, 16), cudaSuccess);
		EXPECT(cudaMemcpyAsync(d, h, 16, cudaMemcpyHostToDevice, (cudaStream_t)0x4242),
		       cudaErrorInvalidResourceHandle);
		EXPECT(cudaFree(d), cudaSuccess);
	}
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	cudaGetLastError();
}

int main(void)
{
	qt_begin("hostile");
	if (!qt_on_qcuda()) {
		printf("SKIP: hostile: no /dev/qcuda0 (this program attacks qcuda's device)\n");
		return 0;
	}
	qfd = open("/dev/qcuda0", O_RDWR | O_CLOEXEC);
	if (!qt_check(qfd >= 0, "open /dev/qcuda0"))
		return qt_end();
	garbage();
	fuzz();
	other_process();
	forged_handles();
	close(qfd);
	return qt_end();
}
