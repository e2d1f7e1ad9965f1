/* SPDX-License-Identifier: MIT */
/*
 * cuGetProcAddress(_v2): the real library answers; the record names the
 * exported function its pointer is (fn=, or "unexported"), and the program
 * gets the shim's wrapper of that function, so that calls through the
 * pointer are traced too (cuCtxSynchronize at 13000 -> the
 * cuCtxSynchronize_v2 wrapper). A pointer with no wrapper is handed back as
 * it is and logged how=untraced.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include "trace.h"

/*
 * The exported name of a pointer of the real library. Names that are
 * aliases of one function are told apart by the request: the requested
 * name, its _vN, its _ptsz/_ptds, in that order; then whatever dladdr says.
 */
static const char *exported_name(const char *want, void *fn, char *buf, size_t size)
{
	static const char *const sfx[] = { "", "_ptsz", "_ptds" };
	Dl_info info;

	if (want) {
		for (int v = 1; v <= 9; v++)
			for (unsigned int s = 0; s < 3; s++) {
				if (v == 1)
					snprintf(buf, size, "%s%s", want, sfx[s]);
				else
					snprintf(buf, size, "%s_v%d%s", want, v, sfx[s]);
				if (tr_real_sym(buf) == fn)
					return buf;
			}
	}
	if (dladdr(fn, &info) && info.dli_saddr == fn && info.dli_sname && tr_in_real(fn)) {
		snprintf(buf, size, "%s", info.dli_sname);
		return buf;
	}
	return NULL;
}

static void answer(struct tr_rec *r, const char *symbol, void **pfn, CUresult res, const int *status)
{
	char want[128], name[160];
	const char *fn;
	void *w;

	if (res != CUDA_SUCCESS || !pfn || !*pfn) {
		tr_put(r, " fn=NULL");
	} else {
		want[0] = 0;
		if (symbol && tr_peek(symbol, want, sizeof(want) - 1) > 0)
			want[sizeof(want) - 1] = 0;
		fn = exported_name(want[0] ? want : NULL, *pfn, name, sizeof(name));
		w = fn ? tr_wrapper(fn) : NULL;
		tr_put(r, " fn=%s how=%s", fn ? fn : "unexported", w ? "wrapped" : "untraced");
		if (w)
			*pfn = w;
	}
	if (status)
		tr_put(r, " *symbolStatus=%d", *status);
}

TR_EXPORT CUresult tw_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
				       cuuint64_t flags) __asm__("cuGetProcAddress");
TR_EXPORT CUresult tw_cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	static struct tr_fn f = { "cuGetProcAddress" };
	__typeof__(tw_cuGetProcAddress) *real = tr_real(&f);
	struct tr_rec r;
	CUresult res;

	if (!real)
		return tr_missing(&f);
	if (tr_nested())
		return real(symbol, pfn, cudaVersion, flags);
	tr_begin(&r, "g", f.name);
	TR_STR(&r, symbol);
	TR_VAL(&r, cudaVersion);
	TR_VAL(&r, flags);
	tr_enter(&r);
	res = real(symbol, pfn, cudaVersion, flags);
	tr_result(&r, res);
	answer(&r, symbol, pfn, res, NULL);
	tr_end(&r);
	return res;
}

TR_EXPORT CUresult tw_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					  CUdriverProcAddressQueryResult *symbolStatus) __asm__("cuGetProcAddress_v2");
TR_EXPORT CUresult tw_cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
					  CUdriverProcAddressQueryResult *symbolStatus)
{
	static struct tr_fn f = { "cuGetProcAddress_v2" };
	__typeof__(tw_cuGetProcAddress_v2) *real = tr_real(&f);
	struct tr_rec r;
	CUresult res;
	int status;

	if (!real)
		return tr_missing(&f);
	if (tr_nested())
		return real(symbol, pfn, cudaVersion, flags, symbolStatus);
	tr_begin(&r, "g", f.name);
	TR_STR(&r, symbol);
	TR_VAL(&r, cudaVersion);
	TR_VAL(&r, flags);
	tr_enter(&r);
	res = real(symbol, pfn, cudaVersion, flags, symbolStatus);
	tr_result(&r, res);
	status = symbolStatus ? (int)*symbolStatus : 0;
	answer(&r, symbol, pfn, res, symbolStatus ? &status : NULL);
	tr_end(&r);
	return res;
}
