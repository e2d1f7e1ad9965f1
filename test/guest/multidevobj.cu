// SPDX-License-Identifier: MIT
// multidevobj: device 0's memory, stream and event used while another
// device is current (issue 45), as CUDA has them: the pointer's attributes
// name device 0, the stream says device 0, a copy and a memset enqueued on
// it land in device 0's memory (the memset needs no peer access: it runs on
// the stream's device), and an event recorded on it records, synchronizes
// and answers queries there. With one device the same calls on device 0.
#include "qctest.h"

#define N 4096

static unsigned char src[N], out[N], want[N];

int main(void)
{
	int count = 0, other, dev = -1;
	unsigned char *a = NULL;
	cudaStream_t s0 = NULL;
	cudaEvent_t e0 = NULL;
	struct cudaPointerAttributes pa;

	qt_begin("multidevobj");
	EXPECT(cudaGetDeviceCount(&count), cudaSuccess);
	other = count > 1 ? 1 : 0;
	EXPECT(cudaSetDevice(0), cudaSuccess);
	EXPECT(cudaMalloc((void **)&a, N), cudaSuccess);
	EXPECT(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking), cudaSuccess);
	EXPECT(cudaEventCreate(&e0), cudaSuccess);
	EXPECT(cudaSetDevice(other), cudaSuccess);

	memset(&pa, 0xff, sizeof(pa));
	EXPECT(cudaPointerGetAttributes(&pa, a + 100), cudaSuccess);
	qt_check(pa.type == cudaMemoryTypeDevice && pa.device == 0 && pa.devicePointer == a + 100,
		 "device %d current: device 0's memory says device 0 (type %d, device %d)", other, (int)pa.type,
		 pa.device);
	EXPECT(cudaStreamGetDevice(s0, &dev), cudaSuccess);
	qt_check(dev == 0, "and its stream says device 0 (%d)", dev);

	qt_fill(src, N, 45);
	memcpy(want, src, N);
	memset(want + 16, 0xab, 32);
	EXPECT(cudaMemcpyAsync(a, src, N, cudaMemcpyHostToDevice, s0), cudaSuccess);
	EXPECT(cudaMemsetAsync(a + 16, 0xab, 32, s0), cudaSuccess); /* on the stream's device: no peer access needed */
	EXPECT(cudaEventRecord(e0, s0), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(s0, e0, 0), cudaSuccess);
	EXPECT(cudaEventSynchronize(e0), cudaSuccess);
	EXPECT(cudaEventQuery(e0), cudaSuccess);
	EXPECT(cudaStreamQuery(s0), cudaSuccess);
	EXPECT(cudaMemcpyAsync(out, a, N, cudaMemcpyDeviceToHost, s0), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s0), cudaSuccess);
	qt_check(qt_diff(out, want, N) < 0, "the copy and memset on device 0's stream landed in device 0's memory");
	EXPECT(cudaGetDevice(&dev), cudaSuccess);
	qt_check(dev == other, "device %d is still current (%d)", other, dev);

	EXPECT(cudaEventDestroy(e0), cudaSuccess);
	EXPECT(cudaStreamDestroy(s0), cudaSuccess);
	EXPECT(cudaFree(a), cudaSuccess);
	return qt_end();
}
