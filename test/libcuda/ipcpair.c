// SPDX-License-Identifier: MIT
// IPC memory handles between two processes of one VM (qcuda run's test):
// the parent allocates and writes, passes the handle's bytes to a child it
// forks and execs (as hex on its command line); the child opens it, reads
// the parent's bytes and writes its own, which the parent then reads. The
// refusals: a pointer inside an allocation, the owner opening its own
// handle, forged bytes, the opener's cuMemFree, a freed allocation's handle.
// Prints ok/FAIL lines and PASS or FAIL; exits 0 only if every check passed.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define SIZE 4096

static int all(const unsigned char *b, unsigned char v)
{
	for (int i = 0; i < SIZE; i++)
		if (b[i] != v)
			return 0;
	return 1;
}

static void to_hex(const CUipcMemHandle *h, char *out)
{
	for (size_t i = 0; i < sizeof(*h); i++)
		sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static void from_hex(const char *s, CUipcMemHandle *h)
{
	memset(h, 0, sizeof(*h));
	for (size_t i = 0; i < sizeof(*h) && s[2 * i] && s[2 * i + 1]; i++) {
		unsigned int b = 0;

		sscanf(s + 2 * i, "%2x", &b);
		h->reserved[i] = (char)b;
	}
}

/* The opener: reads the owner's bytes, writes its own. */
static int child(const char *hex)
{
	unsigned char buf[SIZE];
	CUipcMemHandle h, forged;
	CUdeviceptr p = 0;

	primary_context();
	from_hex(hex, &h);
	forged = h;
	forged.reserved[0] ^= 1;
	check(cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
	      "child: a forged handle is refused");
	CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);

	if (r != CUDA_SUCCESS)
		printf("cuIpcOpenMemHandle: %d\n", (int)r);
	check(r == CUDA_SUCCESS, "child: opens the parent's handle");
	check(cuMemcpyDtoH(buf, p, SIZE) == CUDA_SUCCESS && all(buf, 0x5a), "child: reads the parent's bytes");
	memset(buf, 0xa5, SIZE);
	check(cuMemcpyHtoD(p, buf, SIZE) == CUDA_SUCCESS, "child: writes its own");
	check(cuMemFree(p) != CUDA_SUCCESS, "child: cannot free the parent's memory");
	check(cuIpcCloseMemHandle(p) == CUDA_SUCCESS, "child: closes it");
	check(cuMemcpyDtoH(buf, p, 16) != CUDA_SUCCESS, "child: closed, it no longer reaches it");
	return failed ? 1 : 0;
}

/* A handle of freed memory opens nowhere. */
static int freed(const char *hex)
{
	CUipcMemHandle h;
	CUdeviceptr p = 0;

	primary_context();
	from_hex(hex, &h);
	check(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
	      "child: a freed allocation's handle is refused");
	return failed ? 1 : 0;
}

static int spawn(const char *self, const char *role, const char *hex)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", self, role, hex, (char *)NULL);
		_exit(127);
	}
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

int main(int argc, char **argv)
{
	unsigned char buf[SIZE];
	char hex[2 * sizeof(CUipcMemHandle) + 1];
	CUipcMemHandle h, other;
	CUdeviceptr a = 0, p = 0;

	if (argc > 2 && !strcmp(argv[1], "child"))
		return child(argv[2]);
	if (argc > 2 && !strcmp(argv[1], "freed"))
		return freed(argv[2]);
	primary_context();
	check(cuMemAlloc(&a, SIZE) == CUDA_SUCCESS, "parent: allocates");
	memset(buf, 0x5a, SIZE);
	check(cuMemcpyHtoD(a, buf, SIZE) == CUDA_SUCCESS, "parent: writes");
	check(cuIpcGetMemHandle(&h, a) == CUDA_SUCCESS, "parent: gets a handle");
	check(cuIpcGetMemHandle(&other, a + 16) != CUDA_SUCCESS, "parent: no handle of a pointer inside an allocation");
	check(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_ERROR_INVALID_CONTEXT,
	      "parent: opening its own handle is an invalid context");
	to_hex(&h, hex);
	check(spawn(argv[0], "child", hex) == 0, "a child opened the handle, read and wrote");
	memset(buf, 0, SIZE);
	check(cuMemcpyDtoH(buf, a, SIZE) == CUDA_SUCCESS && all(buf, 0xa5), "parent: reads the child's bytes");
	check(cuMemFree(a) == CUDA_SUCCESS, "parent: frees it");
	check(spawn(argv[0], "freed", hex) == 0, "a child cannot open the freed allocation's handle");
	printf("%s: ipcpair\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
