// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: operations. An op is split into chunks, one request each: pinned
 * (or held) data, submitted to its session's own queue or round robin over
 * the others, completed by the queues' interrupt callback and reaped by the
 * caller. See qcuda_drv.h for lifetimes, concurrency and own queues.
 */
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/slab.h>
#include <linux/virtio_ring.h>

#include "qcuda_drv.h"

static void qcuda_chunk_unpin(struct qcuda_op *op, struct qcuda_chunk *c)
{
	if (c->hm) {
		/* Driver pages (no mapping, not on the LRU): nothing to dirty. */
		qcuda_hostmem_put(c->hm);
		c->hm = NULL;
	}
	if (c->npages) {
		if (op->dir == QCUDA_DATA_FROM_DEVICE)
			unpin_user_pages_dirty_lock(c->pages, c->npages, true);
		else
			unpin_user_pages(c->pages, c->npages);
		c->npages = 0;
	}
	if (c->pinned) {
		qcuda_pin_put(op->qf->proc, c->pinned);
		c->pinned = 0;
	}
	sg_free_table(&c->sgt);
}

static void qcuda_op_free(struct qcuda_op *op)
{
	struct qcuda_file *qf = op->qf;
	struct qcuda_chunk *c = &op->slot[0];
	unsigned int i;

	for (i = 0; i < op->nslots; i++) {
		qcuda_chunk_unpin(op, &op->slot[i]);
		kvfree(op->slot[i].many);
		kfree(op->slot[i].out);
	}
	/* A SESSION_OPEN whose caller was killed: the file adopts the session
	 * with the queue it was opened on (or, if another caller opened one
	 * meanwhile, closes it there). One that opened nothing (or whose
	 * caller took the session: then op->queue is QCUDA_QUEUE_ANY) gives
	 * its queue back.
	 */
	if (op->cmd == QCUDA_CMD_SESSION_OPEN && !op->reaped &&
	    completion_done(&c->done) && !c->error &&
	    c->used_len >= sizeof(c->resp) &&
	    !qcuda_st_err(le32_to_cpu(c->resp.status)) && c->resp.value)
		qcuda_session_set(qf, le64_to_cpu(c->resp.value), op->queue);
	else if (op->cmd == QCUDA_CMD_SESSION_OPEN && op->queue != QCUDA_QUEUE_ANY)
		qcuda_queue_release(qf, op->queue);
	/* A session's own queue is free once its SESSION_CLOSE has been
	 * answered, or never went in (the device is gone): not before, so
	 * that no two live sessions ever share it.
	 */
	if (op->cmd == QCUDA_CMD_SESSION_CLOSE && op->queue != QCUDA_QUEUE_ANY)
		qcuda_queue_release(qf, op->queue);
	kfree(op->args);
	kfree(op->out);
	kfree(op);
	qcuda_file_put(qf);
}

static void qcuda_op_free_work(struct work_struct *work)
{
	qcuda_op_free(container_of(work, struct qcuda_op, free_work));
}

/* The caller's reference; process context. */
void qcuda_op_put(struct qcuda_op *op)
{
	if (refcount_dec_and_test(&op->ref))
		qcuda_op_free(op);
}

/* A chunk's device reference; interrupt context or under a queue lock. */
void qcuda_op_put_dev(struct qcuda_op *op)
{
	if (refcount_dec_and_test(&op->ref))
		queue_work(qcuda_wq, &op->free_work);
}

struct qcuda_op *qcuda_op_alloc(struct qcuda_file *qf, u32 cmd,
				u32 args_len, u32 out_len, u32 dir,
				u64 data, u64 data_len)
{
	u64 nchunks = data_len ? DIV_ROUND_UP_ULL(data_len, QCUDA_CHUNK) : 1;
	unsigned int nslots = min_t(u64, nchunks, QCUDA_WINDOW);
	struct qcuda_op *op;
	unsigned int i;

	op = kzalloc(struct_size(op, slot, nslots), GFP_KERNEL);
	if (!op)
		return NULL;
	refcount_set(&op->ref, 1);
	refcount_inc(&qf->ref);
	op->qf = qf;
	INIT_WORK(&op->free_work, qcuda_op_free_work);
	op->nslots = nslots;
	for (i = 0; i < nslots; i++) {
		op->slot[i].op = op;
		init_completion(&op->slot[i].done);
	}
	op->cmd = cmd;
	op->queue = QCUDA_QUEUE_ANY;
	if (cmd >= QCUDA_CMD_SESSION_CLOSE) {
		/* A session's request goes on its own queue, if it has one
		 * (set before the session: qcuda_session_set()).
		 */
		op->session = smp_load_acquire(&qf->session);
		if (op->session)
			op->queue = READ_ONCE(qf->queue);
	}
	op->args_len = args_len;
	op->out_len = out_len;
	op->dir = dir;
	op->data = data;
	op->data_len = data_len;
	op->nchunks = nchunks;
	if (args_len)
		op->args = kmalloc(args_len, GFP_KERNEL);
	if (out_len)
		op->out = kzalloc(out_len, GFP_KERNEL);
	if ((args_len && !op->args) || (out_len && !op->out)) {
		qcuda_op_put(op);
		return NULL;
	}
	return op;
}

/* Completes every used buffer of q (q->lock held). */
static void qcuda_vq_reap(struct qcuda_queue *q)
{
	struct qcuda_chunk *c;
	unsigned int len;

	while ((c = virtqueue_get_buf(q->vq, &len)) != NULL) {
		c->used_len = len;
		complete(&c->done);
		qcuda_reserve_put(c->op->qf->qd, c);
		qcuda_slot_put(c->op->qf);
		qcuda_op_put_dev(c->op);
	}
}

/* Interrupt callback of one request queue: complete every used buffer. */
void qcuda_vq_done(struct virtqueue *vq)
{
	struct qcuda_dev *qd = vq->vdev->priv;
	struct qcuda_queue *q = &qd->queues[vq->index];
	unsigned long flags;

	spin_lock_irqsave(&q->lock, flags);
	do {
		virtqueue_disable_cb(vq);
		qcuda_vq_reap(q);
	} while (!virtqueue_enable_cb(vq));
	spin_unlock_irqrestore(&q->lock, flags);
	if (wq_has_sleeper(&q->space_wq))
		wake_up(&q->space_wq);
}

/*
 * Whether a session takes a queue of its own when one is free. Read at each
 * SESSION_OPEN; writable at run time (/sys/module/qcuda/parameters/
 * own_queues), to compare, or for a backend that would mishandle the flag.
 */
static bool own_queues = true;
module_param(own_queues, bool, 0644);
MODULE_PARM_DESC(own_queues, "give a session of each process a request queue of its own while one is free");

/*
 * The next queue in turn (round robin) for a request with no queue of its
 * own. Queues that sessions own are skipped: no other session's request may
 * go there. Queue 0 never is. qcuda_submit() checks again under the lock.
 */
u32 qcuda_next_queue(struct qcuda_dev *qd)
{
	u32 i, qi;

	for (i = 0; i < qd->num_queues; i++) {
		qi = (u32)atomic_inc_return(&qd->next_queue) % qd->num_queues;
		if (!READ_ONCE(qd->queues[qi].owned))
			return qi;
	}
	return 0;
}

/*
 * A queue of its own for a session of qf about to be opened: the lowest
 * free one of 1..num_queues-1, marked taken, or QCUDA_QUEUE_ANY if none is
 * (queue 0 stays everyone's: NOPs, and the sessions that find no queue
 * free), or if qf's process owns one already: one a process, so that a
 * process with a few files cannot take them all and leave the others queue
 * 0 to share with it. The mark is set under the queue's lock, under which
 * every submission checks it, so once this returns no request of another
 * session goes in there until qcuda_queue_release().
 */
u32 qcuda_queue_claim(struct qcuda_file *qf)
{
	struct qcuda_dev *qd = qf->qd;
	struct qcuda_queue *q;
	bool got;
	u32 i;

	if (!READ_ONCE(own_queues) || !qd->own_slots)
		return QCUDA_QUEUE_ANY;
	if (atomic_cmpxchg(&qf->proc->owns, 0, 1))
		return QCUDA_QUEUE_ANY;
	for (i = 1; i < qd->num_queues; i++) {
		q = &qd->queues[i];
		if (READ_ONCE(q->owned))
			continue;
		spin_lock_irq(&q->lock);
		got = !q->owned;
		WRITE_ONCE(q->owned, true);
		spin_unlock_irq(&q->lock);
		if (got)
			return i;
	}
	atomic_set(&qf->proc->owns, 0);
	return QCUDA_QUEUE_ANY;
}

/* Queue qi, the own queue of a session of qf, is free again (see
 * qcuda_op_free()); so is its process's claim.
 */
void qcuda_queue_release(struct qcuda_file *qf, u32 qi)
{
	struct qcuda_queue *q = &qf->qd->queues[qi];
	unsigned long flags;

	spin_lock_irqsave(&q->lock, flags);
	WRITE_ONCE(q->owned, false);
	spin_unlock_irqrestore(&q->lock, flags);
	atomic_set(&qf->proc->owns, 0);
}

/* Sleeps a tick before a retry (killably, where the caller can be killed). */
static void qcuda_nap(bool killable)
{
	if (killable)
		schedule_timeout_killable(1);
	else
		schedule_timeout_uninterruptible(1);
}

/*
 * A chain longer than the ring can only go in through an indirect table,
 * which virtio_ring allocates atomically, under the queue lock: for a chunk
 * of scattered pages an order-5 block, which can fail for a long time while
 * memory is fragmented (retrying alone could wait forever). Before each
 * retry, allocate a block of the table's size here, where we may sleep
 * (reclaim, compaction), and free it for the retry to take (blocks of that
 * order go straight back to the buddy lists). -ENOMEM if even that fails,
 * or after QCUDA_INDIRECT_TRIES retries, a tick apart after the first.
 * (Kernels that keep state beside each table entry allocate more than
 * this: there the block helps less, and the retries still end.)
 */
static int qcuda_indirect_room(unsigned int nsg, unsigned int *tries,
			       bool killable)
{
	void *table;

	if ((*tries)++) {
		if (*tries > QCUDA_INDIRECT_TRIES)
			return -ENOMEM;
		qcuda_nap(killable);
	}
	table = kmalloc_array(nsg, sizeof(struct vring_desc),
			      GFP_KERNEL | __GFP_NOWARN);
	if (!table)
		return -ENOMEM;
	kfree(table);
	return 0;
}

/*
 * Queue one chunk on its queue c->q and kick the device; on success the
 * device holds a reference to the op. Waits while the ring is full (for c:
 * qcuda_reserve_take()):
 * killably, or (for SESSION_CLOSE from release, which must go out) until the
 * ring has room or the device is gone. A chain longer than the ring whose
 * indirect table cannot be allocated fails with -ENOMEM
 * (qcuda_indirect_room()).
 */
static int qcuda_submit(struct qcuda_dev *qd, struct qcuda_chunk *c,
			struct scatterlist **sgs, unsigned int out_sgs,
			unsigned int in_sgs, bool killable)
{
	struct qcuda_queue *q = c->q;
	unsigned int free, n, nsg = 0, tries = 0;
	bool notify = false;
	int err;

	for (n = 0; n < out_sgs + in_sgs; n++)
		nsg += sg_nents(sgs[n]);
	down_read(&qd->vq_sem);
	for (;;) {
		spin_lock_irq(&q->lock);
		if (unlikely(q->owned && c->op->queue == QCUDA_QUEUE_ANY &&
			     c->op->cmd != QCUDA_CMD_NOP)) {
			/* A session took this queue for its own since it was
			 * chosen; queue 0 is nobody's. (A NOP is no session's
			 * request: it goes where it was sent.)
			 */
			spin_unlock_irq(&q->lock);
			q = c->q = &qd->queues[0];
			continue;
		}
		free = 0;
		if (qd->dead) {
			err = -ENODEV;
		} else if (!qcuda_reserve_take(q, c)) {
			/* Only the shared queue's reserve is left: wait. */
			err = -ENOSPC;
		} else {
			/* No warning: a failed table allocation is handled. */
			err = virtqueue_add_sgs(q->vq, sgs, out_sgs, in_sgs, c,
						GFP_ATOMIC | __GFP_NOWARN);
			if (!err) {
				refcount_inc(&c->op->ref);
				notify = virtqueue_kick_prepare(q->vq);
			} else {
				free = q->vq->num_free;
				qcuda_reserve_put(qd, c);
			}
		}
		spin_unlock_irq(&q->lock);
		if (err != -ENOSPC)
			break;
		if (killable && fatal_signal_pending(current)) {
			err = -EINTR;
			break;
		}
		if (free && nsg > virtqueue_get_vring_size(q->vq)) {
			/* Room in the ring: the atomic allocation of the
			 * indirect table failed, and the chain can never go
			 * in direct.
			 */
			err = qcuda_indirect_room(nsg, &tries, killable);
			if (err) {
				dev_warn_ratelimited(&qd->vdev->dev,
						     "no memory for the indirect table of a %u-descriptor request\n",
						     nsg);
				break;
			}
		} else if (free) {
			/* Room in the ring: the atomic allocation of the
			 * indirect table failed. The chain goes in direct
			 * once enough of the ring is free: retry a little
			 * later.
			 */
			qcuda_nap(killable);
		} else if (killable) {
			if (wait_event_killable(q->space_wq, READ_ONCE(qd->dead) ||
						qcuda_reserve_open(q, c)))
				err = -EINTR;
		} else {
			wait_event(q->space_wq, READ_ONCE(qd->dead) ||
				   qcuda_reserve_open(q, c));
		}
		if (err == -EINTR)
			break;
	}
	if (notify)
		virtqueue_notify(q->vq);
	up_read(&qd->vq_sem);
	return err;
}


/*
 * Pin the user pages of chunk c (data at addr), counted in the process's
 * transfer pins first (qcuda_pin_get(): -EAGAIN if reap_first and they do
 * not fit), and build its scatterlist.
 */
static int qcuda_chunk_pin(struct qcuda_op *op, struct qcuda_chunk *c, u64 addr,
			   bool reap_first)
{
	unsigned long start = addr & PAGE_MASK;
	unsigned int offset = offset_in_page(addr);
	unsigned int n = DIV_ROUND_UP(offset + c->len, PAGE_SIZE);
	unsigned int gup = op->dir == QCUDA_DATA_FROM_DEVICE ? FOLL_WRITE : 0;
	struct page **pages;
	int got, err;

	pages = qcuda_chunk_hold(op, c, start, n);
	if (!pages && n > QCUDA_FEW_PAGES && !c->many) {
		c->many = kvmalloc_array(QCUDA_CHUNK_PAGES, sizeof(*c->many),
					 GFP_KERNEL);
		if (!c->many)
			return -ENOMEM;
	}
	c->pages = n > QCUDA_FEW_PAGES ? c->many : c->few;
	if (!pages) {
		err = qcuda_pin_get(op->qf->proc, (u64)n << PAGE_SHIFT, reap_first);
		if (err)
			return err;
		c->pinned = (u64)n << PAGE_SHIFT;
	}
	while (!pages && c->npages < n) {
		got = pin_user_pages_fast(start + ((unsigned long)c->npages << PAGE_SHIFT),
					  n - c->npages, gup, c->pages + c->npages);
		if (got <= 0) {
			err = got ? got : -EFAULT;
			goto fail;
		}
		c->npages += got;
	}
	/* Physically contiguous pages become one entry. */
	err = sg_alloc_table_from_pages_segment(&c->sgt, pages ?: c->pages, n,
						offset, c->len, UINT_MAX,
						GFP_KERNEL);
	if (!err)
		return 0;
fail:
	qcuda_chunk_unpin(op, c);
	return err;
}

/* Build chunk i of op in slot c and submit it to queue qi; reap_first: see
 * qcuda_chunk_pin().
 */
int qcuda_chunk_start(struct qcuda_op *op, struct qcuda_chunk *c,
		      u64 i, u32 qi, bool killable, bool reap_first)
{
	struct qcuda_dev *qd = op->qf->qd;
	struct scatterlist *sgs[6];
	unsigned int nout = 0, nin = 0;
	u64 off = i * QCUDA_CHUNK;
	void *out = op->out;
	int err;

	c->len = op->data_len ? min_t(u64, op->data_len - off, QCUDA_CHUNK) : 0;
	c->hdr.cmd = cpu_to_le32(op->cmd);
	c->hdr.len = cpu_to_le32(op->args_len);
	c->hdr.session = cpu_to_le64(op->session);
	c->hdr.data_offset = cpu_to_le64(c->len ? off : 0);
	c->hdr.data_len = cpu_to_le64(c->len);
	c->error = 0;
	c->used_len = 0;
	reinit_completion(&c->done);

	if (i && op->out_len) {
		/* Every chunk needs the output room (the data follows it);
		 * only chunk 0's output is used.
		 */
		if (!c->out)
			c->out = kmalloc(op->out_len, GFP_KERNEL);
		if (!c->out)
			return -ENOMEM;
		out = c->out;
	}
	/* Before pinning: a caller waiting for a slot holds no pages. */
	err = qcuda_slot_get(op);
	if (err)
		return err;
	if (c->len) {
		err = qcuda_chunk_pin(op, c, op->data + off, reap_first);
		if (err) {
			qcuda_slot_put(op->qf);
			return err;
		}
	}

	sg_init_one(&c->sg_hdr, &c->hdr, sizeof(c->hdr));
	sgs[nout++] = &c->sg_hdr;
	if (op->args_len) {
		sg_init_one(&c->sg_args, op->args, op->args_len);
		sgs[nout++] = &c->sg_args;
	}
	if (c->len && op->dir == QCUDA_DATA_TO_DEVICE)
		sgs[nout++] = c->sgt.sgl;
	sg_init_one(&c->sg_resp, &c->resp, sizeof(c->resp));
	sgs[nout + nin++] = &c->sg_resp;
	if (op->out_len) {
		sg_init_one(&c->sg_out, out, op->out_len);
		sgs[nout + nin++] = &c->sg_out;
	}
	if (c->len && op->dir == QCUDA_DATA_FROM_DEVICE)
		sgs[nout + nin++] = c->sgt.sgl;

	c->q = &qd->queues[qi];
	err = qcuda_submit(qd, c, sgs, nout, nin, killable);
	if (err) {
		qcuda_slot_put(op->qf);
		qcuda_chunk_unpin(op, c);
		return err;
	}
	c->busy = true;
	return 0;
}

/*
 * How long a caller polls its queue for the answer before it sleeps (0:
 * never). A short call (a synchronize, a small copy) is answered within tens
 * of microseconds; taking the interrupt and waking the sleeper costs more
 * than that, under TCG far more. Writable at run time
 * (/sys/module/qcuda/parameters/poll_us).
 */
static unsigned int poll_us = 50;
module_param(poll_us, uint, 0644);
MODULE_PARM_DESC(poll_us, "microseconds a caller polls for its answer before sleeping (0: never)");

/*
 * Polls c's queue for up to poll_us, completing whatever it finds (anyone's:
 * a sleeper on the same queue is woken as by the interrupt). Interrupts are
 * off meanwhile (the backend honours EVENT_IDX), back on after, with what
 * came in between reaped.
 */
static void qcuda_chunk_poll(struct qcuda_op *op, struct qcuda_chunk *c)
{
	struct qcuda_dev *qd = op->qf->qd;
	struct qcuda_queue *q = c->q;
	unsigned int us = READ_ONCE(poll_us);
	unsigned long flags;
	u64 until;

	if (!us || !q || completion_done(&c->done) || !down_read_trylock(&qd->vq_sem))
		return;		/* a remove() in progress: sleep as before */
	until = ktime_get_ns() + (u64)us * NSEC_PER_USEC;
	spin_lock_irqsave(&q->lock, flags);
	virtqueue_disable_cb(q->vq);
	spin_unlock_irqrestore(&q->lock, flags);
	while (!READ_ONCE(qd->dead) && !completion_done(&c->done) && ktime_get_ns() < until) {
		spin_lock_irqsave(&q->lock, flags);
		qcuda_vq_reap(q);
		spin_unlock_irqrestore(&q->lock, flags);
		cpu_relax();
	}
	if (!READ_ONCE(qd->dead))
		qcuda_vq_done(q->vq);
	up_read(&qd->vq_sem);
}

/* Wait (killably) for chunk i in slot c, release its pages, fold in its result. */
static int qcuda_chunk_reap(struct qcuda_op *op, struct qcuda_chunk *c, u64 i)
{
	u32 status, len;

	qcuda_chunk_poll(op, c);
	if (wait_for_completion_killable(&c->done))
		return -EINTR;	/* the device's reference keeps op alive */
	c->busy = false;
	qcuda_chunk_unpin(op, c);
	if (c->error)
		return c->error;
	if (c->used_len < sizeof(c->resp))
		return -EPROTO;
	status = le32_to_cpu(c->resp.status);
	if (qcuda_st_err(status) && !qcuda_st_err(op->status))
		op->status |= status;
	else
		op->status |= status & QCUDA_ST_OUTPUT;
	if (i == 0) {
		len = le32_to_cpu(c->resp.len);
		if (len > op->out_len || c->used_len < sizeof(c->resp) + len)
			return -EPROTO;
		op->out_written = len;
		op->value = le64_to_cpu(c->resp.value);
	}
	return 0;
}

/*
 * The queue of chunk i of op: its session's own queue, whoever calls; the
 * queues round robin from queue where the caller named one (a NOP); else,
 * while sessions may own queues, queue 0: a queue claimed later must hold
 * nothing of another session's (its worker would find requests it cannot
 * serve, a parked CALLBACK_WAIT say), so a session without a queue of its
 * own never leaves queue 0. With own_queues off, round robin as before.
 */
static u32 qcuda_chunk_queue(struct qcuda_op *op, u32 queue, u64 i)
{
	struct qcuda_dev *qd = op->qf->qd;

	if (op->queue != QCUDA_QUEUE_ANY)
		return op->queue;
	if (queue != QCUDA_QUEUE_ANY)
		return (queue + i) % qd->num_queues;
	if (READ_ONCE(own_queues))
		return 0;
	return qcuda_next_queue(qd);
}

/*
 * Run op: submit its chunks (to the queues qcuda_chunk_queue() picks), and
 * wait for every chunk submitted, even after an error, so the call never
 * returns while the device still uses the caller's buffer - except on a
 * fatal signal. A chunk past the process's transfer pins first reaps the
 * op's oldest chunk in flight, if any (it would wait for its own pins).
 */
int qcuda_op_run(struct qcuda_op *op, u32 queue)
{
	u64 i, submitted = 0, reaped = 0;
	int err = 0, e;

	for (i = 0; i < op->nchunks && !err; i++) {
		struct qcuda_chunk *c = &op->slot[i % op->nslots];
		u32 qi = qcuda_chunk_queue(op, queue, i);

		if (c->busy) {		/* the window is full */
			err = qcuda_chunk_reap(op, c, reaped++);
			if (err == -EINTR)
				return err;
			if (err)
				break;
		}
		while ((err = qcuda_chunk_start(op, c, i, qi, true, submitted > reaped)) == -EAGAIN) {
			err = qcuda_chunk_reap(op, &op->slot[reaped % op->nslots], reaped);
			reaped++;
			if (err == -EINTR)
				return err;
			if (err)
				break;
		}
		if (!err)
			submitted++;
	}
	for (; reaped < submitted; reaped++) {
		e = qcuda_chunk_reap(op, &op->slot[reaped % op->nslots], reaped);
		if (e == -EINTR)
			return e;
		if (!err)
			err = e;
	}
	op->reaped = true;
	return err;
}
