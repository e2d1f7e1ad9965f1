/* SPDX-License-Identifier: MIT */
/*
 * qcuda's libnvidia-ml.so.1: the NVML queries NCCL (and tools that list
 * GPUs) make, answered from the CUDA driver API of qcuda's libcuda.so.1,
 * so that a guest sees in NVML exactly the devices CUDA gives it: their
 * count and order, names, UUIDs, PCI bus ids, compute capabilities and
 * which pairs reach each other's memory (P2P status as
 * cuDeviceCanAccessPeer says). What a guest cannot know of the host GPU
 * (NVLink state, fabric, confidential computing, clocks, power) answers
 * NVML_ERROR_NOT_SUPPORTED, which NCCL takes as "not there"; what it
 * never asks is not exported, so a program that looks it up (dlsym) knows.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "nvml_abi.h"

#define NVML_API __attribute__((visibility("default")))

/* As many devices as a qcuda guest may be given (the backend's --gpu list, --host-devices). */
#define MAX_DEVICES 64

struct nvmlDevice_st {
	CUdevice cu;
	unsigned int index;
	unsigned int domain, bus, device;
	int cc_major, cc_minor;
	char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
/* nvmlInit calls not yet matched by nvmlShutdown (NVML counts them). */
static unsigned int inits;
/* The devices, read at the first nvmlInit: a process's devices do not change. */
static struct nvmlDevice_st devices[MAX_DEVICES];
static unsigned int ndevices;
static int devices_read;

/* ---------------------------------------------------------------- devices */

static nvmlReturn_t from_cu(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS:
		return NVML_SUCCESS;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_NOT_INITIALIZED:
		return NVML_ERROR_DRIVER_NOT_LOADED;
	case CUDA_ERROR_INVALID_DEVICE:
	case CUDA_ERROR_INVALID_VALUE:
		return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_NOT_SUPPORTED:
		return NVML_ERROR_NOT_SUPPORTED;
	default:
		return NVML_ERROR_UNKNOWN;
	}
}

/* NVML's form of a UUID: "GPU-" then the 16 bytes as 8-4-4-4-12 hex digits. */
static void format_uuid(char *out, size_t len, const CUuuid *u)
{
	const unsigned char *b = (const unsigned char *)u->bytes;

	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
		 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
}

static CUresult attribute(unsigned int *v, CUdevice_attribute a, CUdevice dev)
{
	int i = 0;
	CUresult r = cuDeviceGetAttribute(&i, a, dev);

	*v = (unsigned int)i;
	return r;
}

static CUresult read_device(struct nvmlDevice_st *d, unsigned int index)
{
	CUuuid u;
	CUresult r;

	d->index = index;
	r = cuDeviceGet(&d->cu, (int)index);
	if (r == CUDA_SUCCESS)
		r = attribute(&d->domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d->cu);
	if (r == CUDA_SUCCESS)
		r = attribute(&d->bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d->cu);
	if (r == CUDA_SUCCESS)
		r = attribute(&d->device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d->cu);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&d->cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d->cu);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&d->cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d->cu);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetName(d->name, sizeof(d->name), d->cu);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetUuid_v2(&u, d->cu);
	if (r == CUDA_SUCCESS)
		format_uuid(d->uuid, sizeof(d->uuid), &u);
	return r;
}

/* Called with lock held. */
static nvmlReturn_t read_devices(void)
{
	int n = 0;
	CUresult r = cuInit(0);

	if (r == CUDA_SUCCESS)
		r = cuDeviceGetCount(&n);
	if (r == CUDA_SUCCESS && n > MAX_DEVICES)
		n = MAX_DEVICES;
	for (int i = 0; r == CUDA_SUCCESS && i < n; i++)
		r = read_device(&devices[i], (unsigned int)i);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	ndevices = (unsigned int)n;
	devices_read = 1;
	return NVML_SUCCESS;
}

static int initialized(void)
{
	int yes;

	pthread_mutex_lock(&lock);
	yes = inits > 0;
	pthread_mutex_unlock(&lock);
	return yes;
}

/* A handle this library gave out, or NULL. */
static const struct nvmlDevice_st *device_of(nvmlDevice_t h)
{
	for (unsigned int i = 0; i < ndevices; i++)
		if (h == &devices[i])
			return h;
	return NULL;
}

/* The checks every device query starts with: initialized, a handle of ours, somewhere to write. */
#define DEVICE_QUERY(d, h, out)                             \
	const struct nvmlDevice_st *d;                      \
	do {                                                \
		if (!initialized())                         \
			return NVML_ERROR_UNINITIALIZED;    \
		d = device_of(h);                           \
		if (!d || !(out))                           \
			return NVML_ERROR_INVALID_ARGUMENT; \
	} while (0)

/* ------------------------------------------------------------ init, errors */

NVML_API nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
	nvmlReturn_t r = NVML_SUCCESS;

	(void)flags; /* NVML_INIT_FLAG_NO_GPUS / NO_ATTACH: nothing here attaches to a GPU */
	pthread_mutex_lock(&lock);
	if (!devices_read)
		r = read_devices();
	if (r == NVML_SUCCESS)
		inits++;
	pthread_mutex_unlock(&lock);
	return r;
}

NVML_API nvmlReturn_t nvmlInit_v2(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlInit(void)
{
	return nvmlInitWithFlags(0);
}

NVML_API nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t r = NVML_SUCCESS;

	pthread_mutex_lock(&lock);
	if (inits == 0)
		r = NVML_ERROR_UNINITIALIZED;
	else
		inits--;
	pthread_mutex_unlock(&lock);
	return r;
}

NVML_API const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED:
		return "Not Supported";
	case NVML_ERROR_NO_PERMISSION:
		return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED:
		return "Already Initialized";
	case NVML_ERROR_NOT_FOUND:
		return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	case NVML_ERROR_FUNCTION_NOT_FOUND:
		return "Function Not Found";
	default:
		return "Unknown Error";
	}
}

/* ------------------------------------------------------------------ system */

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version)
{
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	return from_cu(cuDriverGetVersion(version));
}

NVML_API nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version)
{
	return nvmlSystemGetCudaDriverVersion(version);
}

/* Confidential computing: not offered to a guest (NCCL then leaves it off). */
NVML_API nvmlReturn_t nvmlSystemGetConfComputeState(void *state)
{
	return initialized() ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNINITIALIZED;
}

NVML_API nvmlReturn_t nvmlSystemGetConfComputeSettings(void *settings)
{
	return initialized() ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_UNINITIALIZED;
}

/* ------------------------------------------------------------ the devices */

NVML_API nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = ndevices;
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetCount(unsigned int *count)
{
	return nvmlDeviceGetCount_v2(count);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* "domain:bus:device.function" (a 4- or 8-digit domain) or "bus:device.function", in hex. */
static int parse_bus_id(const char *s, unsigned int *domain, unsigned int *bus, unsigned int *device,
			unsigned int *function)
{
	char end;

	if (sscanf(s, "%x:%x:%x.%x%c", domain, bus, device, function, &end) == 4)
		return 1;
	*domain = 0;
	return sscanf(s, "%x:%x.%x%c", bus, device, function, &end) == 3;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	unsigned int domain, bus, dev, function;

	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!pciBusId || !device || !parse_bus_id(pciBusId, &domain, &bus, &dev, &function))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < ndevices; i++) {
		const struct nvmlDevice_st *d = &devices[i];

		if (d->domain == domain && d->bus == bus && d->device == dev && function == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

NVML_API nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (unsigned int i = 0; i < ndevices; i++) {
		if (strcasecmp(devices[i].uuid, uuid) == 0) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

NVML_API nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	DEVICE_QUERY(d, device, index);
	*index = d->index;
	return NVML_SUCCESS;
}

/* Copies s into a caller's buffer of length, as NVML: too short is INSUFFICIENT_SIZE. */
static nvmlReturn_t copy_string(char *out, unsigned int length, const char *s)
{
	if (strlen(s) + 1 > length)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(out, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

NVML_API nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	DEVICE_QUERY(d, device, name);
	return copy_string(name, length, d->name);
}

NVML_API nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	DEVICE_QUERY(d, device, uuid);
	return copy_string(uuid, length, d->uuid);
}

NVML_API nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	DEVICE_QUERY(d, device, major);
	if (!minor)
		return NVML_ERROR_INVALID_ARGUMENT;
	*major = d->cc_major;
	*minor = d->cc_minor;
	return NVML_SUCCESS;
}

/*
 * Reads and writes between two devices are OK where CUDA lets one reach the
 * other's memory (and a device its own); NVLink and atomics are not known
 * to a guest.
 */
NVML_API nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2, nvmlGpuP2PCapsIndex_t index,
					     nvmlGpuP2PStatus_t *status)
{
	int can = 0;
	CUresult r;

	DEVICE_QUERY(a, device1, status);
	const struct nvmlDevice_st *b = device_of(device2);

	if (!b || (unsigned int)index >= NVML_P2P_CAPS_INDEX_UNKNOWN)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (index != NVML_P2P_CAPS_INDEX_READ && index != NVML_P2P_CAPS_INDEX_WRITE) {
		*status = NVML_P2P_STATUS_NOT_SUPPORTED;
		return NVML_SUCCESS;
	}
	if (a == b) {
		*status = NVML_P2P_STATUS_OK;
		return NVML_SUCCESS;
	}
	r = cuDeviceCanAccessPeer(&can, a->cu, b->cu);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	*status = can ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
	return NVML_SUCCESS;
}

/* --------------------------------------- what a guest does not know: NVLink */

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, int capability,
						    unsigned int *capResult)
{
	DEVICE_QUERY(d, device, capResult);
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, int *isActive)
{
	DEVICE_QUERY(d, device, isActive);
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, void *pci)
{
	DEVICE_QUERY(d, device, pci);
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, void *pci)
{
	return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

/* Each value answers NOT_SUPPORTED in its own record; the call itself succeeds, as NVML's. */
NVML_API nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
	DEVICE_QUERY(d, device, values);
	if (valuesCount < 0)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < valuesCount; i++) {
		values[i].timestamp = 0;
		values[i].latencyUsec = 0;
		values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
	}
	return NVML_SUCCESS;
}

/* Multi-node NVLink (NCCL's MNNVL): a guest is in no fabric. */
NVML_API nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, void *info)
{
	DEVICE_QUERY(d, device, info);
	return NVML_ERROR_NOT_SUPPORTED;
}

NVML_API nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, void *info)
{
	DEVICE_QUERY(d, device, info);
	return NVML_ERROR_NOT_SUPPORTED;
}
