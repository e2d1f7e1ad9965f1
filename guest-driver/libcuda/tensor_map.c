/* SPDX-License-Identifier: MIT */
/*
 * Hopper's tensor memory accelerator: cuTensorMapEncodeTiled, Im2col,
 * Im2colWide and cuTensorMapReplaceAddress. cuBLASLt, cuDNN, CUTLASS and
 * Triton encode these 128-byte descriptors on the host and pass them to
 * their kernels; the layout is NVIDIA's and changes with the driver, so the
 * host driver encodes them (TENSOR_MAP_ENCODE) and each answer is kept here
 * by its arguments: it is a pure function of them, and libraries encode the
 * same few descriptors again before each launch (a round trip per launch
 * otherwise). Bounded: a fixed table, a newer answer takes an older one's
 * slot.
 */
#include <pthread.h>
#include <string.h>

#include "cu.h"

enum { TILED, IM2COL, IM2COL_WIDE, REPLACE };

#define MAX_RANK 5
#define SLOTS 256 /* a power of two */

struct map_slot {
	int used;
	struct qcuda_args_tensor_map args;
	CUtensorMap map;
};

static struct map_slot slots[SLOTS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

_Static_assert(sizeof(CUtensorMap) == sizeof(((struct qcuda_out_tensor_map *)0)->map), "CUtensorMap");

static unsigned int slot_of(const struct qcuda_args_tensor_map *a)
{
	const unsigned char *b = (const unsigned char *)a;
	uint64_t h = 0xcbf29ce484222325ull;

	/* Every byte is set (the struct has no padding: QCUDA_SIZE_IS); the
	 * analyzer loses track of the bytes memcpy fills in. */
	for (size_t i = 0; i < sizeof(*a); i++)
		h = (h ^ b[i]) * 0x100000001b3ull; // NOLINT(clang-analyzer-core.UndefinedBinaryOperatorResult)
	return (unsigned int)(h >> 40) & (SLOTS - 1);
}

/* The descriptor of a (every unused byte zero, so equal arguments compare equal). */
static CUresult encode(const struct qcuda_args_tensor_map *a, CUtensorMap *out)
{
	struct map_slot *s = &slots[slot_of(a)];
	struct qcuda_out_tensor_map r;
	CUresult e;

	pthread_mutex_lock(&lock);
	if (s->used && !memcmp(&s->args, a, sizeof(*a))) {
		*out = s->map;
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	e = cu_enter();
	if (e == CUDA_SUCCESS)
		e = cu_result(qc_req_tensor_map_encode(a, &r));
	if (e != CUDA_SUCCESS)
		return e;
	memcpy(out, r.map, sizeof(*out));
	pthread_mutex_lock(&lock);
	*s = (struct map_slot){ .used = 1, .args = *a, .map = *out };
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

/* The fields every encoder takes; the arrays' first rank (strides: rank - 1) entries. */
static CUresult common(struct qcuda_args_tensor_map *a, unsigned int kind, CUtensorMap *map, CUtensorMapDataType type,
		       cuuint32_t rank, void *addr, const cuuint64_t *dim, const cuuint64_t *strides,
		       const cuuint32_t *elem_strides, CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
		       CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	if (!map || !dim || !elem_strides || rank == 0 || rank > MAX_RANK || (rank > 1 && !strides))
		return CUDA_ERROR_INVALID_VALUE;
	*a = (struct qcuda_args_tensor_map){ .kind = kind,
					     .data_type = type,
					     .rank = rank,
					     .interleave = interleave,
					     .swizzle = swizzle,
					     .l2_promotion = l2,
					     .oob_fill = oob,
					     .global_address = (uint64_t)(uintptr_t)addr };
	memcpy(a->global_dim, dim, rank * sizeof(*dim));
	if (rank > 1)
		memcpy(a->global_strides, strides, (rank - 1) * sizeof(*strides));
	memcpy(a->element_strides, elem_strides, rank * sizeof(*elem_strides));
	return CUDA_SUCCESS;
}

CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
				void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
				const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
				CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
				CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	struct qcuda_args_tensor_map a;
	CUresult r = common(&a, TILED, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			    elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (r != CUDA_SUCCESS)
		return r;
	if (!boxDim)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(a.box_dim, boxDim, tensorRank * sizeof(*boxDim));
	return encode(&a, tensorMap);
}

CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
				 void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
				 const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
				 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
				 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
				 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
				 CUtensorMapFloatOOBfill oobFill)
{
	struct qcuda_args_tensor_map a;
	CUresult r = common(&a, IM2COL, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			    elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (r != CUDA_SUCCESS)
		return r;
	if (tensorRank < 3 || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(a.lower_corner, pixelBoxLowerCorner, (tensorRank - 2) * sizeof(int));
	memcpy(a.upper_corner, pixelBoxUpperCorner, (tensorRank - 2) * sizeof(int));
	a.channels_per_pixel = channelsPerPixel;
	a.pixels_per_column = pixelsPerColumn;
	return encode(&a, tensorMap);
}

CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
				     void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
				     int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
				     cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
				     const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
				     CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
				     CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	struct qcuda_args_tensor_map a;
	CUresult r = common(&a, IM2COL_WIDE, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
			    globalStrides, elementStrides, interleave, swizzle, l2Promotion, oobFill);

	if (r != CUDA_SUCCESS)
		return r;
	if (tensorRank < 3)
		return CUDA_ERROR_INVALID_VALUE;
	a.lower_corner[0] = (uint32_t)pixelBoxLowerCornerWidth;
	a.upper_corner[0] = (uint32_t)pixelBoxUpperCornerWidth;
	a.channels_per_pixel = channelsPerPixel;
	a.pixels_per_column = pixelsPerColumn;
	a.wide_mode = mode;
	return encode(&a, tensorMap);
}

CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	struct qcuda_args_tensor_map a = { .kind = REPLACE, .global_address = (uint64_t)(uintptr_t)globalAddress };

	if (!tensorMap)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(a.map, tensorMap, sizeof(a.map));
	return encode(&a, tensorMap);
}
