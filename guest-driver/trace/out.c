/* SPDX-License-Identifier: MIT */
/*
 * The trace file: QCUDA_TRACE_OUT's prefix (default ./cuda-trace) plus
 * ".PID", so that each process, a forked child too, writes its own; "-" is
 * stderr. One write(2) of a whole line under a lock, so lines of threads do
 * not interleave. QCUDA_TRACE_ENTER=1 adds a line before each call (which
 * call a crash is in).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "trace.h"

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static int out_fd = -1;
static pid_t out_pid;
static const char *out_prefix;
static int enter_lines;
static __thread long my_tid;

static void out_open(void)
{
	char path[4096], head[4200];
	int n;

	out_pid = getpid();
	if (strcmp(out_prefix, "-") == 0) {
		out_fd = 2;
	} else {
		snprintf(path, sizeof(path), "%s.%d", out_prefix, (int)out_pid);
		out_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		if (out_fd < 0) {
			fprintf(stderr, "qcuda-trace: cannot write %s: %s\n", path, strerror(errno));
			return;
		}
	}
	n = snprintf(head, sizeof(head), "# qcuda-trace pid=%d real=%s\n", (int)out_pid, tr_real_path());
	if (write(out_fd, head, (size_t)n) < 0)
		return;
}

void tr_write(const char *line, size_t n)
{
	pthread_mutex_lock(&out_lock);
	if (out_fd < 0 || out_pid != getpid())
		out_open();
	while (out_fd >= 0 && n > 0) {
		ssize_t w = write(out_fd, line, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		line += w;
		n -= (size_t)w;
	}
	pthread_mutex_unlock(&out_lock);
}

int tr_enter_lines(void)
{
	return enter_lines;
}

long tr_tid(void)
{
	if (!my_tid)
		my_tid = syscall(SYS_gettid);
	return my_tid;
}

/* A fork while another thread writes: the child gets an unlocked lock and its own file. */
static void fork_prepare(void)
{
	pthread_mutex_lock(&out_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&out_lock);
}

static void fork_child(void)
{
	if (out_fd > 2)
		close(out_fd);
	out_fd = -1;
	my_tid = 0;
	pthread_mutex_unlock(&out_lock);
}

__attribute__((constructor(101))) static void out_init(void)
{
	const char *e = getenv("QCUDA_TRACE_ENTER");

	out_prefix = getenv("QCUDA_TRACE_OUT");
	if (!out_prefix || !*out_prefix)
		out_prefix = "./cuda-trace";
	out_prefix = strdup(out_prefix);
	enter_lines = e && *e && strcmp(e, "0") != 0;
	pthread_atfork(fork_prepare, fork_parent, fork_child);
}
