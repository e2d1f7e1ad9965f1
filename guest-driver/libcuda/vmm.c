/* SPDX-License-Identifier: MIT */
/*
 * Virtual memory management: address reservations, physical allocations,
 * mappings and their access (what XLA's allocator and PyTorch's expandable
 * segments build on). The backend checks and records every step (VMM_*,
 * backend/src/qcuda/vmm/vmm.ts); here a reservation is a region of the device
 * map (kind QC_MEM_VMM), so that copies, memsets and pointer attributes know
 * its addresses as device memory, and whether a byte of it is mapped and
 * accessible is the backend's to say. Pinned memory of the device only,
 * shareable handles of the POSIX fd type only (a sealed memfd holding the
 * backend's token: cuMemExportToShareableHandle), no compression: anything
 * else is CUDA_ERROR_NOT_SUPPORTED (pinned host memory too, though its
 * granularity is answered).
 */
#define _GNU_SOURCE
#include <string.h>
#include <pthread.h>
#include <stdlib.h>

#include "cu.h"
#include "../lib/qc_os.h"

/* A property struct qcuda serves: pinned memory on a device, no export, no
 * compression, no special usage. */
static CUresult check_prop(const CUmemAllocationProp *prop)
{
	CUresult r;

	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_device_check(prop->location.id);
	if (r != CUDA_SUCCESS)
		return r;
	/* A POSIX fd handle may be asked for (NCCL, PyTorch's expandable
	 * segments): any allocation can be exported (VMM_EXPORT). */
	if ((prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
	     prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    prop->win32HandleMetaData || prop->allocFlags.compressionType != CU_MEM_ALLOCATION_COMP_NONE ||
	    prop->allocFlags.usage)
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

/* cu_enter, then the session ready for a request. */
static CUresult enter(void)
{
	CUresult r = cu_enter();

	return r != CUDA_SUCCESS ? r : cu_result(qc_ready());
}

/* enter() for a call whose arguments are tested first: a failed test is
 * CUDA_ERROR_INVALID_VALUE before anything else. */
static CUresult enter_args(int args_ok)
{
	return args_ok ? enter() : CUDA_ERROR_INVALID_VALUE;
}

/* Pinned host memory (cuMemCreate on a host location): not served. */
static int host_location(const CUmemAllocationProp *prop)
{
	return prop && prop->type == CU_MEM_ALLOCATION_TYPE_PINNED &&
	       (prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
		prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
		prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	CUresult r;

	if (!granularity ||
	    (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	/* A host location is answered, so that the refusal comes at cuMemCreate,
	 * where NCCL's probe for cuMem host memory looks for it: a failed
	 * granularity query there reads as "host memory works" (its CUCHECK
	 * returns a non-zero ncclResult_t from a function whose non-zero means
	 * enabled), and NCCL would then fail at its first host allocation
	 * instead of using /dev/shm. */
	r = host_location(prop) ? CUDA_SUCCESS : check_prop(prop);
	if (r == CUDA_SUCCESS)
		*granularity = QCUDA_VMM_GRANULARITY;
	return r;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	struct qc_region *reg;
	uint64_t va = 0;
	CUresult r;

	if (!ptr)
		return CUDA_ERROR_INVALID_VALUE;
	*ptr = 0;
	r = enter();
	if (r != CUDA_SUCCESS)
		return r;
	reg = calloc(1, sizeof(*reg));
	if (!reg)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_result(qc_req_vmm_reserve(size, alignment, addr, flags, &va));
	if (r != CUDA_SUCCESS) {
		free(reg);
		return r;
	}
	if (qc_region_add_device(reg, QC_MEM_VMM, va, size, "VMM_RESERVE")) {
		qc_region_release(reg, 0);
		return CUDA_ERROR_UNKNOWN;
	}
	*ptr = va;
	return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	struct qc_region *reg;
	CUresult r = enter();

	if (r != CUDA_SUCCESS)
		return r;
	reg = qc_region_take(ptr, QC_MEM_VMM);
	if (!reg)
		return CUDA_ERROR_INVALID_VALUE;
	if (reg->size != size) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		/* The backend may refuse (memory still mapped): then it stays. */
		r = cu_result(qc_req_vmm_free(ptr, size));
		if (r == CUDA_SUCCESS) {
			if (reg->reserved)
				qc_os_release(reg->res_start, reg->map_len);
			free(reg);
			return CUDA_SUCCESS;
		}
	}
	if (qc_region_add(reg))
		free(reg);
	return r;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
		     unsigned long long flags)
{
	uint64_t h = 0;
	CUresult r;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	r = host_location(prop) ? CUDA_ERROR_NOT_SUPPORTED : check_prop(prop);
	if (r == CUDA_SUCCESS)
		r = enter();
	/* The session's memory is its device's (the current context's). */
	if (r == CUDA_SUCCESS && prop->location.id != qc_current_device())
		r = CUDA_ERROR_NOT_SUPPORTED;
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_create(size, flags, &h));
	if (r == CUDA_SUCCESS)
		*handle = h;
	return r;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult r = enter();

	return r != CUDA_SUCCESS ? r : cu_result(qc_req_vmm_release(handle));
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	CUresult r = enter();

	return r != CUDA_SUCCESS ? r : cu_result(qc_req_vmm_map(ptr, size, offset, handle, flags));
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult r = enter();

	return r != CUDA_SUCCESS ? r : cu_result(qc_req_vmm_unmap(ptr, size));
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	CUresult r;

	r = enter_args(desc && count);
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE)
			return CUDA_ERROR_INVALID_VALUE;
		if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_NOT_SUPPORTED;
		r = cu_device_check(desc[i].location.id);
		if (r == CUDA_SUCCESS)
			r = cu_result(
				qc_req_vmm_set_access(ptr, size, (uint32_t)desc[i].location.id, QCUDA_VMM_ACCESS_RW));
	}
	return r;
}

CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	uint64_t v = 0;
	CUresult r;

	if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_device_check(location->id);
	if (r == CUDA_SUCCESS)
		r = enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_get_access(ptr, &v));
	if (r == CUDA_SUCCESS)
		*flags = v;
	return r;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	uint64_t size = 0;
	CUresult r;

	r = enter_args(prop != NULL);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_size(handle, &size)); /* the handle must be live */
	if (r != CUDA_SUCCESS)
		return r;
	/* Every allocation qcuda makes is this one (check_prop refuses others). */
	*prop = (CUmemAllocationProp){ .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				       .location = { .type = CU_MEM_LOCATION_TYPE_DEVICE, .id = qc_current_device() } };
	return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	uint64_t h = 0;
	CUresult r;

	r = enter_args(handle != NULL);
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_retain((uint64_t)(uintptr_t)addr, &h));
	if (r == CUDA_SUCCESS)
		*handle = h;
	return r;
}

/*
 * A shareable handle is a memfd: this header, sealed so that neither its
 * holder nor anyone it is passed to can change it. The token names the
 * allocation in the backend's table of the VM; forged bytes name nothing.
 */
#define VMM_FD_MAGIC "qcudavmm"
struct vmm_fd_header {
	char magic[8];
	struct qcuda_ipc_handle h;
};

CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
				      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct vmm_fd_header hdr = { .magic = VMM_FD_MAGIC };
	CUresult r;
	int fd;

	if (!shareableHandle || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_export(handle, &hdr.h));
	if (r != CUDA_SUCCESS)
		return r;
	switch (qc_os_sealed_file("qcuda-vmm", &hdr, sizeof(hdr), &fd)) {
	case 0:
		*(int *)shareableHandle = fd;
		return CUDA_SUCCESS;
	case -ENOSYS: /* Windows: no POSIX fds to share */
		return CUDA_ERROR_NOT_SUPPORTED;
	case -EIO:
		return CUDA_ERROR_OPERATING_SYSTEM;
	default:
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
}

CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
					CUmemAllocationHandleType shHandleType)
{
	struct vmm_fd_header hdr;
	int fd = (int)(intptr_t)osHandle;
	uint64_t h = 0;
	CUresult r;
	int rd;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	/* Not one of ours (or no file at all): as the driver answers a descriptor it did not make. */
	rd = qc_os_read_sealed(fd, &hdr, sizeof(hdr));
	if (rd == -ENOSYS)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (rd || memcmp(hdr.magic, VMM_FD_MAGIC, 8) != 0 || hdr.h.size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = enter();
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_req_vmm_import(&hdr.h, &h));
	if (r == CUDA_SUCCESS)
		*handle = h;
	return r;
}
