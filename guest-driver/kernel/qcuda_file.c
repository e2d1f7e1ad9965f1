// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: open files. Each is one backend session, opened by its first
 * CALL (on a queue of its own if one is free) and closed (SESSION_CLOSE) on
 * release; the file lives on until its last op has come back. See
 * qcuda_drv.h.
 */
#include <linux/fs.h>
#include <linux/module.h>
#include <linux/slab.h>

#include "qcuda_drv.h"

static void qcuda_file_free(struct qcuda_file *qf)
{
	struct qcuda_hostmem *hm, *th;
	struct qcuda_map *m, *tm;

	list_for_each_entry_safe(m, tm, &qf->maps, node)
		kfree(m);
	list_for_each_entry_safe(hm, th, &qf->hostmem, node) {
		list_del(&hm->node);
		hm->live = false;
		qcuda_hostmem_put(hm);
	}
	qcuda_proc_put(qf->qd, qf->proc);
	kref_put(&qf->qd->kref, qcuda_release_dev);
	kfree(qf);
}

/*
 * Send SESSION_CLOSE for session (the backend answers the session's
 * requests still in the device and frees what it held), on the session's
 * own queue if it has one (queue; else QCUDA_QUEUE_ANY), which the op gives
 * back once it has been answered. The op holds a reference to qf, so the
 * file and its host memory, which the device may use until then, stay until
 * it has come back. It takes its request slot at once and waits for ring
 * room until there is some or the device is gone. wait: from release; wait
 * (killably) for the reply, so that when close() or exit returns the
 * session's resources are free on the host.
 */
static void qcuda_session_close(struct qcuda_file *qf, u64 session, u32 queue,
				bool wait)
{
	struct qcuda_op *op;
	int err;
	u32 qi;

	op = qcuda_op_alloc(qf, QCUDA_CMD_SESSION_CLOSE, 0, 0, QCUDA_DATA_NONE, 0, 0);
	if (!op) {
		/* The session lives on in the backend: so does its hold on
		 * its queue, which stays taken.
		 */
		dev_warn(&qf->qd->vdev->dev, "cannot close session %llx: no memory\n",
			 session);
		return;
	}
	op->session = session;
	op->queue = queue;
	qi = queue != QCUDA_QUEUE_ANY ? queue : qcuda_next_queue(qf->qd);
	err = qcuda_chunk_start(op, &op->slot[0], 0, qi, false, false);
	/* If killed meanwhile, the reply alone frees the op (and the file). */
	if (!err && wait)
		wait_for_completion_killable(&op->slot[0].done);
	qcuda_op_put(op);
}

/* The last reference (the file is released and every request of it has
 * come back) frees qf.
 */
void qcuda_file_put(struct qcuda_file *qf)
{
	if (refcount_dec_and_test(&qf->ref))
		qcuda_file_free(qf);
}

/*
 * Record a session opened by SESSION_OPEN on queue (its own, or
 * QCUDA_QUEUE_ANY), which goes with it. If the file has one already (a
 * killed opener's reply came back after another caller opened one, on
 * another queue), or was released meanwhile (the opener was killed, then
 * the process exited), close this one now: release() closes only the
 * session it found.
 */
void qcuda_session_set(struct qcuda_file *qf, u64 session, u32 queue)
{
	bool keep;

	mutex_lock(&qf->lock);
	keep = !qf->session && !qf->released;
	if (keep) {
		WRITE_ONCE(qf->queue, queue);
		/* Its ring must keep room for what takes no slot. */
		if (queue != QCUDA_QUEUE_ANY)
			WRITE_ONCE(qf->slots, qf->qd->own_slots);
		/* After the queue: qcuda_op_alloc() reads the session first. */
		smp_store_release(&qf->session, session);
	}
	mutex_unlock(&qf->lock);
	if (keep) {
		dev_dbg(&qf->qd->vdev->dev, "session %llx opened on queue %d\n",
			session, queue == QCUDA_QUEUE_ANY ? -1 : (int)queue);
		return;
	}
	dev_dbg(&qf->qd->vdev->dev, "closing extra session %llx\n", session);
	qcuda_session_close(qf, session, queue, false);
}

/*
 * The session is opened by the file's first CALL, not in open(): misc_open()
 * calls qcuda_open() under the misc core's global mutex, which must not be
 * held across a round trip. Concurrent first callers wait (killably).
 * SESSION_OPEN goes on a queue of the session's own if one is free, saying
 * so (QCUDA_SESSION_OWN_QUEUE); else as before, with no arguments.
 */
int qcuda_session_open(struct qcuda_file *qf)
{
	struct qcuda_args_session_open *args;
	struct qcuda_op *op;
	u32 qi;
	int err;

	if (READ_ONCE(qf->session))
		return 0;
	if (mutex_lock_killable(&qf->open_lock))
		return -EINTR;
	err = 0;
	if (READ_ONCE(qf->session))
		goto out;
	qi = qcuda_queue_claim(qf);
	op = qcuda_op_alloc(qf, QCUDA_CMD_SESSION_OPEN,
			    qi == QCUDA_QUEUE_ANY ? 0 : sizeof(*args), 0,
			    QCUDA_DATA_NONE, 0, 0);
	if (!op) {
		if (qi != QCUDA_QUEUE_ANY)
			qcuda_queue_release(qf, qi);
		err = -ENOMEM;
		goto out;
	}
	/* From here the op gives the queue back if it opens nothing. */
	op->queue = qi;
	if (qi != QCUDA_QUEUE_ANY) {
		args = op->args;
		args->flags = cpu_to_le32(QCUDA_SESSION_OWN_QUEUE);
		args->reserved = 0;
	}
	err = qcuda_op_run(op, QCUDA_QUEUE_ANY);
	if (!err && qcuda_st_err(op->status)) {
		dev_dbg(&qf->qd->vdev->dev, "SESSION_OPEN: status %#x\n", op->status);
		err = -EIO;
	} else if (!err && !op->value) {
		err = -EPROTO;
	} else if (!err) {
		qcuda_session_set(qf, op->value, qi);
		op->queue = QCUDA_QUEUE_ANY;	/* the session's now */
	}
	/* If killed, the reply may still open a session: then the op's
	 * last reference hands it to the file, queue and all (qcuda_op_free).
	 */
	qcuda_op_put(op);
out:
	mutex_unlock(&qf->open_lock);
	return err;
}

static int qcuda_open(struct inode *inode, struct file *f)
{
	/* misc_open() set private_data to our miscdevice. */
	struct qcuda_dev *qd = container_of(f->private_data, struct qcuda_dev, misc);
	struct qcuda_file *qf;

	qf = kzalloc(sizeof(*qf), GFP_KERNEL);
	if (!qf)
		return -ENOMEM;
	/* The opener's: its files share its bounds. */
	qf->proc = qcuda_proc_get(qd);
	if (!qf->proc) {
		kfree(qf);
		return -ENOMEM;
	}
	kref_get(&qd->kref);
	qf->qd = qd;
	refcount_set(&qf->ref, 1);
	qf->queue = QCUDA_QUEUE_ANY;
	qf->slots = qd->proc_slots;
	atomic_set(&qf->inflight, 0);
	init_waitqueue_head(&qf->slot_wq);
	mutex_init(&qf->open_lock);
	mutex_init(&qf->lock);
	INIT_LIST_HEAD(&qf->hostmem);
	INIT_LIST_HEAD(&qf->maps);
	f->private_data = qf;
	return 0;
}

/*
 * The last file reference is gone, so no ioctl runs on qf and none will;
 * requests of killed callers may still be in the device. Close the session
 * now all the same (they come back answered); the ops' references keep the
 * file until the last of them has returned.
 */
static int qcuda_release(struct inode *inode, struct file *f)
{
	struct qcuda_file *qf = f->private_data;
	u64 session;
	u32 queue;

	mutex_lock(&qf->lock);
	qf->released = true;
	session = qf->session;
	queue = qf->queue;
	mutex_unlock(&qf->lock);
	if (session) {
		dev_dbg(&qf->qd->vdev->dev, "closing session %llx (%d requests in flight)\n",
			session, atomic_read(&qf->inflight));
		qcuda_session_close(qf, session, queue, true);
	}
	qcuda_file_put(qf);
	return 0;
}

const struct file_operations qcuda_fops = {
	.owner = THIS_MODULE,
	.open = qcuda_open,
	.release = qcuda_release,
	.unlocked_ioctl = qcuda_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = qcuda_mmap,
	.llseek = noop_llseek,
};
