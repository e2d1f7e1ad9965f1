/* SPDX-License-Identifier: MIT */
/*
 * JIT linking through qcuda's libcuda.so.1 (guest-driver/libcuda/link.c),
 * for test/qcuda/link-guest.test.ts under `qcuda run` on a cuda worker with
 * the fake driver (test/qcuda/fixtures/fakecuda.c: the "cubin" is a header
 * naming the integer options, then each input). Prints what a link gave:
 * the cubin's text, the logs, the log sizes and wall time written back into
 * the option values, a refused link's status and error log, the bounds;
 * then loads with JIT options (load_options).
 * argv[1]: a file to add with cuLinkAddFile.
 */
#include <cuda.h>
#include <stdio.h>
#include <string.h>

#define CK(x)                                         \
	do {                                          \
		CUresult r_ = (x);                    \
		if (r_ != CUDA_SUCCESS) {             \
			const char *s_ = 0;           \
			cuGetErrorName(r_, &s_);      \
			printf("%s -> %s\n", #x, s_); \
			return 1;                     \
		}                                     \
	} while (0)

static const char *status(CUresult r)
{
	const char *s = "?";

	cuGetErrorName(r, &s);
	return s;
}

/* cuModuleLoadDataEx and cuLibraryLoadData with JIT options: PTX linked on
 * the host with them (loaded as it is, ".entry add1" would be refused: no
 * PTX header; the fake linker's output has one), logs and wall time
 * written back; bad PTX refused with its error log; a cubin's logs empty. */
static int load_options(void)
{
	static const char ptx[] = ".entry add1";
	static const char cubin[64] = "\x7f"
				      "ELF\x02\x01"; /* an ELF64 header, no sections: loads on the fake driver */
	char info[256], err[256];
	CUjit_option o[] = { CU_JIT_WALL_TIME,
			     CU_JIT_INFO_LOG_BUFFER,
			     CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
			     CU_JIT_ERROR_LOG_BUFFER,
			     CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
			     CU_JIT_OPTIMIZATION_LEVEL };
	void *v[6];
	CUjit_option bad = (CUjit_option)1000;
	CUmodule m = 0;
	CUlibrary lib;
	float wall;

#define RESET()                                                                                               \
	(strcpy(info, "x"), strcpy(err, "x"), v[0] = 0, v[1] = info, v[2] = (void *)sizeof(info), v[3] = err, \
	 v[4] = (void *)sizeof(err), v[5] = (void *)2)
	RESET();
	CK(cuModuleLoadDataEx(&m, ptx, 6, o, v));
	memcpy(&wall, &v[0], sizeof(wall));
	printf("loadEx: %s; info [%s] size %zu; error [%s] size %zu; wall %.1f\n", m ? "loaded" : "none", info,
	       (size_t)v[2], err, (size_t)v[4], wall);
	CK(cuModuleUnload(m));
	RESET();
	printf("loadEx bad PTX: %s, ", status(cuModuleLoadDataEx(&m, "fakecuda:link-error", 6, o, v)));
	printf("error [%s] size %zu\n", err, (size_t)v[4]);
	printf("loadEx unknown option: %s\n", status(cuModuleLoadDataEx(&m, ptx, 1, &bad, v)));
	RESET();
	CK(cuModuleLoadDataEx(&m, cubin, 5, o + 1, v + 1));
	printf("loadEx cubin: info [%s] size %zu; error [%s] size %zu\n", info, (size_t)v[2], err, (size_t)v[4]);
	CK(cuModuleUnload(m));
	RESET();
	CK(cuLibraryLoadData(&lib, ptx, o, v, 6, 0, 0, 0));
	CK(cuLibraryGetModule(&m, lib));
	printf("library: info [%s] size %zu\n", info, (size_t)v[2]);
	CK(cuLibraryUnload(lib));
	return 0;
#undef RESET
}

int main(int argc, char **argv)
{
	static const char ptx[] = ".entry add1";
	char info[256] = "x", err[256] = "x";
	CUjit_option o[] = { CU_JIT_WALL_TIME,
			     CU_JIT_INFO_LOG_BUFFER,
			     CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
			     CU_JIT_ERROR_LOG_BUFFER,
			     CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
			     CU_JIT_LOG_VERBOSE,
			     CU_JIT_OPTIMIZATION_LEVEL,
			     CU_JIT_MAX_REGISTERS };
	void *v[] = { 0, info, (void *)sizeof(info), err, (void *)sizeof(err), (void *)1, (void *)3, (void *)32 };
	CUjit_option bad = (CUjit_option)1000;
	CUdevice dev;
	CUcontext ctx;
	CUlinkState ls, ls2;
	CUmodule m;
	void *cubin;
	size_t size;
	float wall;

	if (argc < 2)
		return 2;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	printf("unknown option: %s\n", status(cuLinkCreate(1, &bad, v, &ls)));
	CK(cuLinkCreate(8, o, v, &ls));
	CK(cuLinkAddData(ls, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx), "add1.ptx", 0, 0, 0));
	CK(cuLinkAddFile(ls, CU_JIT_INPUT_LIBRARY, argv[1], 0, 0, 0));
	printf("bad type: %s\n", status(cuLinkAddData(ls, (CUjitInputType)9, (void *)ptx, strlen(ptx), "x", 0, 0, 0)));
	CK(cuLinkComplete(ls, &cubin, &size));
	memcpy(&wall, &v[0], sizeof(wall));
	printf("cubin %zu bytes, %s\n", size, strlen(cubin) == size ? "a C string" : "not text");
	printf("[%s]\n", (char *)cubin);
	printf("info [%s] size %zu; error [%s] size %zu; wall %.1f\n", info, (size_t)v[2], err, (size_t)v[4], wall);
	CK(cuModuleLoadData(&m, cubin));
	CK(cuLinkDestroy(ls));
	CK(cuModuleUnload(m));

	/* A link the host refuses: its status and error log (the size values are in/out: set again). */
	v[2] = (void *)sizeof(info);
	v[4] = (void *)sizeof(err);
	CK(cuLinkCreate(4, o + 1, v + 1, &ls2));
	CK(cuLinkAddData(ls2, CU_JIT_INPUT_PTX, "fakecuda:link-error", 20, "bad.ptx", 0, 0, 0));
	printf("refused: %s, error [%s]\n", status(cuLinkComplete(ls2, &cubin, &size)), err);
	/* At most QCUDA_MAX_LINK_INPUTS (4) inputs. */
	for (int i = 0; i < 3; i++)
		CK(cuLinkAddData(ls2, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx), "more", 0, 0, 0));
	printf("fifth input: %s\n",
	       status(cuLinkAddData(ls2, CU_JIT_INPUT_PTX, (void *)ptx, strlen(ptx), "x", 0, 0, 0)));
	CK(cuLinkDestroy(ls2));
	printf("destroy NULL: %s\n", status(cuLinkDestroy(NULL)));
	return load_options();
}
