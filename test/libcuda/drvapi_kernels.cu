// SPDX-License-Identifier: MIT
// drvapi's cubin (nvcc -cubin -arch=sm_90, installed beside drvapi as
// drvapi.cubin): SASS loaded by the driver API from a file and from memory.
extern "C" __global__ void scale(float *x, float a, unsigned int n)
{
	unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		x[i] *= a;
}
