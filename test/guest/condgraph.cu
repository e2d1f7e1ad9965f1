// SPDX-License-Identifier: MIT
// condgraph: CUDA graphs with conditional nodes (IF, IF/ELSE, WHILE,
// SWITCH), built node by node with cudaGraphAddNode and through stream
// capture into their bodies (cudaStreamBeginCaptureToGraph), in a graph that
// also holds copies, memsets, a child graph and an event record. First the
// conditions a handle's default value sets (no kernel: these run on the host
// provider too), then the ones kernels set with cudaGraphSetConditional;
// the bytes each launch leaves, launch after launch.
#include "qctest.h"

#define N 256

__global__ void set_cond(cudaGraphConditionalHandle h, const int *flag)
{
	cudaGraphSetConditional(h, (unsigned int)*flag);
}

// One WHILE iteration: counts down *left, adds one to *iters, and keeps the loop going while *left > 0.
__global__ void countdown(cudaGraphConditionalHandle h, int *left, int *iters)
{
	*left -= 1;
	*iters += 1;
	cudaGraphSetConditional(h, *left > 0 ? 1u : 0u);
}

__global__ void fill(int *p, int n, int v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] = v;
}

__global__ void add_one(int *p, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] += 1;
}

static cudaGraphNode_t add_memset(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *dst, unsigned int value,
				  unsigned int elem, size_t width)
{
	cudaGraphNodeParams p = {};
	cudaGraphNode_t node = NULL;

	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = dst;
	p.memset.value = value;
	p.memset.elementSize = elem;
	p.memset.width = width;
	p.memset.height = 1;
	OK(cudaGraphAddNode(&node, g, deps, NULL, n, &p));
	return node;
}

static cudaGraphNode_t add_cond(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, cudaGraphConditionalHandle h,
				cudaGraphConditionalNodeType type, unsigned int size, cudaGraph_t *bodies)
{
	cudaGraphNodeParams p = {};
	cudaGraphNode_t node = NULL;

	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = type;
	p.conditional.size = size;
	if (OK(cudaGraphAddNode(&node, g, deps, NULL, n, &p)))
		for (unsigned int i = 0; i < size; i++)
			bodies[i] = p.conditional.phGraph_out[i];
	return node;
}

static cudaGraphNode_t add_kernel(cudaGraph_t g, const cudaGraphNode_t *deps, size_t n, void *func, void **args)
{
	cudaGraphNodeParams p = {};
	cudaGraphNode_t node = NULL;

	p.type = cudaGraphNodeTypeKernel;
	p.kernel.func = func;
	p.kernel.gridDim = dim3(1);
	p.kernel.blockDim = dim3(N);
	p.kernel.kernelParams = args;
	OK(cudaGraphAddNode(&node, g, deps, NULL, n, &p));
	return node;
}

static int first_int(const void *d)
{
	int v = -1;

	OK(cudaMemcpy(&v, d, sizeof(v), cudaMemcpyDeviceToHost));
	return v;
}

/* The bytes of d: all equal to want? */
static bool all_bytes(const unsigned char *d, size_t n, unsigned char want)
{
	unsigned char h[N * 4];

	OK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
	for (size_t i = 0; i < n; i++)
		if (h[i] != want)
			return false;
	return true;
}

/* Default values decide: IF (body memsets), IF/ELSE with 0 (the else body runs), SWITCH. */
static void by_default(unsigned char *d)
{
	const unsigned int values[] = { 0, 1, 2, 7 };

	for (unsigned int v : values) {
		cudaGraph_t g, bodies[3];
		cudaGraphExec_t x;
		cudaGraphConditionalHandle h = 0, s = 0;

		OK(cudaGraphCreate(&g, 0));
		EXPECT(cudaGraphConditionalHandleCreate(&h, g, v, cudaGraphCondAssignDefault), cudaSuccess);
		OK(cudaGraphConditionalHandleCreate(&s, g, v, cudaGraphCondAssignDefault));
		cudaGraphNode_t clear = add_memset(g, NULL, 0, d, 0, 1, 3 * N);
		cudaGraphNode_t ifelse = add_cond(g, &clear, 1, h, cudaGraphCondTypeIf, 2, bodies);
		add_memset(bodies[0], NULL, 0, d, 0x11, 1, N);
		add_memset(bodies[1], NULL, 0, d, 0x22, 1, N);
		cudaGraph_t sw[3];
		add_cond(g, &ifelse, 1, s, cudaGraphCondTypeSwitch, 3, sw);
		for (int k = 0; k < 3; k++)
			add_memset(sw[k], NULL, 0, d + N + k * (N / 2), 0x30 + k, 1, N / 2);
		EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
		EXPECT(cudaGraphLaunch(x, 0), cudaSuccess);
		EXPECT(cudaStreamSynchronize(0), cudaSuccess);
		qt_check(all_bytes(d, N, v ? 0x11 : 0x22), "default %u: IF/ELSE ran body %d", v, v ? 0 : 1);
		for (unsigned int k = 0; k < 3; k++)
			qt_check(all_bytes(d + N + k * (N / 2), N / 2, k == v ? 0x30 + k : 0),
				 "default %u: SWITCH body %u %s", v, k, k == v ? "ran" : "did not run");
		OK(cudaGraphExecDestroy(x));
		OK(cudaGraphDestroy(g));
	}
}

/* A conditional beside a copy, a child graph and an event record; its
 * body made by capture; launched twice, and again after its graph is gone. */
static void mixed(unsigned char *d, unsigned char *e)
{
	cudaGraph_t g, child, body[1];
	cudaGraphExec_t x;
	cudaGraphConditionalHandle h = 0;
	cudaEvent_t ev;
	cudaStream_t s;
	cudaGraphNode_t set, copy, sub, rec;

	OK(cudaEventCreate(&ev));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphCreate(&child, 0));
	OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
	set = add_memset(g, NULL, 0, d, 0x44, 1, N);
	OK(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, e, d, N, cudaMemcpyDeviceToDevice));
	add_memset(child, NULL, 0, e + N, 0x0102, 2, N / 2);
	OK(cudaGraphAddChildGraphNode(&sub, g, &copy, 1, child));
	OK(cudaGraphAddEventRecordNode(&rec, g, &sub, 1, ev));
	add_cond(g, &rec, 1, h, cudaGraphCondTypeIf, 1, body);
	EXPECT(cudaStreamBeginCaptureToGraph(s, body[0], NULL, NULL, 0, cudaStreamCaptureModeRelaxed), cudaSuccess);
	OK(cudaMemsetAsync(e + 2 * N, 0x55, N, s));
	OK(cudaMemcpyAsync(e + 3 * N, e + 2 * N, N / 2, cudaMemcpyDeviceToDevice, s));
	EXPECT(cudaStreamEndCapture(s, NULL), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	for (int round = 0; round < 2; round++) {
		OK(cudaMemset(e, 0, 4 * N));
		EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
		EXPECT(cudaEventSynchronize(ev), cudaSuccess);
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
		unsigned short w = 0;
		OK(cudaMemcpy(&w, e + N, 2, cudaMemcpyDeviceToHost));
		qt_check(all_bytes(e, N, 0x44) && w == 0x0102, "round %d: copy and child graph", round);
		qt_check(all_bytes(e + 2 * N, N, 0x55) && all_bytes(e + 3 * N, N / 2, 0x55) &&
				 all_bytes(e + 3 * N + N / 2, N / 2, 0),
			 "round %d: captured body ran", round);
	}
	OK(cudaGraphDestroy(g)); /* x lives on */
	OK(cudaMemset(e, 0, 4 * N));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(all_bytes(e + 2 * N, N, 0x55), "an executable graph outlives its graph");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(child));
	OK(cudaStreamDestroy(s));
	OK(cudaEventDestroy(ev));
}

/* Kernels set the condition: IF from a flag in device memory, a WHILE loop counting down, a loop by capture. */
static void by_kernels(int *flag, int *out, int *left, int *iters)
{
	cudaGraph_t g, body[1];
	cudaGraphExec_t x;
	cudaGraphConditionalHandle h = 0;
	int n = N;

	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
	void *set_args[] = { &h, &flag };
	cudaGraphNode_t k = add_kernel(g, NULL, 0, (void *)set_cond, set_args);
	add_cond(g, &k, 1, h, cudaGraphCondTypeIf, 1, body);
	void *fill_args[] = { &out, &n, &n };
	add_kernel(body[0], NULL, 0, (void *)fill, fill_args);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	const int flags[] = { 1, 0, 1 };
	for (int f : flags) {
		OK(cudaMemcpy(flag, &f, sizeof(f), cudaMemcpyHostToDevice));
		OK(cudaMemset(out, 0, N * sizeof(int)));
		EXPECT(cudaGraphLaunch(x, 0), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		qt_check(first_int(out) == (f ? N : 0), "flag %d: IF body %s", f, f ? "ran" : "did not run");
	}
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* WHILE: the body counts down from 5; the loop stops at 0. */
	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
	add_cond(g, NULL, 0, h, cudaGraphCondTypeWhile, 1, body);
	void *cd_args[] = { &h, &left, &iters };
	cudaGraphNode_t c = add_kernel(body[0], NULL, 0, (void *)countdown, cd_args);
	void *add_args[] = { &out, &n };
	add_kernel(body[0], &c, 1, (void *)add_one, add_args);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	const int starts[] = { 5, 1, 12 };
	for (int st : starts) {
		OK(cudaMemcpy(left, &st, sizeof(st), cudaMemcpyHostToDevice));
		OK(cudaMemset(iters, 0, sizeof(int)));
		OK(cudaMemset(out, 0, N * sizeof(int)));
		EXPECT(cudaGraphLaunch(x, 0), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		qt_check(first_int(iters) == st && first_int(left) == 0 && first_int(out) == st,
			 "WHILE from %d: %d iterations", st, first_int(iters));
	}
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* An IF nested in a WHILE body, its handle made on the body graph. */
	cudaGraphConditionalHandle hi = 0;
	cudaGraph_t inner[1];
	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphConditionalHandleCreate(&h, g, 1, cudaGraphCondAssignDefault));
	add_cond(g, NULL, 0, h, cudaGraphCondTypeWhile, 1, body);
	EXPECT(cudaGraphConditionalHandleCreate(&hi, body[0], 0, cudaGraphCondAssignDefault), cudaSuccess);
	c = add_kernel(body[0], NULL, 0, (void *)countdown, cd_args);
	void *flag_args[] = { &hi, &flag };
	cudaGraphNode_t sc = add_kernel(body[0], &c, 1, (void *)set_cond, flag_args);
	add_cond(body[0], &sc, 1, hi, cudaGraphCondTypeIf, 1, inner);
	add_kernel(inner[0], NULL, 0, (void *)add_one, add_args);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	for (int f = 0; f < 2; f++) {
		int st3 = 3;
		OK(cudaMemcpy(flag, &f, sizeof(f), cudaMemcpyHostToDevice));
		OK(cudaMemcpy(left, &st3, sizeof(st3), cudaMemcpyHostToDevice));
		OK(cudaMemset(iters, 0, sizeof(int)));
		OK(cudaMemset(out, 0, N * sizeof(int)));
		EXPECT(cudaGraphLaunch(x, 0), cudaSuccess);
		EXPECT(cudaDeviceSynchronize(), cudaSuccess);
		qt_check(first_int(iters) == 3 && first_int(out) == 3 * f,
			 "nested IF (flag %d) in WHILE from 3: %d iterations, out %d", f, first_int(iters),
			 first_int(out));
	}
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* The same loop made by capture: the conditional node added to the
	 * capturing graph, its body captured from another stream. */
	cudaStream_t s, bs;
	cudaGraph_t cg = NULL;
	const cudaGraphNode_t *deps = NULL;
	size_t ndeps = 0;
	enum cudaStreamCaptureStatus status;
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaStreamCreateWithFlags(&bs, cudaStreamNonBlocking));
	int st = 4;
	OK(cudaMemcpy(left, &st, sizeof(st), cudaMemcpyHostToDevice));
	OK(cudaMemset(iters, 0, sizeof(int)));
	OK(cudaMemset(out, 0, N * sizeof(int)));
	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	OK(cudaMemsetAsync(out, 0, N * sizeof(int), s));
	EXPECT(cudaStreamGetCaptureInfo(s, &status, NULL, &cg, &deps, NULL, &ndeps), cudaSuccess);
	OK(cudaGraphConditionalHandleCreate(&h, cg, 1, cudaGraphCondAssignDefault));
	cudaGraphNode_t wn = add_cond(cg, deps, ndeps, h, cudaGraphCondTypeWhile, 1, body);
	OK(cudaStreamUpdateCaptureDependencies(s, &wn, NULL, 1, cudaStreamSetCaptureDependencies));
	EXPECT(cudaStreamBeginCaptureToGraph(bs, body[0], NULL, NULL, 0, cudaStreamCaptureModeRelaxed), cudaSuccess);
	countdown<<<1, 1, 0, bs>>>(h, left, iters);
	add_one<<<1, N, 0, bs>>>(out, N);
	EXPECT(cudaStreamEndCapture(bs, NULL), cudaSuccess);
	cudaGraph_t made = NULL;
	EXPECT(cudaStreamEndCapture(s, &made), cudaSuccess);
	qt_check(made == cg, "the capture's graph is the one the conditional node went into");
	EXPECT(cudaGraphInstantiate(&x, made, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(first_int(iters) == 4 && first_int(out) == 4, "captured WHILE from 4: %d iterations, out %d",
		 first_int(iters), first_int(out));
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(made));
	OK(cudaStreamDestroy(bs));
	OK(cudaStreamDestroy(s));
}

/* What a conditional node refuses. */
static void refused(void)
{
	cudaGraph_t g, body[3];
	cudaGraphConditionalHandle h = 0;
	cudaGraphNodeParams p = {};
	cudaGraphNode_t node;

	OK(cudaGraphCreate(&g, 0));
	EXPECT(cudaGraphConditionalHandleCreate(NULL, g, 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaGraphConditionalHandleCreate(&h, g, 0, 2), cudaErrorInvalidValue);
	OK(cudaGraphConditionalHandleCreate(&h, g, 0, 0));
	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = h;
	p.conditional.type = cudaGraphCondTypeIf;
	p.conditional.size = 3;
	EXPECT(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
	p.conditional.type = cudaGraphCondTypeWhile;
	p.conditional.size = 2;
	EXPECT(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
	p.conditional.size = 0;
	p.conditional.type = cudaGraphCondTypeSwitch;
	EXPECT(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaErrorInvalidValue);
	(void)body;
	OK(cudaGraphDestroy(g));
}

int main()
{
	unsigned char *d, *e;
	int *flag, *out, *left, *iters;

	qt_begin("condgraph");
	OK(cudaMalloc(&d, 4 * N));
	OK(cudaMalloc(&e, 4 * N));
	OK(cudaMalloc(&flag, sizeof(int)));
	OK(cudaMalloc(&out, N * sizeof(int)));
	OK(cudaMalloc(&left, sizeof(int)));
	OK(cudaMalloc(&iters, sizeof(int)));
	refused();
	by_default(d);
	mixed(d, e);

	(void)cudaGetLastError(); /* the refused calls' error, as CUDA keeps it */
	fill<<<1, N>>>(out, N, 1);
	FIRST_KERNEL_USE(cudaGetLastError());
	OK(cudaDeviceSynchronize());
	by_kernels(flag, out, left, iters);
	return qt_end();
}
