/* SPDX-License-Identifier: MIT */
/*
 * A graph replayed many times, as CUDA graphs are used (PyTorch's CUDA
 * graphs, torch.compile's reduce-overhead mode): eight memset and copy
 * nodes in a chain, launched 100 times, each launch's bytes checked; then a
 * node disabled, and a node's value set in the executable graph, each seen
 * by the next launch. No kernels: it runs on every device. Under qcuda a
 * graph the host can run is replayed as one CUDA graph there (one posted
 * request a launch, test/run checks the count); these are the answers it
 * must keep.
 */
#include "qctest.h"

#define N 4096
#define LAUNCHES 100

static unsigned char h[N];

/* memset d0, copy d0->d1, memset d1, copy d1->d2, ..., memset d3: d[i] ends as 0x10 + i,
 * each memset of d1..d3 overwriting what the copy before it brought. */
static cudaGraphNode_t chain(cudaGraph_t g, unsigned char *d[4], cudaGraphNode_t set[4])
{
	cudaGraphNode_t prev = NULL, n;
	cudaMemsetParams m = {};
	cudaMemcpy3DParms c = {};

	m.elementSize = 1, m.width = N, m.height = 1;
	c.extent = make_cudaExtent(N, 1, 1), c.kind = cudaMemcpyDeviceToDevice;
	for (int i = 0; i < 4; i++) {
		m.dst = d[i], m.value = 0x10 + i;
		OK(cudaGraphAddMemsetNode(&n, g, prev ? &prev : NULL, prev ? 1 : 0, &m));
		set[i] = prev = n;
		c.srcPtr = make_cudaPitchedPtr(d[i], N, N, 1);
		c.dstPtr = make_cudaPitchedPtr(d[(i + 1) % 4], N, N, 1);
		if (i < 3) {
			OK(cudaGraphAddMemcpyNode(&n, g, &prev, 1, &c));
			prev = n;
		}
	}
	return prev;
}

static bool all(const unsigned char *d, unsigned char v)
{
	if (cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost) != cudaSuccess)
		return false;
	for (int i = 0; i < N; i++)
		if (h[i] != v)
			return false;
	return true;
}

int main(void)
{
	unsigned char *d[4];
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t set[4] = {}, last;
	cudaStream_t s;
	cudaMemsetParams m = {};
	int bad = 0;

	qt_begin("graphreplay");
	for (int i = 0; i < 4; i++)
		OK(cudaMalloc(&d[i], N));
	OK(cudaStreamCreate(&s));
	OK(cudaGraphCreate(&g, 0));
	last = chain(g, d, set);
	qt_check(last != NULL, "a chain of 7 nodes");
	OK(cudaGraphInstantiate(&x, g, 0));
	for (int l = 0; l < LAUNCHES; l++) {
		OK(cudaMemsetAsync(d[1], 0, N, s));
		OK(cudaMemsetAsync(d[3], 0, N, s));
		if (cudaGraphLaunch(x, s) != cudaSuccess)
			bad++;
		if (l % 25 == 24) {
			OK(cudaStreamSynchronize(s));
			bad += !all(d[0], 0x10) + !all(d[1], 0x11) + !all(d[2], 0x12) + !all(d[3], 0x13);
		}
	}
	qt_check(bad == 0, "%d launches, each writing what its nodes say", LAUNCHES);
	/* d1's memset disabled: d1 keeps what the copy from d0 brought. */
	OK(cudaGraphNodeSetEnabled(x, set[1], 0));
	OK(cudaGraphLaunch(x, s));
	OK(cudaStreamSynchronize(s));
	qt_check(all(d[1], 0x10) && all(d[2], 0x12), "a disabled node writes nothing, the copy before it still runs");
	OK(cudaGraphNodeSetEnabled(x, set[1], 1));
	m.dst = d[0], m.value = 0x66, m.elementSize = 1, m.width = N, m.height = 1;
	OK(cudaGraphExecMemsetNodeSetParams(x, set[0], &m));
	OK(cudaGraphLaunch(x, s));
	OK(cudaStreamSynchronize(s));
	qt_check(all(d[0], 0x66) && all(d[1], 0x11) && all(d[3], 0x13),
		 "a value set in the executable graph is the next launch's");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	for (int i = 0; i < 4; i++)
		OK(cudaFree(d[i]));
	return qt_end();
}
