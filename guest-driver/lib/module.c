/* SPDX-License-Identifier: MIT */
/*
 * What nvcc-generated host code calls: fat binary, kernel and variable
 * registration (run by static constructors before main, so nothing here
 * touches the device), the <<<>>> launch configuration stack, and launches.
 *
 * Registrations are recorded (module -> fat binary, kernels with their
 * host stubs and device names, variables) for the launch support to come.
 * Protocol v2 has no launch command: every launch fails with
 * cudaErrorNotSupported and says so once per kernel on stderr.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"

/* nvcc's __fatDeviceText wrapper. */
struct fatbin_wrapper {
	int magic;		/* 0x466243b1 */
	int version;
	const unsigned long long *data;
	void *filename_or_fatbins;
};

struct qc_kernel;
struct qc_var;

struct qc_module {
	void *handle;		/* what the program holds is &module->handle */
	const struct fatbin_wrapper *fatbin;
	int complete;		/* __cudaRegisterFatBinaryEnd seen */
	struct qc_module *next;
};

struct qc_kernel {
	struct qc_module *module;
	const void *host_fun;	/* the host stub, the program's key for it */
	const char *device_name;	/* mangled name in the fat binary */
	atomic_int warned;
	struct qc_kernel *next;
};

struct qc_var {
	struct qc_module *module;
	const void *host_var;
	const char *device_name;
	size_t size;
	int constant, managed;
	struct qc_var *next;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct qc_module *modules;
static struct qc_kernel *kernels;
static struct qc_var *vars;

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

QC_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct qc_module *m = module_of(fatCubinHandle), **pm;
	struct qc_kernel **pk;
	struct qc_var **pv;

	if (!m)
		return;
	pthread_mutex_lock(&reg_lock);
	for (pk = &kernels; *pk;) {
		struct qc_kernel *k = *pk;

		if (k->module == m) {
			*pk = k->next;
			free(k);
		} else {
			pk = &k->next;
		}
	}
	for (pv = &vars; *pv;) {
		struct qc_var *v = *pv;

		if (v->module == m) {
			*pv = v->next;
			free(v);
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

/* ---------------------------------------------------------------- launches */

static struct qc_kernel *find_kernel(const void *host_fun)
{
	struct qc_kernel *k;

	pthread_mutex_lock(&reg_lock);
	for (k = kernels; k && k->host_fun != host_fun; k = k->next)
		;
	pthread_mutex_unlock(&reg_lock);
	return k;
}

static cudaError_t launch(struct qc_kernel *k)
{
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!k)
		return qc_ret(cudaErrorInvalidResourceHandle);
	if (atomic_exchange(&k->warned, 1) == 0)
		qc_msg("kernel launches are not supported yet (qcuda protocol v%u): %s not run, "
		       "returning cudaErrorNotSupported", QCUDA_PROTO_VERSION, k->device_name);
	return qc_ret(cudaErrorNotSupported);
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

QC_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim, void **args,
				      size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
	return launch(kernel_of(kernel));
}

QC_API cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim, dim3 blockDim,
					   void **args, size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
	return launch(kernel_of(kernel));
}

QC_API cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args,
				    size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
	return launch(find_kernel(func));
}

QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream);
QC_API cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim, dim3 blockDim, void **args,
					 size_t sharedMem, cudaStream_t stream)
{
	(void)gridDim, (void)blockDim, (void)args, (void)sharedMem, (void)stream;
	return launch(find_kernel(func));
}
