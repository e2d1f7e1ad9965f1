// SPDX-License-Identifier: MIT
/*
 * call_test's parts: what the driver-only tests (call_test_driver.c) and the
 * backend tests (call_test_backend.c) share with call_test.c (the helpers,
 * the check counting and main).
 */
#ifndef CALL_TEST_H
#define CALL_TEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

#define MiB (UINT64_C(1) << 20)
#define PG 4096ul
#define CUDA_ERROR_INVALID_VALUE 1

extern const char *dev;
extern uint64_t big;
extern int use_fd; /* -F: an inherited open file instead of dev */
extern unsigned long checks, failures;
extern pthread_mutex_t count_lock;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		bool ok_ = (cond);                                  \
		pthread_mutex_lock(&count_lock);                    \
		checks++;                                           \
		if (!ok_) {                                         \
			failures++;                                 \
			printf("FAIL %s:%d: ", __func__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
		pthread_mutex_unlock(&count_lock);                  \
	} while (0)

/* ---- call_test.c: helpers ---- */
double now(void);
/* The device (or a dup of -F's file); exits 2 if it cannot be opened. */
int xopen(void);
void *xmap(size_t n);
/* ioctl(QCUDA_IOC_CALL): 0 or -errno; the reply in *c. */
int call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, uint32_t dir,
	 const void *data, uint64_t data_len, struct qcuda_call *c);
uint64_t dmalloc(int fd, uint64_t size);
/* MEMCPY_HTOD / _DTOH: ioctl result, status in *st. */
int copy(int fd, bool to_dev, uint64_t dptr, void *host, uint64_t n, uint32_t *st);
struct qcuda_out_mem_info meminfo(int fd);
/* Pseudo-random bytes that never repeat at page or chunk periods. */
void fill(uint8_t *p, size_t n, uint64_t seed);
ssize_t first_diff(const uint8_t *a, const uint8_t *b, size_t n);
/* Physical address of a virtual address (root: /proc/self/pagemap), 0 if unknown. */
uint64_t phys_of(const void *va);
/* Are the pages of [va, va+n) physically contiguous (per pagemap)? */
bool phys_contig(const uint8_t *va, size_t n);
int host_alloc(int fd, uint64_t size, uint32_t flags, struct qcuda_host_alloc *a);
int host_free(int fd, uint64_t token);
int host_register(int fd, const void *addr, uint64_t size, uint64_t *gpa);
int host_unregister(int fd, const void *addr);
int gpa_of(int fd, const void *addr, uint64_t size, uint64_t *gpa);
void *map_alloc(int fd, uint64_t token, size_t len);

/* ---- call_test_driver.c: what the driver decides alone ---- */
void test_validation(int fd);
void test_host_alloc(int fd);
void test_register(int fd);

/* ---- call_test_backend.c: with a backend ---- */
void test_copies(int fd);
void test_host_map(int fd);
void test_misc_calls(int fd);
void test_sessions(int fd);
void test_kill(int fd);
void test_signals(int fd);
void test_threads(int fd);
/* -l: copy until a call fails (for device removal tests); 0 = killed first. */
int loop_copies(void);

#endif
