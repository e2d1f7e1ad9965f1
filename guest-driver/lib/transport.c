/* SPDX-License-Identifier: MIT */
/*
 * transport.h's entry points, forwarded to the transport qt_open chose: a
 * path naming a unix socket is a backend's vhost-user socket (the userspace
 * transport, `qcuda run`); anything else is a /dev/qcuda<N> device node (the
 * guest kernel driver's ioctls). QCUDA_SHM, where set, names a shared-memory
 * region a backend serves (transport_shm.c), and wins over the path; where
 * it is not set, the OS's own region does (Windows: the IVSHMEM device).
 */
#include <stdlib.h>

#include "qc_os.h"
#include "transport_ops.h"

static const struct qt_ops *ops = &qt_ioctl_ops;

int qt_open(const char *path, int *fd)
{
	const char *shm = getenv("QCUDA_SHM");

	if (!shm || !*shm)
		shm = qc_os_default_region();
	if (shm && *shm) {
		ops = &qt_shm_ops;
		return ops->open(shm, fd);
	}
	ops = qc_os_is_socket(path) ? &qt_user_ops : &qt_ioctl_ops;
	return ops->open(path, fd);
}

const char *qt_name(void)
{
	return ops->name;
}

int qt_info(int fd, struct qt_info *info)
{
	return ops->info(fd, info);
}

int qt_call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, enum qt_dir dir,
	    void *data, uint64_t data_len, struct qt_result *res)
{
	return ops->call(fd, cmd, args, args_len, out, out_len, dir, data, data_len, res);
}

int qt_host_alloc(int fd, uint64_t size, int contiguous, uint64_t *token, uint64_t *gpa)
{
	return ops->host_alloc(fd, size, contiguous, token, gpa);
}

int qt_host_free(int fd, uint64_t token)
{
	return ops->host_free(fd, token);
}

void *qt_host_mmap(int fd, uint64_t token, size_t len, void *want)
{
	return ops->host_mmap(fd, token, len, want);
}

int qt_host_register(int fd, void *addr, uint64_t size, uint64_t *gpa)
{
	return ops->host_register(fd, addr, size, gpa);
}

int qt_host_unregister(int fd, void *addr)
{
	return ops->host_unregister(fd, addr);
}

int qt_gpa(int fd, const void *addr, uint64_t size, uint64_t *gpa)
{
	return ops->gpa(fd, addr, size, gpa);
}
