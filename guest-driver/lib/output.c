/* SPDX-License-Identifier: MIT */
/*
 * Device-side printf and assert output. The backend keeps what the session's
 * kernels print and flags every reply while some waits (QCUDA_ST_OUTPUT);
 * after such a reply the library fetches it (OUTPUT_READ) and writes it where
 * CUDA does: printf output into the program's stdout buffer, without a flush
 * (natively the driver writes it through the same FILE), failed device
 * asserts to stderr. CUDA does not flush device output at exit, but its
 * driver prints from a thread of its own soon after a kernel ends (measured
 * on the H100), while a guest process only learns of output from a reply:
 * so a process that loaded a module synchronizes once more at exit and
 * fetches what is left.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "qcrt.h"

/* Pieces fetched per flagged reply; the rest waits for the next reply. */
#define QC_OUTPUT_ROUNDS 64

/* Serialises fetches, so that pieces reach the program's streams in order. */
static pthread_mutex_t output_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char output_buf[64 << 10];
/* A module is loaded in the current context: the exit flush has work. */
static atomic_int output_live;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static pid_t exit_pid; /* the process that registered the exit flush (not a forked child) */

static void output_fetch(void)
{
	struct qcuda_out_output_read out;
	struct qt_result res = { 0 };
	int more = 1;

	pthread_mutex_lock(&output_lock);
	for (int i = 0; more && i < QC_OUTPUT_ROUNDS; i++) {
		memset(&out, 0, sizeof(out));
		if (qt_call(qc.fd, QCUDA_CMD_OUTPUT_READ, NULL, 0, &out, sizeof(out), QT_FROM_DEVICE, output_buf,
			    sizeof(output_buf), &res) ||
		    (res.status & ~QCUDA_ST_OUTPUT) || res.out_written < sizeof(out) ||
		    res.value > sizeof(output_buf)) {
			qc_debug("OUTPUT_READ failed (status %#x)", res.status);
			break;
		}
		qc_debug("OUTPUT_READ: %llu bytes of kind %u, status %#x, more %u", (unsigned long long)res.value,
			 out.kind, res.status, out.more);
		if (res.value && out.kind == QCUDA_OUTPUT_STDOUT)
			fwrite(output_buf, 1, (size_t)res.value, stdout);
		else if (res.value && out.kind == QCUDA_OUTPUT_STDERR)
			fwrite(output_buf, 1, (size_t)res.value, stderr);
		more = out.more || (res.status & QCUDA_ST_OUTPUT);
	}
	pthread_mutex_unlock(&output_lock);
}

static void exit_flush(void)
{
	struct qt_result res = { 0 };

	if (getpid() != exit_pid || !atomic_load(&output_live))
		return;
	qc_flush(); /* posted launches run first, as they would natively */
	/* Not through qc_call: a sticky error here is no news to the program. */
	if (!qt_call(qc.fd, QCUDA_CMD_DEVICE_SYNC, NULL, 0, NULL, 0, QT_NONE, NULL, 0, &res) &&
	    (res.status & QCUDA_ST_OUTPUT))
		output_fetch();
	else
		qc_debug("exit: DEVICE_SYNC status %#x: no device output waiting", res.status);
}

static void exit_register(void)
{
	exit_pid = getpid();
	atexit(exit_flush);
}

void qc_output_reply(uint32_t cmd, uint32_t *status)
{
	int flagged = (*status & QCUDA_ST_OUTPUT) != 0;

	*status &= ~QCUDA_ST_OUTPUT;
	if (*status == 0 && cmd == QCUDA_CMD_MODULE_LOAD) {
		atomic_store(&output_live, 1);
		pthread_once(&exit_once, exit_register);
	} else if (*status == 0 && cmd == QCUDA_CMD_DEVICE_RESET) {
		atomic_store(&output_live, 0); /* its context is gone: no sync at exit */
	}
	if (flagged && cmd != QCUDA_CMD_OUTPUT_READ)
		output_fetch();
}
