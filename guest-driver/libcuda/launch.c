/* SPDX-License-Identifier: MIT */
/*
 * Launches (cuLaunchKernel with parameter pointers or the packed `extra`
 * buffer, cuLaunchKernelEx, cooperative launches), function and kernel
 * attributes, and occupancy: the runtime layer's launch path (posted, with
 * the kernel's parameter layout from the host) under the current context.
 */
#include <string.h>

#include "cu.h"

static CUresult launch(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
		       unsigned int by, unsigned int bz, unsigned int smem, CUstream s, void **params, void **extra,
		       int ptds, const struct qc_launch_mode *mode)
{
	struct qc_kernel *k = cu_kernel(f);
	dim3 grid = { gx, gy, gz }, block = { bx, by, bz };
	const void *buf;
	size_t size;
	CUresult r;

	CU_ENTER(r);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	if (params && extra) /* one form or the other */
		return CUDA_ERROR_INVALID_VALUE;
	if (!extra)
		return cu_result(qc_launch(k, grid, block, params, smem, (cudaStream_t)s, ptds, mode));
	r = cu_result(qc_extra_buffer(extra, &buf, &size));
	if (r != CUDA_SUCCESS)
		return r;
	return cu_result(qc_launch_packed(k, grid, block, buf, size, smem, (cudaStream_t)s, ptds, mode));
}

static const struct qc_launch_mode cooperative_mode = { .cooperative = 1, .cluster = { 1, 1, 1 } };

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, extra, 0, NULL);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
			     unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
			     unsigned int sharedMemBytes, CUstream hStream, void **kernelParams, void **extra)
{
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, extra, 1, NULL);
}

CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
				   unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
				   unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, NULL, 0, &cooperative_mode);
}

CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					void **kernelParams)
{
	return launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, NULL, 1, &cooperative_mode);
}

/* Attributes that are hints changing nothing a program can observe (a
 * launch's priority, its L2 access policy window, leave to start before the
 * previous kernel ends: programmatic stream serialization, whose kernels'
 * waits for their predecessor then return at once; how clusters are spread;
 * the memory synchronization domain NCCL puts its kernels in, without which
 * their fences order against every kernel's, which is stronger, never
 * weaker) are accepted; cooperative
 * launches and thread-block clusters are honoured; the rest are refused with
 * a note. Refusing a hint is not harmless: cuDNN then picks other kernels,
 * and a training run's losses differ from native ones. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction f, void **params, void **extra, int ptds)
{
	struct qc_launch_mode mode = { .cooperative = 0, .cluster = { 1, 1, 1 } };

	if (!c || (c->numAttrs && !c->attrs))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < c->numAttrs; i++) {
		const CUlaunchAttribute *a = &c->attrs[i];

		switch (a->id) {
		case CU_LAUNCH_ATTRIBUTE_IGNORE:
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
		case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
			continue;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			mode.cooperative = a->value.cooperative != 0; /* the last one counts */
			continue;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			mode.cluster[0] = a->value.clusterDim.x;
			mode.cluster[1] = a->value.clusterDim.y;
			mode.cluster[2] = a->value.clusterDim.z;
			continue;
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
			continue;
		default:
			break;
		}
		qc_msg("cuLaunchKernelEx: launch attribute %d is not supported by qcuda: "
		       "returning CUDA_ERROR_NOT_SUPPORTED",
		       (int)a->id);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY, c->blockDimZ,
		      c->sharedMemBytes, c->hStream, params, extra, ptds, &mode);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 0);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	return launch_ex(config, f, kernelParams, extra, 1);
}

/* ------------------------------------------------------------ attributes */

/* The function handle of a kernel the program holds, under the current context. */
static CUresult function_of(const void *h, uint64_t *fh)
{
	struct qc_kernel *k = cu_kernel(h);
	CUresult r;

	CU_ENTER(r);
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	return cu_result(qc_kernel_get(k, fh));
}

/* function_of for a call whose arguments are tested first: a failed test
 * is CUDA_ERROR_INVALID_VALUE before anything else. */
static CUresult function_args(int args_ok, const void *h, uint64_t *fh)
{
	return args_ok ? function_of(h, fh) : CUDA_ERROR_INVALID_VALUE;
}

static CUresult func_attribute(int *pi, CUfunction_attribute attrib, const void *h)
{
	struct qcuda_out_func_attrs out;
	uint64_t fh;
	CUresult r;

	r = function_args(pi && (unsigned int)attrib < QCUDA_NUM_FUNC_ATTRS, h, &fh);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_func_attrs(fh, &out));
	if (r == CUDA_SUCCESS)
		*pi = (int)out.values[attrib];
	return r;
}

/* The settable attributes have the runtime's numbers (cudaFuncAttribute). */
static CUresult func_set_attribute(const void *h, CUfunction_attribute attrib, int value)
{
	uint64_t fh;
	CUresult r = function_of(h, &fh);

	return r != CUDA_SUCCESS ? r : cu_result(qc_func_set_attr(fh, (uint32_t)attrib, value));
}

CUresult cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	return func_attribute(pi, attrib, hfunc);
}

CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	return func_set_attribute(hfunc, attrib, value);
}

/* One device per VM: dev only has to be it. */
CUresult cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : func_attribute(pi, attrib, kernel);
}

CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : func_set_attribute(kernel, attrib, val);
}

/* Cache configurations are hints: accepted. */
CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	if (!cu_kernel(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	return (unsigned int)config > CU_FUNC_CACHE_PREFER_EQUAL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : cuFuncSetCacheConfig((CUfunction)(void *)kernel, config);
}

/* Bank sizes are fixed: a valid one is accepted and changes nothing. */
CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	if (!cu_kernel(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	return (unsigned int)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE
										: CUDA_SUCCESS;
}

/* ------------------------------------------------------------- occupancy */

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
							      size_t dynamicSMemSize, unsigned int flags)
{
	uint64_t fh, n = 0;
	CUresult r;

	r = function_args(numBlocks != NULL, func, &fh);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_occupancy_blocks(fh, dynamicSMemSize, blockSize, flags, &n));
	if (r == CUDA_SUCCESS)
		*numBlocks = (int)n;
	return r;
}

CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
						     size_t dynamicSMemSize)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize,
								    CU_OCCUPANCY_DEFAULT);
}

CUresult cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize)
{
	uint64_t fh, bytes = 0;
	CUresult r;

	r = function_args(dynamicSmemSize != NULL, func, &fh);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_occupancy_smem(fh, 0, blockSize, 0, numBlocks, &bytes));
	if (r == CUDA_SUCCESS)
		*dynamicSmemSize = (size_t)bytes;
	return r;
}

/* CUDA's own search (as cuda_runtime.h's cudaOccupancyMaxPotentialBlockSize
 * template does it): the block size, in warps, with the most threads
 * resident per multiprocessor. */
static CUresult max_potential(int *minGridSize, int *blockSize, CUfunction func, CUoccupancyB2DSize smemFn, size_t smem,
			      int limit, unsigned int flags)
{
	int max_threads, warp, sms, best = 0, best_blocks = 0, dev;
	CUresult r;

	if (!minGridSize || !blockSize)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cuCtxGetDevice(&dev);
	if (r == CUDA_SUCCESS)
		r = func_attribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (r != CUDA_SUCCESS)
		return r;
	if (limit > 0 && limit < max_threads)
		max_threads = limit;
	for (int bs = max_threads - max_threads % warp; bs > 0; bs -= warp) {
		int n = 0;

		r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, func, bs, smemFn ? smemFn(bs) : smem,
									 flags);
		if (r != CUDA_SUCCESS)
			return r;
		if (n * bs > best_blocks * best) {
			best = bs;
			best_blocks = n;
		}
		if (best_blocks * best == max_threads)
			break;
	}
	*blockSize = best;
	*minGridSize = best_blocks * sms;
	return CUDA_SUCCESS;
}

CUresult cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
					  CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
					  int blockSizeLimit)
{
	return max_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit,
			     CU_OCCUPANCY_DEFAULT);
}

CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
						   CUoccupancyB2DSize blockSizeToDynamicSMemSize,
						   size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags)
{
	return max_potential(minGridSize, blockSize, func, blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit,
			     flags);
}

/* Cluster occupancy is the host driver's answer (funccache.c keeps it): it
 * knows how clusters are placed within the GPU's GPCs, which an estimate
 * from blocks per multiprocessor does not, and cuBLASLt picks its kernels
 * by it. */
static CUresult clusters(int *out, CUfunction func, const CUlaunchConfig *config, uint32_t query)
{
	uint64_t fh, n = 0;
	CUresult r;

	r = function_args(out && config && (!config->numAttrs || config->attrs), func, &fh);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_occupancy_clusters(
			fh, (const unsigned int[3]){ config->gridDimX, config->gridDimY, config->gridDimZ },
			(const unsigned int[3]){ config->blockDimX, config->blockDimY, config->blockDimZ },
			config->sharedMemBytes, (const cudaLaunchAttribute *)(const void *)config->attrs,
			config->numAttrs, query, &n));
	if (r == CUDA_SUCCESS)
		*out = (int)n;
	return r;
}

CUresult cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
	return clusters(numClusters, func, config, 0);
}

CUresult cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
	return clusters(clusterSize, func, config, 1);
}
