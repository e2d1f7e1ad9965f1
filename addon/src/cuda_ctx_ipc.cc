// CudaContext's IPC calls (docs/multi-gpu.md): CUDA's handles of an
// allocation or an event of this context, and opening another process's
// handle here. The backend keeps the handles it gets (never the guest), and
// hands one to the worker of another session of the same VM to open.
#include <cstring>

#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

/** info[i] as a CUipcMemHandle / CUipcEventHandle: exactly 64 bytes. */
cu::IpcHandle ArgIpcHandle(const Napi::Value &v, const char *what) {
  std::vector<uint8_t> b = ArgBytes(v, what);
  if (b.size() != cu::kIpcHandleBytes) throw Napi::RangeError::New(v.Env(), std::string(what) + ": not 64 bytes");
  cu::IpcHandle h;
  std::memcpy(h.reserved, b.data(), sizeof(h.reserved));
  return h;
}

res::Bytes HandleBytes(const cu::IpcHandle &h) {
  const auto *p = reinterpret_cast<const uint8_t *>(h.reserved);
  return {std::vector<uint8_t>(p, p + sizeof(h.reserved))};
}

}  // namespace

// ipcMemExport(ptr) -> Uint8Array(64): cuIpcGetMemHandle of this context's allocation at ptr.
QCUDA_CONTEXT_METHOD(ipcMemExport, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  return ctx.Submit(info, Where::kContextThread, [ptr](Job &job) -> res::Bytes {
    cu::IpcHandle h{};
    if (!Have(job, cu::api().IpcGetMemHandle, "cuIpcGetMemHandle") ||
        !job.Check(cu::api().IpcGetMemHandle(&h, ptr), "cuIpcGetMemHandle"))
      return {};
    return HandleBytes(h);
  });
}

// ipcMemOpen(handle) -> the memory's address here: cuIpcOpenMemHandle_v2, with
// peer access enabled as needed, so this context's kernels reach it too.
QCUDA_CONTEXT_METHOD(ipcMemOpen, ctx, info) {
  cu::IpcHandle h = ArgIpcHandle(info[0], "handle");
  return ctx.Submit(info, Where::kContextThread, [h](Job &job) -> res::Big {
    cu::Ptr p = 0;
    if (!Have(job, cu::api().IpcOpenMemHandle, "cuIpcOpenMemHandle_v2") ||
        !job.Check(cu::api().IpcOpenMemHandle(&p, h, cu::kIpcLazyEnablePeerAccess), "cuIpcOpenMemHandle_v2"))
      return {};
    return {p};
  });
}

// ipcMemClose(ptr): cuIpcCloseMemHandle of what ipcMemOpen gave.
QCUDA_CONTEXT_METHOD(ipcMemClose, ctx, info) {
  uint64_t ptr = ArgU64(info[0], "ptr");
  return ctx.Submit(info, Where::kContextThread, [ptr](Job &job) {
    if (Have(job, cu::api().IpcCloseMemHandle, "cuIpcCloseMemHandle"))
      job.Check(cu::api().IpcCloseMemHandle(ptr), "cuIpcCloseMemHandle");
  });
}

// ipcEventExport(event) -> Uint8Array(64): cuIpcGetEventHandle (the driver
// refuses an event not made interprocess with timing disabled).
QCUDA_CONTEXT_METHOD(ipcEventExport, ctx, info) {
  uint32_t eid = ArgId(info[0], "event");
  return ctx.Submit(info, Where::kContextThread, [eid](Job &job) -> res::Bytes {
    std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
    cu::IpcHandle h{};
    if (!e || !Have(job, cu::api().IpcGetEventHandle, "cuIpcGetEventHandle") ||
        !job.Check(cu::api().IpcGetEventHandle(&h, e->ev), "cuIpcGetEventHandle"))
      return {};
    return HandleBytes(h);
  });
}

// ipcEventOpen(handle) -> an event id of this context: cuIpcOpenEventHandle
// (destroyed as any event of it, with cuEventDestroy).
QCUDA_CONTEXT_METHOD(ipcEventOpen, ctx, info) {
  cu::IpcHandle h = ArgIpcHandle(info[0], "handle");
  return ctx.Submit(info, Where::kContextThread, [h](Job &job) -> res::Num {
    CtxCore *c = job.ctx.get();
    cu::Event e = nullptr;
    if (!Have(job, cu::api().IpcOpenEventHandle, "cuIpcOpenEventHandle") ||
        !job.Check(cu::api().IpcOpenEventHandle(&e, h), "cuIpcOpenEventHandle"))
      return {};
    auto ev = std::make_shared<Ev>();
    ev->ev = e;
    ev->ctx = c->ctx;
    uint32_t id = c->nextId++;
    c->events[id] = std::move(ev);
    return {static_cast<double>(id)};
  });
}

}  // namespace qcuda::cuda
