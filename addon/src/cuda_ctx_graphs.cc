// CudaContext's graph calls: CUDA graphs for the guest's graphs with
// conditional nodes (backend/src/qcuda/commands/graph.ts says why those are
// real graphs). A graph made by graphCreate holds the conditional handles
// (cuGraphConditionalHandleCreate ties a handle to a graph, and kernels take
// the handle as a parameter before any node exists); graphInstantiate builds
// the nodes into it, instantiates, and takes the nodes out again, so the same
// graph serves the next instantiation. The dispatcher has checked every node
// against the session; the checks here keep the addon safe on its own
// (indices, parents, the parameter blob's bounds, handles of this context).
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

// A node record: 16 u64 (backend/src/qcuda/providers/cuda/cuda.ts graphRecords).
constexpr size_t kRecord = 16;
enum : uint64_t { kKernel = 1, kMemcpy = 2, kMemset = 3, kEmpty = 4, kEventRecord = 5, kEventWait = 6, kCond = 7 };
constexpr uint64_t kTop = 0xffffffff;

bool HaveGraphs(Job &job) {
  const cu::Api &a = cu::api();
  return Have(job, a.GraphCreate, "cuGraphCreate") && Have(job, a.GraphAddNode, "cuGraphAddNode_v2") &&
         Have(job, a.GraphAddKernelNode, "cuGraphAddKernelNode_v2") &&
         Have(job, a.GraphAddMemcpyNode, "cuGraphAddMemcpyNode") &&
         Have(job, a.GraphAddMemsetNode, "cuGraphAddMemsetNode") &&
         Have(job, a.GraphAddEmptyNode, "cuGraphAddEmptyNode") &&
         Have(job, a.GraphAddEventRecordNode, "cuGraphAddEventRecordNode") &&
         Have(job, a.GraphAddEventWaitNode, "cuGraphAddEventWaitNode") &&
         Have(job, a.GraphDestroyNode, "cuGraphDestroyNode") &&
         Have(job, a.GraphInstantiateWithFlags, "cuGraphInstantiateWithFlags") &&
         Have(job, a.GraphLaunch, "cuGraphLaunch") && Have(job, a.GraphExecDestroy, "cuGraphExecDestroy") &&
         Have(job, a.GraphConditionalHandleCreate, "cuGraphConditionalHandleCreate") &&
         Have(job, a.GraphDestroy, "cuGraphDestroy");
}

// What one instantiation builds: the nodes made so far and each conditional node's bodies.
struct Build {
  Job &job;
  cu::Graph top;
  const std::vector<uint64_t> &recs;
  const std::vector<uint8_t> &params;
  std::vector<std::vector<uint32_t>> from;  // per node, the nodes it follows (their indices)
  std::vector<cu::GraphNode> nodes;
  std::vector<std::vector<cu::Graph>> bodies;  // per node: a conditional node's body graphs
};

// The graph node i goes into; null (and the job failed) when its parent is not an earlier conditional node.
cu::Graph ScopeOf(Build &b, size_t i) {
  const uint64_t parent = b.recs[i * kRecord + 1], body = b.recs[i * kRecord + 2];
  if (parent == kTop) return b.top;
  if (parent >= i || body >= b.bodies[parent].size()) {
    b.job.Fail(cu::kInvalidValue, "qcuda: graph node outside an earlier conditional node's bodies");
    return nullptr;
  }
  return b.bodies[parent][body];
}

bool AddKernel(Build &b, cu::GraphNode *out, cu::Graph g, const uint64_t *f, const cu::GraphNode *deps, size_t n) {
  const CtxCore::Fn *fn = b.job.ctx->LookupFunction(b.job, static_cast<uint32_t>(f[0]));
  const uint64_t off = f[8], len = f[9];
  if (fn == nullptr) return false;
  if (f[0] > UINT32_MAX || len != fn->paramBytes || off > b.params.size() || len > b.params.size() - off) {
    b.job.Fail(cu::kInvalidValue, "qcuda: graph kernel node parameters");
    return false;
  }
  // One pointer per parameter into the blob (the node copies them).
  std::vector<void *> ptrs;
  for (uint32_t o : fn->offsets) ptrs.push_back(const_cast<uint8_t *>(b.params.data() + off + o));
  cu::KernelNodeParams p{};
  p.func = fn->fn;
  p.gridDimX = static_cast<unsigned>(f[1]), p.gridDimY = static_cast<unsigned>(f[2]),
  p.gridDimZ = static_cast<unsigned>(f[3]);
  p.blockDimX = static_cast<unsigned>(f[4]), p.blockDimY = static_cast<unsigned>(f[5]),
  p.blockDimZ = static_cast<unsigned>(f[6]);
  p.sharedMemBytes = static_cast<unsigned>(f[7]);
  p.kernelParams = ptrs.empty() ? nullptr : ptrs.data();
  if (!b.job.Check(cu::api().GraphAddKernelNode(out, g, deps, n, &p), "cuGraphAddKernelNode_v2")) return false;
  // Its thread-block cluster (f[10..12], checked by the backend), as the launch it was captured from had it.
  if (f[10] * f[11] * f[12] <= 1) return true;
  cu::LaunchAttribute cluster{};
  cluster.value.clusterDim = {static_cast<unsigned>(f[10]), static_cast<unsigned>(f[11]), static_cast<unsigned>(f[12])};
  return Have(b.job, cu::api().GraphKernelNodeSetAttribute, "cuGraphKernelNodeSetAttribute") &&
         b.job.Check(
             cu::api().GraphKernelNodeSetAttribute(*out, cu::kLaunchAttributeClusterDimension, cluster.value.bytes),
             "cuGraphKernelNodeSetAttribute");
}

bool AddMemcpy(Build &b, cu::GraphNode *out, cu::Graph g, const uint64_t *f, const cu::GraphNode *deps, size_t n) {
  cu::Memcpy3D m;
  std::memset(&m, 0, sizeof m);
  m.dstMemoryType = cu::kMemDevice, m.dstDevice = f[0], m.dstPitch = f[2], m.dstHeight = f[3];
  m.srcMemoryType = cu::kMemDevice, m.srcDevice = f[1], m.srcPitch = f[4], m.srcHeight = f[5];
  m.WidthInBytes = f[6], m.Height = f[7], m.Depth = f[8];
  return b.job.Check(cu::api().GraphAddMemcpyNode(out, g, deps, n, &m, b.job.ctx->ctx), "cuGraphAddMemcpyNode");
}

bool AddMemset(Build &b, cu::GraphNode *out, cu::Graph g, const uint64_t *f, const cu::GraphNode *deps, size_t n) {
  cu::MemsetNodeParams p{};
  p.dst = f[0], p.pitch = f[1], p.value = static_cast<unsigned>(f[2]), p.elementSize = static_cast<unsigned>(f[3]);
  p.width = f[4], p.height = f[5];
  return b.job.Check(cu::api().GraphAddMemsetNode(out, g, deps, n, &p, b.job.ctx->ctx), "cuGraphAddMemsetNode");
}

bool AddEvent(Build &b, cu::GraphNode *out, cu::Graph g, bool record, const uint64_t *f, const cu::GraphNode *deps,
              size_t n) {
  std::shared_ptr<Ev> e = f[0] <= UINT32_MAX ? b.job.ctx->LookupEvent(b.job, static_cast<uint32_t>(f[0])) : nullptr;
  if (e == nullptr) return b.job.Fail(cu::kInvalidHandle, "qcuda: graph event node: no such event"), false;
  return record ? b.job.Check(cu::api().GraphAddEventRecordNode(out, g, deps, n, e->ev), "cuGraphAddEventRecordNode")
                : b.job.Check(cu::api().GraphAddEventWaitNode(out, g, deps, n, e->ev), "cuGraphAddEventWaitNode");
}

bool AddCond(Build &b, size_t i, cu::GraphNode *out, cu::Graph g, const uint64_t *f, const cu::GraphNode *deps,
             size_t n) {
  if (f[1] > 2 || f[2] < 1 || f[2] > 4096)
    return b.job.Fail(cu::kInvalidValue, "qcuda: graph conditional node type or size"), false;
  cu::GraphNodeParams p;
  std::memset(&p, 0, sizeof p);
  p.type = cu::kGraphNodeConditional;
  p.conditional.handle = f[0];
  p.conditional.type = static_cast<int>(f[1]);
  p.conditional.size = static_cast<unsigned>(f[2]);
  p.conditional.ctx = b.job.ctx->ctx;
  if (!b.job.Check(cu::api().GraphAddNode(out, g, deps, nullptr, n, &p), "cuGraphAddNode_v2")) return false;
  b.bodies[i].assign(p.conditional.phGraph_out, p.conditional.phGraph_out + p.conditional.size);
  return true;
}

// Adds node i after its dependencies; false once the job failed.
bool AddNode(Build &b, size_t i) {
  cu::Graph g = ScopeOf(b, i);
  if (g == nullptr) return false;
  const uint64_t *r = b.recs.data() + i * kRecord, *f = r + 3;
  std::vector<cu::GraphNode> d;
  for (uint32_t k : b.from[i]) d.push_back(b.nodes[k]);
  const cu::GraphNode *deps = d.empty() ? nullptr : d.data();
  cu::GraphNode *out = &b.nodes[i];
  switch (r[0]) {
    case kKernel:
      return AddKernel(b, out, g, f, deps, d.size());
    case kMemcpy:
      return AddMemcpy(b, out, g, f, deps, d.size());
    case kMemset:
      return AddMemset(b, out, g, f, deps, d.size());
    case kEmpty:
      return b.job.Check(cu::api().GraphAddEmptyNode(out, g, deps, d.size()), "cuGraphAddEmptyNode");
    case kEventRecord:
      return AddEvent(b, out, g, true, f, deps, d.size());
    case kEventWait:
      return AddEvent(b, out, g, false, f, deps, d.size());
    case kCond:
      return AddCond(b, i, out, g, f, deps, d.size());
    default:
      return b.job.Fail(cu::kInvalidValue, "qcuda: graph node type"), false;
  }
}

// Each node's dependencies from the edges (from < to, both in one body); false when one is not.
bool Edges(Build &b, const std::vector<uint32_t> &edges) {
  const size_t n = b.nodes.size();
  for (size_t k = 0; k + 1 < edges.size(); k += 2) {
    uint32_t from = edges[k], to = edges[k + 1];
    if (from >= to || to >= n || b.recs[from * kRecord + 1] != b.recs[to * kRecord + 1] ||
        b.recs[from * kRecord + 2] != b.recs[to * kRecord + 2]) {
      b.job.Fail(cu::kInvalidValue, "qcuda: graph edge not forwards inside one body");
      return false;
    }
    b.from[to].push_back(from);
  }
  return true;
}

}  // namespace

// graphCreate() -> id
QCUDA_CONTEXT_METHOD(graphCreate, ctx, info) {
  return ctx.Submit(info, Where::kContextThread, [](Job &job) -> res::Num {
    if (!HaveGraphs(job)) return {};
    cu::Graph g = nullptr;
    if (!job.Check(cu::api().GraphCreate(&g, 0), "cuGraphCreate")) return {};
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->graphs[id] = g;
    return {static_cast<double>(id)};
  });
}

// graphDestroy(id)
QCUDA_CONTEXT_METHOD(graphDestroy, ctx, info) {
  uint32_t id = ArgId(info[0], "graph");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) {
    auto it = job.ctx->graphs.find(id);
    if (it == job.ctx->graphs.end()) return job.Fail(cu::kInvalidHandle, "qcuda: graphDestroy: no such graph");
    cu::Graph g = it->second;
    job.ctx->graphs.erase(it);
    job.Check(cu::api().GraphDestroy(g), "cuGraphDestroy");
  });
}

// graphCondHandle(graph, defaultValue, flags) -> the handle (bigint)
QCUDA_CONTEXT_METHOD(graphCondHandle, ctx, info) {
  uint32_t id = ArgId(info[0], "graph");
  uint32_t def = ArgU32(info[1], "defaultValue");
  uint32_t flags = ArgU32(info[2], "flags");
  return ctx.Submit(info, Where::kContextThread, [id, def, flags](Job &job) -> res::Big {
    auto it = job.ctx->graphs.find(id);
    if (it == job.ctx->graphs.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: graphCondHandle: no such graph"), res::Big{};
    cu::CondHandle h = 0;
    job.Check(cu::api().GraphConditionalHandleCreate(&h, it->second, job.ctx->ctx, def, flags),
              "cuGraphConditionalHandleCreate");
    return {h};
  });
}

// graphInstantiate(graph, records, edges, params) -> the executable graph's id
QCUDA_CONTEXT_METHOD(graphInstantiate, ctx, info) {
  uint32_t id = ArgId(info[0], "graph");
  auto recs = std::make_shared<std::vector<uint64_t>>(ArgU64s(info[1], "records"));
  auto edges = std::make_shared<std::vector<uint32_t>>(ArgU32s(info[2], "edges"));
  auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[3], "params"));
  return ctx.Submit(info, Where::kContextThreadOnly, [id, recs, edges, params](Job &job) -> res::Num {
    auto it = job.ctx->graphs.find(id);
    if (it == job.ctx->graphs.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: graphInstantiate: no such graph"), res::Num{};
    if (recs->size() % kRecord != 0 || edges->size() % 2 != 0)
      return job.Fail(cu::kInvalidValue, "qcuda: graphInstantiate: record sizes"), res::Num{};
    const size_t n = recs->size() / kRecord;
    Build b{job,
            it->second,
            *recs,
            *params,
            std::vector<std::vector<uint32_t>>(n),
            std::vector<cu::GraphNode>(n, nullptr),
            std::vector<std::vector<cu::Graph>>(n)};
    // In index order: every edge's `from` exists before its `to` is added.
    bool ok = Edges(b, *edges);
    for (size_t i = 0; ok && i < n; i++) ok = AddNode(b, i);
    cu::GraphExec x = nullptr;
    if (ok) job.Check(cu::api().GraphInstantiateWithFlags(&x, b.top, 0), "cuGraphInstantiateWithFlags");
    // The graph is left as it was (its handles stay): the top-level nodes go, bodies with theirs.
    for (size_t i = 0; i < n; i++)
      if (b.nodes[i] != nullptr && (*recs)[i * kRecord + 1] == kTop) cu::api().GraphDestroyNode(b.nodes[i]);
    if (job.rc != cu::kSuccess) return {};
    CtxCore *c = job.ctx.get();
    uint32_t xid = c->nextId++;
    c->graphExecs[xid] = x;
    return {static_cast<double>(xid)};
  });
}

// graphExecDestroy(id)
QCUDA_CONTEXT_METHOD(graphExecDestroy, ctx, info) {
  uint32_t id = ArgId(info[0], "executable graph");
  return ctx.Submit(info, Where::kContextThread, [id](Job &job) {
    auto it = job.ctx->graphExecs.find(id);
    if (it == job.ctx->graphExecs.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: graphExecDestroy: no such executable graph");
    cu::GraphExec x = it->second;
    job.ctx->graphExecs.erase(it);
    job.Check(cu::api().GraphExecDestroy(x), "cuGraphExecDestroy");
  });
}

// graphLaunch(exec, stream): resolves once enqueued.
QCUDA_CONTEXT_METHOD(graphLaunch, ctx, info) {
  uint32_t id = ArgId(info[0], "executable graph");
  uint32_t sid = ArgId(info[1], "stream");
  return ctx.Submit(info, ctx.LaunchWhere(1), [id, sid](Job &job) {
    auto it = job.ctx->graphExecs.find(id);
    if (it == job.ctx->graphExecs.end())
      return job.Fail(cu::kInvalidHandle, "qcuda: graphLaunch: no such executable graph");
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return;
    job.ctx->launchesRun++;  // its kernels may run on as a launch's do (kInlineLaunchBound)
    job.Check(cu::api().GraphLaunch(it->second, s), "cuGraphLaunch");
  });
}

}  // namespace qcuda::cuda
