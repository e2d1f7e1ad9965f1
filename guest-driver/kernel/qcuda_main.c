// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: the module, the virtio driver, and each device's probe and remove
 * (config space, virtqueues, the misc device). See qcuda_drv.h.
 */
#include <linux/idr.h>
#include <linux/interrupt.h>
#include <linux/module.h>
#include <linux/slab.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "qcuda_drv.h"

static DEFINE_IDA(qcuda_ida);
struct workqueue_struct *qcuda_wq;

void qcuda_release_dev(struct kref *kref)
{
	struct qcuda_dev *qd = container_of(kref, struct qcuda_dev, kref);

	kfree(qd->queues);
	kfree(qd);
}

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

/* Requests one process may have in flight: a quarter of every ring's slots
 * (each request takes one: its chain goes indirect), at least a few.
 */
static int qcuda_proc_slots(struct qcuda_dev *qd)
{
	unsigned int total = 0;
	u32 i;

	for (i = 0; i < qd->num_queues; i++)
		total += virtqueue_get_vring_size(qd->queues[i].vq);
	return max_t(unsigned int, total / 4, QCUDA_MIN_FILE_SLOTS);
}

/* Requests a file with a queue of its own may have in flight: proc_slots,
 * but at most the smallest ring of 1..num_queues-1 less QCUDA_OWN_RESERVE;
 * 0 (no session gets a queue of its own) where that leaves too few.
 */
static int qcuda_own_slots(struct qcuda_dev *qd)
{
	unsigned int size = UINT_MAX;
	u32 i;

	for (i = 1; i < qd->num_queues; i++)
		size = min(size, virtqueue_get_vring_size(qd->queues[i].vq));
	if (qd->num_queues < 2 || size < QCUDA_OWN_RESERVE + QCUDA_MIN_FILE_SLOTS)
		return 0;
	return min_t(int, qd->proc_slots, size - QCUDA_OWN_RESERVE);
}

/* Each queue's reserve while no session owns it: an eighth of its ring. */
static void qcuda_set_reserves(struct qcuda_dev *qd)
{
	u32 i;

	for (i = 0; i < qd->num_queues; i++)
		qd->queues[i].reserve = virtqueue_get_vring_size(qd->queues[i].vq) / 8;
}

static int qcuda_probe(struct virtio_device *vdev)
{
	struct qcuda_dev *qd;
	int err;

	if (!virtio_has_feature(vdev, VIRTIO_F_VERSION_1))
		return -ENODEV;
	/* A chunk is up to 4101 descriptors (QCUDA_CHUNK_PAGES): it can only
	 * go in through an indirect table.
	 */
	if (!virtio_has_feature(vdev, VIRTIO_RING_F_INDIRECT_DESC)) {
		dev_err(&vdev->dev, "device lacks RING_INDIRECT_DESC\n");
		return -ENODEV;
	}
	if (!vdev->config->get) {
		dev_err(&vdev->dev, "config access disabled\n");
		return -EINVAL;
	}

	qd = kzalloc(sizeof(*qd), GFP_KERNEL);
	if (!qd)
		return -ENOMEM;
	kref_init(&qd->kref);
	init_rwsem(&qd->vq_sem);
	mutex_init(&qd->procs_lock);
	INIT_LIST_HEAD(&qd->procs);
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
	qd->proc_slots = qcuda_proc_slots(qd);
	qd->own_slots = qcuda_own_slots(qd);
	qcuda_set_reserves(qd);

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

	dev_info(&vdev->dev, "/dev/%s: %u queues, queue_size %u, vring %u, proto %u, caps %#llx, %d requests per process (%d on a queue of its own)\n",
		 qd->name, qd->num_queues, qd->queue_size,
		 virtqueue_get_vring_size(qd->queues[0].vq), qd->proto_version,
		 qd->capabilities, qd->proc_slots, qd->own_slots);
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
	struct qcuda_chunk *c;
	u32 i;

	misc_deregister(&qd->misc);	/* no new opens */

	/* No new submissions; sleepers waiting for ring space wake up. */
	for (i = 0; i < qd->num_queues; i++) {
		spin_lock_irq(&qd->queues[i].lock);
		WRITE_ONCE(qd->dead, true);
		spin_unlock_irq(&qd->queues[i].lock);
	}

	/* Stop the device: after this it no longer owns any buffer, and no
	 * callback runs. Fail everything still queued.
	 */
	virtio_reset_device(vdev);
	for (i = 0; i < qd->num_queues; i++) {
		struct qcuda_queue *q = &qd->queues[i];

		spin_lock_irq(&q->lock);
		while ((c = virtqueue_detach_unused_buf(q->vq)) != NULL) {
			c->error = -ENODEV;
			complete(&c->done);
			qcuda_reserve_put(qd, c);
			qcuda_slot_put(c->op->qf);
			qcuda_op_put_dev(c->op);
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

static int __init qcuda_init(void)
{
	int err;

	qcuda_wq = alloc_workqueue("qcuda", 0, 0);
	if (!qcuda_wq)
		return -ENOMEM;
	err = register_virtio_driver(&qcuda_driver);
	if (err)
		destroy_workqueue(qcuda_wq);
	return err;
}

static void __exit qcuda_exit(void)
{
	/* remove() hands every op back; then let their frees run. */
	unregister_virtio_driver(&qcuda_driver);
	destroy_workqueue(qcuda_wq);
}

module_init(qcuda_init);
module_exit(qcuda_exit);
MODULE_DEVICE_TABLE(virtio, id_table);
MODULE_DESCRIPTION("qcuda virtual CUDA device driver");
MODULE_LICENSE("GPL");
