// Two kernels and a device function (not a kernel: never listed), for
// kernel-names.test.ts.
__device__ __noinline__ float twice(float x)
{
	return x * 2;
}
extern "C" __global__ void kern_a(float *p)
{
	p[0] = twice(p[1]);
}
__global__ void kern_b(int *p)
{
	p[0] = 1;
}
