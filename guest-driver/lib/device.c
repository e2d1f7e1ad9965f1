/* SPDX-License-Identifier: MIT */
/*
 * Devices: the per-thread current device and the session's, properties and
 * attributes, PCI bus ids, choosing a device, flags, synchronization, reset,
 * versions and memory info.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qcrt.h"
#include "qc_array.h"

/* cudaSetDeviceFlags, per device. */
static _Atomic unsigned int device_flags[QC_MAX_DEVICES];

/* --------------------------------------------------------------- devices */

QC_API cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t e;

	if (!count)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	*count = e == cudaSuccess ? qc.device_count : 0;
	return qc_ret(e);
}

QC_API cudaError_t cudaGetDevice(int *device)
{
	cudaError_t e;

	if (!device)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	*device = qc_current_device();
	return cudaSuccess;
}

QC_API cudaError_t cudaSetDevice(int device)
{
	struct qcuda_args_device a = { .device = (uint32_t)device };
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	e = qc_sticky();
	if (e != cudaSuccess)
		return qc_ret(e);
	/* Like CUDA 12+, cudaSetDevice initializes the device's context. */
	e = qc_call_unbatched(&(struct qc_req){ .cmd = QCUDA_CMD_SET_DEVICE, .args = &a, .args_len = sizeof(a) });
	if (e != cudaSuccess)
		return qc_ret(e);
	qc_device_switched(device);
	return cudaSuccess;
}

QC_API cudaError_t cudaInitDevice(int device, unsigned int deviceFlags, unsigned int flags)
{
	int prev = qc_current_device();
	cudaError_t e;

	if (flags != 0)
		return qc_ret(cudaErrorInvalidValue);
	e = cudaSetDevice(device);
	qc_set_thread_device(prev);
	if (e == cudaSuccess && deviceFlags)
		e = cudaSetDeviceFlags(deviceFlags);
	return e;
}

/* Attribute numbers the CUDA 13 runtime accepts (CU_DEVICE_ATTRIBUTE_MAX). */
#define QC_ATTR_MAX 148

QC_API cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	const struct qcuda_out_device_props *p;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	if (!value || (int)attr < 1 || (int)attr >= QC_ATTR_MAX || (int)attr >= QCUDA_NUM_ATTRS)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_device_props(device, &p);
	if (e != cudaSuccess)
		return qc_ret(e);
	*value = (int)p->attrs[attr];
	return cudaSuccess;
}

QC_API cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	const struct qcuda_out_device_props *p;
	const __le32 *a;
	cudaError_t e;

	if (!prop)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	e = qc_device_props(device, &p);
	if (e != cudaSuccess)
		return qc_ret(e);
	a = p->attrs;
#define A(n) ((int)a[n])
	memset(prop, 0, sizeof(*prop));
	memcpy(prop->name, p->name, sizeof(prop->name));
	prop->name[sizeof(prop->name) - 1] = 0;
	memcpy(prop->uuid.bytes, p->uuid, sizeof(prop->uuid.bytes));
	/* luid/luidDeviceNodeMask: undefined on Linux (0, as CUDA leaves them). */
	prop->totalGlobalMem = (size_t)p->total_mem;
	prop->sharedMemPerBlock = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerBlock);
	prop->regsPerBlock = A(cudaDevAttrMaxRegistersPerBlock);
	prop->warpSize = A(cudaDevAttrWarpSize);
	prop->memPitch = (size_t)(unsigned)A(cudaDevAttrMaxPitch);
	prop->maxThreadsPerBlock = A(cudaDevAttrMaxThreadsPerBlock);
	prop->maxThreadsDim[0] = A(cudaDevAttrMaxBlockDimX);
	prop->maxThreadsDim[1] = A(cudaDevAttrMaxBlockDimY);
	prop->maxThreadsDim[2] = A(cudaDevAttrMaxBlockDimZ);
	prop->maxGridSize[0] = A(cudaDevAttrMaxGridDimX);
	prop->maxGridSize[1] = A(cudaDevAttrMaxGridDimY);
	prop->maxGridSize[2] = A(cudaDevAttrMaxGridDimZ);
	prop->totalConstMem = (size_t)(unsigned)A(cudaDevAttrTotalConstantMemory);
	prop->major = A(cudaDevAttrComputeCapabilityMajor);
	prop->minor = A(cudaDevAttrComputeCapabilityMinor);
	prop->textureAlignment = (size_t)(unsigned)A(cudaDevAttrTextureAlignment);
	prop->texturePitchAlignment = (size_t)(unsigned)A(cudaDevAttrTexturePitchAlignment);
	prop->multiProcessorCount = A(cudaDevAttrMultiProcessorCount);
	prop->integrated = A(cudaDevAttrIntegrated);
	prop->canMapHostMemory = A(cudaDevAttrCanMapHostMemory);
	prop->maxTexture1D = A(cudaDevAttrMaxTexture1DWidth);
	prop->maxTexture1DMipmap = A(cudaDevAttrMaxTexture1DMipmappedWidth);
	prop->maxTexture2D[0] = A(cudaDevAttrMaxTexture2DWidth);
	prop->maxTexture2D[1] = A(cudaDevAttrMaxTexture2DHeight);
	prop->maxTexture2DMipmap[0] = A(cudaDevAttrMaxTexture2DMipmappedWidth);
	prop->maxTexture2DMipmap[1] = A(cudaDevAttrMaxTexture2DMipmappedHeight);
	prop->maxTexture2DLinear[0] = A(cudaDevAttrMaxTexture2DLinearWidth);
	prop->maxTexture2DLinear[1] = A(cudaDevAttrMaxTexture2DLinearHeight);
	prop->maxTexture2DLinear[2] = A(cudaDevAttrMaxTexture2DLinearPitch);
	prop->maxTexture2DGather[0] = A(cudaDevAttrMaxTexture2DGatherWidth);
	prop->maxTexture2DGather[1] = A(cudaDevAttrMaxTexture2DGatherHeight);
	prop->maxTexture3D[0] = A(cudaDevAttrMaxTexture3DWidth);
	prop->maxTexture3D[1] = A(cudaDevAttrMaxTexture3DHeight);
	prop->maxTexture3D[2] = A(cudaDevAttrMaxTexture3DDepth);
	prop->maxTexture3DAlt[0] = A(cudaDevAttrMaxTexture3DWidthAlt);
	prop->maxTexture3DAlt[1] = A(cudaDevAttrMaxTexture3DHeightAlt);
	prop->maxTexture3DAlt[2] = A(cudaDevAttrMaxTexture3DDepthAlt);
	prop->maxTextureCubemap = A(cudaDevAttrMaxTextureCubemapWidth);
	prop->maxTexture1DLayered[0] = A(cudaDevAttrMaxTexture1DLayeredWidth);
	prop->maxTexture1DLayered[1] = A(cudaDevAttrMaxTexture1DLayeredLayers);
	prop->maxTexture2DLayered[0] = A(cudaDevAttrMaxTexture2DLayeredWidth);
	prop->maxTexture2DLayered[1] = A(cudaDevAttrMaxTexture2DLayeredHeight);
	prop->maxTexture2DLayered[2] = A(cudaDevAttrMaxTexture2DLayeredLayers);
	prop->maxTextureCubemapLayered[0] = A(cudaDevAttrMaxTextureCubemapLayeredWidth);
	prop->maxTextureCubemapLayered[1] = A(cudaDevAttrMaxTextureCubemapLayeredLayers);
	prop->maxSurface1D = A(cudaDevAttrMaxSurface1DWidth);
	prop->maxSurface2D[0] = A(cudaDevAttrMaxSurface2DWidth);
	prop->maxSurface2D[1] = A(cudaDevAttrMaxSurface2DHeight);
	prop->maxSurface3D[0] = A(cudaDevAttrMaxSurface3DWidth);
	prop->maxSurface3D[1] = A(cudaDevAttrMaxSurface3DHeight);
	prop->maxSurface3D[2] = A(cudaDevAttrMaxSurface3DDepth);
	prop->maxSurface1DLayered[0] = A(cudaDevAttrMaxSurface1DLayeredWidth);
	prop->maxSurface1DLayered[1] = A(cudaDevAttrMaxSurface1DLayeredLayers);
	prop->maxSurface2DLayered[0] = A(cudaDevAttrMaxSurface2DLayeredWidth);
	prop->maxSurface2DLayered[1] = A(cudaDevAttrMaxSurface2DLayeredHeight);
	prop->maxSurface2DLayered[2] = A(cudaDevAttrMaxSurface2DLayeredLayers);
	prop->maxSurfaceCubemap = A(cudaDevAttrMaxSurfaceCubemapWidth);
	prop->maxSurfaceCubemapLayered[0] = A(cudaDevAttrMaxSurfaceCubemapLayeredWidth);
	prop->maxSurfaceCubemapLayered[1] = A(cudaDevAttrMaxSurfaceCubemapLayeredLayers);
	prop->surfaceAlignment = (size_t)(unsigned)A(cudaDevAttrSurfaceAlignment);
	prop->concurrentKernels = A(cudaDevAttrConcurrentKernels);
	prop->ECCEnabled = A(cudaDevAttrEccEnabled);
	prop->pciBusID = A(cudaDevAttrPciBusId);
	prop->pciDeviceID = A(cudaDevAttrPciDeviceId);
	prop->pciDomainID = A(cudaDevAttrPciDomainId);
	prop->tccDriver = A(cudaDevAttrTccDriver);
	prop->asyncEngineCount = A(cudaDevAttrAsyncEngineCount);
	prop->unifiedAddressing = A(cudaDevAttrUnifiedAddressing);
	prop->memoryBusWidth = A(cudaDevAttrGlobalMemoryBusWidth);
	prop->l2CacheSize = A(cudaDevAttrL2CacheSize);
	prop->persistingL2CacheMaxSize = A(cudaDevAttrMaxPersistingL2CacheSize);
	prop->maxThreadsPerMultiProcessor = A(cudaDevAttrMaxThreadsPerMultiProcessor);
	prop->streamPrioritiesSupported = A(cudaDevAttrStreamPrioritiesSupported);
	prop->globalL1CacheSupported = A(cudaDevAttrGlobalL1CacheSupported);
	prop->localL1CacheSupported = A(cudaDevAttrLocalL1CacheSupported);
	prop->sharedMemPerMultiprocessor = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerMultiprocessor);
	prop->regsPerMultiprocessor = A(cudaDevAttrMaxRegistersPerMultiprocessor);
	prop->managedMemory = A(cudaDevAttrManagedMemory);
	prop->isMultiGpuBoard = A(cudaDevAttrIsMultiGpuBoard);
	prop->multiGpuBoardGroupID = A(cudaDevAttrMultiGpuBoardGroupID);
	prop->hostNativeAtomicSupported = A(cudaDevAttrHostNativeAtomicSupported);
	prop->pageableMemoryAccess = A(cudaDevAttrPageableMemoryAccess);
	prop->concurrentManagedAccess = A(cudaDevAttrConcurrentManagedAccess);
	prop->computePreemptionSupported = A(cudaDevAttrComputePreemptionSupported);
	prop->canUseHostPointerForRegisteredMem = A(cudaDevAttrCanUseHostPointerForRegisteredMem);
	prop->cooperativeLaunch = A(cudaDevAttrCooperativeLaunch);
	prop->sharedMemPerBlockOptin = (size_t)(unsigned)A(cudaDevAttrMaxSharedMemoryPerBlockOptin);
	prop->pageableMemoryAccessUsesHostPageTables = A(cudaDevAttrPageableMemoryAccessUsesHostPageTables);
	prop->directManagedMemAccessFromHost = A(cudaDevAttrDirectManagedMemAccessFromHost);
	prop->maxBlocksPerMultiProcessor = A(cudaDevAttrMaxBlocksPerMultiprocessor);
	prop->accessPolicyMaxWindowSize = A(cudaDevAttrMaxAccessPolicyWindowSize);
	prop->reservedSharedMemPerBlock = (size_t)(unsigned)A(cudaDevAttrReservedSharedMemoryPerBlock);
	prop->hostRegisterSupported = A(cudaDevAttrHostRegisterSupported);
	prop->sparseCudaArraySupported = A(cudaDevAttrSparseCudaArraySupported);
	prop->hostRegisterReadOnlySupported = A(cudaDevAttrHostRegisterReadOnlySupported);
	prop->timelineSemaphoreInteropSupported = A(cudaDevAttrTimelineSemaphoreInteropSupported);
	prop->memoryPoolsSupported = A(cudaDevAttrMemoryPoolsSupported);
	prop->gpuDirectRDMASupported = A(cudaDevAttrGPUDirectRDMASupported);
	prop->gpuDirectRDMAFlushWritesOptions = (unsigned)A(cudaDevAttrGPUDirectRDMAFlushWritesOptions);
	prop->gpuDirectRDMAWritesOrdering = A(cudaDevAttrGPUDirectRDMAWritesOrdering);
	prop->memoryPoolSupportedHandleTypes = (unsigned)A(cudaDevAttrMemoryPoolSupportedHandleTypes);
	prop->deferredMappingCudaArraySupported = A(cudaDevAttrDeferredMappingCudaArraySupported);
	prop->ipcEventSupported = A(cudaDevAttrIpcEventSupport);
	prop->clusterLaunch = A(cudaDevAttrClusterLaunch);
	prop->unifiedFunctionPointers = A(129); /* CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS */
	prop->deviceNumaConfig = A(cudaDevAttrNumaConfig);
	prop->deviceNumaId = A(cudaDevAttrNumaId);
	prop->mpsEnabled = A(cudaDevAttrMpsEnabled);
	prop->hostNumaId = A(cudaDevAttrHostNumaId);
	prop->gpuPciDeviceID = (unsigned)A(cudaDevAttrGpuPciDeviceId);
	prop->gpuPciSubsystemID = (unsigned)A(cudaDevAttrGpuPciSubsystemId);
	prop->hostNumaMultinodeIpcSupported = A(cudaDevAttrHostNumaMultinodeIpcSupported);
#undef A
	return cudaSuccess;
}

/* ---------------------------------------------------------- PCI bus ids */

/* The device's PCI domain, bus and device numbers (attributes fetched once). */
static cudaError_t pci_of(int device, unsigned int *domain, unsigned int *bus, unsigned int *slot)
{
	const struct qcuda_out_device_props *p;
	cudaError_t e = qc_device_props(device, &p);

	if (e != cudaSuccess)
		return e;
	*domain = (unsigned int)p->attrs[cudaDevAttrPciDomainId];
	*bus = (unsigned int)p->attrs[cudaDevAttrPciBusId];
	*slot = (unsigned int)p->attrs[cudaDevAttrPciDeviceId];
	return cudaSuccess;
}

/* "domain:bus:device.function" in upper-case hex, the domain in four digits
 * (CUDA asks for room for 13 characters), cut to len - 1 characters. */
QC_API cudaError_t cudaDeviceGetPCIBusId(char *pciBusId, int len, int device)
{
	unsigned int domain, bus, slot;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (device < 0 || device >= qc.device_count)
		return qc_ret(cudaErrorInvalidDevice);
	if (!pciBusId || len <= 0)
		return qc_ret(cudaErrorInvalidValue);
	e = pci_of(device, &domain, &bus, &slot);
	if (e != cudaSuccess)
		return qc_ret(e);
	snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", domain, bus, slot);
	return cudaSuccess;
}

/* The forms CUDA takes: domain:bus:device.function, domain:bus:device and
 * bus:device.function (domain 0), hex of either case. */
QC_API cudaError_t cudaDeviceGetByPCIBusId(int *device, const char *pciBusId)
{
	unsigned int domain = 0, bus, slot, d, b, s;
	cudaError_t e;

	if (!device || !pciBusId)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	if (sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &slot) != 3 &&
	    (domain = 0, sscanf(pciBusId, "%x:%x", &bus, &slot) != 2))
		return qc_ret(cudaErrorInvalidValue);
	for (int i = 0; i < qc.device_count; i++) {
		e = pci_of(i, &d, &b, &s);
		if (e != cudaSuccess)
			return qc_ret(e);
		if (d == domain && b == bus && s == slot) {
			*device = i;
			return cudaSuccess;
		}
	}
	return qc_ret(cudaErrorInvalidDevice);
}

/* -------------------------------------------------------- choosing devices */

/* How far a device of compute capability cc is from the one asked for:
 * 0 for a match, then those above by distance, then those below. */
static int cc_distance(int cc, int want)
{
	return cc >= want ? cc - want : 1000 + want - cc;
}

/* The device nearest prop's compute capability (the first of equals; with
 * one device, that one). */
QC_API cudaError_t cudaChooseDevice(int *device, const struct cudaDeviceProp *prop)
{
	const struct qcuda_out_device_props *p;
	int best = 0, best_d = -1, want;
	cudaError_t e;

	if (!device || !prop)
		return qc_ret(cudaErrorInvalidValue);
	e = qc_init();
	if (e != cudaSuccess)
		return qc_ret(e);
	want = prop->major * 10 + prop->minor;
	for (int i = 0; i < qc.device_count; i++) {
		int d;

		e = qc_device_props(i, &p);
		if (e != cudaSuccess)
			return qc_ret(e);
		d = cc_distance((int)p->attrs[cudaDevAttrComputeCapabilityMajor] * 10 +
					(int)p->attrs[cudaDevAttrComputeCapabilityMinor],
				want);
		if (best_d < 0 || d < best_d) {
			best = i;
			best_d = d;
		}
	}
	*device = best;
	return cudaSuccess;
}

/*
 * The devices CUDA may pick when a thread names none, in order. A thread's
 * device here is 0 until it sets one, and every device works, so the list
 * changes nothing: it is checked as CUDA checks it (len 0 clears it).
 */
QC_API cudaError_t cudaSetValidDevices(int *device_arr, int len)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (len == 0)
		return cudaSuccess;
	if (len < 0 || !device_arr || len > qc.device_count)
		return qc_ret(cudaErrorInvalidValue);
	for (int i = 0; i < len; i++)
		if (device_arr[i] < 0 || device_arr[i] >= qc.device_count)
			return qc_ret(cudaErrorInvalidDevice);
	return cudaSuccess;
}

QC_API cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
	unsigned int sched = flags & cudaDeviceScheduleMask;
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if ((flags & ~(unsigned)cudaDeviceMask) ||
	    (sched != cudaDeviceScheduleAuto && sched != cudaDeviceScheduleSpin && sched != cudaDeviceScheduleYield &&
	     sched != cudaDeviceScheduleBlockingSync))
		return qc_ret(cudaErrorInvalidValue);
	/* Scheduling is the backend's business; mapped host memory is always
	 * on (unified addressing), as cudaGetDeviceFlags then reports. */
	atomic_store(&device_flags[qc_current_device()], flags & ~(unsigned)cudaDeviceMapHost);
	return cudaSuccess;
}

QC_API cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	if (!flags)
		return qc_ret(cudaErrorInvalidValue);
	*flags = atomic_load(&device_flags[qc_current_device()]) | cudaDeviceMapHost;
	return cudaSuccess;
}

QC_API cudaError_t cudaDeviceSynchronize(void)
{
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_deferred(qc_req_device_sync());
	return qc_ret(e);
}

/* Removed from CUDA's headers in 13.0 but still in older programs' sources. */
QC_API cudaError_t cudaThreadSynchronize(void);
QC_API cudaError_t cudaThreadSynchronize(void)
{
	return cudaDeviceSynchronize();
}

QC_API cudaError_t cudaDeviceReset(void)
{
	cudaError_t e = qc_init();

	if (e != cudaSuccess)
		return qc_ret(e);
	e = qc_sync_device();
	if (e == cudaSuccess)
		e = qc_req_device_reset();
	if (e != cudaSuccess)
		return qc_ret(e);
	/* The backend freed the session's allocations, streams and events. */
	qc_mem_reset();
	qc_array_reset();
	qc_module_reset();
	qc_func_cache_clear();
	qc_limits_forget(-1);
	qc_handle_reset();
	qc_callback_reset();
	atomic_store(&device_flags[qc_current_device()], 0);
	qc_sticky_clear();
	(void)qc_deferred(cudaSuccess); /* errors of work the reset discarded */
	return cudaSuccess;
}

QC_API cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return qc_ret(cudaErrorInvalidValue);
	/* As CUDA: 0 (and success) when no driver can be reached. */
	*driverVersion = qc_init() == cudaSuccess ? (int)qc.driver_version : 0;
	return cudaSuccess;
}

QC_API cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return qc_ret(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}

QC_API cudaError_t cudaMemGetInfo(size_t *free_, size_t *total)
{
	struct qcuda_out_mem_info out;
	cudaError_t e = qc_ready();

	if (e == cudaSuccess)
		e = qc_req_mem_get_info(&out);
	if (e != cudaSuccess)
		return qc_ret(e);
	if (free_)
		*free_ = (size_t)out.free;
	if (total)
		*total = (size_t)out.total;
	return cudaSuccess;
}

/* A pure function (returns a struct: it cannot be a stub). */
QC_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, enum cudaChannelFormatKind f)
{
	struct cudaChannelFormatDesc d = { .x = x, .y = y, .z = z, .w = w, .f = f };

	return d;
}
