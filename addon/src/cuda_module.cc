// qcuda_cuda.node: the CUDA driver API for the `cuda` provider. A module of
// its own, so that the main addon never touches CUDA; it loads everywhere and
// reports through probe() why CUDA cannot be used where it cannot.
//
// Handles: a context is a CudaContext object; streams and events are small
// integer ids in that context's tables (0 = the legacy NULL stream), so a
// stale or foreign id is refused with CUDA_ERROR_INVALID_HANDLE instead of
// reaching the driver. Every operation returns a Promise (see cuda_exec.h for
// which thread runs what). Failures reject with errorFactory(code, message)
// (cudaError_t number, "<driver call>: CUDA_ERROR_X (text)"), carrying
// .cuResult and .call as well.
#include <napi.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "cuda_api.h"
#include "cuda_exec.h"
#include "cuda_image.h"
#include "cuda_output.h"

namespace qcuda::cuda {
namespace {

constexpr size_t kMaxInlineSegs = 32;

EnvState *State(Napi::Env env) { return env.GetInstanceData<EnvState>(); }

uint64_t ArgU64(const Napi::Value &v, const char *what) {
  Napi::Env env = v.Env();
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) throw Napi::RangeError::New(env, std::string(what) + " out of range");
    return x;
  }
  if (!v.IsNumber()) throw Napi::TypeError::New(env, std::string(what) + " must be a bigint or a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0) || d > 9007199254740991.0 || d != std::floor(d))
    throw Napi::RangeError::New(env, std::string(what) + " must be a non-negative integer");
  return static_cast<uint64_t>(d);
}

uint32_t ArgId(const Napi::Value &v, const char *what) {
  if (v.IsUndefined() || v.IsNull()) return 0;
  uint64_t x = ArgU64(v, what);
  if (x > 0xffffffffu) throw Napi::RangeError::New(v.Env(), std::string(what) + " out of range");
  return static_cast<uint32_t>(x);
}

uint32_t ArgU32(const Napi::Value &v, const char *what) {
  if (v.IsUndefined()) return 0;
  return ArgId(v, what);
}

struct Seg {
  uint64_t addr;
  uint64_t len;
};

std::vector<Seg> ArgSegs(const Napi::Value &v) {
  Napi::Env env = v.Env();
  if (!v.IsArray()) throw Napi::TypeError::New(env, "segments must be an array of {addr, len}");
  Napi::Array a = v.As<Napi::Array>();
  std::vector<Seg> out;
  out.reserve(a.Length());
  for (uint32_t i = 0; i < a.Length(); i++) {
    Napi::Value e = a.Get(i);
    if (!e.IsObject()) throw Napi::TypeError::New(env, "segments must be an array of {addr, len}");
    Napi::Object o = e.As<Napi::Object>();
    Seg s{ArgU64(o.Get("addr"), "segment addr"), ArgU64(o.Get("len"), "segment len")};
    if (s.addr + s.len < s.addr) throw Napi::RangeError::New(env, "segment wraps around");
    if (s.len != 0) out.push_back(s);
  }
  return out;
}

void RequireCuda(Napi::Env env) {
  const cu::ProbeResult &p = cu::Probe();
  if (!p.ok) throw Napi::Error::New(env, "CUDA is not available: " + p.reason);
}

// ---------------------------------------------------------------- CudaContext

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "CudaContext",
        {
            InstanceMethod("malloc", &Context::Malloc),
            InstanceMethod("free", &Context::Free),
            InstanceMethod("copyHtoD", &Context::CopyHtoD),
            InstanceMethod("copyDtoH", &Context::CopyDtoH),
            InstanceMethod("copyDtoD", &Context::CopyDtoD),
            InstanceMethod("memset", &Context::Memset),
            InstanceMethod("synchronize", &Context::Synchronize),
            InstanceMethod("streamCreate", &Context::StreamCreate),
            InstanceMethod("streamDestroy", &Context::StreamDestroy),
            InstanceMethod("streamSynchronize", &Context::StreamSynchronize),
            InstanceMethod("streamQuery", &Context::StreamQuery),
            InstanceMethod("streamWaitEvent", &Context::StreamWaitEvent),
            InstanceMethod("eventCreate", &Context::EventCreate),
            InstanceMethod("eventDestroy", &Context::EventDestroy),
            InstanceMethod("eventRecord", &Context::EventRecord),
            InstanceMethod("eventSynchronize", &Context::EventSynchronize),
            InstanceMethod("eventQuery", &Context::EventQuery),
            InstanceMethod("eventElapsed", &Context::EventElapsed),
            InstanceMethod("hostDevicePointer", &Context::HostDevicePointer),
            InstanceMethod("memGetInfo", &Context::MemGetInfo),
            InstanceMethod("hostRegister", &Context::HostRegister),
            InstanceMethod("moduleLoad", &Context::ModuleLoad),
            InstanceMethod("moduleUnload", &Context::ModuleUnload),
            InstanceMethod("functionGet", &Context::FunctionGet),
            InstanceMethod("variableGet", &Context::VariableGet),
            InstanceMethod("funcGetAttributes", &Context::FuncGetAttributes),
            InstanceMethod("funcSetAttribute", &Context::FuncSetAttribute),
            InstanceMethod("occupancyBlocks", &Context::OccupancyBlocks),
            InstanceMethod("occupancySmem", &Context::OccupancySmem),
            InstanceMethod("limitSet", &Context::LimitSet),
            InstanceMethod("limitGet", &Context::LimitGet),
            InstanceMethod("streamSetAttribute", &Context::StreamSetAttribute),
            InstanceMethod("streamGetAttribute", &Context::StreamGetAttribute),
            InstanceMethod("launchCooperative", &Context::LaunchCooperative),
            InstanceMethod("launch", &Context::Launch),
            InstanceMethod("launchMany", &Context::LaunchMany),
            InstanceMethod("hostUnregister", &Context::HostUnregister),
            InstanceMethod("destroy", &Context::Destroy),
            InstanceAccessor("device", &Context::Device, nullptr),
            InstanceAccessor("primary", &Context::Primary, nullptr),
            InstanceAccessor("busy", &Context::Busy, nullptr),
            InstanceAccessor("destroyed", &Context::Destroyed, nullptr),
        });
  }

  // Only openContext() makes these (it passes the core as an External).
  explicit Context(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Context>(info) {
    if (info.Length() < 1 || !info[0].IsExternal())
      throw Napi::TypeError::New(info.Env(), "CudaContext objects come from openContext()");
    core_ = *info[0].As<Napi::External<std::shared_ptr<CtxCore>>>().Data();
  }

  ~Context() override {
    // Collected without destroy(): free the context in the background (not while Node shuts down).
    if (!core_) return;
    bool alive;
    {
      std::lock_guard<std::mutex> lk(core_->env->mu);
      alive = core_->env->alive;
    }
    if (alive && !core_->closing) {
      core_->closing = true;
      Job *j = new Job;
      j->run = [](Job &job) { job.ctx->Teardown(job); };
      if (core_->Submit(j, false) == CtxCore::SubmitResult::kRefused) delete j;
    }
  }

 private:
  // Settles through the promise; runs the job inline when allowed and idle.
  Napi::Value Go(Napi::Env env, Job *j, bool inlineOk) {
    napi_deferred def = nullptr;
    napi_value promise = nullptr;
    napi_create_promise(env, &def, &promise);
    j->deferred = def;
    j->env = State(env);
    if (core_->closing || core_->Submit(j, inlineOk) == CtxCore::SubmitResult::kRefused) {
      j->Fail(cu::kContextIsDestroyed, "qcuda: context destroyed");
      j->run = nullptr;
      State(env)->Settle(j);
    }
    return Napi::Value(env, promise);
  }

  Napi::Value Malloc(const Napi::CallbackInfo &info) {
    uint64_t size = ArgU64(info[0], "size");
    Job *j = new Job;
    j->kind = Kind::kU64;
    j->run = [size](Job &job) {
      cu::Ptr p = 0;
      if (job.Check(cu::api().MemAlloc(&p, size), "cuMemAlloc_v2")) job.u64 = p;
    };
    return Go(info.Env(), j, false);
  }

  Napi::Value Free(const Napi::CallbackInfo &info) {
    uint64_t ptr = ArgU64(info[0], "ptr");
    Job *j = new Job;
    j->run = [ptr](Job &job) { job.Check(cu::api().MemFree(ptr), "cuMemFree_v2"); };
    return Go(info.Env(), j, false);
  }

  // A transfer arrives as many chunks, each waiting on the pool at once: had
  // they all spun (the driver's default where contexts are few), they would
  // take the CPUs that the JS thread needs to enqueue the next chunks. So a
  // waiter polls for a short while (a small copy is done by then: no sleep,
  // no wake-up latency), then sleeps in the BLOCKING_SYNC event. It ends in
  // cuEventSynchronize either way: a synchronize is where the driver flushes
  // device printf output, as a blocking copy does natively.
  static void WaitEvent(Job &jb, cu::Event e) {
    constexpr auto kPoll = std::chrono::microseconds(40);
    auto until = std::chrono::steady_clock::now() + kPoll;
    while (cu::api().EventQuery(e) == cu::kNotReady && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    jb.Check(cu::api().EventSynchronize(e), "cuEventSynchronize");
  }

  // Phase-1 tail: wait (phase 2) until everything enqueued so far on stream s is done.
  static void WaitForStream(Job &job, cu::Stream s) {
    CtxCore *c = job.ctx.get();
    cu::Event e = c->AcquireEvent(job);
    if (e != nullptr && job.Check(cu::api().EventRecord(e, s), "cuEventRecord")) {
      job.wait = [c, e](Job &jb) {
        WaitEvent(jb, e);
        c->ReleaseEvent(e);
      };
      return;
    }
    if (e != nullptr) c->ReleaseEvent(e);
    // Could not record: wait for the whole context instead (returns the sticky error, if that is why).
    job.wait = [](Job &jb) { jb.Check(cu::api().CtxSynchronize(), "cuCtxSynchronize"); };
  }

  bool SegsPinned(Napi::Env env, const std::vector<Seg> &segs) {
    if (segs.size() > kMaxInlineSegs) return false;
    EnvState *st = State(env);
    for (const Seg &s : segs)
      if (!st->IsPinned(s.addr, s.len)) return false;
    return true;
  }

  // copyHtoD(dst, segments, stream): resolves once the bytes have left the segments.
  Napi::Value CopyHtoD(const Napi::CallbackInfo &info) {
    uint64_t dst = ArgU64(info[0], "dst");
    std::vector<Seg> segs = ArgSegs(info[1]);
    uint32_t sid = ArgId(info[2], "stream");
    bool inl = SegsPinned(info.Env(), segs);
    Job *j = new Job;
    j->run = [dst, segs = std::move(segs), sid](Job &job) {
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
    };
    return Go(info.Env(), j, inl);
  }

  // copyDtoH(segments, src, stream): resolves once the bytes are in the segments.
  Napi::Value CopyDtoH(const Napi::CallbackInfo &info) {
    std::vector<Seg> segs = ArgSegs(info[0]);
    uint64_t src = ArgU64(info[1], "src");
    uint32_t sid = ArgId(info[2], "stream");
    bool inl = SegsPinned(info.Env(), segs);
    Job *j = new Job;
    j->run = [src, segs = std::move(segs), sid](Job &job) {
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
    };
    return Go(info.Env(), j, inl);
  }

  // copyDtoD(dst, src, size, stream, wait)
  Napi::Value CopyDtoD(const Napi::CallbackInfo &info) {
    uint64_t dst = ArgU64(info[0], "dst");
    uint64_t src = ArgU64(info[1], "src");
    uint64_t size = ArgU64(info[2], "size");
    uint32_t sid = ArgId(info[3], "stream");
    bool wait = info[4].ToBoolean();
    Job *j = new Job;
    j->run = [dst, src, size, sid, wait](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s)) return;
      if (size == 0) return;
      if (job.Check(cu::api().MemcpyDtoDAsync(dst, src, size, s), "cuMemcpyDtoDAsync_v2") && wait)
        WaitForStream(job, s);
    };
    return Go(info.Env(), j, true);
  }

  // memset(dst, value, size, stream, wait): cuMemsetD8Async.
  Napi::Value Memset(const Napi::CallbackInfo &info) {
    uint64_t dst = ArgU64(info[0], "dst");
    uint32_t value = ArgU32(info[1], "value") & 0xff;
    uint64_t size = ArgU64(info[2], "size");
    uint32_t sid = ArgId(info[3], "stream");
    bool wait = info[4].ToBoolean();
    Job *j = new Job;
    j->run = [dst, value, size, sid, wait](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s)) return;
      if (size == 0) return;
      if (job.Check(cu::api().MemsetD8Async(dst, static_cast<unsigned char>(value), size, s), "cuMemsetD8Async") &&
          wait)
        WaitForStream(job, s);
    };
    return Go(info.Env(), j, true);
  }

  Napi::Value Synchronize(const Napi::CallbackInfo &info) {
    Job *j = new Job;
    j->run = [](Job &job) {
      job.wait = [](Job &jb) { jb.Check(cu::api().CtxSynchronize(), "cuCtxSynchronize"); };
    };
    return Go(info.Env(), j, true);
  }

  // streamCreate(flags, priority) -> id
  Napi::Value StreamCreate(const Napi::CallbackInfo &info) {
    uint32_t flags = ArgU32(info[0], "flags");
    int32_t prio = info[1].IsNumber() ? info[1].As<Napi::Number>().Int32Value() : 0;
    Job *j = new Job;
    j->kind = Kind::kNumber;
    j->run = [flags, prio](Job &job) {
      cu::Stream s = nullptr;
      if (!job.Check(cu::api().StreamCreateWithPriority(&s, flags, prio), "cuStreamCreateWithPriority")) return;
      CtxCore *c = job.ctx.get();
      uint32_t id = c->nextId++;
      c->streams[id] = s;
      job.num = id;
    };
    return Go(info.Env(), j, false);
  }

  Napi::Value StreamDestroy(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    Job *j = new Job;
    j->run = [sid](Job &job) {
      CtxCore *c = job.ctx.get();
      auto it = c->streams.find(sid);
      if (it == c->streams.end()) {
        job.Fail(cu::kInvalidHandle, "qcuda: no stream " + std::to_string(sid) + " in this context");
        return;
      }
      cu::Stream s = it->second;
      c->streams.erase(it);
      job.Check(cu::api().StreamDestroy(s), "cuStreamDestroy_v2");
    };
    return Go(info.Env(), j, false);
  }

  Napi::Value StreamSynchronize(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    Job *j = new Job;
    j->run = [sid](Job &job) {
      cu::Stream s;
      if (job.ctx->LookupStream(job, sid, &s)) WaitForStream(job, s);
    };
    return Go(info.Env(), j, true);
  }

  Napi::Value StreamQuery(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    Job *j = new Job;
    j->kind = Kind::kBool;
    j->run = [sid](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s)) return;
      cu::Result r = cu::api().StreamQuery(s);
      if (r == cu::kNotReady) return;
      if (job.Check(r, "cuStreamQuery")) job.flag = true;
    };
    return Go(info.Env(), j, true);
  }

  // streamWaitEvent(stream, event, flags)
  Napi::Value StreamWaitEvent(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    uint32_t eid = ArgId(info[1], "event");
    uint32_t flags = ArgU32(info[2], "flags");
    Job *j = new Job;
    j->run = [sid, eid, flags](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s)) return;
      std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
      if (e) job.Check(cu::api().StreamWaitEvent(s, e->ev, flags), "cuStreamWaitEvent");
    };
    return Go(info.Env(), j, true);
  }

  // eventCreate(flags) -> id
  Napi::Value EventCreate(const Napi::CallbackInfo &info) {
    uint32_t flags = ArgU32(info[0], "flags");
    Job *j = new Job;
    j->kind = Kind::kNumber;
    j->run = [flags](Job &job) {
      CtxCore *c = job.ctx.get();
      cu::Event e = nullptr;
      if (!job.Check(cu::api().EventCreate(&e, flags), "cuEventCreate")) return;
      auto ev = std::make_shared<Ev>();
      ev->ev = e;
      ev->ctx = c->ctx;
      uint32_t id = c->nextId++;
      c->events[id] = std::move(ev);
      job.num = id;
    };
    return Go(info.Env(), j, true);
  }

  // The driver event goes when the last waiter on it is done (cuEventDestroy itself
  // defers freeing until the device has passed the event).
  Napi::Value EventDestroy(const Napi::CallbackInfo &info) {
    uint32_t eid = ArgId(info[0], "event");
    Job *j = new Job;
    j->run = [eid](Job &job) {
      CtxCore *c = job.ctx.get();
      auto it = c->events.find(eid);
      if (it == c->events.end()) {
        job.Fail(cu::kInvalidHandle, "qcuda: no event " + std::to_string(eid) + " in this context");
        return;
      }
      c->events.erase(it);
    };
    return Go(info.Env(), j, true);
  }

  // eventRecord(event, stream)
  Napi::Value EventRecord(const Napi::CallbackInfo &info) {
    uint32_t eid = ArgId(info[0], "event");
    uint32_t sid = ArgId(info[1], "stream");
    Job *j = new Job;
    j->run = [eid, sid](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s)) return;
      std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
      if (e) job.Check(cu::api().EventRecord(e->ev, s), "cuEventRecord");
    };
    return Go(info.Env(), j, true);
  }

  Napi::Value EventSynchronize(const Napi::CallbackInfo &info) {
    uint32_t eid = ArgId(info[0], "event");
    Job *j = new Job;
    j->run = [eid](Job &job) {
      std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
      if (!e) return;
      job.wait = [e](Job &jb) { jb.Check(cu::api().EventSynchronize(e->ev), "cuEventSynchronize"); };
    };
    return Go(info.Env(), j, true);
  }

  Napi::Value EventQuery(const Napi::CallbackInfo &info) {
    uint32_t eid = ArgId(info[0], "event");
    Job *j = new Job;
    j->kind = Kind::kBool;
    j->run = [eid](Job &job) {
      std::shared_ptr<Ev> e = job.ctx->LookupEvent(job, eid);
      if (!e) return;
      cu::Result r = cu::api().EventQuery(e->ev);
      if (r == cu::kNotReady) return;
      if (job.Check(r, "cuEventQuery")) job.flag = true;
    };
    return Go(info.Env(), j, true);
  }

  // eventElapsed(start, end) -> milliseconds
  Napi::Value EventElapsed(const Napi::CallbackInfo &info) {
    uint32_t a = ArgId(info[0], "start");
    uint32_t b = ArgId(info[1], "end");
    Job *j = new Job;
    j->kind = Kind::kNumber;
    j->run = [a, b](Job &job) {
      std::shared_ptr<Ev> ea = job.ctx->LookupEvent(job, a);
      std::shared_ptr<Ev> eb = job.ctx->LookupEvent(job, b);
      if (!ea || !eb) return;
      float ms = 0;
      if (job.Check(cu::api().EventElapsedTime(&ms, ea->ev, eb->ev), "cuEventElapsedTime")) job.num = ms;
    };
    return Go(info.Env(), j, true);
  }

  // hostDevicePointer(addr) -> the device address of registered (DEVICEMAP) host memory
  Napi::Value HostDevicePointer(const Napi::CallbackInfo &info) {
    uint64_t addr = ArgU64(info[0], "addr");
    Job *j = new Job;
    j->kind = Kind::kU64;
    j->run = [addr](Job &job) {
      cu::Ptr p = 0;
      if (job.Check(cu::api().MemHostGetDevicePointer(&p, reinterpret_cast<void *>(addr), 0),
                    "cuMemHostGetDevicePointer_v2"))
        job.u64 = p;
    };
    return Go(info.Env(), j, true);
  }

  Napi::Value MemGetInfo(const Napi::CallbackInfo &info) {
    Job *j = new Job;
    j->kind = Kind::kMemInfo;
    j->run = [](Job &job) {
      size_t fr = 0, total = 0;
      if (job.Check(cu::api().MemGetInfo(&fr, &total), "cuMemGetInfo_v2")) {
        job.u64 = fr;
        job.u64b = total;
      }
    };
    return Go(info.Env(), j, false);
  }

  // hostRegister(addr, size, flags): page-locks host memory (guest RAM) on the context thread.
  Napi::Value HostRegister(const Napi::CallbackInfo &info) {
    uint64_t addr = ArgU64(info[0], "addr");
    uint64_t size = ArgU64(info[1], "size");
    uint32_t flags = ArgU32(info[2], "flags");
    Job *j = new Job;
    j->run = [addr, size, flags](Job &job) {
      job.Check(cu::api().MemHostRegister(reinterpret_cast<void *>(addr), size, flags), "cuMemHostRegister_v2");
    };
    j->onMain = [addr, size](Job &job) {
      if (job.rc == cu::kSuccess) job.env->pinned[addr] = size;
    };
    return Go(info.Env(), j, false);
  }

  Napi::Value HostUnregister(const Napi::CallbackInfo &info) {
    uint64_t addr = ArgU64(info[0], "addr");
    State(info.Env())->pinned.erase(addr);  // copies from it stop being enqueued inline right away
    Job *j = new Job;
    j->run = [addr](Job &job) {
      job.Check(cu::api().MemHostUnregister(reinterpret_cast<void *>(addr)), "cuMemHostUnregister");
    };
    j->onMain = [addr](Job &job) { job.env->pinned.erase(addr); };  // in case a registration ended in between
    return Go(info.Env(), j, false);
  }

  static std::vector<uint8_t> ArgBytes(const Napi::Value &v, const char *what) {
    if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a Uint8Array");
    Napi::Uint8Array a = v.As<Napi::Uint8Array>();
    return std::vector<uint8_t>(a.Data(), a.Data() + a.ByteLength());
  }

  static std::string ArgName(const Napi::Value &v) {
    if (!v.IsString()) throw Napi::TypeError::New(v.Env(), "name must be a string");
    std::string s = v.As<Napi::String>().Utf8Value();
    if (s.find('\0') != std::string::npos) throw Napi::TypeError::New(v.Env(), "name has a NUL");
    return s;
  }

  // moduleLoad(image, limit?) -> {id, bytes}: cuModuleLoadData on the context thread (it may JIT
  // for a while), of a checked copy of the image with zero padding after it (cuda_image.h), and
  // the device memory the load took (its module's globals, mostly), measured.
  //
  // Measured as a delta: cuMemGetInfo's free memory right before and right after the load, on
  // this thread, so nothing else of this context runs in between. It is an estimate, not an
  // account: free memory is the device's, so another process's (or, with several contexts in
  // this process, another context's) allocations and frees in between show up in it, and the
  // driver takes memory in pages (2 MiB) and may keep some it freed. Hence bytes = max(0,
  // before - after), and the backend counts the larger of this and its own estimate from the
  // image, checking the quota again after the load. What the driver takes later (function code
  // under lazy loading, at first use) is not in it. With `limit` (bytes), a load that took more
  // is undone here at once (cuModuleUnload) and fails with CUDA_ERROR_OUT_OF_MEMORY; without it
  // the caller decides, and unloads with moduleUnload.
  Napi::Value ModuleLoad(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
      throw Napi::TypeError::New(env, "image must be a Uint8Array");
    Napi::Uint8Array a = info[0].As<Napi::Uint8Array>();
    const size_t n = a.ByteLength();
    bool limited = info.Length() > 1 && !info[1].IsUndefined() && !info[1].IsNull();
    uint64_t limit = limited ? ArgU64(info[1], "limit") : UINT64_MAX;
    // The copy the driver reads: the caller's bytes and kImagePadding zeros, whatever they were followed by.
    auto image = std::make_shared<std::vector<uint8_t>>(n + kImagePadding, 0);
    if (n != 0) std::memcpy(image->data(), a.Data(), n);
    Job *j = new Job;
    j->kind = Kind::kModule;
    j->run = [image, n, limited, limit](Job &job) {
      if (n == 0) {
        job.Fail(cu::kInvalidValue, "qcuda: empty module image");
        return;
      }
      std::string bad = CheckModuleImage(image->data(), n);
      if (!bad.empty()) {
        job.Fail(cu::kInvalidImage, "qcuda: module image: " + bad);
        return;
      }
      const cu::Api &api = cu::api();
      size_t before = 0, after = 0, total = 0;
      if (!job.Check(api.MemGetInfo(&before, &total), "cuMemGetInfo_v2")) return;
      cu::Module m = nullptr;
      if (!job.Check(api.ModuleLoadData(&m, image->data()), "cuModuleLoadData")) return;
      cu::Result r = api.MemGetInfo(&after, &total);
      if (r != cu::kSuccess) {  // unmeasured, it would count as nothing: undo it
        api.ModuleUnload(m);
        job.Fail(r, "cuMemGetInfo_v2");
        return;
      }
      uint64_t bytes = before > after ? before - after : 0;
      if (limited && bytes > limit) {
        api.ModuleUnload(m);
        job.Fail(cu::kOutOfMemory, "qcuda: loading the module took " + std::to_string(bytes) +
                                       " bytes of device memory, more than the " + std::to_string(limit) + " allowed");
        return;
      }
      CtxCore *c = job.ctx.get();
      uint32_t id = c->nextId++;
      c->modules[id] = m;
      job.num = id;
      job.u64 = bytes;
    };
    return Go(env, j, false);
  }

  // moduleUnload(id): its function ids go with it.
  Napi::Value ModuleUnload(const Napi::CallbackInfo &info) {
    uint32_t mid = ArgId(info[0], "module");
    Job *j = new Job;
    j->run = [mid](Job &job) {
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
    };
    return Go(info.Env(), j, false);
  }

  // functionGet(module, name) -> {id, params: [{offset, size}]}: the layout from cuFuncGetParamInfo.
  Napi::Value FunctionGet(const Napi::CallbackInfo &info) {
    uint32_t mid = ArgId(info[0], "module");
    std::string name = ArgName(info[1]);
    uint32_t maxParams = ArgU32(info[2], "maxParams");
    if (maxParams == 0) maxParams = 256;
    Job *j = new Job;
    j->kind = Kind::kFunc;
    j->run = [mid, name = std::move(name), maxParams](Job &job) {
      CtxCore *c = job.ctx.get();
      const cu::Api &a = cu::api();
      cu::Module m;
      if (!c->LookupModule(job, mid, &m)) return;
      cu::Function f = nullptr;
      if (!job.Check(a.ModuleGetFunction(&f, m, name.c_str()), "cuModuleGetFunction")) return;
      if (a.FuncGetParamInfo == nullptr) {
        job.Fail(cu::kNotSupported, "qcuda: cuFuncGetParamInfo (driver >= 12.4) is missing");
        return;
      }
      uint64_t bytes = 0;
      for (size_t i = 0;; i++) {
        size_t off = 0, size = 0;
        cu::Result r = a.FuncGetParamInfo(f, i, &off, &size);
        if (r == cu::kInvalidValue) break;  // past the last parameter
        if (!job.Check(r, "cuFuncGetParamInfo")) return;
        if (i >= maxParams) {
          job.Fail(cu::kNotSupported, "qcuda: kernel " + name + " has more than " + std::to_string(maxParams) + " parameters");
          return;
        }
        job.list.push_back(off);
        job.list.push_back(size);
        bytes = std::max<uint64_t>(bytes, off + size);
      }
      std::vector<uint32_t> offsets;  // for cuLaunchCooperativeKernel's per-parameter pointers
      for (size_t k = 0; k < job.list.size(); k += 2) offsets.push_back(static_cast<uint32_t>(job.list[k]));
      uint32_t id = c->nextId++;
      c->functions[id] = CtxCore::Fn{f, mid, bytes, std::move(offsets)};
      job.num = id;
    };
    return Go(info.Env(), j, true);
  }

  // variableGet(module, name) -> {dptr, size}: cuModuleGetGlobal_v2.
  Napi::Value VariableGet(const Napi::CallbackInfo &info) {
    uint32_t mid = ArgId(info[0], "module");
    std::string name = ArgName(info[1]);
    Job *j = new Job;
    j->kind = Kind::kVar;
    j->run = [mid, name = std::move(name)](Job &job) {
      cu::Module m;
      if (!job.ctx->LookupModule(job, mid, &m)) return;
      cu::Ptr p = 0;
      size_t size = 0;
      if (job.Check(cu::api().ModuleGetGlobal(&p, &size, m, name.c_str()), "cuModuleGetGlobal_v2")) {
        job.u64 = p;
        job.u64b = size;
      }
    };
    return Go(info.Env(), j, true);
  }

  // ---- function attributes, occupancy, limits, stream attributes, cooperative launches.
  // The dispatcher (commands.ts) has checked every id and value range; the driver checks
  // the rest. Cheap queries and settings run inline when the context thread is idle
  // (which keeps them in order with the launches queued there).

  static int32_t ArgI32(const Napi::Value &v, const char *what) {
    if (!v.IsNumber()) throw Napi::TypeError::New(v.Env(), std::string(what) + " must be a number");
    double d = v.As<Napi::Number>().DoubleValue();
    if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != std::floor(d))
      throw Napi::RangeError::New(v.Env(), std::string(what) + " must be a 32-bit integer");
    return static_cast<int32_t>(d);
  }

  // The entry points below are optional (cuda_api.cc): a driver without one fails the job.
  template <typename Fp>
  static bool Have(Job &job, Fp fn, const char *name) {
    if (fn != nullptr) return true;
    job.Fail(cu::kNotSupported, std::string("qcuda: the driver has no ") + name);
    return false;
  }

  // funcGetAttributes(func) -> Int32Array indexed by CUfunction_attribute (cuFuncGetAttribute each).
  Napi::Value FuncGetAttributes(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    Job *j = new Job;
    j->kind = Kind::kInts;
    j->run = [fid](Job &job) {
      const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
      if (f == nullptr || !Have(job, cu::api().FuncGetAttribute, "cuFuncGetAttribute")) return;
      job.ints.assign(cu::kNumFuncAttrs, 0);
      for (int a = 0; a < cu::kNumFuncAttrs; a++) {
        int v = 0;
        cu::Result r = cu::api().FuncGetAttribute(&v, a, f->fn);
        if (r != cu::kSuccess && a >= cu::kFuncAttrEssential) continue;  // no clusters before sm_90: 0
        if (!job.Check(r, "cuFuncGetAttribute")) return;
        job.ints[a] = v;
      }
    };
    return Go(info.Env(), j, true);
  }

  // funcSetAttribute(func, attr, value): cuFuncSetAttribute.
  Napi::Value FuncSetAttribute(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    int32_t attr = ArgI32(info[1], "attr");
    int32_t value = ArgI32(info[2], "value");
    Job *j = new Job;
    j->run = [fid, attr, value](Job &job) {
      const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
      if (f == nullptr || !Have(job, cu::api().FuncSetAttribute, "cuFuncSetAttribute")) return;
      job.Check(cu::api().FuncSetAttribute(f->fn, attr, value), "cuFuncSetAttribute");
    };
    return Go(info.Env(), j, true);
  }

  // occupancyBlocks(func, blockSize, dynamicSmem, flags) -> active blocks per multiprocessor.
  Napi::Value OccupancyBlocks(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    int32_t blockSize = ArgI32(info[1], "blockSize");
    uint64_t smem = ArgU64(info[2], "dynamicSmem");
    uint32_t flags = ArgU32(info[3], "flags");
    Job *j = new Job;
    j->kind = Kind::kNumber;
    j->run = [fid, blockSize, smem, flags](Job &job) {
      const cu::Api &a = cu::api();
      const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
      if (f == nullptr || !Have(job, a.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
                                "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"))
        return;
      int n = 0;
      if (job.Check(a.OccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&n, f->fn, blockSize, smem, flags),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags"))
        job.num = n;
    };
    return Go(info.Env(), j, true);
  }

  // occupancySmem(func, numBlocks, blockSize) -> bigint: dynamic shared memory per block
  // that still lets numBlocks blocks fit on a multiprocessor.
  Napi::Value OccupancySmem(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    int32_t numBlocks = ArgI32(info[1], "numBlocks");
    int32_t blockSize = ArgI32(info[2], "blockSize");
    Job *j = new Job;
    j->kind = Kind::kU64;
    j->run = [fid, numBlocks, blockSize](Job &job) {
      const cu::Api &a = cu::api();
      const CtxCore::Fn *f = job.ctx->LookupFunction(job, fid);
      if (f == nullptr ||
          !Have(job, a.OccupancyAvailableDynamicSMemPerBlock, "cuOccupancyAvailableDynamicSMemPerBlock"))
        return;
      size_t bytes = 0;
      if (job.Check(a.OccupancyAvailableDynamicSMemPerBlock(&bytes, f->fn, numBlocks, blockSize),
                    "cuOccupancyAvailableDynamicSMemPerBlock"))
        job.u64 = bytes;
    };
    return Go(info.Env(), j, true);
  }

  // limitSet(limit, value): cuCtxSetLimit, always on the context thread (a new stack size
  // or heap makes the driver wait for the device and reallocate).
  Napi::Value LimitSet(const Napi::CallbackInfo &info) {
    int32_t limit = ArgI32(info[0], "limit");
    uint64_t value = ArgU64(info[1], "value");
    Job *j = new Job;
    j->run = [limit, value](Job &job) {
      if (Have(job, cu::api().CtxSetLimit, "cuCtxSetLimit"))
        job.Check(cu::api().CtxSetLimit(limit, static_cast<size_t>(value)), "cuCtxSetLimit");
    };
    return Go(info.Env(), j, false);
  }

  // limitGet(limit) -> bigint: cuCtxGetLimit.
  Napi::Value LimitGet(const Napi::CallbackInfo &info) {
    int32_t limit = ArgI32(info[0], "limit");
    Job *j = new Job;
    j->kind = Kind::kU64;
    j->run = [limit](Job &job) {
      if (!Have(job, cu::api().CtxGetLimit, "cuCtxGetLimit")) return;
      size_t v = 0;
      if (job.Check(cu::api().CtxGetLimit(&v, limit), "cuCtxGetLimit")) job.u64 = v;
    };
    return Go(info.Env(), j, true);
  }

  // streamSetAttribute(stream, attr, value): cuStreamSetAttribute; value is the whole
  // CUstreamAttrValue (kAttrValueBytes), as commands.ts rebuilt it from checked fields.
  Napi::Value StreamSetAttribute(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    int32_t attr = ArgI32(info[1], "attr");
    std::vector<uint8_t> value = ArgBytes(info[2], "value");
    if (value.size() != cu::kAttrValueBytes)
      throw Napi::RangeError::New(info.Env(), "value must be " + std::to_string(cu::kAttrValueBytes) + " bytes");
    Job *j = new Job;
    j->run = [sid, attr, value = std::move(value)](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s) || !Have(job, cu::api().StreamSetAttribute, "cuStreamSetAttribute"))
        return;
      alignas(8) uint8_t v[cu::kAttrValueBytes];
      std::memcpy(v, value.data(), sizeof(v));
      job.Check(cu::api().StreamSetAttribute(s, attr, v), "cuStreamSetAttribute");
    };
    return Go(info.Env(), j, true);
  }

  // streamGetAttribute(stream, attr) -> Uint8Array(kAttrValueBytes): cuStreamGetAttribute.
  Napi::Value StreamGetAttribute(const Napi::CallbackInfo &info) {
    uint32_t sid = ArgId(info[0], "stream");
    int32_t attr = ArgI32(info[1], "attr");
    Job *j = new Job;
    j->kind = Kind::kBytes;
    j->run = [sid, attr](Job &job) {
      cu::Stream s;
      if (!job.ctx->LookupStream(job, sid, &s) || !Have(job, cu::api().StreamGetAttribute, "cuStreamGetAttribute"))
        return;
      alignas(8) uint8_t v[cu::kAttrValueBytes] = {};
      if (job.Check(cu::api().StreamGetAttribute(s, attr, v), "cuStreamGetAttribute")) job.bytes.assign(v, v + sizeof(v));
    };
    return Go(info.Env(), j, true);
  }

  // launchCooperative(func, grid[3], block[3], sharedMem, stream, params): as launch(), with
  // cuLaunchCooperativeKernel, which takes a pointer per parameter (into the packed block,
  // at the offsets cuFuncGetParamInfo gave) instead of the packed buffer.
  Napi::Value LaunchCooperative(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    unsigned grid[3], block[3];
    Dims(info[1], "grid", grid);
    Dims(info[2], "block", block);
    uint32_t shared = ArgU32(info[3], "sharedMem");
    uint32_t sid = ArgId(info[4], "stream");
    auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[5], "params"));
    Job *j = new Job;
    j->run = [fid, g0 = grid[0], g1 = grid[1], g2 = grid[2], b0 = block[0], b1 = block[1], b2 = block[2], shared, sid,
              params](Job &job) {
      cu::Stream s;
      const CtxCore::Fn *f = LaunchTarget(job, fid, sid, params->size(), &s);
      if (f == nullptr || !Have(job, cu::api().LaunchCooperativeKernel, "cuLaunchCooperativeKernel")) return;
      std::vector<void *> ptrs;
      for (uint32_t off : f->offsets) ptrs.push_back(params->data() + off);  // off + size <= paramBytes
      job.Check(cu::api().LaunchCooperativeKernel(f->fn, g0, g1, g2, b0, b1, b2, shared, s,
                                                  ptrs.empty() ? nullptr : ptrs.data()),
                "cuLaunchCooperativeKernel");
    };
    return Go(info.Env(), j, false);
  }

  static void Dims(const Napi::Value &v, const char *what, unsigned out[3]) {
    if (!v.IsArray() || v.As<Napi::Array>().Length() != 3)
      throw Napi::TypeError::New(v.Env(), std::string(what) + " must be an array of 3");
    Napi::Array a = v.As<Napi::Array>();
    for (uint32_t i = 0; i < 3; i++) out[i] = ArgU32(a.Get(i), what);
  }

  // launch(func, grid[3], block[3], sharedMem, stream, params): resolves once enqueued
  // (cuLaunchKernel with the packed block as CU_LAUNCH_PARAM_BUFFER_POINTER). Always on the
  // context thread: cuLaunchKernel blocks when the launch queue is full.
  Napi::Value Launch(const Napi::CallbackInfo &info) {
    uint32_t fid = ArgId(info[0], "function");
    unsigned grid[3], block[3];
    Dims(info[1], "grid", grid);
    Dims(info[2], "block", block);
    uint32_t shared = ArgU32(info[3], "sharedMem");
    uint32_t sid = ArgId(info[4], "stream");
    auto params = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[5], "params"));
    // The same checks and call as one record of launchMany.
    std::array<uint32_t, 10> h = {fid, sid, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
                                  static_cast<uint32_t>(params->size())};
    Job *j = new Job;
    j->run = [h, params](Job &job) { LaunchOne(job, h.data(), params->data()); };
    return Go(info.Env(), j, false);
  }

  // launchMany(records, count): `count` launches in one job on the context thread (see
  // native-cuda.ts for the record layout). Each is tried even after one failed, as separate
  // cudaLaunchKernel calls would be; the first failure rejects with its index.
  Napi::Value LaunchMany(const Napi::CallbackInfo &info) {
    auto recs = std::make_shared<std::vector<uint8_t>>(ArgBytes(info[0], "records"));
    uint32_t count = ArgU32(info[1], "count");
    Job *j = new Job;
    j->run = [recs, count](Job &job) {
      const uint8_t *p = recs->data();
      size_t left = recs->size();
      for (uint32_t i = 0; i < count; i++) {
        uint32_t h[10];
        if (left < sizeof(h)) {
          job.Fail(cu::kInvalidValue, "qcuda: launch records truncated");
          job.index = i;
          return;
        }
        std::memcpy(h, p, sizeof(h));
        size_t padded = (static_cast<size_t>(h[9]) + 7) & ~static_cast<size_t>(7);
        if (left - sizeof(h) < padded) {
          job.Fail(cu::kInvalidValue, "qcuda: launch record parameters truncated");
          job.index = i;
          return;
        }
        bool first = job.rc == cu::kSuccess;
        LaunchOne(job, h, const_cast<uint8_t *>(p + sizeof(h)));
        if (first && job.rc != cu::kSuccess) job.index = i;
        p += sizeof(h) + padded;
        left -= sizeof(h) + padded;
      }
    };
    return Go(info.Env(), j, false);
  }

  // One record of launchMany: h = func, stream, grid[3], block[3], sharedMem, paramBytes.
  // The function and stream of a launch, once its parameter block is the size the kernel takes; null (and
  // job failed) otherwise.
  static const CtxCore::Fn *LaunchTarget(Job &job, uint32_t fid, uint32_t sid, size_t size, cu::Stream *s) {
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

  static void LaunchOne(Job &job, const uint32_t h[10], uint8_t *params) {
    cu::Stream s;
    size_t size = h[9];
    const CtxCore::Fn *f = LaunchTarget(job, h[0], h[1], size, &s);
    if (f == nullptr) return;
    void *extra[] = {reinterpret_cast<void *>(cu::kLaunchParamBufferPointer), params,
                     reinterpret_cast<void *>(cu::kLaunchParamBufferSize), &size,
                     reinterpret_cast<void *>(cu::kLaunchParamEnd)};
    job.Check(cu::api().LaunchKernel(f->fn, h[2], h[3], h[4], h[5], h[6], h[7], h[8], s, nullptr, size ? extra : nullptr),
              "cuLaunchKernel");
  }

  // destroy(): after everything submitted before it; waits for running waits, frees all handles.
  Napi::Value Destroy(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (core_->closing) {
      Job *j = new Job;
      j->deferred = nullptr;
      napi_deferred def = nullptr;
      napi_value promise = nullptr;
      napi_create_promise(env, &def, &promise);
      j->deferred = def;
      j->env = State(env);
      j->Fail(cu::kContextIsDestroyed, "qcuda: context already destroyed");
      State(env)->Settle(j);
      return Napi::Value(env, promise);
    }
    Job *j = new Job;
    j->run = [](Job &job) { job.ctx->Teardown(job); };
    Napi::Value p = Go(env, j, false);
    core_->closing = true;
    return p;
  }

  Napi::Value Device(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), core_->ordinal); }
  Napi::Value Primary(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), core_->primary); }
  Napi::Value Busy(const Napi::CallbackInfo &info) {
    std::lock_guard<std::mutex> lk(core_->mu);
    return Napi::Number::New(info.Env(), core_->busy);
  }
  Napi::Value Destroyed(const Napi::CallbackInfo &info) {
    std::lock_guard<std::mutex> lk(core_->mu);
    return Napi::Boolean::New(info.Env(), core_->closing || core_->dead);
  }

  std::shared_ptr<CtxCore> core_;
};

// ---------------------------------------------------------------- module functions

Napi::Value Probe(const Napi::CallbackInfo &info) { return ProbeValue(info.Env()); }

// probeAsync(): the same, with dlopen and cuInit (which can take a second) on a worker thread.
Napi::Value ProbeAsync(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  EnvState *st = State(env);
  napi_deferred def = nullptr;
  napi_value promise = nullptr;
  napi_create_promise(env, &def, &promise);
  Job *j = new Job;
  j->env = st;
  j->deferred = def;
  j->kind = Kind::kProbe;
  j->wait = [](Job &) { cu::Probe(); };
  st->AddPending();
  SubmitWait(j);
  return Napi::Value(env, promise);
}

// openContext(ordinal, flags, primary) -> Promise<CudaContext>. The context's own
// thread creates it (cuCtxCreate_v2 with flags, or retains the primary context).
Napi::Value OpenContext(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  EnvState *st = State(env);
  int ordinal = info[0].As<Napi::Number>().Int32Value();
  uint32_t flags = ArgU32(info[1], "flags");
  bool primary = info[2].ToBoolean();
  auto core = std::make_shared<CtxCore>();
  core->env = st;
  core->ordinal = ordinal;
  core->flags = flags;
  core->primary = primary;
  napi_value ctorv = nullptr;
  napi_get_reference_value(env, st->contextCtor, &ctorv);
  std::shared_ptr<CtxCore> holder = core;
  Napi::Object wrapper =
      Napi::Function(env, ctorv).New({Napi::External<std::shared_ptr<CtxCore>>::New(env, &holder)});

  napi_deferred def = nullptr;
  napi_value promise = nullptr;
  napi_create_promise(env, &def, &promise);
  Job *j = new Job;
  j->deferred = def;
  j->env = st;
  std::string why;
  if (!core->Start(&why)) {  // the wrapper's core refuses all jobs: nothing is left behind
    j->Fail(cu::kOperatingSystem, "qcuda: no thread could be created for the context (" + why + ")");
    st->Settle(j);
    return Napi::Value(env, promise);
  }
  j->kind = Kind::kObject;
  napi_create_reference(env, wrapper, 1, &j->obj);
  j->run = [](Job &job) {
    CtxCore *c = job.ctx.get();
    const cu::Api &a = cu::api();
    cu::Device d = 0;
    if (!job.Check(a.DeviceGet(&d, c->ordinal), "cuDeviceGet")) {
      job.exitThread = true;
      return;
    }
    c->dev = d;
    cu::Ctx ctx = nullptr;
    if (c->primary) {
      if (job.Check(a.DevicePrimaryCtxRetain(&ctx, d), "cuDevicePrimaryCtxRetain") &&
          !job.Check(a.CtxSetCurrent(ctx), "cuCtxSetCurrent")) {
        a.DevicePrimaryCtxRelease(d);
        ctx = nullptr;
      }
    } else if (a.CtxCreate != nullptr) {
      job.Check(a.CtxCreate(&ctx, c->flags, d), "cuCtxCreate_v2");
    } else {
      job.Check(a.CtxCreateV4(&ctx, nullptr, c->flags, d), "cuCtxCreate_v4");
    }
    if (job.rc != cu::kSuccess) {
      job.exitThread = true;
      return;
    }
    c->ctx = ctx;  // cuCtxCreate made it current on this thread
  };
  if (core->Submit(j, false) == CtxCore::SubmitResult::kRefused) {  // cannot happen: a fresh core
    j->Fail(cu::kUnknown, "qcuda: context thread");
    st->Settle(j);
  }
  return Napi::Value(env, promise);
}

// deviceProps(ordinal) -> {name, uuid, totalMem, attrs}
Napi::Value DeviceProps(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  const cu::Api &a = cu::api();
  int ordinal = info[0].As<Napi::Number>().Int32Value();
  cu::Device d = 0;
  cu::Result r = a.DeviceGet(&d, ordinal);
  if (r != cu::kSuccess) {
    Napi::Error e = Napi::Error::New(env, "cuDeviceGet: " + cu::Describe(r));
    e.Set("code", Napi::Number::New(env, cu::ToCudaError(r)));
    e.Set("cuResult", Napi::Number::New(env, r));
    throw e;
  }
  char name[256] = {0};
  a.DeviceGetName(name, sizeof(name) - 1, d);
  cu::Uuid uuid{};
  a.DeviceGetUuid(&uuid, d);
  size_t total = 0;
  a.DeviceTotalMem(&total, d);
  Napi::Int32Array attrs = Napi::Int32Array::New(env, cu::kNumAttrs);
  attrs[0] = 0;
  for (int i = 1; i < cu::kNumAttrs; i++) {
    int v = 0;
    if (a.DeviceGetAttribute(&v, i, d) != cu::kSuccess) v = 0;  // not an attribute of this driver
    attrs[i] = v;
  }
  Napi::Uint8Array u = Napi::Uint8Array::New(env, 16);
  for (int i = 0; i < 16; i++) u[i] = uuid.bytes[i];
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", Napi::String::New(env, name));
  o.Set("uuid", u);
  o.Set("totalMem", Napi::BigInt::New(env, static_cast<uint64_t>(total)));
  o.Set("attrs", attrs);
  return o;
}

Napi::Value SetErrorFactory(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  EnvState *st = State(env);
  if (st->errorFactory != nullptr) napi_delete_reference(env, st->errorFactory);
  st->errorFactory = nullptr;
  if (info[0].IsFunction()) napi_create_reference(env, info[0], 1, &st->errorFactory);
  return env.Undefined();
}

Napi::Value ToCudaError(const Napi::CallbackInfo &info) {
  return Napi::Number::New(info.Env(), cu::ToCudaError(info[0].As<Napi::Number>().Int32Value()));
}

Napi::Value Describe(const Napi::CallbackInfo &info) {
  return Napi::String::New(info.Env(), cu::Describe(info[0].As<Napi::Number>().Int32Value()));
}

Napi::Value Stats(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  WaiterStats w = GetWaiterStats();
  o.Set("waiterThreads", w.threads);
  o.Set("waiterLimit", w.limit);
  o.Set("waiterPeak", w.peak);
  o.Set("waiterQueued", static_cast<double>(w.queued));
  o.Set("waiterSpawnFailures", static_cast<double>(w.spawnFailures));
  o.Set("pending", State(env)->pending);
  return o;
}

// checkModuleImage(image) -> "" or why moduleLoad would refuse the image (cuda_image.h); needs no driver.
Napi::Value CheckModuleImageJs(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array)
    throw Napi::TypeError::New(env, "image must be a Uint8Array");
  Napi::Uint8Array a = info[0].As<Napi::Uint8Array>();
  return Napi::String::New(env, CheckModuleImage(a.Data(), a.ByteLength()));
}

// setWaiterLimit(n): the most waiter threads this process may have (1..kMaxWaiterLimit; cuda_exec.h).
Napi::Value SetWaiterLimitJs(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  double d = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : 0;
  if (!(d >= 1 && d <= kMaxWaiterLimit) || d != std::floor(d))
    throw Napi::RangeError::New(env, "the waiter thread limit must be an integer from 1 to " + std::to_string(kMaxWaiterLimit));
  SetWaiterLimit(static_cast<int>(d));
  return env.Undefined();
}

void KeepEnvState(Napi::Env, EnvState *) {}  // never freed (see EnvState)

}  // namespace

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  EnvState *st = InitEnv(env);
  env.SetInstanceData<EnvState, KeepEnvState>(st);
  Napi::Function ctor = Context::Define(env);
  napi_create_reference(env, ctor, 1, &st->contextCtor);
  exports.Set("CudaContext", ctor);
  exports.Set("probe", Napi::Function::New(env, Probe));
  exports.Set("probeAsync", Napi::Function::New(env, ProbeAsync));
  exports.Set("openContext", Napi::Function::New(env, OpenContext));
  exports.Set("deviceProps", Napi::Function::New(env, DeviceProps));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory));
  exports.Set("toCudaError", Napi::Function::New(env, ToCudaError));
  exports.Set("describe", Napi::Function::New(env, Describe));
  exports.Set("stats", Napi::Function::New(env, Stats));
  exports.Set("setWaiterLimit", Napi::Function::New(env, SetWaiterLimitJs));
  exports.Set("checkModuleImage", Napi::Function::New(env, CheckModuleImageJs));
  exports.Set("MODULE_IMAGE_PADDING", Napi::Number::New(env, static_cast<double>(kImagePadding)));
  exports.Set("DEFAULT_WAITER_LIMIT", Napi::Number::New(env, kDefaultWaiterLimit));
  exports.Set("NUM_ATTRS", Napi::Number::New(env, cu::kNumAttrs));
  exports.Set("HOST_REGISTER_PORTABLE", Napi::Number::New(env, cu::kHostRegisterPortable));
  exports.Set("HOST_REGISTER_DEVICEMAP", Napi::Number::New(env, cu::kHostRegisterDeviceMap));
  exports.Set("CTX_MAP_HOST", Napi::Number::New(env, cu::kCtxMapHost));
  InitOutput(env, exports);
  return exports;
}

}  // namespace qcuda::cuda

static Napi::Object InitCudaModule(Napi::Env env, Napi::Object exports) { return qcuda::cuda::Init(env, exports); }

NODE_API_MODULE(qcuda_cuda, InitCudaModule)
