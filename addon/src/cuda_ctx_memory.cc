// CudaContext's memory calls: device allocations, copies between device
// memory and guest RAM (given as host segments; parts a session mapped for the
// GPU go through their registered alias, given.h), memset, page-locking host
// memory for the device (host registration) and free memory. Copies from or to
// registered (pinned) memory are enqueued inline when the context thread is
// idle; their completion is waited for on the waiter pool.
#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

constexpr size_t kMaxInlineSegs = 32;

// A copy may be enqueued inline when it cannot hold the thread long: from or to pinned memory, or a
// small one from pageable memory (guest RAM is pageable unless pinned whole), which the driver stages
// at once. Not one to pageable memory: that waits for everything before it on its stream.
bool CopyInline(Napi::Env env, const std::vector<Seg> &segs, bool toDevice) {
  if (segs.size() > kMaxInlineSegs) return false;
  EnvState *st = State(env);
  uint64_t pageable = 0;
  for (const Seg &s : segs)
    if (!st->IsPinned(s.addr, s.len)) pageable += s.len;
  return pageable == 0 || (toDevice && pageable <= kMaxInlinePageableCopy);
}

}  // namespace

QCUDA_CONTEXT_METHOD(malloc, ctx, info) {
  uint64_t size = ArgU64(info[0], "size");
  return ctx.Submit(info, Where::kContextThread, [size](Job &job) -> res::Big {
    cu::Ptr p = 0;
    job.Check(cu::api().MemAlloc(&p, size), "cuMemAlloc_v2");
    return {p};
  });
}

QCUDA_CONTEXT_METHOD(free, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  return ctx.Submit(info, Where::kContextThread,
                    [ptr](Job &job) { job.Check(cu::api().MemFree(ptr), "cuMemFree_v2"); });
}

void RunCopyHtoD(Job &job, uint64_t dst, const std::vector<Seg> &segs, uint32_t sid) {
  cu::Stream s;
  if (!job.ctx->LookupStream(job, sid, &s)) return;
  uint64_t off = 0;
  bool any = false;
  for (const Seg &g : segs) {
    if (!job.Check(cu::api().MemcpyHtoDAsync(dst + off, reinterpret_cast<const void *>(g.addr), g.len, s),
                   "cuMemcpyHtoDAsync_v2"))
      break;
    any = true;
    off += g.len;
  }
  if (any) WaitForStream(job, s);  // also after a failure: what was enqueued still reads guest memory
}

void RunCopyDtoH(Job &job, const std::vector<Seg> &segs, uint64_t src, uint32_t sid) {
  cu::Stream s;
  if (!job.ctx->LookupStream(job, sid, &s)) return;
  uint64_t off = 0;
  bool any = false;
  for (const Seg &g : segs) {
    if (!job.Check(cu::api().MemcpyDtoHAsync(reinterpret_cast<void *>(g.addr), src + off, g.len, s),
                   "cuMemcpyDtoHAsync_v2"))
      break;
    any = true;
    off += g.len;
  }
  if (any) WaitForStream(job, s);
}

// copyHtoD(dst, segments, stream): resolves once the bytes have left the segments.
QCUDA_CONTEXT_METHOD(copyHtoD, ctx, info) {
  uint64_t dst = ArgU64(info[0], "dst");
  std::vector<Seg> segs = State(info.Env())->given.Resolve(ArgSegs(info[1]));
  uint32_t sid = ArgId(info[2], "stream");
  Where where = CopyInline(info.Env(), segs, true) ? Where::kInlineWhenIdle : Where::kContextThread;
  return ctx.SubmitNow(info, where, [dst, segs = std::move(segs), sid](Job &job) { RunCopyHtoD(job, dst, segs, sid); });
}

// copyDtoH(segments, src, stream): resolves once the bytes are in the segments.
QCUDA_CONTEXT_METHOD(copyDtoH, ctx, info) {
  std::vector<Seg> segs = State(info.Env())->given.Resolve(ArgSegs(info[0]));
  uint64_t src = ArgU64(info[1], "src");
  uint32_t sid = ArgId(info[2], "stream");
  Where where = CopyInline(info.Env(), segs, false) ? Where::kInlineWhenIdle : Where::kContextThread;
  return ctx.SubmitNow(info, where, [src, segs = std::move(segs), sid](Job &job) { RunCopyDtoH(job, segs, src, sid); });
}

// copyDtoD(dst, src, size, stream, wait)
QCUDA_CONTEXT_METHOD(copyDtoD, ctx, info) {
  uint64_t dst = ArgU64(info[0], "dst");
  uint64_t src = ArgU64(info[1], "src");
  uint64_t size = ArgU64(info[2], "size");
  uint32_t sid = ArgId(info[3], "stream");
  bool wait = info[4].ToBoolean();
  return ctx.Submit(info, Where::kInlineWhenIdle, [dst, src, size, sid, wait](Job &job) {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return;
    if (size == 0) return;
    if (job.Check(cu::api().MemcpyDtoDAsync(dst, src, size, s), "cuMemcpyDtoDAsync_v2") && wait) WaitForStream(job, s);
  });
}

// memset(dst, value, size, stream, wait): cuMemsetD8Async.
QCUDA_CONTEXT_METHOD(memset, ctx, info) {
  uint64_t dst = ArgU64(info[0], "dst");
  uint32_t value = ArgU32(info[1], "value") & 0xff;
  uint64_t size = ArgU64(info[2], "size");
  uint32_t sid = ArgId(info[3], "stream");
  bool wait = info[4].ToBoolean();
  return ctx.Submit(info, Where::kInlineWhenIdle, [dst, value, size, sid, wait](Job &job) {
    cu::Stream s;
    if (!job.ctx->LookupStream(job, sid, &s)) return;
    if (size == 0) return;
    if (job.Check(cu::api().MemsetD8Async(dst, static_cast<unsigned char>(value), size, s), "cuMemsetD8Async") && wait)
      WaitForStream(job, s);
  });
}

// hostDevicePointer(addr) -> the device address of registered (DEVICEMAP) host memory
QCUDA_CONTEXT_METHOD(hostDevicePointer, ctx, info) {
  uint64_t addr = ArgU64(info[0], "addr");
  return ctx.Submit(info, Where::kInlineWhenIdle, [addr](Job &job) -> res::Big {
    cu::Ptr p = 0;
    job.Check(cu::api().MemHostGetDevicePointer(&p, reinterpret_cast<void *>(addr), 0), "cuMemHostGetDevicePointer_v2");
    return {p};
  });
}

QCUDA_CONTEXT_METHOD(memGetInfo, ctx, info) {
  return ctx.Submit(info, Where::kContextThread, [](Job &job) -> res::MemInfo {
    size_t fr = 0, total = 0;
    job.Check(cu::api().MemGetInfo(&fr, &total), "cuMemGetInfo_v2");
    return {fr, total};
  });
}

// hostRegister(addr, size, flags): page-locks host memory (guest RAM) on the context thread.
QCUDA_CONTEXT_METHOD(hostRegister, ctx, info) {
  uint64_t addr = ArgU64(info[0], "addr");
  uint64_t size = ArgU64(info[1], "size");
  uint32_t flags = ArgU32(info[2], "flags");
  return ctx.Submit(
      info, Where::kContextThread,
      [addr, size, flags](Job &job) {
        job.Check(cu::api().MemHostRegister(reinterpret_cast<void *>(addr), size, flags), "cuMemHostRegister_v2");
      },
      [addr, size](Job &job) {
        if (job.rc == cu::kSuccess) job.env->pinned[addr] = size;
      });
}

QCUDA_CONTEXT_METHOD(hostUnregister, ctx, info) {
  uint64_t addr = ArgU64(info[0], "addr");
  State(info.Env())->pinned.erase(addr);  // copies from it stop being enqueued inline right away
  return ctx.Submit(
      info, Where::kContextThread,
      [addr](Job &job) {
        job.Check(cu::api().MemHostUnregister(reinterpret_cast<void *>(addr)), "cuMemHostUnregister");
      },
      [addr](Job &job) { job.env->pinned.erase(addr); });  // in case a registration ended in between
}

}  // namespace qcuda::cuda
