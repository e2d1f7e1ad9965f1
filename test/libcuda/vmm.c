/* SPDX-License-Identifier: MIT */
/*
 * vmm: virtual memory management through the driver API, as XLA's allocator
 * and PyTorch's expandable segments use it (test/gpu/probes/vmm_probe.cu's
 * sequence, without its kernel, so that it runs on the emu provider too):
 * the granularity, a reservation, physical memory mapped in two pieces one
 * after the other, access, memsets and copies across both pieces and to
 * cuMemAlloc memory, the handle's properties and a retained handle, unmap,
 * release, free; a POSIX fd handle requested, not exported; pinned host
 * memory's granularity answered, its creation refused (NCCL's probe).
 * Prints ok/FAIL lines and ends with PASS or FAIL.
 */
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int main(void)
{
	CUdevice dev;
	CUcontext ctx;
	CUmemAllocationProp prop = { 0 }, got = { 0 };
	CUmemAccessDesc acc = { 0 };
	CUmemGenericAllocationHandle h[2] = { 0, 0 }, h2 = 0;
	CUdeviceptr va = 0, plain = 0;
	unsigned long long flags = 99;
	unsigned int memtype = 0;
	size_t gran = 0, size, n32;
	unsigned int *buf;

	setvbuf(stdout, NULL, _IOLBF, 0);
	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuDevicePrimaryCtxRetain(&ctx, dev));
	OK(cuCtxSetCurrent(ctx));

	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev;
	OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	check(gran == 2u << 20, "granularity %zu", gran);
	OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
	check(gran == 2u << 20, "recommended granularity %zu", gran);
	if (failed)
		return 1;

	size = 2 * gran; /* each piece */
	n32 = 2 * size / 4; /* both pieces, as 32-bit words */
	OK(cuMemAddressReserve(&va, 4 * size, 0, 0, 0));
	check(va != 0 && va % gran == 0, "the reservation is aligned");
	OK(cuMemCreate(&h[0], size, &prop, 0));
	OK(cuMemCreate(&h[1], size, &prop, 0));
	EXPECT(cuMemMap(va, size + 4096, 0, h[0], 0),
	       CUDA_ERROR_NOT_SUPPORTED); /* past the allocation: as the driver answers */
	OK(cuMemMap(va, size, 0, h[0], 0));
	OK(cuMemMap(va + size, size, 0, h[1], 0));
	acc.location = prop.location;
	acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	OK(cuMemSetAccess(va, 2 * size, &acc, 1));
	OK(cuMemGetAccess(&flags, &prop.location, va + size + 64));
	check(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access %llu", flags);
	OK(cuPointerGetAttribute(&memtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va));
	check(memtype == CU_MEMORYTYPE_DEVICE, "memory type %u", memtype);

	/* Memsets and copies over both pieces, and one that crosses between them. */
	buf = malloc(2 * size);
	OK(cuMemsetD32(va, 1, n32));
	for (size_t i = 0; i < n32; i++)
		buf[i] = (unsigned int)i;
	OK(cuMemcpyHtoD(va + 4096, buf, 2 * size - 8192));
	memset(buf, 0, 2 * size);
	OK(cuMemcpyDtoH(buf, va, 2 * size));
	{
		int same = buf[0] == 1 && buf[1023] == 1 && buf[n32 - 1] == 1;

		for (size_t i = 1024; same && i < n32 - 1024; i++)
			same = buf[i] == i - 1024;
		check(same, "memset and copy across the two pieces come back");
	}
	OK(cuMemAlloc(&plain, 8192));
	OK(cuMemcpyDtoD(plain, va + size - 4096, 8192));
	OK(cuMemcpyDtoH(buf, plain, 8192));
	check(buf[0] == (size - 4096) / 4 - 1024 && buf[2047] == (size + 4096) / 4 - 1 - 1024,
	      "a device copy out of both pieces: %u %u", buf[0], buf[2047]);

	OK(cuMemGetAllocationPropertiesFromHandle(&got, h[1]));
	check(got.type == CU_MEM_ALLOCATION_TYPE_PINNED && got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		      got.location.id == dev,
	      "properties type %d location %d/%d", (int)got.type, (int)got.location.type, got.location.id);
	OK(cuMemRetainAllocationHandle(&h2, (void *)(uintptr_t)(va + size + 100)));
	check(h2 == h[1], "the retained handle is the second piece's");
	OK(cuMemRelease(h2));

	/* Released while mapped: the memory stays until unmapped. */
	OK(cuMemRelease(h[0]));
	OK(cuMemcpyDtoH(buf, va, 16));
	check(buf[0] == 1, "released but mapped memory is still there");
	OK(cuMemUnmap(va, size));
	OK(cuMemUnmap(va + size, size));
	OK(cuMemRelease(h[1]));
	OK(cuMemAddressFree(va, 4 * size));

	/* A POSIX fd handle type may be requested (PyTorch's expandable segments
	 * do); an export works where the device says it does (the GPU's driver,
	 * qcuda's emu provider), and is refused where it says not: the same
	 * line either way. Where it works, the fd imports (in this process, as
	 * CUDA allows) as a handle of the same memory, and a file that is no
	 * shareable handle is refused. */
	{
		CUmemAllocationProp fdprop = prop;
		CUmemGenericAllocationHandle hf, hi = 0;
		CUdeviceptr vf = 0;
		unsigned char seen[4] = { 0 };
		int fd = -1, fds = -1, devnull;
		CUresult r;

		fdprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		OK(cuDeviceGetAttribute(&fds, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
		OK(cuMemCreate(&hf, size, &fdprop, 0));
		r = cuMemExportToShareableHandle(&fd, hf, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
		check(fds ? r == CUDA_SUCCESS && fd >= 0 : r == CUDA_ERROR_NOT_SUPPORTED,
		      "a POSIX fd export as the device's attribute says");
		if (fds && fd >= 0) {
			OK(cuMemImportFromShareableHandle(&hi, (void *)(uintptr_t)fd,
							  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
			OK(cuMemAddressReserve(&vf, 2 * size, 0, 0, 0));
			OK(cuMemMap(vf, size, 0, hf, 0));
			OK(cuMemMap(vf + size, size, 0, hi, 0));
			OK(cuMemSetAccess(vf, 2 * size, &acc, 1));
			OK(cuMemsetD8(vf, 0x3c, 4));
			OK(cuMemcpyDtoH(seen, vf + size, 4));
			check(seen[0] == 0x3c && seen[3] == 0x3c, "the imported handle maps the exported memory");
			OK(cuMemUnmap(vf, 2 * size));
			OK(cuMemAddressFree(vf, 2 * size));
			OK(cuMemRelease(hi));
			devnull = open("/dev/null", O_RDONLY);
			check(cuMemImportFromShareableHandle(&hi, (void *)(uintptr_t)devnull,
							     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS,
			      "a file that is no shareable handle is refused");
			close(devnull);
		}
		if (fd >= 0)
			close(fd);
		OK(cuMemRelease(hf));
	}
	/* NCCL's probe for cuMem host memory (misc/cudawrap.cc): the
	 * granularity of pinned host memory is answered, and its creation
	 * works where the device says it does (the driver) and is refused
	 * where it says not (qcuda: NCCL falls back to /dev/shm). */
	{
		CUmemAllocationProp hostprop = prop;
		CUmemGenericAllocationHandle hh = 0;
		size_t hg = 0;
		int host_vmm = 0;
		CUresult r;

		hostprop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
		hostprop.location.id = 0;
		hostprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
		OK(cuMemGetAllocationGranularity(&hg, &hostprop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		check(hg != 0 && hg % 4096 == 0, "host NUMA granularity %zu", hg);
		OK(cuDeviceGetAttribute(&host_vmm, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
					dev));
		r = cuMemCreate(&hh, hg, &hostprop, 0);
		check(host_vmm ? r == CUDA_SUCCESS : r == CUDA_ERROR_NOT_SUPPORTED,
		      "host NUMA cuMemCreate answers as the device's attribute 141 says");
		if (r == CUDA_SUCCESS)
			OK(cuMemRelease(hh));
	}
	OK(cuMemFree(plain));
	free(buf);
	OK(cuDevicePrimaryCtxRelease(dev));
	return finish("vmm");
}
