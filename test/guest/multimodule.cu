// SPDX-License-Identifier: MIT
// multimodule: a program of three translation units compiled separately
// (this one, parts/multimodule_a.cu and parts/multimodule_b.cu; no -rdc), so
// three fat binaries and three modules are registered. Every module has a
// static kernel `scale`, a __device__ `counter` and a __constant__ `coef`
// (static in the parts: the same mangled names in three modules), a kernel
// `tag` in an anonymous namespace (the parts), and `fill` in a namespace of
// its own. Checks: each kernel uses its own module's constants and counter
// (results and counters differ per module); kernels of one TU launched from
// another through function pointers, with <<<>>> and cudaLaunchKernel, run
// the right module's code with that module's variables; the same template
// kernel instantiated in all three TUs (one host stub, three registrations)
// runs from each; the variables have distinct device addresses;
// cudaGetFuncBySymbol / cudaFuncGetAttributes of pointers from other TUs.
#include "qctest.h"
#include "parts/multimodule.h"

#define N 10000

__device__ unsigned counter;
__constant__ unsigned coef[4];

static __global__ void scale(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n) {
		p[i] = p[i] * 2 + coef[i % 4];
		atomicAdd(&counter, 1u);
	}
}

namespace mm_main
{
__global__ void fill(unsigned *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = (unsigned)i * 30 + 3;
}
} // namespace mm_main

static unsigned h[N], g[N];

static unsigned init(int i)
{
	return (unsigned)i * 2654435761u;
}

static void upload(unsigned *d)
{
	for (int i = 0; i < N; i++)
		h[i] = init(i);
	OK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
}

/* g = d; index of the first g[i] != want, or -1. */
#define FIRST_BAD(d, want)                                               \
	({                                                               \
		long long _bad = -1;                                     \
		OK(cudaMemcpy(g, d, sizeof(g), cudaMemcpyDeviceToHost)); \
		for (int i = 0; i < N; i++)                              \
			if (g[i] != (unsigned)(want)) {                  \
				_bad = i;                                \
				break;                                   \
			}                                                \
		_bad;                                                    \
	})

static unsigned read_counter(void)
{
	unsigned v = ~0u;

	OK(cudaMemcpyFromSymbol(&v, counter, sizeof(v)));
	return v;
}

int main(void)
{
	const unsigned cmain[4] = { 1, 2, 3, 4 }, zero = 0;
	unsigned *d = NULL, va = ~0u, vb = ~0u, vm = ~0u;
	long long bad;

	qt_begin("multimodule");
	EXPECT(cudaMalloc(&d, sizeof(h)), cudaSuccess);

	/* This TU's module. */
	upload(d);
	FIRST_KERNEL_USE(cudaMemcpyToSymbol(coef, cmain, sizeof(cmain)));
	EXPECT(cudaMemcpyToSymbol(counter, &zero, sizeof(zero)), cudaSuccess);
	scale<<<(N + 255) / 256, 256>>>(d, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	bad = FIRST_BAD(d, init(i) * 2 + cmain[i % 4]);
	qt_check(bad < 0, "main TU: static scale with its __constant__ coef (first bad %lld)", bad);

	/* The parts' modules: same names, their own code and variables. */
	EXPECT(part_a_init(), cudaSuccess);
	EXPECT(part_b_init(), cudaSuccess);
	upload(d);
	EXPECT(part_a_scale(d, N, 0), cudaSuccess);
	bad = FIRST_BAD(d, init(i) * 3 + 11 + i % 4);
	qt_check(bad < 0, "part A: its static scale with its own coef (first bad %lld)", bad);
	upload(d);
	EXPECT(part_b_scale(d, N, 0), cudaSuccess);
	EXPECT(part_b_scale(d, N, 0), cudaSuccess);
	bad = FIRST_BAD(d, (init(i) * 5 + 21 + i % 4) * 5 + 21 + i % 4);
	qt_check(bad < 0, "part B: its static scale with its own coef, twice (first bad %lld)", bad);
	EXPECT(part_a_counter(&va), cudaSuccess);
	EXPECT(part_b_counter(&vb), cudaSuccess);
	vm = read_counter();
	qt_check(vm == N && va == N && vb == 2 * N,
		 "each module's counter counts only its own scale's threads (main %u, A %u, B %u)", vm, va, vb);

	/* Kernels of the parts launched here through pointers. */
	{
		mm_kernel a_fill = part_a_fill_ptr(), b_fill = part_b_fill_ptr(), a_scale = part_a_scale_ptr();
		mm_kernel a_tag = part_a_tag_ptr(), b_tag = part_b_tag_ptr(), main_fill = mm_main::fill;
		int n = N;
		void *args[] = { &d, &n };
		cudaFunction_t f = NULL;
		struct cudaFuncAttributes fa;

		qt_check(a_fill != b_fill && a_fill != main_fill && a_scale != (mm_kernel)scale && a_tag != b_tag,
			 "the kernels' host stubs are distinct functions");
		a_fill<<<(N + 255) / 256, 256>>>(d, N);
		EXPECT(cudaGetLastError(), cudaSuccess);
		bad = FIRST_BAD(d, (unsigned)i * 10 + 1);
		qt_check(bad < 0, "part A's mm_a::fill through a pointer with <<<>>> (first bad %lld)", bad);
		EXPECT(cudaLaunchKernel((const void *)b_fill, dim3((N + 127) / 128), dim3(128), args, 0, 0),
		       cudaSuccess);
		bad = FIRST_BAD(d, (unsigned)i * 20 + 2);
		qt_check(bad < 0, "part B's mm_b::fill through a pointer with cudaLaunchKernel (first bad %lld)", bad);
		main_fill<<<(N + 255) / 256, 256>>>(d, N);
		EXPECT(cudaGetLastError(), cudaSuccess);
		bad = FIRST_BAD(d, (unsigned)i * 30 + 3);
		qt_check(bad < 0, "this TU's mm_main::fill through a pointer (first bad %lld)", bad);

		a_tag<<<(N + 255) / 256, 256>>>(d, N);
		EXPECT(cudaLaunchKernel((const void *)b_tag, dim3((N + 255) / 256), dim3(256), args, 0, 0),
		       cudaSuccess);
		bad = FIRST_BAD(d, ((unsigned)i * 30 + 3) ^ 0xa0a0u ^ 0x0b0bu);
		qt_check(bad < 0, "the anonymous-namespace tag kernels of A and B, through pointers (first bad %lld)",
			 bad);

		/* A's static scale from here: A's coef and A's counter. */
		upload(d);
		EXPECT(cudaLaunchKernel((const void *)a_scale, dim3((N + 255) / 256), dim3(256), args, 0, 0),
		       cudaSuccess);
		bad = FIRST_BAD(d, init(i) * 3 + 11 + i % 4);
		qt_check(bad < 0,
			 "part A's static scale launched here through a pointer uses A's coef (first bad %lld)", bad);
		EXPECT(part_a_counter(&va), cudaSuccess);
		EXPECT(part_b_counter(&vb), cudaSuccess);
		vm = read_counter();
		qt_check(va == 2 * N && vb == 2 * N && vm == N,
			 "... and counts in A's counter only (main %u, A %u, B %u)", vm, va, vb);
		EXPECT(cudaGetFuncBySymbol(&f, (const void *)b_fill), cudaSuccess);
		EXPECT(cudaGetFuncBySymbol(&f, (const void *)a_tag), cudaSuccess);
		memset(&fa, 0, sizeof(fa));
		EXPECT(cudaFuncGetAttributes(&fa, (const void *)a_scale), cudaSuccess);
		qt_check(fa.maxThreadsPerBlock > 0, "cudaFuncGetAttributes of part A's static scale through a pointer");
	}

	/* One template instantiation registered by three modules. */
	upload(d);
	add_k<7><<<(N + 255) / 256, 256>>>(d, N);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(part_a_add7(d, N), cudaSuccess);
	EXPECT(part_b_add7(d, N), cudaSuccess);
	bad = FIRST_BAD(d, init(i) + 21);
	qt_check(bad < 0, "add_k<7> launched from all three TUs adds 21 (first bad %lld)", bad);

	/* Three variables called counter, at three addresses. */
	{
		void *pm = NULL, *pa = NULL, *pb = NULL;

		EXPECT(cudaGetSymbolAddress(&pm, counter), cudaSuccess);
		EXPECT(part_a_counter_address(&pa), cudaSuccess);
		EXPECT(part_b_counter_address(&pb), cudaSuccess);
		qt_check(pm && pa && pb && pm != pa && pm != pb && pa != pb,
			 "the three modules' counter variables have distinct device addresses");
	}

	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
