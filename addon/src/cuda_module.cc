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
//
// This file holds the module's own functions (probe, openContext,
// deviceProps, ...) and its exports; the CudaContext class and its calls are
// in cuda_context.h and the cuda_ctx_*.cc files.
#include <napi.h>

#include <cmath>
#include <memory>

#include "cuda_api.h"
#include "cuda_args.h"
#include "cuda_context.h"
#include "cuda_exec.h"
#include "cuda_image.h"
#include "cuda_output.h"
#include "cuda_ring_server.h"

namespace qcuda::cuda {
namespace {

void RequireCuda(Napi::Env env) {
  const cu::ProbeResult &p = cu::Probe();
  if (!p.ok) throw Napi::Error::New(env, "CUDA is not available: " + p.reason);
}

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
  j->result = res::Probe{};
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
  Napi::Object wrapper = Napi::Function(env, ctorv).New({Napi::External<std::shared_ptr<CtxCore>>::New(env, &holder)});

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
  napi_ref ref = nullptr;
  napi_create_reference(env, wrapper, 1, &ref);
  j->result = res::Object{ref};
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

// A device-level query's result, or its failure thrown as an error with the CUresult's cudaError_t.
int PeerAnswer(Napi::Env env, cu::Result r, int v, const char *call) {
  if (r == cu::kSuccess) return v;
  Napi::Error e = Napi::Error::New(env, std::string(call) + ": " + cu::Describe(r));
  e.Set("code", Napi::Number::New(env, cu::ToCudaError(r)));
  e.Set("cuResult", Napi::Number::New(env, r));
  throw e;
}

// canAccessPeer(ordinal, peerOrdinal) -> 0 or 1 (cuDeviceCanAccessPeer; 0 where the driver has no such call)
Napi::Value CanAccessPeer(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  const cu::Api &a = cu::api();
  cu::Device d = 0, p = 0;
  PeerAnswer(env, a.DeviceGet(&d, info[0].As<Napi::Number>().Int32Value()), 0, "cuDeviceGet");
  PeerAnswer(env, a.DeviceGet(&p, info[1].As<Napi::Number>().Int32Value()), 0, "cuDeviceGet");
  int v = 0;
  if (a.DeviceCanAccessPeer == nullptr) return Napi::Number::New(env, 0);
  cu::Result r = a.DeviceCanAccessPeer(&v, d, p);  // before v is read: argument order is unspecified
  return Napi::Number::New(env, PeerAnswer(env, r, v, "cuDeviceCanAccessPeer"));
}

// p2pAttribute(attr, srcOrdinal, dstOrdinal) -> the value (cuDeviceGetP2PAttribute)
Napi::Value P2PAttribute(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  RequireCuda(env);
  const cu::Api &a = cu::api();
  cu::Device s = 0, d = 0;
  int attr = info[0].As<Napi::Number>().Int32Value();
  PeerAnswer(env, a.DeviceGet(&s, info[1].As<Napi::Number>().Int32Value()), 0, "cuDeviceGet");
  PeerAnswer(env, a.DeviceGet(&d, info[2].As<Napi::Number>().Int32Value()), 0, "cuDeviceGet");
  if (a.DeviceGetP2PAttribute == nullptr) PeerAnswer(env, cu::kNotSupported, 0, "cuDeviceGetP2PAttribute");
  int v = 0;
  cu::Result r = a.DeviceGetP2PAttribute(&v, attr, s, d);
  return Napi::Number::New(env, PeerAnswer(env, r, v, "cuDeviceGetP2PAttribute"));
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
  InlineWaitStats iw = GetInlineWaitStats();
  o.Set("inlineWaitsDone", static_cast<double>(iw.done));
  o.Set("inlineWaitsHandedOn", static_cast<double>(iw.handedOn));
  o.Set("inlinePollNs", static_cast<double>(iw.pollNs));
  o.Set("inlineRuns", static_cast<double>(iw.runs));
  o.Set("parkedWaitsDone", static_cast<double>(State(env)->parkedDone));
  o.Set("parkedWaitsHandedOn", static_cast<double>(State(env)->parkedHandedOn));
  return o;
}

// setInlineWait(us): how long a wait run on the JS thread polls before going to the pool (cuda_exec.h).
Napi::Value SetInlineWaitJs(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  double d = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= 0 && d <= 1e6)) throw Napi::RangeError::New(env, "the inline wait must be 0 to 1000000 microseconds");
  SetInlineWait(static_cast<int64_t>(d * 1000));
  return env.Undefined();
}

// pollWaits(stop) -> waits settled: a turn of the JS thread's poll loop (EnvState::PollParked).
Napi::Value PollWaitsJs(const Napi::CallbackInfo &info) {
  if (info.Length() < 1 || !info[0].IsBoolean()) throw Napi::TypeError::New(info.Env(), "pollWaits(stop: boolean)");
  return Napi::Number::New(info.Env(), State(info.Env())->PollParked(info[0].As<Napi::Boolean>().Value()));
}

// pendingJobs() -> jobs begun on this thread whose promise is not settled yet
// (queued, running, waiting, parked): a poll loop that spins checks it is 0.
Napi::Value PendingJobsJs(const Napi::CallbackInfo &info) {
  return Napi::Number::New(info.Env(), State(info.Env())->pending);
}

// setInlineCalls(on): ordered calls run on the JS thread when the context thread is idle (cuda_exec.h).
Napi::Value SetInlineCallsJs(const Napi::CallbackInfo &info) {
  if (info.Length() < 1 || !info[0].IsBoolean()) throw Napi::TypeError::New(info.Env(), "setInlineCalls(on: boolean)");
  SetInlineCalls(info[0].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

// giveHost(addr, len, alias): guest RAM [addr, addr+len) is mapped and registered at alias too; copies
// from it go there (given.h). ungiveHost(addr, alias) forgets it.
Napi::Value GiveHostJs(const Napi::CallbackInfo &info) {
  State(info.Env())->given.Give(ArgU64(info[0], "addr"), ArgU64(info[1], "len"), ArgU64(info[2], "alias"));
  return info.Env().Undefined();
}

Napi::Value UngiveHostJs(const Napi::CallbackInfo &info) {
  State(info.Env())->given.Ungive(ArgU64(info[0], "addr"), ArgU64(info[1], "alias"));
  return info.Env().Undefined();
}

// resolveSegments(segs) -> segs as copies see them (given.h): for tests.
Napi::Value ResolveSegmentsJs(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  std::vector<Seg> out = State(env)->given.Resolve(ArgSegs(info[0]));
  Napi::Array a = Napi::Array::New(env, out.size());
  for (size_t i = 0; i < out.size(); i++) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("addr", Napi::BigInt::New(env, out[i].addr));
    o.Set("len", Napi::Number::New(env, static_cast<double>(out[i].len)));
    a.Set(static_cast<uint32_t>(i), o);
  }
  return a;
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
    throw Napi::RangeError::New(
        env, "the waiter thread limit must be an integer from 1 to " + std::to_string(kMaxWaiterLimit));
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
  exports.Set("canAccessPeer", Napi::Function::New(env, CanAccessPeer));
  exports.Set("p2pAttribute", Napi::Function::New(env, P2PAttribute));
  exports.Set("setErrorFactory", Napi::Function::New(env, SetErrorFactory));
  exports.Set("toCudaError", Napi::Function::New(env, ToCudaError));
  exports.Set("describe", Napi::Function::New(env, Describe));
  exports.Set("stats", Napi::Function::New(env, Stats));
  exports.Set("setWaiterLimit", Napi::Function::New(env, SetWaiterLimitJs));
  exports.Set("setInlineWait", Napi::Function::New(env, SetInlineWaitJs));
  exports.Set("setInlineCalls", Napi::Function::New(env, SetInlineCallsJs));
  exports.Set("pollWaits", Napi::Function::New(env, PollWaitsJs));
  exports.Set("pendingJobs", Napi::Function::New(env, PendingJobsJs));
  exports.Set("giveHost", Napi::Function::New(env, GiveHostJs));
  exports.Set("ungiveHost", Napi::Function::New(env, UngiveHostJs));
  exports.Set("resolveSegments", Napi::Function::New(env, ResolveSegmentsJs));
  exports.Set("checkModuleImage", Napi::Function::New(env, CheckModuleImageJs));
  exports.Set("MODULE_IMAGE_PADDING", Napi::Number::New(env, static_cast<double>(kImagePadding)));
  exports.Set("DEFAULT_WAITER_LIMIT", Napi::Number::New(env, kDefaultWaiterLimit));
  exports.Set("INLINE_LAUNCH_BOUND", Napi::Number::New(env, static_cast<double>(kInlineLaunchBound)));
  exports.Set("INLINE_BATCH_LAUNCHES", Napi::Number::New(env, kInlineBatchLaunches));
  exports.Set("NUM_ATTRS", Napi::Number::New(env, cu::kNumAttrs));
  exports.Set("HOST_REGISTER_PORTABLE", Napi::Number::New(env, cu::kHostRegisterPortable));
  exports.Set("HOST_REGISTER_DEVICEMAP", Napi::Number::New(env, cu::kHostRegisterDeviceMap));
  exports.Set("CTX_MAP_HOST", Napi::Number::New(env, cu::kCtxMapHost));
  InitOutput(env, exports);
  InitRingServer(env, exports);
  return exports;
}

}  // namespace qcuda::cuda

static Napi::Object InitCudaModule(Napi::Env env, Napi::Object exports) { return qcuda::cuda::Init(env, exports); }

NODE_API_MODULE(qcuda_cuda, InitCudaModule)
