/* SPDX-License-Identifier: MIT */
/*
 * Stream capture, the driver API's: the runtime layer's capture
 * (../lib/capture.c) under the thread's current context. A CUgraph is a
 * struct qc_graph *, a CUgraphNode a struct qc_node * (../lib/graph.h);
 * CUgraphEdgeData is cudaGraphEdgeData field for field.
 */
#include "cu.h"
#include "../lib/graph.h"

/* This file defines older ABIs too, under names cuda.h #defines to today's. */
#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuStreamUpdateCaptureDependencies

_Static_assert(sizeof(CUgraphEdgeData) == sizeof(cudaGraphEdgeData), "edge data");

#define S(s) ((cudaStream_t)(s))

static CUresult begin(CUstream s, int ptds, CUstreamCaptureMode mode, CUgraph g, const CUgraphNode *deps,
		      const CUgraphEdgeData *edges, size_t n)
{
	for (size_t i = 0; edges && i < n; i++)
		if (edges[i].type || edges[i].from_port || edges[i].to_port)
			return CUDA_ERROR_NOT_SUPPORTED;
	CU_RUN(qc_capture_begin(S(s), ptds, (enum cudaStreamCaptureMode)mode, (struct qc_graph *)(void *)g,
				(struct qc_node *const *)deps, n));
}

/* The CUDA 10.0 ABI: no mode (global). */
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture(CUstream hStream)
{
	return begin(hStream, 0, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0);
}

CUresult cuStreamBeginCapture_ptsz(CUstream hStream)
{
	return begin(hStream, 1, CU_STREAM_CAPTURE_MODE_GLOBAL, NULL, NULL, NULL, 0);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin(hStream, 0, mode, NULL, NULL, NULL, 0);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	return begin(hStream, 1, mode, NULL, NULL, NULL, 0);
}

CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *deps,
				     const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)
{
	return begin(hStream, 0, mode, hGraph, deps, edges, n);
}

CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph, const CUgraphNode *deps,
					  const CUgraphEdgeData *edges, size_t n, CUstreamCaptureMode mode)
{
	return begin(hStream, 1, mode, hGraph, deps, edges, n);
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	CU_RUN(qc_capture_end(S(hStream), 0, (struct qc_graph **)phGraph));
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	CU_RUN(qc_capture_end(S(hStream), 1, (struct qc_graph **)phGraph));
}

static CUresult info(CUstream s, int ptds, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
		     const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *n)
{
	unsigned long long id64 = 0;
	CUresult r;

	CU_ENTER(r);
	r = cu_result(qc_capture_info(S(s), ptds, (enum cudaStreamCaptureStatus *)st, &id64, (struct qc_graph **)g,
				      (struct qc_node *const **)deps, (const cudaGraphEdgeData **)edges, n));
	if (r == CUDA_SUCCESS && id)
		*id = id64;
	return r;
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return info(hStream, 0, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	return info(hStream, 1, captureStatus, NULL, NULL, NULL, NULL, NULL);
}

/* The CUDA 10.1 ABI (status and id), 11.3's (graph and dependencies) and
 * 12.3's (edges too). */
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id);
CUresult cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return info(s, 0, st, id, NULL, NULL, NULL, NULL);
}

CUresult cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id)
{
	return info(s, 1, st, id, NULL, NULL, NULL, NULL);
}

#define CAPTURE_INFO_V2(name, ptds)                                                                                \
	CUresult name(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
		      size_t *n);                                                                                  \
	CUresult name(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
		      size_t *n)                                                                                   \
	{                                                                                                          \
		return info(s, ptds, st, id, g, deps, NULL, n);                                                    \
	}
CAPTURE_INFO_V2(cuStreamGetCaptureInfo_v2, 0)
CAPTURE_INFO_V2(cuStreamGetCaptureInfo_v2_ptsz, 1)

#define CAPTURE_INFO_V3(name, ptds)                                                                                \
	CUresult name(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
		      const CUgraphEdgeData **edges, size_t *n);                                                   \
	CUresult name(CUstream s, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g, const CUgraphNode **deps, \
		      const CUgraphEdgeData **edges, size_t *n)                                                    \
	{                                                                                                          \
		return info(s, ptds, st, id, g, deps, edges, n);                                                   \
	}
CAPTURE_INFO_V3(cuStreamGetCaptureInfo_v3, 0)
CAPTURE_INFO_V3(cuStreamGetCaptureInfo_v3_ptsz, 1)

#define UPDATE_DEPS(name, ptds)                                                                      \
	CUresult name(CUstream s, CUgraphNode *deps, size_t n, unsigned int flags);                  \
	CUresult name(CUstream s, CUgraphNode *deps, size_t n, unsigned int flags)                   \
	{                                                                                            \
		CU_RUN(qc_capture_update_deps(S(s), ptds, (struct qc_node *const *)deps, n, flags)); \
	}
UPDATE_DEPS(cuStreamUpdateCaptureDependencies, 0)
UPDATE_DEPS(cuStreamUpdateCaptureDependencies_ptsz, 1)

#define UPDATE_DEPS_V2(name, ptds)                                                                                \
	CUresult name(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, unsigned int flags); \
	CUresult name(CUstream s, CUgraphNode *deps, const CUgraphEdgeData *edges, size_t n, unsigned int flags)  \
	{                                                                                                         \
		(void)edges;                                                                                      \
		CU_RUN(qc_capture_update_deps(S(s), ptds, (struct qc_node *const *)deps, n, flags));              \
	}
UPDATE_DEPS_V2(cuStreamUpdateCaptureDependencies_v2, 0)
UPDATE_DEPS_V2(cuStreamUpdateCaptureDependencies_v2_ptsz, 1)

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	return cu_result(qc_capture_exchange_mode((enum cudaStreamCaptureMode *)mode));
}
