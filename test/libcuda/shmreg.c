/* SPDX-License-Identifier: MIT */
/*
 * shmreg: a shared file mapping registered with cuMemHostRegister stays
 * shared, as NCCL's SHM transport needs (it registers a /dev/shm file that
 * two ranks map, and each GPU writes where the other's reads). Two mappings
 * of one memfd stand for the two processes: the first is registered, and
 * what is written through either, by the CPU or by a copy from the device,
 * is seen through the other. Prints ok/FAIL lines and ends with PASS or FAIL.
 */
#define _GNU_SOURCE
#include <cuda.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#define SIZE (1u << 20)

static int all(const unsigned char *p, unsigned char v)
{
	for (size_t i = 0; i < SIZE; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

int main(void)
{
	unsigned char *reg, *other, *buf = malloc(SIZE);
	CUdeviceptr d = 0;
	int fd;

	setvbuf(stdout, NULL, _IOLBF, 0);
	primary_context();
	fd = memfd_create("shmreg", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, SIZE) || !buf) {
		printf("FAIL no shared file\n");
		return 1;
	}
	reg = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	other = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (reg == MAP_FAILED || other == MAP_FAILED) {
		printf("FAIL mmap\n");
		return 1;
	}
	memset(reg, 0x11, SIZE);
	OK(cuMemHostRegister(reg, SIZE, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
	check(all(other, 0x11), "the bytes written before registering are there");
	memset(other, 0x22, SIZE);
	check(all(reg, 0x22), "a CPU write through the other mapping is seen in the registered one");
	memset(reg, 0x33, SIZE);
	check(all(other, 0x33), "a CPU write to the registered mapping is seen through the other");

	OK(cuMemAlloc(&d, SIZE));
	OK(cuMemcpyHtoD(d, reg, SIZE));
	OK(cuMemcpyDtoH(buf, d, SIZE));
	check(all(buf, 0x33), "a copy from the registered mapping to the device");
	OK(cuMemsetD8(d, 0x44, SIZE));
	OK(cuMemcpyDtoH(reg, d, SIZE));
	check(all(other, 0x44), "a copy from the device into the registered mapping is seen through the other");
	OK(cuMemHostUnregister(reg));
	memset(other, 0x55, SIZE);
	check(all(reg, 0x55), "still one file after unregistering");
	OK(cuMemFree(d));
	munmap(reg, SIZE);
	munmap(other, SIZE);
	close(fd);
	free(buf);
	return finish("shmreg");
}
