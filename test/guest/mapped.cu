// SPDX-License-Identifier: MIT
// mapped: zero-copy host memory used by kernels. Memory from
// cudaHostAlloc(cudaHostAllocMapped) (also write-combined), cudaMallocHost
// and cudaHostRegister(cudaHostRegisterMapped) is reached through
// cudaHostGetDevicePointer by kernels that read and write it; the CPU checks
// the results after cudaDeviceSynchronize, then changes the data and checks
// that the next launch sees the change (nothing stale). Then a handshake
// while a kernel runs: the kernel writes data and a flag into mapped memory,
// the CPU sees the flag and the data, answers through another flag, and the
// kernel sees the answer. Then stream order: a cudaMemcpy / cudaMemcpyAsync
// out of mapped memory issued right after a slow kernel (20 ms) that writes
// it must copy the kernel's result, even though both sides are host memory.
// Last, the host pointers themselves in a kernel (unified addressing: for
// cudaHostAlloc and cudaMallocHost memory they are the device pointers).
//
// In a qcuda guest the GPU can only address physically contiguous guest
// memory (allocations up to 4 MiB, registered ranges within one page), so
// every buffer here is at most 1 MiB and the registered ranges are one page
// and part of one page.
#include <sched.h>
#include <time.h>
#include "qctest.h"

#define N (128 << 10) /* unsigned per buffer: 512 KiB */
#define PAGE 4096
#define MS 1000000ull

static __device__ __forceinline__ unsigned long long gtimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* y[i] = a * x[i] + y[i] */
__global__ void axpy(const unsigned *x, unsigned *y, int n, unsigned a)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		y[i] = a * x[i] + y[i];
}

/* p[i] = p[i] * mul + add, after thread 0 of each block waited spin_ns */
__global__ void madd(unsigned *p, int n, unsigned mul, unsigned add, unsigned long long spin_ns = 0)
{
	if (spin_ns && threadIdx.x == 0) {
		unsigned long long t0 = gtimer();

		while (gtimer() - t0 < spin_ns)
			;
	}
	__syncthreads();
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		p[i] = p[i] * mul + add;
}

struct handshake {
	int flag; /* kernel: 1 = data written, 2 = done */
	int ack; /* CPU: 1 = seen */
	int cpu_value; /* written by the CPU before ack */
	int result; /* kernel: cpu_value + 1, or -1 if no ack came */
	int data[256]; /* kernel, before flag = 1 */
};

__global__ void talk(struct handshake *hs, unsigned long long timeout_ns)
{
	volatile struct handshake *v = hs;

	v->data[threadIdx.x] = threadIdx.x * 7 + 1;
	__syncthreads();
	if (threadIdx.x != 0)
		return;
	__threadfence_system();
	v->flag = 1;
	__threadfence_system();
	unsigned long long t0 = gtimer();
	while (v->ack == 0) {
		if (gtimer() - t0 > timeout_ns) {
			v->result = -1;
			v->flag = 2;
			return;
		}
	}
	__threadfence_system();
	v->result = v->cpu_value + 1;
	__threadfence_system();
	v->flag = 2;
}

static unsigned val(int i, unsigned seed)
{
	return (unsigned)i * 2654435761u ^ seed;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long long first_bad_axpy(const unsigned *x, const unsigned *y, const unsigned *y0, int n, unsigned a)
{
	for (int i = 0; i < n; i++)
		if (y[i] != a * x[i] + y0[i])
			return i;
	return -1;
}

/* x and y: host memory with device pointers dx and dy. Two rounds. */
static void axpy_rounds(unsigned *x, unsigned *y, const char *what, bool first)
{
	static unsigned y0[N];
	unsigned *dx = NULL, *dy = NULL;
	long long bad;

	EXPECT(cudaHostGetDevicePointer((void **)&dx, x, 0), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&dy, y, 0), cudaSuccess);
	if (!dx || !dy)
		return;
	for (int i = 0; i < N; i++) {
		x[i] = val(i, 1);
		y[i] = y0[i] = val(i, 2);
	}
	axpy<<<64, 256>>>(dx, dy, N, 3);
	if (first)
		FIRST_KERNEL_USE(cudaGetLastError());
	else
		EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = first_bad_axpy(x, y, y0, N, 3);
	qt_check(bad < 0, "%s: a kernel read x and wrote y = 3x + y in host memory (first bad %lld)", what, bad);
	/* The CPU changes both; the next launch must see the new values. */
	for (int i = 0; i < N; i++) {
		x[i] = val(i, 3);
		y[i] = y0[i] = val(i, 4);
	}
	axpy<<<64, 256>>>(dx, dy, N, 5);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	bad = first_bad_axpy(x, y, y0, N, 5);
	qt_check(bad < 0, "%s: after the CPU changed x and y, the next kernel used the new values (first bad %lld)",
		 what, bad);
}

static void host_alloc(void)
{
	unsigned *x = NULL, *y = NULL;
	int can = -1;

	EXPECT(cudaDeviceGetAttribute(&can, cudaDevAttrCanMapHostMemory, 0), cudaSuccess);
	qt_check(can == 1, "cudaDevAttrCanMapHostMemory is 1");
	EXPECT(cudaHostAlloc(&x, N * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaHostAlloc(&y, N * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
	if (x && y)
		axpy_rounds(x, y, "cudaHostAlloc(Mapped)", true);
	EXPECT(cudaFreeHost(x), cudaSuccess);
	EXPECT(cudaFreeHost(y), cudaSuccess);

	/* Write-combined x (the CPU only writes it), ordinary mapped y. */
	x = y = NULL;
	EXPECT(cudaHostAlloc(&x, N * sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocWriteCombined), cudaSuccess);
	EXPECT(cudaHostAlloc(&y, N * sizeof(unsigned), cudaHostAllocMapped | cudaHostAllocPortable), cudaSuccess);
	if (x && y)
		axpy_rounds(x, y, "cudaHostAlloc(Mapped|WriteCombined / Mapped|Portable)", false);
	EXPECT(cudaFreeHost(x), cudaSuccess);
	EXPECT(cudaFreeHost(y), cudaSuccess);

	/* cudaMallocHost memory is mapped too (unified addressing). */
	x = y = NULL;
	EXPECT(cudaMallocHost(&x, N * sizeof(unsigned)), cudaSuccess);
	EXPECT(cudaMallocHost(&y, N * sizeof(unsigned)), cudaSuccess);
	if (x && y)
		axpy_rounds(x, y, "cudaMallocHost", false);
	EXPECT(cudaFreeHost(x), cudaSuccess);
	EXPECT(cudaFreeHost(y), cudaSuccess);
}

static void registered(void)
{
	unsigned *page = (unsigned *)aligned_alloc(PAGE, PAGE);
	unsigned char *raw = (unsigned char *)aligned_alloc(PAGE, PAGE);
	unsigned *dp = NULL, *part;
	const int n = PAGE / sizeof(unsigned), m = 100;
	long long bad = -1;

	/* A whole page. */
	for (int i = 0; i < n; i++)
		page[i] = val(i, 5);
	EXPECT(cudaHostRegister(page, PAGE, cudaHostRegisterMapped), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&dp, page, 0), cudaSuccess);
	if (dp) {
		madd<<<4, 256>>>(dp, n, 3, 11);
		EXPECT(cudaGetLastError(), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		for (int i = 0; i < n && bad < 0; i++)
			if (page[i] != val(i, 5) * 3 + 11)
				bad = i;
		qt_check(bad < 0, "cudaHostRegister(Mapped) page: a kernel updated it through the device pointer");
		for (int i = 0; i < n; i++)
			page[i] = val(i, 6);
		madd<<<4, 256>>>(dp, n, 5, 1);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		bad = -1;
		for (int i = 0; i < n && bad < 0; i++)
			if (page[i] != val(i, 6) * 5 + 1)
				bad = i;
		qt_check(bad < 0, "cudaHostRegister(Mapped) page: the next kernel saw the CPU's new values");
	}
	EXPECT(cudaHostUnregister(page), cudaSuccess);

	/* 400 bytes inside a page, at offset 64: the bytes around stay. */
	memset(raw, 0xee, PAGE);
	part = (unsigned *)(raw + 64);
	for (int i = 0; i < m; i++)
		part[i] = val(i, 7);
	dp = NULL;
	EXPECT(cudaHostRegister(part, m * sizeof(unsigned), cudaHostRegisterMapped | cudaHostRegisterPortable),
	       cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&dp, part, 0), cudaSuccess);
	if (dp) {
		madd<<<1, 128>>>(dp, m, 7, 2);
		EXPECT(cudaGetLastError(), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		bad = -1;
		for (int i = 0; i < m && bad < 0; i++)
			if (part[i] != val(i, 7) * 7 + 2)
				bad = i;
		qt_check(bad < 0, "cudaHostRegister(Mapped) of 400 bytes in a page: a kernel updated them");
		qt_check(qt_not_byte(raw, 0xee, 64) < 0 && qt_not_byte(raw + 64 + m * sizeof(unsigned), 0xee,
								       PAGE - 64 - m * sizeof(unsigned)) < 0,
			 "cudaHostRegister(Mapped) of 400 bytes in a page: the bytes around them are untouched");
	}
	EXPECT(cudaHostUnregister(part), cudaSuccess);
	free(page);
	free(raw);
}

/* A kernel and the CPU talk through mapped memory while the kernel runs. */
static void flags(void)
{
	struct handshake *hs = NULL, *dhs = NULL;
	volatile struct handshake *v;
	double t0;
	int seen = 0, bad = 0;

	EXPECT(cudaHostAlloc(&hs, sizeof(*hs), cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&dhs, hs, 0), cudaSuccess);
	if (!hs || !dhs)
		return;
	memset(hs, 0, sizeof(*hs));
	v = hs;
	talk<<<1, 256>>>(dhs, 20000 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	t0 = now_s();
	while (!(seen = v->flag == 1) && now_s() - t0 < 20)
		sched_yield();
	qt_check(seen, "the CPU saw the running kernel's flag in mapped memory");
	__sync_synchronize();
	for (int i = 0; i < 256; i++)
		bad += v->data[i] != i * 7 + 1;
	qt_check(seen && bad == 0, "the data the kernel wrote before its flag is visible with it");
	qt_check(v->result == 0, "the kernel is still waiting for the CPU's answer");
	v->cpu_value = 4242;
	__sync_synchronize();
	v->ack = 1;
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(v->flag == 2 && v->result == 4243,
		 "the kernel saw the CPU's answer and the value written before it (result %d)", v->result);
	EXPECT(cudaFreeHost(hs), cudaSuccess);
}

/* Copies out of mapped memory wait for the kernel before them in stream order. */
static void ordering(void)
{
	unsigned *a = NULL, *b = NULL, *da = NULL, *h = (unsigned *)malloc(N * sizeof(unsigned));
	cudaStream_t s;
	long long bad = -1;

	EXPECT(cudaHostAlloc(&a, N * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaHostAlloc(&b, N * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&da, a, 0), cudaSuccess);
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	if (!a || !b || !da)
		return;
	for (int i = 0; i < N; i++)
		a[i] = val(i, 10);
	memset(h, 0, N * sizeof(unsigned));
	madd<<<64, 256>>>(da, N, 3, 1, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(h, a, N * sizeof(unsigned), cudaMemcpyDefault), cudaSuccess);
	for (int i = 0; i < N && bad < 0; i++)
		if (h[i] != val(i, 10) * 3 + 1)
			bad = i;
	qt_check(bad < 0,
		 "cudaMemcpy from mapped memory right after a slow kernel writing it copies the kernel's "
		 "result (first bad %lld)",
		 bad);

	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	for (int i = 0; i < N; i++)
		a[i] = val(i, 11), b[i] = 0;
	madd<<<64, 256, 0, s>>>(da, N, 5, 2, 20 * MS);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaMemcpyAsync(b, a, N * sizeof(unsigned), cudaMemcpyHostToHost, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	bad = -1;
	for (int i = 0; i < N && bad < 0; i++)
		if (b[i] != val(i, 11) * 5 + 2)
			bad = i;
	qt_check(bad < 0,
		 "cudaMemcpyAsync (HostToHost) on a slow kernel's stream copies the kernel's result "
		 "(first bad %lld)",
		 bad);
	OK(cudaStreamDestroy(s));
	EXPECT(cudaFreeHost(a), cudaSuccess);
	EXPECT(cudaFreeHost(b), cudaSuccess);
	free(h);
}

/* Unified addressing: the host pointer of cudaHostAlloc / cudaMallocHost
 * memory is its device pointer, usable as is in a kernel. */
static void host_pointers(void)
{
	unsigned *a = NULL, *b = NULL;
	long long bad = -1;

	EXPECT(cudaHostAlloc(&a, N * sizeof(unsigned), cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaMallocHost(&b, N * sizeof(unsigned)), cudaSuccess);
	if (!a || !b)
		return;
	for (int i = 0; i < N; i++)
		a[i] = val(i, 8), b[i] = val(i, 9);
	madd<<<64, 256>>>(a, N, 3, 3);
	madd<<<64, 256>>>(b, N, 9, 1);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	for (int i = 0; i < N && bad < 0; i++)
		if (a[i] != val(i, 8) * 3 + 3 || b[i] != val(i, 9) * 9 + 1)
			bad = i;
	qt_check(bad < 0, "host pointers of cudaHostAlloc(Mapped) and cudaMallocHost memory work in a kernel");
	EXPECT(cudaFreeHost(a), cudaSuccess);
	EXPECT(cudaFreeHost(b), cudaSuccess);
}

int main(void)
{
	qt_begin("mapped");
	EXPECT(cudaSetDeviceFlags(cudaDeviceMapHost), cudaSuccess);
	host_alloc();
	registered();
	flags();
	ordering();
	host_pointers();
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	return qt_end();
}
