/* SPDX-License-Identifier: MIT */
/*
 * What the transports need of the operating system, behind one small
 * interface so that the same C runs in the Linux library and in the Windows
 * one: mapping a file, whether a path is a socket, the process's id and
 * whether another's is gone, sleeping and a monotonic clock. os_posix.c is Linux's;
 * guest-driver/windows/os_win32.c is Windows' (mingw-w64).
 */
#ifndef QCUDA_QC_OS_H
#define QCUDA_QC_OS_H

#include <stdint.h>

/* A file mapped shared, read-write, whole. */
struct qc_os_map {
	uint8_t *va;
	uint64_t bytes;
	intptr_t fd; /* a POSIX fd, or a Windows HANDLE: the file's */
	intptr_t section; /* Windows: the mapping object; POSIX: unused */
};

/* Maps the file at path; files shorter than min_bytes are refused with
 * -EPROTO before they are mapped. 0 or -errno. */
int qc_os_map_file(const char *path, uint64_t min_bytes, struct qc_os_map *m);
void qc_os_unmap(struct qc_os_map *m);
/* Not inherited by a forked child (POSIX); nothing on Windows. */
void qc_os_map_private_to_process(struct qc_os_map *m);
/* Whether path names a unix socket (a backend's vhost-user socket). */
int qc_os_is_socket(const char *path);
uint64_t qc_os_pid(void);
/* Whether the process pid is known to be gone (not merely unreachable). */
int qc_os_pid_gone(uint64_t pid);
void qc_os_sleep_us(long us);
uint64_t qc_os_now_ns(void);

#endif
