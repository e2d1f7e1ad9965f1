/* SPDX-License-Identifier: MIT */
/*
 * Texture and surface objects over arrays (array.c), mipmapped arrays and
 * linear memory: made by the backend, their descriptions kept here for the
 * getters.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "qc_array.h"

/* ------------------------------------------- texture and surface objects */

/* What each object the program holds was made of (cudaGet*ObjectResourceDesc,
 * cuTexObjectGetResourceDesc). */
struct obj_rec {
	uint64_t obj;
	int surface;
	struct qcuda_args_tex_create a;
	struct qc_array *arr;
	int has_rt; /* the runtime's descriptions below */
	struct cudaResourceDesc res;
	struct cudaTextureDesc tex;
	struct obj_rec *next;
};

static pthread_mutex_t objs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct obj_rec *objs;
static unsigned int objs_gen = 1;

static void obj_add(struct obj_rec *r)
{
	pthread_mutex_lock(&objs_lock);
	if (objs_gen != qc_array_generation()) { /* a reset dropped the ones before */
		while (objs) {
			struct obj_rec *n = objs->next;

			free(objs);
			objs = n;
		}
		objs_gen = qc_array_generation();
	}
	r->next = objs;
	objs = r;
	pthread_mutex_unlock(&objs_lock);
}

/* Finds (and with take, unlinks) an object's record; NULL if not ours. */
static struct obj_rec *obj_find(uint64_t obj, int surface, int take, struct obj_rec *copy)
{
	struct obj_rec **pp, *r = NULL;

	pthread_mutex_lock(&objs_lock);
	if (objs_gen == qc_array_generation())
		for (pp = &objs; *pp; pp = &(*pp)->next)
			if ((*pp)->obj == obj && (*pp)->surface == surface) {
				r = *pp;
				if (take)
					*pp = r->next;
				else if (copy)
					*copy = *r;
				break;
			}
	pthread_mutex_unlock(&objs_lock);
	return r;
}

int qc_obj_args(uint64_t obj, int surface, struct qcuda_args_tex_create *a, struct qc_array **arr)
{
	struct obj_rec r;

	if (!obj_find(obj, surface, 0, &r))
		return -1;
	*a = r.a;
	*arr = r.arr;
	return 0;
}

static uint32_t fbits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

static cudaError_t obj_create(struct qcuda_args_tex_create *a, struct qc_array *arr, int surface,
			      const struct cudaResourceDesc *rd, const struct cudaTextureDesc *td, uint64_t *obj)
{
	struct obj_rec *rec;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	rec = calloc(1, sizeof(*rec));
	if (!rec)
		return cudaErrorMemoryAllocation;
	e = surface ? qc_req_surf_create(arr->handle, obj)
		    : qc_call(&(struct qc_req){
			      .cmd = QCUDA_CMD_TEX_CREATE, .args = a, .args_len = sizeof(*a), .value = obj });
	if (e != cudaSuccess) {
		free(rec);
		return e;
	}
	rec->obj = *obj, rec->surface = surface, rec->arr = arr;
	if (a)
		rec->a = *a;
	if (rd) {
		rec->has_rt = 1, rec->res = *rd;
		if (td)
			rec->tex = *td;
	}
	obj_add(rec);
	return cudaSuccess;
}

cudaError_t qc_tex_create(struct qcuda_args_tex_create *a, struct qc_array *arr, const struct cudaResourceDesc *rd,
			  const struct cudaTextureDesc *td, uint64_t *obj)
{
	return obj_create(a, arr, 0, rd, td, obj);
}

cudaError_t qc_surf_create(struct qc_array *arr, const struct cudaResourceDesc *rd, uint64_t *obj)
{
	struct qcuda_args_tex_create a = { .res_type = 0, .res = arr->handle };

	return obj_create(&a, arr, 1, rd, NULL, obj);
}

static cudaError_t destroy_obj(uint64_t obj, int surface)
{
	struct obj_rec *r;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (obj == 0)
		return cudaSuccess;
	r = obj_find(obj, surface, 1, NULL);
	e = surface ? qc_req_surf_destroy(obj) : qc_req_tex_destroy(obj);
	free(r);
	return e;
}

cudaError_t qc_tex_destroy(uint64_t obj)
{
	return destroy_obj(obj, 0);
}

cudaError_t qc_surf_destroy(uint64_t obj)
{
	return destroy_obj(obj, 1);
}

static cudaError_t create_texture(cudaTextureObject_t *out, const struct cudaResourceDesc *rd,
				  const struct cudaTextureDesc *td, const struct cudaResourceViewDesc *vd)
{
	struct qcuda_args_tex_create a = { 0 };
	struct qc_array *arr = NULL;
	unsigned int channels;
	uint64_t obj = 0;
	int format;
	cudaError_t e;

	if (!out || !rd || !td)
		return cudaErrorInvalidValue;
	if (vd)
		return cudaErrorNotSupported; /* resource views: not served */
	switch (rd->resType) {
	case cudaResourceTypeArray:
		if ((e = qc_live_array(rd->res.array.array, &arr)) != cudaSuccess)
			return e;
		a.res_type = 0;
		a.res = arr->handle;
		format = arr->format;
		break;
	case cudaResourceTypeLinear:
		if ((e = qc_format_of(&rd->res.linear.desc, &format, &channels)) != cudaSuccess)
			return e;
		a.res_type = 2, a.res = (uintptr_t)rd->res.linear.devPtr, a.format = (uint32_t)format;
		a.channels = channels, a.size = rd->res.linear.sizeInBytes;
		break;
	case cudaResourceTypePitch2D:
		if ((e = qc_format_of(&rd->res.pitch2D.desc, &format, &channels)) != cudaSuccess)
			return e;
		a.res_type = 3, a.res = (uintptr_t)rd->res.pitch2D.devPtr, a.format = (uint32_t)format;
		a.channels = channels, a.width = rd->res.pitch2D.width, a.height = rd->res.pitch2D.height;
		a.pitch = rd->res.pitch2D.pitchInBytes;
		break;
	case cudaResourceTypeMipmappedArray: {
		struct qc_mipmap *m;

		if ((e = qc_live_mipmap(rd->res.mipmap.mipmap, &m)) != cudaSuccess)
			return e;
		a.res_type = 1;
		a.res = m->handle;
		format = m->format;
		break;
	}
	default:
		return cudaErrorInvalidValue;
	}
	for (int i = 0; i < 3; i++)
		a.address_mode[i] = (uint32_t)td->addressMode[i];
	a.filter_mode = (uint32_t)td->filterMode;
	/* Integer formats read as integers unless normalized floats are asked for. */
	if (td->readMode == cudaReadModeElementType && format != 0x10 && format != 0x20)
		a.flags |= 0x1;
	if (td->normalizedCoords)
		a.flags |= 0x2;
	if (td->sRGB)
		a.flags |= 0x10;
	if (td->disableTrilinearOptimization)
		a.flags |= 0x20;
	if (td->seamlessCubemap)
		a.flags |= 0x40;
	a.max_anisotropy = td->maxAnisotropy;
	a.mipmap_filter_mode = (uint32_t)td->mipmapFilterMode;
	a.mipmap_level_bias = fbits(td->mipmapLevelBias);
	a.min_lod = fbits(td->minMipmapLevelClamp);
	a.max_lod = fbits(td->maxMipmapLevelClamp);
	for (int i = 0; i < 4; i++)
		a.border_color[i] = fbits(td->borderColor[i]);
	e = qc_tex_create(&a, rd->resType == cudaResourceTypeArray ? arr : NULL, rd, td, &obj);
	if (e == cudaSuccess)
		*out = obj;
	return e;
}

QC_API cudaError_t cudaCreateTextureObject(cudaTextureObject_t *pTexObject, const struct cudaResourceDesc *pResDesc,
					   const struct cudaTextureDesc *pTexDesc,
					   const struct cudaResourceViewDesc *pResViewDesc)
{
	return qc_ret(create_texture(pTexObject, pResDesc, pTexDesc, pResViewDesc));
}

QC_API cudaError_t cudaDestroyTextureObject(cudaTextureObject_t texObject)
{
	return qc_ret(destroy_obj(texObject, 0));
}

QC_API cudaError_t cudaGetTextureObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaTextureObject_t texObject)
{
	struct obj_rec r;

	if (!pResDesc)
		return qc_ret(cudaErrorInvalidValue);
	if (!obj_find(texObject, 0, 0, &r) || !r.has_rt)
		return qc_ret(cudaErrorInvalidValue);
	*pResDesc = r.res;
	return cudaSuccess;
}

QC_API cudaError_t cudaGetTextureObjectTextureDesc(struct cudaTextureDesc *pTexDesc, cudaTextureObject_t texObject)
{
	struct obj_rec r;

	if (!pTexDesc)
		return qc_ret(cudaErrorInvalidValue);
	if (!obj_find(texObject, 0, 0, &r) || !r.has_rt)
		return qc_ret(cudaErrorInvalidValue);
	*pTexDesc = r.tex;
	return cudaSuccess;
}

static cudaError_t create_surface(cudaSurfaceObject_t *out, const struct cudaResourceDesc *rd)
{
	struct qc_array *arr;
	uint64_t obj = 0;
	cudaError_t e;

	if (!out || !rd)
		return cudaErrorInvalidValue;
	if (rd->resType != cudaResourceTypeArray)
		return cudaErrorInvalidValue;
	if ((e = qc_live_array(rd->res.array.array, &arr)) != cudaSuccess)
		return e;
	e = qc_surf_create(arr, rd, &obj);
	if (e == cudaSuccess)
		*out = obj;
	return e;
}

QC_API cudaError_t cudaCreateSurfaceObject(cudaSurfaceObject_t *pSurfObject, const struct cudaResourceDesc *pResDesc)
{
	return qc_ret(create_surface(pSurfObject, pResDesc));
}

QC_API cudaError_t cudaDestroySurfaceObject(cudaSurfaceObject_t surfObject)
{
	return qc_ret(destroy_obj(surfObject, 1));
}

QC_API cudaError_t cudaGetSurfaceObjectResourceDesc(struct cudaResourceDesc *pResDesc, cudaSurfaceObject_t surfObject)
{
	struct obj_rec r;

	if (!pResDesc)
		return qc_ret(cudaErrorInvalidValue);
	if (!obj_find(surfObject, 1, 0, &r) || !r.has_rt)
		return qc_ret(cudaErrorInvalidValue);
	*pResDesc = r.res;
	return cudaSuccess;
}
