// SPDX-License-Identifier: MIT
// A CUDA process whose children use CUDA too (qcuda run's test): the parent
// holds device memory; a child it forks and execs (this program again, with
// "child") opens a session of its own, where the quota counts what the
// parent holds; a child that forks without exec cannot use the parent's
// CUDA (as natively) and cannot harm it. Sizes in MiB: forkquota HOLD TRY,
// run with a quota between HOLD and HOLD + TRY. Prints PASS or FAIL lines;
// exits 0 only if every check passed.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* The exec'd child: a session of its own, under the same quota. */
static int child(size_t try_mib)
{
	CUdeviceptr p = 0;

	primary_context();
	check(cuMemAlloc(&p, try_mib << 20) == CUDA_ERROR_OUT_OF_MEMORY,
	      "child: an allocation past what the parent left of the quota is refused");
	check(cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS, "child: a small one fits");
	return failed ? 1 : 0;
}

static int wait_for(pid_t pid)
{
	int st = 0;

	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 255;
}

int main(int argc, char **argv)
{
	size_t hold = argc > 2 ? strtoull(argv[argc - 2], NULL, 10) : 48;
	size_t try_mib = argc > 2 ? strtoull(argv[argc - 1], NULL, 10) : 32;
	unsigned char out[4096], in[4096];
	CUdeviceptr held = 0;
	pid_t pid;

	if (argc > 1 && !strcmp(argv[1], "child"))
		return child(try_mib);
	primary_context();
	check(cuMemAlloc(&held, hold << 20) == CUDA_SUCCESS, "parent: holds its memory");
	memset(out, 0x5a, sizeof(out));
	check(cuMemcpyHtoD(held, out, sizeof(out)) == CUDA_SUCCESS, "parent: writes it");

	char h[32], t[32];
	snprintf(h, sizeof(h), "%zu", hold);
	snprintf(t, sizeof(t), "%zu", try_mib);
	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "child", h, t, (char *)NULL);
		_exit(127);
	}
	check(wait_for(pid) == 0, "a forked and exec'd child used CUDA in a session of its own");

	pid = fork();
	if (pid == 0) {
		CUdeviceptr p = 0;

		/* The parent's rings and session are not the child's. */
		_exit(cuMemAlloc(&p, 1 << 20) == CUDA_SUCCESS ? 1 : 0);
	}
	check(wait_for(pid) == 0, "a forked child without exec cannot use the parent's CUDA");

	memset(in, 0, sizeof(in));
	check(cuMemcpyDtoH(in, held, sizeof(in)) == CUDA_SUCCESS && !memcmp(in, out, sizeof(in)),
	      "parent: its memory is intact after both children");
	check(cuMemFree(held) == CUDA_SUCCESS, "parent: frees it");
	printf("%s: forkquota\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}
