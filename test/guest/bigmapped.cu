// SPDX-License-Identifier: MIT
// bigmapped: managed and mapped memory far above 4 MiB (scattered guest
// pages, which the backend maps as one range for the GPU): cudaMallocManaged,
// cudaHostAlloc(Mapped) of 48-128 MiB and cudaHostRegister(Mapped) of 6 MiB
// (scattered user pages: up to QCUDA_MAX_EXTENTS of them) get device
// pointers; on a GPU, kernels read and write them while the CPU sees the same
// bytes, and CPU threads and a kernel add to the same counters with
// system-scope atomics at once, the sums exact.
//   bigmapped bench: one JSON line: registration cost and a kernel's read
//   bandwidth over managed memory (what test/gpu/run.sh compares with native).
#include <pthread.h>

#include <chrono>

#include "qctest.h"

#define MiB (1ull << 20)

__global__ void fill(unsigned int *p, size_t n, unsigned int seed)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		p[i] = (unsigned int)i * 2654435761u + seed;
}

__global__ void sum(const unsigned int *p, size_t n, unsigned long long *out)
{
	unsigned long long s = 0;

	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
		s += p[i];
	atomicAdd(out, s);
}

__global__ void count_up(unsigned int *counters, int ncounters, int rounds)
{
	for (int r = 0; r < rounds; r++)
		atomicAdd_system(&counters[(threadIdx.x + r) % ncounters], 1u);
}

struct cpu_adder {
	unsigned int *counters;
	int ncounters, rounds;
};

static void *cpu_add(void *arg)
{
	struct cpu_adder *a = (struct cpu_adder *)arg;

	for (int r = 0; r < a->rounds; r++)
		__atomic_fetch_add(&a->counters[r % a->ncounters], 1u, __ATOMIC_SEQ_CST);
	return NULL;
}

static unsigned long long expected_sum(size_t n, unsigned int seed)
{
	unsigned long long s = 0;

	for (size_t i = 0; i < n; i++)
		s += (unsigned int)((unsigned int)i * 2654435761u + seed);
	return s;
}

/* A kernel fills p, the CPU checks every word; the CPU rewrites it, a kernel sums it. */
static bool round_trip(unsigned int *dev, unsigned int *host, size_t n, unsigned int seed, const char *what)
{
	unsigned long long *d_sum, got = 0;
	bool same = true;

	fill<<<1024, 256>>>(dev, n, seed);
	if (!FIRST_KERNEL_USE(cudaGetLastError()))
		return false;
	OK(cudaDeviceSynchronize());
	for (size_t i = 0; i < n && same; i++)
		same = host[i] == (unsigned int)i * 2654435761u + seed;
	qt_check(same, "%s: what a kernel wrote, the CPU reads (%llu MiB)", what, (unsigned long long)(n * 4 / MiB));
	for (size_t i = 0; i < n; i++)
		host[i] = (unsigned int)i * 2654435761u + seed + 1;
	OK(cudaMallocManaged(&d_sum, sizeof(*d_sum)));
	*d_sum = 0;
	sum<<<1024, 256>>>(dev, n, d_sum);
	OK(cudaDeviceSynchronize());
	got = *d_sum;
	qt_check(got == expected_sum(n, seed + 1), "%s: what the CPU wrote, a kernel reads", what);
	OK(cudaFree(d_sum));
	return true;
}

/* System-scope atomics on memory the GPU reaches over PCIe are atomic with
 * the CPU's only where the platform has host-native atomics; natively,
 * managed memory migrates instead (qcuda's is guest memory mapped for the
 * GPU, so it needs them): checked only where the device says it has them. */
static void atomics(unsigned int *counters)
{
	enum { NC = 64, THREADS = 4, CPU_ROUNDS = 200000, GPU_ROUNDS = 2000 };
	pthread_t t[THREADS];
	struct cpu_adder a = { counters, NC, CPU_ROUNDS };
	unsigned long long total = 0;

	int native_atomics = 0;

	OK(cudaDeviceGetAttribute(&native_atomics, cudaDevAttrHostNativeAtomicSupported, 0));
	if (!native_atomics) {
		printf("info: no host-native atomics on this platform: CPU/GPU atomics at once not checked\n");
		return;
	}
	memset(counters, 0, NC * sizeof(*counters));
	count_up<<<64, 128>>>(counters, NC, GPU_ROUNDS);
	OK(cudaGetLastError());
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, cpu_add, &a);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	OK(cudaDeviceSynchronize());
	for (int i = 0; i < NC; i++)
		total += counters[i];
	qt_check(total == (unsigned long long)THREADS * CPU_ROUNDS + 64ull * 128 * GPU_ROUNDS,
		 "CPU threads and a kernel adding at once with system-scope atomics: the sum is exact");
}

static double now(void)
{
	return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

static int bench(void)
{
	const size_t bytes = 1024 * MiB, n = bytes / 4;
	unsigned int *p;
	unsigned long long *d_sum;
	double t0, t_alloc, t_first, best = 1e9;

	OK(cudaFree(0));
	t0 = now();
	OK(cudaMallocManaged(&p, bytes));
	t_alloc = now() - t0;
	OK(cudaMalloc(&d_sum, sizeof(*d_sum)));
	t0 = now();
	fill<<<1024, 256>>>(p, n, 1);
	OK(cudaDeviceSynchronize());
	t_first = now() - t0;
	for (int i = 0; i < 5; i++) {
		t0 = now();
		sum<<<1024, 256>>>(p, n, d_sum);
		OK(cudaDeviceSynchronize());
		best = std::min(best, now() - t0);
	}
	{
		int native_atomics = -1;

		cudaDeviceGetAttribute(&native_atomics, cudaDevAttrHostNativeAtomicSupported, 0);
		printf("{\"bytes\":%zu,\"alloc_ms\":%.3f,\"first_kernel_ms\":%.3f,\"read_gbps\":%.2f,"
		       "\"host_native_atomics\":%d}\n",
		       bytes, t_alloc * 1e3, t_first * 1e3, bytes / best / 1e9, native_atomics);
	}
	OK(cudaFree(p));
	OK(cudaFree(d_sum));
	return 0;
}

int main(int argc, char **argv)
{
	const size_t managed_bytes = 128 * MiB, pinned_bytes = 48 * MiB, reg_bytes = 6 * MiB;
	unsigned int *m, *h, *hd, *r, *rd;
	void *raw;

	if (argc > 1 && !strcmp(argv[1], "bench"))
		return bench();
	qt_begin("bigmapped");
	EXPECT(cudaMallocManaged(&m, managed_bytes), cudaSuccess);
	EXPECT(cudaHostAlloc(&h, pinned_bytes, cudaHostAllocMapped), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&hd, h, 0), cudaSuccess);
	qt_check(hd != NULL, "a %llu MiB mapped allocation has a device pointer", pinned_bytes / MiB);
	raw = malloc(reg_bytes + 4096);
	r = (unsigned int *)((char *)raw + 100 * 4); /* not page aligned */
	EXPECT(cudaHostRegister(r, reg_bytes, cudaHostRegisterMapped), cudaSuccess);
	EXPECT(cudaHostGetDevicePointer((void **)&rd, r, 0), cudaSuccess);
	qt_check(rd != NULL && ((uintptr_t)rd & 4095) == ((uintptr_t)r & 4095),
		 "a %llu MiB registered range has a device pointer, at the same offset in its page", reg_bytes / MiB);
	/* The CPU side works on any provider. */
	for (size_t i = 0; i < managed_bytes / 4; i += 1024)
		m[i] = (unsigned int)i;
	qt_check(m[managed_bytes / 4 - 1024] == managed_bytes / 4 - 1024, "managed memory is CPU memory");

	if (round_trip(m, m, managed_bytes / 4, 7, "managed")) {
		round_trip(hd, h, pinned_bytes / 4, 11, "cudaHostAlloc(Mapped)");
		round_trip(rd, r, reg_bytes / 4, 13, "cudaHostRegister(Mapped)");
		atomics(m + 12345);
	}
	EXPECT(cudaHostUnregister(r), cudaSuccess);
	free(raw);
	EXPECT(cudaFreeHost(h), cudaSuccess);
	EXPECT(cudaFree(m), cudaSuccess);
	return qt_end();
}
