// SPDX-License-Identifier: MIT
// stuck: a process killed while it waits on a kernel that does not end. A
// child allocates 1 GiB, launches a kernel that spins for a minute, then
// synchronizes, or launches on until the GPU's launch queue is full and a
// launch blocks; the parent kills it. Natively the driver tears the context
// down at once. In a guest the child's worker waits too: on the kernel (its
// thread free, the wait handed on), or held in the driver in a launch, where
// its session's close cannot reach it, so the backend must end that worker
// (device.ts, the owner watch) for the close to be answered. The parent
// checks that the 1 GiB comes back each time and that its own kernels run.
// Needs kernels (a GPU); qcuda's test run on the GPU runs it beside native.
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

// Holds 1 GiB, starts a minute-long kernel, says so on fd, then waits: for
// the kernel (a synchronize), or, flooding, in a launch (the GPU's launch
// queue fills up behind the endless kernel, and the thread that launches,
// in a guest the worker's, blocks in the driver).
static int child(int fd, int flood)
{
	void *big = NULL;
	char ready = 1;

	if (cudaMalloc(&big, GIB) != cudaSuccess)
		return 2;
	spin<<<1, 1>>>(60ull * 1000000000ull);
	if (cudaGetLastError() != cudaSuccess)
		return 3;
	(void)cudaStreamQuery(0); // a call: posted work (the launch) goes out first
	if (write(fd, &ready, 1) != 1)
		return 4;
	if (flood)
		for (int i = 0; i < 1000000; i++)
			spin<<<1, 1>>>(0);
	cudaDeviceSynchronize(); // killed while waiting here (or in a launch)
	return 5;
}

// A child killed while it waits: its 1 GiB comes back.
static void round_of(int flood)
{
	const char *how = flood ? "in a launch behind it" : "on it";
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
	snprintf(fd, sizeof(fd), "%d%s", fds[1], flood ? "f" : "");
	fflush(stdout);
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0)
		pid = -1;
	close(fds[1]);
	qt_check(pid > 0 && read(fds[0], &ready, 1) == 1 && ready == 1,
		 "the child holds 1 GiB and a kernel that runs for a minute");
	close(fds[0]);
	usleep(2000 * 1000); // the child is waiting (its launches have filled the GPU's queue)
	EXPECT(cudaMemGetInfo(&held, &total), cudaSuccess);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	qt_check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child, waiting %s, was killed", how);

	// Its memory comes back once its context is gone.
	double t0 = seconds();
	while (cudaMemGetInfo(&now, &total) == cudaSuccess && now < held + GIB - (64u << 20) &&
	       seconds() - t0 < 45)
		usleep(100 * 1000);
	qt_check(now >= held + GIB - (64u << 20), "the killed child's 1 GiB came back");
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "--child"))
		return child(atoi(argv[2]), strchr(argv[2], 'f') != NULL);
	round_of(0);
	round_of(1);

	// This process's own kernels run.
	int *d = NULL, h = 0;
	EXPECT(cudaMalloc(&d, sizeof(int)), cudaSuccess);
	put<<<1, 1>>>(d, 42);
	EXPECT(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == 42, "a kernel of this process ran after them");
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
