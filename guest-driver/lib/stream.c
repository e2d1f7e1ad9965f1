/* SPDX-License-Identifier: MIT */
/*
 * Streams and events. Their handles are the backend's session ids cast to
 * cudaStream_t / cudaEvent_t (never pointers: the backend checks each one
 * against the session, so a forged handle gets an error, not a crash). The
 * special streams: NULL -> QCUDA_STREAM_LEGACY (QCUDA_STREAM_PER_THREAD in
 * the _ptsz entry points, as nvcc --default-stream per-thread compiles),
 * cudaStreamLegacy -> QCUDA_STREAM_LEGACY, cudaStreamPerThread ->
 * QCUDA_STREAM_PER_THREAD.
 */
#include <stdatomic.h>
#include <string.h>

#include "graph.h"

typedef cudaError_t (*handle_req)(uint64_t handle);

/*
 * Records a new handle (of a stream or an event: destroy gives one back). It
 * must not be one of the special values 0, 1 and 2 (NULL, cudaStreamLegacy
 * and cudaStreamPerThread); a handle that cannot be recorded is given back.
 */
static cudaError_t keep_handle(enum qc_handle_kind kind, uint64_t h, handle_req destroy, uint64_t value)
{
	cudaError_t e;

	if (h <= QCUDA_STREAM_PER_THREAD) {
		qc_msg("the backend returned the reserved handle %llu", (unsigned long long)h);
		if (h)
			destroy(h);
		return cudaErrorUnknown;
	}
	e = qc_handle_add(kind, h, value);
	if (e != cudaSuccess)
		destroy(h);
	return e;
}

/* ---------------------------------------------------------------- streams */

/*
 * What a stream's queries answer, known at its creation and kept with its
 * handle (handles.c): its flags, its device and its id. CUDA gives every
 * stream an id unique for the life of the program (the backend's handles
 * may come again after a destroy, so they are not ids): one counter here,
 * also for the special streams, whose ids are taken at their first query:
 * the legacy stream's per device, the per-thread stream's per thread and
 * device.
 */
#define INFO(id, device, flags) ((uint64_t)(id) << 16 | (uint64_t)(device) << 8 | (flags))
#define INFO_ID(v) ((v) >> 16)
#define INFO_DEVICE(v) ((int)((v) >> 8 & 0xff))
#define INFO_FLAGS(v) ((unsigned int)((v)&0xff))
_Static_assert(QC_MAX_DEVICES <= 256, "a device in 8 bits");

static atomic_ullong next_stream_id = 1;
static atomic_ullong legacy_ids[QC_MAX_DEVICES];
static __thread unsigned long long per_thread_ids[QC_MAX_DEVICES];

static unsigned long long legacy_id(int device)
{
	unsigned long long id = atomic_load(&legacy_ids[device]), none = 0;

	if (id)
		return id;
	id = atomic_fetch_add(&next_stream_id, 1);
	if (!atomic_compare_exchange_strong(&legacy_ids[device], &none, id))
		id = none; /* another thread's came first */
	return id;
}

static unsigned long long per_thread_id(int device)
{
	if (!per_thread_ids[device])
		per_thread_ids[device] = atomic_fetch_add(&next_stream_id, 1);
	return per_thread_ids[device];
}

/* A stream's flags, device and id (after qc_ready). The special streams are
 * the current device's, with flags 0 (cudaStreamDefault) as CUDA answers:
 * the per-thread stream is not a non-blocking one either. */
static cudaError_t stream_info(cudaStream_t s, int ptds, uint64_t *info)
{
	int dev = qc_current_device();
	uint64_t h = qc_stream(s, ptds);

	if (h == QCUDA_STREAM_LEGACY)
		*info = INFO(legacy_id(dev), dev, 0);
	else if (h == QCUDA_STREAM_PER_THREAD)
		*info = INFO(per_thread_id(dev), dev, 0);
	else if (!qc_handle_value(QC_STREAM, h, info))
		return cudaErrorInvalidResourceHandle;
	return cudaSuccess;
}

QC_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags, int priority)
{
	uint64_t h = 0, info;
	cudaError_t e;

	if (!pStream)
		return qc_ret(cudaErrorInvalidValue);
	if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_ready();
	info = INFO(atomic_fetch_add(&next_stream_id, 1), qc_current_device(), flags);
	if (e == cudaSuccess)
		e = qc_req_stream_create(flags, priority, &h);
	if (e == cudaSuccess)
		e = keep_handle(QC_STREAM, h, qc_req_stream_destroy, info);
	if (e != cudaSuccess)
		return qc_ret(e);
	*pStream = (cudaStream_t)(uintptr_t)h;
	return cudaSuccess;
}

QC_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return cudaStreamCreateWithPriority(pStream, flags, 0);
}

QC_API cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

QC_API cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	uint64_t h = (uint64_t)(uintptr_t)stream;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && qc_stream_special(stream))
		e = cudaErrorInvalidResourceHandle;
	if (e == cudaSuccess)
		e = qc_req_stream_destroy(h);
	if (e == cudaSuccess)
		qc_handle_remove(QC_STREAM, h);
	return qc_ret(e);
}

static cudaError_t stream_sync(cudaStream_t stream, int ptds)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_capture_refuse(stream, ptds); /* nothing to wait for in a capture */
	if (e == cudaSuccess)
		e = qc_req_stream_sync(qc_stream(stream, ptds));
	return qc_ret(qc_deferred(e));
}

QC_API cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return stream_sync(stream, 0);
}

QC_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
QC_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
	return stream_sync(stream, 1);
}

/* cudaSuccess or cudaErrorNotReady (which is not recorded as an error). */
static cudaError_t stream_query(cudaStream_t stream, int ptds)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_capture_refuse(stream, ptds);
	if (e == cudaSuccess)
		e = qc_req_stream_query(qc_stream(stream, ptds));
	return qc_ret(e);
}

QC_API cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	return stream_query(stream, 0);
}

QC_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
QC_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
	return stream_query(stream, 1);
}

/* ------------------------------------------------ priorities and L2 lines */

/* Either pointer may be NULL, as natively; the range is the context's. */
QC_API cudaError_t cudaDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	struct qcuda_out_priority_range r;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_req_stream_priority_range(&r);
	if (e != cudaSuccess)
		return qc_ret(e);
	if (leastPriority)
		*leastPriority = (int32_t)r.least;
	if (greatestPriority)
		*greatestPriority = (int32_t)r.greatest;
	return cudaSuccess;
}

static cudaError_t stream_get_priority(cudaStream_t stream, int *priority, int ptds)
{
	uint64_t v = 0;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && !priority)
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = qc_req_stream_get_priority(qc_stream(stream, ptds), &v);
	if (e != cudaSuccess)
		return qc_ret(e);
	*priority = (int)(int64_t)v; /* a signed int, sign-extended on the wire */
	return cudaSuccess;
}

QC_API cudaError_t cudaStreamGetPriority(cudaStream_t stream, int *priority)
{
	return stream_get_priority(stream, priority, 0);
}

QC_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t stream, int *priority);
QC_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t stream, int *priority)
{
	return stream_get_priority(stream, priority, 1);
}

/* ------------------------------------------------- flags, ids and devices */

enum info_field { FIELD_FLAGS, FIELD_ID, FIELD_DEVICE };

/* One field of a stream's info; out: the caller's result, NULL refused. */
static cudaError_t stream_field(cudaStream_t stream, int ptds, enum info_field f, void *out)
{
	uint64_t info;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && !out)
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = stream_info(stream, ptds, &info);
	if (e != cudaSuccess)
		return qc_ret(e);
	if (f == FIELD_FLAGS)
		*(unsigned int *)out = INFO_FLAGS(info);
	else if (f == FIELD_ID)
		*(unsigned long long *)out = INFO_ID(info);
	else
		*(int *)out = INFO_DEVICE(info);
	return cudaSuccess;
}

QC_API cudaError_t cudaStreamGetFlags(cudaStream_t hStream, unsigned int *flags)
{
	return stream_field(hStream, 0, FIELD_FLAGS, flags);
}

QC_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags);
QC_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t hStream, unsigned int *flags)
{
	return stream_field(hStream, 1, FIELD_FLAGS, flags);
}

QC_API cudaError_t cudaStreamGetId(cudaStream_t hStream, unsigned long long *streamId)
{
	return stream_field(hStream, 0, FIELD_ID, streamId);
}

QC_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId);
QC_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t hStream, unsigned long long *streamId)
{
	return stream_field(hStream, 1, FIELD_ID, streamId);
}

QC_API cudaError_t cudaStreamGetDevice(cudaStream_t hStream, int *device)
{
	return stream_field(hStream, 0, FIELD_DEVICE, device);
}

QC_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device);
QC_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t hStream, int *device)
{
	return stream_field(hStream, 1, FIELD_DEVICE, device);
}

QC_API cudaError_t cudaCtxResetPersistingL2Cache(void)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_req_ctx_reset_persisting_l2();
	return qc_ret(e);
}

/* The checks of an event recorded on or waited for by a stream, and its
 * External form (flag external), which is a node of type in a capture and
 * only that: 1 when they answer the call (*e), 0 to go on. */
static int event_op_answered(cudaStream_t stream, cudaEvent_t event, unsigned int flags, int ptds,
			     unsigned int external, enum cudaGraphNodeType type, cudaError_t *e)
{
	if (flags & ~external) {
		*e = cudaErrorInvalidValue;
		return 1;
	}
	if (!event || !qc_handle_known(QC_EVENT, (uint64_t)(uintptr_t)event) || !qc_stream_known(stream, ptds)) {
		*e = cudaErrorInvalidResourceHandle;
		return 1;
	}
	if (flags & external) {
		struct qc_node_op op = { .type = type, .event = event };

		if (!qc_capture_op(stream, ptds, &op, e))
			*e = cudaErrorIllegalState;
		return 1;
	}
	return 0;
}

static cudaError_t stream_wait_event(cudaStream_t stream, cudaEvent_t event, unsigned int flags, int ptds)
{
	cudaError_t e;

	QC_ENTER(e);
	if (event_op_answered(stream, event, flags, ptds, cudaEventWaitExternal, cudaGraphNodeTypeWaitEvent, &e) ||
	    qc_capture_event_wait(stream, ptds, event, &e))
		return qc_ret(e);
	return qc_ret(qc_post_stream_wait_event(qc_stream(stream, ptds), (uint64_t)(uintptr_t)event, 0));
}

cudaError_t qc_event_wait_now(cudaStream_t stream, cudaEvent_t event, int ptds)
{
	uint64_t ev = (uint64_t)(uintptr_t)event;

	if (!qc_handle_known(QC_EVENT, ev) || !qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	return qc_post_stream_wait_event(qc_stream(stream, ptds), ev, 0);
}

QC_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return stream_wait_event(stream, event, flags, 0);
}

QC_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags);
QC_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned int flags)
{
	return stream_wait_event(stream, event, flags, 1);
}

/* Stream attributes: the value crosses whole; the backend takes the fields
 * each attribute has and refuses attributes streams do not have. */
_Static_assert(sizeof(cudaStreamAttrValue) == QCUDA_ATTR_VALUE_BYTES, "a stream attribute value");

static cudaError_t stream_set_attr(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue *value,
				   int ptds)
{
	struct qcuda_args_stream_attr a = { .stream = qc_stream(stream, ptds), .attr = (uint32_t)attr };
	cudaError_t e = qc_ready_args(value != NULL);

	if (e != cudaSuccess)
		return e;
	memcpy(a.value, value, sizeof(a.value));
	return qc_req_stream_set_attr(&a);
}

static cudaError_t stream_get_attr(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue *value, int ptds)
{
	struct qcuda_args_stream_attr a = { .stream = qc_stream(stream, ptds), .attr = (uint32_t)attr };
	struct qcuda_out_stream_attr_value out;
	cudaError_t e = qc_ready_args(value != NULL);

	if (e != cudaSuccess)
		return e;
	e = qc_req_stream_get_attr(&a, &out);
	if (e == cudaSuccess)
		memcpy(value, out.value, sizeof(out.value));
	return e;
}

QC_API cudaError_t cudaStreamSetAttribute(cudaStream_t stream, cudaStreamAttrID attr, const cudaStreamAttrValue *value)
{
	return qc_ret(stream_set_attr(stream, attr, value, 0));
}

QC_API cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t stream, cudaStreamAttrID attr,
					       const cudaStreamAttrValue *value);
QC_API cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t stream, cudaStreamAttrID attr,
					       const cudaStreamAttrValue *value)
{
	return qc_ret(stream_set_attr(stream, attr, value, 1));
}

QC_API cudaError_t cudaStreamGetAttribute(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue *value)
{
	return qc_ret(stream_get_attr(stream, attr, value, 0));
}

QC_API cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue *value);
QC_API cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t stream, cudaStreamAttrID attr, cudaStreamAttrValue *value)
{
	return qc_ret(stream_get_attr(stream, attr, value, 1));
}

/*
 * The attributes a stream keeps for its launches, as cuStreamCopyAttributes
 * copies them: the access policy window, the synchronization policy and the
 * memory synchronization domain and its map. The priority is the stream's
 * own, fixed at its creation: it is not copied.
 */
static const cudaStreamAttrID copied_attrs[] = {
	cudaStreamAttributeAccessPolicyWindow,
	cudaStreamAttributeSynchronizationPolicy,
	cudaStreamAttributeMemSyncDomainMap,
	cudaStreamAttributeMemSyncDomain,
};

static cudaError_t stream_copy_attrs(cudaStream_t dst, cudaStream_t src, int ptds)
{
	cudaStreamAttrValue v;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!qc_stream_known(dst, ptds) || !qc_stream_known(src, ptds))
		return cudaErrorInvalidResourceHandle;
	for (size_t i = 0; i < sizeof(copied_attrs) / sizeof(copied_attrs[0]) && e == cudaSuccess; i++) {
		memset(&v, 0, sizeof(v));
		e = stream_get_attr(src, copied_attrs[i], &v, ptds);
		if (e == cudaSuccess)
			e = stream_set_attr(dst, copied_attrs[i], &v, ptds);
	}
	return e;
}

QC_API cudaError_t cudaStreamCopyAttributes(cudaStream_t dst, cudaStream_t src)
{
	return qc_ret(stream_copy_attrs(dst, src, 0));
}

QC_API cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src);
QC_API cudaError_t cudaStreamCopyAttributes_ptsz(cudaStream_t dst, cudaStream_t src)
{
	return qc_ret(stream_copy_attrs(dst, src, 1));
}

/* ----------------------------------------------------------------- events */

QC_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	uint64_t h = 0;
	cudaError_t e;

	if (!event)
		return qc_ret(cudaErrorInvalidValue);
	/* Interprocess events must disable timing (as CUDA checks). */
	if ((flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess)) ||
	    ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming)))
		return qc_ret(cudaErrorInvalidValue);
	e = qc_ready();
	if (e == cudaSuccess)
		e = qc_req_event_create(flags, &h);
	if (e == cudaSuccess)
		e = keep_handle(QC_EVENT, h, qc_req_event_destroy, 0);
	if (e != cudaSuccess)
		return qc_ret(e);
	*event = (cudaEvent_t)(uintptr_t)h;
	return cudaSuccess;
}

QC_API cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

/* One of the event calls that take just the event: NULL is refused here. */
static cudaError_t event_call(handle_req req, cudaEvent_t event)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && !event)
		e = cudaErrorInvalidResourceHandle;
	if (e == cudaSuccess)
		e = req((uint64_t)(uintptr_t)event);
	return e;
}

QC_API cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	cudaError_t e = event_call(qc_req_event_destroy, event);

	if (e == cudaSuccess) {
		qc_handle_remove(QC_EVENT, (uint64_t)(uintptr_t)event);
		qc_capture_forget_event(event);
	}
	return qc_ret(e);
}

QC_API cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	return qc_ret(qc_deferred(event_call(qc_req_event_sync, event)));
}

/* cudaSuccess or cudaErrorNotReady (which is not recorded as an error). */
QC_API cudaError_t cudaEventQuery(cudaEvent_t event)
{
	return qc_ret(event_call(qc_req_event_query, event));
}

static cudaError_t event_record(cudaEvent_t event, cudaStream_t stream, unsigned int flags, int ptds)
{
	cudaError_t e;

	QC_ENTER(e);
	if (event_op_answered(stream, event, flags, ptds, cudaEventRecordExternal, cudaGraphNodeTypeEventRecord, &e) ||
	    qc_capture_event_record(event, stream, ptds, &e))
		return qc_ret(e);
	return qc_ret(qc_post_event_record((uint64_t)(uintptr_t)event, qc_stream(stream, ptds)));
}

cudaError_t qc_event_record_now(cudaEvent_t event, cudaStream_t stream, int ptds)
{
	uint64_t ev = (uint64_t)(uintptr_t)event;

	if (!qc_handle_known(QC_EVENT, ev) || !qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	return qc_post_event_record(ev, qc_stream(stream, ptds));
}

QC_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(event, stream, 0, 0);
}

QC_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
QC_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream)
{
	return event_record(event, stream, 0, 1);
}

QC_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	return event_record(event, stream, flags, 0);
}

QC_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags);
QC_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t event, cudaStream_t stream, unsigned int flags)
{
	return event_record(event, stream, flags, 1);
}

QC_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	struct qcuda_out_event_elapsed out;
	cudaError_t e = qc_ready();
	union {
		uint32_t u;
		float f;
	} v;

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!start || !end)
		return qc_ret(cudaErrorInvalidResourceHandle);
	if (!ms)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_req_event_elapsed((uint64_t)(uintptr_t)start, (uint64_t)(uintptr_t)end, &out);
	if (e != cudaSuccess)
		return qc_ret(e);
	v.u = out.ms_bits;
	*ms = v.f;
	return cudaSuccess;
}
