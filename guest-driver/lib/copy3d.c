/* SPDX-License-Identifier: MIT */
/*
 * 2D/3D copies and memsets: between guest memory, linear device memory and
 * arrays (array.c).
 *
 * A 2D/3D copy between guest memory and the device is one request
 * (MEMCPY_3D_HTOD/DTOH): the guest side's box crosses as the request's data
 * from its first byte to its last (the driver pins those pages, no copy),
 * the arguments describe both sides (pitch, rows per slice, position,
 * extent) and the backend walks the rows, checking both sides. Between
 * device places (linear memory, arrays) it is MEMCPY_3D_DTOD, posted when
 * asynchronous. A copy whose two sides are contiguous linear memory is an
 * ordinary 1D copy; guest memory on both sides is copied here.
 */
#include <stdlib.h>
#include <string.h>

#include "graph.h"
#include "qc_array.h"

/* ---------------------------------------------------------------- copies */

/* A side, resolved: an array, device memory or guest memory (from the box's first byte). */
struct rside {
	uint32_t kind; /* QCUDA_MEM_* */
	struct qc_array *array;
	struct qc_loc loc;
	uint64_t first; /* the box's first byte (pointer sides) */
	size_t span; /* bytes from it to the last */
	size_t pitch, rows;
};

static cudaError_t side_of(const struct qc_side *s, size_t w, size_t h, size_t d, int need_device, struct rside *out)
{
	size_t a, b, off, span;

	memset(out, 0, sizeof(*out));
	if (s->array) {
		struct qc_array *arr;
		cudaError_t e = qc_live_array(s->array, &arr);
		size_t ah = arr->height ? arr->height : 1, ad = arr->depth ? arr->depth : 1;

		if (e != cudaSuccess)
			return e;
		if (s->x % arr->elem || w % arr->elem || s->x > arr->width * arr->elem ||
		    w > arr->width * arr->elem - s->x || s->y > ah || h > ah - s->y || s->z > ad || d > ad - s->z)
			return cudaErrorInvalidValue;
		out->kind = QCUDA_MEM_ARRAY;
		out->array = arr;
		return cudaSuccess;
	}
	if ((h > 1 || d > 1) && (s->pitch < w || s->x > s->pitch - w))
		return cudaErrorInvalidPitchValue;
	if ((d > 1 || s->z) && (s->rows < h || s->y > s->rows - h))
		return cudaErrorInvalidValue;
	if (__builtin_mul_overflow(s->z, s->pitch, &a) || __builtin_mul_overflow(a, s->rows, &a) ||
	    __builtin_mul_overflow(s->y, s->pitch, &b) || __builtin_add_overflow(a, b, &off) ||
	    __builtin_add_overflow(off, s->x, &off) || __builtin_mul_overflow(d - 1, s->pitch, &a) ||
	    __builtin_mul_overflow(a, s->rows, &a) || __builtin_mul_overflow(h - 1, s->pitch, &b) ||
	    __builtin_add_overflow(a, b, &span) || __builtin_add_overflow(span, w, &span) ||
	    (uintptr_t)s->ptr + off < (uintptr_t)s->ptr)
		return cudaErrorInvalidValue;
	if (!s->ptr)
		return cudaErrorInvalidValue;
	out->first = (uintptr_t)s->ptr + off;
	out->span = span;
	out->pitch = s->pitch;
	out->rows = s->rows;
	{
		cudaError_t e = qc_resolve((const void *)(uintptr_t)out->first, span, need_device, &out->loc);

		if (e != cudaSuccess)
			return e;
	}
	out->kind = out->loc.device ? QCUDA_MEM_LINEAR : QCUDA_MEM_HOST;
	return cudaSuccess;
}

/* Guest memory on both sides: row by row here (after the stream's work). */
static void host_rows(const struct rside *d, const struct rside *s, size_t w, size_t h, size_t n)
{
	for (size_t z = 0; z < n; z++)
		for (size_t y = 0; y < h; y++)
			memmove((char *)d->loc.hptr + z * d->pitch * d->rows + y * d->pitch,
				(const char *)s->loc.hptr + z * s->pitch * s->rows + y * s->pitch, w);
}

static void fill_side(const struct rside *r, const struct qc_side *s, __le64 *h, __le64 *pitch, __le64 *rows, __le64 *x,
		      __le64 *y, __le64 *z)
{
	if (r->kind == QCUDA_MEM_ARRAY) {
		*h = r->array->handle, *pitch = 0, *rows = 0, *x = s->x, *y = s->y, *z = s->z;
	} else {
		/* Pointer sides go from the box's first byte. */
		*h = r->kind == QCUDA_MEM_LINEAR ? r->loc.dptr : 0;
		*pitch = r->pitch, *rows = r->rows, *x = 0, *y = 0, *z = 0;
	}
}

cudaError_t qc_copy3d(const struct qc_side *dst, const struct qc_side *src, size_t w, size_t h, size_t d,
		      enum cudaMemcpyKind kind, cudaStream_t stream, int async, int ptds)
{
	struct qcuda_args_memcpy_3d a = { 0 };
	struct rside ds, ss;
	uint64_t qs = qc_stream(stream, ptds);
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if ((unsigned)kind > cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	if (w == 0 || h == 0 || d == 0)
		return cudaSuccess;
	e = side_of(dst, w, h, d, kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice, &ds);
	if (e == cudaSuccess)
		e = side_of(src, w, h, d, kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice, &ss);
	if (e != cudaSuccess)
		return e;

	if (ds.kind == QCUDA_MEM_HOST && ss.kind == QCUDA_MEM_HOST) {
		e = qc_deferred(qc_req_stream_sync(qs));
		if (e == cudaSuccess)
			host_rows(&ds, &ss, w, h, d);
		return e;
	}
	/* Contiguous linear memory on both sides: a 1D copy. */
	if (ds.kind != QCUDA_MEM_ARRAY && ss.kind != QCUDA_MEM_ARRAY &&
	    ((h == 1 && d == 1) || (ds.pitch == w && ss.pitch == w && (d == 1 || (ds.rows == h && ss.rows == h)))))
		return qc_memcpy((void *)(uintptr_t)ds.first, (const void *)(uintptr_t)ss.first, w * h * d,
				 kind == cudaMemcpyDefault ? cudaMemcpyDefault : kind, stream, async, ptds);

	/* Not a node a captured stream can hold yet (a contiguous copy is, above). */
	if (async && qc_capture_active(stream, ptds))
		return cudaErrorStreamCaptureUnsupported;
	/* An array and guest memory of more than a chunk: requests of whole rows
	 * (slices where they fit), each at most QCUDA_CHUNK, so that the driver
	 * never cuts an element of a row in two (a row of an array is at most
	 * 2 MiB). */
	if ((ds.kind == QCUDA_MEM_ARRAY || ss.kind == QCUDA_MEM_ARRAY) &&
	    (ss.kind == QCUDA_MEM_HOST	 ? ss.span
	     : ds.kind == QCUDA_MEM_HOST ? ds.span
					 : 0) > QCUDA_CHUNK) {
		const struct rside *hs = ss.kind == QCUDA_MEM_HOST ? &ss : &ds;
		size_t slice = hs->pitch * hs->rows; /* no overflow: side_of computed the span */
		struct qc_side d2 = *dst, s2 = *src;

		if (d > 1 && slice <= QCUDA_CHUNK) {
			size_t n = QCUDA_CHUNK / slice;

			for (size_t z = 0; e == cudaSuccess && z < d; z += n) {
				d2.z = dst->z + z, s2.z = src->z + z;
				e = qc_copy3d(&d2, &s2, w, h, n < d - z ? n : d - z, kind, stream, async, ptds);
			}
			return e;
		}
		size_t k = hs->pitch && hs->pitch <= QCUDA_CHUNK ? QCUDA_CHUNK / hs->pitch : 1;

		for (size_t z = 0; e == cudaSuccess && z < d; z++)
			for (size_t y = 0; e == cudaSuccess && y < h; y += k) {
				d2.z = dst->z + z, s2.z = src->z + z;
				d2.y = dst->y + y, s2.y = src->y + y;
				e = qc_copy3d(&d2, &s2, w, k < h - y ? k : h - y, 1, kind, stream, async, ptds);
			}
		return e;
	}
	fill_side(&ds, dst, &a.dst, &a.dst_pitch, &a.dst_rows, &a.dst_x, &a.dst_y, &a.dst_z);
	fill_side(&ss, src, &a.src, &a.src_pitch, &a.src_rows, &a.src_x, &a.src_y, &a.src_z);
	a.width = w, a.height = h, a.depth = d;
	a.stream = qs;
	a.dst_kind = ds.kind, a.src_kind = ss.kind;
	a.async = async ? 1 : 0;
	if (ss.kind == QCUDA_MEM_HOST || ds.kind == QCUDA_MEM_HOST) {
		int to_dev = ss.kind == QCUDA_MEM_HOST;
		const struct rside *hs = to_dev ? &ss : &ds;
		size_t dense = w * h * d; /* <= the span: no overflow */
		void *data = hs->loc.hptr, *bounce = NULL;
		uint64_t len = hs->span;

		/* A sparse box (a column of a wide image): its rows go through a
		 * dense buffer here rather than pinning every page between them. */
		if (hs->span - dense > (1u << 20) && hs->span / 2 > dense && (bounce = malloc(dense))) {
			for (size_t z = 0; to_dev && z < d; z++)
				for (size_t y = 0; y < h; y++)
					memcpy((char *)bounce + (z * h + y) * w,
					       (const char *)hs->loc.hptr + z * hs->pitch * hs->rows + y * hs->pitch,
					       w);
			if (to_dev)
				a.src_pitch = w, a.src_rows = h;
			else
				a.dst_pitch = w, a.dst_rows = h;
			data = bounce, len = dense;
		}
		a.size = len;
		e = qc_call(&(struct qc_req){ .cmd = to_dev ? QCUDA_CMD_MEMCPY_3D_HTOD : QCUDA_CMD_MEMCPY_3D_DTOH,
					      .args = &a,
					      .args_len = sizeof(a),
					      .dir = to_dev ? QT_TO_DEVICE : QT_FROM_DEVICE,
					      .data = data,
					      .data_len = len });
		if (bounce && !to_dev && e == cudaSuccess)
			for (size_t z = 0; z < d; z++)
				for (size_t y = 0; y < h; y++)
					memcpy((char *)hs->loc.hptr + z * hs->pitch * hs->rows + y * hs->pitch,
					       (const char *)bounce + (z * h + y) * w, w);
		free(bounce);
		return async ? e : qc_deferred(e);
	}
	if (async)
		return qc_stream_known(stream, ptds) ? qc_post(QCUDA_CMD_MEMCPY_3D_DTOD, &a, sizeof(a))
						     : cudaErrorInvalidResourceHandle;
	return qc_deferred(
		qc_call(&(struct qc_req){ .cmd = QCUDA_CMD_MEMCPY_3D_DTOD, .args = &a, .args_len = sizeof(a) }));
}

/* Pointer sides of a 2D copy. */
#define PSIDE(p, pt) ((struct qc_side){ .ptr = (p), .pitch = (pt), .rows = 0 })

static cudaError_t copy2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			  enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds)
{
	struct qc_side d = PSIDE(dst, dpitch), r = PSIDE(src, spitch);

	d.rows = r.rows = height;
	return qc_copy3d(&d, &r, width, height, 1, kind, s, async, ptds);
}

QC_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
				enum cudaMemcpyKind kind)
{
	return qc_ret(copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				     size_t height, enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpy2D_ptds(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				     size_t height, enum cudaMemcpyKind kind)
{
	return qc_ret(copy2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				     size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(copy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
					  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream);
QC_API cudaError_t cudaMemcpy2DAsync_ptsz(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
					  size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(copy2d(dst, dpitch, src, spitch, width, height, kind, stream, 1, 1));
}

/* An array side at (wOffset bytes, hOffset). */
static cudaError_t aside(cudaArray_const_t array, size_t x, size_t y, struct qc_side *out)
{
	struct qc_array *a;
	cudaError_t e = qc_live_array(array, &a);

	if (e == cudaSuccess)
		*out = (struct qc_side){ .array = a, .x = x, .y = y };
	return e;
}

static cudaError_t to_array2d(cudaArray_t dst, size_t wo, size_t ho, const void *src, size_t spitch, size_t width,
			      size_t height, enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds)
{
	struct qc_side d, r = PSIDE(src, spitch);
	cudaError_t e = aside(dst, wo, ho, &d);

	r.rows = height;
	return e != cudaSuccess ? e : qc_copy3d(&d, &r, width, height, 1, kind, s, async, ptds);
}

static cudaError_t from_array2d(void *dst, size_t dpitch, cudaArray_const_t src, size_t wo, size_t ho, size_t width,
				size_t height, enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds)
{
	struct qc_side d = PSIDE(dst, dpitch), r;
	cudaError_t e = aside(src, wo, ho, &r);

	d.rows = height;
	return e != cudaSuccess ? e : qc_copy3d(&d, &r, width, height, 1, kind, s, async, ptds);
}

/* The 2D array copies under each ABI: name, parameters, call. */
#define ARRAY2D(name, params, call)     \
	QC_API cudaError_t name params; \
	QC_API cudaError_t name params  \
	{                               \
		return qc_ret(call);    \
	}

ARRAY2D(cudaMemcpy2DToArray,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height,
	 enum cudaMemcpyKind kind),
	to_array2d(dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, 0, 0))
ARRAY2D(cudaMemcpy2DToArray_ptds,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height,
	 enum cudaMemcpyKind kind),
	to_array2d(dst, wOffset, hOffset, src, spitch, width, height, kind, NULL, 0, 1))
ARRAY2D(cudaMemcpy2DToArrayAsync,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height,
	 enum cudaMemcpyKind kind, cudaStream_t stream),
	to_array2d(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, 1, 0))
ARRAY2D(cudaMemcpy2DToArrayAsync_ptsz,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t spitch, size_t width, size_t height,
	 enum cudaMemcpyKind kind, cudaStream_t stream),
	to_array2d(dst, wOffset, hOffset, src, spitch, width, height, kind, stream, 1, 1))
ARRAY2D(cudaMemcpy2DFromArray,
	(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height,
	 enum cudaMemcpyKind kind),
	from_array2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, NULL, 0, 0))
ARRAY2D(cudaMemcpy2DFromArray_ptds,
	(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height,
	 enum cudaMemcpyKind kind),
	from_array2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, NULL, 0, 1))
ARRAY2D(cudaMemcpy2DFromArrayAsync,
	(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height,
	 enum cudaMemcpyKind kind, cudaStream_t stream),
	from_array2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, 1, 0))
ARRAY2D(cudaMemcpy2DFromArrayAsync_ptsz,
	(void *dst, size_t dpitch, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t width, size_t height,
	 enum cudaMemcpyKind kind, cudaStream_t stream),
	from_array2d(dst, dpitch, src, wOffset, hOffset, width, height, kind, stream, 1, 1))

static cudaError_t array_to_array2d(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs,
				    size_t width, size_t height, enum cudaMemcpyKind kind, int ptds)
{
	struct qc_side d, r;
	cudaError_t e = aside(dst, wd, hd, &d);

	if (e == cudaSuccess)
		e = aside(src, ws, hs, &r);
	if (e == cudaSuccess && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
		e = cudaErrorInvalidMemcpyDirection;
	return e != cudaSuccess ? e : qc_copy3d(&d, &r, width, height, 1, kind, NULL, 0, ptds);
}

ARRAY2D(cudaMemcpy2DArrayToArray,
	(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
	 size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind),
	array_to_array2d(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, 0))
ARRAY2D(cudaMemcpy2DArrayToArray_ptds,
	(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
	 size_t hOffsetSrc, size_t width, size_t height, enum cudaMemcpyKind kind),
	array_to_array2d(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, width, height, kind, 1))

static size_t min3(size_t a, size_t b, size_t c)
{
	size_t m = a < b ? a : b;

	return m < c ? m : c;
}

/*
 * The deprecated cudaMemcpyArrayToArray: count bytes from (ws bytes, hs) of
 * src on, in row order, to dst from (wd bytes, hd) on. Pieces end where a
 * row of either array does; where both start rows of one length, whole rows
 * go as one 2D copy.
 */
static cudaError_t array_to_array(cudaArray_t dst, size_t wd, size_t hd, cudaArray_const_t src, size_t ws, size_t hs,
				  size_t count, enum cudaMemcpyKind kind, int ptds)
{
	struct qc_array *da, *sa;
	size_t drow, srow, done = 0;
	cudaError_t e = qc_live_array(dst, &da);

	if (e == cudaSuccess)
		e = qc_live_array(src, &sa);
	if (e == cudaSuccess && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
		e = cudaErrorInvalidMemcpyDirection;
	if (e != cudaSuccess)
		return e;
	drow = da->width * da->elem, srow = sa->width * sa->elem;
	if (count && (wd >= drow || ws >= srow))
		return cudaErrorInvalidValue;
	while (e == cudaSuccess && done < count) {
		struct qc_side d = { .array = da, .x = wd, .y = hd }, r = { .array = sa, .x = ws, .y = hs };
		size_t w, h = 1;

		if (!wd && !ws && drow == srow && count - done >= drow)
			w = drow, h = (count - done) / drow;
		else
			w = min3(drow - wd, srow - ws, count - done);
		e = qc_copy3d(&d, &r, w, h, 1, kind, NULL, 0, ptds);
		done += w * h;
		wd += w, ws += w;
		if (wd == drow)
			wd = 0, hd += h;
		if (ws == srow)
			ws = 0, hs += h;
	}
	return e;
}

ARRAY2D(cudaMemcpyArrayToArray,
	(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
	 size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind),
	array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind, 0))
ARRAY2D(cudaMemcpyArrayToArray_ptds,
	(cudaArray_t dst, size_t wOffsetDst, size_t hOffsetDst, cudaArray_const_t src, size_t wOffsetSrc,
	 size_t hOffsetSrc, size_t count, enum cudaMemcpyKind kind),
	array_to_array(dst, wOffsetDst, hOffsetDst, src, wOffsetSrc, hOffsetSrc, count, kind, 1))

/*
 * The deprecated 1D array copies: count bytes from (wOffset bytes, hOffset)
 * on, in row order (a partial first row, whole rows, a partial last row).
 */
static cudaError_t linear_array(cudaArray_const_t array, size_t wo, size_t ho, void *mem, size_t count, int to_array,
				enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds)
{
	struct qc_array *a;
	cudaError_t e = qc_live_array(array, &a);

	return e != cudaSuccess ? e : qc_linear_array(a, wo, ho, mem, count, to_array, kind, s, async, ptds);
}

cudaError_t qc_linear_array(struct qc_array *a, size_t wo, size_t ho, void *mem, size_t count, int to_array,
			    enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds)
{
	size_t rowb, done = 0;
	cudaError_t e = cudaSuccess;

	rowb = a->width * a->elem;
	if (wo >= rowb && count)
		return cudaErrorInvalidValue;
	while (e == cudaSuccess && done < count) {
		struct qc_side as = { .array = a, .x = wo, .y = ho }, ms;
		size_t w, h;

		if (wo == 0 && count - done >= rowb) {
			w = rowb;
			h = (count - done) / rowb;
		} else {
			w = rowb - wo < count - done ? rowb - wo : count - done;
			h = 1;
		}
		ms = (struct qc_side){ .ptr = (char *)mem + done, .pitch = w, .rows = h };
		e = to_array ? qc_copy3d(&as, &ms, w, h, 1, kind, s, async, ptds)
			     : qc_copy3d(&ms, &as, w, h, 1, kind, s, async, ptds);
		done += w * h;
		wo = (wo + w) % rowb;
		ho += (wo == 0) ? h : 0;
	}
	return e;
}

ARRAY2D(cudaMemcpyToArray,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind),
	linear_array(dst, wOffset, hOffset, (void *)src, count, 1, kind, NULL, 0, 0))
ARRAY2D(cudaMemcpyToArray_ptds,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind),
	linear_array(dst, wOffset, hOffset, (void *)src, count, 1, kind, NULL, 0, 1))
ARRAY2D(cudaMemcpyToArrayAsync,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind,
	 cudaStream_t stream),
	linear_array(dst, wOffset, hOffset, (void *)src, count, 1, kind, stream, 1, 0))
ARRAY2D(cudaMemcpyToArrayAsync_ptsz,
	(cudaArray_t dst, size_t wOffset, size_t hOffset, const void *src, size_t count, enum cudaMemcpyKind kind,
	 cudaStream_t stream),
	linear_array(dst, wOffset, hOffset, (void *)src, count, 1, kind, stream, 1, 1))
ARRAY2D(cudaMemcpyFromArray,
	(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind),
	linear_array(src, wOffset, hOffset, dst, count, 0, kind, NULL, 0, 0))
ARRAY2D(cudaMemcpyFromArray_ptds,
	(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind),
	linear_array(src, wOffset, hOffset, dst, count, 0, kind, NULL, 0, 1))
ARRAY2D(cudaMemcpyFromArrayAsync,
	(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind,
	 cudaStream_t stream),
	linear_array(src, wOffset, hOffset, dst, count, 0, kind, stream, 1, 0))
ARRAY2D(cudaMemcpyFromArrayAsync_ptsz,
	(void *dst, cudaArray_const_t src, size_t wOffset, size_t hOffset, size_t count, enum cudaMemcpyKind kind,
	 cudaStream_t stream),
	linear_array(src, wOffset, hOffset, dst, count, 0, kind, stream, 1, 1))

/* One side of a 3D copy: an array's (its x in elements, made bytes) or a
 * pitched pointer's. */
static struct qc_side parms_side(struct qc_array *a, struct cudaPos pos, struct cudaPitchedPtr ptr)
{
	if (a)
		return (struct qc_side){ .array = a, .x = pos.x * a->elem, .y = pos.y, .z = pos.z };
	return (struct qc_side){
		.ptr = ptr.ptr, .pitch = ptr.pitch, .rows = ptr.ysize, .x = pos.x, .y = pos.y, .z = pos.z
	};
}

/* cudaMemcpy3D: positions and the extent's width are in elements of the
 * array taking part (bytes without one). */
static cudaError_t copy3d_parms(const struct cudaMemcpy3DParms *p, cudaStream_t s, int async, int ptds)
{
	struct qc_side d, r;
	struct qc_array *da = NULL, *sa = NULL;
	size_t elem = 1;
	cudaError_t e;

	if (!p)
		return cudaErrorInvalidValue;
	if ((p->dstArray && p->dstPtr.ptr) || (p->srcArray && p->srcPtr.ptr) || (!p->dstArray && !p->dstPtr.ptr) ||
	    (!p->srcArray && !p->srcPtr.ptr))
		return cudaErrorInvalidValue;
	if (p->dstArray && (e = qc_live_array(p->dstArray, &da)) != cudaSuccess)
		return e;
	if (p->srcArray && (e = qc_live_array(p->srcArray, &sa)) != cudaSuccess)
		return e;
	if (sa)
		elem = sa->elem;
	else if (da)
		elem = da->elem;
	if (p->extent.width > SIZE_MAX / elem)
		return cudaErrorInvalidValue;
	d = parms_side(da, p->dstPos, p->dstPtr);
	r = parms_side(sa, p->srcPos, p->srcPtr);
	if ((da && p->dstPos.x > SIZE_MAX / da->elem) || (sa && p->srcPos.x > SIZE_MAX / sa->elem))
		return cudaErrorInvalidValue;
	return qc_copy3d(&d, &r, p->extent.width * elem, p->extent.height, p->extent.depth, p->kind, s, async, ptds);
}

QC_API cudaError_t cudaMemcpy3D(const struct cudaMemcpy3DParms *p)
{
	return qc_ret(copy3d_parms(p, NULL, 0, 0));
}

ARRAY2D(cudaMemcpy3D_ptds, (const struct cudaMemcpy3DParms *p), copy3d_parms(p, NULL, 0, 1))

QC_API cudaError_t cudaMemcpy3DAsync(const struct cudaMemcpy3DParms *p, cudaStream_t stream)
{
	return qc_ret(copy3d_parms(p, stream, 1, 0));
}

ARRAY2D(cudaMemcpy3DAsync_ptsz, (const struct cudaMemcpy3DParms *p, cudaStream_t stream), copy3d_parms(p, stream, 1, 1))

/* Device memory is one address space (unified addressing), and a guest
 * process has one device at a time: a 3D copy between two existing
 * devices' memory is cudaMemcpy3D's device-to-device copy. */
static cudaError_t copy3d_peer(const struct cudaMemcpy3DPeerParms *p, cudaStream_t s, int async, int ptds)
{
	struct cudaMemcpy3DParms q;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	if (!p)
		return cudaErrorInvalidValue;
	if (p->srcDevice < 0 || p->srcDevice >= qc.device_count || p->dstDevice < 0 || p->dstDevice >= qc.device_count)
		return cudaErrorInvalidDevice;
	memset(&q, 0, sizeof(q));
	q.srcArray = p->srcArray, q.srcPos = p->srcPos, q.srcPtr = p->srcPtr;
	q.dstArray = p->dstArray, q.dstPos = p->dstPos, q.dstPtr = p->dstPtr;
	q.extent = p->extent;
	q.kind = cudaMemcpyDeviceToDevice;
	return copy3d_parms(&q, s, async, ptds);
}

ARRAY2D(cudaMemcpy3DPeer, (const struct cudaMemcpy3DPeerParms *p), copy3d_peer(p, NULL, 0, 0))
ARRAY2D(cudaMemcpy3DPeer_ptds, (const struct cudaMemcpy3DPeerParms *p), copy3d_peer(p, NULL, 0, 1))
ARRAY2D(cudaMemcpy3DPeerAsync, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream),
	copy3d_peer(p, stream, 1, 0))
ARRAY2D(cudaMemcpy3DPeerAsync_ptsz, (const struct cudaMemcpy3DPeerParms *p, cudaStream_t stream),
	copy3d_peer(p, stream, 1, 1))

/* One operand of a cudaMemcpy3DBatchAsync copy as a side: a pointer (rows
 * of rowLength elements, layers of layerHeight rows; 0: as tight as the
 * extent) or an array at an offset in elements. elem: the copy's element. */
static cudaError_t batch_side(const struct cudaMemcpy3DOperand *o, const struct cudaExtent *ext, size_t elem,
			      struct qc_side *out)
{
	struct qc_array *a;
	size_t row;
	cudaError_t e;

	switch (o->type) {
	case cudaMemcpyOperandTypePointer:
		if ((o->op.ptr.rowLength && o->op.ptr.rowLength < ext->width) ||
		    (o->op.ptr.layerHeight && o->op.ptr.layerHeight < ext->height))
			return cudaErrorInvalidValue;
		if (__builtin_mul_overflow(o->op.ptr.rowLength ? o->op.ptr.rowLength : ext->width, elem, &row))
			return cudaErrorInvalidValue;
		*out = (struct qc_side){ .ptr = o->op.ptr.ptr,
					 .pitch = row,
					 .rows = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : ext->height };
		return cudaSuccess;
	case cudaMemcpyOperandTypeArray:
		if ((e = qc_live_array(o->op.array.array, &a)) != cudaSuccess)
			return e;
		if (o->op.array.offset.x > SIZE_MAX / a->elem)
			return cudaErrorInvalidValue;
		*out = (struct qc_side){ .array = a,
					 .x = o->op.array.offset.x * a->elem,
					 .y = o->op.array.offset.y,
					 .z = o->op.array.offset.z };
		return cudaSuccess;
	default:
		return cudaErrorInvalidValue;
	}
}

/* An operand's array, or NULL for a pointer (or a bad operand: batch_side says). */
static struct qc_array *batch_array(const struct cudaMemcpy3DOperand *o)
{
	return o->type == cudaMemcpyOperandTypeArray ? qc_array_lookup(o->op.array.array) : NULL;
}

/* One copy of a batch, checked, as two sides and a width in bytes: the
 * extent is in elements, a byte for pointers on both sides, else the
 * array's (two arrays must have the same). The access order and the flag
 * are hints here. */
static cudaError_t batch_prepare(const struct cudaMemcpy3DBatchOp *op, struct qc_side *d, struct qc_side *r,
				 size_t *width)
{
	struct qc_array *sa = batch_array(&op->src), *da = batch_array(&op->dst);
	size_t elem = sa ? sa->elem : da ? da->elem : 1;
	cudaError_t e;

	if (!op->extent.width || !op->extent.height || !op->extent.depth ||
	    op->srcAccessOrder < cudaMemcpySrcAccessOrderStream || op->srcAccessOrder > cudaMemcpySrcAccessOrderAny ||
	    (op->flags & ~(unsigned int)cudaMemcpyFlagPreferOverlapWithCompute) || (sa && da && sa->elem != da->elem) ||
	    op->extent.width > SIZE_MAX / elem)
		return cudaErrorInvalidValue;
	e = batch_side(&op->src, &op->extent, elem, r);
	if (e == cudaSuccess)
		e = batch_side(&op->dst, &op->extent, elem, d);
	*width = op->extent.width * elem;
	return e;
}

/* Every copy is checked before the first is queued; each goes as its own
 * cudaMemcpy3DAsync. The legacy NULL stream is refused, as CUDA 13 says.
 * *fail: the copy that failed, SIZE_MAX for an error of no one copy. */
cudaError_t qc_memcpy3d_batch(size_t n, const struct cudaMemcpy3DBatchOp *ops, unsigned long long flags, cudaStream_t s,
			      int ptds, size_t *fail)
{
	struct qc_side d, r;
	size_t w;
	cudaError_t e = qc_ready();

	*fail = SIZE_MAX;
	if (e != cudaSuccess)
		return e;
	if (!n || !ops || flags || s == cudaStreamLegacy || (!s && !ptds))
		return cudaErrorInvalidValue;
	if (!qc_stream_known(s, ptds))
		return cudaErrorInvalidResourceHandle;
	for (size_t i = 0; i < n && e == cudaSuccess; i++)
		if ((e = batch_prepare(&ops[i], &d, &r, &w)) != cudaSuccess)
			*fail = i;
	for (size_t i = 0; i < n && e == cudaSuccess; i++) {
		e = batch_prepare(&ops[i], &d, &r, &w);
		if (e == cudaSuccess)
			e = qc_copy3d(&d, &r, w, ops[i].extent.height, ops[i].extent.depth, cudaMemcpyDefault, s, 1,
				      ptds);
		if (e != cudaSuccess)
			*fail = i;
	}
	return e;
}

static cudaError_t batch3d(size_t n, const struct cudaMemcpy3DBatchOp *ops, unsigned long long flags, cudaStream_t s,
			   int ptds)
{
	size_t fail;

	return qc_memcpy3d_batch(n, ops, flags, s, ptds, &fail);
}

ARRAY2D(cudaMemcpy3DBatchAsync,
	(size_t numOps, struct cudaMemcpy3DBatchOp *opList, unsigned long long flags, cudaStream_t stream),
	batch3d(numOps, opList, flags, stream, 0))
ARRAY2D(cudaMemcpy3DBatchAsync_ptsz,
	(size_t numOps, struct cudaMemcpy3DBatchOp *opList, unsigned long long flags, cudaStream_t stream),
	batch3d(numOps, opList, flags, stream, 1))

/* --------------------------------------------------------------- memsets */

cudaError_t qc_memset2d(void *dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream, int async,
			int ptds)
{
	struct qcuda_args_memset_2d a;
	struct qc_loc l;
	size_t span;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (width == 0 || height == 0)
		return cudaSuccess;
	if (!dst)
		return cudaErrorInvalidValue;
	if (height > 1 && pitch < width)
		return cudaErrorInvalidPitchValue;
	if (__builtin_mul_overflow(height - 1, pitch, &span) || __builtin_add_overflow(span, width, &span))
		return cudaErrorInvalidValue;
	if (height == 1 || pitch == width)
		return qc_memset(dst, value, span, async ? stream : NULL, async, ptds); /* cudaMemset*'s core */
	if (async && qc_capture_active(stream, ptds))
		return cudaErrorStreamCaptureUnsupported; /* no 2D memset node yet */
	e = qc_resolve(dst, span, 1, &l);
	if (e != cudaSuccess)
		return e;
	if (!l.device) { /* mapped or managed memory: here, after the stream's work */
		e = qc_deferred(qc_req_stream_sync(qc_stream(stream, ptds)));
		for (size_t y = 0; e == cudaSuccess && y < height; y++)
			memset((char *)l.hptr + y * pitch, value, width);
		return e;
	}
	a = (struct qcuda_args_memset_2d){ .dst = l.dptr,
					   .pitch = pitch,
					   .width = width,
					   .height = height,
					   .stream = qc_stream(stream, ptds),
					   .value = (uint32_t)value & 0xff,
					   .async = async ? 1 : 0 };
	if (async)
		return qc_stream_known(stream, ptds) ? qc_post(QCUDA_CMD_MEMSET_2D, &a, sizeof(a))
						     : cudaErrorInvalidResourceHandle;
	return qc_call(&(struct qc_req){ .cmd = QCUDA_CMD_MEMSET_2D, .args = &a, .args_len = sizeof(a) });
}

ARRAY2D(cudaMemset2D, (void *devPtr, size_t pitch, int value, size_t width, size_t height),
	qc_memset2d(devPtr, pitch, value, width, height, NULL, 0, 0))
ARRAY2D(cudaMemset2D_ptds, (void *devPtr, size_t pitch, int value, size_t width, size_t height),
	qc_memset2d(devPtr, pitch, value, width, height, NULL, 0, 1))
ARRAY2D(cudaMemset2DAsync, (void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),
	qc_memset2d(devPtr, pitch, value, width, height, stream, 1, 0))
ARRAY2D(cudaMemset2DAsync_ptsz,
	(void *devPtr, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream),
	qc_memset2d(devPtr, pitch, value, width, height, stream, 1, 1))

/* A 3D memset: one 2D memset when the slices follow each other, else one a slice. */
static cudaError_t memset3d(struct cudaPitchedPtr p, int value, struct cudaExtent e, cudaStream_t s, int async,
			    int ptds)
{
	cudaError_t r = cudaSuccess;
	size_t slice;

	if (e.width == 0 || e.height == 0 || e.depth == 0)
		return qc_ready();
	if (e.depth > 1 && p.ysize < e.height)
		return cudaErrorInvalidValue;
	if (__builtin_mul_overflow(p.pitch, p.ysize, &slice))
		return cudaErrorInvalidValue;
	if (e.depth == 1 || p.ysize == e.height) {
		size_t rows;

		if (__builtin_mul_overflow(e.height, e.depth, &rows))
			return cudaErrorInvalidValue;
		return qc_memset2d(p.ptr, p.pitch, value, e.width, rows, s, async, ptds);
	}
	for (size_t z = 0; r == cudaSuccess && z < e.depth; z++)
		r = qc_memset2d((char *)p.ptr + z * slice, p.pitch, value, e.width, e.height, s, async, ptds);
	return r;
}

ARRAY2D(cudaMemset3D, (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent),
	memset3d(pitchedDevPtr, value, extent, NULL, 0, 0))
ARRAY2D(cudaMemset3D_ptds, (struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent),
	memset3d(pitchedDevPtr, value, extent, NULL, 0, 1))
ARRAY2D(cudaMemset3DAsync,
	(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream),
	memset3d(pitchedDevPtr, value, extent, stream, 1, 0))
ARRAY2D(cudaMemset3DAsync_ptsz,
	(struct cudaPitchedPtr pitchedDevPtr, int value, struct cudaExtent extent, cudaStream_t stream),
	memset3d(pitchedDevPtr, value, extent, stream, 1, 1))
