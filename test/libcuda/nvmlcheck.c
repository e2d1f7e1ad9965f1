/* SPDX-License-Identifier: MIT */
/*
 * NVML as NCCL asks it (nvmlwrap.cc, init.cc, xml.cc), checked against
 * what the CUDA driver API says of the same devices: the count, each
 * device's index, name, UUID and compute capability, the handle of its PCI
 * bus id (as cuDeviceGetPCIBusId writes it, and with NVML's 8-digit
 * domain), P2P read and write status as cuDeviceCanAccessPeer says, and
 * the refusals (a bad index, an unknown bus id, after the last shutdown).
 * The library is dlopened as NCCL does: argv[1], or libnvidia-ml.so.1 by
 * its soname (qcuda's in a guest, NVIDIA's on a GPU host, where this
 * program prints the same).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>

#include "../../guest-driver/nvml/nvml_abi.h"
#include "check.h"

static void *lib;

static void *sym(const char *s)
{
	void *f = dlsym(lib, s);

	if (!f) {
		printf("FAIL %s: not in the library\n", s);
		exit(1);
	}
	return f;
}

#define FN(ret, n, ...) ret (*n)(__VA_ARGS__) = sym(#n)

static int uuid_form(const char *u)
{
	static const char form[] = "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";

	if (strlen(u) != sizeof(form) - 1)
		return 0;
	for (size_t i = 0; i < sizeof(form) - 1; i++)
		if (form[i] == 'x' ? !strchr("0123456789abcdef", u[i]) : u[i] != form[i])
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "libnvidia-ml.so.1";
	unsigned int n = 0, index = 99;
	int count = 0;

	lib = dlopen(path, RTLD_NOW);
	if (!lib) {
		printf("FAIL cannot open %s: %s\n", path, dlerror());
		return 1;
	}
	FN(nvmlReturn_t, nvmlInit_v2, void);
	FN(nvmlReturn_t, nvmlShutdown, void);
	FN(const char *, nvmlErrorString, nvmlReturn_t);
	FN(nvmlReturn_t, nvmlDeviceGetCount_v2, unsigned int *);
	FN(nvmlReturn_t, nvmlDeviceGetHandleByIndex_v2, unsigned int, nvmlDevice_t *);
	FN(nvmlReturn_t, nvmlDeviceGetHandleByPciBusId_v2, const char *, nvmlDevice_t *);
	FN(nvmlReturn_t, nvmlDeviceGetHandleByUUID, const char *, nvmlDevice_t *);
	FN(nvmlReturn_t, nvmlDeviceGetIndex, nvmlDevice_t, unsigned int *);
	FN(nvmlReturn_t, nvmlDeviceGetName, nvmlDevice_t, char *, unsigned int);
	FN(nvmlReturn_t, nvmlDeviceGetUUID, nvmlDevice_t, char *, unsigned int);
	FN(nvmlReturn_t, nvmlDeviceGetCudaComputeCapability, nvmlDevice_t, int *, int *);
	FN(nvmlReturn_t, nvmlDeviceGetP2PStatus, nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t,
	   nvmlGpuP2PStatus_t *);
	FN(nvmlReturn_t, nvmlSystemGetCudaDriverVersion_v2, int *);

	check(nvmlInit_v2() == NVML_SUCCESS, "nvmlInit_v2");
	check(nvmlInit_v2() == NVML_SUCCESS, "nvmlInit_v2 again (counted)");
	OK(cuInit(0));
	OK(cuDeviceGetCount(&count));
	check(nvmlDeviceGetCount_v2(&n) == NVML_SUCCESS && n == (unsigned int)count,
	      "NVML counts the devices CUDA has");
	{
		int nv = 0, cu = 0;

		cuDriverGetVersion(&cu);
		check(nvmlSystemGetCudaDriverVersion_v2(&nv) == NVML_SUCCESS && nv == cu,
		      "the CUDA driver version is cuDriverGetVersion's");
	}

	for (int i = 0; i < count && i < 8; i++) {
		nvmlDevice_t h = NULL, by = NULL;
		char nv_name[96], cu_name[96], uuid[96], cu_uuid[96], bus[32], bus8[48];
		int major = 0, minor = 0, cmaj = 0, cmin = 0;
		CUdevice d;
		CUuuid u;

		OK(cuDeviceGet(&d, i));
		check(nvmlDeviceGetHandleByIndex_v2((unsigned int)i, &h) == NVML_SUCCESS && h,
		      "device %d: a handle by index", i);
		check(nvmlDeviceGetIndex(h, &index) == NVML_SUCCESS && index == (unsigned int)i, "device %d: its index",
		      i);
		cuDeviceGetName(cu_name, sizeof(cu_name), d);
		check(nvmlDeviceGetName(h, nv_name, sizeof(nv_name)) == NVML_SUCCESS && strcmp(nv_name, cu_name) == 0,
		      "device %d: the name is cuDeviceGetName's", i);
		check(nvmlDeviceGetName(h, nv_name, 2) == NVML_ERROR_INSUFFICIENT_SIZE,
		      "device %d: a short name buffer is INSUFFICIENT_SIZE", i);
		cuDeviceGetUuid_v2(&u, d);
		snprintf(cu_uuid, sizeof(cu_uuid),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 (unsigned char)u.bytes[0], (unsigned char)u.bytes[1], (unsigned char)u.bytes[2],
			 (unsigned char)u.bytes[3], (unsigned char)u.bytes[4], (unsigned char)u.bytes[5],
			 (unsigned char)u.bytes[6], (unsigned char)u.bytes[7], (unsigned char)u.bytes[8],
			 (unsigned char)u.bytes[9], (unsigned char)u.bytes[10], (unsigned char)u.bytes[11],
			 (unsigned char)u.bytes[12], (unsigned char)u.bytes[13], (unsigned char)u.bytes[14],
			 (unsigned char)u.bytes[15]);
		check(nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) == NVML_SUCCESS && uuid_form(uuid) &&
			      strcmp(uuid, cu_uuid) == 0,
		      "device %d: the UUID is cuDeviceGetUuid's, in NVML's form", i);
		check(nvmlDeviceGetHandleByUUID(uuid, &by) == NVML_SUCCESS && by == h,
		      "device %d: the handle of its UUID", i);
		cuDeviceGetAttribute(&cmaj, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, d);
		cuDeviceGetAttribute(&cmin, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, d);
		check(nvmlDeviceGetCudaComputeCapability(h, &major, &minor) == NVML_SUCCESS && major == cmaj &&
			      minor == cmin,
		      "device %d: the compute capability is CUDA's", i);
		OK(cuDeviceGetPCIBusId(bus, sizeof(bus), d));
		by = NULL;
		check(nvmlDeviceGetHandleByPciBusId_v2(bus, &by) == NVML_SUCCESS && by == h,
		      "device %d: the handle of its bus id as CUDA writes it", i);
		snprintf(bus8, sizeof(bus8), "0000%s", bus);
		by = NULL;
		check(nvmlDeviceGetHandleByPciBusId_v2(bus8, &by) == NVML_SUCCESS && by == h,
		      "device %d: and with an 8-digit domain", i);

		for (int j = 0; j < count && j < 8; j++) {
			nvmlDevice_t o = NULL;
			nvmlGpuP2PStatus_t rd = NVML_P2P_STATUS_UNKNOWN, wr = NVML_P2P_STATUS_UNKNOWN;
			int can = 0;
			CUdevice e;

			cuDeviceGet(&e, j);
			nvmlDeviceGetHandleByIndex_v2((unsigned int)j, &o);
			check(nvmlDeviceGetP2PStatus(h, o, NVML_P2P_CAPS_INDEX_READ, &rd) == NVML_SUCCESS &&
				      nvmlDeviceGetP2PStatus(h, o, NVML_P2P_CAPS_INDEX_WRITE, &wr) == NVML_SUCCESS,
			      "devices %d, %d: P2P read and write status", i, j);
			if (i != j) {
				cuDeviceCanAccessPeer(&can, d, e);
				check((rd == NVML_P2P_STATUS_OK) == (can == 1) &&
					      (wr == NVML_P2P_STATUS_OK) == (can == 1),
				      "devices %d, %d: P2P status OK exactly where cuDeviceCanAccessPeer says 1 (%d)",
				      i, j, can);
			}
		}
	}

	{
		nvmlDevice_t h = NULL;

		check(nvmlDeviceGetHandleByIndex_v2((unsigned int)count, &h) == NVML_ERROR_INVALID_ARGUMENT,
		      "an index past the devices is INVALID_ARGUMENT");
		check(nvmlDeviceGetHandleByPciBusId_v2("0000:ff:1f.0", &h) == NVML_ERROR_NOT_FOUND,
		      "a bus id of no device is NOT_FOUND");
		check(nvmlDeviceGetHandleByPciBusId_v2("not a bus id", &h) == NVML_ERROR_INVALID_ARGUMENT,
		      "a malformed bus id is INVALID_ARGUMENT");
		check(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &h) == NVML_ERROR_NOT_FOUND,
		      "a UUID of no device is NOT_FOUND");
		check(strcmp(nvmlErrorString(NVML_ERROR_NOT_FOUND), "Not Found") == 0,
		      "nvmlErrorString(NOT_FOUND) is \"Not Found\"");
	}

	check(nvmlShutdown() == NVML_SUCCESS, "nvmlShutdown");
	check(nvmlDeviceGetCount_v2(&n) == NVML_SUCCESS, "still initialized once more");
	check(nvmlShutdown() == NVML_SUCCESS, "the last nvmlShutdown");
	check(nvmlDeviceGetCount_v2(&n) == NVML_ERROR_UNINITIALIZED, "after it, queries are UNINITIALIZED");
	check(nvmlShutdown() == NVML_ERROR_UNINITIALIZED, "a shutdown too many is UNINITIALIZED");
	return finish("nvmlcheck");
}
