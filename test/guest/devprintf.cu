// SPDX-License-Identifier: MIT
// devprintf (not "printf", which the shell's builtin would shadow): device-
// side printf and assert output reaches the program's stdout and stderr
// where CUDA puts it. Every kernel prints from one thread, and
// the host prints nothing between a launch and the synchronizing call that
// follows it (cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, a blocking cudaMemcpy, cudaDeviceReset), so the
// device lines fall at the same place among the host lines in every run,
// even though the driver may print them from a thread of its own before that
// call. Then: more than 100 KiB from one kernel, a child process that
// launches, sleeps and exits without any synchronizing call, and last a
// failing device assert: its line on stderr, cudaErrorAssert from the sync,
// sticky after.
#include <assert.h>
#include <spawn.h>
#include <sys/wait.h>

#include "qctest.h"

extern char **environ;

#define BIG_LINES 2000 /* about 130 KiB of output */
#define QT_STR2(x) #x
#define QT_STR(x) QT_STR2(x)

__global__ void say_ints(int i, long long ll, unsigned int u)
{
	printf("device: int %d, long long %lld, unsigned %u, hex %#x\n", i, ll, u, u);
}

__global__ void say_floats(float f, double d)
{
	printf("device: float %.3f, double %.9e, %g\n", f, d, d);
}

__global__ void say_strings(void)
{
	printf("device: string \"%s\", char '%c', percent %%, padded [%8s] [%-6d]\n", "qcuda", 'Q', "right", 42);
}

__global__ void square(int *p, int x)
{
	*p = x * x;
	printf("device: %d squared is %d\n", x, x * x);
}

__global__ void many_lines(int n)
{
	for (int i = 0; i < n; i++)
		printf("device: line %05d of %d: 0123456789abcdefghijklmnopqrstuvwxyz\n", i, n);
}

__global__ void assert_zero(int x)
{
	assert(x == 0);
}

/* A separate process that launches, sleeps and exits without a synchronizing
 * call. CUDA does not flush device output at exit (the programming guide says
 * so), but the driver's own thread prints it while the process sleeps
 * (measured on the H100); in a guest it comes by the exit at the latest. */
static int exit_child(void)
{
	printf("child: launching, then sleeping and exiting without a sync\n");
	fflush(stdout);
	say_ints<<<1, 1>>>(-7, 1ll << 40, 7u);
	usleep(1000 * 1000);
	return 0;
}

static void run_exit_child(const char *self)
{
	char *argv[] = { (char *)self, (char *)"--exit-child", NULL };
	int status = 0;
	pid_t pid;

	fflush(stdout);
	if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0) {
		qt_check(false, "spawned the exit child");
		return;
	}
	waitpid(pid, &status, 0);
	qt_check(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the exit child exited with status 0");
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--exit-child"))
		return exit_child();

	cudaStream_t s;
	cudaEvent_t ev;
	int *d = NULL, h = 0;

	qt_begin("devprintf");
	say_ints<<<1, 1>>>(-123, -9000000000ll, 4000000000u);
	cudaError_t launched = cudaGetLastError();
	cudaError_t synced = cudaDeviceSynchronize();
	FIRST_KERNEL_USE(launched);
	qt_expect(synced, cudaSuccess, "cudaDeviceSynchronize() after say_ints");

	EXPECT(cudaStreamCreate(&s), cudaSuccess);
	say_floats<<<1, 1, 0, s>>>(3.14159f, 2.718281828459045);
	synced = cudaStreamSynchronize(s);
	qt_expect(synced, cudaSuccess, "cudaStreamSynchronize(s) after say_floats");

	EXPECT(cudaEventCreate(&ev), cudaSuccess);
	say_strings<<<1, 1, 0, s>>>();
	cudaError_t recorded = cudaEventRecord(ev, s);
	synced = cudaEventSynchronize(ev);
	qt_expect(recorded, cudaSuccess, "cudaEventRecord(ev, s) after say_strings");
	qt_expect(synced, cudaSuccess, "cudaEventSynchronize(ev)");

	EXPECT(cudaMalloc(&d, sizeof(int)), cudaSuccess);
	square<<<1, 1>>>(d, 12);
	cudaError_t copied = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
	qt_expect(copied, cudaSuccess, "blocking cudaMemcpy after square");
	qt_check(h == 144, "the kernel wrote 144 (got %d)", h);

	many_lines<<<1, 1>>>(BIG_LINES);
	synced = cudaDeviceSynchronize();
	qt_expect(synced, cudaSuccess, "cudaDeviceSynchronize() after " QT_STR(BIG_LINES) " device lines");

	say_ints<<<1, 1>>>(1, 2, 3);
	cudaError_t reset = cudaDeviceReset();
	qt_expect(reset, cudaSuccess, "cudaDeviceReset() right after a launch (it prints the output)");

	run_exit_child(argv[0]);

	say_strings<<<1, 1>>>();
	synced = cudaDeviceSynchronize();
	qt_expect(synced, cudaSuccess, "cudaDeviceSynchronize() after a reset and say_strings");
	assert_zero<<<1, 1>>>(1);
	launched = cudaGetLastError();
	synced = cudaDeviceSynchronize();
	qt_expect(launched, cudaSuccess, "launch of a kernel whose assert fails");
	printf("sync after the failed device assert: %s\n", cudaGetErrorName(synced));
	qt_expect(synced, cudaErrorAssert, "cudaDeviceSynchronize() after the failed assert");
	EXPECT(cudaMalloc(&d, 16), cudaErrorAssert);
	return qt_end();
}
