// SPDX-License-Identifier: MIT
// stuck: a process killed while it waits on a kernel that does not end. A
// child allocates 1 GiB, launches a kernel that spins for a minute and
// synchronizes; the parent kills it. Natively the driver tears the context
// down at once. In a guest the child's worker is held in the driver, where
// its session's close cannot reach it, so the backend must end that worker
// (device.ts, the owner watch) for the close to be answered: the parent
// checks that the 1 GiB comes back and that its own kernels still run.
// Needs kernels (a GPU); qcuda's test run on the GPU runs it beside native.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "qctest.h"

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

// Holds 1 GiB, starts a minute-long kernel, says so on fd, then waits for it.
static int child(int fd)
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
	cudaDeviceSynchronize(); // killed while waiting here
	return 5;
}

int main(void)
{
	size_t held = 0, now = 0, total = 0;
	int fds[2], status = 0;
	char ready = 0;
	pid_t pid;

	if (pipe(fds) != 0)
		return qt_check(false, "a pipe"), qt_end();
	pid = fork(); // before this process touches CUDA: the child starts its own
	if (pid == 0) {
		close(fds[0]);
		_exit(child(fds[1]));
	}
	close(fds[1]);
	qt_check(pid > 0 && read(fds[0], &ready, 1) == 1 && ready == 1,
		 "the child holds 1 GiB and waits on a kernel that runs for a minute");
	EXPECT(cudaMemGetInfo(&held, &total), cudaSuccess);
	if (pid > 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &status, 0);
	}
	qt_check(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "the child was killed");

	// Its memory comes back once its context is gone.
	double t0 = seconds();
	while (cudaMemGetInfo(&now, &total) == cudaSuccess && now < held + GIB - (64u << 20) &&
	       seconds() - t0 < 45)
		usleep(100 * 1000);
	qt_check(now >= held + GIB - (64u << 20), "the killed child's 1 GiB came back");

	// This process's own kernels run.
	int *d = NULL, h = 0;
	EXPECT(cudaMalloc(&d, sizeof(int)), cudaSuccess);
	put<<<1, 1>>>(d, 42);
	EXPECT(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(h == 42, "a kernel of this process ran after it");
	EXPECT(cudaFree(d), cudaSuccess);
	return qt_end();
}
