// SPDX-License-Identifier: MIT
// managed: cudaMallocManaged memory shared by the CPU and kernels. The CPU
// writes, a kernel updates, cudaDeviceSynchronize (or cudaStreamSynchronize
// of the kernel's stream), the CPU reads and checks every element; then the
// CPU changes the data and the next kernel must see the change. Also:
// managed pointers stored inside managed memory and followed by a kernel (a
// table of arrays), managed memory mixed with device memory in copies,
// memsets and kernels, cudaMemAttachHost memory in a kernel, a series of
// allocate / use / free of different sizes (no stale mappings), and stream
// order: a cudaMemcpy / cudaMemset / cudaMemcpyAsync of managed memory issued
// right after a slow kernel (20 ms) that writes it must run after the
// kernel, as on the GPU, even when both sides are host memory.
//
// In a qcuda guest managed memory is pinned guest memory that the GPU can
// only address when it is physically contiguous (up to 4 MiB), so every
// allocation used by a kernel here is at most 1 MiB.
// (cudaMemAdvise, cudaMemPrefetchAsync, cudaMemRangeGetAttribute(s) and
// cudaStreamAttachMemAsync: memadvise.cu.)
// __managed__ variables are not used: qcuda does not support them.
#include "qctest.h"

#define N (256 << 10) /* unsigned per buffer: 1 MiB */
#define MS 1000000ull /* one millisecond in %globaltimer units (ns) */

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* Thread 0 of each block waits spin_ns, then p[i] = p[i] * mul + add. */
__global__ void slow_madd(unsigned *p, int n, unsigned mul, unsigned add, unsigned long long spin_ns)
{
	if (threadIdx.x == 0) {
		unsigned long long t0 = gtimer();

		while (gtimer() - t0 < spin_ns)
			;
	}
	__syncthreads();
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = p[i] * mul + add;
}

/* p[i] = p[i] * mul + add */
__global__ void madd(unsigned *p, int n, unsigned mul, unsigned add)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = p[i] * mul + add;
}

/* dst[i] = src[i] + k */
__global__ void add_copy(unsigned *dst, const unsigned *src, int n, unsigned k)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		dst[i] = src[i] + k;
}

struct entry {
	unsigned *data; /* managed */
	int n;
	unsigned sum; /* written by the kernel */
	unsigned long long check; /* sum of i * data[i], written by the kernel */
};

/* One block per entry: sums its array, reached through the pointer in the table. */
__global__ void sum_table(struct entry *t)
{
	struct entry *e = &t[blockIdx.x];
	unsigned s = 0;
	unsigned long long c = 0;

	for (int i = threadIdx.x; i < e->n; i += blockDim.x) {
		s += e->data[i];
		c += (unsigned long long)i * e->data[i];
	}
	atomicAdd(&e->sum, s);
	atomicAdd(&e->check, c);
}

static unsigned val(int i, unsigned seed)
{
	return (unsigned)i * 2654435761u ^ seed;
}

static long long first_bad_madd(const unsigned *p, int n, unsigned seed, unsigned mul, unsigned add)
{
	for (int i = 0; i < n; i++)
		if (p[i] != val(i, seed) * mul + add)
			return i;
	return -1;
}

static void basic(void)
{
	unsigned *m = NULL;
	long long bad;
	int v = -1;
	cudaStream_t s;

	EXPECT(cudaDeviceGetAttribute(&v, cudaDevAttrManagedMemory, 0), cudaSuccess);
	qt_check(v == 1, "cudaDevAttrManagedMemory is 1");
	EXPECT(cudaMallocManaged(&m, N * sizeof(unsigned), cudaMemAttachGlobal), cudaSuccess);
	if (!m)
		return;
	for (int i = 0; i < N; i++)
		m[i] = val(i, 1);
	madd<<<128, 256>>>(m, N, 3, 7);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = first_bad_madd(m, N, 1, 3, 7);
	qt_check(bad < 0, "CPU writes, kernel m = 3m + 7, CPU reads: every element (first bad %lld)", bad);

	/* The CPU rewrites the first half only; the kernel must see both halves as they are now. */
	for (int i = 0; i < N / 2; i++)
		m[i] = val(i, 2);
	madd<<<128, 256>>>(m, N, 5, 1);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = -1;
	for (int i = 0; i < N && bad < 0; i++)
		if (m[i] != (i < N / 2 ? val(i, 2) * 5 + 1 : (val(i, 1) * 3 + 7) * 5 + 1))
			bad = i;
	qt_check(bad < 0, "after the CPU rewrote half, the next kernel used the current data (first bad %lld)", bad);

	/* On a stream, synchronized by the stream. */
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	for (int i = 0; i < N; i++)
		m[i] = val(i, 3);
	madd<<<128, 256, 0, s>>>(m, N, 9, 9);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = first_bad_madd(m, N, 3, 9, 9);
	qt_check(bad < 0, "a kernel on a non-blocking stream, then cudaStreamSynchronize: the CPU reads its result");
	OK(cudaStreamDestroy(s));
	EXPECT(cudaFree(m), cudaSuccess);
}

/* Managed pointers inside managed memory. */
static void table(void)
{
	enum { K = 6 };
	static const int sizes[K] = { 1, 100, 1024, 4097, 30000, 65536 };
	struct entry *t = NULL;
	int ok = 1;

	EXPECT(cudaMallocManaged(&t, K * sizeof(*t), cudaMemAttachGlobal), cudaSuccess);
	if (!t)
		return;
	for (int k = 0; k < K; k++) {
		t[k].n = sizes[k];
		t[k].sum = 0;
		t[k].check = 0;
		t[k].data = NULL;
		ok &= cudaMallocManaged(&t[k].data, sizes[k] * sizeof(unsigned), cudaMemAttachGlobal) == cudaSuccess;
		for (int i = 0; ok && i < sizes[k]; i++)
			t[k].data[i] = val(i, 10 + k);
	}
	qt_check(ok, "%d managed arrays allocated and filled by the CPU", K);
	if (!ok)
		return;
	sum_table<<<K, 128>>>(t);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	for (int k = 0; k < K; k++) {
		unsigned s = 0;
		unsigned long long c = 0;

		for (int i = 0; i < sizes[k]; i++) {
			s += val(i, 10 + k);
			c += (unsigned long long)i * val(i, 10 + k);
		}
		ok &= t[k].sum == s && t[k].check == c;
	}
	qt_check(ok, "a kernel followed the managed pointers in a managed table: every sum right");
	for (int k = 0; k < K; k++)
		OK(cudaFree(t[k].data));
	EXPECT(cudaFree(t), cudaSuccess);
}

/* Managed memory with device memory: copies, memsets and kernels across both. */
static void mixed(void)
{
	unsigned *m = NULL, *d = NULL, *h = (unsigned *)malloc(N * sizeof(unsigned));
	long long bad = -1;

	EXPECT(cudaMallocManaged(&m, N * sizeof(unsigned), cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaMalloc(&d, N * sizeof(unsigned)), cudaSuccess);
	if (!m || !d)
		return;
	for (int i = 0; i < N; i++)
		h[i] = val(i, 20);
	/* pageable -> managed (Default), kernel managed -> device, copy device -> managed. */
	EXPECT(cudaMemcpy(m, h, N * sizeof(unsigned), cudaMemcpyDefault), cudaSuccess);
	add_copy<<<128, 256>>>(d, m, N, 100);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(m, d, N * sizeof(unsigned), cudaMemcpyDeviceToDevice), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	for (int i = 0; i < N && bad < 0; i++)
		if (m[i] != val(i, 20) + 100)
			bad = i;
	qt_check(bad < 0, "pageable -> managed copy, kernel managed -> device, D2D copy back: the CPU reads it");
	/* memset managed, kernel device -> managed, D2H from managed (Default). */
	EXPECT(cudaMemset(m, 0x01, N * sizeof(unsigned)), cudaSuccess);
	add_copy<<<128, 256>>>(m, m, N, 5);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess); /* stream order is ordering()'s business */
	memset(h, 0, N * sizeof(unsigned));
	EXPECT(cudaMemcpy(h, m, N * sizeof(unsigned), cudaMemcpyDefault), cudaSuccess);
	bad = -1;
	for (int i = 0; i < N && bad < 0; i++)
		if (h[i] != 0x01010101u + 5)
			bad = i;
	qt_check(bad < 0, "cudaMemset of managed memory, then a kernel, then a copy out: every element");
	EXPECT(cudaFree(m), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	free(h);
}

/* cudaMemAttachHost memory used by a kernel (allowed with concurrent managed access). */
static void attach_host(void)
{
	unsigned *m = NULL;
	int cma = -1;
	long long bad;

	EXPECT(cudaDeviceGetAttribute(&cma, cudaDevAttrConcurrentManagedAccess, 0), cudaSuccess);
	qt_check(cma == 1, "cudaDevAttrConcurrentManagedAccess is 1");
	EXPECT(cudaMallocManaged(&m, 4096 * sizeof(unsigned), cudaMemAttachHost), cudaSuccess);
	if (!m)
		return;
	for (int i = 0; i < 4096; i++)
		m[i] = val(i, 30);
	madd<<<16, 256>>>(m, 4096, 11, 3);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = first_bad_madd(m, 4096, 30, 11, 3);
	qt_check(bad < 0, "cudaMallocManaged(cudaMemAttachHost) memory updated by a kernel");
	EXPECT(cudaFree(m), cudaSuccess);
}

/* Allocate, use, free, of sizes from one byte to 1 MiB. */
static void churn(void)
{
	static const size_t sizes[] = { 4, 4096, 4100, 65536, 200000, 1 << 20, 12, 777 * 4 };
	int ok = 1;

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		unsigned *m = NULL;
		int n = (int)(sizes[k] / sizeof(unsigned));

		if (cudaMallocManaged(&m, sizes[k], cudaMemAttachGlobal) != cudaSuccess || !m) {
			ok = 0;
			continue;
		}
		for (int i = 0; i < n; i++)
			m[i] = val(i, 40 + (unsigned)k);
		madd<<<64, 256>>>(m, n, 2, (unsigned)k);
		ok &= cudaDeviceSynchronize() == cudaSuccess;
		ok &= first_bad_madd(m, n, 40 + (unsigned)k, 2, (unsigned)k) < 0;
		ok &= cudaFree(m) == cudaSuccess;
	}
	qt_check(ok, "8 rounds of cudaMallocManaged / CPU writes / kernel / CPU checks / cudaFree");
}

/* Copies and memsets of managed memory keep stream order behind a slow kernel. */
static void ordering(void)
{
	unsigned *m = NULL, *m2 = NULL, *h = (unsigned *)malloc(N * sizeof(unsigned));
	cudaStream_t s;
	long long bad = -1;

	EXPECT(cudaMallocManaged(&m, N * sizeof(unsigned), cudaMemAttachGlobal), cudaSuccess);
	EXPECT(cudaMallocManaged(&m2, N * sizeof(unsigned), cudaMemAttachGlobal), cudaSuccess);
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (!m || !m2)
		return;

	/* managed -> pageable, cudaMemcpy (NULL stream) after a slow kernel on the NULL stream. */
	for (int i = 0; i < N; i++)
		m[i] = val(i, 50);
	memset(h, 0, N * sizeof(unsigned));
	slow_madd<<<64, 256>>>(m, N, 3, 1, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(h, m, N * sizeof(unsigned), cudaMemcpyDefault), cudaSuccess);
	bad = first_bad_madd(h, N, 50, 3, 1);
	qt_check(bad < 0,
		 "cudaMemcpy from managed memory right after a slow kernel copies the kernel's result "
		 "(first bad %lld)",
		 bad);

	/* cudaMemset (NULL stream) after a slow kernel writing the same memory. */
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	slow_madd<<<64, 256>>>(m, N, 5, 5, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemset(m, 0x22, N * sizeof(unsigned)), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(qt_not_byte(m, 0x22, N * sizeof(unsigned)) < 0,
		 "cudaMemset of managed memory right after a slow kernel writing it runs after the kernel");

	/* managed -> managed, cudaMemcpyAsync on the slow kernel's stream. */
	for (int i = 0; i < N; i++)
		m[i] = val(i, 51), m2[i] = 0;
	slow_madd<<<64, 256, 0, s>>>(m, N, 7, 2, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(m2, m, N * sizeof(unsigned), cudaMemcpyDefault, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = first_bad_madd(m2, N, 51, 7, 2);
	qt_check(bad < 0,
		 "cudaMemcpyAsync managed -> managed on a slow kernel's stream copies the kernel's result "
		 "(first bad %lld)",
		 bad);

	OK(cudaStreamDestroy(s));
	EXPECT(cudaFree(m), cudaSuccess);
	EXPECT(cudaFree(m2), cudaSuccess);
	free(h);
}

int main(void)
{
	qt_begin("managed");
	basic();
	table();
	mixed();
	attach_host();
	churn();
	ordering();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
