/* SPDX-License-Identifier: MIT */
/*
 * Function attributes and occupancy.
 */
#include <string.h>

#include "qcrt.h"

_Static_assert(QCUDA_NUM_FUNC_ATTRS == cudaFuncAttributeMax, "FUNC_ATTRS carries every CUfunction_attribute");

/* The function handle behind func (a host stub or a cudaKernel_t). */
static cudaError_t func_of(const void *func, uint64_t *handle)
{
	return qc_kernel_ready(qc_kernel_by_func(func), handle);
}

/* values[] is indexed by CUfunction_attribute (cuda.h). */
static void fill_func_attrs(struct cudaFuncAttributes *a, const struct qcuda_out_func_attrs *o)
{
#define V(i) ((int)o->values[i])
	memset(a, 0, sizeof(*a));
	a->maxThreadsPerBlock = V(0);
	a->sharedSizeBytes = (size_t)(unsigned int)V(1);
	a->constSizeBytes = (size_t)(unsigned int)V(2);
	a->localSizeBytes = (size_t)(unsigned int)V(3);
	a->numRegs = V(4);
	a->ptxVersion = V(5);
	a->binaryVersion = V(6);
	a->cacheModeCA = V(7);
	a->maxDynamicSharedSizeBytes = V(8);
	a->preferredShmemCarveout = V(9);
	a->clusterDimMustBeSet = V(10);
	a->requiredClusterWidth = V(11);
	a->requiredClusterHeight = V(12);
	a->requiredClusterDepth = V(13);
	a->nonPortableClusterSizeAllowed = V(14);
	a->clusterSchedulingPolicyPreference = V(15);
#undef V
}

/* Asked once per function, again after cudaFuncSetAttribute (funccache.c). */
QC_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	struct qcuda_out_func_attrs out;
	uint64_t fh = 0;
	cudaError_t e;

	if (!attr)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	if (e == cudaSuccess)
		e = qc_func_attrs(fh, &out);
	if (e != cudaSuccess)
		return qc_ret(e);
	fill_func_attrs(attr, &out);
	return cudaSuccess;
}

/* The backend refuses attributes and values CUDA refuses (cudaErrorInvalidValue). */
QC_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	uint64_t fh = 0;
	cudaError_t e = func_of(func, &fh);

	if (e == cudaSuccess)
		e = qc_func_set_attr(fh, (uint32_t)attr, value);
	return qc_ret(e);
}

/* cudaOccupancyMaxActiveClusters (query 0) and MaxPotentialClusterSize (1): the
 * host driver's answer for the launch configuration and its cluster attributes. */
static cudaError_t clusters(int *out, const void *func, const cudaLaunchConfig_t *config, uint32_t query)
{
	uint64_t fh = 0, n = 0;
	cudaError_t e;

	if (!out || !config || (config->numAttrs && !config->attrs))
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	if (e == cudaSuccess)
		e = qc_occupancy_clusters(
			fh, (const unsigned int[3]){ config->gridDim.x, config->gridDim.y, config->gridDim.z },
			(const unsigned int[3]){ config->blockDim.x, config->blockDim.y, config->blockDim.z },
			(uint32_t)config->dynamicSmemBytes, config->attrs, config->numAttrs, query, &n);
	if (e != cudaSuccess)
		return qc_ret(e);
	*out = (int)n;
	return cudaSuccess;
}

QC_API cudaError_t cudaOccupancyMaxActiveClusters(int *numClusters, const void *func, const cudaLaunchConfig_t *config)
{
	return clusters(numClusters, func, config, 0);
}

QC_API cudaError_t cudaOccupancyMaxPotentialClusterSize(int *clusterSize, const void *func,
							const cudaLaunchConfig_t *config)
{
	return clusters(clusterSize, func, config, 1);
}

/* What the cudaOccupancyMaxPotentialBlockSize* templates of cuda_runtime.h call. */
QC_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, const void *func,
									  int blockSize, size_t dynamicSMemSize,
									  unsigned int flags)
{
	uint64_t fh = 0, n = 0;
	cudaError_t e;

	if (!numBlocks)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	if (e == cudaSuccess)
		e = qc_occupancy_blocks(fh, dynamicSMemSize, blockSize, flags, &n);
	if (e != cudaSuccess)
		return qc_ret(e);
	*numBlocks = (int)n;
	return cudaSuccess;
}

QC_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func, int blockSize,
								 size_t dynamicSMemSize)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
								      cudaOccupancyDefault);
}

QC_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, const void *func, int numBlocks,
							     int blockSize)
{
	uint64_t fh = 0, bytes = 0;
	cudaError_t e;

	if (!dynamicSmemSize)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	/* OCCUPANCY_SMEM reads neither dynamic_smem nor flags: 0 */
	if (e == cudaSuccess)
		e = qc_req_occupancy_smem(fh, 0, blockSize, 0, numBlocks, &bytes);
	if (e != cudaSuccess)
		return qc_ret(e);
	*dynamicSmemSize = (size_t)bytes;
	return cudaSuccess;
}

/* A hint: accepted and ignored. */
QC_API cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	if (!qc_kernel_find(func))
		return qc_ret(cudaErrorInvalidDeviceFunction);
	if ((unsigned)cacheConfig > cudaFuncCachePreferEqual)
		return qc_ret(cudaErrorInvalidValue);
	return cudaSuccess;
}

/* Bank sizes are fixed since Maxwell (four bytes): a hint, accepted and
 * left there, as CUDA does on such devices. */
QC_API cudaError_t cudaFuncSetSharedMemConfig(const void *func, enum cudaSharedMemConfig config)
{
	if (!qc_kernel_by_func(func))
		return qc_ret(cudaErrorInvalidDeviceFunction);
	if ((unsigned)config > cudaSharedMemBankSizeEightByte)
		return qc_ret(cudaErrorInvalidValue);
	return cudaSuccess;
}

/* The layout launches pack parameters by, as the driver reported it. */
cudaError_t qc_param_info(struct qc_kernel *k, size_t index, size_t *offset, size_t *size)
{
	uint64_t fh;
	cudaError_t e = qc_kernel_ready(k, &fh);

	if (e != cudaSuccess)
		return e;
	if (!offset || index >= k->num_params)
		return cudaErrorInvalidValue;
	*offset = k->offset[index];
	if (size)
		*size = k->size[index];
	return cudaSuccess;
}

QC_API cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
	return qc_ret(qc_param_info(qc_kernel_by_func(func), paramIndex, paramOffset, paramSize));
}

/* The name in the fat binary (mangled unless the kernel is extern "C"),
 * known from registration: no module is loaded for it. */
QC_API cudaError_t cudaFuncGetName(const char **name, const void *func)
{
	struct qc_kernel *k;

	if (!name)
		return qc_ret(cudaErrorInvalidValue);
	k = qc_kernel_by_func(func);
	if (!k)
		return qc_ret(cudaErrorInvalidDeviceFunction);
	*name = k->device_name;
	return cudaSuccess;
}
