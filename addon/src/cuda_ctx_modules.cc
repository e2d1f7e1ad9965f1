// CudaContext's code calls: loading and unloading modules (with the device
// memory a load takes, measured), looking up functions (with their parameter
// layout) and global variables, function attributes and occupancy. Module
// and function ids are the context's own; a module's functions go with it.
#include <algorithm>
#include <cstring>

#include "cuda_args.h"
#include "cuda_context.h"
#include "cuda_image.h"

namespace qcuda::cuda {

// moduleLoad(image, limit?) -> {id, bytes}: cuModuleLoadData on the context thread (it may JIT
// for a while), of a checked copy of the image with zero padding after it (cuda_image.h), and
// the device memory the load took (its module's globals, mostly), measured.
//
// Measured as a delta: cuMemGetInfo's free memory right before and right after the load, on
// this thread, so nothing else of this context runs in between. It is an estimate, not an
// account: free memory is the device's, so another process's (or, with several contexts in
// this process, another context's) allocations and frees in between show up in it, and the
// driver takes memory in pages (2 MiB) and may keep some it freed. Hence bytes = max(0,
// before - after), and the backend counts the larger of this and what the image itself
// declares (module-image.ts), checking the quota again after the load: a free elsewhere can
// only make the count larger than the image's, never smaller. Function code is in it because
// workers load eagerly (CUDA_MODULE_LOADING=EAGER: workers/worker-env.ts); loaded lazily, it
// would come at a kernel's first launch, unmeasured. With `limit` (bytes), a load that took more
// is undone here at once (cuModuleUnload) and fails with CUDA_ERROR_OUT_OF_MEMORY; without it
// the caller decides, and unloads with moduleUnload.
QCUDA_CONTEXT_METHOD(moduleLoad, ctx, info) {
  Napi::Uint8Array a = ArgUint8Array(info[0], "image");
  const size_t n = a.ByteLength();
  bool limited = info.Length() > 1 && !info[1].IsUndefined() && !info[1].IsNull();
  uint64_t limit = limited ? ArgU64(info[1], "limit") : UINT64_MAX;
  // The copy the driver reads: the caller's bytes and kImagePadding zeros, whatever they were followed by.
  auto image = std::make_shared<std::vector<uint8_t>>(n + kImagePadding, 0);
  if (n != 0) std::memcpy(image->data(), a.Data(), n);
  return ctx.Submit(info, Where::kContextThreadOnly, [image, n, limited, limit](Job &job) -> res::Module {
    if (n == 0) {
      job.Fail(cu::kInvalidValue, "qcuda: empty module image");
      return {};
    }
    std::string bad = CheckModuleImage(image->data(), n);
    if (!bad.empty()) {
      job.Fail(cu::kInvalidImage, "qcuda: module image: " + bad);
      return {};
    }
    const cu::Api &api = cu::api();
    size_t before = 0, after = 0, total = 0;
    if (!job.Check(api.MemGetInfo(&before, &total), "cuMemGetInfo_v2")) return {};
    cu::Module m = nullptr;
    if (!job.Check(api.ModuleLoadData(&m, image->data()), "cuModuleLoadData")) return {};
    cu::Result r = api.MemGetInfo(&after, &total);
    if (r != cu::kSuccess) {  // unmeasured, it would count as nothing: undo it
      api.ModuleUnload(m);
      job.Fail(r, "cuMemGetInfo_v2");
      return {};
    }
    uint64_t bytes = before > after ? before - after : 0;
    if (limited && bytes > limit) {
      api.ModuleUnload(m);
      job.Fail(cu::kOutOfMemory, "qcuda: loading the module took " + std::to_string(bytes) +
                                     " bytes of device memory, more than the " + std::to_string(limit) + " allowed");
      return {};
    }
    CtxCore *c = job.ctx.get();
    uint32_t id = c->nextId++;
    c->modules[id] = m;
    return {id, bytes};
  });
}

// moduleUnload(id): its function ids go with it.
QCUDA_CONTEXT_METHOD(moduleUnload, ctx, info) {
  uint32_t mid = ArgId(info[0], "module");
  return ctx.Submit(info, Where::kContextThread, [mid](Job &job) {
    CtxCore *c = job.ctx.get();
    cu::Module m;
    if (!c->LookupModule(job, mid, &m)) return;
    c->modules.erase(mid);
    for (auto it = c->functions.begin(); it != c->functions.end();) {
      if (it->second.module == mid)
        it = c->functions.erase(it);
      else
        ++it;
    }
    job.Check(cu::api().ModuleUnload(m), "cuModuleUnload");
  });
}

// functionGet(module, name, maxParams) -> {id, params: [{offset, size}], localBytes}: the layout from
// cuFuncGetParamInfo, the local memory a thread needs from cuFuncGetAttribute (security review 3, N3).
QCUDA_CONTEXT_METHOD(functionGet, ctx, info) {
  uint32_t mid = ArgId(info[0], "module");
  std::string name = ArgName(info[1]);
  uint32_t maxParams = ArgU32(info[2], "maxParams");
  if (maxParams == 0) maxParams = 256;
  return ctx.Submit(info, Where::kInlineWhenIdle, [mid, name = std::move(name), maxParams](Job &job) -> res::Func {
    CtxCore *c = job.ctx.get();
    const cu::Api &a = cu::api();
    cu::Module m;
    if (!c->LookupModule(job, mid, &m)) return {};
    cu::Function f = nullptr;
    if (!job.Check(a.ModuleGetFunction(&f, m, name.c_str()), "cuModuleGetFunction")) return {};
    if (a.FuncGetParamInfo == nullptr) {
      job.Fail(cu::kNotSupported, "qcuda: cuFuncGetParamInfo (driver >= 12.4) is missing");
      return {};
    }
    res::Func out;
    uint64_t bytes = 0;
    for (size_t i = 0;; i++) {
      size_t off = 0, size = 0;
      cu::Result r = a.FuncGetParamInfo(f, i, &off, &size);
      if (r == cu::kInvalidValue) break;  // past the last parameter
      if (!job.Check(r, "cuFuncGetParamInfo")) return {};
      if (i >= maxParams) {
        job.Fail(cu::kNotSupported,
                 "qcuda: kernel " + name + " has more than " + std::to_string(maxParams) + " parameters");
        return {};
      }
      out.params.push_back({off, size});
      bytes = std::max<uint64_t>(bytes, off + size);
    }
    std::vector<uint32_t> offsets;  // for cuLaunchCooperativeKernel's per-parameter pointers
    for (const res::Param &p : out.params) offsets.push_back(static_cast<uint32_t>(p.offset));
    int local = 0;
    if (!Have(job, a.FuncGetAttribute, "cuFuncGetAttribute") ||
        !job.Check(a.FuncGetAttribute(&local, cu::kFuncAttrLocalSizeBytes, f), "cuFuncGetAttribute"))
      return {};
    out.localBytes = local > 0 ? static_cast<uint64_t>(local) : 0;
    out.id = c->nextId++;
    c->functions[out.id] = CtxCore::Fn{f, mid, bytes, std::move(offsets), out.localBytes};
    return out;
  });
}

// variableGet(module, name) -> {dptr, size}: cuModuleGetGlobal_v2.
QCUDA_CONTEXT_METHOD(variableGet, ctx, info) {
  uint32_t mid = ArgId(info[0], "module");
  std::string name = ArgName(info[1]);
  return ctx.Submit(info, Where::kInlineWhenIdle, [mid, name = std::move(name)](Job &job) -> res::Var {
    cu::Module m;
    if (!job.ctx->LookupModule(job, mid, &m)) return {};
    cu::Ptr p = 0;
    size_t size = 0;
    job.Check(cu::api().ModuleGetGlobal(&p, &size, m, name.c_str()), "cuModuleGetGlobal_v2");
    return {p, size};
  });
}

// ---- function attributes and occupancy. The dispatcher has checked every id and value
// range; the driver checks the rest. They run inline when the context thread is idle.

// funcGetAttributes(func) -> Int32Array indexed by CUfunction_attribute (cuFuncGetAttribute each).
QCUDA_CONTEXT_METHOD(funcGetAttributes, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  return ctx.Submit(info, Where::kInlineWhenIdle, [fid](Job &job) -> res::Ints {
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
    if (f == nullptr || !Have(job, cu::api().FuncGetAttribute, "cuFuncGetAttribute")) return {};
    res::Ints out{std::vector<int32_t>(cu::kNumFuncAttrs, 0)};
    for (int a = 0; a < cu::kNumFuncAttrs; a++) {
      int v = 0;
      cu::Result r = cu::api().FuncGetAttribute(&v, a, f->fn);
      if (r != cu::kSuccess && a >= cu::kFuncAttrEssential) continue;  // no clusters before sm_90: 0
      if (!job.Check(r, "cuFuncGetAttribute")) return {};
      out.v[a] = v;
    }
    return out;
  });
}

// funcSetAttribute(func, attr, value): cuFuncSetAttribute.
QCUDA_CONTEXT_METHOD(funcSetAttribute, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  int32_t attr = ArgI32(info[1], "attr");
  int32_t value = ArgI32(info[2], "value");
  return ctx.Submit(info, Where::kInlineWhenIdle, [fid, attr, value](Job &job) {
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
    if (f == nullptr || !Have(job, cu::api().FuncSetAttribute, "cuFuncSetAttribute")) return;
    job.Check(cu::api().FuncSetAttribute(f->fn, attr, value), "cuFuncSetAttribute");
  });
}

// occupancyBlocks(func, blockSize, dynamicSmem, flags) -> active blocks per multiprocessor.
QCUDA_CONTEXT_METHOD(occupancyBlocks, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  int32_t blockSize = ArgI32(info[1], "blockSize");
  uint64_t smem = ArgU64(info[2], "dynamicSmem");
  uint32_t flags = ArgU32(info[3], "flags");
  return ctx.Submit(info, Where::kInlineWhenIdle, [fid, blockSize, smem, flags](Job &job) -> res::Num {
    const cu::Api &a = cu::api();
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
    if (f == nullptr || !Have(job, a.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
                              "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"))
      return {};
    int n = 0;
    job.Check(a.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f->fn, blockSize, smem, flags),
              "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
    return {static_cast<double>(n)};
  });
}

// occupancySmem(func, numBlocks, blockSize) -> bigint: dynamic shared memory per block
// that still lets numBlocks blocks fit on a multiprocessor.
QCUDA_CONTEXT_METHOD(occupancySmem, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  int32_t numBlocks = ArgI32(info[1], "numBlocks");
  int32_t blockSize = ArgI32(info[2], "blockSize");
  return ctx.Submit(info, Where::kInlineWhenIdle, [fid, numBlocks, blockSize](Job &job) -> res::Big {
    const cu::Api &a = cu::api();
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
    if (f == nullptr || !Have(job, a.OccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock"))
      return {};
    size_t bytes = 0;
    job.Check(a.OccupancyAvailableDynamicSMemPerBlock(&bytes, f->fn, numBlocks, blockSize),
              "cuOccupancyAvailableDynamicSMemPerBlock");
    return {bytes};
  });
}

// occupancyClusters(func, grid, block, smem, cluster, policy, query) -> cuOccupancyMaxActiveClusters
// (query 0) or cuOccupancyMaxPotentialClusterSize (query 1) of that launch configuration: the
// driver's answer, which knows how the GPU places clusters within its GPCs (an estimate from
// blocks per multiprocessor does not, and cuBLASLt picks its kernels by it). grid, block and
// cluster are Uint32Arrays of 3; a cluster of 0s and a policy of 0 are attributes not given.
QCUDA_CONTEXT_METHOD(occupancyClusters, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  std::vector<uint32_t> grid = ArgU32s(info[1], "grid"), block = ArgU32s(info[2], "block");
  uint32_t smem = ArgU32(info[3], "smem");
  std::vector<uint32_t> cluster = ArgU32s(info[4], "cluster");
  uint32_t policy = ArgU32(info[5], "policy");
  uint32_t query = ArgU32(info[6], "query");
  if (grid.size() != 3 || block.size() != 3 || cluster.size() != 3 || query > 1)
    throw Napi::TypeError::New(info.Env(), "occupancyClusters: grid, block and cluster of 3, query 0 or 1");
  return ctx.Submit(info, Where::kInlineWhenIdle, [=](Job &job) -> res::Num {
    const cu::Api &a = cu::api();
    auto fn = query == 0 ? a.OccupancyMaxActiveClusters : a.OccupancyMaxPotentialClusterSize;
    const char *name = query == 0 ? "cuOccupancyMaxActiveClusters" : "cuOccupancyMaxPotentialClusterSize";
    const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
    if (f == nullptr || !Have(job, fn, name)) return {};
    cu::LaunchAttribute attrs[2] = {};
    cu::LaunchConfig config = {grid[0], grid[1], grid[2], block[0], block[1], block[2], smem, nullptr, attrs, 0};
    if (cluster[0] | cluster[1] | cluster[2]) {
      attrs[config.numAttrs].id = cu::kLaunchAttributeClusterDimension;
      attrs[config.numAttrs++].value.clusterDim = {cluster[0], cluster[1], cluster[2]};
    }
    if (policy != 0) {
      attrs[config.numAttrs].id = cu::kLaunchAttributeClusterSchedulingPolicy;
      std::memcpy(attrs[config.numAttrs++].value.bytes, &policy, sizeof(policy));
    }
    int n = 0;
    job.Check(fn(&n, f->fn, &config), name);
    return {static_cast<double>(n)};
  });
}

}  // namespace qcuda::cuda
