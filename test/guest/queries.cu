// The runtime's start-up queries: a stream's flags, id and device
// (cudaStreamGetFlags/GetId/GetDevice of created, NULL, legacy and per-thread
// streams; ids distinct, stable, never reused, per thread for the per-thread
// stream), cudaStreamCopyAttributes, the device's cache and shared memory
// configurations, its PCI bus id (against its attributes, back through
// cudaDeviceGetByPCIBusId in each form CUDA takes), cudaChooseDevice,
// cudaMemcpyPeer/PeerAsync on one device, cudaDeviceGetTexture1DLinearMaxWidth,
// cudaSetValidDevices, cudaFuncGetName's argument check; the errors of each.
// No kernels: it runs on the host-memory device too. Prints no id, bus id or
// limit that differs between machines (the texture limits are info lines).
#include <cctype>
#include <cstdio>
#include <cstring>
#include <thread>
#include <cuda_runtime.h>
#include "qctest.h"

#pragma nv_diag_suppress 1444 /* the shared memory configuration calls are deprecated */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

static unsigned long long id_of(cudaStream_t s)
{
	unsigned long long id = 0;
	OK(cudaStreamGetId(s, &id));
	return id;
}

static void stream_queries(void)
{
	cudaStream_t plain, nonblocking, prio;
	OK(cudaStreamCreate(&plain));
	OK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
	OK(cudaStreamCreateWithPriority(&prio, cudaStreamNonBlocking, -1));

	unsigned int flags = 99;
	EXPECT(cudaStreamGetFlags(plain, &flags), cudaSuccess);
	qt_check(flags == cudaStreamDefault, "cudaStreamCreate's flags %u", flags);
	EXPECT(cudaStreamGetFlags(nonblocking, &flags), cudaSuccess);
	qt_check(flags == cudaStreamNonBlocking, "cudaStreamNonBlocking's flags %u", flags);
	EXPECT(cudaStreamGetFlags(prio, &flags), cudaSuccess);
	qt_check(flags == cudaStreamNonBlocking, "a non-blocking stream with a priority: flags %u", flags);
	flags = 99;
	EXPECT(cudaStreamGetFlags(0, &flags), cudaSuccess);
	qt_check(flags == cudaStreamDefault, "NULL stream's flags %u", flags);
	flags = 99;
	EXPECT(cudaStreamGetFlags(cudaStreamLegacy, &flags), cudaSuccess);
	qt_check(flags == cudaStreamDefault, "cudaStreamLegacy's flags %u", flags);
	flags = 99;
	EXPECT(cudaStreamGetFlags(cudaStreamPerThread, &flags), cudaSuccess);
	qt_check(flags == cudaStreamDefault, "cudaStreamPerThread's flags %u", flags);
	EXPECT(cudaStreamGetFlags(plain, NULL), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);

	unsigned long long ids[] = { id_of(plain), id_of(nonblocking), id_of(prio), id_of(cudaStreamLegacy),
				     id_of(cudaStreamPerThread) };
	const int n = sizeof(ids) / sizeof(ids[0]);
	bool distinct = true;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			distinct = distinct && ids[i] != ids[j];
	qt_check(distinct, "ids of 3 streams, cudaStreamLegacy and cudaStreamPerThread are distinct");
	qt_check(id_of(plain) == ids[0] && id_of(cudaStreamLegacy) == ids[3] && id_of(cudaStreamPerThread) == ids[4],
		 "ids are stable");
	qt_check(id_of(0) == ids[3], "the NULL stream's id is cudaStreamLegacy's");
	unsigned long long other_thread = 0;
	std::thread t([&] { other_thread = id_of(cudaStreamPerThread); });
	t.join();
	qt_check(other_thread && other_thread != ids[4] && other_thread != ids[3],
		 "another thread's cudaStreamPerThread has an id of its own");
	EXPECT(cudaStreamGetId(plain, NULL), cudaErrorInvalidValue);
	OK(cudaStreamDestroy(plain));
	OK(cudaStreamCreate(&plain));
	unsigned long long again = id_of(plain);
	bool fresh = true;
	for (int i = 0; i < n; i++)
		fresh = fresh && again != ids[i] && again != other_thread;
	qt_check(fresh, "a stream created after a destroy has a new id");

	int dev = 99;
	EXPECT(cudaStreamGetDevice(nonblocking, &dev), cudaSuccess);
	qt_check(dev == 0, "a stream's device %d", dev);
	dev = 99;
	EXPECT(cudaStreamGetDevice(0, &dev), cudaSuccess);
	qt_check(dev == 0, "NULL stream's device %d", dev);
	dev = 99;
	EXPECT(cudaStreamGetDevice(cudaStreamPerThread, &dev), cudaSuccess);
	qt_check(dev == 0, "cudaStreamPerThread's device %d", dev);
	/* cudaStreamGetDevice(s, NULL): NVIDIA's runtime crashes (qcuda's says
	 * cudaErrorInvalidValue): not asked. */

	/* cudaStreamCopyAttributes: what one stream was given, another gets. */
	void *win;
	cudaStreamAttrValue v;
	OK(cudaMalloc(&win, 1 << 20));
	memset(&v, 0, sizeof(v));
	v.syncPolicy = cudaSyncPolicyYield;
	OK(cudaStreamSetAttribute(nonblocking, cudaStreamAttributeSynchronizationPolicy, &v));
	memset(&v, 0, sizeof(v));
	v.memSyncDomain = cudaLaunchMemSyncDomainRemote;
	OK(cudaStreamSetAttribute(nonblocking, cudaStreamAttributeMemSyncDomain, &v));
	memset(&v, 0, sizeof(v));
	v.accessPolicyWindow.base_ptr = win;
	v.accessPolicyWindow.num_bytes = 1 << 20;
	v.accessPolicyWindow.hitRatio = 0.5f;
	v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
	v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
	OK(cudaStreamSetAttribute(nonblocking, cudaStreamAttributeAccessPolicyWindow, &v));
	EXPECT(cudaStreamCopyAttributes(plain, nonblocking), cudaSuccess);
	memset(&v, 0, sizeof(v));
	OK(cudaStreamGetAttribute(plain, cudaStreamAttributeSynchronizationPolicy, &v));
	qt_check(v.syncPolicy == cudaSyncPolicyYield, "copied synchronization policy %d", (int)v.syncPolicy);
	memset(&v, 0, sizeof(v));
	OK(cudaStreamGetAttribute(plain, cudaStreamAttributeMemSyncDomain, &v));
	qt_check(v.memSyncDomain == cudaLaunchMemSyncDomainRemote, "copied memory sync domain %d",
		 (int)v.memSyncDomain);
	memset(&v, 0, sizeof(v));
	OK(cudaStreamGetAttribute(plain, cudaStreamAttributeAccessPolicyWindow, &v));
	/* Natively Persisting hits read back; qcuda makes them Normal (the L2 set-aside is every VM's). */
	qt_check(v.accessPolicyWindow.base_ptr == win && v.accessPolicyWindow.num_bytes == 1 << 20 &&
			 v.accessPolicyWindow.hitRatio == 0.5f &&
			 (v.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting ||
			  v.accessPolicyWindow.hitProp == cudaAccessPropertyNormal) &&
			 v.accessPolicyWindow.missProp == cudaAccessPropertyStreaming,
		 "copied access policy window (%zu bytes, hit ratio %.2f)", v.accessPolicyWindow.num_bytes,
		 v.accessPolicyWindow.hitRatio);
	memset(&v, 0, sizeof(v));
	OK(cudaStreamSetAttribute(plain, cudaStreamAttributeAccessPolicyWindow, &v));
	OK(cudaStreamSetAttribute(nonblocking, cudaStreamAttributeAccessPolicyWindow, &v));

	OK(cudaStreamSynchronize(plain));
	OK(cudaFree(win));
	OK(cudaStreamDestroy(plain));
	OK(cudaStreamDestroy(nonblocking));
	OK(cudaStreamDestroy(prio));
}

static void configs(void)
{
	cudaFuncCache cache = (cudaFuncCache)99;
	EXPECT(cudaDeviceGetCacheConfig(&cache), cudaSuccess);
	qt_check(cache == cudaFuncCachePreferNone, "a fresh context's cache configuration %d", (int)cache);
	EXPECT(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared), cudaSuccess);
	EXPECT(cudaDeviceGetCacheConfig(&cache), cudaSuccess);
	qt_check(cache == cudaFuncCachePreferShared, "cache configuration after cudaFuncCachePreferShared: %d",
		 (int)cache);
	EXPECT(cudaDeviceSetCacheConfig((cudaFuncCache)7), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetCacheConfig(NULL), cudaErrorInvalidValue);
	EXPECT(cudaDeviceSetCacheConfig(cudaFuncCachePreferNone), cudaSuccess);

	cudaSharedMemConfig bank = (cudaSharedMemConfig)99;
	EXPECT(cudaDeviceGetSharedMemConfig(&bank), cudaSuccess);
	qt_check(bank == cudaSharedMemBankSizeFourByte, "shared memory bank size %d", (int)bank);
	EXPECT(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeEightByte), cudaSuccess);
	EXPECT(cudaDeviceGetSharedMemConfig(&bank), cudaSuccess);
	qt_check(bank == cudaSharedMemBankSizeFourByte, "bank size after asking for eight bytes %d (fixed)", (int)bank);
	EXPECT(cudaDeviceSetSharedMemConfig(cudaSharedMemBankSizeDefault), cudaSuccess);
	EXPECT(cudaDeviceSetSharedMemConfig((cudaSharedMemConfig)5), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetSharedMemConfig(NULL), cudaErrorInvalidValue);
}

static void pci(int count)
{
	int domain = -1, bus = -1, slot = -1;
	OK(cudaDeviceGetAttribute(&domain, cudaDevAttrPciDomainId, 0));
	OK(cudaDeviceGetAttribute(&bus, cudaDevAttrPciBusId, 0));
	OK(cudaDeviceGetAttribute(&slot, cudaDevAttrPciDeviceId, 0));
	char id[64], want[64];
	memset(id, 0, sizeof(id));
	EXPECT(cudaDeviceGetPCIBusId(id, sizeof(id), 0), cudaSuccess);
	snprintf(want, sizeof(want), "%04X:%02X:%02X.0", domain, bus, slot);
	qt_check(strcmp(id, want) == 0, "the bus id is the attributes as %%04X:%%02X:%%02X.0 (%zu characters)",
		 strlen(id));
	int dev = 99;
	EXPECT(cudaDeviceGetByPCIBusId(&dev, id), cudaSuccess);
	qt_check(dev == 0, "device of its own bus id %d", dev);
	char lower[64];
	for (size_t i = 0; i <= strlen(id); i++)
		lower[i] = (char)tolower((unsigned char)id[i]);
	dev = 99;
	EXPECT(cudaDeviceGetByPCIBusId(&dev, lower), cudaSuccess);
	qt_check(dev == 0, "device of the bus id in lower case %d", dev);
	char nofn[64];
	snprintf(nofn, sizeof(nofn), "%04x:%02x:%02x", domain, bus, slot);
	dev = 99;
	EXPECT(cudaDeviceGetByPCIBusId(&dev, nofn), cudaSuccess);
	qt_check(dev == 0, "device of domain:bus:device %d", dev);
	EXPECT(cudaDeviceGetByPCIBusId(&dev, "not a bus id"), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetByPCIBusId(&dev, "FFFF:FF:1F.0"), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetByPCIBusId(NULL, id), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetByPCIBusId(&dev, NULL), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetPCIBusId(id, sizeof(id), count), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetPCIBusId(id, sizeof(id), -1), cudaErrorInvalidDevice);
	EXPECT(cudaDeviceGetPCIBusId(NULL, sizeof(id), 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetPCIBusId(id, 0, 0), cudaErrorInvalidValue);
}

static void choose(void)
{
	cudaDeviceProp prop;
	int dev = 99;
	OK(cudaGetDeviceProperties(&prop, 0));
	EXPECT(cudaChooseDevice(&dev, &prop), cudaSuccess);
	qt_check(dev == 0, "cudaChooseDevice with device 0's properties: %d", dev);
	memset(&prop, 0, sizeof(prop));
	prop.major = 1;
	dev = 99;
	EXPECT(cudaChooseDevice(&dev, &prop), cudaSuccess);
	qt_check(dev == 0, "cudaChooseDevice asking for compute capability 1.0: %d", dev);
	EXPECT(cudaChooseDevice(NULL, &prop), cudaErrorInvalidValue);
	EXPECT(cudaChooseDevice(&dev, NULL), cudaErrorInvalidValue);
}

static void peer_copies(int count)
{
	const size_t n = 1 << 16;
	unsigned char *a, *b, *host = (unsigned char *)malloc(n), *back = (unsigned char *)malloc(n);
	cudaStream_t s;
	OK(cudaMalloc(&a, n));
	OK(cudaMalloc(&b, n));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	qt_fill(host, n, 7);
	OK(cudaMemcpy(a, host, n, cudaMemcpyHostToDevice));
	OK(cudaMemset(b, 0, n));
	EXPECT(cudaMemcpyPeer(b, 0, a, 0, n), cudaSuccess);
	OK(cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
	qt_check(qt_diff(back, host, n) < 0, "cudaMemcpyPeer device 0 -> device 0, 64 KiB");
	OK(cudaMemset(b, 0, n));
	EXPECT(cudaMemcpyPeerAsync(b + 1, 0, a + 3, 0, n - 4, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	OK(cudaMemcpy(back, b, n, cudaMemcpyDeviceToHost));
	qt_check(back[0] == 0 && qt_diff(back + 1, host + 3, n - 4) < 0 && back[n - 3] == 0,
		 "cudaMemcpyPeerAsync on a stream, unaligned, bytes around untouched");
	EXPECT(cudaMemcpyPeer(b, count, a, 0, n), cudaErrorInvalidDevice);
	EXPECT(cudaMemcpyPeer(b, 0, a, count, n), cudaErrorInvalidDevice);
	EXPECT(cudaMemcpyPeer(b, -1, a, 0, n), cudaErrorInvalidDevice);
	EXPECT(cudaMemcpyPeerAsync(b, 0, a, count, n, s), cudaErrorInvalidDevice);
	EXPECT(cudaGetLastError(), cudaErrorInvalidDevice);
	OK(cudaStreamDestroy(s));
	OK(cudaFree(a));
	OK(cudaFree(b));
	free(host);
	free(back);
}

static void texture_widths(int count)
{
	cudaChannelFormatDesc f1 = cudaCreateChannelDesc<float>();
	cudaChannelFormatDesc f4 = cudaCreateChannelDesc<float4>();
	cudaChannelFormatDesc u8 = cudaCreateChannelDesc<unsigned char>();
	size_t w1 = 0, w4 = 0, w8 = 0;
	EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&w1, &f1, 0), cudaSuccess);
	EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&w4, &f4, 0), cudaSuccess);
	EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&w8, &u8, 0), cudaSuccess);
	/* The device's limit: the host-memory device has none (0). */
	printf("info: 1D linear texture width: float %zu, float4 %zu, uchar %zu\n", w1, w4, w8);
	EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(NULL, &f1, 0), cudaErrorInvalidValue);
	EXPECT(cudaDeviceGetTexture1DLinearMaxWidth(&w1, &f1, count), cudaErrorInvalidDevice);
}

static void valid_devices(int count)
{
	int list[2] = { 0, count };
	EXPECT(cudaSetValidDevices(list, 1), cudaSuccess);
	EXPECT(cudaSetValidDevices(NULL, 0), cudaSuccess);
	EXPECT(cudaSetValidDevices(NULL, 1), cudaErrorInvalidValue);
	EXPECT(cudaSetValidDevices(list + 1, 1), cudaErrorInvalidDevice);
	int many[65] = { 0 };
	EXPECT(cudaSetValidDevices(many, count + 1), cudaErrorInvalidValue);
	int dev = 99;
	OK(cudaGetDevice(&dev));
	qt_check(dev == 0, "the current device after cudaSetValidDevices: %d", dev);
}

int main()
{
	qt_begin("queries");
	int count = 0;
	EXPECT(cudaGetDeviceCount(&count), cudaSuccess);
	qt_check(count >= 1 && count < 64, "at least one device");
	stream_queries();
	configs();
	pci(count);
	choose();
	peer_copies(count);
	texture_widths(count);
	valid_devices(count);
	EXPECT(cudaFuncGetName(NULL, (const void *)stream_queries), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
	EXPECT(cudaGetLastError(), cudaSuccess);
	return qt_end();
}
