/* SPDX-License-Identifier: MIT */
/*
 * Arrays, pitched allocations, 2D/3D copies and memsets, texture and
 * surface objects: the runtime layer's (../lib/array.c, copy3d.c and
 * texobj.c), under the thread's current context. A CUarray is the runtime layer's struct qc_array, as a
 * cudaArray_t is, so NVIDIA's static runtime over this library and qcuda's
 * runtime see the same arrays.
 */
#include <string.h>

#include "cu.h"
#include "../lib/qc_array.h"

/* ---------------------------------------------------------------- arrays */

static CUresult array_create(CUarray *out, int format, unsigned int channels, size_t w, size_t h, size_t d,
			     unsigned int flags)
{
	struct qc_array *a;
	cudaError_t e;
	CUresult r;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!qc_format_size(format, channels))
		return CUDA_ERROR_INVALID_VALUE;
	CU_ENTER(r);
	e = qc_array_create(format, channels, w, h, d, flags, &a);
	if (e == cudaSuccess)
		*out = (CUarray)a;
	return cu_result(e);
}

CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(pHandle, p->Format, p->NumChannels, p->Width, p->Height, 0, 0);
}

CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	return array_create(pHandle, p->Format, p->NumChannels, p->Width, p->Height, p->Depth, p->Flags);
}

CUresult cuArrayDestroy(CUarray hArray)
{
	struct qc_array *a = qc_array_lookup(hArray);
	CUresult r;

	CU_ENTER(r);
	return a ? cu_result(qc_array_destroy(a)) : CUDA_ERROR_INVALID_HANDLE;
}

CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *p, CUarray hArray)
{
	struct qc_array *a = qc_array_lookup(hArray);

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	*p = (CUDA_ARRAY3D_DESCRIPTOR){ .Width = a->width,
					.Height = a->height,
					.Depth = a->depth,
					.Format = (CUarray_format)a->format,
					.NumChannels = a->channels,
					.Flags = a->flags };
	return CUDA_SUCCESS;
}

/* The 3D descriptor's first fields, with its answers. */
CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *p, CUarray hArray)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	CUresult r = cuArray3DGetDescriptor_v2(p ? &d : NULL, hArray);

	if (r == CUDA_SUCCESS)
		*p = (CUDA_ARRAY_DESCRIPTOR){
			.Width = d.Width, .Height = d.Height, .Format = d.Format, .NumChannels = d.NumChannels
		};
	return r;
}

CUresult cuMipmappedArrayCreate(CUmipmappedArray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p,
				unsigned int numMipmapLevels)
{
	struct qc_mipmap *m;
	cudaError_t e;
	CUresult r;

	if (!pHandle || !p || !qc_format_size(p->Format, p->NumChannels))
		return CUDA_ERROR_INVALID_VALUE;
	CU_ENTER(r);
	e = qc_mipmap_create(p->Format, p->NumChannels, p->Width, p->Height, p->Depth, p->Flags, numMipmapLevels, &m);
	if (e == cudaSuccess)
		*pHandle = (CUmipmappedArray)m;
	return cu_result(e);
}

CUresult cuMipmappedArrayGetLevel(CUarray *pLevelArray, CUmipmappedArray hMipmappedArray, unsigned int level)
{
	struct qc_mipmap *m = qc_mipmap_lookup(hMipmappedArray);
	struct qc_array *a;
	cudaError_t e;
	CUresult r;

	if (!pLevelArray)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	CU_ENTER(r);
	e = qc_mipmap_level(m, level, &a);
	if (e == cudaSuccess)
		*pLevelArray = (CUarray)a;
	return cu_result(e);
}

CUresult cuMipmappedArrayDestroy(CUmipmappedArray hMipmappedArray)
{
	struct qc_mipmap *m = qc_mipmap_lookup(hMipmappedArray);
	CUresult r;

	CU_ENTER(r);
	return m ? cu_result(qc_mipmap_destroy(m)) : CUDA_ERROR_INVALID_HANDLE;
}

/* cuMemAllocPitch: rows rounded to 512 bytes, as cudaMallocPitch does. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes, size_t Height,
			    unsigned int ElementSizeBytes)
{
	void *p = NULL;
	size_t pitch = 0;
	CUresult r;

	if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)
		return CUDA_ERROR_INVALID_VALUE;
	CU_ENTER(r);
	r = cu_result(cudaMallocPitch(&p, &pitch, WidthInBytes, Height));
	if (r == CUDA_SUCCESS)
		*dptr = (CUdeviceptr)(uintptr_t)p, *pPitch = pitch;
	return r;
}

/* ---------------------------------------------------------------- copies */

static const enum cudaMemcpyKind kinds[2][2] = {
	{ cudaMemcpyHostToHost, cudaMemcpyHostToDevice },
	{ cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice },
};

/* One side of a driver copy: its memory type's pointer or array. */
static CUresult side(CUmemorytype type, const void *host, CUdeviceptr dev, CUarray arr, size_t x, size_t y, size_t z,
		     size_t pitch, size_t rows, struct qc_side *out)
{
	*out = (struct qc_side){ .pitch = pitch, .rows = rows, .x = x, .y = y, .z = z };
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		out->ptr = host;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_DEVICE:
	case CU_MEMORYTYPE_UNIFIED:
		out->ptr = PTR(dev);
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_ARRAY:
		out->array = qc_array_lookup(arr);
		return out->array ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static enum cudaMemcpyKind kind_of(CUmemorytype s, CUmemorytype d)
{
	if (s == CU_MEMORYTYPE_UNIFIED || d == CU_MEMORYTYPE_UNIFIED)
		return cudaMemcpyDefault;
	return kinds[s != CU_MEMORYTYPE_HOST][d != CU_MEMORYTYPE_HOST];
}

CUresult cu_memcpy2d(const CUDA_MEMCPY2D *c, CUstream stream, int async, int ptds)
{
	struct qc_side d, s;
	CUresult r;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, 0,
			 c->srcPitch, c->Height, &s);
	if (r == CUDA_SUCCESS)
		r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, 0,
			 c->dstPitch, c->Height, &d);
	if (r != CUDA_SUCCESS)
		return r;
	/* A pointer side's rows start y rows in: rows per slice are unused (one slice). */
	s.rows = s.array ? 0 : c->srcY + c->Height;
	d.rows = d.array ? 0 : c->dstY + c->Height;
	return cu_result(qc_copy3d(&d, &s, c->WidthInBytes, c->Height, 1, kind_of(c->srcMemoryType, c->dstMemoryType),
				   (cudaStream_t)stream, async, ptds));
}

static CUresult copy_3d(const CUDA_MEMCPY3D *c, CUstream stream, int async, int ptds)
{
	struct qc_side d, s;
	CUresult r;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcLOD || c->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray, c->srcXInBytes, c->srcY, c->srcZ,
			 c->srcPitch, c->srcHeight, &s);
	if (r == CUDA_SUCCESS)
		r = side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray, c->dstXInBytes, c->dstY, c->dstZ,
			 c->dstPitch, c->dstHeight, &d);
	if (r != CUDA_SUCCESS)
		return r;
	return cu_result(qc_copy3d(&d, &s, c->WidthInBytes, c->Height, c->Depth,
				   kind_of(c->srcMemoryType, c->dstMemoryType), (cudaStream_t)stream, async, ptds));
}

CU_COPY_ENTRIES(CUDA_MEMCPY3D, copy_3d, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)

/* 1D copies to and from arrays: ByteCount bytes from the array's byte
 * offset on, in row order. */
static CUresult array_1d(CUarray arr, size_t off, void *mem, size_t n, int to_array, enum cudaMemcpyKind kind,
			 CUstream s, int async, int ptds)
{
	struct qc_array *a = qc_array_lookup(arr);
	size_t rowb;
	CUresult r;

	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	CU_ENTER(r);
	rowb = a->width * a->elem;
	return cu_result(
		qc_linear_array(a, off % rowb, off / rowb, mem, n, to_array, kind, (cudaStream_t)s, async, ptds));
}

/* name, its parameters, the call: as the synchronous _v2 and _v2_ptds ABIs. */
#define A1D(name, params, call)         \
	CUresult name##_v2 params       \
	{                               \
		return call(0);         \
	}                               \
	CUresult name##_v2_ptds params; \
	CUresult name##_v2_ptds params  \
	{                               \
		return call(1);         \
	}

#define HTOA(p) array_1d(dstArray, dstOffset, (void *)srcHost, ByteCount, 1, cudaMemcpyHostToDevice, NULL, 0, p)
#define ATOH(p) array_1d(srcArray, srcOffset, dstHost, ByteCount, 0, cudaMemcpyDeviceToHost, NULL, 0, p)
#define DTOA(p) array_1d(dstArray, dstOffset, PTR(srcDevice), ByteCount, 1, cudaMemcpyDeviceToDevice, NULL, 0, p)
#define ATOD(p) array_1d(srcArray, srcOffset, PTR(dstDevice), ByteCount, 0, cudaMemcpyDeviceToDevice, NULL, 0, p)
A1D(cuMemcpyHtoA, (CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount), HTOA)
A1D(cuMemcpyAtoH, (void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount), ATOH)
A1D(cuMemcpyDtoA, (CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount), DTOA)
A1D(cuMemcpyAtoD, (CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount), ATOD)

CUresult cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
			      CUstream hStream)
{
	return array_1d(dstArray, dstOffset, (void *)srcHost, ByteCount, 1, cudaMemcpyHostToDevice, hStream, 1, 0);
}

CUresult cuMemcpyHtoAAsync_v2_ptsz(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
				   CUstream hStream)
{
	return array_1d(dstArray, dstOffset, (void *)srcHost, ByteCount, 1, cudaMemcpyHostToDevice, hStream, 1, 1);
}

CUresult cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount, CUstream hStream)
{
	return array_1d(srcArray, srcOffset, dstHost, ByteCount, 0, cudaMemcpyDeviceToHost, hStream, 1, 0);
}

CUresult cuMemcpyAtoHAsync_v2_ptsz(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
				   CUstream hStream)
{
	return array_1d(srcArray, srcOffset, dstHost, ByteCount, 0, cudaMemcpyDeviceToHost, hStream, 1, 1);
}

/* Byte 2D memsets. */
static CUresult memset_2d8(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s, int async,
			   int ptds)
{
	CUresult r = cu_enter();

	return r != CUDA_SUCCESS ? r : cu_result(qc_memset2d(PTR(dst), pitch, v, w, h, (cudaStream_t)s, async, ptds));
}

CUresult cuMemsetD2D8_v2(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height)
{
	return memset_2d8(dstDevice, dstPitch, uc, Width, Height, NULL, 0, 0);
}

CUresult cuMemsetD2D8_v2_ptds(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height)
{
	return memset_2d8(dstDevice, dstPitch, uc, Width, Height, NULL, 0, 1);
}

CUresult cuMemsetD2D8Async(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
			   CUstream hStream)
{
	return memset_2d8(dstDevice, dstPitch, uc, Width, Height, hStream, 1, 0);
}

CUresult cuMemsetD2D8Async_ptsz(CUdeviceptr dstDevice, size_t dstPitch, unsigned char uc, size_t Width, size_t Height,
				CUstream hStream)
{
	return memset_2d8(dstDevice, dstPitch, uc, Width, Height, hStream, 1, 1);
}

/* ------------------------------------------- texture and surface objects */

static uint32_t fbits(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	return u;
}

CUresult cuTexObjectCreate(CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *rd, const CUDA_TEXTURE_DESC *td,
			   const CUDA_RESOURCE_VIEW_DESC *vd)
{
	struct qcuda_args_tex_create a = { 0 };
	struct qc_array *arr = NULL;
	uint64_t obj = 0;
	CUresult r;

	if (!pTexObject || !rd || !td)
		return CUDA_ERROR_INVALID_VALUE;
	if (vd)
		return CUDA_ERROR_NOT_SUPPORTED;
	switch (rd->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		if (!(arr = qc_array_lookup(rd->res.array.hArray)))
			return CUDA_ERROR_INVALID_HANDLE;
		a.res_type = 0, a.res = arr->handle;
		break;
	case CU_RESOURCE_TYPE_LINEAR:
		a.res_type = 2, a.res = rd->res.linear.devPtr, a.format = rd->res.linear.format;
		a.channels = rd->res.linear.numChannels, a.size = rd->res.linear.sizeInBytes;
		break;
	case CU_RESOURCE_TYPE_PITCH2D:
		a.res_type = 3, a.res = rd->res.pitch2D.devPtr, a.format = rd->res.pitch2D.format;
		a.channels = rd->res.pitch2D.numChannels, a.width = rd->res.pitch2D.width;
		a.height = rd->res.pitch2D.height, a.pitch = rd->res.pitch2D.pitchInBytes;
		break;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY: {
		struct qc_mipmap *m = qc_mipmap_lookup(rd->res.mipmap.hMipmappedArray);

		if (!m)
			return CUDA_ERROR_INVALID_HANDLE;
		a.res_type = 1, a.res = m->handle;
		break;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < 3; i++)
		a.address_mode[i] = td->addressMode[i];
	a.filter_mode = td->filterMode, a.flags = td->flags, a.max_anisotropy = td->maxAnisotropy;
	a.mipmap_filter_mode = td->mipmapFilterMode, a.mipmap_level_bias = fbits(td->mipmapLevelBias);
	a.min_lod = fbits(td->minMipmapLevelClamp), a.max_lod = fbits(td->maxMipmapLevelClamp);
	for (int i = 0; i < 4; i++)
		a.border_color[i] = fbits(td->borderColor[i]);
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_tex_create(&a, arr, NULL, NULL, &obj));
	if (r == CUDA_SUCCESS)
		*pTexObject = obj;
	return r;
}

CUresult cuTexObjectDestroy(CUtexObject texObject)
{
	CU_RUN(qc_tex_destroy(texObject));
}

CUresult cuSurfObjectCreate(CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *rd)
{
	struct qc_array *arr;
	uint64_t obj = 0;
	CUresult r;

	if (!pSurfObject || !rd || rd->resType != CU_RESOURCE_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	if (!(arr = qc_array_lookup(rd->res.array.hArray)))
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_surf_create(arr, NULL, &obj));
	if (r == CUDA_SUCCESS)
		*pSurfObject = obj;
	return r;
}

CUresult cuSurfObjectDestroy(CUsurfObject surfObject)
{
	CU_RUN(qc_surf_destroy(surfObject));
}

static float fval(uint32_t bits)
{
	float f;

	memcpy(&f, &bits, 4);
	return f;
}

static CUresult obj_res(uint64_t obj, int surface, CUDA_RESOURCE_DESC *rd)
{
	struct qcuda_args_tex_create a;
	struct qc_array *arr;

	if (!rd)
		return CUDA_ERROR_INVALID_VALUE;
	if (qc_obj_args(obj, surface, &a, &arr))
		return CUDA_ERROR_INVALID_VALUE;
	memset(rd, 0, sizeof(*rd));
	switch (a.res_type) {
	case 0:
		rd->resType = CU_RESOURCE_TYPE_ARRAY;
		rd->res.array.hArray = (CUarray)arr;
		break;
	case 1:
		rd->resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
		rd->res.mipmap.hMipmappedArray = (CUmipmappedArray)qc_mipmap_of_handle(a.res);
		break;
	case 2:
		rd->resType = CU_RESOURCE_TYPE_LINEAR;
		rd->res.linear.devPtr = a.res, rd->res.linear.format = (CUarray_format)a.format;
		rd->res.linear.numChannels = a.channels, rd->res.linear.sizeInBytes = a.size;
		break;
	default:
		rd->resType = CU_RESOURCE_TYPE_PITCH2D;
		rd->res.pitch2D.devPtr = a.res, rd->res.pitch2D.format = (CUarray_format)a.format;
		rd->res.pitch2D.numChannels = a.channels, rd->res.pitch2D.width = a.width;
		rd->res.pitch2D.height = a.height, rd->res.pitch2D.pitchInBytes = a.pitch;
		break;
	}
	return CUDA_SUCCESS;
}

CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
	return obj_res(texObject, 0, pResDesc);
}

CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
	return obj_res(surfObject, 1, pResDesc);
}

CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *td, CUtexObject texObject)
{
	struct qcuda_args_tex_create a;
	struct qc_array *arr;

	if (!td)
		return CUDA_ERROR_INVALID_VALUE;
	if (qc_obj_args(texObject, 0, &a, &arr))
		return CUDA_ERROR_INVALID_VALUE;
	memset(td, 0, sizeof(*td));
	for (int i = 0; i < 3; i++)
		td->addressMode[i] = (CUaddress_mode)a.address_mode[i];
	td->filterMode = (CUfilter_mode)a.filter_mode, td->flags = a.flags;
	td->maxAnisotropy = a.max_anisotropy, td->mipmapFilterMode = (CUfilter_mode)a.mipmap_filter_mode;
	td->mipmapLevelBias = fval(a.mipmap_level_bias), td->minMipmapLevelClamp = fval(a.min_lod);
	td->maxMipmapLevelClamp = fval(a.max_lod);
	for (int i = 0; i < 4; i++)
		td->borderColor[i] = fval(a.border_color[i]);
	return CUDA_SUCCESS;
}
