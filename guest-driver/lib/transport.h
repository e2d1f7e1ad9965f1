/* SPDX-License-Identifier: MIT */
/*
 * How the library reaches the device: the guest kernel driver's ioctls
 * (transport_ioctl.c, the only part of the library that includes
 * qcuda_ioctl.h) or, where the path is a backend's socket, the library as a
 * vhost-user frontend itself (transport_user.c). Callers see one interface.
 */
#ifndef QCUDA_TRANSPORT_H
#define QCUDA_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

enum qt_dir { QT_NONE = 0, QT_TO_DEVICE = 1, QT_FROM_DEVICE = 2 };

struct qt_info {
	uint32_t proto_version;
	uint32_t num_queues;
	uint64_t capabilities;
	uint64_t session;
};

struct qt_result {
	uint32_t status; /* 0, a cudaError_t or QCUDA_ST_* */
	uint32_t out_written;
	uint64_t value;
};

/* All return 0 or -errno. */
/* path: a /dev/qcuda<N> node, or a backend's vhost-user socket. */
int qt_open(const char *path, int *fd);
int qt_info(int fd, struct qt_info *info);
int qt_call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, enum qt_dir dir,
	    void *data, uint64_t data_len, struct qt_result *res);
/* Zeroed guest memory; *gpa = 0 unless contiguous. */
int qt_host_alloc(int fd, uint64_t size, int contiguous, uint64_t *token, uint64_t *gpa);
int qt_host_free(int fd, uint64_t token);
/* Maps a HOST_ALLOC (at want if want != NULL and that range is free). */
void *qt_host_mmap(int fd, uint64_t token, size_t len, void *want);
int qt_host_register(int fd, void *addr, uint64_t size, uint64_t *gpa);
int qt_host_unregister(int fd, void *addr);
int qt_gpa(int fd, const void *addr, uint64_t size, uint64_t *gpa);
/* "ioctl" or "vhost-user": the transport qt_open chose. */
const char *qt_name(void);

#endif
