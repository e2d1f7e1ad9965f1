/* SPDX-License-Identifier: MIT */
/*
 * cuGetExportTable: the private tables CUDA's runtime (and each library
 * that embeds it) asks libcuda for, by UUID. None can be forwarded to the
 * host: they hand over guest addresses, guest callbacks and per-process
 * state, so they are served here. Names as ZLUDA uses them; slot 0 of each
 * is the table's size in bytes. A slot no caller was seen using answers
 * CUDA_ERROR_NOT_SUPPORTED and names itself on stderr, once: a library that
 * checks the answer takes another path, and one that does not fails with a
 * message, never by calling through a NULL slot.
 * ../../shared/notes/libcuda.md lists what each caller uses; the tracer
 * (docs/tracing.md) shows which slots a program reaches natively.
 */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cu.h"
#include "integrity.h"

#define SLOTS(n) ((void *)(uintptr_t)((n) * sizeof(void *)))

/* ---- CUDART_INTERFACE: [2] a device's primary context (not retained). */
static CUresult cudart_primary_ctx(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_primary_ctx(dev, pctx);
}

/* [7] is called with one argument at start-up and returns nothing. */
static void cudart_fn7(uintptr_t arg)
{
	(void)arg;
}

/* [12] loads the PTX compiler and others natively: nothing to load here. */
static CUresult cudart_load_compilers(void)
{
	return CUDA_SUCCESS;
}

static void *cudart_interface[13] = {
	[0] = SLOTS(13),
	[2] = (void *)cudart_primary_ctx,
	[7] = (void *)cudart_fn7,
	[12] = (void *)cudart_load_compilers,
};

/* ---- TOOLS_RUNTIME_CALLBACK_HOOKS: [2] and [6] hand out buffers the
 * runtime writes its tools state into (sized generously: the unit of the
 * size it reads is not known). */
static uint64_t tools_buffer1[1024], tools_buffer2[14];

static void tools_get_buffer1(void **ptr, size_t *size)
{
	*ptr = tools_buffer1;
	*size = sizeof(tools_buffer1) / sizeof(tools_buffer1[0]);
}

static void tools_get_buffer2(void **ptr, size_t *size)
{
	*ptr = tools_buffer2;
	*size = sizeof(tools_buffer2) / sizeof(tools_buffer2[0]);
}

static void *tools_callback_hooks[7] = {
	[0] = SLOTS(7),
	[2] = (void *)tools_get_buffer1,
	[6] = (void *)tools_get_buffer2,
};

/* ---- TOOLS_TLS: 3 slots, as the driver's (its size says which interface
 * it is: with 4, cuBLAS took another path, asking [2] before each of its
 * calls and choosing its own kernels over cuBLASLt's, 0.33 of native for
 * an fp32 GEMM; traced, docs/tracing.md). cuBLASLt calls [2], which must
 * succeed, before each matrix multiply, and hands the first word it writes
 * (natively the current context) to the 21318c60 table's [4]. Tools'
 * thread-local state: none here. */
static uintptr_t tools_tls_none(void)
{
	return 0;
}

static uintptr_t tools_tls_context(CUcontext *out)
{
	if (out && cuCtxGetCurrent(out) != CUDA_SUCCESS)
		*out = NULL;
	return 0;
}

static void *tools_tls[3] = {
	[0] = SLOTS(3),
	[1] = (void *)tools_tls_none,
	[2] = (void *)tools_tls_context,
};

/* ---- 21318c60-...: 93 slots, as NVIDIA's 580 driver has it (traced); asked for by cuBLASLt, which calls [4], [39] and [51]
 * at its first matrix multiply and stops unless they succeed. What they
 * are is not known; these answers are the ones observed to let cuBLASLt
 * run (LUPINE's): [4] says whether its first argument is set, [39] answers
 * zero, [51] hands out a zeroed object. */
static uint64_t cublaslt_object[64];

static CUresult cublaslt_slot4(uint64_t arg0, uint64_t *out)
{
	if (!out)
		return CUDA_ERROR_UNKNOWN;
	*out = arg0 != 0;
	qc_debug("cuBLASLt table [4](%#llx) -> %llu", (unsigned long long)arg0, (unsigned long long)*out);
	return CUDA_SUCCESS;
}

static CUresult cublaslt_slot39(uint64_t arg0, uint64_t arg1, uint64_t *out)
{
	qc_debug("cuBLASLt table [39](%#llx, %#llx)", (unsigned long long)arg0, (unsigned long long)arg1);
	if (!arg1 || !out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = 0;
	return CUDA_SUCCESS;
}

static CUresult cublaslt_slot51(uint64_t arg0, uint64_t arg1, uint64_t *out)
{
	qc_debug("cuBLASLt table [51](%#llx, %#llx)", (unsigned long long)arg0, (unsigned long long)arg1);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	if (arg1 == UINT64_MAX)
		return CUDA_ERROR_INVALID_HANDLE;
	*out = (uint64_t)(uintptr_t)cublaslt_object;
	return CUDA_SUCCESS;
}

static void *cublaslt_private[93] = {
	[0] = SLOTS(93),
	[4] = (void *)cublaslt_slot4,
	[39] = (void *)cublaslt_slot39,
	[51] = (void *)cublaslt_slot51,
};

/* ---- 1734dc26-...: cuBLASLt asks for it before its nvjet kernels (bf16
 * and fp16 GEMMs on Hopper) and calls [4], then [13], natively; it does not
 * check a refusal of the table and crashes. What the slots do is not known:
 * each answers CUDA_ERROR_NOT_SUPPORTED (17 slots, as the 580 driver). */
static void *nvjet_private[17] = {
	[0] = SLOTS(17),
};

/* ---- TOOLS_MODULE (6e163fbe-...): cuFFT calls [7](ctx, module, callback,
 * arg) for each module it loads, and the driver calls callback(arg,
 * function, name) for each kernel of the module: how cuFFT gets its
 * functions. Measured natively (test/gpu/probes/exptrace.c): one callback per
 * kernel, the name a string that outlives the call, and [7] returning 1. */
typedef void (*tools_function_cb)(void *arg, CUfunction f, const char *name);

struct tools_walk {
	CUmodule module;
	tools_function_cb cb;
	void *arg;
	CUresult r;
};

static int tools_walk_one(const char *name, void *p)
{
	struct tools_walk *w = p;
	const char *kept;
	CUfunction f;

	w->r = cuModuleGetFunction(&f, w->module, name);
	if (w->r == CUDA_SUCCESS)
		w->r = cuFuncGetName(&kept, f); /* the module's copy of the name */
	if (w->r != CUDA_SUCCESS)
		return 1;
	w->cb(w->arg, f, kept);
	return 0;
}

static CUresult tools_module_functions(CUcontext ctx, CUmodule module, tools_function_cb cb, void *arg)
{
	struct tools_walk w = { .module = module, .cb = cb, .arg = arg, .r = CUDA_SUCCESS };
	const void *image;
	uint64_t size;
	int major = 0, minor = 0, n;
	CUdevice dev;

	(void)ctx;
	if (!cb || !module)
		return CUDA_ERROR_INVALID_VALUE;
	if (!qc_module_known((struct qc_module *)(void *)module))
		return CUDA_ERROR_INVALID_HANDLE;
	image = qc_module_image((struct qc_module *)(void *)module, &size);
	if (cuCtxGetDevice(&dev) == CUDA_SUCCESS) {
		cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
		cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	}
	n = image ? cu_kernel_names(image, size, major * 10 + minor, tools_walk_one, &w) : -1;
	qc_debug("tools-module table [7]: module %p, %d kernels, %d", (void *)module, n, (int)w.r);
	if (w.r != CUDA_SUCCESS)
		return w.r;
	if (n < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	return (CUresult)1; /* what the driver answers */
}

static void *tools_module[99] = {
	[0] = SLOTS(99),
	[7] = (void *)tools_module_functions,
};

/* ---- CONTEXT_LOCAL_STORAGE: per-context values the runtime keeps its
 * state in (context.c), asked for on nearly every runtime call. */
static void *context_local_storage[4] = {
	(void *)cu_cls_put,
	(void *)cu_cls_delete,
	(void *)cu_cls_get,
	NULL,
};

/* ---- CONTEXT_CHECKS: [2] at activation and synchronize, [3] once. */
static CUresult context_check(CUcontext ctx, uint32_t *result, const void **unused)
{
	(void)ctx;
	(void)unused;
	if (result)
		*result = 0;
	return CUDA_SUCCESS;
}

static uint32_t context_check3(void)
{
	return 0;
}

static void *context_checks[4] = {
	[0] = SLOTS(4),
	[2] = (void *)context_check,
	[3] = (void *)context_check3,
};

/* ---- INTEGRITY_CHECK: [1](version, unix seconds, &result). */
static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2]);

static void *integrity_table[3] = {
	[0] = SLOTS(3),
	[1] = (void *)integrity_check,
};

static CUresult integrity_check(uint32_t version, uint64_t unix_seconds, uint64_t result[2])
{
	struct cu_integrity_device devs[QC_MAX_DEVICES];
	struct cu_integrity_input in = {
		.version = version,
		.pid = (uint32_t)getpid(),
		.thread = (uint32_t)pthread_self(),
		.cudart_table = cudart_interface,
		.integrity_table = integrity_table,
		.check_fn = (const void *)integrity_check,
		.unix_seconds = unix_seconds,
	};
	int n = 0, v = 0;
	CUresult r;

	if (!result)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuDriverGetVersion(&v);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetCount(&n);
	for (int i = 0; r == CUDA_SUCCESS && i < n; i++) {
		CUuuid u;

		r = cuDeviceGetUuid_v2(&u, i);
		memcpy(devs[i].uuid, u.bytes, 16);
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetAttribute(&devs[i].pci_domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, i);
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetAttribute(&devs[i].pci_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, i);
		if (r == CUDA_SUCCESS)
			r = cuDeviceGetAttribute(&devs[i].pci_device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, i);
	}
	if (r != CUDA_SUCCESS)
		return r;
	in.driver_version = (uint32_t)v;
	cu_integrity_hash(version, &in, devs, (unsigned int)n, result);
	return CUDA_SUCCESS;
}

/* ---- Slots not served: each answers CUDA_ERROR_NOT_SUPPORTED and names
 * its table and slot once. One function per (table, slot), made by the
 * macros below: a slot cannot otherwise know which it is. */
#define TABLES 9
#define MAX_SLOTS 100

static CUresult slot_unserved(unsigned int table, unsigned int slot);

#define UNSERVED(t, s)                           \
	static CUresult unserved_##t##_##s(void) \
	{                                        \
		return slot_unserved(t, s);      \
	}
/* clang-format off */
#define TEN(m, t, d) m(t, d##0) m(t, d##1) m(t, d##2) m(t, d##3) m(t, d##4) \
		     m(t, d##5) m(t, d##6) m(t, d##7) m(t, d##8) m(t, d##9)
#define HUNDRED(m, t) TEN(m, t, ) TEN(m, t, 1) TEN(m, t, 2) TEN(m, t, 3) TEN(m, t, 4) \
		      TEN(m, t, 5) TEN(m, t, 6) TEN(m, t, 7) TEN(m, t, 8) TEN(m, t, 9)
#define ALL_TABLES(m) HUNDRED(m, 0) HUNDRED(m, 1) HUNDRED(m, 2) HUNDRED(m, 3) HUNDRED(m, 4) \
		      HUNDRED(m, 5) HUNDRED(m, 6) HUNDRED(m, 7) HUNDRED(m, 8)
/* clang-format on */
ALL_TABLES(UNSERVED)
#define UNSERVED_FN(t, s) (void *)unserved_##t##_##s,
static void *const unserved[TABLES * MAX_SLOTS] = { ALL_TABLES(UNSERVED_FN) };

/* Tables whose slot 0 is their size in bytes: QC_SLOTS(t) slots, the
 * unserved filled in; 0 for a table without a size (filled as it is). */
#define QC_SLOTS(t) ((unsigned int)(sizeof(t) / sizeof((t)[0])))

static const struct {
	CUuuid id;
	void **table;
	unsigned int slots;
} tables[] = {
	{ { { 0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9 } },
	  cudart_interface,
	  QC_SLOTS(cudart_interface) },
	{ { { 0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66 } },
	  tools_callback_hooks,
	  QC_SLOTS(tools_callback_hooks) },
	{ { { 0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47, 0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc } },
	  tools_tls,
	  QC_SLOTS(tools_tls) },
	{ { { 0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93 } },
	  context_local_storage,
	  0 },
	{ { { 0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e } },
	  context_checks,
	  QC_SLOTS(context_checks) },
	{ { { 0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2 } },
	  integrity_table,
	  QC_SLOTS(integrity_table) },
	{ { { 0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e } },
	  tools_module,
	  QC_SLOTS(tools_module) },
	{ { { 0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2 } },
	  cublaslt_private,
	  QC_SLOTS(cublaslt_private) },
	{ { { 0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45, 0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca } },
	  nvjet_private,
	  QC_SLOTS(nvjet_private) },
};

_Static_assert(sizeof(tables) / sizeof(tables[0]) <= TABLES, "a table without unserved slots");

static const char *table_name(unsigned int table, char buf[9])
{
	const unsigned char *b = (const unsigned char *)tables[table].id.bytes;

	snprintf(buf, 9, "%02x%02x%02x%02x", b[0], b[1], b[2], b[3]);
	return buf;
}

static CUresult slot_unserved(unsigned int table, unsigned int slot)
{
	static unsigned char warned[TABLES * MAX_SLOTS];
	char buf[9];

	if (!__atomic_exchange_n(&warned[table * MAX_SLOTS + slot], 1, __ATOMIC_RELAXED))
		qc_msg("slot %u of the driver's private table %s is not served", slot, table_name(table, buf));
	return CUDA_ERROR_NOT_SUPPORTED;
}

/* Every slot after the size that no function serves gets its unserved one. */
static void fill_unserved(void)
{
	for (unsigned int t = 0; t < sizeof(tables) / sizeof(tables[0]); t++) {
		_Static_assert(QC_SLOTS(tools_module) <= MAX_SLOTS && QC_SLOTS(cublaslt_private) <= MAX_SLOTS,
			       "MAX_SLOTS");
		for (unsigned int s = 1; s < tables[t].slots; s++)
			if (!tables[t].table[s])
				tables[t].table[s] = unserved[t * MAX_SLOTS + s];
	}
}

CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	static pthread_once_t filled = PTHREAD_ONCE_INIT;

	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&filled, fill_unserved);
	for (unsigned int i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		if (!memcmp(tables[i].id.bytes, pExportTableId->bytes, 16)) {
			*ppExportTable = tables[i].table;
			return CUDA_SUCCESS;
		}
	}
	if (qc_debug_on) {
		const unsigned char *b = (const unsigned char *)pExportTableId->bytes;

		qc_debug("export table %02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x-%02x%02x%02x%02x not served",
			 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
			 b[15]);
	}
	*ppExportTable = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}
