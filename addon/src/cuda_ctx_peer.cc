// CudaContext's calls between two contexts of one process on two devices
// (several GPUs in one VM, docs/multi-gpu.md): a copy from the other
// context's memory into this one's, and peer access to the other's memory.
// Both contexts are a session's, in its one worker, so the copy goes device
// to device (NVLink or PCIe peer to peer, or the driver's own staging where
// the two cannot reach each other), never through guest RAM.
#include "cuda_args.h"
#include "cuda_context.h"

namespace qcuda::cuda {
namespace {

/** info[i] as another CudaContext's core: a TypeError unless it is one, a failed job unless it is open. */
std::shared_ptr<CtxCore> OtherCore(const Napi::CallbackInfo &info, size_t i) {
  Napi::Env env = info.Env();
  napi_value ctor = nullptr;
  napi_get_reference_value(env, State(env)->contextCtor, &ctor);
  if (!info[i].IsObject() || !info[i].As<Napi::Object>().InstanceOf(Napi::Function(env, ctor)))
    throw Napi::TypeError::New(env, "not a CudaContext");
  return Napi::ObjectWrap<Context>::Unwrap(info[i].As<Napi::Object>())->core();
}

/** The other context, unless it is gone or is this one's device's (then the job fails). */
bool Peer(Job &job, const std::shared_ptr<CtxCore> &other, const char *call) {
  if (other->ctx == nullptr || other->closing || other->dead) {
    job.Fail(cu::kContextIsDestroyed, std::string(call) + ": the other context is destroyed");
    return false;
  }
  return true;
}

}  // namespace

// copyPeer(srcContext, dst, src, size): size bytes from src, memory of
// srcContext's device, to dst, this context's. cuMemcpyPeer, not its async
// form on a stream: it is ordered after the work already submitted to both
// contexts, as cudaMemcpyPeer is; resolves once the bytes are there.
QCUDA_CONTEXT_METHOD(copyPeer, ctx, info) {
  std::shared_ptr<CtxCore> other = OtherCore(info, 0);
  uint64_t dst = ArgU64(info[1], "dst");
  uint64_t src = ArgU64(info[2], "src");
  uint64_t size = ArgU64(info[3], "size");
  return ctx.Submit(info, Where::kContextThread, [other, dst, src, size](Job &job) {
    if (size == 0 || !Have(job, cu::api().MemcpyPeer, "cuMemcpyPeer") || !Peer(job, other, "copyPeer")) return;
    if (job.Check(cu::api().MemcpyPeer(dst, job.ctx->ctx, src, other->ctx, size), "cuMemcpyPeer"))
      WaitForStream(job, nullptr);
  });
}

// enablePeerAccess(peerContext): kernels of this context may reach the peer's memory (cuCtxEnablePeerAccess).
QCUDA_CONTEXT_METHOD(enablePeerAccess, ctx, info) {
  std::shared_ptr<CtxCore> other = OtherCore(info, 0);
  return ctx.Submit(info, Where::kContextThread, [other](Job &job) {
    if (!Have(job, cu::api().CtxEnablePeerAccess, "cuCtxEnablePeerAccess") || !Peer(job, other, "enablePeerAccess"))
      return;
    job.Check(cu::api().CtxEnablePeerAccess(other->ctx, 0), "cuCtxEnablePeerAccess");
  });
}

// disablePeerAccess(peerContext): cuCtxDisablePeerAccess.
QCUDA_CONTEXT_METHOD(disablePeerAccess, ctx, info) {
  std::shared_ptr<CtxCore> other = OtherCore(info, 0);
  return ctx.Submit(info, Where::kContextThread, [other](Job &job) {
    if (!Have(job, cu::api().CtxDisablePeerAccess, "cuCtxDisablePeerAccess") || !Peer(job, other, "disablePeerAccess"))
      return;
    job.Check(cu::api().CtxDisablePeerAccess(other->ctx), "cuCtxDisablePeerAccess");
  });
}

}  // namespace qcuda::cuda
