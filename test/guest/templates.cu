// SPDX-License-Identifier: MIT
// templates: instantiations of template kernels (types, non-type and functor
// parameters) are distinct kernels with mangled names; launched with <<<>>>,
// cudaLaunchKernel and cudaLaunchKernelEx (no attributes), on a stream.
#include "qctest.h"

template <typename T, int SCALE> __global__ void axpb(T *x, T b, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] = x[i] * (T)SCALE + b;
}

struct Square {
	__device__ int operator()(int v) const
	{
		return v * v;
	}
};
struct Negate {
	__device__ int operator()(int v) const
	{
		return -v;
	}
};

template <typename F> __global__ void apply(int *x, int n, F f)
{
	for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
		x[i] = f(x[i]);
}

template <typename T> static bool run_axpb(const char *type, T b)
{
	const int n = 1000;
	T h[n], *d;
	bool ok;

	for (int i = 0; i < n; i++)
		h[i] = (T)(i % 50);
	OK(cudaMalloc(&d, sizeof(h)));
	OK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
	axpb<T, 3><<<(n + 127) / 128, 128>>>(d, b, n);
	OK(cudaGetLastError());
	axpb<T, 2><<<(n + 127) / 128, 128>>>(d, b, n);
	OK(cudaGetLastError());
	OK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
	ok = true;
	for (int i = 0; i < n; i++)
		ok &= h[i] == (T)((T)((T)(i % 50) * (T)3 + b) * (T)2 + b);
	OK(cudaFree(d));
	return qt_check(ok, "axpb<%s, 3> then axpb<%s, 2>", type, type);
}

int main(void)
{
	const int n = 4096;
	int h[n], *d;
	cudaStream_t s;

	qt_begin("templates");
	EXPECT(cudaMalloc(&d, sizeof(h)), cudaSuccess);
	for (int i = 0; i < n; i++)
		h[i] = i - 2000;
	EXPECT(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice), cudaSuccess);
	apply<<<4, 64>>>(d, n, Negate());
	FIRST_KERNEL_USE(cudaGetLastError());

	run_axpb<int>("int", 7);
	run_axpb<float>("float", 0.5f);
	run_axpb<double>("double", -1.25);
	run_axpb<unsigned char>("unsigned char", 1);

	EXPECT(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
	{
		Square sq;
		int nn = n;
		void *args[] = { &d, &nn, &sq };
		EXPECT(cudaLaunchKernel((const void *)apply<Square>, dim3(8), dim3(32), args, 0, s), cudaSuccess);
	}
	{
		cudaLaunchConfig_t cfg = {};
		cfg.gridDim = dim3(2);
		cfg.blockDim = dim3(128);
		cfg.stream = s;
		EXPECT(cudaLaunchKernelEx(&cfg, apply<Negate>, d, n, Negate()), cudaSuccess);
	}
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	EXPECT(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
	{
		bool ok = true;
		for (int i = 0; i < n; i++)
			ok &= h[i] == -((i - 2000) * (i - 2000));
		qt_check(ok, "apply<Negate>, apply<Square> (cudaLaunchKernel), apply<Negate> (cudaLaunchKernelEx) on a "
			     "stream");
	}
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
