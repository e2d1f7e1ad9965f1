/* SPDX-License-Identifier: MIT */
/*
 * Devices: count, handles, names, UUIDs, memory and attributes, answered
 * from the properties the runtime layer fetches once per device (a program
 * asks for about 120 attributes per cudart instance at start-up: none is a
 * round trip after the first).
 */
#include <stdio.h>
#include <string.h>

#include "cu.h"
#include "../lib/qc_array.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuDeviceGetUuid

/* Attribute numbers the CUDA 13 driver accepts (CU_DEVICE_ATTRIBUTE_MAX). */
#define ATTR_MAX 148

CUresult cu_device_check(CUdevice dev)
{
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= qc.device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

static CUresult props(CUdevice dev, const struct qcuda_out_device_props **p)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : cu_result(qc_device_props(dev, p));
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= qc.device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*count = qc.device_count;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	const struct qcuda_out_device_props *p;
	CUresult r;

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = props(dev, &p);
	if (r == CUDA_SUCCESS)
		snprintf(name, (size_t)len, "%s", p->name);
	return r;
}

static CUresult device_uuid(CUuuid *uuid, CUdevice dev)
{
	const struct qcuda_out_device_props *p;
	CUresult r;

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	r = props(dev, &p);
	if (r == CUDA_SUCCESS)
		memcpy(uuid->bytes, p->uuid, sizeof(uuid->bytes));
	return r;
}

/* The CUDA 9.2 ABI and today's answer alike (one UUID per device here). */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	return device_uuid(uuid, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	const struct qcuda_out_device_props *p;
	CUresult r;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	r = props(dev, &p);
	if (r == CUDA_SUCCESS)
		*bytes = (size_t)p->total_mem;
	return r;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	const struct qcuda_out_device_props *p;
	CUresult r;

	if (!pi || (int)attrib < 1 || (int)attrib >= ATTR_MAX || (int)attrib >= QCUDA_NUM_ATTRS) {
		r = cu_device_check(dev); /* a bad device is said first */
		return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
	}
	r = props(dev, &p);
	if (r == CUDA_SUCCESS)
		*pi = (int)p->attrs[attrib];
	return r;
}

CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult r;

	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
	return r;
}

/* "domain:bus:device.0" in upper-case hex, the domain in four digits (CUDA
 * asks for room for 13 characters), as cudaDeviceGetPCIBusId writes it. */
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	int domain, bus, device;
	CUresult r;

	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
	if (r == CUDA_SUCCESS)
		snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", domain, bus, device);
	return r;
}

CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	unsigned int domain = 0, bus, device;
	char id[32];

	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (sscanf(pciBusId, "%x:%x:%x", &domain, &bus, &device) != 3 &&
	    (domain = 0, sscanf(pciBusId, "%x:%x", &bus, &device) != 2))
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < qc.device_count; i++) {
		unsigned int d, b, s;

		if (cuDeviceGetPCIBusId(id, sizeof(id), i) == CUDA_SUCCESS && sscanf(id, "%x:%x:%x", &d, &b, &s) == 3 &&
		    d == domain && b == bus && s == device) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format, unsigned numChannels,
					    CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	if (r == CUDA_SUCCESS && !maxWidthInElements)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = cu_result(qc_tex1d_linear_max((int)format, numChannels, dev, maxWidthInElements));
	return r;
}

/* The runtime layer asks the backend (a device is not its own peer: 0). */
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	CUresult r;

	if (!canAccessPeer)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_device_check(dev);
	if (r == CUDA_SUCCESS)
		r = cu_device_check(peerDev);
	return r != CUDA_SUCCESS ? r : cu_result(cudaDeviceCanAccessPeer(canAccessPeer, dev, peerDev));
}

/* CUdevice_P2PAttribute is cudaDeviceP2PAttr; no context needed, as natively. */
CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice, CUdevice dstDevice)
{
	CUresult r;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_device_check(srcDevice);
	if (r == CUDA_SUCCESS)
		r = cu_device_check(dstDevice);
	return r != CUDA_SUCCESS ? r
				 : cu_result(cudaDeviceGetP2PAttribute(value, (enum cudaDeviceP2PAttr)attrib, srcDevice,
								       dstDevice));
}

/* Linux has no LUID. */
CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev)
{
	CUresult r = cu_device_check(dev);

	return r != CUDA_SUCCESS ? r : CUDA_ERROR_NOT_SUPPORTED;
}
