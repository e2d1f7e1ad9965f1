/* SPDX-License-Identifier: MIT */
/*
 * Device control odds and ends: context limits (forwarded to the session's
 * context), cache and shared memory configurations (hints, kept here), peer
 * access queries, profiler control and driver entry points (answered here:
 * there is no peer, no profiler and no driver API in the guest).
 */
#include <pthread.h>
#include <stdatomic.h>

#include <cuda_profiler_api.h>

#include "qcrt.h"

/* ----------------------------------------------------------------- limits */

/*
 * A limit's value is the context's until it is set or the context goes, so
 * it is kept here once asked: libraries ask before each launch (cuCtxGetLimit
 * of CU_LIMIT_CIG_ENABLED: 16,897 round trips of 30,000 in an fp16 LLM
 * decode, H100). Not the stack size, which the driver raises by itself for a
 * kernel that needs more. Per device; forgotten at a set of that device and
 * at a reset (qc_limits_forget).
 */
#define CACHED_LIMITS 16

static struct {
	pthread_mutex_t lock;
	uint16_t known[QC_MAX_DEVICES]; /* a bit per limit */
	uint64_t value[QC_MAX_DEVICES][CACHED_LIMITS];
} limits = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int cached_limit(int dev, enum cudaLimit limit, uint64_t *v)
{
	int known;

	if (limit == cudaLimitStackSize || (unsigned int)limit >= CACHED_LIMITS || dev < 0 || dev >= QC_MAX_DEVICES)
		return 0;
	pthread_mutex_lock(&limits.lock);
	known = limits.known[dev] >> limit & 1;
	if (known)
		*v = limits.value[dev][limit];
	pthread_mutex_unlock(&limits.lock);
	return known;
}

static void keep_limit(int dev, enum cudaLimit limit, uint64_t v)
{
	if (limit == cudaLimitStackSize || (unsigned int)limit >= CACHED_LIMITS || dev < 0 || dev >= QC_MAX_DEVICES)
		return;
	pthread_mutex_lock(&limits.lock);
	limits.known[dev] |= (uint16_t)(1u << limit);
	limits.value[dev][limit] = v;
	pthread_mutex_unlock(&limits.lock);
}

void qc_limits_forget(int dev)
{
	pthread_mutex_lock(&limits.lock);
	for (int d = 0; d < QC_MAX_DEVICES; d++)
		if (dev < 0 || d == dev)
			limits.known[d] = 0;
	pthread_mutex_unlock(&limits.lock);
}

/* cuCtxSetLimit on the session's context; the backend refuses limits the
 * runtime does not name (cudaErrorInvalidValue, as CUDA 13 answers) and
 * reservations larger
 * than the VM's memory quota (cudaErrorMemoryAllocation). Whatever its
 * outcome, the device's kept values go (a failed set may change others). */
QC_API cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess) {
		e = qc_req_limit_set((uint32_t)limit, value);
		qc_limits_forget(qc_current_device());
	}
	return qc_ret(e);
}

QC_API cudaError_t cudaDeviceGetLimit(size_t *pValue, enum cudaLimit limit)
{
	uint64_t v = 0;
	cudaError_t e;

	if (!pValue)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_ready();
	if (e == cudaSuccess && !cached_limit(qc_current_device(), limit, &v)) {
		e = qc_req_limit_get((uint32_t)limit, 0, &v); /* args.value: unused */
		if (e == cudaSuccess)
			keep_limit(qc_current_device(), limit, v);
	}
	if (e != cudaSuccess)
		return qc_ret(e);
	*pValue = (size_t)v;
	return cudaSuccess;
}

/* ------------------------------------------- cache and shared memory banks */

/* cudaDeviceSetCacheConfig, per device: a preference the driver may ignore,
 * so it is kept and answered, never sent (cudaFuncCachePreferNone, 0, in a
 * fresh context). */
static _Atomic int cache_config[QC_MAX_DEVICES];

QC_API cudaError_t cudaDeviceGetCacheConfig(enum cudaFuncCache *pCacheConfig)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && !pCacheConfig)
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return qc_ret(e);
	*pCacheConfig = (enum cudaFuncCache)atomic_load(&cache_config[qc_current_device()]);
	return cudaSuccess;
}

QC_API cudaError_t cudaDeviceSetCacheConfig(enum cudaFuncCache cacheConfig)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (unsigned)cacheConfig > cudaFuncCachePreferEqual)
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return qc_ret(e);
	atomic_store(&cache_config[qc_current_device()], (int)cacheConfig);
	return cudaSuccess;
}

/* Bank sizes are fixed (four bytes) on every device CUDA 13 runs: the
 * query answers that, and a set of a valid size does nothing, as CUDA
 * documents for such devices. */
QC_API cudaError_t cudaDeviceGetSharedMemConfig(enum cudaSharedMemConfig *pConfig)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && !pConfig)
		e = cudaErrorInvalidValue;
	if (e != cudaSuccess)
		return qc_ret(e);
	*pConfig = cudaSharedMemBankSizeFourByte;
	return cudaSuccess;
}

QC_API cudaError_t cudaDeviceSetSharedMemConfig(enum cudaSharedMemConfig config)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess && (unsigned)config > cudaSharedMemBankSizeEightByte)
		e = cudaErrorInvalidValue;
	return qc_ret(e);
}

/* --------------------------------------------------------------- profiler */

/* Accepted and not forwarded: a profiler attaches to the backend's process
 * on the host, never to the guest, so there is nothing here to start or stop
 * (CUDA itself answers cudaSuccess when no profiler is attached). */
QC_API cudaError_t cudaProfilerStart(void)
{
	return qc_ret(qc_init());
}

QC_API cudaError_t cudaProfilerStop(void)
{
	return qc_ret(qc_init());
}

/* ----------------------------------------------------- driver entry points */

/* There is no CUDA driver API (libcuda) in the guest: every symbol is "not
 * found", which CUDA reports as cudaSuccess with a NULL pointer and
 * cudaDriverEntryPointSymbolNotFound. */
static cudaError_t entry_point(const char *symbol, void **funcPtr, unsigned long long flags,
			       enum cudaDriverEntryPointQueryResult *driverStatus)
{
	static atomic_int warned;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	if (!symbol || !funcPtr ||
	    (flags & ~(unsigned long long)(cudaEnableLegacyStream | cudaEnablePerThreadDefaultStream)))
		return cudaErrorInvalidValue;
	*funcPtr = NULL;
	if (driverStatus)
		*driverStatus = cudaDriverEntryPointSymbolNotFound;
	if (!atomic_exchange(&warned, 1))
		qc_msg("cudaGetDriverEntryPoint(\"%.60s\"): a qcuda guest has no CUDA driver API; "
		       "every driver symbol is reported as not found",
		       symbol);
	return cudaSuccess;
}

/* As CUDA: a version above the driver's is cudaErrorInvalidValue. */
static cudaError_t entry_point_by_version(const char *symbol, void **funcPtr, unsigned int cudaVersion,
					  unsigned long long flags, enum cudaDriverEntryPointQueryResult *driverStatus)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return e;
	if (cudaVersion > qc.driver_version)
		return cudaErrorInvalidValue;
	return entry_point(symbol, funcPtr, flags, driverStatus);
}

QC_API cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags,
					   enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return qc_ret(entry_point(symbol, funcPtr, flags, driverStatus));
}

QC_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *driverStatus);
QC_API cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
						enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return qc_ret(entry_point(symbol, funcPtr, flags, driverStatus));
}

QC_API cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
						    unsigned long long flags,
						    enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return qc_ret(entry_point_by_version(symbol, funcPtr, cudaVersion, flags, driverStatus));
}

QC_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
							 unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *driverStatus);
QC_API cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr, unsigned int cudaVersion,
							 unsigned long long flags,
							 enum cudaDriverEntryPointQueryResult *driverStatus)
{
	return qc_ret(entry_point_by_version(symbol, funcPtr, cudaVersion, flags, driverStatus));
}
