// sessionend: a process that used a host function ends like any other: it
// allocates 48 MiB, runs a host function, resets the device (a host function
// launched right after the reset runs too), allocates 48 MiB again and exits
// without freeing anything. Natively the driver frees what it held at exit;
// in a guest the callback thread keeps a CALLBACK_WAIT parked in the backend
// all along, and the driver must still close the session at exit: run three
// times in a row under a 64 MiB quota (test/vm/vm-isolation.test.ts), each
// run finds the memory of the one before back. No kernels: runs on every
// device.
#include "qctest.h"

#define SIZE (48ul << 20)

static void CUDART_CB count_fn(void *arg)
{
	__atomic_add_fetch((int *)arg, 1, __ATOMIC_RELAXED);
}

int main(void)
{
	static int ran;
	void *a = NULL, *b = NULL;

	qt_begin("sessionend");
	EXPECT(cudaMalloc(&a, SIZE), cudaSuccess);
	EXPECT(cudaMemset(a, 0x5a, SIZE), cudaSuccess);
	EXPECT(cudaLaunchHostFunc(0, count_fn, &ran), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	qt_check(ran == 1, "the host function ran before the sync returned");

	// The reset frees the 48 MiB; the callback thread, parked across it,
	// still runs what is launched after it.
	EXPECT(cudaDeviceReset(), cudaSuccess);
	EXPECT(cudaLaunchHostFunc(0, count_fn, &ran), cudaSuccess);
	EXPECT(cudaDeviceSynchronize(), cudaSuccess);
	qt_check(ran == 2, "a host function launched after cudaDeviceReset ran");
	EXPECT(cudaMalloc(&b, SIZE), cudaSuccess);
	EXPECT(cudaLaunchHostFunc(0, count_fn, &ran), cudaSuccess);
	EXPECT(cudaStreamSynchronize(0), cudaSuccess);
	qt_check(ran == 3, "and the next one too");
	// Exits holding b and the callback thread's parked wait.
	return qt_end();
}
