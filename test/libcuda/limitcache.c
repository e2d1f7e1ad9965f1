/* SPDX-License-Identifier: MIT */
/*
 * Context limits asked again and again, as libraries ask before each
 * launch (PyTorch: CU_LIMIT_CIG_ENABLED): the answers stay right across a set and a reset (test/run counts
 * the round trips under qcuda: the guest library keeps them once asked).
 */
#include "check.h"

#define ASKS 1000

int main(void)
{
	size_t v = 0, w = 0;
	int same = 1;

	primary_context();
	OK(cuCtxGetLimit(&v, CU_LIMIT_PRINTF_FIFO_SIZE));
	for (int i = 0; i < ASKS; i++)
		same &= cuCtxGetLimit(&w, CU_LIMIT_PRINTF_FIFO_SIZE) == CUDA_SUCCESS && w == v;
	check(same, "%d asks of the printf FIFO's size give the same answer", ASKS);
	same = 1;
	for (int i = 0; i < ASKS; i++)
		same &= cuCtxGetLimit(&w, CU_LIMIT_CIG_ENABLED) == CUDA_SUCCESS && w == 0;
	check(same, "%d asks of CU_LIMIT_CIG_ENABLED: 0, not a CIG context", ASKS);
	OK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 2 * v));
	OK(cuCtxGetLimit(&w, CU_LIMIT_PRINTF_FIFO_SIZE));
	check(w == 2 * v, "after a set, the new size (%zu)", w);
	OK(cuCtxGetLimit(&w, CU_LIMIT_MALLOC_HEAP_SIZE));
	OK(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, w + (1 << 20)));
	OK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
	check(v == w + (1 << 20), "the heap's size set and read back");
	OK(cuDevicePrimaryCtxReset(0));
	primary_context();
	OK(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE));
	check(v == w, "after a reset, the default again");
	return finish("limitcache");
}
