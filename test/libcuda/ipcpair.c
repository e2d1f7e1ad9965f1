// SPDX-License-Identifier: MIT
// IPC memory handles between two processes of one VM (qcuda run's test):
// the parent allocates and writes, passes the handle's bytes to a child it
// forks and execs (as hex on its command line); the child opens it, reads
// the parent's bytes and writes its own, which the parent then reads. The
// refusals: a pointer inside an allocation, the owner opening its own
// handle, forged bytes, the opener's cuMemFree, a freed allocation's handle.
// An event handle the same way: the parent's interprocess event, recorded,
// opened by the child, which waits on it, synchronizes and queries it; an
// event made without CU_EVENT_INTERPROCESS has no handle.
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

/* A handle's 64 bytes (CUipcMemHandle or CUipcEventHandle) as hex, and back. */
static void to_hex(const char *reserved, char *out)
{
	for (size_t i = 0; i < CU_IPC_HANDLE_SIZE; i++)
		sprintf(out + 2 * i, "%02x", (unsigned char)reserved[i]);
}

static void from_hex(const char *s, char *reserved)
{
	memset(reserved, 0, CU_IPC_HANDLE_SIZE);
	for (size_t i = 0; i < CU_IPC_HANDLE_SIZE && s[2 * i] && s[2 * i + 1]; i++) {
		unsigned int b = 0;

		sscanf(s + 2 * i, "%2x", &b);
		reserved[i] = (char)b;
	}
}

/* The opener of the parent's event: waits on it, synchronizes and queries it, destroys its own. */
static void child_event(const char *hex)
{
	CUipcEventHandle h;
	CUevent e = NULL;

	from_hex(hex, h.reserved);
	check(cuIpcOpenEventHandle(&e, h) == CUDA_SUCCESS, "child: opens the parent's event handle");
	check(cuStreamWaitEvent(NULL, e, 0) == CUDA_SUCCESS, "child: waits on it");
	check(cuEventSynchronize(e) == CUDA_SUCCESS && cuEventQuery(e) == CUDA_SUCCESS,
	      "child: synchronizes and queries it");
	check(cuEventDestroy(e) == CUDA_SUCCESS, "child: destroys its event");
}

/* The opener: reads the owner's bytes, writes its own. */
static int child(const char *hex, const char *event_hex)
{
	unsigned char buf[SIZE];
	CUipcMemHandle h, forged;
	CUdeviceptr p = 0;

	primary_context();
	from_hex(hex, h.reserved);
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
	child_event(event_hex);
	return failed ? 1 : 0;
}

/* A handle of freed memory opens nowhere. */
static int freed(const char *hex)
{
	CUipcMemHandle h;
	CUdeviceptr p = 0;

	primary_context();
	from_hex(hex, h.reserved);
	check(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) != CUDA_SUCCESS,
	      "child: a freed allocation's handle is refused");
	return failed ? 1 : 0;
}

static int spawn(const char *self, const char *role, const char *hex, const char *event_hex)
{
	int st = 0;
	pid_t pid = fork();

	if (pid == 0) {
		execl("/proc/self/exe", self, role, hex, event_hex, (char *)NULL);
		_exit(127);
	}
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

int main(int argc, char **argv)
{
	unsigned char buf[SIZE];
	char hex[2 * CU_IPC_HANDLE_SIZE + 1], event_hex[2 * CU_IPC_HANDLE_SIZE + 1];
	CUipcMemHandle h, other;
	CUipcEventHandle eh;
	CUevent ev = NULL, timed = NULL, mine = NULL;
	CUdeviceptr a = 0, p = 0;

	if (argc > 3 && !strcmp(argv[1], "child"))
		return child(argv[2], argv[3]);
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
	check(cuEventCreate(&timed, CU_EVENT_DEFAULT) == CUDA_SUCCESS &&
		      cuIpcGetEventHandle(&eh, timed) != CUDA_SUCCESS,
	      "parent: no handle of an event made without CU_EVENT_INTERPROCESS");
	check(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
		      cuEventRecord(ev, NULL) == CUDA_SUCCESS && cuIpcGetEventHandle(&eh, ev) == CUDA_SUCCESS,
	      "parent: gets an interprocess event's handle");
	check(cuIpcOpenEventHandle(&mine, eh) == CUDA_ERROR_INVALID_CONTEXT,
	      "parent: opening its own event handle is an invalid context");
	to_hex(h.reserved, hex);
	to_hex(eh.reserved, event_hex);
	check(spawn(argv[0], "child", hex, event_hex) == 0,
	      "a child opened the handles, read and wrote, waited on the event");
	memset(buf, 0, SIZE);
	check(cuMemcpyDtoH(buf, a, SIZE) == CUDA_SUCCESS && all(buf, 0xa5), "parent: reads the child's bytes");
	check(cuMemFree(a) == CUDA_SUCCESS, "parent: frees it");
	check(spawn(argv[0], "freed", hex, "") == 0, "a child cannot open the freed allocation's handle");
	printf("%s: ipcpair\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
