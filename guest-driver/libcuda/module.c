/* SPDX-License-Identifier: MIT */
/*
 * Libraries and modules (one object here: a CUlibrary and its CUmodule are
 * the same module of the runtime layer), kernels and functions (a CUkernel
 * and its CUfunction are the same kernel), globals.
 *
 * Libraries load lazily: cuLibraryLoadData records the image (cudart calls
 * it for every fat binary a program or library registers: cuBLAS has about
 * 3,000), and nothing crosses to the host until a kernel or global of it
 * is looked up under a context. cuModuleLoad* load at once, as they report
 * a bad image at once natively.
 *
 * JIT options (cuModuleLoadDataEx, cuLibraryLoadData's jitOptions): PTX
 * given with them is compiled on the host's linker with them at once
 * (link.c's cu_link_one: logs, sizes, wall time written back), and the
 * cubin loaded; a library's PTX so only with a context current, as the
 * linker works in one (without, the options are hints). A cubin or fat
 * binary needs no JIT: its options are hints, its logs come back empty.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu.h"

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u
#define ELF_MAGIC 0x464c457fu /* "\x7fELF" */

struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned char *data;
	void *filename_or_fatbins;
};

struct fatbin_header {
	uint32_t magic;
	uint16_t version;
	uint16_t header_size;
	uint64_t fat_size;
};

#define MOD(h) ((struct qc_module *)(void *)(h))

/* The furthest byte an ELF64 image's headers, sections and segments reach. */
static uint64_t elf_size(const unsigned char *p)
{
	uint64_t shoff, phoff, end;
	uint16_t shnum, shentsize, phnum, phentsize;

	memcpy(&phoff, p + 0x20, 8);
	memcpy(&shoff, p + 0x28, 8);
	memcpy(&phentsize, p + 0x36, 2);
	memcpy(&phnum, p + 0x38, 2);
	memcpy(&shentsize, p + 0x3a, 2);
	memcpy(&shnum, p + 0x3c, 2);
	end = 64;
	if (shoff + (uint64_t)shnum * shentsize > end)
		end = shoff + (uint64_t)shnum * shentsize;
	if (phoff + (uint64_t)phnum * phentsize > end)
		end = phoff + (uint64_t)phnum * phentsize;
	for (unsigned int i = 0; i < shnum && shentsize >= 64; i++) {
		const unsigned char *s = p + shoff + (uint64_t)i * shentsize;
		uint32_t type;
		uint64_t off, size;

		memcpy(&type, s + 4, 4);
		memcpy(&off, s + 0x18, 8);
		memcpy(&size, s + 0x20, 8);
		if (type != 8 /* SHT_NOBITS */ && off + size > end)
			end = off + size;
	}
	for (unsigned int i = 0; i < phnum && phentsize >= 56; i++) {
		const unsigned char *s = p + phoff + (uint64_t)i * phentsize;
		uint64_t off, filesz;

		memcpy(&off, s + 8, 8);
		memcpy(&filesz, s + 0x20, 8);
		if (off + filesz > end)
			end = off + filesz;
	}
	return end;
}

/* Where an image the program hands over starts and how long it is: nvcc's
 * fat binary wrapper, a fat binary, an ELF cubin or NUL-terminated PTX. */
static CUresult image_extent(const void *code, const void **data, uint64_t *size)
{
	uint32_t magic;

	if (!code)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&magic, code, 4);
	if (magic == FATBIN_WRAPPER_MAGIC) {
		code = ((const struct fatbin_wrapper *)code)->data;
		if (!code)
			return CUDA_ERROR_INVALID_IMAGE;
		memcpy(&magic, code, 4);
	}
	*data = code;
	if (magic == FATBIN_MAGIC) {
		struct fatbin_header h;

		memcpy(&h, code, sizeof(h));
		if (h.header_size < sizeof(h))
			return CUDA_ERROR_INVALID_IMAGE;
		*size = (uint64_t)h.header_size + h.fat_size;
	} else if (magic == ELF_MAGIC) {
		*size = elf_size(code);
	} else {
		*size = strnlen(code, QCUDA_MAX_MODULE) + 1;
	}
	if (*size > QCUDA_MAX_MODULE) {
		qc_msg("a module image of %llu bytes is more than qcuda takes (%u)", (unsigned long long)*size,
		       QCUDA_MAX_MODULE);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

/* A module of the image at code; copy: keep a copy (the caller may free it). */
static CUresult module_add(const void *code, int copy, struct qc_module **out)
{
	const void *data;
	uint64_t size;
	CUresult r = image_extent(code, &data, &size);

	if (r != CUDA_SUCCESS)
		return r;
	*out = qc_module_add_image(data, size, copy);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Reads a whole file, NUL after it (cuModuleLoad, cuLibraryLoadFromFile, cuLinkAddFile). */
CUresult cu_read_file(const char *path, void **buf, size_t *size)
{
	FILE *f;
	long n;
	char *b;

	if (!path)
		return CUDA_ERROR_INVALID_VALUE;
	f = fopen(path, "rb");
	if (!f)
		return CUDA_ERROR_FILE_NOT_FOUND;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 || (uint64_t)n > QCUDA_MAX_MODULE || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	b = malloc((size_t)n + 1);
	if (!b) {
		fclose(f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		fclose(f);
		return CUDA_ERROR_FILE_NOT_FOUND;
	}
	b[n] = 0; /* PTX text ends here */
	fclose(f);
	*buf = b;
	if (size)
		*size = (size_t)n;
	return CUDA_SUCCESS;
}

/* JIT options given with an image: PTX is linked with them into a cubin
 * (malloc'd, in *cubin); any other image is left as it is (*cubin NULL). */
static CUresult jit_image(const void *code, unsigned int n, CUjit_option *options, void **values, void **cubin)
{
	const void *data;
	uint64_t size;
	uint32_t magic;
	CUresult r = image_extent(code, &data, &size);

	*cubin = NULL;
	if (r != CUDA_SUCCESS)
		return r;
	memcpy(&magic, data, 4);
	if (magic == FATBIN_MAGIC || magic == ELF_MAGIC)
		return cu_jit_no_compile(n, options, values);
	r = cu_link_one(data, (size_t)size, n, options, values, cubin);
	if (r == CUDA_ERROR_NOT_SUPPORTED) /* a provider that cannot link (the host's): the PTX loads as it is */
		r = cu_jit_no_compile(n, options, values);
	return r;
}

/* ---------------------------------------------------------------- modules */

static CUresult module_load(CUmodule *module, const void *image, unsigned int n, CUjit_option *options, void **values)
{
	struct qc_module *m;
	void *cubin = NULL;
	CUresult r;

	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_enter();
	if (r == CUDA_SUCCESS && n)
		r = jit_image(image, n, options, values, &cubin);
	if (r == CUDA_SUCCESS)
		r = module_add(cubin ? cubin : image, 1, &m);
	free(cubin);
	if (r != CUDA_SUCCESS)
		return r;
	r = cu_result(qc_module_load(m));
	if (r != CUDA_SUCCESS) {
		qc_module_remove(m);
		return r;
	}
	*module = (CUmodule)(void *)m;
	return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	return module_load(module, image, 0, NULL, NULL);
}

CUresult cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
			    void **optionValues)
{
	return module_load(module, image, numOptions, options, optionValues);
}

CUresult cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return module_load(module, fatCubin, 0, NULL, NULL);
}

CUresult cuModuleLoad(CUmodule *module, const char *fname)
{
	void *buf;
	CUresult r;

	if (!module)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_read_file(fname, &buf, NULL);
	if (r != CUDA_SUCCESS)
		return r;
	r = module_load(module, buf, 0, NULL, NULL);
	free(buf);
	return r;
}

CUresult cuModuleUnload(CUmodule hmod)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!hmod || !qc_module_known(MOD(hmod)))
		return CUDA_ERROR_INVALID_HANDLE;
	qc_module_remove(MOD(hmod));
	return CUDA_SUCCESS;
}

/* The kernel name in m, looked up now (NOT_FOUND natively comes here). */
static CUresult kernel_lookup(struct qc_module *m, const char *name, struct qc_kernel **out)
{
	struct qc_kernel *k;
	uint64_t func;
	CUresult r;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m || !qc_module_known(m))
		return CUDA_ERROR_INVALID_HANDLE;
	k = qc_module_kernel(m, name);
	if (!k)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_enter();
	if (r == CUDA_SUCCESS) {
		r = cu_result(qc_kernel_get(k, &func));
		if (r == CUDA_ERROR_INVALID_HANDLE)
			r = CUDA_ERROR_NOT_FOUND;
	} else if (r == CUDA_ERROR_INVALID_CONTEXT) {
		r = CUDA_SUCCESS; /* looked up at first use under a context */
	}
	if (r == CUDA_SUCCESS)
		*out = k;
	return r;
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct qc_kernel *k;
	CUresult r;

	if (!hfunc)
		return CUDA_ERROR_INVALID_VALUE;
	r = kernel_lookup(MOD(hmod), name, &k);
	if (r == CUDA_SUCCESS)
		*hfunc = (CUfunction)(void *)k;
	return r;
}

static CUresult global_lookup(struct qc_module *m, CUdeviceptr *dptr, size_t *bytes, const char *name)
{
	uint64_t p = 0, n = 0;
	CUresult r;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m || !qc_module_known(m))
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_module_global(m, name, &p, &n));
	if (r == CUDA_ERROR_INVALID_HANDLE)
		r = CUDA_ERROR_NOT_FOUND;
	if (r == CUDA_SUCCESS) {
		if (dptr)
			*dptr = p;
		if (bytes)
			*bytes = n;
	}
	return r;
}

CUresult cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	return global_lookup(MOD(hmod), dptr, bytes, name);
}

CUresult cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_LAZY_LOADING;
	return CUDA_SUCCESS;
}

/* -------------------------------------------------------------- libraries */

static int preserved(CUlibraryOption *options, void **values, unsigned int n)
{
	for (unsigned int i = 0; options && values && i < n; i++)
		if (options[i] == CU_LIBRARY_BINARY_IS_PRESERVED && values[i])
			return 1;
	return 0;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
			   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions)
{
	struct qc_module *m;
	void *cubin = NULL;
	CUresult r;

	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = CUDA_SUCCESS;
	if (numJitOptions)
		r = cu_enter() == CUDA_SUCCESS ? jit_image(code, numJitOptions, jitOptions, jitOptionsValues, &cubin)
					       : cu_jit_no_compile(numJitOptions, jitOptions, jitOptionsValues);
	/* A preserved binary stays where it is until unloaded: no copy (a cubin linked here is ours: copied). */
	if (r == CUDA_SUCCESS)
		r = module_add(cubin ? cubin : code,
			       cubin || !preserved(libraryOptions, libraryOptionValues, numLibraryOptions), &m);
	free(cubin);
	if (r == CUDA_SUCCESS)
		*library = (CUlibrary)(void *)m;
	return r;
}

CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
			       void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
			       void **libraryOptionValues, unsigned int numLibraryOptions)
{
	void *buf;
	CUresult r;

	if (!library)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	r = cu_read_file(fileName, &buf, NULL);
	if (r != CUDA_SUCCESS)
		return r;
	r = cuLibraryLoadData(library, buf, jitOptions, jitOptionsValues, numJitOptions, NULL, NULL, 0);
	free(buf);
	return r;
}

CUresult cuLibraryUnload(CUlibrary library)
{
	return cuModuleUnload((CUmodule)(void *)library);
}

CUresult cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	if (!pMod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!library || !qc_module_known(MOD(library)))
		return CUDA_ERROR_INVALID_HANDLE;
	*pMod = (CUmodule)(void *)library;
	return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	struct qc_kernel *k;
	CUresult r;

	if (!pKernel)
		return CUDA_ERROR_INVALID_VALUE;
	r = kernel_lookup(MOD(library), name, &k);
	if (r == CUDA_SUCCESS)
		*pKernel = (CUkernel)(void *)k;
	return r;
}

CUresult cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	return global_lookup(MOD(library), dptr, bytes, name);
}

/* ------------------------------------------------------ kernels, functions */

/* A CUkernel or CUfunction the program holds, or NULL. */
struct qc_kernel *cu_kernel(const void *h)
{
	return h ? qc_kernel_of((cudaKernel_t)(uintptr_t)h) : NULL;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct qc_kernel *k = cu_kernel(kernel);
	uint64_t func;
	CUresult r;

	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_kernel_get(k, &func));
	if (r == CUDA_SUCCESS)
		*pFunc = (CUfunction)(void *)k;
	return r;
}

CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	struct qc_kernel *k = cu_kernel(kernel);

	if (!pLib)
		return CUDA_ERROR_INVALID_VALUE;
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	*pLib = (CUlibrary)(void *)k->module;
	return CUDA_SUCCESS;
}

static CUresult kernel_name(const char **name, const void *h)
{
	struct qc_kernel *k = cu_kernel(h);

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = k->device_name;
	return CUDA_SUCCESS;
}

CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
	return kernel_name(name, hfunc);
}

CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	return kernel_name(name, hfunc);
}

CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	struct qc_kernel *k = cu_kernel(hfunc);

	if (!hmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	*hmod = (CUmodule)(void *)k->module;
	return CUDA_SUCCESS;
}

CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_kernel(function))
		return CUDA_ERROR_INVALID_HANDLE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED; /* loaded at its first use, by any call */
	return CUDA_SUCCESS;
}

CUresult cuFuncLoad(CUfunction function)
{
	struct qc_kernel *k = cu_kernel(function);
	uint64_t func;
	CUresult r;

	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_enter();
	return r != CUDA_SUCCESS ? r : cu_result(qc_kernel_get(k, &func));
}

/* Where a parameter lies in the layout launches pack by (paramSize may be NULL). */
static CUresult param_info(const void *h, size_t index, size_t *offset, size_t *size)
{
	struct qc_kernel *k = cu_kernel(h);
	CUresult r;

	if (!k)
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_enter();
	return r != CUDA_SUCCESS ? r : cu_result(qc_param_info(k, index, offset, size));
}

CUresult cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
	return param_info(func, paramIndex, paramOffset, paramSize);
}

CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
	return param_info(kernel, paramIndex, paramOffset, paramSize);
}
