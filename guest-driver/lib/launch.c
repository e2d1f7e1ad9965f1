/* SPDX-License-Identifier: MIT */
/*
 * Launches: the <<<>>> launch configuration stack, kernel handles
 * (cudaGetKernel, cudaGetFuncBySymbol) and the launch calls.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h> /* CU_LAUNCH_PARAM_*: the `extra` form is the driver API's */

#include "graph.h"

#define QC_CONFIG_DEPTH 16
struct launch_config {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
};
static __thread struct launch_config config_stack[QC_CONFIG_DEPTH];
static __thread unsigned int config_depth;

QC_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, struct CUstream_st *stream)
{
	if (config_depth >= QC_CONFIG_DEPTH)
		return 1;
	config_stack[config_depth++] = (struct launch_config){ gridDim, blockDim, sharedMem, stream };
	return 0;
}

QC_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream)
{
	struct launch_config *c;

	if (config_depth == 0)
		return qc_ret(cudaErrorMissingConfiguration);
	c = &config_stack[--config_depth];
	*gridDim = c->grid;
	*blockDim = c->block;
	*sharedMem = c->shmem;
	*(cudaStream_t *)stream = c->stream;
	return cudaSuccess;
}

static int clustered(const struct qc_launch_mode *mode)
{
	return mode && (mode->cluster[0] > 1 || mode->cluster[1] > 1 || mode->cluster[2] > 1);
}

/* A launch with attributes (LAUNCH_EX): l's fields, then the mode's, then
 * l's parameters (after l in its buffer). A cooperative one is always sent
 * on its own: whether its grid fits at once depends on the grid. */
static cudaError_t launch_ex_call(const struct qcuda_args_launch *l, const struct qc_launch_mode *mode)
{
	union {
		struct qcuda_args_launch_ex x;
		unsigned char b[sizeof(struct qcuda_args_launch_ex) + QCUDA_MAX_PARAM_BYTES];
	} buf;
	uint32_t len;
	cudaError_t e;

	memset(&buf.x, 0, sizeof(buf.x));
	buf.x.func = l->func;
	buf.x.stream = l->stream;
	memcpy(buf.x.grid, l->grid, sizeof(buf.x.grid));
	memcpy(buf.x.block, l->block, sizeof(buf.x.block));
	buf.x.shared_mem = l->shared_mem;
	buf.x.param_bytes = l->param_bytes;
	memcpy(buf.x.cluster, mode->cluster, sizeof(buf.x.cluster));
	buf.x.flags = mode->cooperative ? QCUDA_LAUNCH_COOPERATIVE : 0;
	memcpy(buf.b + sizeof(buf.x), (const unsigned char *)l + sizeof(*l), l->param_bytes);
	len = (uint32_t)(sizeof(buf.x) + l->param_bytes);
	if (!mode->cooperative && qc_launch_shape_known(&buf.x))
		return qc_post_launch_ex(&buf.x, len);
	e = qc_req_launch_ex(&buf.x, len);
	if (e == cudaSuccess && !mode->cooperative)
		qc_launch_shape_launched(&buf.x);
	return e;
}

/* The launch of k with its parameters packed by pack(), as mode says (NULL:
 * plain, posted). */
static cudaError_t launch_with(struct qc_kernel *k, dim3 grid, dim3 block, size_t shmem, cudaStream_t stream, int ptds,
			       const struct qc_launch_mode *mode,
			       cudaError_t (*pack)(const struct qc_kernel *k, unsigned char *params, const void *src,
						   size_t size),
			       const void *src, size_t size)
{
	union {
		struct qcuda_args_launch l;
		unsigned char b[sizeof(struct qcuda_args_launch) + QCUDA_MAX_PARAM_BYTES];
	} buf;
	unsigned char *params = buf.b + sizeof(buf.l);
	uint32_t len; /* the struct and the packed parameters after it */
	uint64_t func;
	cudaError_t e = qc_kernel_ready(k, &func);

	if (e != cudaSuccess)
		return e;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || shmem > UINT32_MAX)
		return cudaErrorInvalidValue; /* what CUDA 13 answers (H100, driver 580) */
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	memset(&buf, 0, sizeof(buf.l) + k->param_bytes);
	e = pack(k, params, src, size);
	if (e != cudaSuccess)
		return e;
	buf.l.func = func;
	buf.l.stream = qc_stream(stream, ptds);
	buf.l.grid[0] = grid.x, buf.l.grid[1] = grid.y, buf.l.grid[2] = grid.z;
	buf.l.block[0] = block.x, buf.l.block[1] = block.y, buf.l.block[2] = block.z;
	buf.l.shared_mem = (uint32_t)shmem;
	buf.l.param_bytes = k->param_bytes;
	len = (uint32_t)(sizeof(buf.l) + k->param_bytes);
	if (qc_capture_active(stream, ptds)) { /* a kernel node instead */
		struct qc_node_op op;

		e = qc_node_op_kernel(&op, k, grid, block, shmem, NULL, params, k->param_bytes);
		if (e != cudaSuccess)
			return e;
		op.kernel.cooperative = mode && mode->cooperative;
		if (clustered(mode)) {
			cudaLaunchAttributeValue v = { .clusterDim = { mode->cluster[0], mode->cluster[1],
								       mode->cluster[2] } };

			e = qc_kattr_set(&op, cudaLaunchAttributeClusterDimension, &v);
			if (e != cudaSuccess) {
				qc_node_op_free(&op);
				return e;
			}
		}
		if (qc_capture_op(stream, ptds, &op, &e))
			return e;
		qc_node_op_free(&op); /* the capture ended meanwhile: launch */
	}
	/* Not posted: whether the grid fits on the device at once
	 * (cudaErrorCooperativeLaunchTooLarge), or in clusters, is this call's
	 * answer, as in CUDA. */
	if (clustered(mode))
		return launch_ex_call(&buf.l, mode);
	if (mode && mode->cooperative)
		return qc_req_launch_cooperative(&buf.l, len);
	return qc_post_launch(&buf.l, len);
}

/* args: one pointer per parameter, each copied at its offset in the layout. */
static cudaError_t pack_args(const struct qc_kernel *k, unsigned char *params, const void *src, size_t size)
{
	void *const *args = src;

	(void)size;
	if (k->num_params && !args)
		return cudaErrorInvalidValue;
	for (uint32_t i = 0; i < k->num_params; i++) {
		if (!args[i])
			return cudaErrorInvalidValue;
		memcpy(params + k->offset[i], args[i], k->size[i]);
	}
	return cudaSuccess;
}

/* src: the parameters already in the layout, size bytes (must be its size). */
/* A packed buffer (CU_LAUNCH_PARAM_BUFFER_POINTER) may be shorter than the
 * kernel's parameters, as the driver allows: NCCL's kernels take a 4 KiB
 * struct and are given only the part its work uses. The rest is zeroes. */
static cudaError_t pack_copy(const struct qc_kernel *k, unsigned char *params, const void *src, size_t size)
{
	if (size > k->param_bytes || (size && !src))
		return cudaErrorInvalidValue;
	memcpy(params, src, size);
	memset(params + size, 0, k->param_bytes - size);
	return cudaSuccess;
}

cudaError_t qc_extra_buffer(void **extra, const void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (unsigned int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
			*size = *(size_t *)extra[i + 1];
		else
			return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

cudaError_t qc_launch(struct qc_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream,
		      int ptds, const struct qc_launch_mode *mode)
{
	return launch_with(k, grid, block, shmem, stream, ptds, mode, pack_args, args, 0);
}

cudaError_t qc_launch_packed(struct qc_kernel *k, dim3 grid, dim3 block, const void *params, size_t size, size_t shmem,
			     cudaStream_t stream, int ptds, const struct qc_launch_mode *mode)
{
	return launch_with(k, grid, block, shmem, stream, ptds, mode, pack_copy, params, size);
}

static const struct qc_launch_mode cooperative_mode = { .cooperative = 1, .cluster = { 1, 1, 1 } };

static cudaError_t launch(struct qc_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem, cudaStream_t stream,
			  int ptds)
{
	return qc_launch(k, grid, block, args, shmem, stream, ptds, NULL);
}

QC_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	struct qc_kernel *k = qc_kernel_find(hostFun);

	if (!kernel)
		return qc_ret(cudaErrorInvalidValue);
	if (!k)
		return qc_ret(cudaErrorInvalidDeviceFunction);
	*kernel = (cudaKernel_t)(void *)k;
	return cudaSuccess;
}

QC_API cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return __cudaGetKernel(kernelPtr, entryFuncAddr);
}

QC_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
				      cudaStream_t stream)
{
	return qc_ret(launch(qc_kernel_of(kernel), gridDim, blockDim, args, sharedMem, stream, 0));
}

QC_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
					   size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch(qc_kernel_of(kernel), gridDim, blockDim, args, sharedMem, stream, 1));
}

QC_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
				    cudaStream_t stream)
{
	return qc_ret(launch(qc_kernel_find(func), gridDim, blockDim, args, sharedMem, stream, 0));
}

QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
					 cudaStream_t stream);
QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
					 cudaStream_t stream)
{
	return qc_ret(launch(qc_kernel_find(func), gridDim, blockDim, args, sharedMem, stream, 1));
}

QC_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					       size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(
		qc_launch(qc_kernel_by_func(func), gridDim, blockDim, args, sharedMem, stream, 0, &cooperative_mode));
}

QC_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
						    size_t sharedMem, cudaStream_t stream);
QC_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
						    size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(
		qc_launch(qc_kernel_by_func(func), gridDim, blockDim, args, sharedMem, stream, 1, &cooperative_mode));
}

/* Cooperative launches and thread-block clusters are honoured. Attributes
 * that are hints for the hardware, changing no result (a launch's priority,
 * its L2 access policy window: the stream's own ones are applied through
 * cudaStreamSetAttribute; programmatic stream serialization: the kernel
 * runs after its predecessor, as it may; the cluster scheduling policy; the
 * memory synchronization domain: the kernel's fences then order against
 * every kernel's, not only its domain's, which is stronger, never weaker),
 * are accepted and not carried per launch; others are refused with a note. */
static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args, int ptds)
{
	struct qc_launch_mode mode = { .cooperative = 0, .cluster = { 1, 1, 1 } };

	if (!config)
		return cudaErrorInvalidValue;
	if (config->numAttrs && !config->attrs)
		return cudaErrorInvalidValue;
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		const cudaLaunchAttribute *a = &config->attrs[i];

		if (a->id == cudaLaunchAttributeIgnore || a->id == cudaLaunchAttributePriority ||
		    a->id == cudaLaunchAttributeAccessPolicyWindow ||
		    a->id == cudaLaunchAttributeProgrammaticStreamSerialization ||
		    a->id == cudaLaunchAttributeClusterSchedulingPolicyPreference ||
		    a->id == cudaLaunchAttributeMemSyncDomain)
			continue;
		if (a->id == cudaLaunchAttributeCooperative) {
			mode.cooperative = a->val.cooperative != 0; /* the last one counts */
			continue;
		}
		if (a->id == cudaLaunchAttributeClusterDimension) {
			mode.cluster[0] = a->val.clusterDim.x;
			mode.cluster[1] = a->val.clusterDim.y;
			mode.cluster[2] = a->val.clusterDim.z;
			continue;
		}
		qc_msg("cudaLaunchKernelEx: launch attribute %d is not supported by qcuda: "
		       "returning cudaErrorNotSupported",
		       (int)a->id);
		return cudaErrorNotSupported;
	}
	return qc_launch(qc_kernel_find(func), config->gridDim, config->blockDim, args, config->dynamicSmemBytes,
			 config->stream, ptds, &mode);
}

QC_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	return qc_ret(launch_ex(config, func, args, 0));
}

QC_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args);
QC_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func, void **args)
{
	return qc_ret(launch_ex(config, func, args, 1));
}

/* A cudaFunction_t here is the kernel's record (only the runtime takes it). */
QC_API cudaError_t cudaGetFuncBySymbol(cudaFunction_t *functionPtr, const void *symbolPtr)
{
	struct qc_kernel *k;
	uint64_t func;
	cudaError_t e;

	if (!functionPtr)
		return qc_ret(cudaErrorInvalidValue);
	QC_ENTER(e);
	k = qc_kernel_find(symbolPtr);
	if (!k)
		return qc_ret(cudaErrorInvalidDeviceFunction);
	e = qc_kernel_get(k, &func);
	if (e != cudaSuccess)
		return qc_ret(e);
	*functionPtr = (cudaFunction_t)(void *)k;
	return cudaSuccess;
}
