/* SPDX-License-Identifier: MIT */
/*
 * What nvcc-generated host code calls: fat binary, kernel and variable
 * registration (run by static constructors before main, so nothing here
 * touches the device), the <<<>>> launch configuration stack, launches and
 * the symbol calls.
 *
 * Modules load lazily: the first use of one of a module's kernels or
 * variables uploads its fat binary (MODULE_UPLOAD, then MODULE_LOAD), once
 * per module and device reset; a program that never launches sends nothing.
 * A kernel's function handle and parameter layout (FUNC_GET) and a
 * variable's device range (VAR_GET) are looked up on first use too. The
 * per-module and per-kernel/variable mutexes serialise only these one-time
 * lookups (they are held across the device call, as pthread_once would);
 * everything else runs unlocked on the published results.
 *
 * Handles are valid for one "generation": cudaDeviceReset frees them in the
 * backend and bumps it (qc_module_reset), and the next use loads again.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"

/* nvcc's __fatDeviceText wrapper. */
#define FATBIN_WRAPPER_MAGIC 0x466243b1
struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned char *data;	/* a fatbin header */
	void *filename_or_fatbins;
};

/* The fat binary's header: the image is header_size + fat_size bytes. */
#define FATBIN_MAGIC 0xBA55ED50u
struct fatbin_header {
	uint32_t magic;
	uint16_t version;
	uint16_t header_size;
	uint64_t fat_size;
};

struct qc_module {
	void *handle;		/* what the program holds is &module->handle */
	const struct fatbin_wrapper *fatbin;
	int complete;		/* __cudaRegisterFatBinaryEnd seen */
	pthread_mutex_t lock;	/* serialises loading */
	unsigned int gen;	/* generation of dev/err; 0: never */
	cudaError_t err;	/* the load's result in that generation */
	uint64_t dev;		/* module handle */
	struct qc_module *next;
};

struct qc_kernel {
	struct qc_module *module;
	const void *host_fun;	/* the host stub, the program's key for it */
	const char *device_name;	/* mangled name in the fat binary */
	pthread_mutex_t lock;
	unsigned int gen;
	cudaError_t err;
	uint64_t func;		/* function handle */
	uint32_t num_params, param_bytes;
	uint32_t *offset, *size;	/* the layout, set once */
	struct qc_kernel *next;
};

struct qc_var {
	struct qc_module *module;
	const void *host_var;
	const char *device_name;
	size_t size;
	int constant, managed;
	pthread_mutex_t lock;
	unsigned int gen;
	cudaError_t err;
	uint64_t dptr, dsize;
	struct qc_var *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_module *modules;
static struct qc_kernel *kernels;
static struct qc_var *vars;
static atomic_uint generation = 1;
static atomic_ullong next_upload_id = 1;

static struct qc_module *module_of(void **handle)
{
	return handle ? (struct qc_module *)((char *)handle - offsetof(struct qc_module, handle)) : NULL;
}

QC_API void **__cudaRegisterFatBinary(void *fatCubin)
{
	struct qc_module *m = calloc(1, sizeof(*m));

	if (!m) {
		qc_msg("out of memory registering a fat binary");
		abort();
	}
	m->fatbin = fatCubin;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_lock(&reg_lock);
	m->next = modules;
	modules = m;
	pthread_mutex_unlock(&reg_lock);
	return &m->handle;
}

QC_API void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	struct qc_module *m = module_of(fatCubinHandle);

	if (m)
		m->complete = 1;
}

/* The module's handle in the current generation, loading it if need be. */
static cudaError_t module_get(struct qc_module *m, uint64_t *dev)
{
	unsigned int gen = atomic_load(&generation);
	const struct fatbin_wrapper *w = m->fatbin;
	struct qcuda_args_module_upload up;
	struct qcuda_args_module_load ld;
	struct fatbin_header h;
	uint64_t size, handle = 0;
	cudaError_t e;

	pthread_mutex_lock(&m->lock);
	if (m->gen == gen) {
		e = m->err;
		*dev = m->dev;
		pthread_mutex_unlock(&m->lock);
		return e;
	}
	e = cudaSuccess;
	if (!w || w->magic != FATBIN_WRAPPER_MAGIC || !w->data) {
		qc_msg("a module's fat binary wrapper is not one nvcc makes");
		e = cudaErrorInvalidKernelImage;
	} else {
		memcpy(&h, w->data, sizeof(h));
		size = (uint64_t)h.header_size + h.fat_size;
		if (h.magic != FATBIN_MAGIC || h.header_size < sizeof(h)) {
			qc_msg("a module's fat binary has an unknown header (magic %#x)", h.magic);
			e = cudaErrorInvalidKernelImage;
		} else if (size > QCUDA_MAX_MODULE) {
			qc_msg("a module's fat binary is %llu bytes, more than qcuda takes (%u)",
			       (unsigned long long)size, QCUDA_MAX_MODULE);
			e = cudaErrorNotSupported;
		}
	}
	if (e == cudaSuccess) {
		up.upload_id = atomic_fetch_add(&next_upload_id, 1);
		up.size = size;
		e = qc_call(QCUDA_CMD_MODULE_UPLOAD, &up, sizeof(up), NULL, 0, QT_TO_DEVICE,
			    (void *)w->data, size, NULL);
		if (e == cudaSuccess) {
			ld.upload_id = up.upload_id;
			e = qc_call(QCUDA_CMD_MODULE_LOAD, &ld, sizeof(ld), NULL, 0, QT_NONE, NULL, 0,
				    &handle);
		}
		qc_debug("module of %llu bytes: %s, handle %#llx", (unsigned long long)size,
			 qc_error_name(e) ? qc_error_name(e) : "?", (unsigned long long)handle);
	}
	/* A failure stays (as CUDA's does for a bad image), except for
	 * shortages, which may pass. */
	if (e != cudaErrorMemoryAllocation && e != cudaErrorUnknown) {
		m->gen = gen;
		m->err = e;
		m->dev = handle;
	}
	*dev = handle;
	pthread_mutex_unlock(&m->lock);
	return e;
}

void qc_module_reset(void)
{
	atomic_fetch_add(&generation, 1);
}

QC_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct qc_module *m = module_of(fatCubinHandle), **pm;
	struct qc_kernel *dead_k = NULL, **pk;
	struct qc_var *dead_v = NULL, **pv;
	unsigned int gen = atomic_load(&generation);

	if (!m)
		return;
	pthread_mutex_lock(&reg_lock);
	for (pk = &kernels; *pk;) {
		struct qc_kernel *k = *pk;

		if (k->module == m) {
			*pk = k->next;
			k->next = dead_k;
			dead_k = k;
		} else {
			pk = &k->next;
		}
	}
	for (pv = &vars; *pv;) {
		struct qc_var *v = *pv;

		if (v->module == m) {
			*pv = v->next;
			v->next = dead_v;
			dead_v = v;
		} else {
			pv = &v->next;
		}
	}
	for (pm = &modules; *pm; pm = &(*pm)->next) {
		if (*pm == m) {
			*pm = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	while (dead_k) {
		struct qc_kernel *k = dead_k;

		dead_k = k->next;
		free(k->offset);
		free(k->size);
		free(k);
	}
	while (dead_v) {
		struct qc_var *v = dead_v;

		dead_v = v->next;
		if (v->gen == gen && v->err == cudaSuccess)
			qc_mem_remove_symbol(v->dptr);
		free(v);
	}
	if (m->gen == gen && m->err == cudaSuccess && m->dev) {
		struct qcuda_args_handle a = { .handle = m->dev };

		/* At exit: the context may be dead; closing the session frees it anyway. */
		qc_call(QCUDA_CMD_MODULE_UNLOAD, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
	}
	free(m);
}

QC_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun,
				   const char *deviceName, int thread_limit, uint3 *tid,
				   uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct qc_kernel *k = calloc(1, sizeof(*k));

	(void)deviceFun, (void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
	if (!k)
		return;
	k->module = module_of(fatCubinHandle);
	k->host_fun = hostFun;
	k->device_name = deviceName;
	pthread_mutex_init(&k->lock, NULL);
	pthread_mutex_lock(&reg_lock);
	k->next = kernels;
	kernels = k;
	pthread_mutex_unlock(&reg_lock);
}

static void add_var(void **handle, const void *host_var, const char *name, size_t size,
		    int constant, int managed)
{
	struct qc_var *v = calloc(1, sizeof(*v));

	if (!v)
		return;
	v->module = module_of(handle);
	v->host_var = host_var;
	v->device_name = name;
	v->size = size;
	v->constant = constant;
	v->managed = managed;
	pthread_mutex_init(&v->lock, NULL);
	pthread_mutex_lock(&reg_lock);
	v->next = vars;
	vars = v;
	pthread_mutex_unlock(&reg_lock);
}

QC_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress,
			      const char *deviceName, int ext, size_t size, int constant, int global)
{
	(void)deviceAddress, (void)ext, (void)global;
	add_var(fatCubinHandle, hostVar, deviceName, size, constant, 0);
}

QC_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
				     char *deviceAddress, const char *deviceName, int ext,
				     size_t size, int constant, int global)
{
	(void)deviceAddress, (void)ext, (void)global;
	add_var(fatCubinHandle, hostVarPtrAddress, deviceName, size, constant, 1);
}

/* Undocumented; recorded nowhere yet (called at load time: no message). */
QC_API void __cudaRegisterHostVar(void);
QC_API void __cudaRegisterHostVar(void)
{
}

QC_API void __cudaRegisterUnifiedTable(void);
QC_API void __cudaRegisterUnifiedTable(void)
{
}

QC_API char __cudaInitModule(void **fatCubinHandle)
{
	(void)fatCubinHandle;
	return 1;
}

/* ------------------------------------------------- launch configuration */

#define QC_CONFIG_DEPTH 16
struct launch_config {
	dim3 grid, block;
	size_t shmem;
	cudaStream_t stream;
};
static __thread struct launch_config config_stack[QC_CONFIG_DEPTH];
static __thread unsigned int config_depth;

QC_API unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem,
					    struct CUstream_st *stream)
{
	if (config_depth >= QC_CONFIG_DEPTH)
		return 1;
	config_stack[config_depth++] = (struct launch_config){ gridDim, blockDim, sharedMem, stream };
	return 0;
}

QC_API cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem,
					      void *stream)
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

/* ---------------------------------------------------------------- kernels */

static struct qc_kernel *find_kernel(const void *host_fun)
{
	struct qc_kernel *k;

	pthread_mutex_lock(&reg_lock);
	for (k = kernels; k && k->host_fun != host_fun; k = k->next)
		;
	pthread_mutex_unlock(&reg_lock);
	return k;
}

/* k comes from __cudaGetKernel (or is NULL if that failed). */
static struct qc_kernel *kernel_of(cudaKernel_t kernel)
{
	struct qc_kernel *k;

	pthread_mutex_lock(&reg_lock);
	for (k = kernels; k && (void *)k != (void *)kernel; k = k->next)
		;
	pthread_mutex_unlock(&reg_lock);
	return k;
}

/* A kernel's host stub or a cudaKernel_t from cudaGetKernel: the entry
 * points documented with \note_cudaKernel_t in CUDA's headers take both. */
static struct qc_kernel *kernel_by_func(const void *func)
{
	struct qc_kernel *k = find_kernel(func);

	return k ? k : kernel_of((cudaKernel_t)(uintptr_t)func);
}

/* The function handle (and layout) of k in the current generation. */
static cudaError_t kernel_get(struct qc_kernel *k, uint64_t *func)
{
	unsigned int gen = atomic_load(&generation);
	struct qcuda_args_symbol a;
	struct qcuda_out_func_info *fi;
	uint64_t mod, handle = 0;
	cudaError_t e;

	pthread_mutex_lock(&k->lock);
	if (k->gen == gen) {
		e = k->err;
		*func = k->func;
		pthread_mutex_unlock(&k->lock);
		return e;
	}
	e = k->module ? module_get(k->module, &mod) : cudaErrorInvalidDeviceFunction;
	if (e == cudaSuccess && strlen(k->device_name) >= QCUDA_MAX_NAME) {
		qc_msg("kernel name longer than %u bytes: %.60s...", QCUDA_MAX_NAME - 1, k->device_name);
		e = cudaErrorNotSupported;
	}
	fi = e == cudaSuccess ? calloc(1, sizeof(*fi)) : NULL;
	if (e == cudaSuccess && !fi)
		e = cudaErrorMemoryAllocation;
	if (e == cudaSuccess) {
		memset(&a, 0, sizeof(a));
		a.module = mod;
		strcpy(a.name, k->device_name);
		e = qc_call(QCUDA_CMD_FUNC_GET, &a, sizeof(a), fi, sizeof(*fi), QT_NONE, NULL, 0,
			    &handle);
		if (e == cudaSuccess && (fi->num_params > QCUDA_MAX_PARAMS ||
					 fi->param_bytes > QCUDA_MAX_PARAM_BYTES)) {
			qc_msg("%s takes %u bytes of parameters; qcuda passes at most %u",
			       k->device_name, fi->param_bytes, QCUDA_MAX_PARAM_BYTES);
			e = cudaErrorNotSupported;
		}
		for (uint32_t i = 0; e == cudaSuccess && i < fi->num_params; i++) {
			if (fi->offset[i] > fi->param_bytes ||
			    fi->size[i] > fi->param_bytes - fi->offset[i]) {
				qc_msg("FUNC_GET: parameter %u of %s lies outside its %u bytes", i,
				       k->device_name, fi->param_bytes);
				e = cudaErrorUnknown;
			}
		}
		if (e == cudaSuccess && !k->offset) {
			size_t n = fi->num_params ? fi->num_params : 1;

			k->offset = malloc(n * sizeof(uint32_t));
			k->size = malloc(n * sizeof(uint32_t));
			if (!k->offset || !k->size) {
				free(k->offset);
				free(k->size);
				k->offset = k->size = NULL;
				e = cudaErrorMemoryAllocation;
			} else {
				memcpy(k->offset, fi->offset, fi->num_params * sizeof(uint32_t));
				memcpy(k->size, fi->size, fi->num_params * sizeof(uint32_t));
				k->num_params = fi->num_params;
				k->param_bytes = fi->param_bytes;
			}
		}
		free(fi);
	}
	if (e != cudaErrorMemoryAllocation && e != cudaErrorUnknown) {
		k->gen = gen;
		k->err = e;
		k->func = handle;
	}
	*func = handle;
	pthread_mutex_unlock(&k->lock);
	return e;
}

/* cooperative: cudaLaunchCooperativeKernel's launch, every block resident at once. */
static cudaError_t launch_as(struct qc_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem,
			     cudaStream_t stream, int ptds, int cooperative)
{
	union {
		struct qcuda_args_launch l;
		unsigned char b[sizeof(struct qcuda_args_launch) + QCUDA_MAX_PARAM_BYTES];
	} buf;
	unsigned char *params = buf.b + sizeof(buf.l);
	uint64_t func;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	if (!k)
		return cudaErrorInvalidDeviceFunction;
	e = kernel_get(k, &func);
	if (e != cudaSuccess)
		return e;
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	    shmem > UINT32_MAX)
		return cudaErrorInvalidValue;	/* what CUDA 13 answers (H100, driver 580) */
	if (k->num_params && !args)
		return cudaErrorInvalidValue;
	if (!qc_stream_known(stream, ptds))
		return cudaErrorInvalidResourceHandle;
	memset(&buf, 0, sizeof(buf.l) + k->param_bytes);
	for (uint32_t i = 0; i < k->num_params; i++) {
		if (!args[i])
			return cudaErrorInvalidValue;
		memcpy(params + k->offset[i], args[i], k->size[i]);
	}
	buf.l.func = func;
	buf.l.stream = qc_stream(stream, ptds);
	buf.l.grid[0] = grid.x, buf.l.grid[1] = grid.y, buf.l.grid[2] = grid.z;
	buf.l.block[0] = block.x, buf.l.block[1] = block.y, buf.l.block[2] = block.z;
	buf.l.shared_mem = (uint32_t)shmem;
	buf.l.param_bytes = k->param_bytes;
	/* Not posted: whether the grid fits on the device at once
	 * (cudaErrorCooperativeLaunchTooLarge) is this call's answer, as in CUDA. */
	if (cooperative)
		return qc_call(QCUDA_CMD_LAUNCH_COOPERATIVE, &buf,
			       (uint32_t)(sizeof(buf.l) + k->param_bytes), NULL, 0, QT_NONE, NULL, 0,
			       NULL);
	return qc_post(QCUDA_CMD_LAUNCH, &buf, (uint32_t)(sizeof(buf.l) + k->param_bytes));
}

static cudaError_t launch(struct qc_kernel *k, dim3 grid, dim3 block, void **args, size_t shmem,
			  cudaStream_t stream, int ptds)
{
	return launch_as(k, grid, block, args, shmem, stream, ptds, 0);
}

QC_API cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *hostFun)
{
	struct qc_kernel *k = find_kernel(hostFun);

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

QC_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
				      size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch(kernel_of(kernel), gridDim, blockDim, args, sharedMem, stream, 0));
}

QC_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					   void **args, size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch(kernel_of(kernel), gridDim, blockDim, args, sharedMem, stream, 1));
}

QC_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				    size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch(find_kernel(func), gridDim, blockDim, args, sharedMem, stream, 0));
}

QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream);
QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch(find_kernel(func), gridDim, blockDim, args, sharedMem, stream, 1));
}

QC_API cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim,
					       void **args, size_t sharedMem, cudaStream_t stream)
{
	return qc_ret(launch_as(kernel_by_func(func), gridDim, blockDim, args, sharedMem, stream,
			       0, 1));
}

QC_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
						    void **args, size_t sharedMem,
						    cudaStream_t stream);
QC_API cudaError_t cudaLaunchCooperativeKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim,
						    void **args, size_t sharedMem,
						    cudaStream_t stream)
{
	return qc_ret(launch_as(kernel_by_func(func), gridDim, blockDim, args, sharedMem, stream,
			       1, 1));
}

/* Only attributes that change nothing here, and cooperative launches, are honoured. */
static cudaError_t launch_ex(const cudaLaunchConfig_t *config, const void *func, void **args,
			     int ptds)
{
	int cooperative = 0;

	if (!config)
		return cudaErrorInvalidValue;
	if (config->numAttrs && !config->attrs)
		return cudaErrorInvalidValue;
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		const cudaLaunchAttribute *a = &config->attrs[i];

		if (a->id == cudaLaunchAttributeIgnore)
			continue;
		if (a->id == cudaLaunchAttributeCooperative) {
			cooperative = a->val.cooperative != 0;	/* the last one counts */
			continue;
		}
		if (a->id == cudaLaunchAttributeClusterDimension && a->val.clusterDim.x <= 1 &&
		    a->val.clusterDim.y <= 1 && a->val.clusterDim.z <= 1)
			continue;
		qc_msg("cudaLaunchKernelEx: launch attribute %d is not supported by qcuda: "
		       "returning cudaErrorNotSupported", (int)a->id);
		return cudaErrorNotSupported;
	}
	return launch_as(find_kernel(func), config->gridDim, config->blockDim, args,
			 config->dynamicSmemBytes, config->stream, ptds, cooperative);
}

QC_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
				       void **args)
{
	return qc_ret(launch_ex(config, func, args, 0));
}

QC_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
					    void **args);
QC_API cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t *config, const void *func,
					    void **args)
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
	e = qc_ready();
	if (e != cudaSuccess)
		return qc_ret(e);
	k = find_kernel(symbolPtr);
	if (!k)
		return qc_ret(cudaErrorInvalidDeviceFunction);
	e = kernel_get(k, &func);
	if (e != cudaSuccess)
		return qc_ret(e);
	*functionPtr = (cudaFunction_t)(void *)k;
	return cudaSuccess;
}

/* ------------------------------------ function attributes and occupancy */

_Static_assert(QCUDA_NUM_FUNC_ATTRS == cudaFuncAttributeMax,
	       "FUNC_ATTRS carries every CUfunction_attribute");

/* The function handle behind func (a host stub or a cudaKernel_t). */
static cudaError_t func_of(const void *func, uint64_t *handle)
{
	struct qc_kernel *k;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	k = kernel_by_func(func);
	if (!k)
		return cudaErrorInvalidDeviceFunction;
	return kernel_get(k, handle);
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

/* Asked each time: maxDynamicSharedSizeBytes and the carveout change with
 * cudaFuncSetAttribute. */
QC_API cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr, const void *func)
{
	struct qcuda_args_handle a;
	struct qcuda_out_func_attrs out;
	uint64_t fh = 0;
	cudaError_t e;

	if (!attr)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	a.handle = fh;
	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_FUNC_ATTRS, &a, sizeof(a), &out, sizeof(out), QT_NONE, NULL, 0,
			    NULL);
	if (e != cudaSuccess)
		return qc_ret(e);
	fill_func_attrs(attr, &out);
	return cudaSuccess;
}

/* The backend refuses attributes and values CUDA refuses (cudaErrorInvalidValue). */
QC_API cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value)
{
	struct qcuda_args_func_attr a = { .attr = (uint32_t)attr, .value = (uint32_t)value };
	uint64_t fh = 0;
	cudaError_t e = func_of(func, &fh);

	a.func = fh;
	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_FUNC_SET_ATTR, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, NULL);
	return qc_ret(e);
}

/* What the cudaOccupancyMaxPotentialBlockSize* templates of cuda_runtime.h call. */
QC_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks,
									 const void *func,
									 int blockSize,
									 size_t dynamicSMemSize,
									 unsigned int flags)
{
	struct qcuda_args_occupancy a = {
		.dynamic_smem = dynamicSMemSize,
		.block_size = (uint32_t)blockSize,
		.flags = flags,
	};
	uint64_t fh = 0, n = 0;
	cudaError_t e;

	if (!numBlocks)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	a.func = fh;
	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_OCCUPANCY_BLOCKS, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, &n);
	if (e != cudaSuccess)
		return qc_ret(e);
	*numBlocks = (int)n;
	return cudaSuccess;
}

QC_API cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, const void *func,
								 int blockSize, size_t dynamicSMemSize)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
								      dynamicSMemSize,
								      cudaOccupancyDefault);
}

QC_API cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
							     const void *func, int numBlocks,
							     int blockSize)
{
	struct qcuda_args_occupancy a = {
		.block_size = (uint32_t)blockSize,
		.num_blocks = (uint32_t)numBlocks,
	};
	uint64_t fh = 0, bytes = 0;
	cudaError_t e;

	if (!dynamicSmemSize)
		return qc_ret(cudaErrorInvalidValue);
	e = func_of(func, &fh);
	a.func = fh;
	if (e == cudaSuccess)
		e = qc_call(QCUDA_CMD_OCCUPANCY_SMEM, &a, sizeof(a), NULL, 0, QT_NONE, NULL, 0, &bytes);
	if (e != cudaSuccess)
		return qc_ret(e);
	*dynamicSmemSize = (size_t)bytes;
	return cudaSuccess;
}

/* A hint: accepted and ignored. */
QC_API cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	if (!find_kernel(func))
		return qc_ret(cudaErrorInvalidDeviceFunction);
	if ((unsigned)cacheConfig > cudaFuncCachePreferEqual)
		return qc_ret(cudaErrorInvalidValue);
	return cudaSuccess;
}

/* -------------------------------------------------------------- variables */

/* The device range of the variable whose host shadow is symbol. */
static cudaError_t var_get(const void *symbol, uint64_t *dptr, uint64_t *size)
{
	unsigned int gen = atomic_load(&generation);
	struct qcuda_args_symbol a;
	struct qcuda_out_var_info out;
	struct qc_var *v;
	uint64_t mod;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&reg_lock);
	for (v = vars; v && v->host_var != symbol; v = v->next)
		;
	pthread_mutex_unlock(&reg_lock);
	if (!v)
		return cudaErrorInvalidSymbol;
	if (v->managed) {
		qc_msg("__managed__ variables are not supported by qcuda (%s): returning "
		       "cudaErrorNotSupported", v->device_name);
		return cudaErrorNotSupported;
	}
	pthread_mutex_lock(&v->lock);
	if (v->gen != gen) {
		memset(&out, 0, sizeof(out));
		e = v->module ? module_get(v->module, &mod) : cudaErrorInvalidSymbol;
		if (e == cudaSuccess && strlen(v->device_name) >= QCUDA_MAX_NAME) {
			qc_msg("variable name longer than %u bytes: %.60s...", QCUDA_MAX_NAME - 1,
			       v->device_name);
			e = cudaErrorNotSupported;
		}
		if (e == cudaSuccess) {
			memset(&a, 0, sizeof(a));
			a.module = mod;
			strcpy(a.name, v->device_name);
			e = qc_call(QCUDA_CMD_VAR_GET, &a, sizeof(a), &out, sizeof(out), QT_NONE,
				    NULL, 0, NULL);
		}
		if (e == cudaSuccess && !out.dptr) {
			qc_msg("VAR_GET returned a NULL device pointer for %s", v->device_name);
			e = cudaErrorUnknown;
		}
		if (e == cudaSuccess)
			qc_mem_add_symbol(out.dptr, out.size);
		if (e != cudaErrorMemoryAllocation && e != cudaErrorUnknown) {
			v->gen = gen;
			v->err = e;
			v->dptr = out.dptr;
			v->dsize = out.size;
		}
	} else {
		e = v->err;
		out.dptr = v->dptr;
		out.size = v->dsize;
	}
	pthread_mutex_unlock(&v->lock);
	*dptr = out.dptr;
	*size = out.size;
	return e;
}

QC_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
	uint64_t dptr, size;
	cudaError_t e;

	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	e = var_get(symbol, &dptr, &size);
	if (e != cudaSuccess)
		return qc_ret(e);
	*devPtr = (void *)(uintptr_t)dptr;
	return cudaSuccess;
}

QC_API cudaError_t cudaGetSymbolSize(size_t *size, const void *symbol)
{
	uint64_t dptr, sz;
	cudaError_t e;

	if (!size)
		return qc_ret(cudaErrorInvalidValue);
	e = var_get(symbol, &dptr, &sz);
	if (e != cudaSuccess)
		return qc_ret(e);
	*size = (size_t)sz;
	return cudaSuccess;
}

/* The device address of [offset, offset+count) of a variable, checked against its size. */
static cudaError_t symbol_at(const void *symbol, size_t count, size_t offset, void **at)
{
	uint64_t dptr, size;
	cudaError_t e = var_get(symbol, &dptr, &size);

	if (e != cudaSuccess)
		return e;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	*at = (void *)(uintptr_t)(dptr + offset);
	return cudaSuccess;
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t count, size_t offset,
			     enum cudaMemcpyKind kind, cudaStream_t stream, int async, int ptds)
{
	void *at;
	cudaError_t e;

	if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
	    kind != cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	e = symbol_at(symbol, count, offset, &at);
	return e != cudaSuccess ? e : qc_memcpy(at, src, count, kind, stream, async, ptds);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t count, size_t offset,
			       enum cudaMemcpyKind kind, cudaStream_t stream, int async, int ptds)
{
	void *at;
	cudaError_t e;

	if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
	    kind != cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	e = symbol_at(symbol, count, offset, &at);
	return e != cudaSuccess ? e : qc_memcpy(dst, at, count, kind, stream, async, ptds);
}

QC_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count,
				      size_t offset, enum cudaMemcpyKind kind)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
					   size_t offset, enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count,
					   size_t offset, enum cudaMemcpyKind kind)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count,
					   size_t offset, enum cudaMemcpyKind kind,
					   cudaStream_t stream)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count,
						size_t offset, enum cudaMemcpyKind kind,
						cudaStream_t stream);
QC_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count,
						size_t offset, enum cudaMemcpyKind kind,
						cudaStream_t stream)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, stream, 1, 1));
}

QC_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count,
					size_t offset, enum cudaMemcpyKind kind)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
					     size_t offset, enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count,
					     size_t offset, enum cudaMemcpyKind kind)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count,
					     size_t offset, enum cudaMemcpyKind kind,
					     cudaStream_t stream)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count,
						  size_t offset, enum cudaMemcpyKind kind,
						  cudaStream_t stream);
QC_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count,
						  size_t offset, enum cudaMemcpyKind kind,
						  cudaStream_t stream)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, stream, 1, 1));
}
