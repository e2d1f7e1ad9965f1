// SPDX-License-Identifier: MIT
// fault: a kernel that writes to an illegal address. The launch itself
// succeeds; the error (cudaErrorIllegalAddress) surfaces at the next
// synchronizing call and is sticky: every later call returns it (and sets
// it as the last error again; cudaGetLastError clears it like any other).
// After cudaDeviceReset natively (H100, driver 580) the process gets
// cudaErrorDevicesUnavailable, so nothing after the reset is checked.
#include "qctest.h"

__global__ void write_to(int *p, int v)
{
	*p = v;
}

int main(void)
{
	int *d = NULL, h = 0, *d2 = NULL;

	qt_begin("fault");
	EXPECT(cudaMalloc(&d, sizeof(int)), cudaSuccess);
	write_to<<<1, 1>>>(d, 5);
	FIRST_KERNEL_USE(cudaGetLastError());
	EXPECT(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == 5, "a good launch wrote 5");

	write_to<<<1, 1>>>((int *)0x10, 1);
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
	EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
	/* cudaGetLastError clears it like any error; the calls stay failing. */
	EXPECT(cudaGetLastError(), cudaSuccess);
	EXPECT(cudaPeekAtLastError(), cudaSuccess);
	EXPECT(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaErrorIllegalAddress);
	EXPECT(cudaMalloc(&d2, 16), cudaErrorIllegalAddress);
	write_to<<<1, 1>>>(d, 6);
	EXPECT(cudaGetLastError(), cudaErrorIllegalAddress);
	EXPECT(cudaDeviceSynchronize(), cudaErrorIllegalAddress);

	EXPECT(cudaDeviceReset(), cudaSuccess);
	return qt_end();
}
