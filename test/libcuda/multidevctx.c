/* SPDX-License-Identifier: MIT */
/*
 * multidevctx: the driver API's view of device 0's memory, stream and event
 * while device 1's primary context is current (issue 45), as CUDA answers
 * it: cuPointerGetAttribute(s) name device 0 and its context (ordinal,
 * context, memory type, range, buffer id, mapped), cuStreamGetCtx gives
 * device 0's context, and an event recorded on device 0's stream records,
 * synchronizes and answers there. With one device the same on device 0.
 */
#include <string.h>

#include "check.h"

#define N 4096

int main(void)
{
	CUcontext c0 = primary_context(), c1 = c0, got = NULL;
	CUdevice d1 = 0;
	CUdeviceptr a = 0, start = 0;
	CUstream s0 = NULL;
	CUevent e0 = NULL;
	int count = 0, ordinal = -1;
	unsigned int type = 0, mapped = 0;
	size_t size = 0;
	unsigned long long id0 = 0, id1 = 0;
	unsigned char in[N], out[N];

	OK(cuDeviceGetCount(&count));
	OK(cuMemAlloc(&a, N));
	OK(cuStreamCreate(&s0, CU_STREAM_NON_BLOCKING));
	OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
	if (count > 1) {
		OK(cuDeviceGet(&d1, 1));
		OK(cuDevicePrimaryCtxRetain(&c1, d1));
	}
	OK(cuCtxSetCurrent(c1));

	OK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, a + 8));
	check(ordinal == 0, "device %d current: device 0's memory says device 0 (%d)", count > 1, ordinal);
	OK(cuPointerGetAttribute(&got, CU_POINTER_ATTRIBUTE_CONTEXT, a + 8));
	check(got == c0, "and device 0's context");
	OK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 8));
	check(type == CU_MEMORYTYPE_DEVICE, "device memory (%u)", type);
	{
		CUpointer_attribute which[] = { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,   CU_POINTER_ATTRIBUTE_CONTEXT,
						CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
						CU_POINTER_ATTRIBUTE_BUFFER_ID,	       CU_POINTER_ATTRIBUTE_MAPPED };
		void *data[] = { &ordinal, &got, &start, &size, &id1, &mapped };

		ordinal = -1;
		got = NULL;
		OK(cuPointerGetAttributes(6, which, data, a + 8));
		check(ordinal == 0 && got == c0, "cuPointerGetAttributes: device 0 and its context (%d)", ordinal);
		check(start == a && size == N && mapped == 1, "the allocation's range, mapped");
	}
	OK(cuCtxSetCurrent(c0));
	OK(cuPointerGetAttribute(&id0, CU_POINTER_ATTRIBUTE_BUFFER_ID, a));
	OK(cuCtxSetCurrent(c1));
	check(id0 == id1, "the same buffer id whichever device is current");

	OK(cuStreamGetCtx(s0, &got));
	check(got == c0, "cuStreamGetCtx: device 0's stream is device 0's context");
	memset(in, 0x5a, N);
	OK(cuMemcpyHtoDAsync(a, in, N, s0));
	OK(cuMemsetD8Async(a + 100, 0xc3, 10, s0));
	OK(cuEventRecord(e0, s0));
	OK(cuEventSynchronize(e0));
	OK(cuEventQuery(e0));
	OK(cuStreamSynchronize(s0));
	OK(cuMemcpyDtoH(out, a, N));
	check(out[99] == 0x5a && out[100] == 0xc3 && out[109] == 0xc3 && out[110] == 0x5a,
	      "a copy and a memset on device 0's stream landed in device 0's memory");
	OK(cuCtxGetCurrent(&got));
	check(got == c1, "device 1's context is still current");

	OK(cuCtxSetCurrent(c0));
	OK(cuEventDestroy(e0));
	OK(cuStreamDestroy(s0));
	OK(cuMemFree(a));
	return finish("multidevctx");
}
