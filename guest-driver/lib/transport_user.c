/* SPDX-License-Identifier: MIT */
/*
 * The userspace transport (`qcuda run`): the library is the vhost-user
 * frontend of a backend's socket, in the place of QEMU and the guest kernel
 * driver. The backend sees a VM with one process: the same checks, quota,
 * workers, own queues and ring server as for a guest. This file does what
 * the driver's ioctls do (qcuda_ioctl.h): a session opened on a queue of its
 * own, calls split into chunks and pipelined, pinned host memory; vhu.h
 * names the parts.
 *
 * Data in shared memory (the library's pinned and managed memory) is passed
 * where it lies; any other data (pageable memory) is copied through each
 * request slot's staging room, VHU_STAGE bytes a chunk, with up to
 * STAGED_WINDOW chunks in flight, as CUDA stages pageable copies.
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "qc_os.h"
#include "qcuda_proto.h"
#include "transport_ops.h"
#include "vhu.h"

/* Data in shared memory goes in chunks of this size: four times the guest
 * driver's (QCUDA_CHUNK, bounded there by the pages a chunk pins), since
 * here nothing is pinned per chunk and each request costs the backend a
 * gap on the GPU. Every command takes data chunks of any size but
 * OUTPUT_READ, whose buffer is never shared (it is staged). */
#define SHARED_CHUNK (4ull * QCUDA_CHUNK)
/* Chunks of one call in flight at once. */
#define SHARED_WINDOW 16
#define STAGED_WINDOW 8

static struct {
	unsigned int num_queues; /* what the backend serves */
	unsigned int queue; /* the session's */
	uint32_t proto_version;
	uint64_t capabilities;
	uint64_t session;
	pthread_mutex_t open_lock;
	int forked; /* this is a child of the process that connected */
} u = { .open_lock = PTHREAD_MUTEX_INITIALIZER };

/* Unused on Windows: winpthreads' pthread_atfork drops it (no fork there). */
static void __attribute__((unused)) after_fork_child(void)
{
	/* The rings and the session are the parent's (CUDA does not carry
	 * across fork either); a child that execs connects anew. */
	u.forked = 1;
}

static int negotiate(void)
{
	const uint64_t want = VHU_PF_MQ | VHU_PF_REPLY_ACK | VHU_PF_CONFIG | VHU_PF_CONFIGURE_MEM_SLOTS;
	struct __attribute__((packed)) {
		uint32_t offset, size, flags;
		struct virtio_qcuda_config c;
	} cfg = {
		.size = sizeof(struct virtio_qcuda_config),
	};
	uint64_t features, pf, nq, slots;
	int e;

	if ((e = vhu_get_u64(VHU_GET_FEATURES, &features)))
		return e;
	if (!(features & VHU_F_VERSION_1) || !(features & VHU_F_PROTOCOL_FEATURES))
		return -EPROTO;
	if ((e = vhu_get_u64(VHU_GET_PROTOCOL_FEATURES, &pf)))
		return e;
	if ((pf & (VHU_PF_CONFIG | VHU_PF_CONFIGURE_MEM_SLOTS)) != (VHU_PF_CONFIG | VHU_PF_CONFIGURE_MEM_SLOTS))
		return -EPROTO;
	if ((e = vhu_set_u64(VHU_SET_PROTOCOL_FEATURES, pf & want, -1)))
		return e;
	if (pf & VHU_PF_REPLY_ACK)
		vhu_conn_ack_on();
	if ((e = vhu_get_u64(VHU_GET_QUEUE_NUM, &nq)) || (e = vhu_get_u64(VHU_GET_MAX_MEM_SLOTS, &slots)))
		return e;
	if ((e = vhu_request(VHU_SET_OWNER, NULL, 0, -1, 0, NULL, 0)))
		return e;
	if ((e = vhu_set_u64(VHU_SET_FEATURES, VHU_F_VERSION_1 | VHU_F_PROTOCOL_FEATURES, -1)))
		return e;
	if ((e = vhu_request(VHU_GET_CONFIG, &cfg, sizeof(cfg), -1, 1, &cfg, sizeof(cfg))))
		return e;
	if (cfg.c.magic != QCUDA_MAGIC || cfg.c.num_queues == 0 || cfg.c.num_queues > nq)
		return -EPROTO;
	u.num_queues = cfg.c.num_queues;
	u.proto_version = cfg.c.proto_version;
	u.capabilities = cfg.c.capabilities;
	/* A queue of the session's own (queue 0 is everyone's), if there is one. */
	u.queue = u.num_queues > 1 ? 1 : 0;
	return 0;
}

static int ut_open(const char *path, int *fd)
{
	int e = vhu_connect(path);

	if (!e)
		e = negotiate();
	if (!e)
		e = vhu_ring_start(u.queue + 1);
	if (e)
		return e;
	pthread_atfork(NULL, NULL, after_fork_child);
	*fd = vhu_conn_fd();
	return 0;
}

/* The shared-memory transport's start (transport_shm.c): the region is
 * mapped and served, the device's config read from its header; the rest of
 * the path is this file's. */
int qt_user_start_polled(const struct virtio_qcuda_config *c)
{
	int e;

	if (c->magic != QCUDA_MAGIC || c->num_queues == 0)
		return -EPROTO;
	u.num_queues = c->num_queues;
	u.proto_version = c->proto_version;
	u.capabilities = c->capabilities;
	u.queue = u.num_queues > 1 ? 1 : 0;
	e = vhu_ring_start(u.queue + 1);
	if (!e)
		pthread_atfork(NULL, NULL, after_fork_child);
	return e;
}

static int ut_info(int fd, struct qt_info *info)
{
	info->proto_version = u.proto_version;
	info->num_queues = u.num_queues;
	info->capabilities = u.capabilities;
	info->session = __atomic_load_n(&u.session, __ATOMIC_ACQUIRE);
	return 0;
}

/* One call, its chunks pipelined: the result folded in as the guest driver
 * does (the first failing status, with QCUDA_ST_OUTPUT from any chunk;
 * value and output from chunk 0). */
struct op {
	uint32_t cmd, args_len, out_len;
	const void *args;
	void *out;
	enum qt_dir dir;
	uint8_t *data;
	uint64_t data_len, gpa; /* gpa: the data's, 0 if staged */
	uint64_t session;
	struct qt_result *res;
};

/*
 * Copies a staged chunk with streaming stores: what goes into the stage is
 * read next by the GPU, and what comes out of it is the program's to touch
 * later, if at all; ordinary stores would first read every destination line
 * into the cache (memcpy streams only above a size of the cache's order,
 * far above a chunk's).
 */
static void stage_copy(void *dst, const void *src, uint64_t n)
{
	uint8_t *d = dst;
	const uint8_t *s = src;
	uint64_t head = (16 - ((uintptr_t)d & 15)) & 15;

	if (n < (64u << 10) || head > n) {
		memcpy(dst, src, n);
		return;
	}
	memcpy(d, s, head);
	d += head, s += head, n -= head;
	for (; n >= 64; d += 64, s += 64, n -= 64) {
		__m128i a = _mm_loadu_si128((const __m128i *)s);
		__m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
		__m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
		__m128i e = _mm_loadu_si128((const __m128i *)(s + 48));

		_mm_stream_si128((__m128i *)d, a);
		_mm_stream_si128((__m128i *)(d + 16), b);
		_mm_stream_si128((__m128i *)(d + 32), c);
		_mm_stream_si128((__m128i *)(d + 48), e);
	}
	memcpy(d, s, n);
	/* Streaming stores are weakly ordered: done before the request goes out
	 * (or the caller reads its data). */
	_mm_sfence();
}

static uint64_t chunk_size(const struct op *op)
{
	return op->gpa ? SHARED_CHUNK : VHU_STAGE;
}

static int chunk_start(const struct op *op, struct vhu_slot *s, uint64_t i)
{
	uint64_t off = i * chunk_size(op);
	uint64_t len = op->data_len ? op->data_len - off : 0;
	struct vhu_buf data = { .to_device = op->dir == QT_TO_DEVICE };

	if (len > chunk_size(op))
		len = chunk_size(op);
	*s->hdr = (struct qcuda_req_hdr){
		.cmd = op->cmd,
		.len = op->args_len,
		.session = op->session,
		.data_offset = len ? off : 0,
		.data_len = len,
	};
	memcpy(s->args, op->args, op->args_len);
	data.len = (uint32_t)len;
	data.gpa = op->gpa ? op->gpa + off : s->stage_gpa;
	/* A 3D copy to the host writes rows, not the gaps between them: the
	 * stage starts as the program's bytes, so the gaps come back as they
	 * were. */
	if (len && !op->gpa && (op->dir == QT_TO_DEVICE || op->cmd == QCUDA_CMD_MEMCPY_3D_DTOH))
		stage_copy(s->stage, op->data + off, len);
	return vhu_submit(u.queue, s, op->args_len, op->out_len, &data);
}

static int chunk_reap(const struct op *op, struct vhu_slot *s, uint64_t i)
{
	uint64_t off = i * chunk_size(op);
	uint32_t status, len;
	int e = vhu_wait(s);

	if (e)
		return e;
	if (s->used_len < sizeof(*s->resp))
		return -EPROTO;
	status = s->resp->status;
	if ((status & ~QCUDA_ST_OUTPUT) && !(op->res->status & ~QCUDA_ST_OUTPUT))
		op->res->status |= status;
	else
		op->res->status |= status & QCUDA_ST_OUTPUT;
	if (i == 0) {
		len = s->resp->len;
		if (len > op->out_len || s->used_len < sizeof(*s->resp) + len)
			return -EPROTO;
		op->res->out_written = len;
		op->res->value = s->resp->value;
		if (len)
			memcpy(op->out, s->out, len);
	}
	/* The data counts in the used length only where the call succeeded. */
	if (!op->gpa && op->dir == QT_FROM_DEVICE && !(status & ~QCUDA_ST_OUTPUT)) {
		uint64_t n = op->data_len - off < VHU_STAGE ? op->data_len - off : VHU_STAGE;

		/* OUTPUT_READ says how much it wrote. */
		if (op->cmd == QCUDA_CMD_OUTPUT_READ && s->resp->value < n)
			n = s->resp->value;
		stage_copy(op->data + off, s->stage, n);
	}
	return 0;
}

/*
 * Runs op: its chunks submitted with up to a window in flight, and every one
 * submitted waited for, even after an error, so that the call never returns
 * while the backend may still use the caller's data. A thread that holds
 * slots never waits for a free one (it reaps its own first), so threads
 * cannot hold each other's slots forever.
 */
static int op_run(struct op *op)
{
	const unsigned int window = op->gpa || !op->data_len ? SHARED_WINDOW : STAGED_WINDOW;
	uint64_t n = op->data_len ? (op->data_len + chunk_size(op) - 1) / chunk_size(op) : 1;
	struct vhu_slot *ring[SHARED_WINDOW];
	uint64_t started = 0, reaped = 0;
	int err = 0, e;

	memset(op->res, 0, sizeof(*op->res));
	while (started < n && !err) {
		struct vhu_slot *s = started - reaped < window ? vhu_slot_tryget() : NULL;

		if (!s && started == reaped)
			s = vhu_slot_get();
		if (!s) {
			/* Set when started: started > reaped here. */
			// NOLINTNEXTLINE(clang-analyzer-core.uninitialized.Assign)
			struct vhu_slot *old = ring[reaped % window];

			err = chunk_reap(op, old, reaped++);
			vhu_slot_put(old);
			continue;
		}
		e = chunk_start(op, s, started);
		if (e) {
			vhu_slot_put(s);
			err = e;
			break;
		}
		ring[started++ % window] = s;
	}
	for (; reaped < started; reaped++) {
		struct vhu_slot *s = ring[reaped % window];

		e = chunk_reap(op, s, reaped);
		/* A slot of a backend that is gone may still be in its ring. */
		if (e != -ENODEV)
			vhu_slot_put(s);
		if (!err)
			err = e;
	}
	return err;
}

/* The session, opened by the first call, on the queue of its own. */
static int session_open(void)
{
	struct qcuda_args_session_open a = { .flags = u.queue ? QCUDA_SESSION_OWN_QUEUE : 0 };
	struct qt_result res;
	struct op op = {
		.cmd = QCUDA_CMD_SESSION_OPEN,
		.args = &a,
		.args_len = u.queue ? sizeof(a) : 0,
		.res = &res,
	};
	int e = 0;

	if (__atomic_load_n(&u.session, __ATOMIC_ACQUIRE))
		return 0;
	pthread_mutex_lock(&u.open_lock);
	if (!u.session) {
		e = op_run(&op);
		if (!e && (res.status & ~QCUDA_ST_OUTPUT))
			e = -EIO;
		else if (!e && !res.value)
			e = -EPROTO;
		if (!e)
			__atomic_store_n(&u.session, res.value, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&u.open_lock);
	return e;
}

static int ut_call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len,
		   enum qt_dir dir, void *data, uint64_t data_len, struct qt_result *res)
{
	struct op op = {
		.cmd = cmd,
		.args = args,
		.args_len = args_len,
		.out = out,
		.out_len = out_len,
		.dir = dir,
		.data = data,
		.data_len = dir == QT_NONE ? 0 : data_len,
		.res = res,
	};
	int e;

	if (u.forked || vhu_dead())
		return -ENODEV;
	if (cmd < QCUDA_CMD_HELLO || args_len > QCUDA_MAX_ARGS || out_len > QCUDA_MAX_OUT || dir > QT_FROM_DEVICE ||
	    (dir == QT_NONE && data_len))
		return -EINVAL;
	/* Pinned memory here is always one guest-physical range (HOST_MAP). */
	if (cmd == QCUDA_CMD_HOST_MAP_PAGES)
		return -EINVAL;
	if ((e = session_open()))
		return e;
	op.session = u.session;
	op.gpa = op.data_len ? vhu_mem_gpa(data, op.data_len) : 0;
	return op_run(&op);
}

static int ut_host_alloc(int fd, uint64_t size, int contiguous, uint64_t *token, uint64_t *gpa)
{
	int e;

	if (u.forked)
		return -ENODEV;
	if (size == 0)
		return -EINVAL;
	e = vhu_mem_alloc(size, token);
	if (!e)
		*gpa = *token;
	return e == -ENOSPC ? -ENOMEM : e;
}

static int ut_host_free(int fd, uint64_t token)
{
	return vhu_mem_free(token);
}

static void *ut_host_mmap(int fd, uint64_t token, size_t len, void *want)
{
	return vhu_mem_map(token, len, want);
}

/* Registered memory becomes shared where it lies (vhu_mem_adopt): the
 * device can map it. Where its pages are another registration's too, it
 * stays private: copies from it are staged, and it has no device pointer
 * (cudaHostGetDevicePointer says so), *gpa = 0. So does a shared mapping:
 * adopted, its pages would be this process's alone, and whoever else maps
 * them (another process of the program: NCCL's SHM transport registers a
 * /dev/shm file that two ranks map) would stop seeing its writes. */
static int ut_host_register(int fd, void *addr, uint64_t size, uint64_t *gpa)
{
	int shared = 0;
	int e = qc_os_writable_range(addr, size, &shared);

	*gpa = 0;
	if (!e && !shared && vhu_mem_adopt(addr, size, gpa))
		*gpa = 0;
	return e;
}

static int ut_host_unregister(int fd, void *addr)
{
	int e = vhu_mem_release(addr);

	return e == -EINVAL ? 0 : e; /* EINVAL: it stayed private */
}

static int ut_gpa(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	*gpa = vhu_mem_gpa(addr, size);
	return *gpa ? 0 : -EINVAL;
}

/* The socket and the shared-memory region carry the same ring protocol:
 * the two transports differ only in how the ring is reached. */
#define UT_OPS(label, opener)                                                                                     \
	{                                                                                                         \
		.name = (label), .open = (opener), .info = ut_info, .call = ut_call, .host_alloc = ut_host_alloc, \
		.host_free = ut_host_free, .host_mmap = ut_host_mmap, .host_register = ut_host_register,          \
		.host_unregister = ut_host_unregister, .gpa = ut_gpa,                                             \
	}

const struct qt_ops qt_user_ops = UT_OPS("vhost-user", ut_open);
const struct qt_ops qt_shm_ops = UT_OPS("shm", qt_shm_open);
