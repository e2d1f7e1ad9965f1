/* SPDX-License-Identifier: MIT */
/*
 * The kernel transport: the ioctl interface of /dev/qcuda<N> (qcuda_ioctl.h),
 * the only file of the library that knows it. Every function returns 0 or
 * -errno.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qcuda_ioctl.h"
#include "transport_ops.h"

static int kt_open(const char *path, int *fd)
{
	int f = open(path, O_RDWR | O_CLOEXEC);

	if (f < 0)
		return -errno;
	*fd = f;
	return 0;
}

static int xioctl(int fd, unsigned long req, void *arg)
{
	/* Waits in the driver are killable only: EINTR means a fatal signal,
	 * after which the process is gone anyway. */
	return ioctl(fd, req, arg) == 0 ? 0 : -errno;
}

static int kt_info(int fd, struct qt_info *info)
{
	struct qcuda_info i;
	int r;

	memset(&i, 0, sizeof(i));
	r = xioctl(fd, QCUDA_IOC_INFO, &i);
	if (r)
		return r;
	*info = (struct qt_info){ .proto_version = i.proto_version,
				  .num_queues = i.num_queues,
				  .capabilities = i.capabilities,
				  .session = i.session };
	return 0;
}

static int kt_call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len,
		   enum qt_dir dir, void *data, uint64_t data_len, struct qt_result *res)
{
	struct qcuda_call c;
	int r;

	memset(&c, 0, sizeof(c));
	c.cmd = cmd;
	c.args_len = args_len;
	c.args = (uintptr_t)args;
	c.out = (uintptr_t)out;
	c.out_len = out_len;
	c.data_dir = dir == QT_TO_DEVICE     ? QCUDA_DATA_TO_DEVICE
		     : dir == QT_FROM_DEVICE ? QCUDA_DATA_FROM_DEVICE
					     : QCUDA_DATA_NONE;
	c.data = (uintptr_t)data;
	c.data_len = dir == QT_NONE ? 0 : data_len;
	r = xioctl(fd, QCUDA_IOC_CALL, &c);
	if (r)
		return r;
	*res = (struct qt_result){ .status = c.status, .out_written = c.out_written, .value = c.value };
	return 0;
}

static int kt_host_alloc(int fd, uint64_t size, int contiguous, uint64_t *token, uint64_t *gpa)
{
	struct qcuda_host_alloc a;
	int r;

	memset(&a, 0, sizeof(a));
	a.size = size;
	a.flags = contiguous ? QCUDA_HOST_CONTIGUOUS : 0;
	r = xioctl(fd, QCUDA_IOC_HOST_ALLOC, &a);
	if (r)
		return r;
	*token = a.mmap_offset;
	*gpa = a.gpa;
	return 0;
}

static int kt_host_free(int fd, uint64_t token)
{
	struct qcuda_host_free f = { .mmap_offset = token };

	return xioctl(fd, QCUDA_IOC_HOST_FREE, &f);
}

static void *kt_host_mmap(int fd, uint64_t token, size_t len, void *want)
{
	void *p;

	if (want) {
		p = mmap(want, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, (off_t)token);
		if (p == want)
			return p;
		/* Kernels before 4.17 take the flag as a hint only. */
		if (p != MAP_FAILED)
			munmap(p, len);
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)token);
	return p == MAP_FAILED ? NULL : p;
}

static int kt_host_register(int fd, void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_host_register r;
	int e;

	memset(&r, 0, sizeof(r));
	r.addr = (uintptr_t)addr;
	r.size = size;
	e = xioctl(fd, QCUDA_IOC_HOST_REGISTER, &r);
	if (e)
		return e;
	*gpa = r.gpa;
	return 0;
}

static int kt_host_unregister(int fd, void *addr)
{
	struct qcuda_host_unregister u = { .addr = (uintptr_t)addr };

	return xioctl(fd, QCUDA_IOC_HOST_UNREGISTER, &u);
}

static int kt_gpa(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	struct qcuda_gpa g = { .addr = (uintptr_t)addr, .size = size };
	int r = xioctl(fd, QCUDA_IOC_GPA, &g);

	if (r)
		return r;
	*gpa = g.gpa;
	return 0;
}

const struct qt_ops qt_ioctl_ops = {
	.name = "ioctl",
	.open = kt_open,
	.info = kt_info,
	.call = kt_call,
	.host_alloc = kt_host_alloc,
	.host_free = kt_host_free,
	.host_mmap = kt_host_mmap,
	.host_register = kt_host_register,
	.host_unregister = kt_host_unregister,
	.gpa = kt_gpa,
};
