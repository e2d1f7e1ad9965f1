// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: virtio driver for the virtual CUDA device (virtio id 60).
 *
 * The device has num_queues request queues (from config space), each with
 * its own interrupt. A request is one descriptor chain: a device-readable
 * part {struct qcuda_req_hdr, payload} and a device-writable part
 * {struct qcuda_resp_hdr, payload}. User space talks to the driver through
 * ioctls on the misc device /dev/qcuda<N> (qcuda_ioctl.h).
 *
 * Concurrency: a request holds its queue's spinlock only while it is added
 * and the kick is prepared; the caller then sleeps on a completion that the
 * queue's interrupt callback signals. A request is reference counted (one
 * reference for the caller, one while the device owns it), so a caller
 * interrupted by a signal never frees a buffer the device may still write.
 */
#include <linux/completion.h>
#include <linux/fs.h>
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/kref.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/refcount.h>
#include <linux/rwsem.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/uaccess.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/wait.h>

#include "qcuda_proto.h"
#include "qcuda_ioctl.h"

#define QCUDA_MAX_QUEUES 64

struct qcuda_queue {
	struct virtqueue *vq;
	spinlock_t lock;		/* serializes add/kick/get_buf on vq */
	wait_queue_head_t space_wq;	/* submitters waiting for ring space */
	char name[16];
};

struct qcuda_dev {
	struct virtio_device *vdev;
	struct kref kref;		/* probe + one per open file */
	struct miscdevice misc;
	char name[16];
	int index;

	/* Held for reading while a submitter touches a virtqueue; remove()
	 * takes it for writing before deleting the virtqueues. */
	struct rw_semaphore vq_sem;
	bool dead;			/* set under every queue lock */

	u32 num_queues;
	u32 queue_size;
	u32 proto_version;
	u64 capabilities;
	atomic_t next_queue;		/* round robin for QCUDA_QUEUE_ANY */
	struct qcuda_queue *queues;
};

/* One request in flight. The device-writable part sits in its own cache
 * line, apart from everything the CPU writes while the device owns it. */
struct qcuda_req {
	refcount_t ref;
	struct completion done;
	int error;			/* -ENODEV if reclaimed by remove() */
	unsigned int used_len;		/* bytes the device wrote */
	struct {
		struct qcuda_req_hdr hdr;
		__le64 cookie;
	} out;
	struct {
		struct qcuda_resp_hdr hdr;
		__le64 cookie;
	} in ____cacheline_aligned;
};

static DEFINE_IDA(qcuda_ida);

static void qcuda_req_put(struct qcuda_req *r)
{
	if (refcount_dec_and_test(&r->ref))
		kfree(r);
}

static void qcuda_release_dev(struct kref *kref)
{
	struct qcuda_dev *qd = container_of(kref, struct qcuda_dev, kref);

	kfree(qd->queues);
	kfree(qd);
}

/* Interrupt callback of one request queue: complete every used buffer. */
static void qcuda_vq_done(struct virtqueue *vq)
{
	struct qcuda_dev *qd = vq->vdev->priv;
	struct qcuda_queue *q = &qd->queues[vq->index];
	struct qcuda_req *r;
	unsigned long flags;
	unsigned int len;

	spin_lock_irqsave(&q->lock, flags);
	do {
		virtqueue_disable_cb(vq);
		while ((r = virtqueue_get_buf(vq, &len)) != NULL) {
			r->used_len = len;
			complete(&r->done);
			qcuda_req_put(r);	/* the device's reference */
		}
	} while (!virtqueue_enable_cb(vq));
	spin_unlock_irqrestore(&q->lock, flags);
	if (wq_has_sleeper(&q->space_wq))
		wake_up(&q->space_wq);
}

/*
 * Queue one request and kick the device. Waits (interruptibly) while the
 * ring is full. On success the device holds a reference to r.
 */
static int qcuda_submit(struct qcuda_dev *qd, struct qcuda_queue *q,
			struct qcuda_req *r)
{
	struct scatterlist out, in, *sgs[2] = { &out, &in };
	bool notify = false;
	int err;

	sg_init_one(&out, &r->out, sizeof(r->out));
	sg_init_one(&in, &r->in, sizeof(r->in));

	down_read(&qd->vq_sem);
	for (;;) {
		spin_lock_irq(&q->lock);
		if (qd->dead) {
			err = -ENODEV;
		} else {
			err = virtqueue_add_sgs(q->vq, sgs, 1, 1, r, GFP_ATOMIC);
			if (!err) {
				refcount_inc(&r->ref);
				notify = virtqueue_kick_prepare(q->vq);
			}
		}
		spin_unlock_irq(&q->lock);
		if (err != -ENOSPC)
			break;
		/* Ring full: sleep until the callback frees descriptors. */
		if (wait_event_interruptible(q->space_wq, READ_ONCE(qd->dead) ||
					     READ_ONCE(q->vq->num_free) >= 2)) {
			err = -EINTR;
			break;
		}
	}
	if (notify)
		virtqueue_notify(q->vq);
	up_read(&qd->vq_sem);
	return err;
}

static long qcuda_ioctl_nop(struct qcuda_dev *qd, struct qcuda_nop __user *arg)
{
	struct qcuda_nop a;
	struct qcuda_req *r;
	u32 qi, status, len;
	long ret;

	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.queue == QCUDA_QUEUE_ANY)
		qi = (u32)atomic_inc_return(&qd->next_queue) % qd->num_queues;
	else if (a.queue < qd->num_queues)
		qi = a.queue;
	else
		return -EINVAL;

	r = kzalloc(sizeof(*r), GFP_KERNEL);
	if (!r)
		return -ENOMEM;
	refcount_set(&r->ref, 1);	/* the caller's reference */
	init_completion(&r->done);
	r->out.hdr.cmd = cpu_to_le32(QCUDA_CMD_NOP);
	r->out.hdr.len = cpu_to_le32(sizeof(r->out.cookie));
	r->out.hdr.session = 0;
	r->out.cookie = cpu_to_le64(a.cookie);

	ret = qcuda_submit(qd, &qd->queues[qi], r);
	if (ret)
		goto out;
	if (wait_for_completion_interruptible(&r->done)) {
		ret = -EINTR;	/* the device's reference keeps r alive */
		goto out;
	}
	if (r->error) {
		ret = r->error;
		goto out;
	}

	status = le32_to_cpu(r->in.hdr.status);
	len = le32_to_cpu(r->in.hdr.len);
	if (r->used_len < sizeof(r->in.hdr)) {
		ret = -EPROTO;
	} else if (status != QCUDA_ST_OK) {
		dev_dbg(&qd->vdev->dev, "NOP on queue %u: status %#x\n", qi, status);
		ret = -EIO;
	} else if (len != sizeof(r->in.cookie) || r->used_len < sizeof(r->in)) {
		dev_warn_ratelimited(&qd->vdev->dev,
				     "NOP on queue %u: bad reply len %u (used %u)\n",
				     qi, len, r->used_len);
		ret = -EPROTO;
	} else {
		a.queue = (u32)le64_to_cpu(r->in.hdr.value);
		a.cookie = le64_to_cpu(r->in.cookie);
		ret = copy_to_user(arg, &a, sizeof(a)) ? -EFAULT : 0;
	}
out:
	qcuda_req_put(r);
	return ret;
}

static long qcuda_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct qcuda_dev *qd = f->private_data;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case QCUDA_IOC_INFO: {
		struct qcuda_info info = {
			.num_queues = qd->num_queues,
			.queue_size = qd->queue_size,
			.capabilities = qd->capabilities,
			.proto_version = qd->proto_version,
		};

		down_read(&qd->vq_sem);
		if (!qd->dead)
			info.vring_size = virtqueue_get_vring_size(qd->queues[0].vq);
		up_read(&qd->vq_sem);
		return copy_to_user(argp, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case QCUDA_IOC_NOP:
		return qcuda_ioctl_nop(qd, argp);
	default:
		return -ENOTTY;
	}
}

static int qcuda_open(struct inode *inode, struct file *f)
{
	/* misc_open() set private_data to our miscdevice. */
	struct qcuda_dev *qd = container_of(f->private_data, struct qcuda_dev, misc);

	kref_get(&qd->kref);
	f->private_data = qd;
	return 0;
}

static int qcuda_release(struct inode *inode, struct file *f)
{
	struct qcuda_dev *qd = f->private_data;

	kref_put(&qd->kref, qcuda_release_dev);
	return 0;
}

static const struct file_operations qcuda_fops = {
	.owner = THIS_MODULE,
	.open = qcuda_open,
	.release = qcuda_release,
	.unlocked_ioctl = qcuda_ioctl,
	.compat_ioctl = compat_ptr_ioctl,
	.llseek = noop_llseek,
};

static int qcuda_read_config(struct qcuda_dev *qd)
{
	struct virtio_device *vdev = qd->vdev;
	u32 magic;

	virtio_cread_le(vdev, struct virtio_qcuda_config, magic, &magic);
	virtio_cread_le(vdev, struct virtio_qcuda_config, proto_version,
			&qd->proto_version);
	virtio_cread_le(vdev, struct virtio_qcuda_config, num_queues,
			&qd->num_queues);
	virtio_cread_le(vdev, struct virtio_qcuda_config, queue_size,
			&qd->queue_size);
	virtio_cread_le(vdev, struct virtio_qcuda_config, capabilities,
			&qd->capabilities);

	if (magic != QCUDA_MAGIC) {
		dev_err(&vdev->dev, "bad config magic %#x (want %#x)\n",
			magic, QCUDA_MAGIC);
		return -ENODEV;
	}
	if (qd->proto_version != QCUDA_PROTO_VERSION) {
		dev_err(&vdev->dev, "unsupported protocol version %u (want %u)\n",
			qd->proto_version, QCUDA_PROTO_VERSION);
		return -ENODEV;
	}
	if (qd->num_queues < 1 || qd->num_queues > QCUDA_MAX_QUEUES) {
		dev_err(&vdev->dev, "bad num_queues %u (1..%u)\n",
			qd->num_queues, QCUDA_MAX_QUEUES);
		return -ENODEV;
	}
	return 0;
}

static int qcuda_init_vqs(struct qcuda_dev *qd)
{
	struct virtqueue_info *info;
	struct virtqueue **vqs;
	/* Spread the queue interrupts over the CPUs; vector 0 is config. */
	struct irq_affinity desc = { .pre_vectors = 1 };
	u32 i;
	int err = -ENOMEM;

	info = kcalloc(qd->num_queues, sizeof(*info), GFP_KERNEL);
	vqs = kcalloc(qd->num_queues, sizeof(*vqs), GFP_KERNEL);
	if (!info || !vqs)
		goto out;
	for (i = 0; i < qd->num_queues; i++) {
		struct qcuda_queue *q = &qd->queues[i];

		spin_lock_init(&q->lock);
		init_waitqueue_head(&q->space_wq);
		snprintf(q->name, sizeof(q->name), "req.%u", i);
		info[i].name = q->name;
		info[i].callback = qcuda_vq_done;
	}
	err = virtio_find_vqs(qd->vdev, qd->num_queues, vqs, info, &desc);
	if (err) {
		dev_err(&qd->vdev->dev, "cannot set up %u queues: %d\n",
			qd->num_queues, err);
		goto out;
	}
	for (i = 0; i < qd->num_queues; i++)
		qd->queues[i].vq = vqs[i];
out:
	kfree(info);
	kfree(vqs);
	return err;
}

static int qcuda_probe(struct virtio_device *vdev)
{
	struct qcuda_dev *qd;
	int err;

	if (!virtio_has_feature(vdev, VIRTIO_F_VERSION_1))
		return -ENODEV;
	if (!vdev->config->get) {
		dev_err(&vdev->dev, "config access disabled\n");
		return -EINVAL;
	}

	qd = kzalloc(sizeof(*qd), GFP_KERNEL);
	if (!qd)
		return -ENOMEM;
	kref_init(&qd->kref);
	init_rwsem(&qd->vq_sem);
	qd->vdev = vdev;
	vdev->priv = qd;

	err = qcuda_read_config(qd);
	if (err)
		goto err_free;
	qd->queues = kcalloc(qd->num_queues, sizeof(*qd->queues), GFP_KERNEL);
	if (!qd->queues) {
		err = -ENOMEM;
		goto err_free;
	}
	err = qcuda_init_vqs(qd);
	if (err)
		goto err_free;

	qd->index = ida_alloc(&qcuda_ida, GFP_KERNEL);
	if (qd->index < 0) {
		err = qd->index;
		goto err_vqs;
	}
	virtio_device_ready(vdev);

	snprintf(qd->name, sizeof(qd->name), "qcuda%d", qd->index);
	qd->misc.minor = MISC_DYNAMIC_MINOR;
	qd->misc.name = qd->name;
	qd->misc.fops = &qcuda_fops;
	qd->misc.parent = &vdev->dev;
	err = misc_register(&qd->misc);
	if (err)
		goto err_reset;

	dev_info(&vdev->dev, "/dev/%s: %u queues, queue_size %u, vring %u, proto %u, caps %#llx\n",
		 qd->name, qd->num_queues, qd->queue_size,
		 virtqueue_get_vring_size(qd->queues[0].vq), qd->proto_version,
		 qd->capabilities);
	return 0;

err_reset:
	virtio_reset_device(vdev);
	ida_free(&qcuda_ida, qd->index);
err_vqs:
	vdev->config->del_vqs(vdev);
err_free:
	vdev->priv = NULL;
	kref_put(&qd->kref, qcuda_release_dev);
	return err;
}

static void qcuda_remove(struct virtio_device *vdev)
{
	struct qcuda_dev *qd = vdev->priv;
	struct qcuda_req *r;
	u32 i;

	misc_deregister(&qd->misc);	/* no new opens */

	/* No new submissions; sleepers waiting for ring space wake up. */
	for (i = 0; i < qd->num_queues; i++) {
		spin_lock_irq(&qd->queues[i].lock);
		WRITE_ONCE(qd->dead, true);
		spin_unlock_irq(&qd->queues[i].lock);
	}

	/* Stop the device: after this it no longer owns any buffer, and no
	 * callback runs. Fail everything still queued. */
	virtio_reset_device(vdev);
	for (i = 0; i < qd->num_queues; i++) {
		struct qcuda_queue *q = &qd->queues[i];

		spin_lock_irq(&q->lock);
		while ((r = virtqueue_detach_unused_buf(q->vq)) != NULL) {
			r->error = -ENODEV;
			complete(&r->done);
			qcuda_req_put(r);
		}
		spin_unlock_irq(&q->lock);
		wake_up_all(&q->space_wq);
	}

	/* Wait for submitters still inside qcuda_submit(). */
	down_write(&qd->vq_sem);
	vdev->config->del_vqs(vdev);
	up_write(&qd->vq_sem);

	ida_free(&qcuda_ida, qd->index);
	vdev->priv = NULL;
	kref_put(&qd->kref, qcuda_release_dev);	/* open files keep qd */
}

static const struct virtio_device_id id_table[] = {
	{ VIRTIO_ID_QCUDA, VIRTIO_DEV_ANY_ID },
	{ 0 },
};

static struct virtio_driver qcuda_driver = {
	.driver.name = KBUILD_MODNAME,
	.id_table = id_table,
	.probe = qcuda_probe,
	.remove = qcuda_remove,
};

module_virtio_driver(qcuda_driver);
MODULE_DEVICE_TABLE(virtio, id_table);
MODULE_DESCRIPTION("qcuda virtual CUDA device driver");
MODULE_LICENSE("GPL");
