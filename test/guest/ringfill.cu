// ringfill: one process cannot starve the others. A host function that
// blocks (on a pipe) holds back its stream; many threads then synchronize
// on that stream, each call waiting in the device. Natively other processes
// carry on; in a guest each such call holds a virtqueue slot, and the driver
// bounds the slots one file may hold, so another process's calls still go
// through. No kernels: runs on every device.
//
//   ringfill                 300 threads (more than the driver lets one file
//                            have in flight); a second process (this program,
//                            "probe 1") must complete; then the host function
//                            is released and every sync must succeed
//   ringfill hold N MIB      allocates MIB MiB, blocks N threads the same way,
//                            prints "ringfill: holding" and waits to be killed
//   ringfill probe MIB       allocates MIB MiB (waiting up to 30 s for that
//                            much to be free), copies through it, frees it
//
// The last two are for test/vm/vm-isolation.test.ts (a full ring, then SIGKILL).
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "qctest.h"

static int gate[2]; // the host function reads one byte from gate[0]
static int started, synced_ok;

static void CUDART_CB blocked_fn(void *arg)
{
	char c;

	(void)arg;
	while (read(gate[0], &c, 1) < 0)
		;
}

static void *sync_thread(void *arg)
{
	cudaStream_t s = (cudaStream_t)arg;

	__atomic_add_fetch(&started, 1, __ATOMIC_RELAXED);
	if (cudaStreamSynchronize(s) == cudaSuccess)
		__atomic_add_fetch(&synced_ok, 1, __ATOMIC_RELAXED);
	return NULL;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Blocks stream s behind a host function and starts n threads syncing on it;
// returns once each has entered its call (and a little more, for the calls
// to reach the device).
static bool block_stream(cudaStream_t s, int n, pthread_t *t)
{
	pthread_attr_t attr;
	bool ok = true;
	int i;

	if (pipe(gate))
		return false;
	ok &= OK(cudaLaunchHostFunc(s, blocked_fn, NULL));
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 128 << 10);
	for (i = 0; i < n; i++)
		ok &= qt_quiet(pthread_create(&t[i], &attr, sync_thread, s) == 0, "thread %d started", i);
	pthread_attr_destroy(&attr);
	while (__atomic_load_n(&started, __ATOMIC_RELAXED) < n)
		usleep(10000);
	sleep(3);
	return ok;
}

static int probe(size_t mib)
{
	size_t size = mib << 20;
	unsigned char *host = (unsigned char *)malloc(size), *back = (unsigned char *)malloc(size);
	void *dev = NULL;

	qt_begin("ringfill_probe");
	qt_fill(host, size, mib);
	// A process killed just before may still have its memory: a dead
	// process's is given back soon after it is gone, natively too.
	for (double end = now() + 30; now() < end; usleep(100000)) {
		size_t free_ = 0, total = 0;

		if (cudaMemGetInfo(&free_, &total) != cudaSuccess || free_ >= size)
			break;
	}
	EXPECT(cudaMalloc(&dev, size), cudaSuccess);
	EXPECT(cudaMemcpy(dev, host, size, cudaMemcpyHostToDevice), cudaSuccess);
	EXPECT(cudaMemcpy(back, dev, size, cudaMemcpyDeviceToHost), cudaSuccess);
	qt_check(qt_diff(host, back, size) < 0, "the data came back");
	EXPECT(cudaFree(dev), cudaSuccess);
	return qt_end();
}

static int hold(int n, size_t mib)
{
	pthread_t *t = (pthread_t *)calloc(n, sizeof(*t));
	cudaStream_t s;
	void *dev = NULL;

	qt_begin("ringfill_hold");
	EXPECT(cudaMalloc(&dev, mib << 20), cudaSuccess);
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	if (block_stream(s, n, t))
		printf("ringfill: holding\n");
	for (;;)
		pause();
}

int main(int argc, char **argv)
{
	const int n = 300;
	pthread_t t[n];
	cudaStream_t s;
	pid_t pid;
	int st = -1, i;
	bool done = false;

	if (argc == 3 && !strcmp(argv[1], "probe"))
		return probe(strtoul(argv[2], NULL, 0));
	if (argc == 4 && !strcmp(argv[1], "hold"))
		return hold(atoi(argv[2]), strtoul(argv[3], NULL, 0));
	qt_begin("ringfill");
	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	qt_check(block_stream(s, n, t), "300 threads wait on a stream held by a host function");

	pid = fork();
	if (pid == 0) {
		execl("/proc/self/exe", argv[0], "probe", "1", (char *)NULL);
		_exit(127);
	}
	for (double end = now() + 120; !done && now() < end; usleep(20000))
		done = waitpid(pid, &st, WNOHANG) == pid;
	qt_check(done, "another process's calls complete meanwhile");
	qt_check(write(gate[1], "g", 1) == 1, "the host function is released");
	if (!done)
		waitpid(pid, &st, 0);
	qt_check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "that process passed");
	for (i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	qt_check(synced_ok == n, "every sync succeeded once the host function returned (%d of %d)", synced_ok, n);
	EXPECT(cudaStreamDestroy(s), cudaSuccess);
	return qt_end();
}
