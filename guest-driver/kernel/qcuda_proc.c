// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: what the files of one process share (struct qcuda_proc): its
 * request slots, its entries in the reserve of the shared queues and its
 * transfer pins; qcuda_vq.c keeps its one own queue to one. A process is
 * the thread group that opened the file, so a process cannot widen its
 * bounds by opening more files. See qcuda_drv.h ("Bounds", "Pinning").
 */
#include <linux/module.h>
#include <linux/pid.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>

#include "qcuda_drv.h"

/*
 * User memory one process's transfers may hold pinned at once, MiB: a
 * request may wait in the backend for as long as the program likes (behind
 * a host function), and its pages stay pinned meanwhile. Past it a
 * transfer waits (killably), it does not fail. Writable at run time
 * (/sys/module/qcuda/parameters/transfer_pin_mib).
 */
static unsigned int transfer_pin_mib = 1024;
module_param(transfer_pin_mib, uint, 0644);
MODULE_PARM_DESC(transfer_pin_mib, "MiB of user memory one process's transfers may hold pinned at once (more waits)");

/* The calling process's record (a file it opens holds it), or NULL. */
struct qcuda_proc *qcuda_proc_get(struct qcuda_dev *qd)
{
	struct pid *tgid = task_tgid(current);
	struct qcuda_proc *p;

	mutex_lock(&qd->procs_lock);
	list_for_each_entry(p, &qd->procs, node) {
		if (p->tgid == tgid) {
			p->files++;
			goto out;
		}
	}
	p = kzalloc(sizeof(*p), GFP_KERNEL);
	if (p) {
		/* Referenced: no other process gets this struct pid while p lives. */
		p->tgid = get_pid(tgid);
		p->files = 1;
		init_waitqueue_head(&p->slot_wq);
		init_waitqueue_head(&p->pin_wq);
		list_add(&p->node, &qd->procs);
	}
out:
	mutex_unlock(&qd->procs_lock);
	return p;
}

/* A file of p is freed (every request of it has come back). */
void qcuda_proc_put(struct qcuda_dev *qd, struct qcuda_proc *p)
{
	bool last;

	mutex_lock(&qd->procs_lock);
	last = !--p->files;
	if (last)
		list_del(&p->node);
	mutex_unlock(&qd->procs_lock);
	if (!last)
		return;
	put_pid(p->tgid);
	kfree(p);
}

/* Takes one of max places of count if one is free. */
static bool qcuda_count_try(atomic_t *count, int max)
{
	int n = atomic_read(count);

	do {
		if (n >= max)
			return false;
	} while (!atomic_try_cmpxchg(count, &n, n + 1));
	return true;
}

static bool qcuda_file_slot_try(struct qcuda_file *qf)
{
	return qcuda_count_try(&qf->inflight, READ_ONCE(qf->slots));
}

static bool qcuda_proc_slot_try(struct qcuda_file *qf)
{
	return qcuda_count_try(&qf->proc->inflight, qf->qd->proc_slots);
}

static void qcuda_file_slot_put(struct qcuda_file *qf)
{
	atomic_dec(&qf->inflight);
	if (wq_has_sleeper(&qf->slot_wq))
		wake_up(&qf->slot_wq);
}

/*
 * A slot of the file and of its process for one request of op, waiting
 * killably for each in turn (exclusive waits: a slot given back wakes one
 * caller). SESSION_CLOSE and CALLBACK_WAIT take theirs at once (see
 * qcuda_drv.h); they are counted all the same.
 */
int qcuda_slot_get(struct qcuda_op *op)
{
	struct qcuda_file *qf = op->qf;
	struct qcuda_proc *p = qf->proc;

	if (op->cmd == QCUDA_CMD_SESSION_CLOSE || op->cmd == QCUDA_CMD_CALLBACK_WAIT) {
		atomic_inc(&qf->inflight);
		atomic_inc(&p->inflight);
		return 0;
	}
	if (!qcuda_file_slot_try(qf) &&
	    wait_event_killable_exclusive(qf->slot_wq, qcuda_file_slot_try(qf)))
		return -EINTR;
	if (qcuda_proc_slot_try(qf) ||
	    !wait_event_killable_exclusive(p->slot_wq, qcuda_proc_slot_try(qf)))
		return 0;
	qcuda_file_slot_put(qf);
	/* A slot this caller was woken for goes to the next one. */
	wake_up(&p->slot_wq);
	return -EINTR;
}

/* The device gave a request back (or it never went in); any context. */
void qcuda_slot_put(struct qcuda_file *qf)
{
	struct qcuda_proc *p = qf->proc;

	atomic_dec(&p->inflight);
	if (wq_has_sleeper(&p->slot_wq))
		wake_up(&p->slot_wq);
	qcuda_file_slot_put(qf);
}

/* Requests the backend answers at once, which may always use the reserve. */
static bool qcuda_reserve_any(u32 cmd)
{
	return cmd == QCUDA_CMD_SESSION_OPEN || cmd == QCUDA_CMD_SESSION_CLOSE ||
	       cmd == QCUDA_CMD_NOP;
}

/* The count of c's process that a place in the reserve takes, and its bound. */
static atomic_t *qcuda_reserve_count(struct qcuda_chunk *c, int *max)
{
	struct qcuda_proc *p = c->op->qf->proc;

	if (c->op->cmd == QCUDA_CMD_CALLBACK_WAIT) {
		*max = QCUDA_RESERVE_WAITS;
		return &p->reserved_waits;
	}
	*max = QCUDA_RESERVE_SHARE;
	return &p->reserved;
}

/*
 * Whether c may go into q now (q->lock held): anywhere on an owned queue or
 * above a shared queue's reserve; into the reserve only if it is a request
 * the backend answers at once, or while its process has few others there
 * (c->reserve then counts it until it is reaped).
 */
bool qcuda_reserve_take(struct qcuda_queue *q, struct qcuda_chunk *c)
{
	atomic_t *count;
	int max;

	c->reserve = NULL;
	if (q->owned || q->vq->num_free > q->reserve || qcuda_reserve_any(c->op->cmd))
		return true;
	count = qcuda_reserve_count(c, &max);
	if (!qcuda_count_try(count, max))
		return false;
	c->reserve = count;
	return true;
}

/* Whether c may find room in q once it has a free entry (a waiter's
 * condition; qcuda_reserve_take() decides, under the lock).
 */
bool qcuda_reserve_open(struct qcuda_queue *q, struct qcuda_chunk *c)
{
	unsigned int free = READ_ONCE(q->vq->num_free);
	int max;

	if (!free)
		return false;
	if (READ_ONCE(q->owned) || free > q->reserve || qcuda_reserve_any(c->op->cmd))
		return true;
	return atomic_read(qcuda_reserve_count(c, &max)) < max;
}

/*
 * c, in a reserve, has come back (or did not go in): its process's place
 * there is free. Its waiters may sleep on any shared queue: wake them all.
 * Any context.
 */
void qcuda_reserve_put(struct qcuda_dev *qd, struct qcuda_chunk *c)
{
	u32 i;

	if (!c->reserve)
		return;
	atomic_dec(c->reserve);
	c->reserve = NULL;
	for (i = 0; i < qd->num_queues; i++)
		if (wq_has_sleeper(&qd->queues[i].space_wq))
			wake_up(&qd->queues[i].space_wq);
}

/* Counts bytes more in p's transfer pins if they fit under
 * transfer_pin_mib; always when nothing is pinned, so that a bound below
 * a chunk slows transfers and never stops them.
 */
static bool qcuda_pin_try(struct qcuda_proc *p, u64 bytes)
{
	u64 limit = (u64)READ_ONCE(transfer_pin_mib) << 20;
	s64 n = atomic64_read(&p->pinned);

	do {
		if (n && n + bytes > limit)
			return false;
	} while (!atomic64_try_cmpxchg(&p->pinned, &n, n + bytes));
	return true;
}

/*
 * Counts bytes a chunk is about to pin in its process's transfer pins,
 * waiting killably for room; -EAGAIN instead of waiting if reap_first (the
 * call has chunks of its own in flight: it reaps one, which unpins it,
 * then asks again; waiting here, it would wait for itself).
 */
int qcuda_pin_get(struct qcuda_proc *p, u64 bytes, bool reap_first)
{
	if (qcuda_pin_try(p, bytes))
		return 0;
	if (reap_first)
		return -EAGAIN;
	return wait_event_killable(p->pin_wq, qcuda_pin_try(p, bytes)) ? -EINTR : 0;
}

/* A chunk unpinned bytes it had counted. */
void qcuda_pin_put(struct qcuda_proc *p, u64 bytes)
{
	atomic64_sub(bytes, &p->pinned);
	if (wq_has_sleeper(&p->pin_wq))
		wake_up(&p->pin_wq);
}
