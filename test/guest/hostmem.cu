// SPDX-License-Identifier: MIT
// hostmem: pinned (cudaMallocHost, cudaHostAlloc with every flag), mapped
// (cudaHostGetDevicePointer), registered (cudaHostRegister) and managed
// (cudaMallocManaged) host memory: CPU-side checks, copies through them,
// and their argument checks. No kernels.
#include <sys/mman.h>
#include "qctest.h"

#define PAGE 4096

/* Copies through device memory from and to host buffers a and b (any kind
 * of host memory), checking the data. */
static void through_device(void *a, void *b, size_t n, const char *what)
{
	char *d = NULL;

	qt_fill(a, n, n + 1);
	memset(b, 0, n);
	OK(cudaMalloc(&d, n));
	EXPECT(cudaMemcpy(d, a, n, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(b, d, n, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(a, b, n) < 0, "%s: H2D + D2H round trip of %zu bytes", what, n);
	memset(b, 0, n);
	EXPECT(cudaMemcpy(d, a, n, cudaMemcpyDefault), cudaSuccess);
	EXPECT(cudaMemcpyAsync(b, d, n, cudaMemcpyDefault, 0), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	qt_check(qt_diff(a, b, n) < 0, "%s: Default/async round trip of %zu bytes", what, n);
	OK(cudaFree(d));
}

/* The device pointer of mapped memory addresses the same bytes. */
static void mapped_view(void *h, size_t n, const char *what)
{
	void *dp = NULL;
	unsigned char *buf = (unsigned char *)malloc(n);
	char *d = NULL;

	EXPECT(cudaHostGetDevicePointer(&dp, h, 0), cudaSuccess);
	if (!dp)
		return;
	qt_fill(h, n, 3 * n);
	memset(buf, 0, n);
	EXPECT(cudaMemcpy(buf, dp, n, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(buf, h, n) < 0, "%s: the device pointer reads what the CPU wrote", what);
	EXPECT(cudaMemset(dp, 0x6b, n), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(qt_not_byte(h, 0x6b, n) < 0, "%s: the CPU sees a memset through the device pointer", what);
	OK(cudaMalloc(&d, n));
	qt_fill(buf, n, 11);
	OK(cudaMemcpy(d, buf, n, cudaMemcpyHostToDevice));
	EXPECT(cudaMemcpy(dp, d, n, cudaMemcpyDeviceToDevice), cudaSuccess);
	qt_check(qt_diff(h, buf, n) < 0, "%s: a D2D copy into the device pointer lands in host memory", what);
	if (n > 100) {
		void *dp100 = NULL;
		EXPECT(cudaHostGetDevicePointer(&dp100, (char *)h + 100, 0), cudaSuccess);
		qt_check((char *)dp100 == (char *)dp + 100, "%s: device pointer of an interior address", what);
	}
	OK(cudaFree(d));
	free(buf);
}

static void pinned(void)
{
	static const unsigned int fl[] = {
		cudaHostAllocDefault,
		cudaHostAllocPortable,
		cudaHostAllocMapped,
		cudaHostAllocWriteCombined,
		cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined,
	};
	void *h = NULL, *g = NULL;
	unsigned int f;

	EXPECT(cudaMallocHost(&h, 1 << 20), cudaSuccess);
	EXPECT(cudaMallocHost(&g, (1 << 20) + 5), cudaSuccess);
	if (!h || !g)
		return;
	memset(h, 0x77, 1 << 20);
	qt_check(qt_not_byte(h, 0x77, 1 << 20) < 0, "pinned memory is writable by the CPU");
	through_device(h, g, 1 << 20, "cudaMallocHost");
	through_device(h, g, 1, "cudaMallocHost");
	mapped_view(h, 1 << 20, "cudaMallocHost");
	EXPECT(cudaHostGetFlags(&f, h), cudaSuccess);
	qt_check(f == cudaHostAllocMapped, "cudaMallocHost flags read back as Mapped");
	EXPECT(cudaFreeHost(h), cudaSuccess);
	EXPECT(cudaFreeHost(g), cudaSuccess);

	for (size_t i = 0; i < sizeof(fl) / sizeof(fl[0]); i++) {
		char what[64];

		snprintf(what, sizeof(what), "cudaHostAlloc flags %#x", fl[i]);
		h = NULL;
		EXPECT(cudaHostAlloc(&h, 3 * PAGE + 17, fl[i]), cudaSuccess);
		if (!h)
			continue;
		qt_check(qt_not_byte(h, 0, 3 * PAGE + 17) < 0, "%s: memory starts zeroed", what);
		mapped_view(h, 3 * PAGE + 17, what);
		{
			void *dp = NULL;
			cudaHostGetDevicePointer(&dp, h, 0);
			qt_check(dp == h, "%s: device pointer == host pointer (unified addressing)", what);
		}
		EXPECT(cudaHostGetFlags(&f, h), cudaSuccess);
		qt_check(f == (fl[i] | cudaHostAllocMapped), "%s: flags read back", what);
		EXPECT(cudaFreeHost(h), cudaSuccess);
	}

	/* Large pinned memory (physically scattered in a guest). */
	EXPECT(cudaMallocHost(&h, (16 << 20) + 3), cudaSuccess);
	EXPECT(cudaMallocHost(&g, (16 << 20) + 3), cudaSuccess);
	if (h && g)
		through_device(h, g, (16 << 20) + 3, "16 MiB pinned");
	EXPECT(cudaFreeHost(h), cudaSuccess);
	EXPECT(cudaFreeHost(g), cudaSuccess);

	/* Pinned memory as a device-accessible pointer in copies and memsets. */
	EXPECT(cudaMallocHost(&h, 100), cudaSuccess);
	EXPECT(cudaMemset(h, 3, 100), cudaSuccess);
	qt_check(h && qt_not_byte(h, 3, 100) < 0, "cudaMemset on pinned memory");
	EXPECT(cudaFree(h), cudaErrorInvalidValue);
	EXPECT(cudaFreeHost((char *)h + 1), cudaErrorInvalidValue);
	EXPECT(cudaFreeHost(h), cudaSuccess);
	EXPECT(cudaFreeHost(h), cudaErrorInvalidValue);

	/* Argument checks. */
	EXPECT(cudaHostAlloc(&h, 16, 0x100), cudaErrorInvalidValue);
	EXPECT(cudaHostAlloc(NULL, 16, 0), cudaErrorInvalidValue);
	EXPECT(cudaMallocHost(NULL, 16), cudaErrorInvalidValue);
	h = (void *)1;
	EXPECT(cudaHostAlloc(&h, 0, 0), cudaSuccess);
	qt_check(h == NULL, "cudaHostAlloc of 0 bytes gives NULL");
	EXPECT(cudaMallocHost(&h, 1ull << 50), cudaErrorMemoryAllocation);
	EXPECT(cudaHostAlloc(&h, 1ull << 50, cudaHostAllocMapped), cudaErrorMemoryAllocation);
	EXPECT(cudaFreeHost(NULL), cudaSuccess);
	{
		void *m = malloc(64), *d = NULL, *dp = NULL;
		EXPECT(cudaFreeHost(m), cudaErrorInvalidValue);
		EXPECT(cudaHostGetDevicePointer(&dp, m, 0), cudaErrorInvalidValue);
		EXPECT(cudaFree(m), cudaErrorInvalidValue);
		OK(cudaMalloc(&d, 64));
		EXPECT(cudaFreeHost(d), cudaErrorInvalidValue);
		OK(cudaFree(d));
		OK(cudaMallocHost(&h, 64));
		EXPECT(cudaHostGetDevicePointer(&dp, h, 1), cudaErrorInvalidValue);
		EXPECT(cudaHostGetDevicePointer(NULL, h, 0), cudaErrorInvalidValue);
		OK(cudaFreeHost(h));
		free(m);
	}
	EXPECT(cudaGetLastError(), cudaErrorInvalidValue);
}

static void registered(void)
{
	char *h = (char *)aligned_alloc(PAGE, 64 << 10), *g = (char *)aligned_alloc(PAGE, 64 << 10);
	char *one = (char *)aligned_alloc(PAGE, PAGE);

	EXPECT(cudaHostRegister(h, 64 << 10, cudaHostRegisterDefault), cudaSuccess);
	EXPECT(cudaHostRegister(g, 64 << 10, cudaHostRegisterPortable), cudaSuccess);
	through_device(h, g, 64 << 10, "registered memory");
	through_device(h + 1, g + 3, 1000, "registered memory, unaligned");
	EXPECT(cudaHostRegister(h, 64 << 10, 0), cudaErrorHostMemoryAlreadyRegistered);
	EXPECT(cudaHostRegister(h + PAGE, PAGE, 0), cudaErrorHostMemoryAlreadyRegistered);
	EXPECT(cudaHostRegister(h + (60 << 10), 8 << 10, 0), cudaErrorHostMemoryAlreadyRegistered);
	EXPECT(cudaHostUnregister(h + PAGE), cudaErrorInvalidValue);
	EXPECT(cudaHostUnregister(h), cudaSuccess);
	EXPECT(cudaHostUnregister(h), cudaErrorHostMemoryNotRegistered);
	EXPECT(cudaHostUnregister(g), cudaSuccess);

	/* A single page (always contiguous) maps into the device. */
	EXPECT(cudaHostRegister(one, PAGE, cudaHostRegisterMapped), cudaSuccess);
	mapped_view(one, PAGE, "registered page");
	EXPECT(cudaFreeHost(one), cudaErrorInvalidValue);
	EXPECT(cudaHostUnregister(one), cudaSuccess);
	EXPECT(cudaHostRegister(one + 1, 100, cudaHostRegisterMapped), cudaSuccess);
	mapped_view(one + 1, 100, "registered 100 bytes at an odd address");
	EXPECT(cudaHostUnregister(one + 1), cudaSuccess);
	EXPECT(cudaHostRegister(one, PAGE, cudaHostRegisterReadOnly), cudaSuccess);
	EXPECT(cudaHostUnregister(one), cudaSuccess);

	EXPECT(cudaHostRegister(NULL, PAGE, 0), cudaErrorInvalidValue);
	EXPECT(cudaHostRegister(one, 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaHostRegister(one, PAGE, 0x100), cudaErrorInvalidValue);
	EXPECT(cudaHostRegister(one, PAGE, cudaHostRegisterIoMemory), cudaErrorInvalidValue);
	{
		void *ro = mmap(NULL, 2 * PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		EXPECT(cudaHostRegister(ro, 2 * PAGE, 0), cudaErrorInvalidValue);
		munmap(ro, 2 * PAGE);
	}
	EXPECT(cudaHostRegister((void *)0x10000, 2 * PAGE, 0), cudaErrorInvalidValue);
	{
		char stackbuf[64];
		EXPECT(cudaHostUnregister(stackbuf), cudaErrorHostMemoryNotRegistered);
	}
	EXPECT(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);
	free(h);
	free(g);
	free(one);
}

static void managed(void)
{
	unsigned char *m = NULL, *big = NULL, *h = (unsigned char *)malloc(8192);
	char *d = NULL;
	void *dp = NULL;

	EXPECT(cudaMallocManaged(&m, 8192, cudaMemAttachGlobal), cudaSuccess);
	if (!m)
		return;
	qt_fill(m, 8192, 1);
	OK(cudaMalloc(&d, 8192));
	EXPECT(cudaMemcpy(d, m, 8192, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(h, d, 8192, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(h, m, 8192) < 0, "managed: CPU writes reach a copy to device memory");
	EXPECT(cudaMemset(m, 1, 8192), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(qt_not_byte(m, 1, 8192) < 0, "managed: cudaMemset is seen by the CPU");
	EXPECT(cudaMemcpy(m, d, 8192, cudaMemcpyDeviceToDevice), cudaSuccess);
	qt_check(qt_diff(m, h, 8192) < 0, "managed: D2D into managed memory");
	EXPECT(cudaMemcpy(m + 1, m + 4096, 100, cudaMemcpyDefault), cudaSuccess);
	qt_check(qt_diff(m + 1, h + 4096, 100) < 0, "managed: Default within managed memory");
	EXPECT(cudaHostGetDevicePointer(&dp, m, 0), cudaErrorInvalidValue);
	EXPECT(cudaFreeHost(m), cudaErrorInvalidValue);
	EXPECT(cudaFree(m + 1), cudaErrorInvalidValue);
	EXPECT(cudaFree(m), cudaSuccess);

	m = NULL;
	EXPECT(cudaMallocManaged(&m, 4096, cudaMemAttachHost), cudaSuccess);
	if (m) {
		m[4095] = 9;
		qt_check(m[4095] == 9 && m[0] == 0, "managed (attach host): usable by the CPU, zeroed");
		EXPECT(cudaFree(m), cudaSuccess);
	}

	/* Larger than a guest can make physically contiguous. */
	EXPECT(cudaMallocManaged(&big, (6 << 20) + 1, cudaMemAttachGlobal), cudaSuccess);
	if (big) {
		char *d2 = NULL;
		unsigned char *g = (unsigned char *)malloc((6 << 20) + 1);
		qt_fill(big, (6 << 20) + 1, 66);
		OK(cudaMalloc(&d2, (6 << 20) + 1));
		EXPECT(cudaMemcpy(d2, big, (6 << 20) + 1, cudaMemcpyDefault), cudaSuccess);
		EXPECT(cudaMemcpy(g, d2, (6 << 20) + 1, cudaMemcpyDefault), cudaSuccess);
		qt_check(qt_diff(g, big, (6 << 20) + 1) < 0, "managed 6 MiB: round trip through the device");
		OK(cudaFree(d2));
		EXPECT(cudaFree(big), cudaSuccess);
		free(g);
	}

	m = (unsigned char *)1;
	EXPECT(cudaMallocManaged(&m, 0, cudaMemAttachGlobal), cudaSuccess);
	qt_check(m == NULL, "cudaMallocManaged of 0 bytes gives NULL");
	EXPECT(cudaMallocManaged(&m, 16, 0), cudaErrorInvalidValue);
	EXPECT(cudaMallocManaged(&m, 16, 7), cudaErrorInvalidValue);
	EXPECT(cudaMallocManaged(NULL, 16, cudaMemAttachGlobal), cudaErrorInvalidValue);
	EXPECT(cudaMallocManaged(&m, 1ull << 50, cudaMemAttachGlobal), cudaErrorMemoryAllocation);
	OK(cudaFree(d));
	free(h);
}

static void attributes(void)
{
	cudaPointerAttributes a;
	void *d = NULL, *h = NULL, *m = NULL;
	int x;

	OK(cudaMalloc(&d, 64));
	OK(cudaMallocHost(&h, 64));
	OK(cudaMallocManaged(&m, 64, cudaMemAttachGlobal));
	EXPECT(cudaPointerGetAttributes(&a, (char *)d + 4), cudaSuccess);
	qt_check(a.type == cudaMemoryTypeDevice && a.devicePointer == (char *)d + 4 && a.device == 0,
		 "pointer attributes of device memory");
	EXPECT(cudaPointerGetAttributes(&a, h), cudaSuccess);
	qt_check(a.type == cudaMemoryTypeHost && a.hostPointer == h && a.devicePointer != NULL,
		 "pointer attributes of pinned memory");
	EXPECT(cudaPointerGetAttributes(&a, m), cudaSuccess);
	qt_check(a.type == cudaMemoryTypeManaged && a.devicePointer == m && a.hostPointer == m,
		 "pointer attributes of managed memory");
	EXPECT(cudaPointerGetAttributes(&a, &x), cudaSuccess);
	qt_check(a.type == cudaMemoryTypeUnregistered, "pointer attributes of pageable memory");
	OK(cudaFree(d));
	OK(cudaFreeHost(h));
	OK(cudaFree(m));
}

int main(void)
{
	qt_begin("hostmem");
	EXPECT(cudaSetDeviceFlags(cudaDeviceMapHost), cudaSuccess);
	pinned();
	registered();
	managed();
	attributes();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
