// SPDX-License-Identifier: MIT
// extras: user objects (references of the program, graphs, clones, child
// graphs and executable graphs; the destructor once the last goes),
// enabling and disabling nodes of an executable graph, node parameters set
// through the generic calls (cudaGraphNodeSetParams, cudaGraphExecNodeSetParams)
// and a child graph's in an executable graph, batches of copies
// (cudaMemcpyBatchAsync, cudaMemcpy3DBatchAsync), cudaMemcpy3DPeer and
// cudaMemcpyArrayToArray; then on a GPU a user object held by a graph with a
// conditional node, cudaFuncGetParamInfo, kernel node attributes, kernel
// nodes disabled and set through the generic calls, memcpy nodes to and from
// symbols.
#include <pthread.h>

#include "qctest.h"

/* cudaMemcpyArrayToArray is deprecated, and exercised here. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define N 4096

__device__ int sym[64];

__global__ void add(int *p, int n, int v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] += v;
}

/* ------------------------------------------------------------ user objects */

/* Destructors run on a thread of CUDA's own, later: they count here, and
 * the program waits for the count (at most 10 s). */
static int destroyed[4]; /* one counter per user object's ptr */

static void CUDART_CB destroy(void *arg)
{
	__atomic_add_fetch(&destroyed[(intptr_t)arg], 1, __ATOMIC_SEQ_CST);
}

static int destroyed_now(int i)
{
	return __atomic_load_n(&destroyed[i], __ATOMIC_SEQ_CST);
}

static bool wait_destroyed(int i)
{
	for (int t = 0; t < 10000 && destroyed_now(i) == 0; t++)
		usleep(1000);
	usleep(20000); /* a second run would show now */
	return destroyed_now(i) == 1;
}

static int host_calls;
static void CUDART_CB count_call(void *arg)
{
	host_calls += (int)(intptr_t)arg;
}

static void user_objects(unsigned char *d)
{
	cudaUserObject_t o;
	cudaGraph_t g, clone, child, parent;
	cudaGraphExec_t x;
	cudaGraphNode_t set, sub;
	cudaStream_t s;
	struct cudaMemsetParams mp = {};

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	EXPECT(cudaUserObjectCreate(&o, (void *)0, destroy, 1, 0), cudaErrorInvalidValue);
	EXPECT(cudaUserObjectCreate(&o, (void *)0, destroy, 0, cudaUserObjectNoDestructorSync), cudaErrorInvalidValue);

	/* The program's references, then a graph's, a clone's and an executable graph's. */
	EXPECT(cudaUserObjectCreate(&o, (void *)0, destroy, 1, cudaUserObjectNoDestructorSync), cudaSuccess);
	EXPECT(cudaUserObjectRetain(o, 2), cudaSuccess);
	EXPECT(cudaUserObjectRetain(o, 0), cudaErrorInvalidValue);
	EXPECT(cudaUserObjectRelease(o, 2), cudaSuccess);
	qt_check(destroyed_now(0) == 0, "a user object with a reference left is not destroyed");
	OK(cudaGraphCreate(&g, 0));
	mp.dst = d, mp.value = 0x5c, mp.elementSize = 1, mp.width = N, mp.height = 1;
	OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
	EXPECT(cudaGraphRetainUserObject(g, o, 1, cudaGraphUserObjectMove), cudaSuccess);
	EXPECT(cudaGraphRetainUserObject(g, o, 0, 0), cudaErrorInvalidValue);
	EXPECT(cudaGraphClone(&clone, g), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphDestroy(g), cudaSuccess);
	EXPECT(cudaGraphDestroy(clone), cudaSuccess);
	qt_check(destroyed_now(0) == 0, "the executable graph still holds a reference");
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaGraphExecDestroy(x), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(wait_destroyed(0), "destroyed once, after the executable graph's launch and destruction");

	/* A child graph's references go with the node's copy of it. */
	EXPECT(cudaUserObjectCreate(&o, (void *)1, destroy, 1, cudaUserObjectNoDestructorSync), cudaSuccess);
	OK(cudaGraphCreate(&child, 0));
	OK(cudaGraphCreate(&parent, 0));
	OK(cudaGraphAddMemsetNode(&set, child, NULL, 0, &mp));
	EXPECT(cudaGraphRetainUserObject(child, o, 1, 0), cudaSuccess);
	EXPECT(cudaUserObjectRelease(o, 1), cudaSuccess);
	EXPECT(cudaGraphAddChildGraphNode(&sub, parent, NULL, 0, child), cudaSuccess);
	EXPECT(cudaGraphDestroy(child), cudaSuccess);
	qt_check(destroyed_now(1) == 0, "the child graph node's copy holds a reference");
	EXPECT(cudaGraphDestroy(parent), cudaSuccess);
	qt_check(wait_destroyed(1), "destroyed with the graph holding the child graph");

	/* References a graph releases itself. */
	EXPECT(cudaUserObjectCreate(&o, (void *)2, destroy, 1, cudaUserObjectNoDestructorSync), cudaSuccess);
	OK(cudaGraphCreate(&g, 0));
	EXPECT(cudaGraphRetainUserObject(g, o, 2, 0), cudaSuccess);
	EXPECT(cudaGraphReleaseUserObject(g, o, 0), cudaErrorInvalidValue);
	EXPECT(cudaGraphReleaseUserObject(g, o, 1), cudaSuccess);
	EXPECT(cudaUserObjectRelease(o, 1), cudaSuccess);
	qt_check(destroyed_now(2) == 0, "the graph's reference left keeps it");
	EXPECT(cudaGraphReleaseUserObject(g, o, 1), cudaSuccess);
	qt_check(wait_destroyed(2), "destroyed when the graph released its last reference");
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	cudaGetLastError();
}

/* ------------------------------------------------------------ enabled nodes */

static void enabled(unsigned char *d, unsigned char *h)
{
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t set, copy, host;
	struct cudaMemsetParams mp = {};
	struct cudaHostNodeParams hp = { count_call, (void *)(intptr_t)1 };
	unsigned int on = 99;

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaMemset(d, 0x22, N));
	OK(cudaGraphCreate(&g, 0));
	mp.dst = d, mp.value = 0x11, mp.elementSize = 1, mp.width = N, mp.height = 1;
	OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
	OK(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h, d, N, cudaMemcpyDeviceToHost));
	OK(cudaGraphAddHostNode(&host, g, &copy, 1, &hp));
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphNodeGetEnabled(x, set, &on), cudaSuccess);
	qt_check(on == 1, "a node is enabled when instantiated");
	EXPECT(cudaGraphNodeSetEnabled(x, set, 0), cudaSuccess);
	EXPECT(cudaGraphNodeGetEnabled(x, set, &on), cudaSuccess);
	qt_check(on == 0, "and disabled after cudaGraphNodeSetEnabled(0)");
	EXPECT(cudaGraphNodeSetEnabled(x, host, 0), cudaErrorInvalidValue);

	host_calls = 0;
	memset(h, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(qt_not_byte(h, 0x22, N) < 0 && host_calls == 1,
		 "a disabled memset node did nothing; the nodes after it ran");
	EXPECT(cudaGraphNodeSetEnabled(x, set, 1), cudaSuccess);
	EXPECT(cudaGraphNodeSetEnabled(x, copy, 0), cudaSuccess);
	memset(h, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(qt_not_byte(h, 0, N) < 0 && host_calls == 2, "a disabled memcpy node did nothing");
	OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h, 0x11, N) < 0, "the memset node enabled again ran");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	cudaGetLastError();
}

/* ------------------------------------------------------------ generic node parameters */

static void node_params(unsigned char *d, unsigned char *h)
{
	cudaStream_t s;
	cudaGraph_t g, child, child2, bad;
	cudaGraphExec_t x;
	cudaGraphNode_t set, host, sub, n1, n2;
	struct cudaMemsetParams mp = {};
	struct cudaHostNodeParams hp = { count_call, (void *)(intptr_t)1 };
	cudaGraphNodeParams p = {};

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaGraphCreate(&g, 0));
	mp.dst = d, mp.value = 0x31, mp.elementSize = 1, mp.width = N / 2, mp.height = 1;
	OK(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp));
	OK(cudaGraphAddHostNode(&host, g, &set, 1, &hp));

	/* The child sets the second half. */
	OK(cudaGraphCreate(&child, 0));
	mp.dst = d + N / 2, mp.value = 0x41;
	OK(cudaGraphAddMemsetNode(&n1, child, NULL, 0, &mp));
	OK(cudaGraphAddChildGraphNode(&sub, g, &set, 1, child));

	memset((void *)&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = d, p.memset.value = 0x32, p.memset.elementSize = 1, p.memset.width = N / 2;
	p.memset.height = 1;
	EXPECT(cudaGraphNodeSetParams(set, &p), cudaSuccess);
	EXPECT(cudaGraphNodeSetParams(host, &p), cudaErrorInvalidValue);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);

	memset((void *)&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeHost;
	p.host.fn = count_call, p.host.userData = (void *)(intptr_t)10;
	EXPECT(cudaGraphExecNodeSetParams(x, host, &p), cudaSuccess);
	host_calls = 0;
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h, 0x32, N / 2) < 0 && qt_not_byte(h + N / 2, 0x41, N / 2) < 0 && host_calls == 10,
		 "cudaGraphNodeSetParams and cudaGraphExecNodeSetParams took effect");

	/* A child graph of the same shape replaces the executable graph's. */
	OK(cudaGraphCreate(&child2, 0));
	mp.value = 0x42;
	OK(cudaGraphAddMemsetNode(&n1, child2, NULL, 0, &mp));
	EXPECT(cudaGraphExecChildGraphNodeSetParams(x, sub, child2), cudaSuccess);
	OK(cudaGraphCreate(&bad, 0));
	OK(cudaGraphAddMemsetNode(&n1, bad, NULL, 0, &mp));
	OK(cudaGraphAddMemsetNode(&n2, bad, &n1, 1, &mp));
	EXPECT(cudaGraphExecChildGraphNodeSetParams(x, sub, bad), cudaErrorGraphExecUpdateFailure);
	cudaGetLastError();
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h + N / 2, 0x42, N / 2) < 0 && host_calls == 20,
		 "the executable graph's child graph took the new parameters");
	memset((void *)&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeGraph;
	p.graph.graph = child;
	EXPECT(cudaGraphExecNodeSetParams(x, sub, &p), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h + N / 2, 0x41, N / 2) < 0, "and back through cudaGraphExecNodeSetParams");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(bad));
	OK(cudaGraphDestroy(child2));
	OK(cudaGraphDestroy(child));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	cudaGetLastError();
}

/* ------------------------------------------------------------ copies */

static void batches(unsigned char *d, unsigned char *h)
{
	enum { W = 24, H = 6 };
	cudaStream_t s;
	unsigned char *src = (unsigned char *)malloc(N), *back = (unsigned char *)malloc(N);
	unsigned char pageable[3][100];
	void *dsts[3];
	const void *srcs[3];
	size_t sizes[3] = { 100, 1, 77 }, idx[2] = { 0, 2 }, idx0 = 0;
	struct cudaMemcpyAttributes at[2];
	cudaArray_t arr;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<unsigned char>();
	struct cudaMemcpy3DBatchOp ops[2];
	bool same = true;

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaMemset(d, 0, N));
	memset(at, 0, sizeof(at));
	at[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	at[1].srcAccessOrder = cudaMemcpySrcAccessOrderDuringApiCall;
	for (int i = 0; i < 3; i++) {
		qt_fill(pageable[i], sizeof(pageable[i]), 40 + i);
		dsts[i] = d + 1000 * i + i;
		srcs[i] = pageable[i];
	}
	EXPECT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, at, idx, 2, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(back, d, N, cudaMemcpyDeviceToHost));
	for (int i = 0; i < 3; i++)
		same = same && !memcmp(back + 1000 * i + i, pageable[i], sizes[i]) &&
		       back[1000 * i + i + sizes[i]] == 0;
	qt_check(same, "cudaMemcpyBatchAsync: three copies of pageable memory, bytes after them untouched");
	EXPECT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, at, idx, 2, 0), cudaErrorInvalidValue);
	at[0].srcAccessOrder = cudaMemcpySrcAccessOrderInvalid;
	EXPECT(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, at, &idx0, 1, s), cudaErrorInvalidValue);

	/* Pointer to array and array to pointer (pitched rows of 32). */
	qt_fill(src, N, 50);
	OK(cudaMallocArray(&arr, &fd, W, H, 0));
	memset(ops, 0, sizeof(ops));
	ops[0].src.type = cudaMemcpyOperandTypePointer;
	ops[0].src.op.ptr.ptr = src;
	ops[0].src.op.ptr.rowLength = 32;
	ops[0].dst.type = cudaMemcpyOperandTypeArray;
	ops[0].dst.op.array.array = arr;
	ops[0].extent = make_cudaExtent(W, H, 1);
	ops[0].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	EXPECT(cudaMemcpy3DBatchAsync(1, ops, 0, s), cudaSuccess);
	ops[1].src.type = cudaMemcpyOperandTypeArray;
	ops[1].src.op.array.array = arr;
	ops[1].src.op.array.offset.x = 4;
	ops[1].src.op.array.offset.y = 1;
	ops[1].dst.type = cudaMemcpyOperandTypePointer;
	ops[1].dst.op.ptr.ptr = d;
	ops[1].extent = make_cudaExtent(W - 4, H - 1, 1);
	ops[1].srcAccessOrder = cudaMemcpySrcAccessOrderStream;
	EXPECT(cudaMemcpy3DBatchAsync(1, ops + 1, 0, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(back, d, (W - 4) * (H - 1), cudaMemcpyDeviceToHost));
	same = true;
	for (int y = 0; y < H - 1; y++)
		same = same && !memcmp(back + y * (W - 4), src + (y + 1) * 32 + 4, W - 4);
	qt_check(same, "cudaMemcpy3DBatchAsync: rows into an array and a box of it back, packed");
	EXPECT(cudaMemcpy3DBatchAsync(1, ops, 1, s), cudaErrorInvalidValue);
	ops[0].extent = make_cudaExtent(0, H, 1);
	EXPECT(cudaMemcpy3DBatchAsync(1, ops, 0, s), cudaErrorInvalidValue);
	OK(cudaFreeArray(arr));
	OK(cudaStreamDestroy(s));
	free(src);
	free(back);
	(void)h;
	cudaGetLastError();
}

static void peer_and_arrays(unsigned char *d)
{
	enum { W = 40, H = 5 };
	struct cudaMemcpy3DPeerParms pp;
	cudaPitchedPtr a, b;
	cudaArray_t s1, s2;
	cudaChannelFormatDesc fd = cudaCreateChannelDesc<unsigned char>();
	unsigned char *src = (unsigned char *)malloc(N), *back = (unsigned char *)malloc(N),
		      *want = (unsigned char *)malloc(N);
	cudaStream_t s;
	int count = 0;
	bool same = true;

	OK(cudaGetDeviceCount(&count));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	OK(cudaMalloc3D(&a, make_cudaExtent(64, 4, 3)));
	OK(cudaMalloc3D(&b, make_cudaExtent(64, 4, 3)));
	qt_fill(src, N, 60);
	OK(cudaMemcpy2D(a.ptr, a.pitch, src, 64, 64, 12, cudaMemcpyHostToDevice));
	OK(cudaMemset2D(b.ptr, b.pitch, 0, 64, 12));
	memset(&pp, 0, sizeof(pp));
	pp.srcPtr = a, pp.dstPtr = b;
	pp.srcPos = make_cudaPos(8, 1, 1);
	pp.dstPos = make_cudaPos(0, 0, 0);
	pp.extent = make_cudaExtent(16, 3, 2);
	EXPECT(cudaMemcpy3DPeer(&pp), cudaSuccess);
	pp.dstPos = make_cudaPos(32, 0, 0);
	EXPECT(cudaMemcpy3DPeerAsync(&pp, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy2D(back, 64, b.ptr, b.pitch, 64, 12, cudaMemcpyDeviceToHost));
	for (int z = 0; z < 2; z++)
		for (int y = 0; y < 3; y++) {
			const unsigned char *from = src + ((z + 1) * 4 + y + 1) * 64 + 8;

			same = same && !memcmp(back + (z * 4 + y) * 64, from, 16) &&
			       !memcmp(back + (z * 4 + y) * 64 + 32, from, 16) &&
			       qt_not_byte(back + (z * 4 + y) * 64 + 16, 0, 16) < 0;
		}
	qt_check(same, "cudaMemcpy3DPeer and cudaMemcpy3DPeerAsync device 0 -> device 0, a box");
	pp.dstDevice = count;
	EXPECT(cudaMemcpy3DPeer(&pp), cudaErrorInvalidDevice);

	/* count bytes in row order, from (5, 1) of one array to (3, 2) of another. */
	OK(cudaMallocArray(&s1, &fd, W, H, 0));
	OK(cudaMallocArray(&s2, &fd, W, H, 0));
	OK(cudaMemcpy2DToArray(s1, 0, 0, src, W, W, H, cudaMemcpyHostToDevice));
	memset(want, 0, W * H);
	OK(cudaMemcpy2DToArray(s2, 0, 0, want, W, W, H, cudaMemcpyHostToDevice));
	memcpy(want + 2 * W + 3, src + 1 * W + 5, 90);
	EXPECT(cudaMemcpyArrayToArray(s2, 3, 2, s1, 5, 1, 90, cudaMemcpyDeviceToDevice), cudaSuccess);
	OK(cudaMemcpy2DFromArray(back, W, s2, 0, 0, W, H, cudaMemcpyDeviceToHost));
	qt_check(qt_diff(back, want, W * H) < 0, "cudaMemcpyArrayToArray: 90 bytes across rows, at other offsets");
	memcpy(want, src, W * 2);
	EXPECT(cudaMemcpyArrayToArray(s2, 0, 0, s1, 0, 0, W * 2, cudaMemcpyDeviceToDevice), cudaSuccess);
	OK(cudaMemcpy2DFromArray(back, W, s2, 0, 0, W, H, cudaMemcpyDeviceToHost));
	qt_check(qt_diff(back, want, W * H) < 0, "cudaMemcpyArrayToArray: two whole rows");
	OK(cudaFreeArray(s1));
	OK(cudaFreeArray(s2));
	OK(cudaFree(a.ptr));
	OK(cudaFree(b.ptr));
	OK(cudaStreamDestroy(s));
	free(src);
	free(back);
	free(want);
	(void)d;
	cudaGetLastError();
}

/* ------------------------------------------------------------ kernels */

/* A graph with a conditional node (IF, its condition the handle's default)
 * holds a user object: so does its executable graph. */
static void cond_user_object(unsigned char *d, unsigned char *h, cudaStream_t s)
{
	cudaUserObject_t o;
	cudaGraph_t g, body = NULL;
	cudaGraphExec_t x;
	cudaGraphConditionalHandle c;
	cudaGraphNode_t node, set;
	cudaGraphNodeParams p = {};

	OK(cudaGraphCreate(&g, 0));
	EXPECT(cudaGraphConditionalHandleCreate(&c, g, 1, cudaGraphCondAssignDefault), cudaSuccess);
	p.type = cudaGraphNodeTypeConditional;
	p.conditional.handle = c;
	p.conditional.type = cudaGraphCondTypeIf;
	p.conditional.size = 1;
	EXPECT(cudaGraphAddNode(&node, g, NULL, NULL, 0, &p), cudaSuccess);
	body = p.conditional.phGraph_out[0];
	memset((void *)&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = d, p.memset.value = 0x66, p.memset.elementSize = 1, p.memset.width = N;
	p.memset.height = 1;
	EXPECT(cudaGraphAddNode(&set, body, NULL, NULL, 0, &p), cudaSuccess);
	EXPECT(cudaUserObjectCreate(&o, (void *)3, destroy, 1, cudaUserObjectNoDestructorSync), cudaSuccess);
	EXPECT(cudaGraphRetainUserObject(g, o, 1, cudaGraphUserObjectMove), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphDestroy(g), cudaSuccess);
	qt_check(destroyed_now(3) == 0, "the executable graph of a graph with a conditional node holds a reference");
	OK(cudaMemset(d, 0, N));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaGraphExecDestroy(x), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	OK(cudaMemcpy(h, d, N, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h, 0x66, N) < 0, "its IF body ran");
	qt_check(wait_destroyed(3), "destroyed after its launch and destruction");
}

static void kernels(unsigned char *dn, unsigned char *hn)
{
	enum { M = 1000 };
	static int h[M];
	int *d, n = M, v = 1, greatest = 0, least = 0;
	void *args[] = { &d, &n, &v };
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t k1, k2, to, from;
	struct cudaKernelNodeParams kp = {};
	cudaKernelNodeAttrValue val, got;
	cudaGraphNodeParams p = {};
	int *in, *out;
	size_t off = 99, size = 99;
	bool all = true;

	OK(cudaMalloc(&d, M * sizeof(int)));
	OK(cudaMemset(d, 0, M * sizeof(int)));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	add<<<(M + 255) / 256, 256, 0, s>>>(d, M, 1);
	if (!FIRST_KERNEL_USE(cudaGetLastError()))
		return;
	OK(cudaStreamSynchronize(s));
	cond_user_object(dn, hn, s);

	EXPECT(cudaFuncGetParamInfo((const void *)add, 0, &off, &size), cudaSuccess);
	qt_check(off == 0 && size == sizeof(int *), "parameter 0: offset 0, a pointer's size");
	EXPECT(cudaFuncGetParamInfo((const void *)add, 2, &off, &size), cudaSuccess);
	qt_check(off == 12 && size == sizeof(int), "parameter 2: offset 12, 4 bytes");
	EXPECT(cudaFuncGetParamInfo((const void *)add, 3, &off, &size), cudaErrorInvalidValue);

	/* Attributes of kernel nodes (of a graph not launched). */
	OK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
	kp.func = (void *)add;
	kp.gridDim = dim3((M + 255) / 256);
	kp.blockDim = dim3(256);
	kp.kernelParams = args;
	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphAddKernelNode(&k1, g, NULL, 0, &kp));
	OK(cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp));
	memset(&val, 0, sizeof(val));
	val.priority = greatest;
	EXPECT(cudaGraphKernelNodeSetAttribute(k1, cudaKernelNodeAttributePriority, &val), cudaSuccess);
	memset(&got, 0x7f, sizeof(got));
	EXPECT(cudaGraphKernelNodeGetAttribute(k1, cudaKernelNodeAttributePriority, &got), cudaSuccess);
	qt_check(got.priority == greatest, "a kernel node's priority reads back as set");
	memset(&val, 0, sizeof(val));
	val.accessPolicyWindow.base_ptr = d;
	val.accessPolicyWindow.num_bytes = M * sizeof(int);
	val.accessPolicyWindow.hitRatio = 0.5f;
	val.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
	val.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
	EXPECT(cudaGraphKernelNodeSetAttribute(k1, cudaKernelNodeAttributeAccessPolicyWindow, &val), cudaSuccess);
	memset(&got, 0, sizeof(got));
	EXPECT(cudaGraphKernelNodeGetAttribute(k1, cudaKernelNodeAttributeAccessPolicyWindow, &got), cudaSuccess);
	qt_check(got.accessPolicyWindow.base_ptr == d && got.accessPolicyWindow.num_bytes == M * sizeof(int) &&
			 got.accessPolicyWindow.hitRatio == 0.5f &&
			 got.accessPolicyWindow.hitProp == cudaAccessPropertyPersisting &&
			 got.accessPolicyWindow.missProp == cudaAccessPropertyStreaming,
		 "its access policy window reads back as set");
	memset(&val, 0, sizeof(val));
	val.cooperative = 1;
	EXPECT(cudaGraphKernelNodeSetAttribute(k1, cudaKernelNodeAttributeCooperative, &val), cudaSuccess);
	EXPECT(cudaGraphKernelNodeCopyAttributes(k2, k1), cudaSuccess);
	memset(&got, 0, sizeof(got));
	EXPECT(cudaGraphKernelNodeGetAttribute(k2, cudaKernelNodeAttributePriority, &got), cudaSuccess);
	qt_check(got.priority == greatest, "attributes copied to another kernel node: its priority");
	memset(&got, 0, sizeof(got));
	EXPECT(cudaGraphKernelNodeGetAttribute(k2, cudaKernelNodeAttributeCooperative, &got), cudaSuccess);
	qt_check(got.cooperative == 1, "and cooperative");
	OK(cudaGraphDestroy(g));

	/* Kernel nodes launched, then the first disabled. */
	OK(cudaGraphCreate(&g, 0));
	OK(cudaGraphAddKernelNode(&k1, g, NULL, 0, &kp));
	OK(cudaGraphAddKernelNode(&k2, g, &k1, 1, &kp));
	OK(cudaMemset(d, 0, M * sizeof(int)));
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaGraphNodeSetEnabled(x, k1, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
	OK(cudaStreamSynchronize(s));
	for (int i = 0; i < M; i++)
		all = all && h[i] == 3;
	qt_check(all, "two launches, the second with one kernel node disabled, added 2 + 1");

	/* Generic parameters of a kernel node, in the graph and in the executable graph. */
	v = 100;
	memset((void *)&p, 0, sizeof(p));
	p.type = cudaGraphNodeTypeKernel;
	p.kernel.func = (void *)add;
	p.kernel.gridDim = dim3((M + 255) / 256);
	p.kernel.blockDim = dim3(256);
	p.kernel.kernelParams = args;
	EXPECT(cudaGraphExecNodeSetParams(x, k2, &p), cudaSuccess);
	v = 1;
	EXPECT(cudaGraphNodeSetParams(k1, &p), cudaSuccess);
	OK(cudaMemset(d, 0, M * sizeof(int)));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
	OK(cudaStreamSynchronize(s));
	all = true;
	for (int i = 0; i < M; i++)
		all = all && h[i] == 100;
	qt_check(all, "the executable graph's kernel node took its new argument, the disabled one stayed so");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* Memcpy nodes to and from a __device__ array, of pinned memory. */
	OK(cudaMallocHost(&in, 16 * sizeof(int)));
	OK(cudaMallocHost(&out, 16 * sizeof(int)));
	for (int i = 0; i < 16; i++)
		in[i] = 1000 + i;
	memset(out, 0, 16 * sizeof(int));
	OK(cudaMemcpyToSymbol(sym, out, 16 * sizeof(int)));
	OK(cudaGraphCreate(&g, 0));
	EXPECT(cudaGraphAddMemcpyNodeToSymbol(&to, g, NULL, 0, sym, in, 8 * sizeof(int), 4 * sizeof(int),
					      cudaMemcpyHostToDevice),
	       cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNodeFromSymbol(&from, g, &to, 1, out, sym, 16 * sizeof(int), 0,
						cudaMemcpyDeviceToHost),
	       cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNodeToSymbol(&k1, g, NULL, 0, sym, in, 4, 64 * sizeof(int), cudaMemcpyHostToDevice),
	       cudaErrorInvalidValue);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	all = true;
	for (int i = 0; i < 16; i++)
		all = all && out[i] == (i >= 4 && i < 12 ? 1000 + i - 4 : 0);
	qt_check(all, "a memcpy node to a symbol at an offset, then one from it");
	EXPECT(cudaGraphExecMemcpyNodeSetParamsToSymbol(x, to, sym, in + 8, 4 * sizeof(int), 0, cudaMemcpyHostToDevice),
	       cudaSuccess);
	EXPECT(cudaGraphExecMemcpyNodeSetParamsFromSymbol(x, from, out, sym, 8 * sizeof(int), 0,
							  cudaMemcpyDeviceToHost),
	       cudaSuccess);
	memset(out, 0, 16 * sizeof(int));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	all = true;
	for (int i = 0; i < 16; i++)
		all = all && out[i] == (i < 4 ? 1008 + i : i < 8 ? 1000 + i - 4 : 0);
	qt_check(all, "their parameters changed in the executable graph");
	EXPECT(cudaGraphMemcpyNodeSetParamsToSymbol(to, sym, in, 16 * sizeof(int), 0, cudaMemcpyHostToDevice),
	       cudaSuccess);
	EXPECT(cudaGraphMemcpyNodeSetParamsFromSymbol(from, out, sym, 16 * sizeof(int), 0, cudaMemcpyDeviceToHost),
	       cudaSuccess);
	OK(cudaGraphExecDestroy(x));
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	memset(out, 0, 16 * sizeof(int));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(!memcmp(out, in, 16 * sizeof(int)), "and in the graph, instantiated again");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	OK(cudaFreeHost(in));
	OK(cudaFreeHost(out));
	OK(cudaFree(d));
}

int main(void)
{
	unsigned char *d, *h;

	qt_begin("extras");
	OK(cudaMalloc(&d, N));
	OK(cudaMallocHost(&h, N));
	user_objects(d);
	enabled(d, h);
	node_params(d, h);
	batches(d, h);
	peer_and_arrays(d);
	kernels(d, h);
	OK(cudaFree(d));
	OK(cudaFreeHost(h));
	return qt_end();
}
