/* SPDX-License-Identifier: MIT */
/*
 * The userspace transport's virtqueues: split rings in a shared region,
 * request slots with fixed descriptors, kicks, and waiting for answers the
 * way the guest driver does (polled for QCUDA_POLL_US, then asleep on the
 * queue's call eventfd). See vhu.h. The poll is longer than the guest
 * driver's (1 ms, not 50 us): a synchronize that waits for queued kernels
 * is answered within it, and CUDA's own default spins while it waits too.
 *
 * Waiting threads take turns: the one whose turn it is sleeps in poll() on
 * the call eventfd and the socket (a backend that dies closes it), reaps
 * what was answered and wakes the others; the rest wait on a condition
 * variable. So an interrupt is never lost to another thread's read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "qc_os.h"
#include "vhu.h"

#define VRING_DESC_F_NEXT 1
#define VRING_DESC_F_WRITE 2
#define VRING_USED_F_NO_NOTIFY 1
#define PAGE 4096u
/* A slot's room: header, response, output, arguments. */
#define SLOT_RESP 64u
#define SLOT_OUT 128u
#define SLOT_ARGS (SLOT_OUT + QCUDA_MAX_OUT)
#define SLOT_BYTES (((SLOT_ARGS + QCUDA_MAX_ARGS) + PAGE - 1) / PAGE * PAGE)
#define MAX_QUEUES 2

struct vring_desc {
	uint64_t addr;
	uint32_t len;
	uint16_t flags, next;
};

struct queue {
	struct vring_desc *desc;
	uint16_t *avail; /* flags, idx, ring[N], used_event */
	uint16_t *used; /* flags, idx, then {u32 id, u32 len}[N] */
	uint16_t avail_idx, last_used;
	int kick, call;
	pthread_mutex_t lock;
	pthread_cond_t answered;
	int sleeper; /* a waiter sleeps on call */
};

static struct queue queues[MAX_QUEUES];
static unsigned int nqueues;
static struct vhu_slot slots[VHU_SLOTS];
static struct vhu_slot *free_slots[VHU_SLOTS];
static unsigned int nfree;
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_freed = PTHREAD_COND_INITIALIZER;
static int dead;
static uint64_t poll_ns = 1000000;
/* The shared-memory transport: no kick or call eventfds and no socket; the
 * backend polls the avail rings, and this says whether it still serves. */
static int (*polled_alive)(void);

void vhu_ring_use_polling(int (*alive)(void))
{
	polled_alive = alive;
}

/* Queue q's ring at va (in a shared region): three pages. */
static int start_queue(unsigned int q, uint8_t *va)
{
	struct queue *Q = &queues[q];

	Q->desc = (struct vring_desc *)va;
	Q->avail = (uint16_t *)(va + PAGE);
	Q->used = (uint16_t *)(va + 2 * PAGE);
	pthread_mutex_init(&Q->lock, NULL);
	pthread_cond_init(&Q->answered, NULL);
	if (polled_alive) /* the backend has the rings' places (qcuda_shm.h) */
		return 0;
	return vhu_events_start(q, va, &Q->kick, &Q->call);
}

int vhu_ring_start(unsigned int n)
{
	const uint64_t rings = 64u << 10;
	const uint64_t slot_room = (uint64_t)VHU_SLOTS * SLOT_BYTES;
	const char *env = getenv("QCUDA_POLL_US");
	uint8_t *va;
	uint64_t gpa;
	int e;

	if (env && *env)
		poll_ns = strtoull(env, NULL, 10) * 1000;
	nqueues = n > MAX_QUEUES ? MAX_QUEUES : n;
	e = vhu_mem_region(rings + slot_room + (uint64_t)VHU_SLOTS * VHU_STAGE, (void **)&va, &gpa);
	if (e)
		return e;
	for (unsigned int i = 0; i < VHU_SLOTS; i++) {
		uint64_t off = rings + (uint64_t)i * SLOT_BYTES;
		struct vhu_slot *s = &slots[i];

		s->hdr = (struct qcuda_req_hdr *)(va + off);
		s->resp = (struct qcuda_resp_hdr *)(va + off + SLOT_RESP);
		s->out = va + off + SLOT_OUT;
		s->args = va + off + SLOT_ARGS;
		s->gpa = gpa + off;
		s->stage = va + rings + slot_room + (uint64_t)i * VHU_STAGE;
		s->stage_gpa = gpa + rings + slot_room + (uint64_t)i * VHU_STAGE;
		free_slots[nfree++] = s;
	}
	for (unsigned int q = 0; q < nqueues; q++)
		if ((e = start_queue(q, va + q * 3 * PAGE)))
			return e;
	return 0;
}

struct vhu_slot *vhu_slot_get(void)
{
	struct vhu_slot *s;

	pthread_mutex_lock(&slot_lock);
	while (!nfree)
		pthread_cond_wait(&slot_freed, &slot_lock);
	s = free_slots[--nfree];
	pthread_mutex_unlock(&slot_lock);
	return s;
}

struct vhu_slot *vhu_slot_tryget(void)
{
	struct vhu_slot *s = NULL;

	pthread_mutex_lock(&slot_lock);
	if (nfree)
		s = free_slots[--nfree];
	pthread_mutex_unlock(&slot_lock);
	return s;
}

void vhu_slot_put(struct vhu_slot *s)
{
	pthread_mutex_lock(&slot_lock);
	free_slots[nfree++] = s;
	pthread_cond_signal(&slot_freed);
	pthread_mutex_unlock(&slot_lock);
}

static unsigned int slot_index(const struct vhu_slot *s)
{
	return (unsigned int)(s - slots);
}

int vhu_submit(unsigned int q, struct vhu_slot *s, uint32_t args_len, uint32_t out_len, const struct vhu_buf *data)
{
	struct queue *Q = &queues[q];
	unsigned int head = slot_index(s) * VHU_SLOT_DESCS, n = 0;
	struct vring_desc *d = &Q->desc[head];
	int notify;

	if (q >= nqueues)
		return -EINVAL;
	if (dead)
		return -ENODEV;
	__atomic_store_n(&s->done, 0, __ATOMIC_RELAXED);
	s->used_len = 0;
	s->q = q;
	d[n++] = (struct vring_desc){ s->gpa, sizeof(*s->hdr), 0, 0 };
	if (args_len)
		d[n++] = (struct vring_desc){ s->gpa + SLOT_ARGS, args_len, 0, 0 };
	if (data->len && data->to_device)
		d[n++] = (struct vring_desc){ data->gpa, data->len, 0, 0 };
	d[n++] = (struct vring_desc){ s->gpa + SLOT_RESP, sizeof(*s->resp), VRING_DESC_F_WRITE, 0 };
	if (out_len)
		d[n++] = (struct vring_desc){ s->gpa + SLOT_OUT, out_len, VRING_DESC_F_WRITE, 0 };
	if (data->len && !data->to_device)
		d[n++] = (struct vring_desc){ data->gpa, data->len, VRING_DESC_F_WRITE, 0 };
	for (unsigned int i = 0; i + 1 < n; i++) {
		d[i].flags |= VRING_DESC_F_NEXT;
		d[i].next = (uint16_t)(head + i + 1);
	}
	pthread_mutex_lock(&Q->lock);
	Q->avail[2 + Q->avail_idx % VHU_RING_SIZE] = (uint16_t)head;
	/* The entry (and the chain) before the index that publishes it. */
	__atomic_store_n(&Q->avail[1], ++Q->avail_idx, __ATOMIC_RELEASE);
	/* The index before reading whether the backend wants a kick. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	notify = !(__atomic_load_n(&Q->used[0], __ATOMIC_RELAXED) & VRING_USED_F_NO_NOTIFY);
	pthread_mutex_unlock(&Q->lock);
	return notify && !polled_alive ? vhu_events_kick(Q->kick) : 0;
}

/* Marks every answered slot of Q done (Q->lock held); how many. */
static unsigned int reap(struct queue *Q)
{
	uint16_t idx = __atomic_load_n(&Q->used[1], __ATOMIC_ACQUIRE);
	const uint32_t *ring = (const uint32_t *)(Q->used + 2);
	unsigned int n = 0;

	while (Q->last_used != idx) {
		unsigned int e = Q->last_used++ % VHU_RING_SIZE;
		uint32_t id = ring[2 * e], len = ring[2 * e + 1];

		/* A backend's id outside our heads is a protocol error: drop it. */
		if (id % VHU_SLOT_DESCS || id / VHU_SLOT_DESCS >= VHU_SLOTS)
			continue;
		slots[id / VHU_SLOT_DESCS].used_len = len;
		__atomic_store_n(&slots[id / VHU_SLOT_DESCS].done, 1, __ATOMIC_RELEASE);
		n++;
	}
	if (n)
		pthread_cond_broadcast(&Q->answered);
	return n;
}

static int is_done(struct vhu_slot *s)
{
	return __atomic_load_n(&s->done, __ATOMIC_ACQUIRE);
}

/* Polled transport: a short sleep, then whether the backend still serves. */
static void sleep_polled(struct queue *Q)
{
	Q->sleeper = 1;
	pthread_mutex_unlock(&Q->lock);
	qc_os_sleep_us(50);
	if (!polled_alive())
		__atomic_store_n(&dead, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&Q->lock);
	Q->sleeper = 0;
	pthread_cond_broadcast(&Q->answered);
}

/* Sleeps until Q's call eventfd or the socket wakes it (Q->lock released). */
static void sleep_on(struct queue *Q)
{
	Q->sleeper = 1;
	pthread_mutex_unlock(&Q->lock);
	if (vhu_events_sleep(Q->call))
		__atomic_store_n(&dead, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&Q->lock);
	Q->sleeper = 0;
	pthread_cond_broadcast(&Q->answered);
}

int vhu_wait(struct vhu_slot *s)
{
	struct queue *Q = &queues[s->q];
	uint64_t until = poll_ns ? qc_os_now_ns() + poll_ns : 0;

	/* Polled first: an answer within poll_ns costs no wake-up. */
	while (!is_done(s) && until && !__atomic_load_n(&dead, __ATOMIC_ACQUIRE)) {
		if (__atomic_load_n(&Q->used[1], __ATOMIC_ACQUIRE) != Q->last_used &&
		    !pthread_mutex_trylock(&Q->lock)) {
			reap(Q);
			pthread_mutex_unlock(&Q->lock);
		}
		if (qc_os_now_ns() > until)
			break;
		__builtin_ia32_pause();
	}
	if (is_done(s))
		return 0;
	pthread_mutex_lock(&Q->lock);
	reap(Q);
	while (!is_done(s) && !__atomic_load_n(&dead, __ATOMIC_ACQUIRE)) {
		if (!Q->sleeper && polled_alive)
			sleep_polled(Q);
		else if (!Q->sleeper)
			sleep_on(Q);
		else
			pthread_cond_wait(&Q->answered, &Q->lock);
		reap(Q);
	}
	pthread_mutex_unlock(&Q->lock);
	return is_done(s) ? 0 : -ENODEV;
}

int vhu_dead(void)
{
	return __atomic_load_n(&dead, __ATOMIC_ACQUIRE);
}
