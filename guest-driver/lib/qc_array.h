/* SPDX-License-Identifier: MIT */
/*
 * Arrays (array.c), 2D/3D copies and pitched memsets (copy3d.c), texture
 * and surface objects (texobj.c), shared with the driver API
 * (../libcuda/array.c).
 */
#ifndef QC_ARRAY_H
#define QC_ARRAY_H

#include "qcrt.h"

/* A CUDA array: a cudaArray_t and a CUarray point to one. */
struct qc_array {
	uint32_t magic;
	unsigned int gen; /* the session generation it was made in (a reset drops it) */
	uint64_t handle; /* the backend's */
	int format; /* CUarray_format */
	unsigned int channels;
	size_t width, height, depth; /* as created (height 0: 1D; depth 0: 2D) */
	unsigned int flags; /* cudaArray* == CUDA_ARRAY3D_* */
	size_t elem; /* bytes per element */
	int level; /* a level of a mipmapped array: freed with it only */
	struct qc_array *next;
};

/* A mipmapped array: a cudaMipmappedArray_t and a CUmipmappedArray point to
 * one. Its levels are arrays, made when first asked for. */
#define QC_MAX_LEVELS 32
struct qc_mipmap {
	uint32_t magic;
	unsigned int gen;
	uint64_t handle;
	int format;
	unsigned int channels;
	size_t width, height, depth;
	unsigned int flags, levels;
	struct qc_array *lv[QC_MAX_LEVELS];
	struct qc_mipmap *next;
};

struct qc_mipmap *qc_mipmap_lookup(const void *p);
cudaError_t qc_mipmap_create(int format, unsigned int channels, size_t width, size_t height, size_t depth,
			     unsigned int flags, unsigned int levels, struct qc_mipmap **out);
cudaError_t qc_mipmap_level(struct qc_mipmap *m, unsigned int level, struct qc_array **out);
cudaError_t qc_mipmap_destroy(struct qc_mipmap *m);
/* The live mipmapped array of a backend handle, or NULL. */
struct qc_mipmap *qc_mipmap_of_handle(uint64_t h);

/* The array p is, or NULL (not one of ours, or freed). */
struct qc_array *qc_array_lookup(const void *p);
/* A new array (the driver's format numbering); flags as CUDA_ARRAY3D_*. */
cudaError_t qc_array_create(int format, unsigned int channels, size_t width, size_t height, size_t depth,
			    unsigned int flags, struct qc_array **out);
cudaError_t qc_array_destroy(struct qc_array *a);
/* Bytes per element of a CUarray_format and channel count; 0 if not served. */
size_t qc_format_size(int format, unsigned int channels);
/* The most elements of a format a 1D texture over linear memory holds on
 * device (checked by the caller); cudaErrorInvalidValue for a format or
 * channel count not served. */
cudaError_t qc_tex1d_linear_max(int format, unsigned int channels, int device, size_t *max);

/* One side of a 2D/3D copy: memory at ptr (rows pitch bytes apart, slices
 * pitch * rows apart), or an array; x in bytes. */
struct qc_side {
	struct qc_array *array; /* NULL: ptr */
	const void *ptr;
	size_t pitch, rows;
	size_t x, y, z;
};

/* A box of width bytes x height rows x depth slices from src to dst; kind
 * as cudaMemcpy's (cudaMemcpyDefault: by where the pointers lie). One
 * request to the backend, whatever the row count. */
cudaError_t qc_copy3d(const struct qc_side *dst, const struct qc_side *src, size_t width, size_t height, size_t depth,
		      enum cudaMemcpyKind kind, cudaStream_t stream, int async, int ptds);

/* count bytes between mem and an array from (x bytes, y) on, in row order
 * (cudaMemcpyToArray / FromArray, cuMemcpyHtoA ...). */
cudaError_t qc_linear_array(struct qc_array *a, size_t x, size_t y, void *mem, size_t count, int to_array,
			    enum cudaMemcpyKind kind, cudaStream_t s, int async, int ptds);

/* cudaMemset2D's core: height rows of width bytes, pitch apart. */
cudaError_t qc_memset2d(void *dst, size_t pitch, int value, size_t width, size_t height, cudaStream_t stream, int async,
			int ptds);

/* A texture / surface object from wire arguments (arr: the array of an
 * array resource, its handle already in a->res); *obj is what kernels take.
 * rd / td: the runtime's descriptions, kept for cudaGet*Object*Desc (NULL
 * from the driver API). */
cudaError_t qc_tex_create(struct qcuda_args_tex_create *a, struct qc_array *arr, const struct cudaResourceDesc *rd,
			  const struct cudaTextureDesc *td, uint64_t *obj);
cudaError_t qc_tex_destroy(uint64_t obj);
cudaError_t qc_surf_create(struct qc_array *a, const struct cudaResourceDesc *rd, uint64_t *obj);
cudaError_t qc_surf_destroy(uint64_t obj);
/* What an object of this session generation was made of: 0, or -1 if it is not one. */
int qc_obj_args(uint64_t obj, int surface, struct qcuda_args_tex_create *a, struct qc_array **arr);

/* After DEVICE_RESET: arrays and objects of before are gone. */
void qc_array_reset(void);
/* The session generation arrays and objects are made in (a reset ends one). */
unsigned int qc_array_generation(void);

/* The array or mipmapped array p is, if it is one of this session
 * generation's; else cudaErrorInvalidResourceHandle. */
cudaError_t qc_live_array(const void *p, struct qc_array **out);
cudaError_t qc_live_mipmap(const void *p, struct qc_mipmap **out);
/* cudaChannelFormatDesc -> CUarray_format and channels. */
cudaError_t qc_format_of(const struct cudaChannelFormatDesc *d, int *format, unsigned int *channels);

#endif
