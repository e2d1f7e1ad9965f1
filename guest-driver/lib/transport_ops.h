/* SPDX-License-Identifier: MIT */
/*
 * The library's two transports behind transport.h: the kernel's
 * (transport_ioctl.c: /dev/qcuda<N> in a guest) and the userspace one
 * (transport_user.c: the library itself is the vhost-user frontend of a
 * backend's socket, for `qcuda run`), and the shared-memory one
 * (transport_shm.c, QCUDA_SHM). transport.c picks one at qt_open.
 */
#ifndef QCUDA_TRANSPORT_OPS_H
#define QCUDA_TRANSPORT_OPS_H

#include "transport.h"

struct qt_ops {
	const char *name;
	int (*open)(const char *path, int *fd);
	int (*info)(int fd, struct qt_info *info);
	int (*call)(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len,
		    enum qt_dir dir, void *data, uint64_t data_len, struct qt_result *res);
	int (*host_alloc)(int fd, uint64_t size, int contiguous, uint64_t *token, uint64_t *gpa);
	int (*host_free)(int fd, uint64_t token);
	void *(*host_mmap)(int fd, uint64_t token, size_t len, void *want);
	int (*host_register)(int fd, void *addr, uint64_t size, uint64_t *gpa);
	int (*host_unregister)(int fd, void *addr);
	int (*gpa)(int fd, const void *addr, uint64_t size, uint64_t *gpa);
};

extern const struct qt_ops qt_ioctl_ops;
extern const struct qt_ops qt_user_ops;
/* The shared-memory transport (QCUDA_SHM: transport_shm.c): its open, then
 * the userspace transport's path over the region's rings. */
extern const struct qt_ops qt_shm_ops;
int qt_shm_open(const char *path, int *fd);
struct virtio_qcuda_config;
int qt_user_start_polled(const struct virtio_qcuda_config *c);

#endif
