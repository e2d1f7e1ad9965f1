// SPDX-License-Identifier: GPL-2.0-only
/*
 * qcuda: the ioctls of /dev/qcuda<N> (qcuda_ioctl.h): INFO, NOP and CALL
 * here; the host memory ones are in qcuda_hostmem.c. See qcuda_drv.h.
 */
#include <linux/uaccess.h>

#include "qcuda_drv.h"

static long qcuda_ioctl_call(struct qcuda_file *qf, struct qcuda_call __user *uarg)
{
	struct qcuda_hostmem *mapped = NULL;
	struct qcuda_call a;
	struct qcuda_op *op;
	long ret;

	if (copy_from_user(&a, uarg, sizeof(a)))
		return -EFAULT;
	if (a.cmd < QCUDA_CMD_HELLO || a.args_len > QCUDA_MAX_ARGS ||
	    a.out_len > QCUDA_MAX_OUT || a.data_dir > QCUDA_DATA_FROM_DEVICE ||
	    (a.data_dir == QCUDA_DATA_NONE && a.data_len))
		return -EINVAL;
	if (a.data_len && !access_ok(u64_to_user_ptr(a.data), a.data_len))
		return -EFAULT;
	ret = qcuda_session_open(qf);
	if (ret)
		return ret;

	op = qcuda_op_alloc(qf, a.cmd, a.args_len, a.out_len, a.data_dir,
			    a.data, a.data_len);
	if (!op)
		return -ENOMEM;
	if (a.args_len && copy_from_user(op->args, u64_to_user_ptr(a.args), a.args_len)) {
		ret = -EFAULT;
		goto out;
	}
	if (a.cmd == QCUDA_CMD_HOST_MAP || a.cmd == QCUDA_CMD_HOST_MAP_PAGES) {
		ret = a.cmd == QCUDA_CMD_HOST_MAP ? qcuda_map_begin(qf, op, &mapped) :
						    qcuda_map_pages_begin(qf, op, &mapped);
		if (ret)
			goto out;
	}

	ret = qcuda_op_run(op, QCUDA_QUEUE_ANY);

	if (mapped)
		qcuda_map_end(qf, mapped, ret, op);
	if (ret)
		goto out;
	if (!qcuda_st_err(op->status) && a.cmd == QCUDA_CMD_HOST_UNMAP &&
	    a.args_len == sizeof(struct qcuda_args_ptr))
		qcuda_unmap(qf, false, le64_to_cpu(((struct qcuda_args_ptr *)op->args)->ptr));
	if (!qcuda_st_err(op->status) && a.cmd == QCUDA_CMD_DEVICE_RESET)
		qcuda_unmap(qf, true, 0);

	if (op->out_written &&
	    copy_to_user(u64_to_user_ptr(a.out), op->out, op->out_written)) {
		ret = -EFAULT;
		goto out;
	}
	a.status = op->status;
	a.out_written = op->out_written;
	a.value = op->value;
	if (copy_to_user(&uarg->status, &a.status,
			 sizeof(a) - offsetof(struct qcuda_call, status)))
		ret = -EFAULT;
out:
	qcuda_op_put(op);
	return ret;
}

static long qcuda_ioctl_nop(struct qcuda_file *qf, struct qcuda_nop __user *arg)
{
	struct qcuda_dev *qd = qf->qd;
	struct qcuda_nop a;
	struct qcuda_op *op;
	long ret;

	if (copy_from_user(&a, arg, sizeof(a)))
		return -EFAULT;
	if (a.queue != QCUDA_QUEUE_ANY && a.queue >= qd->num_queues)
		return -EINVAL;
	op = qcuda_op_alloc(qf, QCUDA_CMD_NOP, sizeof(__le64), sizeof(__le64),
			    QCUDA_DATA_NONE, 0, 0);
	if (!op)
		return -ENOMEM;
	*(__le64 *)op->args = cpu_to_le64(a.cookie);

	ret = qcuda_op_run(op, a.queue);
	if (!ret && qcuda_st_err(op->status)) {
		dev_dbg(&qd->vdev->dev, "NOP: status %#x\n", op->status);
		ret = -EIO;
	} else if (!ret && op->out_written != sizeof(__le64)) {
		dev_warn_ratelimited(&qd->vdev->dev, "NOP: reply of %u bytes\n",
				     op->out_written);
		ret = -EPROTO;
	} else if (!ret) {
		a.queue = (u32)op->value;
		a.cookie = le64_to_cpu(*(__le64 *)op->out);
		ret = copy_to_user(arg, &a, sizeof(a)) ? -EFAULT : 0;
	}
	qcuda_op_put(op);
	return ret;
}

long qcuda_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	struct qcuda_file *qf = f->private_data;
	struct qcuda_dev *qd = qf->qd;
	void __user *argp = (void __user *)arg;

	switch (cmd) {
	case QCUDA_IOC_INFO: {
		struct qcuda_info info = {
			.num_queues = qd->num_queues,
			.queue_size = qd->queue_size,
			.capabilities = qd->capabilities,
			.proto_version = qd->proto_version,
			.session = READ_ONCE(qf->session),
		};

		down_read(&qd->vq_sem);
		if (!qd->dead)
			info.vring_size = virtqueue_get_vring_size(qd->queues[0].vq);
		up_read(&qd->vq_sem);
		return copy_to_user(argp, &info, sizeof(info)) ? -EFAULT : 0;
	}
	case QCUDA_IOC_NOP:
		return qcuda_ioctl_nop(qf, argp);
	case QCUDA_IOC_CALL:
		return qcuda_ioctl_call(qf, argp);
	case QCUDA_IOC_HOST_ALLOC:
		return qcuda_ioctl_host_alloc(qf, argp);
	case QCUDA_IOC_HOST_FREE: {
		struct qcuda_host_free a;

		if (copy_from_user(&a, argp, sizeof(a)))
			return -EFAULT;
		return qcuda_hostmem_remove(qf, a.mmap_offset, false);
	}
	case QCUDA_IOC_HOST_REGISTER:
		return qcuda_ioctl_host_register(qf, argp);
	case QCUDA_IOC_HOST_UNREGISTER: {
		struct qcuda_host_unregister a;

		if (copy_from_user(&a, argp, sizeof(a)))
			return -EFAULT;
		return qcuda_hostmem_remove(qf, a.addr, true);
	}
	case QCUDA_IOC_GPA:
		return qcuda_ioctl_gpa(f, argp);
	default:
		return -ENOTTY;
	}
}
