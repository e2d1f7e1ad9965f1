/* SPDX-License-Identifier: MIT */
/*
 * dll_refusals: what nvcuda.dll answers, over a region, for what cannot
 * work on Windows yet (docs/windows.md): shareable handles as POSIX fds
 * (VMM allocations and memory pools), and registered host memory, which
 * stays where it is (its copies are staged). Prints each
 * call's CUresult by name; test/windows/dll-wine.test.ts checks them and
 * that the program ends (no crash) with the context still usable.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>

static const char *nm(CUresult r)
{
	const char *s = "?";

	cuGetErrorName(r, &s);
	return s;
}

#define SAY(call) printf("%s -> %s\n", #call, nm(call))

static void shareable_handles(void)
{
	CUmemAllocationProp p = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				  .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 },
				  .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR };
	CUmemPoolProps pp = { .allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
			      .handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
			      .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0 } };
	CUmemGenericAllocationHandle g = 0;
	CUmemoryPool pool = NULL;
	size_t gran = 0;
	int fd = -1;

	SAY(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	SAY(cuMemCreate(&g, gran, &p, 0));
	SAY(cuMemExportToShareableHandle(&fd, g, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	SAY(cuMemImportFromShareableHandle(&g, (void *)(intptr_t)3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	SAY(cuMemRelease(g));
	SAY(cuMemPoolCreate(&pool, &pp));
	SAY(cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	SAY(cuMemPoolImportFromShareableHandle(&pool, (void *)(intptr_t)3, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					       0));
	SAY(cuMemPoolDestroy(pool));
}

static void host_memory(void)
{
	static char buf[1 << 16];
	CUdeviceptr d = 0;

	/* Registered memory stays where it is: its copies are staged. */
	SAY(cuMemHostRegister(buf, sizeof(buf), 0));
	SAY(cuMemAlloc(&d, sizeof(buf)));
	SAY(cuMemcpyHtoD(d, buf, sizeof(buf)));
	SAY(cuMemHostUnregister(buf));
	SAY(cuMemFree(d));
}

int main(void)
{
	CUcontext c = NULL;
	CUdevice dev = 0;

	SAY(cuInit(0));
	SAY(cuDeviceGet(&dev, 0));
	SAY(cuCtxCreate(&c, NULL, 0, dev));
	shareable_handles();
	host_memory();
	SAY(cuCtxDestroy(c));
	printf("END\n");
	return 0;
}
