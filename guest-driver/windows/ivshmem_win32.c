/* SPDX-License-Identifier: MIT */
/*
 * The shared-memory region of a Windows VM: an ivshmem-plain PCI device
 * whose memory the backend maps too, reached through virtio-win's signed
 * IVSHMEM driver (no driver of ours to sign): the device interface found
 * with SetupAPI, its memory mapped into this process with
 * IOCTL_IVSHMEM_REQUEST_MMAP and given back with IOCTL_IVSHMEM_RELEASE_MMAP.
 * The driver maps the region for one handle at a time, so one process of
 * the VM uses it at once (docs/windows.md).
 *
 * The interface and the control codes are virtio-win's (ivshmem/Public.h of
 * kvm-guest-drivers-windows), declared here from their documented values.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <windows.h>
#include <setupapi.h>

#include "ivshmem_win32.h"

/* {df576976-569d-4672-95a0-f57e4ea0b210} */
static const GUID ivshmem_interface = {
	0xdf576976, 0x569d, 0x4672, { 0x95, 0xa0, 0xf5, 0x7e, 0x4e, 0xa0, 0xb2, 0x10 }
};

#define IVSHMEM_IOCTL(n) CTL_CODE(FILE_DEVICE_UNKNOWN, (n), METHOD_BUFFERED, FILE_ANY_ACCESS)
#define IOCTL_IVSHMEM_REQUEST_SIZE IVSHMEM_IOCTL(0x801)
#define IOCTL_IVSHMEM_REQUEST_MMAP IVSHMEM_IOCTL(0x802)
#define IOCTL_IVSHMEM_RELEASE_MMAP IVSHMEM_IOCTL(0x803)
/* Cached: the region is the host's RAM, polled and written by both sides. */
#define IVSHMEM_CACHE_CACHED 1

struct ivshmem_mmap_config {
	UINT8 cache_mode;
};

struct ivshmem_mmap {
	UINT16 peer_id;
	UINT64 size;
	PVOID ptr;
	UINT16 vectors;
};

/* "ivshmem" is the first device, "ivshmem:N" the Nth (from 0). */
static int device_index(const char *name, DWORD *index)
{
	const char *n = name + strlen(QC_IVSHMEM_NAME);
	char *end;
	unsigned long v;

	if (*n == '\0') {
		*index = 0;
		return 0;
	}
	if (*n != ':' || !n[1])
		return -EINVAL;
	v = strtoul(n + 1, &end, 10);
	if (*end || v > 255)
		return -EINVAL;
	*index = (DWORD)v;
	return 0;
}

/* The device interface's path, for CreateFile: 0, -ENODEV or -errno. */
static int device_path(DWORD index, char **path)
{
	HDEVINFO set = SetupDiGetClassDevsA(&ivshmem_interface, NULL, NULL, DIGCF_PRESENT | DIGCF_DEVICEINTERFACE);
	SP_DEVICE_INTERFACE_DATA itf = { .cbSize = sizeof(itf) };
	PSP_DEVICE_INTERFACE_DETAIL_DATA_A detail = NULL;
	DWORD need = 0;
	int e = -ENODEV;

	if (set == INVALID_HANDLE_VALUE)
		return -ENODEV;
	if (!SetupDiEnumDeviceInterfaces(set, NULL, &ivshmem_interface, index, &itf))
		goto out;
	SetupDiGetDeviceInterfaceDetailA(set, &itf, NULL, 0, &need, NULL);
	if (need < sizeof(*detail) || !(detail = calloc(1, need))) {
		e = -ENOMEM;
		goto out;
	}
	detail->cbSize = sizeof(*detail);
	if (!SetupDiGetDeviceInterfaceDetailA(set, &itf, detail, need, NULL, NULL))
		goto out;
	*path = strdup(detail->DevicePath);
	e = *path ? 0 : -ENOMEM;
out:
	free(detail);
	SetupDiDestroyDeviceInfoList(set);
	return e;
}

int ivshmem_map(const char *name, uint64_t min_bytes, struct qc_os_map *m)
{
	struct ivshmem_mmap_config config = { .cache_mode = IVSHMEM_CACHE_CACHED };
	struct ivshmem_mmap map = { 0 };
	UINT64 size = 0;
	DWORD index, got;
	HANDLE dev;
	char *path;
	int e;

	if ((e = device_index(name, &index)) || (e = device_path(index, &path)))
		return e;
	dev = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, 0, NULL, OPEN_EXISTING, 0, NULL);
	free(path);
	if (dev == INVALID_HANDLE_VALUE)
		/* The driver gives the region to one handle: another process has it. */
		return GetLastError() == ERROR_ACCESS_DENIED || GetLastError() == ERROR_SHARING_VIOLATION ? -EBUSY
													  : -ENODEV;
	if (!DeviceIoControl(dev, IOCTL_IVSHMEM_REQUEST_SIZE, NULL, 0, &size, sizeof(size), &got, NULL) ||
	    got != sizeof(size) || size < min_bytes) {
		CloseHandle(dev);
		return -EPROTO;
	}
	if (!DeviceIoControl(dev, IOCTL_IVSHMEM_REQUEST_MMAP, &config, sizeof(config), &map, sizeof(map), &got, NULL) ||
	    got != sizeof(map) || !map.ptr || map.size != size) {
		CloseHandle(dev);
		return -EBUSY;
	}
	/* section 0: a device's mapping, not a file's (ivshmem_unmap). */
	*m = (struct qc_os_map){ .va = map.ptr, .bytes = map.size, .fd = (intptr_t)dev, .section = 0 };
	return 0;
}

void ivshmem_unmap(struct qc_os_map *m)
{
	DWORD got;

	DeviceIoControl((HANDLE)m->fd, IOCTL_IVSHMEM_RELEASE_MMAP, NULL, 0, NULL, 0, &got, NULL);
	CloseHandle((HANDLE)m->fd);
	m->va = NULL;
}
