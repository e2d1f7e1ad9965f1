/* SPDX-License-Identifier: MIT */
/*
 * cuGetProcAddress: how CUDA's runtime finds every entry point but four (it
 * asks for ~440 at start-up, by base name and the CUDA version it was built
 * for). The table (procs.c) is generated from cudaTypedefs.h's PFN_*_vNNNNN
 * typedefs by gen-libcuda.mjs: for a name, the row with the highest version
 * not above the one asked for, among the per-thread default stream rows
 * when those are asked for and the name has any.
 */
#include <string.h>

#include "cu.h"

/* The first row of name, or -1. */
static int first_row(const char *name)
{
	int lo = 0, hi = (int)cu_nprocs;

	while (lo < hi) {
		int mid = (lo + hi) / 2;

		if (strcmp(cu_procs[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < (int)cu_nprocs && !strcmp(cu_procs[lo].name, name) ? lo : -1;
}

static void *find(const char *name, int version, int ptds, CUdriverProcAddressQueryResult *status)
{
	int first = first_row(name), has_ptds = 0;
	void *fn = NULL;

	if (first < 0) {
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		return NULL;
	}
	for (int i = first; i < (int)cu_nprocs && !strcmp(cu_procs[i].name, name); i++)
		has_ptds |= cu_procs[i].ptds;
	if (!has_ptds)
		ptds = 0; /* no stream in it: one function for both */
	/* Rows are sorted by (name, ptds, version): the last fitting one wins. */
	for (int i = first; i < (int)cu_nprocs && !strcmp(cu_procs[i].name, name); i++)
		if (cu_procs[i].ptds == ptds && cu_procs[i].version <= version)
			fn = cu_procs[i].fn;
	*status = fn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
	return fn;
}

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
			 CUdriverProcAddressQueryResult *symbolStatus)
{
	CUdriverProcAddressQueryResult status;
	int ptds;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	*pfn = find(symbol, version, ptds, &status);
	if (symbolStatus)
		*symbolStatus = status;
	if (!*pfn)
		qc_debug("cuGetProcAddress: %s (version %d, flags %llu): %s", symbol, version,
			 (unsigned long long)flags,
			 status == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND ? "no such entry point" : "version too old");
	/* With a status to read, not finding is an answer (the runtime's
	 * cudaGetDriverEntryPoint* then succeed with a NULL function, as
	 * natively); without one it is CUDA_ERROR_NOT_FOUND. */
	return *pfn || symbolStatus ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* The CUDA 11.3 ABI (no status). */
#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}
