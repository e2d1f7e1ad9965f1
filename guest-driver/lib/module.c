/* SPDX-License-Identifier: MIT */
/*
 * Modules: what nvcc-generated host code registers (fat binaries, kernels
 * and variables, by static constructors before main, so nothing here touches
 * the device), and their loading.
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
 *
 * The driver API (../libcuda) adds modules of its own images (a fat binary,
 * cubin or PTX: cuLibraryLoadData, cuModuleLoadData), kernels and globals
 * looked up by name in them, with the same lazy loading.
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
	const unsigned char *data; /* a fatbin header */
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
	void *handle; /* what the program holds is &module->handle */
	const struct fatbin_wrapper *fatbin; /* registered by nvcc's host code, or */
	const void *image; /* a driver-API image of image_size bytes */
	uint64_t image_size;
	void *owned; /* image, when the library holds a copy */
	int complete; /* __cudaRegisterFatBinaryEnd seen */
	pthread_mutex_t lock; /* serialises loading */
	unsigned int gen; /* generation of dev/err; 0: never */
	cudaError_t err; /* the load's result in that generation */
	uint64_t dev; /* module handle */
	struct qc_module *next;
};

struct qc_var {
	struct qc_module *module;
	const void *host_var; /* NULL for a driver-API global */
	const char *device_name;
	char *owned_name; /* device_name, for a driver-API global */
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

uint64_t qc_upload_id(void)
{
	return atomic_fetch_add(&next_upload_id, 1);
}

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

/* The current device's compute capability as one number (90 for 9.0), or 0. */
static int device_sm(void)
{
	const struct qcuda_out_device_props *p;

	if (qc_device_props(qc_current_device(), &p) != cudaSuccess)
		return 0;
	return (int)(p->attrs[cudaDevAttrComputeCapabilityMajor] * 10 + p->attrs[cudaDevAttrComputeCapabilityMinor]);
}

/* Loads an image on the host: only the code objects the device runs
 * (fatbin.c), and not sent at all when the VM loaded the same bytes before
 * (MODULE_FIND by SHA-256; the backend keeps images by content). */
static cudaError_t image_load(const void *data, uint64_t size, uint64_t *handle)
{
	struct qcuda_args_module_find f = { 0 };
	void *sel = NULL;
	uint64_t n = qc_fatbin_select(data, size, device_sm(), &sel), found = 0;
	const void *img = sel ? sel : data;
	cudaError_t e;

	f.upload_id = qc_upload_id();
	f.size = sel ? n : size;
	qc_sha256(img, f.size, f.sha256);
	if (qc_req_module_find(&f, &found) != cudaSuccess)
		found = 0; /* the upload says what is wrong, if anything is */
	e = found ? cudaSuccess : qc_req_module_upload(f.upload_id, f.size, (void *)img, f.size);
	if (e == cudaSuccess)
		e = qc_req_module_load(f.upload_id, handle);
	qc_debug("module of %llu bytes: %llu of them for this device, %s: %s, handle %#llx", (unsigned long long)size,
		 (unsigned long long)f.size, found ? "cached on the host" : "sent",
		 qc_error_name(e) ? qc_error_name(e) : "?", (unsigned long long)*handle);
	free(sel);
	return e;
}

/* The module's handle in the current generation, loading it if need be. */
static cudaError_t module_get(struct qc_module *m, uint64_t *dev)
{
	unsigned int gen = atomic_load(&generation);
	const struct fatbin_wrapper *w = m->fatbin;
	struct fatbin_header h;
	const void *data = NULL;
	uint64_t size = 0, handle = 0;
	cudaError_t e;

	pthread_mutex_lock(&m->lock);
	if (m->gen == gen) {
		e = m->err;
		*dev = m->dev;
		pthread_mutex_unlock(&m->lock);
		return e;
	}
	e = cudaSuccess;
	if (m->image) {
		data = m->image;
		size = m->image_size;
	} else if (!w || w->magic != FATBIN_WRAPPER_MAGIC || !w->data) {
		qc_msg("a module's fat binary wrapper is not one nvcc makes");
		e = cudaErrorInvalidKernelImage;
	} else {
		memcpy(&h, w->data, sizeof(h));
		data = w->data;
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
	if (e == cudaSuccess)
		e = image_load(data, size, &handle);
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

/* Forgets m, its kernels and variables, and unloads it if it is loaded. */
static void module_remove(struct qc_module *m)
{
	struct qc_module **pm;
	struct qc_kernel *dead_k = NULL, **pk;
	struct qc_var *dead_v = NULL, **pv;
	unsigned int gen = atomic_load(&generation);

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
		free(k->owned_name);
		free(k);
	}
	while (dead_v) {
		struct qc_var *v = dead_v;

		dead_v = v->next;
		if (v->gen == gen && v->err == cudaSuccess)
			qc_mem_remove_symbol(v->dptr);
		free(v->owned_name);
		free(v);
	}
	/* At exit: the context may be dead; closing the session frees it anyway. */
	if (m->gen == gen && m->err == cudaSuccess && m->dev) {
		qc_req_module_unload(m->dev);
		qc_func_cache_clear();
	}
	free(m->owned);
	free(m);
}

QC_API void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct qc_module *m = module_of(fatCubinHandle);

	if (m)
		module_remove(m);
}

QC_API void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
				   int thread_limit, uint3 *tid, uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize)
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

static void add_var(void **handle, const void *host_var, const char *name, size_t size, int constant, int managed)
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

QC_API void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName,
			      int ext, size_t size, int constant, int global)
{
	(void)deviceAddress, (void)ext, (void)global;
	add_var(fatCubinHandle, hostVar, deviceName, size, constant, 0);
}

QC_API void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress, char *deviceAddress,
				     const char *deviceName, int ext, size_t size, int constant, int global)
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

/* ---------------------------------------------------------------- kernels */

struct qc_kernel *qc_kernel_find(const void *host_fun)
{
	struct qc_kernel *k;

	pthread_mutex_lock(&reg_lock);
	for (k = kernels; k && k->host_fun != host_fun; k = k->next)
		;
	pthread_mutex_unlock(&reg_lock);
	return k;
}

/* k comes from __cudaGetKernel (or is NULL if that failed). */
struct qc_kernel *qc_kernel_of(cudaKernel_t kernel)
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
struct qc_kernel *qc_kernel_by_func(const void *func)
{
	struct qc_kernel *k = qc_kernel_find(func);

	return k ? k : qc_kernel_of((cudaKernel_t)(uintptr_t)func);
}

/* The function handle (and layout) of k in the current generation. */
cudaError_t qc_kernel_get(struct qc_kernel *k, uint64_t *func)
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
		e = qc_req_func_get(&a, fi, &handle);
		if (e == cudaSuccess &&
		    (fi->num_params > QCUDA_MAX_PARAMS || fi->param_bytes > QCUDA_MAX_PARAM_BYTES)) {
			qc_msg("%s takes %u bytes of parameters; qcuda passes at most %u", k->device_name,
			       fi->param_bytes, QCUDA_MAX_PARAM_BYTES);
			e = cudaErrorNotSupported;
		}
		for (uint32_t i = 0; e == cudaSuccess && i < fi->num_params; i++) {
			if (fi->offset[i] > fi->param_bytes || fi->size[i] > fi->param_bytes - fi->offset[i]) {
				qc_msg("FUNC_GET: parameter %u of %s lies outside its %u bytes", i, k->device_name,
				       fi->param_bytes);
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

cudaError_t qc_kernel_ready(struct qc_kernel *k, uint64_t *func)
{
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	return k ? qc_kernel_get(k, func) : cudaErrorInvalidDeviceFunction;
}

/* -------------------------------------------------------------- variables */

/* The device range of the variable whose host shadow is symbol. */
static cudaError_t var_load(struct qc_var *v, uint64_t *dptr, uint64_t *size);

cudaError_t qc_var_get(const void *symbol, uint64_t *dptr, uint64_t *size)
{
	struct qc_var *v;
	cudaError_t e = qc_ready();

	if (e != cudaSuccess)
		return e;
	pthread_mutex_lock(&reg_lock);
	for (v = vars; v && v->host_var != symbol; v = v->next)
		;
	pthread_mutex_unlock(&reg_lock);
	if (!v)
		return cudaErrorInvalidSymbol;
	return var_load(v, dptr, size);
}

/* v's device range in the current generation, loading its module and
 * looking it up (VAR_GET) if need be. */
static cudaError_t var_load(struct qc_var *v, uint64_t *dptr, uint64_t *size)
{
	unsigned int gen = atomic_load(&generation);
	struct qcuda_args_symbol a;
	struct qcuda_out_var_info out;
	uint64_t mod;
	cudaError_t e;

	if (v->managed) {
		qc_msg("__managed__ variables are not supported by qcuda (%s): returning "
		       "cudaErrorNotSupported",
		       v->device_name);
		return cudaErrorNotSupported;
	}
	pthread_mutex_lock(&v->lock);
	if (v->gen != gen) {
		memset(&out, 0, sizeof(out));
		e = v->module ? module_get(v->module, &mod) : cudaErrorInvalidSymbol;
		if (e == cudaSuccess && strlen(v->device_name) >= QCUDA_MAX_NAME) {
			qc_msg("variable name longer than %u bytes: %.60s...", QCUDA_MAX_NAME - 1, v->device_name);
			e = cudaErrorNotSupported;
		}
		if (e == cudaSuccess) {
			memset(&a, 0, sizeof(a));
			a.module = mod;
			strcpy(a.name, v->device_name);
			e = qc_req_var_get(&a, &out);
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

/* ------------------------------------------------- driver-API modules */

const void *qc_module_image(const struct qc_module *m, uint64_t *size)
{
	const struct fatbin_wrapper *w = m->fatbin;
	struct fatbin_header h;

	*size = m->image_size;
	if (m->image)
		return m->image;
	if (!w || w->magic != FATBIN_WRAPPER_MAGIC || !w->data)
		return NULL;
	memcpy(&h, w->data, sizeof(h));
	if (h.magic != FATBIN_MAGIC || h.header_size < sizeof(h))
		return NULL;
	*size = (uint64_t)h.header_size + h.fat_size;
	return w->data;
}

struct qc_module *qc_module_add_image(const void *image, uint64_t size, int copy)
{
	struct qc_module *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	if (copy) {
		m->owned = malloc(size);
		if (!m->owned) {
			free(m);
			return NULL;
		}
		memcpy(m->owned, image, size);
		image = m->owned;
	}
	m->image = image;
	m->image_size = size;
	m->complete = 1;
	pthread_mutex_init(&m->lock, NULL);
	pthread_mutex_lock(&reg_lock);
	m->next = modules;
	modules = m;
	pthread_mutex_unlock(&reg_lock);
	return m;
}

int qc_module_known(const struct qc_module *m)
{
	const struct qc_module *p;

	pthread_mutex_lock(&reg_lock);
	for (p = modules; p && p != m; p = p->next)
		;
	pthread_mutex_unlock(&reg_lock);
	return p != NULL;
}

cudaError_t qc_module_load(struct qc_module *m)
{
	uint64_t dev;

	return module_get(m, &dev);
}

void qc_module_remove(struct qc_module *m)
{
	module_remove(m);
}

struct qc_kernel *qc_module_kernel(struct qc_module *m, const char *name)
{
	struct qc_kernel *k;

	pthread_mutex_lock(&reg_lock);
	for (k = kernels; k && !(k->module == m && !k->host_fun && !strcmp(k->device_name, name)); k = k->next)
		;
	if (!k && (k = calloc(1, sizeof(*k)))) {
		k->owned_name = strdup(name);
		if (!k->owned_name) {
			free(k);
			k = NULL;
		} else {
			k->module = m;
			k->device_name = k->owned_name;
			pthread_mutex_init(&k->lock, NULL);
			k->next = kernels;
			kernels = k;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return k;
}

cudaError_t qc_module_global(struct qc_module *m, const char *name, uint64_t *dptr, uint64_t *size)
{
	struct qc_var *v;

	pthread_mutex_lock(&reg_lock);
	for (v = vars; v && !(v->module == m && !v->host_var && !strcmp(v->device_name, name)); v = v->next)
		;
	if (!v && (v = calloc(1, sizeof(*v)))) {
		v->owned_name = strdup(name);
		if (!v->owned_name) {
			free(v);
			v = NULL;
		} else {
			v->module = m;
			v->device_name = v->owned_name;
			pthread_mutex_init(&v->lock, NULL);
			v->next = vars;
			vars = v;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	if (!v)
		return cudaErrorMemoryAllocation;
	return var_load(v, dptr, size);
}
