// SPDX-License-Identifier: MIT
// graphs: CUDA graphs, captured and built: stream capture of copies,
// memsets, host functions and (on a GPU) kernels, fork and join across
// streams through events, what invalidates a capture; graphs built node by
// node (memset, memcpy, host, empty, child graph, event record and wait,
// kernel; also through the generic cudaGraphAddNode), their listing and edges, instantiate, launch, clone, update of
// an executable graph; the bytes each launch leaves.
#include <pthread.h>

#include "qctest.h"

#define N 4096

static int host_calls;
static void CUDART_CB count_call(void *arg)
{
	host_calls += (int)(intptr_t)arg;
}

__global__ void add(int *p, int n, int v)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		p[i] += v;
}

static size_t count_nodes(cudaGraph_t g)
{
	size_t n = 0;

	OK(cudaGraphGetNodes(g, NULL, &n));
	return n;
}

static size_t count_roots(cudaGraph_t g)
{
	size_t n = 0;

	OK(cudaGraphGetRootNodes(g, NULL, &n));
	return n;
}

static size_t count_edges(cudaGraph_t g)
{
	size_t n = 0;

	OK(cudaGraphGetEdges(g, NULL, NULL, NULL, &n));
	return n;
}

/* A captured sequence: memset, copy in, host function, copy out. */
static void capture_basic(unsigned char *d, unsigned char *h_in, unsigned char *h_out)
{
	cudaStream_t s;
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	enum cudaStreamCaptureStatus st;
	unsigned long long id = 0;
	const cudaGraphNode_t *deps = NULL;
	size_t ndeps = 99;
	cudaGraphNode_t nodes[4];
	enum cudaGraphNodeType type;
	size_t n = 4;

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	EXPECT(cudaStreamIsCapturing(s, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusNone, "a new stream is not capturing");
	qt_fill(h_in, N, 7);
	memset(h_out, 0, N);
	host_calls = 0;

	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
	EXPECT(cudaStreamIsCapturing(s, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusActive, "capturing after cudaStreamBeginCapture");
	EXPECT(cudaStreamGetCaptureInfo(s, &st, &id, NULL, &deps, NULL, &ndeps), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusActive && id != 0 && ndeps == 0,
		 "capture info: active, an id, no dependencies yet");
	EXPECT(cudaMemsetAsync(d, 0x5a, N, s), cudaSuccess);
	EXPECT(cudaStreamGetCaptureInfo(s, &st, NULL, NULL, &deps, NULL, &ndeps), cudaSuccess);
	qt_check(ndeps == 1 && deps && cudaGraphNodeGetType(deps[0], &type) == cudaSuccess &&
			 type == cudaGraphNodeTypeMemset,
		 "after a memset the capture depends on its memset node");
	EXPECT(cudaMemcpyAsync(d, h_in, N / 2, cudaMemcpyHostToDevice, s), cudaSuccess);
	EXPECT(cudaLaunchHostFunc(s, count_call, (void *)(intptr_t)1), cudaSuccess);
	EXPECT(cudaMemcpyAsync(h_out, d, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
	EXPECT(cudaStreamEndCapture(s, &g), cudaSuccess);
	EXPECT(cudaStreamIsCapturing(s, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusNone, "not capturing after cudaStreamEndCapture");
	OK(cudaStreamSynchronize(s));
	qt_check(host_calls == 0 && qt_not_byte(h_out, 0, N) < 0, "captured work did not run");

	qt_check(count_nodes(g) == 4 && count_roots(g) == 1 && count_edges(g) == 3,
		 "the captured graph is a chain of 4 nodes");
	EXPECT(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
	{
		enum cudaGraphNodeType want[4] = { cudaGraphNodeTypeMemset, cudaGraphNodeTypeMemcpy,
						   cudaGraphNodeTypeHost, cudaGraphNodeTypeMemcpy };
		bool same = n == 4;

		for (int i = 0; same && i < 4; i++)
			same = cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess && type == want[i];
		qt_check(same, "its nodes: memset, memcpy, host, memcpy");
	}

	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	for (int i = 0; i < 3; i++)
		EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(host_calls == 3, "three launches ran the host function three times (%d)", host_calls);
	qt_check(qt_diff(h_out, h_in, N / 2) < 0 && qt_not_byte(h_out + N / 2, 0x5a, N / 2) < 0,
		 "the graph's copies and memset left the right bytes");
	EXPECT(cudaGraphUpload(x, s), cudaSuccess);
	EXPECT(cudaGraphExecDestroy(x), cudaSuccess);
	EXPECT(cudaGraphDestroy(g), cudaSuccess);
	OK(cudaStreamDestroy(s));
}

/* Fork and join: s2 joins s1's capture through an event and rejoins it. */
static void capture_fork_join(unsigned char *d, unsigned char *h_out)
{
	cudaStream_t s1, s2;
	cudaEvent_t fork, join;
	cudaGraph_t g = NULL;
	cudaGraphExec_t x = NULL;
	enum cudaStreamCaptureStatus st;
	unsigned long long id1 = 0, id2 = 0;

	OK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
	OK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
	OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
	memset(h_out, 0, N);

	EXPECT(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	EXPECT(cudaEventRecord(fork, s1), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
	EXPECT(cudaStreamGetCaptureInfo(s1, &st, &id1), cudaSuccess);
	EXPECT(cudaStreamGetCaptureInfo(s2, &st, &id2), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusActive && id1 == id2,
		 "the waiting stream joined the capture (the same capture id)");
	EXPECT(cudaMemsetAsync(d, 0x11, N / 2, s1), cudaSuccess);
	EXPECT(cudaMemsetAsync(d + N / 2, 0x22, N / 2, s2), cudaSuccess);
	EXPECT(cudaEventRecord(join, s2), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(s1, join, 0), cudaSuccess);
	EXPECT(cudaMemcpyAsync(h_out, d, N, cudaMemcpyDeviceToHost, s1), cudaSuccess);
	EXPECT(cudaStreamEndCapture(s1, &g), cudaSuccess);
	EXPECT(cudaStreamIsCapturing(s2, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusNone, "the joined stream left the capture at its end");
	qt_check(count_nodes(g) == 3 && count_roots(g) == 2 && count_edges(g) == 2,
		 "fork and join: two memsets, both before the copy");

	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s2), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s2), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x11, N / 2) < 0 && qt_not_byte(h_out + N / 2, 0x22, N / 2) < 0,
		 "both branches ran before the copy");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* A branch not joined back: the capture fails at its end. */
	g = (cudaGraph_t)(void *)1;
	EXPECT(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal), cudaSuccess);
	EXPECT(cudaEventRecord(fork, s1), cudaSuccess);
	EXPECT(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
	EXPECT(cudaMemsetAsync(d, 0x33, N, s2), cudaSuccess);
	EXPECT(cudaStreamEndCapture(s1, &g), cudaErrorStreamCaptureUnjoined);
	qt_check(g == NULL, "no graph from an unjoined capture");
	cudaGetLastError();
	OK(cudaEventDestroy(fork));
	OK(cudaEventDestroy(join));
	OK(cudaStreamDestroy(s1));
}

/* The per-thread default stream is each thread's own: capturing it in one
 * thread leaves another thread's alone (relaxed mode: it may do anything). */
struct other_thread {
	unsigned char *d, *h;
	cudaError_t set, sync, copy;
};

static void *other_per_thread(void *arg)
{
	struct other_thread *o = (struct other_thread *)arg;

	/* Only its per-thread stream: the legacy stream would synchronize with
	 * the capturing one. */
	o->set = cudaMemsetAsync(o->d, 0x6b, 256, cudaStreamPerThread);
	o->copy = cudaMemcpyAsync(o->h, o->d, 256, cudaMemcpyDeviceToHost, cudaStreamPerThread);
	o->sync = cudaStreamSynchronize(cudaStreamPerThread);
	return NULL;
}

static void capture_per_thread(unsigned char *d, unsigned char *h_out)
{
	struct other_thread o = { d + 1024, h_out, cudaErrorUnknown, cudaErrorUnknown, cudaErrorUnknown };
	cudaGraph_t g = NULL;
	pthread_t t;

	memset(h_out, 0, 256);
	EXPECT(cudaStreamBeginCapture(cudaStreamPerThread, cudaStreamCaptureModeRelaxed), cudaSuccess);
	EXPECT(cudaMemsetAsync(d, 0x5c, 256, cudaStreamPerThread), cudaSuccess);
	pthread_create(&t, NULL, other_per_thread, &o);
	pthread_join(t, NULL);
	qt_check(o.set == cudaSuccess && o.sync == cudaSuccess && o.copy == cudaSuccess &&
			 qt_not_byte(h_out, 0x6b, 256) < 0,
		 "another thread's per-thread stream ran its work while this thread's was captured");
	EXPECT(cudaStreamEndCapture(cudaStreamPerThread, &g), cudaSuccess);
	qt_check(g && count_nodes(g) == 1, "the capture took this thread's memset only");
	if (g)
		OK(cudaGraphDestroy(g));
}

/* A synchronizing call on a capturing stream invalidates the capture. */
static void capture_invalidated(unsigned char *d)
{
	cudaStream_t s;
	cudaGraph_t g = (cudaGraph_t)(void *)1;
	enum cudaStreamCaptureStatus st;
	enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;

	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	EXPECT(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal),
	       cudaErrorStreamCaptureUnsupported);
	EXPECT(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
	cudaGetLastError();
	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	EXPECT(cudaMemsetAsync(d, 1, N, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
	EXPECT(cudaStreamIsCapturing(s, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusInvalidated, "the capture is invalidated");
	EXPECT(cudaMemsetAsync(d, 2, N, s), cudaErrorStreamCaptureInvalidated);
	EXPECT(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
	qt_check(g == NULL, "no graph from an invalidated capture");
	cudaGetLastError();
	EXPECT(cudaStreamIsCapturing(s, &st), cudaSuccess);
	qt_check(st == cudaStreamCaptureStatusNone, "the stream is usable again");
	EXPECT(cudaMemsetAsync(d, 3, N, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);

	EXPECT(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
	qt_check(mode == cudaStreamCaptureModeGlobal, "the thread's capture mode was global");
	EXPECT(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
	qt_check(mode == cudaStreamCaptureModeRelaxed, "and is exchanged back");
	OK(cudaStreamDestroy(s));
}

/* A graph built node by node. */
static void built(unsigned char *d, unsigned char *h_out)
{
	cudaStream_t s;
	cudaEvent_t ev;
	cudaGraph_t g, child, clone;
	cudaGraphExec_t x;
	cudaGraphNode_t set, copy, host, empty, sub, rec, found, deps[4], outs[4];
	struct cudaMemsetParams mp;
	struct cudaHostNodeParams hp = { count_call, (void *)(intptr_t)10 };
	cudaGraphExecUpdateResultInfo info;
	unsigned long long flags = 99;
	size_t n;
	unsigned int want = 0x01020304;

	OK(cudaStreamCreate(&s));
	OK(cudaEventCreate(&ev));
	memset(h_out, 0, N);
	host_calls = 0;
	EXPECT(cudaGraphCreate(&g, 0), cudaSuccess);
	EXPECT(cudaGraphCreate(&g, 1), cudaErrorInvalidValue);
	EXPECT(cudaGraphCreate(&g, 0), cudaSuccess);
	qt_check(count_nodes(g) == 0, "a new graph has no nodes");

	memset(&mp, 0, sizeof(mp));
	mp.dst = d, mp.value = want, mp.elementSize = 4, mp.width = N / 4, mp.height = 1;
	EXPECT(cudaGraphAddMemsetNode(&set, g, NULL, 0, &mp), cudaSuccess);
	mp.elementSize = 3;
	EXPECT(cudaGraphAddMemsetNode(&found, g, NULL, 0, &mp), cudaErrorInvalidValue);
	EXPECT(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h_out, d, N, cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaGraphAddHostNode(&host, g, &copy, 1, &hp), cudaSuccess);
	EXPECT(cudaGraphAddEmptyNode(&empty, g, &host, 1), cudaSuccess);
	EXPECT(cudaGraphAddEventRecordNode(&rec, g, &empty, 1, ev), cudaSuccess);

	/* A child graph: set the first 16 bytes to 0xee after the copy (not seen by it). */
	EXPECT(cudaGraphCreate(&child, 0), cudaSuccess);
	memset(&mp, 0, sizeof(mp));
	mp.dst = d, mp.value = 0xee, mp.elementSize = 1, mp.width = 16, mp.height = 1;
	EXPECT(cudaGraphAddMemsetNode(&found, child, NULL, 0, &mp), cudaSuccess);
	EXPECT(cudaGraphAddChildGraphNode(&sub, g, &copy, 1, child), cudaSuccess);
	qt_check(count_nodes(g) == 6 && count_roots(g) == 1 && count_edges(g) == 5, "6 nodes, one root, 5 edges");
	n = 4;
	EXPECT(cudaGraphNodeGetDependentNodes(copy, outs, NULL, &n), cudaSuccess);
	qt_check(n == 2, "the copy has two dependents (%zu)", n);
	n = 4;
	EXPECT(cudaGraphNodeGetDependencies(rec, deps, NULL, &n), cudaSuccess);
	qt_check(n == 1 && deps[0] == empty, "the record node depends on the empty node");

	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphExecGetFlags(x, &flags), cudaSuccess);
	qt_check(flags == 0, "instantiated with no flags");
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaEventSynchronize(ev), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	{
		unsigned int first;

		memcpy(&first, h_out, 4);
		qt_check(first == want && qt_diff(h_out, h_out + 4, N - 4) < 0,
			 "a 32-bit memset node wrote its pattern throughout");
	}
	qt_check(host_calls == 10, "the host node ran once with its argument (%d)", host_calls);
	OK(cudaMemcpy(h_out, d, 32, cudaMemcpyDeviceToHost));
	qt_check(qt_not_byte(h_out, 0xee, 16) < 0 && h_out[16] == 0x04, "the child graph ran");

	/* Changing the graph does not change the executable graph; an update does. */
	hp.userData = (void *)(intptr_t)100;
	EXPECT(cudaGraphHostNodeSetParams(host, &hp), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(host_calls == 20, "the executable graph kept its own parameters (%d)", host_calls);
	EXPECT(cudaGraphExecUpdate(x, g, &info), cudaSuccess);
	qt_check(info.result == cudaGraphExecUpdateSuccess, "the update succeeded");
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(host_calls == 120, "the updated graph ran with the new argument (%d)", host_calls);
	hp.userData = (void *)(intptr_t)1000;
	EXPECT(cudaGraphExecHostNodeSetParams(x, host, &hp), cudaSuccess);
	memset(&mp, 0, sizeof(mp));
	mp.dst = d, mp.value = 0x77, mp.elementSize = 1, mp.width = N, mp.height = 1;
	EXPECT(cudaGraphExecMemsetNodeSetParams(x, set, &mp), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaStreamSynchronize(s));
	qt_check(host_calls == 1120 && h_out[100] == 0x77 && h_out[N - 1] == 0x77,
		 "node parameters set in the executable graph took effect");

	/* A clone has the same nodes; one with another shape does not update. */
	EXPECT(cudaGraphClone(&clone, g), cudaSuccess);
	qt_check(count_nodes(clone) == 6 && count_edges(clone) == 5, "the clone has the same nodes and edges");
	EXPECT(cudaGraphNodeFindInClone(&found, copy, clone), cudaSuccess);
	{
		enum cudaGraphNodeType type;

		qt_check(found != copy && cudaGraphNodeGetType(found, &type) == cudaSuccess &&
				 type == cudaGraphNodeTypeMemcpy,
			 "the copy's twin in the clone");
	}
	EXPECT(cudaGraphDestroyNode(found), cudaSuccess);
	qt_check(count_nodes(clone) == 5 && count_edges(clone) == 2, "a node removed with its edges");
	EXPECT(cudaGraphExecUpdate(x, clone, &info), cudaErrorGraphExecUpdateFailure);
	qt_check(info.result == cudaGraphExecUpdateErrorTopologyChanged, "a changed topology is refused");
	cudaGetLastError();
	EXPECT(cudaGraphAddDependencies(g, &set, &empty, NULL, 1), cudaSuccess);
	qt_check(count_edges(g) == 6, "an edge added");
	EXPECT(cudaGraphRemoveDependencies(g, &set, &empty, NULL, 1), cudaSuccess);
	qt_check(count_edges(g) == 5, "and removed");

	/* A graph cannot be launched into a capture (CUDA 13 refuses it and
	 * invalidates the capture). */
	{
		cudaGraph_t outer = (cudaGraph_t)(void *)1;

		EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
		EXPECT(cudaGraphLaunch(x, s), cudaErrorStreamCaptureUnsupported);
		EXPECT(cudaStreamEndCapture(s, &outer), cudaErrorStreamCaptureInvalidated);
		qt_check(outer == NULL, "no graph from it");
		cudaGetLastError();
	}
	{
		cudaGraphExec_t x2;
		cudaGraphInstantiateParams ip;

		memset(&ip, 0, sizeof(ip));
		EXPECT(cudaGraphInstantiateWithParams(&x2, g, &ip), cudaSuccess);
		qt_check(ip.result_out == cudaGraphInstantiateSuccess, "instantiated with parameters");
		OK(cudaGraphExecDestroy(x2));
	}
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(clone));
	OK(cudaGraphDestroy(child));
	OK(cudaGraphDestroy(g));
	OK(cudaEventDestroy(ev));
	OK(cudaStreamDestroy(s));
}

static bool types_are(cudaGraph_t g, const enum cudaGraphNodeType *want, size_t n)
{
	cudaGraphNode_t nodes[8];
	enum cudaGraphNodeType type;
	size_t got = 8;

	if (cudaGraphGetNodes(g, nodes, &got) != cudaSuccess || got != n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (cudaGraphNodeGetType(nodes[i], &type) != cudaSuccess || type != want[i])
			return false;
	return true;
}

/* Memory alloc and free nodes, built and captured (cudaMallocAsync and
 * cudaFreeAsync in a capture). */
static void mem_nodes(unsigned char *h_out)
{
	cudaStream_t s;
	cudaGraph_t g, cg;
	cudaGraphExec_t x;
	cudaGraphNode_t a, set, copy, fr;
	struct cudaMemAllocNodeParams ap = {};
	struct cudaMemsetParams mp = {};
	void *freed = NULL, *p = NULL;
	uint64_t used = 0;

	OK(cudaStreamCreate(&s));
	OK(cudaGraphCreate(&g, 0));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = N;
	EXPECT(cudaGraphAddMemAllocNode(&a, g, NULL, 0, &ap), cudaSuccess);
	qt_check(ap.dptr != NULL, "an alloc node has its address when it is made");
	mp.dst = ap.dptr, mp.value = 0x42, mp.elementSize = 1, mp.width = N, mp.height = 1;
	EXPECT(cudaGraphAddMemsetNode(&set, g, &a, 1, &mp), cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h_out, ap.dptr, N, cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaGraphAddMemFreeNode(&fr, g, &copy, 1, ap.dptr), cudaSuccess);
	EXPECT(cudaGraphMemFreeNodeGetParams(fr, &freed), cudaSuccess);
	qt_check(freed == ap.dptr, "the free node frees the alloc node's memory");
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	memset(h_out, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x42, N) < 0, "an alloc node's memory is there until its free node");
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	memset(h_out, 0, N);
	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	EXPECT(cudaMallocAsync(&p, 4096, s), cudaSuccess);
	EXPECT(cudaMemsetAsync(p, 0x21, 4096, s), cudaSuccess);
	EXPECT(cudaMemcpyAsync(h_out, p, 4096, cudaMemcpyDeviceToHost, s), cudaSuccess);
	EXPECT(cudaFreeAsync(p, s), cudaSuccess);
	EXPECT(cudaStreamEndCapture(s, &cg), cudaSuccess);
	{
		const enum cudaGraphNodeType want[] = { cudaGraphNodeTypeMemAlloc, cudaGraphNodeTypeMemset,
							cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemFree };

		qt_check(types_are(cg, want, 4), "cudaMallocAsync and cudaFreeAsync captured as alloc and free nodes");
	}
	EXPECT(cudaGraphInstantiate(&x, cg, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x21, 4096) < 0, "the captured allocation worked");
	EXPECT(cudaDeviceGetGraphMemAttribute(0, cudaGraphMemAttrUsedMemHigh, &used), cudaSuccess);
	EXPECT(cudaDeviceGraphMemTrim(0), cudaSuccess);
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(cg));
	OK(cudaStreamDestroy(s));
}

/*
 * An alloc node's memory freed outside its graph, each way CUDA allows (on a
 * stream, with cudaFree, by another graph's free node), then the graph
 * launched again: the memory is the graph's again at each launch.
 */
static void mem_freed_outside(unsigned char *h_out)
{
	cudaStream_t s;
	cudaGraph_t g, g2;
	cudaGraphExec_t x, x2;
	cudaGraphNode_t a, set, copy, fr;
	struct cudaMemAllocNodeParams ap = {};
	struct cudaMemsetParams mp = {};

	OK(cudaStreamCreate(&s));
	OK(cudaGraphCreate(&g, 0));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = N;
	EXPECT(cudaGraphAddMemAllocNode(&a, g, NULL, 0, &ap), cudaSuccess);
	mp.dst = ap.dptr, mp.value = 0x5a, mp.elementSize = 1, mp.width = N, mp.height = 1;
	EXPECT(cudaGraphAddMemsetNode(&set, g, &a, 1, &mp), cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h_out, ap.dptr, N, cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	OK(cudaGraphCreate(&g2, 0));
	EXPECT(cudaGraphAddMemFreeNode(&fr, g2, NULL, 0, ap.dptr), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x2, g2, 0), cudaSuccess);
	for (int round = 0; round < 3; round++) {
		memset(h_out, 0, N);
		EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
		qt_check(qt_not_byte(h_out, 0x5a, N) < 0, "the alloc node's memory is there at each launch");
		memset(h_out, 0, N);
		EXPECT(cudaMemcpyAsync(h_out, ap.dptr, N, cudaMemcpyDeviceToHost, s), cudaSuccess);
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
		qt_check(qt_not_byte(h_out, 0x5a, N) < 0, "and a copy outside the graph reads it");
		if (round == 0) {
			EXPECT(cudaFreeAsync(ap.dptr, s), cudaSuccess);
		} else if (round == 1) {
			EXPECT(cudaFree(ap.dptr), cudaSuccess);
		} else {
			EXPECT(cudaGraphLaunch(x2, s), cudaSuccess);
		}
		EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	}
	OK(cudaGraphExecDestroy(x2));
	OK(cudaGraphDestroy(g2));
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
}

/*
 * Graph memory reused within a graph (issue 34): alloc A -> free A -> alloc
 * B of no more bytes gets A's address, as CUDA gives it; B keeps its own
 * size and its memory works. An alloc node not ordered after the free (C)
 * gets memory of its own.
 */
static void mem_reuse(unsigned char *h_out)
{
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t a, fa, b, set, copy, fb, c;
	struct cudaMemAllocNodeParams ap = {}, bp, cp, got;
	struct cudaMemsetParams mp = {};

	OK(cudaStreamCreate(&s));
	OK(cudaGraphCreate(&g, 0));
	ap.poolProps.allocType = cudaMemAllocationTypePinned;
	ap.poolProps.location.type = cudaMemLocationTypeDevice;
	ap.poolProps.location.id = 0;
	ap.bytesize = N;
	bp = ap, cp = ap;
	bp.bytesize = N / 2;
	EXPECT(cudaGraphAddMemAllocNode(&a, g, NULL, 0, &ap), cudaSuccess);
	EXPECT(cudaGraphAddMemFreeNode(&fa, g, &a, 1, ap.dptr), cudaSuccess);
	EXPECT(cudaGraphAddMemAllocNode(&b, g, &fa, 1, &bp), cudaSuccess);
	qt_check(bp.dptr == ap.dptr, "an alloc node after a free node of the same graph reuses its address");
	EXPECT(cudaGraphMemAllocNodeGetParams(b, &got), cudaSuccess);
	qt_check(got.bytesize == N / 2 && got.dptr == ap.dptr, "and keeps its own size");
	mp.dst = bp.dptr, mp.value = 0x62, mp.elementSize = 1, mp.width = N / 2, mp.height = 1;
	EXPECT(cudaGraphAddMemsetNode(&set, g, &b, 1, &mp), cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h_out, bp.dptr, N / 2, cudaMemcpyDeviceToHost), cudaSuccess);
	EXPECT(cudaGraphAddMemFreeNode(&fb, g, &copy, 1, bp.dptr), cudaSuccess);
	EXPECT(cudaGraphAddMemAllocNode(&c, g, NULL, 0, &cp), cudaSuccess);
	qt_check(cp.dptr != NULL && cp.dptr != ap.dptr,
		 "an alloc node not ordered after the free has memory of its own");
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	memset(h_out, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x62, N / 2) < 0, "the reused memory works");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
}

/*
 * The generic node calls (cudaGraphAddNode, cudaGraphNodeSetParams,
 * cudaGraphExecNodeSetParams; the default build reaches them through the
 * driver's cuGraphAddNode_v2 and its twins): a graph of alloc, memset,
 * memcpy, host, empty and free nodes made with them runs; a memset's value
 * set in the graph and then in the executable graph is what the next
 * launch writes; an alloc node's parameters cannot be set.
 */
static void generic_nodes(unsigned char *d, unsigned char *h_out)
{
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t a, set, copy, host, empty, fr;
	struct cudaGraphNodeParams p = {};
	int calls = host_calls;

	OK(cudaStreamCreate(&s));
	OK(cudaGraphCreate(&g, 0));
	p.type = cudaGraphNodeTypeMemAlloc;
	p.alloc.poolProps.allocType = cudaMemAllocationTypePinned;
	p.alloc.poolProps.location.type = cudaMemLocationTypeDevice;
	p.alloc.poolProps.location.id = 0;
	p.alloc.bytesize = N;
	EXPECT(cudaGraphAddNode(&a, g, NULL, NULL, 0, &p), cudaSuccess);
	void *mem = p.alloc.dptr;
	qt_check(mem != NULL, "cudaGraphAddNode gives an alloc node's address back");
	EXPECT(cudaGraphNodeSetParams(a, &p), cudaErrorNotSupported);
	cudaGetLastError(); /* the refusal is also the last error, natively too */
	p = {};
	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = mem, p.memset.value = 0x33, p.memset.elementSize = 1, p.memset.width = N, p.memset.height = 1;
	EXPECT(cudaGraphAddNode(&set, g, &a, NULL, 1, &p), cudaSuccess);
	p = {};
	p.type = cudaGraphNodeTypeMemcpy;
	p.memcpy.copyParams.srcPtr = make_cudaPitchedPtr(mem, N, N, 1);
	p.memcpy.copyParams.dstPtr = make_cudaPitchedPtr(h_out, N, N, 1);
	p.memcpy.copyParams.extent = make_cudaExtent(N, 1, 1);
	p.memcpy.copyParams.kind = cudaMemcpyDeviceToHost;
	EXPECT(cudaGraphAddNode(&copy, g, &set, NULL, 1, &p), cudaSuccess);
	p = {};
	p.type = cudaGraphNodeTypeHost;
	p.host.fn = count_call, p.host.userData = (void *)(intptr_t)1;
	EXPECT(cudaGraphAddNode(&host, g, &copy, NULL, 1, &p), cudaSuccess);
	p = {};
	p.type = cudaGraphNodeTypeEmpty;
	EXPECT(cudaGraphAddNode(&empty, g, &host, NULL, 1, &p), cudaSuccess);
	p = {};
	p.type = cudaGraphNodeTypeMemFree;
	p.free.dptr = mem;
	EXPECT(cudaGraphAddNode(&fr, g, &empty, NULL, 1, &p), cudaSuccess);
	qt_check(count_nodes(g) == 6 && count_edges(g) == 5, "six nodes in a chain");
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	memset(h_out, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x33, N) < 0, "the generic nodes ran: memset, then the copy out");
	qt_check(host_calls == calls + 1, "and the host node, once");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	OK(cudaGraphCreate(&g, 0));
	p = {};
	p.type = cudaGraphNodeTypeMemset;
	p.memset.dst = d, p.memset.value = 0x11, p.memset.elementSize = 1, p.memset.width = N, p.memset.height = 1;
	EXPECT(cudaGraphAddNode(&set, g, NULL, NULL, 0, &p), cudaSuccess);
	EXPECT(cudaGraphAddMemcpyNode1D(&copy, g, &set, 1, h_out, d, N, cudaMemcpyDeviceToHost), cudaSuccess);
	p.memset.value = 0x44;
	EXPECT(cudaGraphNodeSetParams(set, &p), cudaSuccess);
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	memset(h_out, 0, N);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x44, N) < 0, "cudaGraphNodeSetParams changed the memset's value");
	p.memset.value = 0x55;
	EXPECT(cudaGraphExecNodeSetParams(x, set, &p), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaStreamSynchronize(s), cudaSuccess);
	qt_check(qt_not_byte(h_out, 0x55, N) < 0, "cudaGraphExecNodeSetParams changed it in the executable graph");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
}

/* Kernels: captured and as kernel nodes, and parameters changed in place. */
static void kernels(void)
{
	enum { M = 1000, CHAIN = 200 };
	static int h[M];
	int *d;
	cudaStream_t s;
	cudaGraph_t g;
	cudaGraphExec_t x;
	cudaGraphNode_t node, prev = NULL;
	struct cudaKernelNodeParams kp, got;
	int n = M, v = 1;
	void *args[] = { &d, &n, &v };
	bool all = true;

	OK(cudaMalloc(&d, M * sizeof(int)));
	OK(cudaMemset(d, 0, M * sizeof(int)));
	OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	EXPECT(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
	add<<<(M + 255) / 256, 256, 0, s>>>(d, M, 1);
	if (!FIRST_KERNEL_USE(cudaGetLastError())) {
		cudaStreamEndCapture(s, &g);
		return;
	}
	add<<<(M + 255) / 256, 256, 0, s>>>(d, M, 2);
	EXPECT(cudaLaunchKernel((const void *)add, dim3((M + 255) / 256), dim3(256), args, 0, s), cudaSuccess);
	EXPECT(cudaStreamEndCapture(s, &g), cudaSuccess);
	qt_check(count_nodes(g) == 3 && count_edges(g) == 2, "three captured launches, a chain");
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
	OK(cudaStreamSynchronize(s));
	for (int i = 0; i < M; i++)
		all = all && h[i] == 8;
	qt_check(all, "two launches of the captured graph added 2 x (1 + 2 + 1)");
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));

	/* A chain of kernel nodes, one changed in the executable graph. */
	OK(cudaGraphCreate(&g, 0));
	kp = cudaKernelNodeParams();
	kp.func = (void *)add;
	kp.gridDim = dim3((M + 255) / 256);
	kp.blockDim = dim3(256);
	kp.kernelParams = args;
	for (int i = 0; i < CHAIN; i++) {
		EXPECT(cudaGraphAddKernelNode(&node, g, prev ? &prev : NULL, prev ? 1 : 0, &kp), cudaSuccess);
		prev = node;
	}
	EXPECT(cudaGraphKernelNodeGetParams(node, &got), cudaSuccess);
	qt_check(got.func == (void *)add && got.gridDim.x == kp.gridDim.x && got.blockDim.x == 256 &&
			 got.kernelParams && *(int *)got.kernelParams[2] == 1,
		 "a kernel node's parameters read back");
	EXPECT(cudaGraphInstantiate(&x, g, 0), cudaSuccess);
	v = 1000;
	EXPECT(cudaGraphExecKernelNodeSetParams(x, node, &kp), cudaSuccess);
	OK(cudaMemset(d, 0, M * sizeof(int)));
	EXPECT(cudaGraphLaunch(x, s), cudaSuccess);
	OK(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
	OK(cudaStreamSynchronize(s));
	all = true;
	for (int i = 0; i < M; i++)
		all = all && h[i] == CHAIN - 1 + 1000;
	qt_check(all, "a chain of %d kernel nodes ran in order, the last one with its new argument", (int)CHAIN);
	OK(cudaGraphExecDestroy(x));
	OK(cudaGraphDestroy(g));
	OK(cudaStreamDestroy(s));
	OK(cudaFree(d));
}

int main(void)
{
	unsigned char *d, *h_in, *h_out;

	qt_begin("graphs");
	OK(cudaMalloc(&d, N));
	OK(cudaMallocHost(&h_in, N));
	OK(cudaMallocHost(&h_out, N));
	capture_basic(d, h_in, h_out);
	capture_fork_join(d, h_out);
	capture_invalidated(d);
	capture_per_thread(d, h_out);
	built(d, h_out);
	mem_nodes(h_out);
	mem_freed_outside(h_out);
	generic_nodes(d, h_out);
	mem_reuse(h_out);
	OK(cudaFree(d));
	OK(cudaFreeHost(h_in));
	OK(cudaFreeHost(h_out));
	kernels();
	return qt_end();
}
