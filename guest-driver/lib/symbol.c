/* SPDX-License-Identifier: MIT */
/*
 * Module variables (symbols): their address and size, and copies to and
 * from them.
 */
#include <stdint.h>

#include "qcrt.h"

QC_API cudaError_t cudaGetSymbolAddress(void **devPtr, const void *symbol)
{
	uint64_t dptr, size;
	cudaError_t e;

	if (!devPtr)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_var_get(symbol, &dptr, &size);
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
	e = qc_var_get(symbol, &dptr, &sz);
	if (e != cudaSuccess)
		return qc_ret(e);
	*size = (size_t)sz;
	return cudaSuccess;
}

/* The device address of [offset, offset+count) of a variable, checked against its size. */
static cudaError_t symbol_at(const void *symbol, size_t count, size_t offset, void **at)
{
	uint64_t dptr, size;
	cudaError_t e = qc_var_get(symbol, &dptr, &size);

	if (e != cudaSuccess)
		return e;
	if (offset > size || count > size - offset)
		return cudaErrorInvalidValue;
	*at = (void *)(uintptr_t)(dptr + offset);
	return cudaSuccess;
}

static cudaError_t to_symbol(const void *symbol, const void *src, size_t count, size_t offset, enum cudaMemcpyKind kind,
			     cudaStream_t stream, int async, int ptds)
{
	void *at;
	cudaError_t e;

	if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	e = symbol_at(symbol, count, offset, &at);
	return e != cudaSuccess ? e : qc_memcpy(at, src, count, kind, stream, async, ptds);
}

static cudaError_t from_symbol(void *dst, const void *symbol, size_t count, size_t offset, enum cudaMemcpyKind kind,
			       cudaStream_t stream, int async, int ptds)
{
	void *at;
	cudaError_t e;

	if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
		return cudaErrorInvalidMemcpyDirection;
	e = symbol_at(symbol, count, offset, &at);
	return e != cudaSuccess ? e : qc_memcpy(dst, at, count, kind, stream, async, ptds);
}

QC_API cudaError_t cudaMemcpyToSymbol(const void *symbol, const void *src, size_t count, size_t offset,
				      enum cudaMemcpyKind kind)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count, size_t offset,
					   enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpyToSymbol_ptds(const void *symbol, const void *src, size_t count, size_t offset,
					   enum cudaMemcpyKind kind)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyToSymbolAsync(const void *symbol, const void *src, size_t count, size_t offset,
					   enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count, size_t offset,
						enum cudaMemcpyKind kind, cudaStream_t stream);
QC_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void *symbol, const void *src, size_t count, size_t offset,
						enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(to_symbol(symbol, src, count, offset, kind, stream, 1, 1));
}

QC_API cudaError_t cudaMemcpyFromSymbol(void *dst, const void *symbol, size_t count, size_t offset,
					enum cudaMemcpyKind kind)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, NULL, 0, 0));
}

QC_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count, size_t offset,
					     enum cudaMemcpyKind kind);
QC_API cudaError_t cudaMemcpyFromSymbol_ptds(void *dst, const void *symbol, size_t count, size_t offset,
					     enum cudaMemcpyKind kind)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, NULL, 0, 1));
}

QC_API cudaError_t cudaMemcpyFromSymbolAsync(void *dst, const void *symbol, size_t count, size_t offset,
					     enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, stream, 1, 0));
}

QC_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count, size_t offset,
						  enum cudaMemcpyKind kind, cudaStream_t stream);
QC_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void *dst, const void *symbol, size_t count, size_t offset,
						  enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return qc_ret(from_symbol(dst, symbol, count, offset, kind, stream, 1, 1));
}
