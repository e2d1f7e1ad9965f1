/* SPDX-License-Identifier: MIT */
/*
 * The call path: one command to the device (qc_call), its transport errors
 * and QCUDA_ST_* statuses mapped to cudaError_t, sticky errors, and the
 * per-thread last error that every API function returns through (qc_ret).
 * The call layer: it calls only the transport, the log and the error
 * table. What runs before a call (batch.c's flush) and after its reply
 * (output.c's device output) init.c hooks in (qc_call_hooks).
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "qc_os.h"
#include "qcrt.h"

/* The session: init.c fills it in. */
struct qc_state qc = { .fd = -1, .init_err = cudaErrorInitializationError };

/* What runs before every call but the unbatched ones, and after every
 * reply (qc_call_hooks); none before init.c's start-up sets them. */
static void (*before_call)(void);
static void (*after_reply)(uint32_t cmd, uint32_t *status);

void qc_call_hooks(void (*flush)(void), void (*reply)(uint32_t cmd, uint32_t *status))
{
	before_call = flush;
	after_reply = reply;
}

/* The context's sticky error (cudaSuccess if none), cleared by cudaDeviceReset. */
static _Atomic int sticky_err;

static __thread cudaError_t last_error;

cudaError_t qc_ret(cudaError_t err)
{
	if (err != cudaSuccess && err != cudaErrorNotReady)
		last_error = err;
	return err;
}

static int is_sticky(cudaError_t e)
{
	switch ((int)e) {
	case cudaErrorECCUncorrectable:
	case cudaErrorContained:
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorTensorMemoryLeak:
	case cudaErrorExternalDevice:
		return 1;
	default:
		return 0;
	}
}

static cudaError_t map_status(uint32_t cmd, uint32_t status)
{
	cudaError_t e;

	if (status == 0)
		return cudaSuccess;
	if (status < QCUDA_ST_BAD_REQUEST) {
		e = (cudaError_t)status;
		if (is_sticky(e)) {
			int none = cudaSuccess;

			if (atomic_compare_exchange_strong(&sticky_err, &none, (int)e))
				qc_msg("%s (%d): the CUDA context is unusable until cudaDeviceReset",
				       qc_error_name(e) ? qc_error_name(e) : "error", (int)e);
		}
		return e;
	}
	/* Protocol-level refusals mean the library and backend disagree. */
	switch (status) {
	case QCUDA_ST_UNKNOWN_CMD:
		qc_msg("the backend does not know command %u", cmd);
		return cudaErrorNotSupported;
	case QCUDA_ST_TOO_LARGE:
		qc_msg("the backend refused command %u as too large", cmd);
		return cudaErrorInvalidValue;
	case QCUDA_ST_VERSION:
		qc_msg("the backend refused command %u: protocol version mismatch", cmd);
		return cudaErrorInsufficientDriver;
	case QCUDA_ST_NO_SESSION:
		qc_msg("the backend has no session for this process (command %u)", cmd);
		return cudaErrorDevicesUnavailable;
	case QCUDA_ST_BAD_REQUEST:
		qc_msg("the backend refused command %u as malformed", cmd);
		return cudaErrorInvalidValue;
	default:
		qc_msg("the backend answered command %u with unknown status %#x", cmd, status);
		return cudaErrorUnknown;
	}
}

static cudaError_t map_errno(uint32_t cmd, int r)
{
	switch (-r) {
	case EFAULT: /* a bad user pointer */
	case EINVAL: /* bad sizes, an invalid HOST_MAP range */
	case E2BIG:
	case EOVERFLOW:
		qc_debug("command %u: %s", cmd, strerror(-r));
		return cudaErrorInvalidValue;
	case ENOMEM:
		return cudaErrorMemoryAllocation;
	case ENODEV:
	case ESHUTDOWN:
		qc_msg("command %u: the qcuda device is gone (%s)", cmd, strerror(-r));
		return cudaErrorDevicesUnavailable;
	case EINTR:
		return cudaErrorUnknown;
	default:
		qc_msg("command %u: ioctl failed: %s", cmd, strerror(-r));
		return cudaErrorUnknown;
	}
}

/* What crossed to the host (QCUDA_STATS: printed at exit by batch.c), in
 * all and by command number. */
static atomic_ullong round_trips, batch_trips;
#define QC_COUNTED_CMDS 256
static atomic_ullong trips_by_cmd[QC_COUNTED_CMDS];

/* The commands that crossed most often, as " cmd N: count" pairs, into buf. */
void qc_stats_by_cmd(char *buf, size_t len)
{
	unsigned long long seen[QC_COUNTED_CMDS];
	size_t at = 0;

	for (int i = 0; i < QC_COUNTED_CMDS; i++)
		seen[i] = atomic_load(&trips_by_cmd[i]);
	buf[0] = 0;
	for (int k = 0; k < 8; k++) {
		int top = 0;

		for (int i = 1; i < QC_COUNTED_CMDS; i++)
			if (seen[i] > seen[top])
				top = i;
		if (!seen[top] || at >= len)
			break;
		at += (size_t)snprintf(buf + at, len - at, " cmd %d: %llu;", top, seen[top]);
		seen[top] = 0;
	}
}

void qc_stats(unsigned long long *calls, unsigned long long *batches)
{
	*batches = atomic_load(&batch_trips);
	*calls = atomic_load(&round_trips) - *batches;
}

static cudaError_t raw_call(const struct qc_req *q)
{
	struct qt_result res;
	int r;

	atomic_fetch_add(&round_trips, 1);
	if (q->cmd < QC_COUNTED_CMDS)
		atomic_fetch_add(&trips_by_cmd[q->cmd], 1);
	if (q->cmd == QCUDA_CMD_BATCH)
		atomic_fetch_add(&batch_trips, 1);
	r = qt_call(qc.fd, q->cmd, q->args, q->args_len, q->out, q->out_len, q->dir, q->data, q->data_len, &res);

	if (r)
		return map_errno(q->cmd, r);
	/* Device output first: CUDA prints it before returning. */
	if (after_reply)
		after_reply(q->cmd, &res.status);
	if (q->value)
		*q->value = res.value;
	if (res.status == 0 && q->out_len && q->dir != QT_FROM_DEVICE && res.out_written < q->out_len) {
		qc_msg("command %u: the backend wrote %u of %u output bytes", q->cmd, res.out_written, q->out_len);
		return cudaErrorUnknown;
	}
	return map_status(q->cmd, res.status);
}

cudaError_t qc_call(const struct qc_req *r)
{
	if (before_call)
		before_call();
	return raw_call(r);
}

cudaError_t qc_call_unbatched(const struct qc_req *r)
{
	return raw_call(r);
}

cudaError_t qc_sticky(void)
{
	return (cudaError_t)atomic_load(&sticky_err);
}

void qc_sticky_clear(void)
{
	atomic_store(&sticky_err, cudaSuccess);
}

/* ---------------------------------------------------------------- errors */

QC_API cudaError_t cudaGetLastError(void)
{
	cudaError_t e = last_error;

	/* The sticky error is not reported here by itself: the calls that
	 * fail with it set it as the last error (CUDA 13, measured natively). */
	last_error = cudaSuccess;
	return e;
}

QC_API cudaError_t cudaPeekAtLastError(void)
{
	return last_error;
}

const char *qc_error_label(cudaError_t error)
{
	const char *s = qc_error_name((int)error);

	return s ? s : "unrecognized error code";
}

QC_API const char *cudaGetErrorName(cudaError_t error)
{
	return qc_error_label(error);
}

QC_API const char *cudaGetErrorString(cudaError_t error)
{
	const char *s = qc_error_string((int)error);

	return s ? s : "unrecognized error code";
}

/* For stubs.c: an entry point qcuda does not implement. */
int qc_unsupported(const char *name, int *warned);
int qc_unsupported(const char *name, int *warned)
{
	if (!__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED))
		qc_msg("%s is not supported by qcuda: returning cudaErrorNotSupported", name);
	return (int)qc_ret(cudaErrorNotSupported);
}
