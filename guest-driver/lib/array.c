/* SPDX-License-Identifier: MIT */
/*
 * CUDA arrays, mipmapped arrays and pitched allocations (their 2D/3D copies
 * and memsets are copy3d.c's, their texture and surface objects texobj.c's).
 *
 * An array is a struct qc_array the program holds as its cudaArray_t (and
 * CUarray): its backend handle and shape, kept for cudaArrayGetInfo and the
 * checks made here before a request goes out (the backend checks again).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qc_array.h"

#define QC_ARRAY_MAGIC 0x41524159u /* "ARAY" */

static pthread_mutex_t arrays_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_array *arrays;
static unsigned int generation = 1;

/* ------------------------------------------------------------- formats */

size_t qc_format_size(int format, unsigned int channels)
{
	size_t b;

	switch (format) {
	case 0x01:
	case 0x08:
		b = 1;
		break; /* (un)signed int 8 */
	case 0x02:
	case 0x09:
	case 0x10:
		b = 2;
		break; /* (un)signed int 16, half */
	case 0x03:
	case 0x0a:
	case 0x20:
		b = 4;
		break; /* (un)signed int 32, float */
	default:
		return 0;
	}
	if (channels != 1 && channels != 2 && channels != 4)
		return 0;
	return b * channels;
}

/* cudaChannelFormatDesc -> CUarray_format and channels. */
cudaError_t qc_format_of(const struct cudaChannelFormatDesc *d, int *format, unsigned int *channels)
{
	int bits = d->x;
	unsigned int n = 0;

	if (d->x > 0)
		n = 1;
	if (d->y > 0)
		n = 2;
	if (d->z > 0)
		n = 3;
	if (d->w > 0)
		n = 4;
	if (n == 0 || n == 3 || (d->y && d->y != bits) || (n > 2 && (d->z != bits || d->w != bits)) ||
	    (n == 1 && (d->y || d->z || d->w)) || (n == 2 && (d->z || d->w)))
		return cudaErrorInvalidChannelDescriptor;
	*channels = n;
	switch (d->f) {
	case cudaChannelFormatKindSigned:
		*format = bits == 8 ? 0x08 : bits == 16 ? 0x09 : bits == 32 ? 0x0a : 0;
		break;
	case cudaChannelFormatKindUnsigned:
		*format = bits == 8 ? 0x01 : bits == 16 ? 0x02 : bits == 32 ? 0x03 : 0;
		break;
	case cudaChannelFormatKindFloat:
		*format = bits == 16 ? 0x10 : bits == 32 ? 0x20 : 0;
		break;
	default:
		*format = 0;
	}
	return *format ? cudaSuccess : cudaErrorInvalidChannelDescriptor;
}

static struct cudaChannelFormatDesc desc_of(int format, unsigned int channels)
{
	struct cudaChannelFormatDesc d = { 0 };
	int bits = (int)(qc_format_size(format, 1) * 8);

	d.f = format == 0x10 || format == 0x20	 ? cudaChannelFormatKindFloat
	      : format >= 0x08 && format <= 0x0a ? cudaChannelFormatKindSigned
						 : cudaChannelFormatKindUnsigned;
	d.x = bits;
	d.y = channels > 1 ? bits : 0;
	d.z = channels > 2 ? bits : 0;
	d.w = channels > 3 ? bits : 0;
	return d;
}

/* The device's limit for 1D textures over linear memory, in elements
 * whatever their size (cudaDevAttrMaxTexture1DLinearWidth, the attribute
 * this query replaces). */
cudaError_t qc_tex1d_linear_max(int format, unsigned int channels, int device, size_t *max)
{
	const struct qcuda_out_device_props *p;
	cudaError_t e;

	unsigned int size = qc_format_size(format, channels);
	uint64_t w;

	if (!size)
		return cudaErrorInvalidValue;
	e = qc_device_props(device, &p);
	if (e != cudaSuccess)
		return e;
	/* The attribute is the width for the largest element (16 bytes): a
	 * smaller element gets as many more, up to 2^30 (what CUDA 13 answers
	 * on the H100: 2^28 for float4, 2^30 for float and for uchar). */
	w = (uint64_t)(unsigned int)p->attrs[cudaDevAttrMaxTexture1DLinearWidth] * 16 / size;
	*max = (size_t)(w < (1ull << 30) ? w : (1ull << 30));
	return cudaSuccess;
}

QC_API cudaError_t cudaDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements,
							const struct cudaChannelFormatDesc *fmtDesc, int device)
{
	unsigned int channels;
	int format;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	if (!maxWidthInElements || !fmtDesc)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_format_of(fmtDesc, &format, &channels);
	if (e == cudaSuccess)
		e = qc_tex1d_linear_max(format, channels, device, maxWidthInElements);
	return qc_ret(e);
}

/* -------------------------------------------------------------- arrays */

struct qc_array *qc_array_lookup(const void *p)
{
	struct qc_array *a;

	if (!p)
		return NULL;
	pthread_mutex_lock(&arrays_lock);
	for (a = arrays; a && a != p; a = a->next)
		;
	pthread_mutex_unlock(&arrays_lock);
	return a && a->magic == QC_ARRAY_MAGIC ? a : NULL;
}

/* The array, if it is one of this session generation's. */
cudaError_t qc_live_array(const void *p, struct qc_array **out)
{
	struct qc_array *a = qc_array_lookup(p);

	if (!a)
		return cudaErrorInvalidResourceHandle;
	if (a->gen != generation)
		return cudaErrorInvalidResourceHandle; /* gone with a cudaDeviceReset */
	*out = a;
	return cudaSuccess;
}

cudaError_t qc_array_create(int format, unsigned int channels, size_t width, size_t height, size_t depth,
			    unsigned int flags, struct qc_array **out)
{
	struct qcuda_args_array_create args = { .width = width,
						.height = height,
						.depth = depth,
						.format = (uint32_t)format,
						.channels = channels,
						.flags = flags };
	struct qc_array *a;
	uint64_t h = 0;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!qc_format_size(format, channels))
		return cudaErrorInvalidChannelDescriptor;
	e = qc_call(&(struct qc_req){
		.cmd = QCUDA_CMD_ARRAY_CREATE, .args = &args, .args_len = sizeof(args), .value = &h });
	if (e != cudaSuccess)
		return e;
	a = calloc(1, sizeof(*a));
	if (!a) {
		qc_req_array_destroy(h);
		return cudaErrorMemoryAllocation;
	}
	*a = (struct qc_array){ .magic = QC_ARRAY_MAGIC,
				.handle = h,
				.format = format,
				.channels = channels,
				.width = width,
				.height = height,
				.depth = depth,
				.flags = flags,
				.elem = qc_format_size(format, channels) };
	pthread_mutex_lock(&arrays_lock);
	a->gen = generation;
	a->next = arrays;
	arrays = a;
	pthread_mutex_unlock(&arrays_lock);
	*out = a;
	return cudaSuccess;
}

cudaError_t qc_array_destroy(struct qc_array *a)
{
	struct qc_array **pp;
	cudaError_t e = cudaSuccess;
	int live;

	pthread_mutex_lock(&arrays_lock);
	for (pp = &arrays; *pp && *pp != a; pp = &(*pp)->next)
		;
	if (!*pp || a->level) {
		pthread_mutex_unlock(&arrays_lock);
		return cudaErrorInvalidValue;
	}
	*pp = a->next;
	live = a->gen == generation;
	pthread_mutex_unlock(&arrays_lock);
	if (live)
		e = qc_req_array_destroy(a->handle);
	a->magic = 0;
	free(a);
	return e;
}

void qc_array_reset(void)
{
	pthread_mutex_lock(&arrays_lock);
	generation++;
	pthread_mutex_unlock(&arrays_lock);
}

unsigned int qc_array_generation(void)
{
	unsigned int g;

	pthread_mutex_lock(&arrays_lock);
	g = generation;
	pthread_mutex_unlock(&arrays_lock);
	return g;
}

/* ---------------------------------------------------- mipmapped arrays */

#define QC_MIPMAP_MAGIC 0x4d495050u /* "MIPP" */

static struct qc_mipmap *mipmaps; /* under arrays_lock */

struct qc_mipmap *qc_mipmap_lookup(const void *p)
{
	struct qc_mipmap *m;

	if (!p)
		return NULL;
	pthread_mutex_lock(&arrays_lock);
	for (m = mipmaps; m && m != p; m = m->next)
		;
	pthread_mutex_unlock(&arrays_lock);
	return m && m->magic == QC_MIPMAP_MAGIC ? m : NULL;
}

struct qc_mipmap *qc_mipmap_of_handle(uint64_t h)
{
	struct qc_mipmap *m;

	pthread_mutex_lock(&arrays_lock);
	for (m = mipmaps; m && !(m->handle == h && m->gen == generation); m = m->next)
		;
	pthread_mutex_unlock(&arrays_lock);
	return m;
}

cudaError_t qc_live_mipmap(const void *p, struct qc_mipmap **out)
{
	struct qc_mipmap *m = qc_mipmap_lookup(p);

	if (!m || m->gen != generation)
		return cudaErrorInvalidResourceHandle;
	*out = m;
	return cudaSuccess;
}

cudaError_t qc_mipmap_create(int format, unsigned int channels, size_t width, size_t height, size_t depth,
			     unsigned int flags, unsigned int levels, struct qc_mipmap **out)
{
	struct qcuda_args_mipmap_create args = { .width = width,
						 .height = height,
						 .depth = depth,
						 .format = (uint32_t)format,
						 .channels = channels,
						 .flags = flags,
						 .levels = levels };
	struct qc_mipmap *m;
	uint64_t h = 0;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!qc_format_size(format, channels))
		return cudaErrorInvalidChannelDescriptor;
	if (levels == 0 || levels > QC_MAX_LEVELS)
		return cudaErrorInvalidValue;
	e = qc_call(&(struct qc_req){
		.cmd = QCUDA_CMD_MIPMAP_CREATE, .args = &args, .args_len = sizeof(args), .value = &h });
	if (e != cudaSuccess)
		return e;
	m = calloc(1, sizeof(*m));
	if (!m) {
		qc_req_mipmap_destroy(h);
		return cudaErrorMemoryAllocation;
	}
	*m = (struct qc_mipmap){ .magic = QC_MIPMAP_MAGIC,
				 .handle = h,
				 .format = format,
				 .channels = channels,
				 .width = width,
				 .height = height,
				 .depth = depth,
				 .flags = flags,
				 .levels = levels };
	pthread_mutex_lock(&arrays_lock);
	m->gen = generation;
	m->next = mipmaps;
	mipmaps = m;
	pthread_mutex_unlock(&arrays_lock);
	*out = m;
	return cudaSuccess;
}

cudaError_t qc_mipmap_level(struct qc_mipmap *m, unsigned int level, struct qc_array **out)
{
	struct qcuda_args_mipmap_level args = { .handle = m->handle, .level = level };
	struct qc_array *a;
	int keep = (m->flags & (cudaArrayLayered | cudaArrayCubemap)) != 0;
	uint64_t h = 0;
	cudaError_t e = qc_ready_args(level < m->levels);

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&arrays_lock);
	a = m->lv[level];
	pthread_mutex_unlock(&arrays_lock);
	if (a) {
		*out = a;
		return cudaSuccess;
	}
	e = qc_call(&(struct qc_req){
		.cmd = QCUDA_CMD_MIPMAP_LEVEL, .args = &args, .args_len = sizeof(args), .value = &h });
	if (e != cudaSuccess)
		return e;
	a = calloc(1, sizeof(*a));
	if (!a)
		return cudaErrorMemoryAllocation;
	*a = (struct qc_array){ .magic = QC_ARRAY_MAGIC,
				.handle = h,
				.format = m->format,
				.channels = m->channels,
				.width = m->width >> level ? m->width >> level : 1,
				.height = m->height ? (m->height >> level ? m->height >> level : 1) : 0,
				.depth = keep || !m->depth ? m->depth : (m->depth >> level ? m->depth >> level : 1),
				.flags = m->flags,
				.elem = qc_format_size(m->format, m->channels),
				.level = 1 };
	pthread_mutex_lock(&arrays_lock);
	if (m->lv[level]) { /* another thread made it meanwhile (the same handle) */
		free(a);
		a = m->lv[level];
	} else {
		a->gen = m->gen;
		a->next = arrays;
		arrays = a;
		m->lv[level] = a;
	}
	pthread_mutex_unlock(&arrays_lock);
	*out = a;
	return cudaSuccess;
}

cudaError_t qc_mipmap_destroy(struct qc_mipmap *m)
{
	struct qc_mipmap **pp;
	cudaError_t e = cudaSuccess;
	int live;

	pthread_mutex_lock(&arrays_lock);
	for (pp = &mipmaps; *pp && *pp != m; pp = &(*pp)->next)
		;
	if (!*pp) {
		pthread_mutex_unlock(&arrays_lock);
		return cudaErrorInvalidValue;
	}
	*pp = m->next;
	for (unsigned int l = 0; l < m->levels; l++) {
		struct qc_array **ap;

		if (!m->lv[l])
			continue;
		for (ap = &arrays; *ap && *ap != m->lv[l]; ap = &(*ap)->next)
			;
		if (*ap)
			*ap = m->lv[l]->next;
		m->lv[l]->magic = 0;
		free(m->lv[l]);
	}
	live = m->gen == generation;
	pthread_mutex_unlock(&arrays_lock);
	if (live)
		e = qc_req_mipmap_destroy(m->handle);
	m->magic = 0;
	free(m);
	return e;
}

QC_API cudaError_t cudaMallocMipmappedArray(cudaMipmappedArray_t *mipmappedArray,
					    const struct cudaChannelFormatDesc *desc, struct cudaExtent extent,
					    unsigned int numLevels, unsigned int flags)
{
	struct qc_mipmap *m;
	unsigned int channels;
	int format;
	cudaError_t e;

	if (!mipmappedArray || !desc)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_format_of(desc, &format, &channels);
	if (e == cudaSuccess)
		e = qc_mipmap_create(format, channels, extent.width, extent.height, extent.depth, flags, numLevels, &m);
	if (e == cudaSuccess)
		*mipmappedArray = (cudaMipmappedArray_t)m;
	return qc_ret(e);
}

QC_API cudaError_t cudaGetMipmappedArrayLevel(cudaArray_t *levelArray, cudaMipmappedArray_const_t mipmappedArray,
					      unsigned int level)
{
	struct qc_mipmap *m;
	struct qc_array *a;
	cudaError_t e;

	if (!levelArray)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_live_mipmap(mipmappedArray, &m);
	if (e == cudaSuccess)
		e = qc_mipmap_level(m, level, &a);
	if (e == cudaSuccess)
		*levelArray = (cudaArray_t)a;
	return qc_ret(e);
}

QC_API cudaError_t cudaFreeMipmappedArray(cudaMipmappedArray_t mipmappedArray)
{
	struct qc_mipmap *m;
	cudaError_t e;

	QC_ENTER(e);
	if (!mipmappedArray)
		return cudaSuccess;
	m = qc_mipmap_lookup(mipmappedArray);
	return qc_ret(m ? qc_mipmap_destroy(m) : cudaErrorInvalidValue);
}

/* cudaMalloc3DArray, and cudaMallocArray (plain: no layered or cubemap
 * flag, which are cudaMalloc3DArray's). */
static cudaError_t malloc_array(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
				size_t height, size_t depth, unsigned int flags, int plain)
{
	struct qc_array *a;
	unsigned int channels;
	int format;
	cudaError_t e;

	if (!array || !desc)
		return cudaErrorInvalidValue;
	e = qc_format_of(desc, &format, &channels);
	if (e == cudaSuccess && plain && (flags & (cudaArrayLayered | cudaArrayCubemap)))
		e = cudaErrorInvalidValue;
	if (e == cudaSuccess)
		e = qc_array_create(format, channels, width, height, depth, flags, &a);
	if (e == cudaSuccess)
		*array = (cudaArray_t)a;
	return e;
}

QC_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc, size_t width,
				   size_t height, unsigned int flags)
{
	return qc_ret(malloc_array(array, desc, width, height, 0, flags, 1));
}

QC_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
				     struct cudaExtent extent, unsigned int flags)
{
	return qc_ret(malloc_array(array, desc, extent.width, extent.height, extent.depth, flags, 0));
}

QC_API cudaError_t cudaFreeArray(cudaArray_t array)
{
	struct qc_array *a;
	cudaError_t e;

	QC_ENTER(e);
	if (!array)
		return cudaSuccess;
	a = qc_array_lookup(array);
	return qc_ret(a ? qc_array_destroy(a) : cudaErrorInvalidValue);
}

QC_API cudaError_t cudaArrayGetInfo(struct cudaChannelFormatDesc *desc, struct cudaExtent *extent, unsigned int *flags,
				    cudaArray_t array)
{
	struct qc_array *a;
	cudaError_t e = qc_live_array(array, &a);

	if (e != cudaSuccess)
		return qc_ret(e);
	if (desc)
		*desc = desc_of(a->format, a->channels);
	if (extent)
		*extent = (struct cudaExtent){ .width = a->width, .height = a->height, .depth = a->depth };
	if (flags)
		*flags = a->flags;
	return cudaSuccess;
}

QC_API cudaError_t cudaGetChannelDesc(struct cudaChannelFormatDesc *desc, cudaArray_const_t array)
{
	struct qc_array *a;
	cudaError_t e = qc_live_array(array, &a);

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!desc)
		return qc_ret(cudaErrorInvalidValue);
	*desc = desc_of(a->format, a->channels);
	return cudaSuccess;
}

/* --------------------------------------------------- pitched allocations */

/* The pitch cudaMallocPitch gives: rows rounded to 512 bytes, as on the
 * GPUs qcuda serves (more than their texture pitch alignment). */
#define QC_PITCH_ALIGN 512u

static cudaError_t malloc_pitch(void **p, size_t *pitch, size_t width, size_t rows)
{
	size_t pt, bytes;

	if (!p || !pitch)
		return cudaErrorInvalidValue;
	if (width > SIZE_MAX - QC_PITCH_ALIGN)
		return cudaErrorMemoryAllocation;
	pt = (width + QC_PITCH_ALIGN - 1) / QC_PITCH_ALIGN * QC_PITCH_ALIGN;
	if (__builtin_mul_overflow(pt, rows, &bytes))
		return cudaErrorMemoryAllocation;
	*pitch = pt;
	return qc_malloc(p, bytes);
}

QC_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
	return qc_ret(malloc_pitch(devPtr, pitch, width, height));
}

QC_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pitchedDevPtr, struct cudaExtent extent)
{
	size_t rows, pitch = 0;
	void *p = NULL;
	cudaError_t e;

	if (!pitchedDevPtr)
		return qc_ret(cudaErrorInvalidValue);
	if (__builtin_mul_overflow(extent.height, extent.depth, &rows))
		return qc_ret(cudaErrorMemoryAllocation);
	e = malloc_pitch(&p, &pitch, extent.width, rows);
	if (e == cudaSuccess)
		*pitchedDevPtr = (struct cudaPitchedPtr){
			.ptr = p, .pitch = pitch, .xsize = extent.width, .ysize = extent.height
		};
	return qc_ret(e);
}
