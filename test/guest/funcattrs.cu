// SPDX-License-Identifier: MIT
// funcattrs: kernel attributes (cudaFuncGetAttributes, cudaFuncSetAttribute),
// occupancy (and the cudaOccupancyMaxPotentialBlockSize template built on
// it), device limits, stream attributes, cooperative launches
// (cudaLaunchCooperativeKernel, cudaLaunchKernelEx with
// cudaLaunchAttributeCooperative), profiler control, peer access queries and
// driver entry points. What it prints are properties of the kernels and the
// GPU (the same natively and through qcuda) and error names.
#include <cooperative_groups.h>
#include <cuda_profiler_api.h>

#include <dlfcn.h>

#include "qctest.h"

namespace cg = cooperative_groups;

__global__ void plain(int *out)
{
	out[threadIdx.x] = threadIdx.x;
}

__global__ void __launch_bounds__(256) bounded(float *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = p[i] * 2.0f + 1.0f;
}

__global__ void tiled(const float *in, float *out)
{
	__shared__ float tile[1024]; /* 4096 bytes of static shared memory */

	tile[threadIdx.x] = in[threadIdx.x];
	__syncthreads();
	out[threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
}

__global__ void dynamic(int *out, int n)
{
	extern __shared__ int buf[];

	for (int i = threadIdx.x; i < n; i += blockDim.x)
		buf[i] = i;
	__syncthreads();
	if (threadIdx.x == 0) {
		long long s = 0;

		for (int i = 0; i < n; i++)
			s += buf[i];
		*out = (int)s;
	}
}

/* Every block counts itself, then waits at the grid barrier: block 0 sees all. */
__global__ void gridsum(int *counter, int *out)
{
	cg::grid_group g = cg::this_grid();

	if (threadIdx.x == 0)
		atomicAdd(counter, 1);
	g.sync();
	if (g.thread_rank() == 0)
		*out = atomicAdd(counter, 0);
}

static void print_attrs(const char *name, const cudaFuncAttributes &a)
{
	printf("%s: numRegs %d maxThreadsPerBlock %d shared %zu const %zu local %zu ptx %d binary %d "
	       "cacheModeCA %d maxDynamicShared %d carveout %d clusterDimMustBeSet %d cluster %dx%dx%d "
	       "nonPortableCluster %d clusterPolicy %d\n",
	       name, a.numRegs, a.maxThreadsPerBlock, a.sharedSizeBytes, a.constSizeBytes, a.localSizeBytes,
	       a.ptxVersion, a.binaryVersion, a.cacheModeCA, a.maxDynamicSharedSizeBytes, a.preferredShmemCarveout,
	       a.clusterDimMustBeSet, a.requiredClusterWidth, a.requiredClusterHeight, a.requiredClusterDepth,
	       a.nonPortableClusterSizeAllowed, a.clusterSchedulingPolicyPreference);
}

/* Whether the runtime is qcuda's libcudart.so.13 (a -cudart=shared build in
 * a guest, which exports the marker qcuda_libcudart), not NVIDIA's (natively,
 * linked in by a default build, or NVIDIA's shared library in a guest). */
static bool qcuda_runtime(void)
{
	return dlsym(RTLD_DEFAULT, "qcuda_libcudart") != NULL;
}

static void attributes(void)
{
	cudaFuncAttributes a, b;
	cudaKernel_t kt;

	EXPECT(cudaFuncGetAttributes(&a, bounded), cudaSuccess);
	print_attrs("bounded", a);
	qt_check(a.maxThreadsPerBlock == 256, "bounded: __launch_bounds__(256) -> maxThreadsPerBlock %d",
		 a.maxThreadsPerBlock);
	EXPECT(cudaFuncGetAttributes(&a, tiled), cudaSuccess);
	print_attrs("tiled", a);
	qt_check(a.sharedSizeBytes == 4096, "tiled: %zu bytes of static shared memory", a.sharedSizeBytes);
	qt_check(a.binaryVersion == 90 && a.ptxVersion == 90, "sm_90 code: binaryVersion %d, ptxVersion %d",
		 a.binaryVersion, a.ptxVersion);
	EXPECT(cudaFuncGetAttributes(&a, dynamic), cudaSuccess);
	print_attrs("dynamic", a);
	EXPECT(cudaFuncGetAttributes(&a, gridsum), cudaSuccess);
	print_attrs("gridsum", a);

	/* A cudaKernel_t is taken as the kernel it stands for. (Zeroed first:
	 * the comparison is of what the runtime writes, not of stack bytes.) */
	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	EXPECT(cudaFuncGetAttributes(&a, plain), cudaSuccess);
	OK(cudaGetKernel(&kt, plain));
	EXPECT(cudaFuncGetAttributes(&b, (const void *)kt), cudaSuccess);
	if (!qt_check(!memcmp(&a, &b, sizeof(a)), "the same attributes through cudaGetKernel's cudaKernel_t")) {
		print_attrs("through the stub", a);
		print_attrs("through the cudaKernel_t", b);
	}
	EXPECT(cudaFuncGetAttributes(NULL, plain), cudaErrorInvalidValue);
}

static void set_attributes(int *d_out)
{
	const int dyn_bytes = 100 * 1024; /* above the 48 KiB a kernel gets without asking */
	cudaFuncAttributes a;
	int optin, h = 0;

	OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
	qt_check(optin >= dyn_bytes, "cudaDevAttrMaxSharedMemoryPerBlockOptin %d >= %d", optin, dyn_bytes);
	EXPECT(cudaFuncSetAttribute(dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn_bytes), cudaSuccess);
	OK(cudaFuncGetAttributes(&a, dynamic));
	qt_check(a.maxDynamicSharedSizeBytes == dyn_bytes, "maxDynamicSharedSizeBytes reads back %d",
		 a.maxDynamicSharedSizeBytes);
	(void)cudaGetLastError();
	dynamic<<<1, 256, dyn_bytes>>>(d_out, dyn_bytes / 4);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(&h, d_out, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == (dyn_bytes / 4 - 1) * (dyn_bytes / 4) / 2,
		 "a block with 100 KiB of dynamic shared memory ran (sum %d)", h);

	EXPECT(cudaFuncSetAttribute(dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, optin + 1),
	       cudaErrorInvalidValue);
	EXPECT(cudaFuncSetAttribute(dynamic, cudaFuncAttributeMaxDynamicSharedMemorySize, -1), cudaErrorInvalidValue);
	OK(cudaFuncGetAttributes(&a, dynamic));
	qt_check(a.maxDynamicSharedSizeBytes == dyn_bytes, "refused values leave it at %d",
		 a.maxDynamicSharedSizeBytes);

	EXPECT(cudaFuncSetAttribute(tiled, cudaFuncAttributePreferredSharedMemoryCarveout, 50), cudaSuccess);
	OK(cudaFuncGetAttributes(&a, tiled));
	qt_check(a.preferredShmemCarveout == 50, "preferredShmemCarveout reads back %d", a.preferredShmemCarveout);
	EXPECT(cudaFuncSetAttribute(tiled, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxL1),
	       cudaSuccess);
	EXPECT(cudaFuncSetAttribute(tiled, cudaFuncAttributePreferredSharedMemoryCarveout, 101), cudaErrorInvalidValue);
	EXPECT(cudaFuncSetAttribute(tiled, (cudaFuncAttribute)0, 128), cudaErrorInvalidValue);
	EXPECT(cudaFuncSetAttribute(tiled, cudaFuncAttributeMax, 0), cudaErrorInvalidValue);
}

static void occupancy(int sms)
{
	int n1 = 0, n2 = 0, n3 = 0, min_grid = 0, block = 0;
	size_t avail = 0;

	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n1, plain, 128, 0), cudaSuccess);
	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n2, plain, 128, 0,
								      cudaOccupancyDisableCachingOverride),
	       cudaSuccess);
	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n3, dynamic, 256, 100 * 1024), cudaSuccess);
	printf("occupancy: plain x128: %d blocks/SM (%d with cudaOccupancyDisableCachingOverride); "
	       "dynamic x256 with 100 KiB: %d blocks/SM\n",
	       n1, n2, n3);
	qt_check(n1 > 0 && n2 > 0 && n3 > 0 && n3 < n1, "occupancy falls with shared memory use");
	EXPECT(cudaOccupancyAvailableDynamicSMemPerBlock(&avail, dynamic, 2, 256), cudaSuccess);
	printf("dynamic: %zu bytes of dynamic shared memory per block let 2 blocks of 256 fit\n", avail);
	qt_check(avail > 0, "cudaOccupancyAvailableDynamicSMemPerBlock");

	EXPECT(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, bounded, 0, 0), cudaSuccess);
	printf("cudaOccupancyMaxPotentialBlockSize(bounded): block %d, min grid %d (%d SMs)\n", block, min_grid, sms);
	qt_check(block > 0 && block <= 256 && min_grid % sms == 0,
		 "the template's block size respects __launch_bounds__");
	EXPECT(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, plain, 0, 0), cudaSuccess);
	printf("cudaOccupancyMaxPotentialBlockSize(plain): block %d, min grid %d\n", block, min_grid);

	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessor((int *)NULL, plain, 128, 0), cudaErrorInvalidValue);
	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n1, plain, 128, 0, 2), cudaErrorInvalidValue);
}

/* Get, set, get again. */
static void limit(cudaLimit l, const char *name, size_t value)
{
	size_t before = 0, after = 0;

	EXPECT(cudaDeviceGetLimit(&before, l), cudaSuccess);
	EXPECT(cudaDeviceSetLimit(l, value), cudaSuccess);
	EXPECT(cudaDeviceGetLimit(&after, l), cudaSuccess);
	qt_check(after == value, "%s: %zu by default, %zu after setting %zu", name, before, after, value);
}

static void limits(void)
{
	size_t v = 0;

	limit(cudaLimitStackSize, "cudaLimitStackSize", 2048);
	limit(cudaLimitPrintfFifoSize, "cudaLimitPrintfFifoSize", 4 << 20);
	limit(cudaLimitMallocHeapSize, "cudaLimitMallocHeapSize", 32 << 20);
	EXPECT(cudaDeviceGetLimit(&v, cudaLimitDevRuntimePendingLaunchCount), cudaSuccess);
	printf("cudaLimitDevRuntimePendingLaunchCount: %zu\n", v);
	/* Gone from compute capability 9.0 on. */
	EXPECT(cudaDeviceGetLimit(&v, cudaLimitDevRuntimeSyncDepth), cudaErrorUnsupportedLimit);
	EXPECT(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 4), cudaErrorUnsupportedLimit);
	EXPECT(cudaDeviceGetLimit(&v, (cudaLimit)99), cudaErrorInvalidValue);
	EXPECT(cudaDeviceSetLimit((cudaLimit)99, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetLimit(NULL, cudaLimitStackSize), cudaErrorInvalidValue);
}

static void stream_attributes(void)
{
	cudaStreamAttrValue v;
	cudaStream_t s;
	void *win;

	OK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1));
	memset(&v, 0, sizeof(v));
	EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributePriority, &v), cudaSuccess);
	qt_check(v.priority == -1, "cudaStreamAttributePriority of a stream created with -1: %d", v.priority);

	EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v), cudaSuccess);
	printf("default synchronization policy: %d\n", (int)v.syncPolicy);
	v.syncPolicy = cudaSyncPolicyYield;
	EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v), cudaSuccess);
	memset(&v, 0, sizeof(v));
	EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributeSynchronizationPolicy, &v), cudaSuccess);
	qt_check(v.syncPolicy == cudaSyncPolicyYield, "synchronization policy reads back %d", (int)v.syncPolicy);

	memset(&v, 0, sizeof(v));
	v.memSyncDomain = cudaLaunchMemSyncDomainRemote;
	EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeMemSyncDomain, &v), cudaSuccess);
	memset(&v, 0, sizeof(v));
	EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributeMemSyncDomain, &v), cudaSuccess);
	qt_check(v.memSyncDomain == cudaLaunchMemSyncDomainRemote, "memory sync domain reads back %d",
		 (int)v.memSyncDomain);

	OK(cudaMalloc(&win, 1 << 20));
	memset(&v, 0, sizeof(v));
	v.accessPolicyWindow.base_ptr = win;
	v.accessPolicyWindow.num_bytes = 1 << 20;
	v.accessPolicyWindow.hitRatio = 0.5f;
	v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
	v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
	EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaSuccess);
	memset(&v, 0, sizeof(v));
	EXPECT(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaSuccess);
	/* Natively Persisting hits read back; qcuda makes them Normal (the L2 set-aside is every VM's). */
	qt_check(v.accessPolicyWindow.base_ptr == win && v.accessPolicyWindow.num_bytes == 1 << 20 &&
			 v.accessPolicyWindow.hitRatio == 0.5f &&
			 (v.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting ||
			  v.accessPolicyWindow.hitProp == cudaAccessPropertyNormal) &&
			 v.accessPolicyWindow.missProp == cudaAccessPropertyStreaming,
		 "an access policy window over 1 MiB reads back (%zu bytes, hit ratio %.2f, hit persisting or normal, "
		 "miss %d)",
		 v.accessPolicyWindow.num_bytes, v.accessPolicyWindow.hitRatio, (int)v.accessPolicyWindow.missProp);
	memset(&v, 0, sizeof(v));
	EXPECT(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaSuccess);

	EXPECT(cudaStreamSetAttribute(s, (cudaStreamAttrID)999, &v), cudaErrorInvalidValue);
	EXPECT(cudaStreamGetAttribute(s, (cudaStreamAttrID)999, &v), cudaErrorInvalidValue);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFree(win), cudaSuccess);
}

static void cooperative(int sms)
{
	int coop = 0, per_sm = 0, h = 0, *d_counter, *d_res;
	cudaStream_t s;

	OK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
	qt_check(coop == 1, "cudaDevAttrCooperativeLaunch %d", coop);
	EXPECT(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gridsum, 128, 0), cudaSuccess);
	printf("gridsum x128: %d blocks/SM\n", per_sm);
	int blocks = per_sm * sms;
	OK(cudaMalloc(&d_counter, sizeof(int)));
	OK(cudaMalloc(&d_res, sizeof(int)));
	void *args[] = { &d_counter, &d_res };

	OK(cudaMemset(d_counter, 0, sizeof(int)));
	EXPECT(cudaLaunchCooperativeKernel((const void *)gridsum, dim3(blocks), dim3(128), args, 0, 0), cudaSuccess);
	EXPECT(cudaMemcpy(&h, d_res, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == blocks, "cudaLaunchCooperativeKernel: all %d blocks per SM met at grid.sync() (%s)", per_sm,
		 h == blocks ? "every block counted" : "blocks missing");

	/* The C++ template, on a stream. */
	OK(cudaStreamCreate(&s));
	OK(cudaMemsetAsync(d_counter, 0, sizeof(int), s));
	EXPECT(cudaLaunchCooperativeKernel(gridsum, dim3(blocks / 2), dim3(128), args, 0, s), cudaSuccess);
	OK(cudaMemcpyAsync(&h, d_res, sizeof(h), cudaMemcpyDeviceToHost, s));
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(h == blocks / 2, "the same through the template, half the grid, on a stream");

	/* cudaLaunchKernelEx with cudaLaunchAttributeCooperative. */
	cudaLaunchAttribute attr[1];
	cudaLaunchConfig_t cfg = {};
	attr[0].id = cudaLaunchAttributeCooperative;
	attr[0].val.cooperative = 1;
	cfg.gridDim = dim3(blocks);
	cfg.blockDim = dim3(128);
	cfg.attrs = attr;
	cfg.numAttrs = 1;
	OK(cudaMemset(d_counter, 0, sizeof(int)));
	EXPECT(cudaLaunchKernelEx(&cfg, gridsum, d_counter, d_res), cudaSuccess);
	EXPECT(cudaMemcpy(&h, d_res, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == blocks, "cudaLaunchKernelEx with cudaLaunchAttributeCooperative: every block met");

	/* With the hints a launch may carry too: a priority and an L2 access
	 * policy window over the result (they change no result). */
	{
		cudaLaunchAttribute hints[3];
		int lo = 0, hi = 0;

		OK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
		hints[0] = attr[0];
		hints[1].id = cudaLaunchAttributePriority;
		hints[1].val.priority = hi;
		hints[2].id = cudaLaunchAttributeAccessPolicyWindow;
		hints[2].val.accessPolicyWindow.base_ptr = d_res;
		hints[2].val.accessPolicyWindow.num_bytes = sizeof(int);
		hints[2].val.accessPolicyWindow.hitRatio = 1.0f;
		hints[2].val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
		hints[2].val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
		cfg.attrs = hints;
		cfg.numAttrs = 3;
		OK(cudaMemset(d_counter, 0, sizeof(int)));
		EXPECT(cudaLaunchKernelEx(&cfg, gridsum, d_counter, d_res), cudaSuccess);
		EXPECT(cudaMemcpy(&h, d_res, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
		qt_check(h == blocks, "cudaLaunchKernelEx with a priority and an access policy window too");
		EXPECT(cudaCtxResetPersistingL2Cache(), cudaSuccess);
		cfg.attrs = attr;
		cfg.numAttrs = 1;
	}

	/* One block more than fit at once. */
	EXPECT(cudaLaunchCooperativeKernel((const void *)gridsum, dim3(blocks + 1), dim3(128), args, 0, 0),
	       cudaErrorCooperativeLaunchTooLarge);
	cfg.gridDim = dim3(blocks + 1);
	EXPECT(cudaLaunchKernelEx(&cfg, gridsum, d_counter, d_res), cudaErrorCooperativeLaunchTooLarge);
	OK(cudaMemset(d_counter, 0, sizeof(int)));
	EXPECT(cudaLaunchCooperativeKernel((const void *)gridsum, dim3(1), dim3(128), args, 0, 0), cudaSuccess);
	EXPECT(cudaMemcpy(&h, d_res, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == 1, "the context is usable after a refused cooperative launch");
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFree(d_counter), cudaSuccess);
	EXPECT(cudaFree(d_res), cudaSuccess);
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void driver_api(void)
{
	int count = 0, can = -1;
	void *fn = (void *)1;
	cudaDriverEntryPointQueryResult q = (cudaDriverEntryPointQueryResult)-1;
	cudaError_t e;
	bool found;

	EXPECT(cudaProfilerStart(), cudaSuccess);
	EXPECT(cudaProfilerStop(), cudaSuccess);

	OK(cudaGetDeviceCount(&count));
	EXPECT(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
	qt_check(can == 0, "a device is not its own peer (%d)", can);
	EXPECT(cudaDeviceCanAccessPeer(&can, 0, count), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceCanAccessPeer(&can, -1, 0), cudaErrorInvalidDevice);

	/* The driver's cuInit natively and wherever the runtime is NVIDIA's (a
	 * default build in a guest: qcuda's libcuda.so.1 answers); qcuda's own
	 * libcudart.so.13 hands out no driver entry points: not found. */
	e = cudaGetDriverEntryPointByVersion("cuInit", &fn, 12000, cudaEnableDefault, &q);
	found = qcuda_runtime() ? !fn && q == cudaDriverEntryPointSymbolNotFound
				: fn && q == cudaDriverEntryPointSuccess;
	qt_check(e == cudaSuccess && found,
		 "cudaGetDriverEntryPointByVersion(\"cuInit\") -> %s (found natively, "
		 "not found in a qcuda guest)",
		 cudaGetErrorName(e));
	fn = (void *)1;
	e = cudaGetDriverEntryPoint("cuInit", &fn, cudaEnableDefault, &q);
	found = qcuda_runtime() ? !fn && q == cudaDriverEntryPointSymbolNotFound
				: fn && q == cudaDriverEntryPointSuccess;
	qt_check(e == cudaSuccess && found, "cudaGetDriverEntryPoint(\"cuInit\") -> %s (the same)",
		 cudaGetErrorName(e));
	fn = (void *)1;
	e = cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &q);
	qt_check(e == cudaSuccess && !fn && q == cudaDriverEntryPointSymbolNotFound,
		 "an unknown driver symbol -> %s, NULL, cudaDriverEntryPointSymbolNotFound", cudaGetErrorName(e));
}
#pragma GCC diagnostic pop

int main(void)
{
	cudaFuncAttributes a;
	int sms = 0, *d_out;

	qt_begin("funcattrs");
	/* The first use of the module (loads it). */
	FIRST_KERNEL_USE(cudaFuncGetAttributes(&a, plain));
	print_attrs("plain", a);
	OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	OK(cudaMalloc(&d_out, 1024 * sizeof(int)));

	attributes();
	set_attributes(d_out);
	occupancy(sms);
	limits();
	stream_attributes();
	cooperative(sms);
	driver_api();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(d_out), cudaSuccess);
	return qt_end();
}
