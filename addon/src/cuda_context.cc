// The CudaContext class itself (cuda_context.h): its JS definition (the
// calls' registry and the getters), how a job gets to the context (Go), and
// destroy. The calls live in the cuda_ctx_*.cc files.
#include "cuda_context.h"

#include <set>
#include <string>

namespace qcuda::cuda {

std::vector<ContextMethod> &ContextMethods() {
  static std::vector<ContextMethod> methods;
  return methods;
}

Napi::Value Context::Dispatch(const Napi::CallbackInfo &info) {
  return static_cast<const ContextMethod *>(info.Data())->fn(*this, info);
}

Napi::Function Context::Define(Napi::Env env) {
  // A name registered twice (two files, or one of the names below) would quietly shadow the other.
  std::set<std::string> names = {"destroy", "device", "primary", "busy", "destroyed"};
  for (const ContextMethod &m : ContextMethods())
    if (!names.insert(m.name).second)
      throw Napi::Error::New(env, std::string("qcuda: CudaContext.") + m.name + " defined twice");
  std::vector<PropertyDescriptor> props;
  for (ContextMethod &m : ContextMethods())
    props.push_back(InstanceMethod(m.name, &Context::Dispatch, napi_default, &m));
  props.push_back(InstanceMethod("destroy", &Context::Destroy));
  props.push_back(InstanceAccessor("device", &Context::Device, nullptr));
  props.push_back(InstanceAccessor("primary", &Context::Primary, nullptr));
  props.push_back(InstanceAccessor("busy", &Context::Busy, nullptr));
  props.push_back(InstanceAccessor("destroyed", &Context::Destroyed, nullptr));
  return DefineClass(env, "CudaContext", props);
}

Context::Context(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Context>(info) {
  if (info.Length() < 1 || !info[0].IsExternal())
    throw Napi::TypeError::New(info.Env(), "CudaContext objects come from openContext()");
  core_ = *info[0].As<Napi::External<std::shared_ptr<CtxCore>>>().Data();
}

Context::~Context() {
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

Where Context::LaunchWhere(uint32_t n) const {
  // Read while the context thread may be running: it only counts up, and if
  // it is running the job is queued whatever this says.
  const uint64_t outstanding = core_->launchesRun.load() - core_->launchesDone.load();
  return n <= kInlineBatchLaunches && outstanding + n <= kInlineLaunchBound ? Where::kContextThread
                                                                            : Where::kContextThreadOnly;
}

Napi::Value Context::Go(Napi::Env env, Job *j, bool inlineOk, bool now) {
  napi_value promise = nullptr;
  Settled settled;
  j->env = State(env);
  j->promise = &promise;
  if (now && inlineOk)
    j->now = &settled;  // a promise only if it turns out to need one (EnvState::MakePromise)
  else
    j->env->MakePromise(j);
  if (core_->closing || core_->Submit(j, inlineOk) == CtxCore::SubmitResult::kRefused) {
    j->Fail(cu::kContextIsDestroyed, "qcuda: context destroyed");
    j->run = nullptr;
    State(env)->Settle(j);
  }
  if (settled.done) {
    if (!settled.ok) throw Napi::Error(env, settled.value);
    return Napi::Value(env, settled.value);
  }
  return Napi::Value(env, promise);
}

// destroy(): after everything submitted before it; waits for running waits, frees all handles.
Napi::Value Context::Destroy(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  if (core_->closing) {
    Job *j = new Job;
    napi_deferred def = nullptr;
    napi_value promise = nullptr;
    napi_create_promise(env, &def, &promise);
    j->deferred = def;
    j->env = State(env);
    j->Fail(cu::kContextIsDestroyed, "qcuda: context already destroyed");
    State(env)->Settle(j);
    return Napi::Value(env, promise);
  }
  Napi::Value p = Submit(info, Where::kContextThreadOnly, [](Job &job) { job.ctx->Teardown(job); });
  core_->closing = true;
  return p;
}

Napi::Value Context::Device(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), core_->ordinal); }
Napi::Value Context::Primary(const Napi::CallbackInfo &info) { return Napi::Boolean::New(info.Env(), core_->primary); }
Napi::Value Context::Busy(const Napi::CallbackInfo &info) {
  std::lock_guard<std::mutex> lk(core_->mu);
  return Napi::Number::New(info.Env(), core_->busy);
}
Napi::Value Context::Destroyed(const Napi::CallbackInfo &info) {
  std::lock_guard<std::mutex> lk(core_->mu);
  return Napi::Boolean::New(info.Env(), core_->closing || core_->dead);
}

}  // namespace qcuda::cuda
