/* SPDX-License-Identifier: MIT */
/*
 * qc_os.h on Windows (mingw-w64): a file mapped with CreateFileMapping and
 * MapViewOfFile (under Wine a file in /dev/shm is Z:\dev\shm\..., and its
 * bytes are the Linux backend's), process ids through OpenProcess, Sleep
 * and QueryPerformanceCounter. A real VM's region is the IVSHMEM device's
 * memory instead (ivshmem_win32.c), which qc_os_map_file maps for its name.
 */
#include <errno.h>
#include <string.h>
#include <windows.h>

#include "ivshmem_win32.h"
#include "qc_os.h"

static int from_win32(DWORD e)
{
	switch (e) {
	case ERROR_FILE_NOT_FOUND:
	case ERROR_PATH_NOT_FOUND:
		return -ENOENT;
	case ERROR_ACCESS_DENIED:
		return -EACCES;
	case ERROR_NOT_ENOUGH_MEMORY:
		return -ENOMEM;
	default:
		return -EIO;
	}
}

const char *qc_os_default_region(void)
{
	return QC_IVSHMEM_NAME;
}

int qc_os_map_file(const char *path, uint64_t min_bytes, struct qc_os_map *m)
{
	HANDLE f, section;
	LARGE_INTEGER size;
	void *va;
	int e;

	if (strncmp(path, QC_IVSHMEM_NAME, strlen(QC_IVSHMEM_NAME)) == 0)
		return ivshmem_map(path, min_bytes, m);
	f = CreateFileA(path, GENERIC_READ | GENERIC_WRITE, FILE_SHARE_READ | FILE_SHARE_WRITE, NULL, OPEN_EXISTING,
			FILE_ATTRIBUTE_NORMAL, NULL);
	if (f == INVALID_HANDLE_VALUE)
		return from_win32(GetLastError());
	if (!GetFileSizeEx(f, &size) || size.QuadPart < 0 || (uint64_t)size.QuadPart < min_bytes) {
		CloseHandle(f);
		return -EPROTO;
	}
	section = CreateFileMappingA(f, NULL, PAGE_READWRITE, 0, 0, NULL);
	va = section ? MapViewOfFile(section, FILE_MAP_ALL_ACCESS, 0, 0, 0) : NULL;
	if (!va) {
		e = from_win32(GetLastError());
		if (section)
			CloseHandle(section);
		CloseHandle(f);
		return e;
	}
	*m = (struct qc_os_map){
		.va = va, .bytes = (uint64_t)size.QuadPart, .fd = (intptr_t)f, .section = (intptr_t)section
	};
	return 0;
}

void qc_os_unmap(struct qc_os_map *m)
{
	if (!m->section) {
		ivshmem_unmap(m);
		return;
	}
	UnmapViewOfFile(m->va);
	CloseHandle((HANDLE)m->section);
	CloseHandle((HANDLE)m->fd);
	m->va = NULL;
}

void qc_os_map_private_to_process(struct qc_os_map *m)
{
	/* Windows has no fork: nothing else inherits the view. */
}

int qc_os_is_socket(const char *path)
{
	return 0; /* no backend's socket is reachable from a Windows guest */
}

uint64_t qc_os_pid(void)
{
	return GetCurrentProcessId();
}

int qc_os_pid_gone(uint64_t pid)
{
	HANDLE h;
	int gone;

	if (pid == 0 || pid > 0xffffffffu)
		return 0;
	h = OpenProcess(SYNCHRONIZE, FALSE, (DWORD)pid);
	if (!h)
		return GetLastError() == ERROR_INVALID_PARAMETER; /* no such process */
	gone = WaitForSingleObject(h, 0) == WAIT_OBJECT_0;
	CloseHandle(h);
	return gone;
}

void qc_os_sleep_us(long us)
{
	/* Sleep counts milliseconds: shorter waits yield instead. */
	if (us < 1000)
		SwitchToThread();
	else
		Sleep((DWORD)(us / 1000));
}

uint64_t qc_os_now_ns(void)
{
	static LARGE_INTEGER freq;
	LARGE_INTEGER now;

	if (!freq.QuadPart)
		QueryPerformanceFrequency(&freq);
	QueryPerformanceCounter(&now);
	return (uint64_t)(now.QuadPart / freq.QuadPart) * 1000000000ull +
	       (uint64_t)(now.QuadPart % freq.QuadPart) * 1000000000ull / (uint64_t)freq.QuadPart;
}

/* VirtualQuery, region by region: committed, writable, not a guard page;
 * a mapped view (MEM_MAPPED) is shared. */
int qc_os_writable_range(const void *addr, uint64_t len, int *shared)
{
	const DWORD writable = PAGE_READWRITE | PAGE_WRITECOPY | PAGE_EXECUTE_READWRITE | PAGE_EXECUTE_WRITECOPY;
	uintptr_t a = (uintptr_t)addr, end = a + len;
	MEMORY_BASIC_INFORMATION mbi;

	*shared = 0;
	while (a < end) {
		if (!VirtualQuery((void *)a, &mbi, sizeof(mbi)) || mbi.State != MEM_COMMIT ||
		    !(mbi.Protect & writable) || (mbi.Protect & PAGE_GUARD))
			return -EFAULT;
		*shared |= mbi.Type == MEM_MAPPED;
		a = (uintptr_t)mbi.BaseAddress + mbi.RegionSize;
	}
	return 0;
}
