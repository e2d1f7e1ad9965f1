// SPDX-License-Identifier: MIT
// stuck: a process killed while it waits on a kernel that does not end. A
// child allocates 1 GiB, launches a kernel that spins for a minute, then
// waits behind it: in a synchronize, in a launch once the GPU's launch
// queue is full, or in cudaFree; the parent kills it. Natively the driver
// tears the context down at once. In a guest the child's worker waits too:
// its thread free (the wait handed on), or held in the driver, where its
// session's close cannot reach it, so that the backend must end that worker
// (qcuda/workers/delegation.ts, the worker watch) for the close to be answered. The parent
// checks that the 1 GiB comes back each time and that its own kernels run.
// Needs kernels: on a device without (the emu provider) it says SKIP;
// qcuda's GPU run (test/gpu/run.sh) runs it beside native.
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qctest.h"

extern char **environ;

#define GIB (1ull << 30)

__device__ unsigned long long gtimer(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

__global__ void spin(unsigned long long ns)
{
	unsigned long long t0 = gtimer();

	while (gtimer() - t0 < ns) {
	}
}

__global__ void put(int *p, int v)
{
	*p = v;
}

static double seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// How a child waits behind its endless kernel.
enum wait_in {
	IN_SYNC, /* cudaDeviceSynchronize: the worker hands the wait on */
	IN_LAUNCH, /* a launch, the GPU's launch queue full */
	IN_FREE, /* cudaFree, which waits for the GPU (the worker's own thread too) */
};
static const char *const WAIT_NAMES[] = { "in a synchronize", "in a launch behind it", "in cudaFree" };

// Holds 1 GiB, starts a minute-long kernel, says so on fd, then waits as
// told: in a guest the worker's thread that makes the same driver call
// waits with it, or hands the wait on.
static int child(int fd, enum wait_in how)
{
	void *big = NULL, *small = NULL;
	char ready = 1;

	if (cudaMalloc(&big, GIB) != cudaSuccess || cudaMalloc(&small, 4096) != cudaSuccess)
		return 2;
	spin<<<1, 1>>>(60ull * 1000000000ull);
	if (cudaGetLastError() != cudaSuccess)
		return 3;
	(void)cudaStreamQuery(0); // a call: posted work (the launch) goes out first
	if (write(fd, &ready, 1) != 1)
		return 4;
	if (how == IN_LAUNCH)
		for (int i = 0; i < 1000000; i++)
			spin<<<1, 1>>>(0);
	if (how == IN_FREE)
		cudaFree(small);
	cudaDeviceSynchronize(); // killed while waiting here (or before)
	return 5;
}

// A child killed while it waits: its 1 GiB comes back.
static void round_of(enum wait_in how)
{
	size_t held = 0, now = 0, total = 0;
	int fds[2], status = 0;
	char ready = 0;
	pid_t pid;

	if (pipe(fds) != 0) {
		qt_check(false, "a pipe");
		return;
	}
	// A new program, not a fork: CUDA does not carry across fork().
	char fd[16], *argv[] = { (char *)"/proc/self/exe", (char *)"--child", fd, NULL };
	snprintf(fd, sizeof(fd), "%d:%d", fds[1], (int)how);
	fflush(stdout);
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0)
		pid = -1;
	close(fds[1]);
	qt_check(pid > 0 && read(fds[0], &ready, 1) == 1 && ready == 1,
		 "the child holds 1 GiB and a kernel that runs for a minute");
	close(fds[0]);
	usleep(2000 * 1000); // the child is waiting by now (its launches have filled the GPU's queue)
	EXPECT(cudaMemGetInfo(&held, &total), cudaSuccess);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	qt_check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child, waiting %s, was killed",
		 WAIT_NAMES[how]);

	// Its memory comes back once its context is gone.
	double t0 = seconds();
	while (cudaMemGetInfo(&now, &total) == cudaSuccess && now < held + GIB - (64u << 20) && seconds() - t0 < 45)
		usleep(100 * 1000);
	qt_check(now >= held + GIB - (64u << 20), "the killed child's 1 GiB came back");
}

int main(int argc, char **argv)
{
	int fd, how;

	if (argc == 3 && !strcmp(argv[1], "--child") && sscanf(argv[2], "%d:%d", &fd, &how) == 2)
		return child(fd, (enum wait_in)how);
	qt_begin("stuck");
	int *d = NULL, h = 0;
	EXPECT(cudaMalloc(&d, sizeof(int)), cudaSuccess);
	put<<<1, 1>>>(d, 7);
	FIRST_KERNEL_USE(cudaGetLastError());

	round_of(IN_SYNC);
	round_of(IN_LAUNCH);
	round_of(IN_FREE);

	// This process's own kernels run.
	put<<<1, 1>>>(d, 42);
	EXPECT(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == 42, "a kernel of this process ran after them");
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
