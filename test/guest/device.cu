// SPDX-License-Identifier: MIT
// device: device enumeration, properties, attributes, versions, device flags,
// synchronize/reset, memory info.
#include "qctest.h"

static void props_vs_attrs(int dev)
{
	cudaDeviceProp p;
	int v;

	memset(&p, 0x5a, sizeof(p));
	EXPECT(cudaGetDeviceProperties(&p, dev), cudaSuccess);
	qt_check(p.name[0] != 0 && strlen(p.name) < sizeof(p.name), "prop name is a non-empty string");
	qt_check(p.totalGlobalMem > 0, "prop totalGlobalMem > 0");
	qt_check(p.luidDeviceNodeMask == 0, "prop luidDeviceNodeMask is 0 on Linux");
	{
		bool any = false;
		for (int i = 0; i < 16; i++)
			any = any || p.uuid.bytes[i] != 0;
		qt_check(any, "prop uuid is set");
	}
	/* Every field that has an attribute must agree with it. */
#define SAME(field, attr)                                                                                \
	do {                                                                                             \
		v = -12345;                                                                              \
		cudaError_t e_ = cudaDeviceGetAttribute(&v, attr, dev);                                  \
		qt_quiet(e_ == cudaSuccess && (long long)p.field == (long long)v,                        \
			 "prop %s = %lld, attribute %s = %d (%s)", #field, (long long)p.field, #attr, v, \
			 cudaGetErrorName(e_));                                                          \
	} while (0)
	SAME(sharedMemPerBlock, cudaDevAttrMaxSharedMemoryPerBlock);
	SAME(regsPerBlock, cudaDevAttrMaxRegistersPerBlock);
	SAME(warpSize, cudaDevAttrWarpSize);
	SAME(memPitch, cudaDevAttrMaxPitch);
	SAME(maxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock);
	SAME(maxThreadsDim[0], cudaDevAttrMaxBlockDimX);
	SAME(maxThreadsDim[1], cudaDevAttrMaxBlockDimY);
	SAME(maxThreadsDim[2], cudaDevAttrMaxBlockDimZ);
	SAME(maxGridSize[0], cudaDevAttrMaxGridDimX);
	SAME(maxGridSize[1], cudaDevAttrMaxGridDimY);
	SAME(maxGridSize[2], cudaDevAttrMaxGridDimZ);
	SAME(totalConstMem, cudaDevAttrTotalConstantMemory);
	SAME(major, cudaDevAttrComputeCapabilityMajor);
	SAME(minor, cudaDevAttrComputeCapabilityMinor);
	SAME(textureAlignment, cudaDevAttrTextureAlignment);
	SAME(texturePitchAlignment, cudaDevAttrTexturePitchAlignment);
	SAME(multiProcessorCount, cudaDevAttrMultiProcessorCount);
	SAME(integrated, cudaDevAttrIntegrated);
	SAME(canMapHostMemory, cudaDevAttrCanMapHostMemory);
	SAME(maxTexture1D, cudaDevAttrMaxTexture1DWidth);
	SAME(maxTexture2D[0], cudaDevAttrMaxTexture2DWidth);
	SAME(maxTexture2D[1], cudaDevAttrMaxTexture2DHeight);
	SAME(maxTexture3D[2], cudaDevAttrMaxTexture3DDepth);
	SAME(maxTexture2DLinear[2], cudaDevAttrMaxTexture2DLinearPitch);
	SAME(maxSurface2DLayered[2], cudaDevAttrMaxSurface2DLayeredLayers);
	SAME(surfaceAlignment, cudaDevAttrSurfaceAlignment);
	SAME(concurrentKernels, cudaDevAttrConcurrentKernels);
	SAME(ECCEnabled, cudaDevAttrEccEnabled);
	SAME(pciBusID, cudaDevAttrPciBusId);
	SAME(pciDeviceID, cudaDevAttrPciDeviceId);
	SAME(pciDomainID, cudaDevAttrPciDomainId);
	SAME(asyncEngineCount, cudaDevAttrAsyncEngineCount);
	SAME(unifiedAddressing, cudaDevAttrUnifiedAddressing);
	SAME(memoryBusWidth, cudaDevAttrGlobalMemoryBusWidth);
	SAME(l2CacheSize, cudaDevAttrL2CacheSize);
	SAME(persistingL2CacheMaxSize, cudaDevAttrMaxPersistingL2CacheSize);
	SAME(maxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor);
	SAME(sharedMemPerMultiprocessor, cudaDevAttrMaxSharedMemoryPerMultiprocessor);
	SAME(regsPerMultiprocessor, cudaDevAttrMaxRegistersPerMultiprocessor);
	SAME(managedMemory, cudaDevAttrManagedMemory);
	SAME(concurrentManagedAccess, cudaDevAttrConcurrentManagedAccess);
	SAME(sharedMemPerBlockOptin, cudaDevAttrMaxSharedMemoryPerBlockOptin);
	SAME(maxBlocksPerMultiProcessor, cudaDevAttrMaxBlocksPerMultiprocessor);
	SAME(reservedSharedMemPerBlock, cudaDevAttrReservedSharedMemoryPerBlock);
	SAME(hostRegisterSupported, cudaDevAttrHostRegisterSupported);
	SAME(memoryPoolsSupported, cudaDevAttrMemoryPoolsSupported);
	SAME(clusterLaunch, cudaDevAttrClusterLaunch);
	SAME(gpuPciDeviceID, cudaDevAttrGpuPciDeviceId);
	SAME(gpuPciSubsystemID, cudaDevAttrGpuPciSubsystemId);
#undef SAME
	qt_check(true, "cudaDeviceProp fields agree with cudaDeviceGetAttribute");
}

int main(void)
{
	int n = -1, dev = -1, v;
	unsigned int flags;

	qt_begin("device");

	EXPECT(cudaGetDeviceCount(&n), cudaSuccess);
	qt_check(n >= 1, "at least one device");
	EXPECT(cudaGetDeviceCount(NULL), cudaErrorInvalidValue);
	EXPECT(cudaGetDevice(&dev), cudaSuccess);
	qt_check(dev == 0, "current device is 0 at start");
	EXPECT(cudaGetDevice(NULL), cudaErrorInvalidValue);
	EXPECT(cudaSetDevice(0), cudaSuccess);
	EXPECT(cudaSetDevice(n), cudaErrorInvalidDevice);
	EXPECT(cudaSetDevice(-1), cudaErrorInvalidDevice);
	EXPECT(cudaSetDevice(99), cudaErrorInvalidDevice);
	EXPECT(cudaGetDevice(&dev), cudaSuccess);
	qt_check(dev == 0, "a failed cudaSetDevice leaves the device unchanged");
	EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaSuccess);

	/* Versions. */
	v = -1;
	EXPECT(cudaRuntimeGetVersion(&v), cudaSuccess);
	qt_check(v == CUDART_VERSION, "runtime version is CUDART_VERSION (%d)", CUDART_VERSION);
	EXPECT(cudaRuntimeGetVersion(NULL), cudaErrorInvalidValue);
	v = -1;
	EXPECT(cudaDriverGetVersion(&v), cudaSuccess);
	qt_check(v >= CUDART_VERSION, "driver version >= runtime version");
	EXPECT(cudaDriverGetVersion(NULL), cudaErrorInvalidValue);

	/* Properties and attributes. */
	for (int d = 0; d < n; d++)
		props_vs_attrs(d);
	{
		cudaDeviceProp p;
		EXPECT(cudaGetDeviceProperties(&p, n), cudaErrorInvalidDevice);
		EXPECT(cudaGetDeviceProperties(&p, -1), cudaErrorInvalidDevice);
		EXPECT(cudaGetDeviceProperties(NULL, 0), cudaErrorInvalidValue);
	}
	v = 0;
	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0), cudaSuccess);
	qt_check(v == 32, "warp size is 32");
	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrUnifiedAddressing, 0), cudaSuccess);
	qt_check(v == 1, "unified addressing");
	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrCanMapHostMemory, 0), cudaSuccess);
	qt_check(v == 1, "can map host memory");
	EXPECT(cudaDeviceGetAttribute(&v, (cudaDeviceAttr)0, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetAttribute(&v, (cudaDeviceAttr)148, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetAttribute(&v, (cudaDeviceAttr)9999, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, n), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetAttribute(NULL, cudaDevAttrWarpSize, 0), cudaErrorInvalidValue);
	{
		int bad = 0;
		for (int a = 1; a < 148; a++) {
			v = -12345;
			if (cudaDeviceGetAttribute(&v, (cudaDeviceAttr)a, 0) != cudaSuccess)
				bad++;
		}
		qt_check(bad == 0, "every attribute 1..147 can be read");
	}

	/* Device flags: the scheduling part is kept, cudaDeviceMapHost always
	 * reported. */
	EXPECT(cudaGetDeviceFlags(&flags), cudaSuccess);
	qt_check(flags == cudaDeviceMapHost, "device flags start as cudaDeviceMapHost");
	EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), cudaSuccess);
	EXPECT(cudaGetDeviceFlags(&flags), cudaSuccess);
	qt_check(flags == (cudaDeviceScheduleBlockingSync | cudaDeviceMapHost), "device flags: BlockingSync | MapHost");
	EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceMapHost), cudaSuccess);
	EXPECT(cudaGetDeviceFlags(&flags), cudaSuccess);
	qt_check(flags == (cudaDeviceScheduleSpin | cudaDeviceMapHost), "device flags: Spin | MapHost");
	EXPECT(cudaSetDeviceFlags(cudaDeviceLmemResizeToMax), cudaSuccess);
	EXPECT(cudaGetDeviceFlags(&flags), cudaSuccess);
	qt_check(flags == (cudaDeviceLmemResizeToMax | cudaDeviceMapHost), "device flags: LmemResizeToMax | MapHost");
	EXPECT(cudaSetDeviceFlags(0), cudaSuccess);
	EXPECT(cudaSetDeviceFlags(0xffff), cudaErrorInvalidValue);
	EXPECT(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceScheduleYield), cudaErrorInvalidValue);
	EXPECT(cudaGetDeviceFlags(NULL), cudaErrorInvalidValue);
	EXPECT(cudaGetDeviceFlags(&flags), cudaSuccess);
	qt_check(flags == cudaDeviceMapHost, "device flags back to cudaDeviceMapHost");

	/* Synchronize, memory info, reset. */
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	{
		size_t f = 0, t = 0;
		EXPECT(cudaMemGetInfo(&f, &t), cudaSuccess);
		qt_check(t > 0 && f <= t, "memory info: 0 < free <= total");
		EXPECT(cudaMemGetInfo(NULL, NULL), cudaSuccess);
		EXPECT(cudaMemGetInfo(&f, NULL), cudaSuccess);
	}
	{
		void *d = NULL;
		EXPECT(cudaMalloc(&d, 4096), cudaSuccess);
		EXPECT(cudaDeviceReset(), cudaSuccess);
		EXPECT(cudaFree(d), cudaErrorInvalidValue); /* reset freed it */
		EXPECT(cudaMalloc(&d, 4096), cudaSuccess);
		EXPECT(cudaMemset(d, 1, 4096), cudaSuccess);
		EXPECT(cudaFree(d), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	}
	return qt_end();
}
