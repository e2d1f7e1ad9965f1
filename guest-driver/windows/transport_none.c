/* SPDX-License-Identifier: MIT */
/*
 * The Linux-only transports, absent on Windows: there is no /dev/qcuda0
 * (the guest kernel driver's ioctls) and no backend socket to be a
 * vhost-user frontend of (vhu_conn.c). A Windows guest reaches the backend
 * through the shared-memory region only (QCUDA_SHM, or the IVSHMEM device:
 * not written yet); these say so to whatever asks for the others.
 */
#include <errno.h>

#include "transport_ops.h"
#include "vhu.h"

static int none_open(const char *path, int *fd)
{
	return -ENODEV;
}

/* Never reached: qt_open fails first. */
const struct qt_ops qt_ioctl_ops = { .name = "ioctl", .open = none_open };

int vhu_connect(const char *path)
{
	return -ENOSYS;
}

int vhu_request(enum vhu_req req, const void *payload, uint32_t len, int fd, int want_reply, void *reply,
		uint32_t reply_len)
{
	return -ENOSYS;
}

int vhu_get_u64(enum vhu_req req, uint64_t *v)
{
	return -ENOSYS;
}

int vhu_set_u64(enum vhu_req req, uint64_t v, int fd)
{
	return -ENOSYS;
}

void vhu_conn_ack_on(void)
{
}

int vhu_conn_fd(void)
{
	return -1;
}
