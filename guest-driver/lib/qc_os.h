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

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/* The socket transport's "device gone" errno; mingw's errno.h has none, and
 * Winsock's value keeps it apart from every errno it has. */
#ifndef ESHUTDOWN
#define ESHUTDOWN 10058
#ifdef _WIN32
/* glibc's, which Windows' C library lacks (os_win32_rt.c). */
void *memmem(const void *hay, size_t n, const void *needle, size_t m);
#endif

#endif

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
/* The shared-memory region this OS reaches where QCUDA_SHM names none: NULL
 * on Linux (the guest has /dev/qcuda0; qcuda run a socket), the IVSHMEM
 * device's name on Windows (qc_os_map_file maps the device for it). */
const char *qc_os_default_region(void);
/* Not inherited by a forked child (POSIX); nothing on Windows. */
void qc_os_map_private_to_process(struct qc_os_map *m);
/* Whether path names a unix socket (a backend's vhost-user socket). */
int qc_os_is_socket(const char *path);
uint64_t qc_os_pid(void);
/* Whether the process pid is known to be gone (not merely unreachable). */
int qc_os_pid_gone(uint64_t pid);
void qc_os_sleep_us(long us);
uint64_t qc_os_now_ns(void);
/* Whether [addr, addr+len) is mapped readable and writable in this
 * process, as pinning it for the device needs: 0 or -EFAULT (or -errno);
 * *shared: some of it is a shared mapping (a file, shared memory). */
int qc_os_writable_range(const void *addr, uint64_t len, int *shared);

/* The rest of the library's needs (issue 48 step 2). */
size_t qc_os_page_size(void);
/* The NUMA node the calling thread runs on; 0 where unknown. */
int qc_os_numa_node(void);
/* Fills buf with len random bytes: 0 or -1. */
int qc_os_random(void *buf, size_t len);
/* A detached thread running fn(NULL), with stack bytes (0: the default),
 * that takes none of the program's signals (POSIX). 0 or an errno. */
int qc_os_start_thread(void *(*fn)(void *), size_t stack);
/* The same without the signal mask: a detached pthread (os_pthread.c). */
int qc_os_start_detached(void *(*fn)(void *), size_t stack);
/* An inaccessible reservation at exactly [addr, addr+len), so that nothing
 * else is ever mapped there: 1 if made, 0 if not (the range is taken). */
int qc_os_reserve_at(uint64_t addr, size_t len);
/* Ends a reservation of qc_os_reserve_at. */
void qc_os_release(uint64_t addr, size_t len);
/* Unmaps pages a transport mapped (its qt_host_mmap). */
void qc_os_unmap_pages(void *va, size_t len);
/* A file that holds len bytes of data and can never change, for a
 * shareable handle (a sealed memfd): its fd in *fd; 0, -ENOSYS where the
 * system has no such handles (Windows), or another -errno. */
int qc_os_sealed_file(const char *name, const void *data, size_t len, int *fd);
/* Reads len bytes at offset 0 of fd (a handle of qc_os_sealed_file's, or
 * anything the caller gave): 0, -ENOSYS as above, or -1 if fewer. */
int qc_os_read_sealed(int fd, void *buf, size_t len);

#ifdef _WIN32
/* glibc's, which Windows' C library lacks (os_win32_rt.c). */
void *memmem(const void *hay, size_t n, const void *needle, size_t m);
#endif

#endif
