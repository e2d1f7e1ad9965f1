// A process killed in the middle of a large copy leaves no device memory
// behind: a child (a fresh process: this program re-executed) allocates
// 256 MiB and copies into it in a loop; the parent SIGKILLs it mid-copy and
// waits until cudaMemGetInfo shows the memory back. Natively the driver
// frees the dead process's memory; in a guest the qcuda driver closes the
// session and the backend frees it.
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "qctest.h"

#define SIZE (256ul << 20)
#define SLACK (64ul << 20) /* other contexts may come and go meanwhile */

static int child(int ready_fd)
{
	void *dev, *host = malloc(SIZE);
	memset(host, 0x5a, SIZE);
	if (cudaMalloc(&dev, SIZE) != cudaSuccess)
		return 2;
	for (unsigned long i = 0;; i++) {
		if (cudaMemcpy(dev, host, SIZE, cudaMemcpyHostToDevice) != cudaSuccess)
			return 3;
		if (i == 0 && write(ready_fd, "r", 1) != 1)
			return 4; // copies keep running after this
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--child") == 0)
		return child(atoi(argv[2]));
	qt_begin("killcopy");
	size_t free0, free1, total;
	OK(cudaMemGetInfo(&free0, &total));
	int p[2];
	if (pipe(p))
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		char fd[16];
		close(p[0]);
		snprintf(fd, sizeof(fd), "%d", p[1]);
		execl("/proc/self/exe", argv[0], "--child", fd, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	char c;
	qt_check(read(p[0], &c, 1) == 1, "child allocated and is copying");
	OK(cudaMemGetInfo(&free1, &total));
	qt_check(free1 + SIZE <= free0 + SLACK, "the child's 256 MiB shows as used");
	usleep(20000); // somewhere inside a later 256 MiB copy
	kill(pid, SIGKILL);
	int st;
	waitpid(pid, &st, 0);
	qt_check(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child killed by SIGKILL");
	bool back = false;
	for (double end = now() + 10; !back && now() < end; usleep(20000)) {
		OK(cudaMemGetInfo(&free1, &total));
		back = free1 + SLACK >= free0;
	}
	qt_check(back, "device memory returned after the kill");
	return qt_end();
}
