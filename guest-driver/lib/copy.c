/* SPDX-License-Identifier: MIT */
/*
 * Copies and memsets. Memory that is host memory on both sides (pinned,
 * registered, managed) is copied and set by the CPU; device memory through
 * the backend, the host side of a copy being pinned by the driver (no
 * copies).
 */
#include <pthread.h>
#include <string.h>

#include "graph.h"

/* Waits for the work queued on a stream so far (for copies and memsets that
 * the library does itself, on guest memory). */
static cudaError_t stream_drain(cudaStream_t stream, int ptds)
{
	return qc_deferred(qc_req_stream_sync(qc_stream(stream, ptds)));
}

/* In a captured stream, a copy becomes a memcpy node (1; *e its answer). */
static int capture_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream, int ptds,
			cudaError_t *e)
{
	struct qc_node_op op = { .type = cudaGraphNodeTypeMemcpy };

	if (!qc_capture_active(stream, ptds))
		return 0;
	op.copy.dst = dst;
	op.copy.src = src;
	op.copy.width = op.copy.dpitch = op.copy.spitch = op.copy.dslice = op.copy.sslice = n;
	op.copy.height = op.copy.depth = 1;
	op.copy.kind = kind;
	return qc_capture_op(stream, ptds, &op, e);
}

static cudaError_t do_copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream,
			   int async, int ptds)
{
	uint64_t qs = qc_stream(stream, ptds);
	uint32_t as = async ? 1 : 0;
	struct qc_loc d, s;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (n == 0)
		return cudaSuccess;
	if ((unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (!dst || !src)
		return cudaErrorInvalidValue;
	e = qc_resolve(dst, n, kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice, &d);
	if (e == cudaSuccess)
		e = qc_resolve(src, n, kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice, &s);
	if (e != cudaSuccess)
		return e;
	if (async && capture_copy(dst, src, n, kind, stream, ptds, &e))
		return e;

	if (d.device && s.device) {
		if (async)
			return qc_stream_known(stream, ptds) ? qc_post_memcpy_dtod(d.dptr, s.dptr, n, qs, as)
							     : cudaErrorInvalidResourceHandle;
		return qc_deferred(qc_req_memcpy_dtod(d.dptr, s.dptr, n, qs, as));
	}
	/* Copies from or to guest memory go at once (the driver pins the pages
	 * for the call); a synchronous one is where posted work's errors show.
	 * The guest side's device pointer is unused: 0. */
	if (d.device) {
		e = qc_req_memcpy_htod(d.dptr, 0, n, qs, as, s.hptr, n);
		return async ? e : qc_deferred(e);
	}
	if (s.device) {
		e = qc_req_memcpy_dtoh(0, s.dptr, n, qs, as, d.hptr, n);
		return async ? e : qc_deferred(e);
	}
	/* Guest memory on both sides: done here, after the stream's earlier work
	 * (a kernel may still be writing mapped or managed memory). */
	e = stream_drain(stream, ptds);
	if (e == cudaSuccess)
		memmove(d.hptr, s.hptr, n);
	return e;
}

cudaError_t qc_memcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t stream, int async,
		      int ptds)
{
	return do_copy(dst, src, n, kind, stream, async, ptds);
}

QC_API cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return qc_ret(do_copy(dst, src, count, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind)
{
	return qc_ret(do_copy(dst, src, count, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
				   cudaStream_t stream)
{
	return qc_ret(do_copy(dst, src, count, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
					cudaStream_t stream);
QC_API cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
					cudaStream_t stream)
{
	return qc_ret(do_copy(dst, src, count, kind, stream, 1, 1));
}

/*
 * Peer copies. Device memory is one address space (unified addressing), so
 * a copy between two devices' memory is a device-to-device copy once both
 * devices are checked; with one device, device 0 to device 0 is one.
 */
static cudaError_t peer_copy(void *dst, int dst_dev, const void *src, int src_dev, size_t n, cudaStream_t stream,
			     int async, int ptds)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	if (dst_dev < 0 || dst_dev >= qc.device_count || src_dev < 0 || src_dev >= qc.device_count)
		return cudaErrorInvalidDevice;
	return do_copy(dst, src, n, cudaMemcpyDeviceToDevice, stream, async, ptds);
}

QC_API cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src, int srcDevice, size_t count)
{
	return qc_ret(peer_copy(dst, dstDevice, src, srcDevice, count, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src, int srcDevice, size_t count,
				       cudaStream_t stream)
{
	return qc_ret(peer_copy(dst, dstDevice, src, srcDevice, count, stream, 1, 0));
}

/*
 * cudaMemcpyBatchAsync: each copy as its own cudaMemcpyAsync (kind
 * cudaMemcpyDefault: pointers say where they are), in order, after every
 * copy's attributes are checked. The access order, location hints and the
 * overlap flag are hints here: a copy from guest memory has read it by the
 * time its call returns, which is what cudaMemcpySrcAccessOrderDuringApiCall
 * asks. The legacy NULL stream is refused, as CUDA 13 says. *fail: the copy
 * that failed, SIZE_MAX for an error of no one copy.
 */
cudaError_t qc_memcpy_batch(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t n,
			    const struct cudaMemcpyAttributes *attrs, const size_t *idxs, size_t nattrs,
			    cudaStream_t stream, int ptds, size_t *fail)
{
	cudaError_t e = qc_ready();

	*fail = SIZE_MAX;
	if (e != cudaSuccess)
		return e;
	if (!dsts || !srcs || !sizes || !n || !attrs || !idxs || !nattrs || nattrs > n || idxs[0] != 0 ||
	    stream == cudaStreamLegacy || (!stream && !ptds))
		return cudaErrorInvalidValue;
	for (size_t k = 0; k < nattrs; k++)
		if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= n ||
		    attrs[k].srcAccessOrder < cudaMemcpySrcAccessOrderStream ||
		    attrs[k].srcAccessOrder > cudaMemcpySrcAccessOrderAny ||
		    (attrs[k].flags & ~(unsigned int)cudaMemcpyFlagPreferOverlapWithCompute))
			return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	for (size_t i = 0; i < n && e == cudaSuccess; i++) {
		e = do_copy(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, stream, 1, ptds);
		if (e != cudaSuccess)
			*fail = i;
	}
	return e;
}

static cudaError_t batch_copy(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t n,
			      const struct cudaMemcpyAttributes *attrs, const size_t *idxs, size_t nattrs,
			      cudaStream_t stream, int ptds)
{
	size_t fail;

	return qc_memcpy_batch(dsts, srcs, sizes, n, attrs, idxs, nattrs, stream, ptds, &fail);
}

QC_API cudaError_t cudaMemcpyBatchAsync(void *const *dsts, const void *const *srcs, const size_t *sizes, size_t count,
					struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
					cudaStream_t stream)
{
	return qc_ret(batch_copy(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 0));
}

QC_API cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
					     size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
					     size_t numAttrs, cudaStream_t stream);
QC_API cudaError_t cudaMemcpyBatchAsync_ptsz(void *const *dsts, const void *const *srcs, const size_t *sizes,
					     size_t count, struct cudaMemcpyAttributes *attrs, size_t *attrsIdxs,
					     size_t numAttrs, cudaStream_t stream)
{
	return qc_ret(batch_copy(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, stream, 1));
}

static cudaError_t do_memset(void *dst, int value, size_t n, cudaStream_t stream, int async, int ptds)
{
	uint64_t qs = qc_stream(stream, ptds);
	uint32_t v = (uint32_t)value & 0xff; /* CUDA sets bytes: the low 8 bits */
	struct qc_loc d;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (n == 0)
		return cudaSuccess;
	if (!dst)
		return cudaErrorInvalidValue;
	e = qc_resolve(dst, n, 1, &d);
	if (e != cudaSuccess)
		return e;
	if (async && qc_capture_active(stream, ptds)) { /* a memset node instead */
		struct qc_node_op op = { .type = cudaGraphNodeTypeEmpty };

		e = qc_node_op_memset(&op, dst, n, v, 1, n, 1);
		if (e == cudaSuccess && qc_capture_op(stream, ptds, &op, &e))
			return e;
		qc_node_op_free(&op);
		if (e != cudaSuccess)
			return e;
	}
	if (!d.device) {
		e = stream_drain(stream, ptds);
		if (e == cudaSuccess)
			memset(d.hptr, value, n);
		return e;
	}
	if (async)
		return qc_stream_known(stream, ptds) ? qc_post_memset(d.dptr, n, qs, v, 1)
						     : cudaErrorInvalidResourceHandle;
	return qc_req_memset(d.dptr, n, qs, v, 0);
}

cudaError_t qc_memset(void *dst, int value, size_t n, cudaStream_t stream, int async, int ptds)
{
	return do_memset(dst, value, n, stream, async, ptds);
}

QC_API cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return qc_ret(do_memset(devPtr, value, count, NULL, 0, 0));
}

QC_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count);
QC_API cudaError_t cudaMemset_ptds(void *devPtr, int value, size_t count)
{
	return qc_ret(do_memset(devPtr, value, count, NULL, 0, 1));
}

QC_API cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return qc_ret(do_memset(devPtr, value, count, stream, 1, 0));
}

QC_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream);
QC_API cudaError_t cudaMemsetAsync_ptsz(void *devPtr, int value, size_t count, cudaStream_t stream)
{
	return qc_ret(do_memset(devPtr, value, count, stream, 1, 1));
}
