// SPDX-License-Identifier: MIT
/*
 * ringhog: one process with several files of /dev/qcuda0 (several backend
 * sessions) holding as much of the device as the driver lets it, through
 * the raw ioctls (a CUDA program has one file). Each file gets a stream
 * behind a host function that never runs (HOST_FUNC, then the
 * CALLBACK_WAIT that hands it out; no one reports it done), so a call on
 * that stream waits in the device for as long as the process likes.
 *
 *   ringhog hold FILES THREADS  THREADS threads per file sync on its stream
 *                               (files 2.. first, then file 1, which may
 *                               own a queue); prints "ringhog: holding"
 *                               and waits to be killed
 *   ringhog pins FILES THREADS  THREADS threads per file each copy 16 MiB
 *                               of their own pageable memory to the device
 *                               on its stream; prints the MiB pinned
 *                               meanwhile (/proc/vmstat), then lets the
 *                               host functions "run" and checks every copy
 *                               succeeded and the pins went
 *
 * Exit status (pins): 0 every copy succeeded and less than 1 MiB is left
 * pinned, 1 otherwise, 2 setup error.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "qcuda_ioctl.h"
#include "qcuda_proto.h"

#define MAX_FILES 16
#define COPY_BYTES (16u << 20)

struct file_state {
	int fd;
	uint64_t stream;
	uint64_t dptr;
};

static struct file_state files[MAX_FILES];
static int entered, done_ok, done_bad;

static int call(int fd, uint32_t cmd, const void *args, uint32_t args_len, void *out, uint32_t out_len, uint32_t dir,
		const void *data, uint64_t data_len, struct qcuda_call *c)
{
	memset(c, 0, sizeof(*c));
	c->cmd = cmd;
	c->args_len = args_len;
	c->args = (uintptr_t)args;
	c->out = (uintptr_t)out;
	c->out_len = out_len;
	c->data_dir = dir;
	c->data = (uintptr_t)data;
	c->data_len = data_len;
	return ioctl(fd, QCUDA_IOC_CALL, c) ? -errno : 0;
}

static void die(const char *what, int r, uint32_t status)
{
	printf("ringhog: %s: ret %d status %u\n", what, r, status);
	exit(2);
}

/* A session (the first call opens it), a stream, a device buffer, and a
 * host function on the stream, handed out and never reported run. */
static void setup(struct file_state *f)
{
	struct qcuda_args_stream_create sc = { 0 };
	struct qcuda_args_malloc m = { .size = COPY_BYTES };
	struct qcuda_args_host_func hf = { .id = 1 };
	struct qcuda_args_callback_wait cw = { .done = 0 };
	struct qcuda_out_callback out;
	struct qcuda_call c;
	int r;

	f->fd = open("/dev/qcuda0", O_RDWR | O_CLOEXEC);
	if (f->fd < 0)
		die("open /dev/qcuda0", -errno, 0);
	r = call(f->fd, QCUDA_CMD_STREAM_CREATE, &sc, sizeof(sc), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	if (r || c.status || !c.value)
		die("STREAM_CREATE", r, c.status);
	f->stream = c.value;
	r = call(f->fd, QCUDA_CMD_MALLOC, &m, sizeof(m), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	if (r || c.status || !c.value)
		die("MALLOC", r, c.status);
	f->dptr = c.value;
	hf.stream = f->stream;
	r = call(f->fd, QCUDA_CMD_HOST_FUNC, &hf, sizeof(hf), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	if (r || c.status)
		die("HOST_FUNC", r, c.status);
	r = call(f->fd, QCUDA_CMD_CALLBACK_WAIT, &cw, sizeof(cw), &out, sizeof(out), QCUDA_DATA_NONE, NULL, 0, &c);
	if (r || c.status || out.id != 1)
		die("CALLBACK_WAIT", r, c.status);
}

static void *sync_thread(void *arg)
{
	struct file_state *f = arg;
	struct qcuda_args_handle h = { .handle = f->stream };
	struct qcuda_call c;

	__atomic_add_fetch(&entered, 1, __ATOMIC_RELAXED);
	call(f->fd, QCUDA_CMD_STREAM_SYNC, &h, sizeof(h), NULL, 0, QCUDA_DATA_NONE, NULL, 0, &c);
	return NULL;
}

static void *copy_thread(void *arg)
{
	struct file_state *f = arg;
	struct qcuda_args_memcpy a = { .dst = f->dptr, .size = COPY_BYTES, .stream = f->stream };
	struct qcuda_call c;
	void *buf;
	int r;

	if (posix_memalign(&buf, 4096, COPY_BYTES))
		die("posix_memalign", -ENOMEM, 0);
	memset(buf, 0x5a, COPY_BYTES);
	__atomic_add_fetch(&entered, 1, __ATOMIC_RELAXED);
	r = call(f->fd, QCUDA_CMD_MEMCPY_HTOD, &a, sizeof(a), NULL, 0, QCUDA_DATA_TO_DEVICE, buf, COPY_BYTES, &c);
	__atomic_add_fetch(r || c.status ? &done_bad : &done_ok, 1, __ATOMIC_RELAXED);
	if (r || c.status)
		printf("ringhog: a copy: ret %d status %u\n", r, c.status);
	free(buf);
	return NULL;
}

/* The host function of f "ran": the calls behind it go on. This wait then
 * parks in the backend (nothing more to run) until the process exits. */
static void *report_thread(void *arg)
{
	struct file_state *f = arg;
	struct qcuda_args_callback_wait cw = { .done = 1 };
	struct qcuda_out_callback out;
	struct qcuda_call c;

	call(f->fd, QCUDA_CMD_CALLBACK_WAIT, &cw, sizeof(cw), &out, sizeof(out), QCUDA_DATA_NONE, NULL, 0, &c);
	return NULL;
}

static void start(void *(*fn)(void *), struct file_state *f, int n)
{
	pthread_attr_t attr;
	pthread_t t;

	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	for (int i = 0; i < n; i++)
		if (pthread_create(&t, &attr, fn, f))
			die("pthread_create", -errno, 0);
	pthread_attr_destroy(&attr);
}

static void wait_entered(int n)
{
	while (__atomic_load_n(&entered, __ATOMIC_RELAXED) < n)
		usleep(10000);
	sleep(3); /* for the calls to reach the device (or wait in the driver) */
}

/* Pages pinned with FOLL_PIN in the whole guest (acquired - released). */
static long pinned_pages(void)
{
	char name[64];
	long v, acq = -1, rel = -1;
	FILE *f = fopen("/proc/vmstat", "r");

	if (!f)
		die("/proc/vmstat", -errno, 0);
	while (fscanf(f, "%63s %ld", name, &v) == 2) {
		if (!strcmp(name, "nr_foll_pin_acquired"))
			acq = v;
		else if (!strcmp(name, "nr_foll_pin_released"))
			rel = v;
	}
	fclose(f);
	if (acq < 0 || rel < 0)
		die("no nr_foll_pin counts in /proc/vmstat", 0, 0);
	return acq - rel;
}

static __attribute__((noreturn)) void hold(int nfiles, int threads)
{
	int i;

	for (i = 0; i < nfiles; i++)
		setup(&files[i]);
	/* The files on the shared queue first: they fill it as far as the
	 * driver lets them, then file 1 (on a queue of its own if it got one). */
	for (i = 1; i < nfiles; i++)
		start(sync_thread, &files[i], threads);
	wait_entered((nfiles - 1) * threads);
	start(sync_thread, &files[0], threads);
	wait_entered(nfiles * threads);
	printf("ringhog: holding\n");
	fflush(stdout);
	for (;;)
		pause();
}

static int pins(int nfiles, int threads)
{
	long base = pinned_pages(), during, after;
	int i, n = nfiles * threads, failed = 0;

	for (i = 0; i < nfiles; i++)
		setup(&files[i]);
	for (i = 0; i < nfiles; i++)
		start(copy_thread, &files[i], threads);
	wait_entered(n);
	during = pinned_pages() - base;
	printf("ringhog: %d copies of %u MiB waiting: %ld KiB pinned\n", n, COPY_BYTES >> 20,
	       during * (sysconf(_SC_PAGESIZE) >> 10));
	fflush(stdout);
	for (i = 0; i < nfiles; i++)
		start(report_thread, &files[i], 1);
	for (int s = 0; s < 600 && done_ok + done_bad < n; s++)
		usleep(100000);
	after = pinned_pages() - base;
	printf("ringhog: %d copies succeeded, %d failed, %ld KiB pinned after\n", done_ok, done_bad,
	       after * (sysconf(_SC_PAGESIZE) >> 10));
	failed |= done_ok != n;
	/* Others in the guest pin pages too, now and then (a few). */
	failed |= after * sysconf(_SC_PAGESIZE) >= (1 << 20);
	printf("ringhog: %s\n", failed ? "FAIL" : "PASS");
	fflush(stdout);
	/* exit: the parked CALLBACK_WAITs end with their threads, then the
	 * files are released and their sessions closed. */
	return failed ? 1 : 0;
}

int main(int argc, char **argv)
{
	int nfiles = argc == 4 ? atoi(argv[2]) : 0, threads = argc == 4 ? atoi(argv[3]) : 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (nfiles < 1 || nfiles > MAX_FILES || threads < 1) {
		fprintf(stderr, "usage: ringhog hold|pins FILES(1-%d) THREADS\n", MAX_FILES);
		return 2;
	}
	if (!strcmp(argv[1], "hold"))
		hold(nfiles, threads);
	if (!strcmp(argv[1], "pins"))
		return pins(nfiles, threads);
	fprintf(stderr, "usage: ringhog hold|pins FILES THREADS\n");
	return 2;
}
