// CudaContext's kernel launches: launch (cuLaunchKernel with the packed
// parameter block), launchCooperative (cuLaunchCooperativeKernel, a pointer
// per parameter) and launchMany (several launches in one job, records laid
// out as launch_record.h says). Always on the context thread: cuLaunchKernel
// blocks when the launch queue is full.
#include <array>
#include <cstring>

#include "cuda_args.h"
#include "cuda_context.h"
#include "launch_record.h"

namespace qcuda::cuda {
namespace {

namespace lr = launch_record;
using Header = LaunchHeader;

// The generated layout is what LaunchMany reads and LaunchOne takes: u32 fields, each its own.
static_assert(lr::kHeaderBytes == sizeof(Header), "launch_record.h: a header of u32 fields");
static_assert(lr::kFunc < lr::kWords && lr::kStream < lr::kWords && lr::kGridX < lr::kWords &&
                  lr::kGridY < lr::kWords && lr::kGridZ < lr::kWords && lr::kBlockX < lr::kWords &&
                  lr::kBlockY < lr::kWords && lr::kBlockZ < lr::kWords && lr::kSharedMem < lr::kWords &&
                  lr::kParamBytes < lr::kWords,
              "launch_record.h: field indices");
static_assert((1u << lr::kFunc | 1u << lr::kStream | 1u << lr::kGridX | 1u << lr::kGridY | 1u << lr::kGridZ |
               1u << lr::kBlockX | 1u << lr::kBlockY | 1u << lr::kBlockZ | 1u << lr::kSharedMem |
               1u << lr::kParamBytes) == (1u << lr::kWords) - 1,
              "launch_record.h: every field has a word of its own");
static_assert(lr::kParamAlign != 0 && (lr::kParamAlign & (lr::kParamAlign - 1)) == 0 &&
                  lr::kHeaderBytes % lr::kParamAlign == 0,
              "launch_record.h: records stay aligned");

// The function and stream of a launch, once its parameter block is the size the kernel takes; null (and
// job failed) otherwise.
const CtxCore::Fn *LaunchTarget(Job &job, uint32_t fid, uint32_t sid, size_t size, cu::Stream *s) {
  CtxCore *c = job.ctx.get();
  const CtxCore::Fn *f = c->LookupFunction(job, fid);
  if (f == nullptr || !c->LookupStream(job, sid, s)) return nullptr;
  if (size != f->paramBytes) {
    job.Fail(cu::kInvalidValue, "qcuda: " + std::to_string(size) + " parameter bytes for a kernel taking " +
                                    std::to_string(f->paramBytes));
    return nullptr;
  }
  return f;
}

}  // namespace

// One launch, as one record of launchMany (h: its header).
void LaunchOne(Job &job, const Header &h, uint8_t *params) {
  cu::Stream s;
  size_t size = h[lr::kParamBytes];
  const CtxCore::Fn *f = LaunchTarget(job, h[lr::kFunc], h[lr::kStream], size, &s);
  if (f == nullptr) return;
  job.ctx->launchesRun++;
  void *extra[] = {reinterpret_cast<void *>(cu::kLaunchParamBufferPointer), params,
                   reinterpret_cast<void *>(cu::kLaunchParamBufferSize), &size,
                   reinterpret_cast<void *>(cu::kLaunchParamEnd)};
  job.Check(cu::api().LaunchKernel(f->fn, h[lr::kGridX], h[lr::kGridY], h[lr::kGridZ], h[lr::kBlockX], h[lr::kBlockY],
                                   h[lr::kBlockZ], h[lr::kSharedMem], s, nullptr, size ? extra : nullptr),
            "cuLaunchKernel");
}

// launchCooperative(func, grid[3], block[3], sharedMem, stream, params): as launch(), with
// cuLaunchCooperativeKernel, which takes a pointer per parameter (into the packed block,
// at the offsets cuFuncGetParamInfo gave) instead of the packed buffer.
QCUDA_CONTEXT_METHOD(launchCooperative, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  unsigned grid[3], block[3];
  ArgDims(info[1], "grid", grid);
  ArgDims(info[2], "block", block);
  uint32_t shared = ArgU32(info[3], "sharedMem");
  uint32_t sid = ArgId(info[4], "stream");
  auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[5], "params"));
  return ctx.Submit(info, ctx.LaunchWhere(1),
                    [fid, g0 = grid[0], g1 = grid[1], g2 = grid[2], b0 = block[0], b1 = block[1], b2 = block[2], shared,
                     sid, params](Job &job) {
                      cu::Stream s;
                      const CtxCore::Fn *f = LaunchTarget(job, fid, sid, params->size(), &s);
                      if (f == nullptr || !Have(job, cu::api().LaunchCooperativeKernel, "cuLaunchCooperativeKernel"))
                        return;
                      job.ctx->launchesRun++;
                      std::vector<void *> ptrs;
                      for (uint32_t off : f->offsets) ptrs.push_back(params->data() + off);  // off + size <= paramBytes
                      job.Check(cu::api().LaunchCooperativeKernel(f->fn, g0, g1, g2, b0, b1, b2, shared, s,
                                                                  ptrs.empty() ? nullptr : ptrs.data()),
                                "cuLaunchCooperativeKernel");
                    });
}

// One launch with a thread-block cluster and the cooperative attribute: cuLaunchKernelEx, a pointer per
// parameter (into the packed block, as launchCooperative). The driver checks the cluster against the grid and the
// kernel.
void LaunchOneEx(Job &job, const Header &h, uint8_t *params, const LaunchExtras &x) {
  cu::Stream s;
  const CtxCore::Fn *f = LaunchTarget(job, h[lr::kFunc], h[lr::kStream], h[lr::kParamBytes], &s);
  if (f == nullptr || !Have(job, cu::api().LaunchKernelEx, "cuLaunchKernelEx")) return;
  job.ctx->launchesRun++;
  std::vector<void *> ptrs;
  for (uint32_t off : f->offsets) ptrs.push_back(params + off);  // off + size <= paramBytes
  cu::LaunchAttribute attrs[2] = {};
  attrs[0].id = cu::kLaunchAttributeClusterDimension;
  attrs[0].value.clusterDim = {x.cluster[0], x.cluster[1], x.cluster[2]};
  attrs[1].id = cu::kLaunchAttributeCooperative;
  attrs[1].value.cooperative = x.cooperative ? 1 : 0;
  cu::LaunchConfig config{h[lr::kGridX],
                          h[lr::kGridY],
                          h[lr::kGridZ],
                          h[lr::kBlockX],
                          h[lr::kBlockY],
                          h[lr::kBlockZ],
                          h[lr::kSharedMem],
                          s,
                          attrs,
                          2};
  job.Check(cu::api().LaunchKernelEx(&config, f->fn, ptrs.empty() ? nullptr : ptrs.data(), nullptr),
            "cuLaunchKernelEx");
}

// launchEx(func, grid[3], block[3], sharedMem, stream, params, cluster[3], cooperative): LaunchOneEx on the
// context thread.
QCUDA_CONTEXT_METHOD(launchEx, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  unsigned grid[3], block[3], cluster[3];
  ArgDims(info[1], "grid", grid);
  ArgDims(info[2], "block", block);
  uint32_t shared = ArgU32(info[3], "sharedMem");
  uint32_t sid = ArgId(info[4], "stream");
  auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[5], "params"));
  ArgDims(info[6], "cluster", cluster);
  const LaunchExtras x{{cluster[0], cluster[1], cluster[2]}, info[7].ToBoolean()};
  const Header h = MakeLaunchHeader(fid, sid, grid, block, shared, static_cast<uint32_t>(params->size()));
  return ctx.Submit(info, ctx.LaunchWhere(1), [h, params, x](Job &job) { LaunchOneEx(job, h, params->data(), x); });
}

// launch(func, grid[3], block[3], sharedMem, stream, params): resolves once enqueued
// (cuLaunchKernel with the packed block as CU_LAUNCH_PARAM_BUFFER_POINTER).
QCUDA_CONTEXT_METHOD(launch, ctx, info) {
  uint32_t fid = ArgId(info[0], "function");
  unsigned grid[3], block[3];
  ArgDims(info[1], "grid", grid);
  ArgDims(info[2], "block", block);
  uint32_t shared = ArgU32(info[3], "sharedMem");
  uint32_t sid = ArgId(info[4], "stream");
  auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[5], "params"));
  // The same checks and call as one record of launchMany.
  const Header h = MakeLaunchHeader(fid, sid, grid, block, shared, static_cast<uint32_t>(params->size()));
  return ctx.SubmitNow(info, ctx.LaunchWhere(1), [h, params](Job &job) { LaunchOne(job, h, params->data()); });
}

// launchMany(records, count): `count` launches in one job (records as launch_record.h lays them out),
// on the context thread unless the batch is short and the JS thread may launch (LaunchWhere). Each is tried even after
// one failed, as separate cudaLaunchKernel calls would be; the first failure rejects with its index.
QCUDA_CONTEXT_METHOD(launchMany, ctx, info) {
  auto recs = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[0], "records"));
  uint32_t count = ArgU32(info[1], "count");
  return ctx.SubmitNow(info, ctx.LaunchWhere(count), [recs, count](Job &job) {
    const uint8_t *p = recs->data();
    size_t left = recs->size();
    for (uint32_t i = 0; i < count; i++) {
      Header h;
      if (left < lr::kHeaderBytes) {
        job.Fail(cu::kInvalidValue, "qcuda: launch records truncated");
        job.index = i;
        return;
      }
      std::memcpy(h.data(), p, lr::kHeaderBytes);
      size_t padded = (static_cast<size_t>(h[lr::kParamBytes]) + lr::kParamAlign - 1) & ~(lr::kParamAlign - 1);
      if (left - lr::kHeaderBytes < padded) {
        job.Fail(cu::kInvalidValue, "qcuda: launch record parameters truncated");
        job.index = i;
        return;
      }
      bool first = job.rc == cu::kSuccess;
      LaunchOne(job, h, const_cast<uint8_t *>(p + lr::kHeaderBytes));
      if (first && job.rc != cu::kSuccess) job.index = i;
      p += lr::kHeaderBytes + padded;
      left -= lr::kHeaderBytes + padded;
    }
  });
}

}  // namespace qcuda::cuda
