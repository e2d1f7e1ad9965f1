// Context threads, the waiter pool and the way back to the JS thread (see cuda_exec.h).
#include <atomic>
#include <chrono>
#include "cuda_exec.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace qcuda::cuda {
namespace {

// ---- waiter pool: threads are made when every one is busy, up to the limit; idle ones end after a while.
struct Pool {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job *> q;
  int idle = 0;
  int threads = 0;  // counted from just before a thread is created (so the limit holds across concurrent submits)
  int limit = kDefaultWaiterLimit;
  int peak = 0;
  uint64_t spawnFailures = 0;
};
Pool *g_pool = new Pool;  // leaked: detached threads use it until the process ends
constexpr int kKeepIdle = 4;

void ExecWait(Job *j) {
  std::shared_ptr<CtxCore> ctx = j->ctx;
  if (ctx && ctx->ctx != nullptr) cu::api().CtxSetCurrent(ctx->ctx);
  j->wait(*j);
  j->wait = nullptr;  // drops what the wait held (events) before the context may go
  j->env->Post(j);
  if (ctx) ctx->WaitDone();
}

// A wait that no thread will ever run: it fails instead (its wait phase is dropped unrun).
void FailWait(Job *j, const std::string &why) {
  std::shared_ptr<CtxCore> ctx = j->ctx;
  j->Fail(cu::kOperatingSystem, why);
  j->wait = nullptr;
  j->env->Post(j);
  if (ctx) ctx->WaitDone();
}

void WaiterLoop() {
  Pool &p = *g_pool;
  std::unique_lock<std::mutex> lk(p.mu);
  for (;;) {
    if (p.threads > p.limit) {  // the limit was lowered
      p.threads--;
      if (!p.q.empty()) p.cv.notify_one();  // this thread may have been woken for a job: pass it on
      return;
    }
    if (p.q.empty()) {
      p.idle++;
      bool got = p.cv.wait_for(lk, std::chrono::seconds(10), [&] { return !p.q.empty() || p.threads > p.limit; });
      p.idle--;
      if (!got && p.threads > kKeepIdle) {
        p.threads--;
        return;
      }
      continue;
    }
    Job *j = p.q.front();
    p.q.pop_front();
    lk.unlock();
    ExecWait(j);
    lk.lock();
  }
}

void OnAsync(uv_async_t *h) { static_cast<EnvState *>(h->data)->Drain(); }

napi_value MakeError(Napi::Env env, EnvState *st, const Job &j) {
  int code = cu::ToCudaError(j.rc);
  std::string msg = j.call + ": " + cu::Describe(j.rc);
  Napi::Value err;
  if (st->errorFactory != nullptr) {
    try {
      napi_value fv = nullptr;
      napi_get_reference_value(env, st->errorFactory, &fv);
      err = Napi::Function(env, fv).Call({Napi::Number::New(env, code), Napi::String::New(env, msg)});
    } catch (const Napi::Error &) {
      err = Napi::Value();
    }
  }
  if (err.IsEmpty() || !err.IsObject()) {
    Napi::Error e = Napi::Error::New(env, msg);
    e.Set("code", Napi::Number::New(env, code));
    err = e.Value();
  }
  Napi::Object o = err.As<Napi::Object>();
  o.Set("cuResult", Napi::Number::New(env, j.rc));
  o.Set("call", Napi::String::New(env, j.call));
  if (j.index >= 0) o.Set("index", Napi::Number::New(env, static_cast<double>(j.index)));
  return o;
}

template <typename... F>
struct Overload : F... {
  using F::operator()...;
};
template <typename... F>
Overload(F...) -> Overload<F...>;

// The one place where a job's result becomes a JS value.
napi_value MakeValue(Napi::Env env, const Value &result) {
  auto big = [&](uint64_t x) { return Napi::BigInt::New(env, x); };
  auto num = [&](double x) { return Napi::Number::New(env, x); };
  return std::visit(Overload{
                        [&](const res::None &) -> napi_value { return env.Undefined(); },
                        [&](const res::Big &r) -> napi_value { return big(r.v); },
                        [&](const res::Num &r) -> napi_value { return num(r.v); },
                        [&](const res::Flag &r) -> napi_value { return Napi::Boolean::New(env, r.v); },
                        [&](const res::MemInfo &r) -> napi_value {
                          Napi::Object o = Napi::Object::New(env);
                          o.Set("free", big(r.free));
                          o.Set("total", big(r.total));
                          return o;
                        },
                        [&](const res::Object &r) -> napi_value {
                          napi_value v = nullptr;
                          napi_get_reference_value(env, r.ref, &v);
                          return v;
                        },
                        [&](const res::Probe &) -> napi_value { return ProbeValue(env); },
                        [&](const res::Func &r) -> napi_value {
                          Napi::Object o = Napi::Object::New(env);
                          o.Set("id", num(r.id));
                          Napi::Array params = Napi::Array::New(env, r.params.size());
                          for (size_t i = 0; i < r.params.size(); i++) {
                            Napi::Object p = Napi::Object::New(env);
                            p.Set("offset", num(static_cast<double>(r.params[i].offset)));
                            p.Set("size", num(static_cast<double>(r.params[i].size)));
                            params.Set(static_cast<uint32_t>(i), p);
                          }
                          o.Set("params", params);
                          o.Set("localBytes", num(static_cast<double>(r.localBytes)));
                          return o;
                        },
                        [&](const res::Var &r) -> napi_value {
                          Napi::Object o = Napi::Object::New(env);
                          o.Set("dptr", big(r.dptr));
                          o.Set("size", big(r.size));
                          return o;
                        },
                        [&](const res::Module &r) -> napi_value {
                          Napi::Object o = Napi::Object::New(env);
                          o.Set("id", num(r.id));
                          o.Set("bytes", big(r.bytes));
                          return o;
                        },
                        [&](const res::Ints &r) -> napi_value {
                          Napi::Int32Array a = Napi::Int32Array::New(env, r.v.size());
                          for (size_t i = 0; i < r.v.size(); i++) a[i] = r.v[i];
                          return a;
                        },
                        [&](const res::Bytes &r) -> napi_value {
                          Napi::Uint8Array a = Napi::Uint8Array::New(env, r.v.size());
                          if (!r.v.empty()) memcpy(a.Data(), r.v.data(), r.v.size());
                          return a;
                        },
                        [&](const res::Named &r) -> napi_value {
                          Napi::Object o = Napi::Object::New(env);
                          for (const auto &[name, v] : r.fields) o.Set(name, num(v));
                          return o;
                        },
                    },
                    result);
}

}  // namespace

void SubmitWait(Job *j) {
  Pool &p = *g_pool;
  std::unique_lock<std::mutex> lk(p.mu);
  p.q.push_back(j);
  if (static_cast<size_t>(p.idle) >= p.q.size() || p.threads >= p.limit) {
    p.cv.notify_one();  // an idle thread takes it, else it waits for the first busy one to finish
    return;
  }
  p.threads++;
  p.peak = std::max(p.peak, p.threads);
  lk.unlock();
  std::string why;
  try {
    std::thread(WaiterLoop).detach();
    return;
  } catch (const std::exception &e) {  // std::system_error (EAGAIN: thread or memory limits), std::bad_alloc
    why = e.what();
  }
  // No new thread. The job stays queued for the threads there are; with none,
  // nothing would ever run what is queued, so it fails (all of it: a submit
  // that raced this one and also failed finds the queue empty).
  std::deque<Job *> orphans;
  lk.lock();
  p.threads--;
  p.spawnFailures++;
  if (p.threads == 0)
    orphans.swap(p.q);
  else
    p.cv.notify_one();
  lk.unlock();
  for (Job *k : orphans) FailWait(k, "qcuda: no thread could be created to wait for the GPU (" + why + ")");
}

void SetWaiterLimit(int n) {
  std::lock_guard<std::mutex> lk(g_pool->mu);
  g_pool->limit = std::clamp(n, 1, kMaxWaiterLimit);
  g_pool->cv.notify_all();  // idle threads above the limit end
}

WaiterStats GetWaiterStats() {
  std::lock_guard<std::mutex> lk(g_pool->mu);
  WaiterStats s;
  s.threads = g_pool->threads;
  s.limit = g_pool->limit;
  s.peak = g_pool->peak;
  s.queued = g_pool->q.size();
  s.spawnFailures = g_pool->spawnFailures;
  return s;
}

int WaiterThreads() {
  std::lock_guard<std::mutex> lk(g_pool->mu);
  return g_pool->threads;
}

// ---- EnvState

EnvState *InitEnv(napi_env env) {
  auto *st = new EnvState;  // never freed: see the struct
  st->env = env;
  uv_loop_t *loop = nullptr;
  napi_get_uv_event_loop(env, &loop);
  uv_async_init(loop, &st->async, OnAsync);
  st->async.data = st;
  uv_unref(reinterpret_cast<uv_handle_t *>(&st->async));
  Napi::Env e(env);
  napi_async_init(env, Napi::Object::New(e), Napi::String::New(e, "qcuda:cuda"), &st->asyncCtx);
  napi_add_env_cleanup_hook(
      env,
      [](void *arg) {
        auto *s = static_cast<EnvState *>(arg);
        {
          std::lock_guard<std::mutex> lk(s->mu);
          s->alive = false;
          for (Job *j : s->done) delete j;
          s->done.clear();
        }
        uv_close(reinterpret_cast<uv_handle_t *>(&s->async), nullptr);
      },
      st);
  return st;
}

bool EnvState::IsPinned(uint64_t addr, uint64_t len) const {
  auto it = pinned.upper_bound(addr);
  if (it == pinned.begin()) return false;
  --it;
  return addr - it->first <= it->second && len <= it->second - (addr - it->first);
}

void EnvState::Post(Job *j) {
  std::lock_guard<std::mutex> lk(mu);
  if (!alive) {
    delete j;  // the environment is gone; so is whoever waited (its deferred and refs go with it)
    return;
  }
  done.push_back(j);
  uv_async_send(&async);
}

void EnvState::AddPending() {
  if (pending++ == 0) uv_ref(reinterpret_cast<uv_handle_t *>(&async));
}

void EnvState::MakePromise(Job *j) {
  if (j->deferred == nullptr && j->promise != nullptr) napi_create_promise(env, &j->deferred, j->promise);
  j->now = nullptr;
}

namespace {
// A job's outcome as a JS value: its main-thread step first, then its value,
// or its error (an exception of either step is the error). True if it succeeded.
bool Outcome(Napi::Env e, EnvState *st, Job &j, napi_value &v) {
  bool ok = j.rc == cu::kSuccess;
  try {
    if (j.onMain) j.onMain(j);
    v = ok ? MakeValue(e, j.result) : MakeError(e, st, j);
  } catch (const Napi::Error &err) {
    ok = false;
    v = err.Value();
  }
  return ok;
}
}  // namespace

void EnvState::Settle(Job *j) {
  Napi::Env e(env);
  if (j->now != nullptr) {
    // Settled inside the call that made it (SubmitNow): the value goes back
    // as that call's return value, so it is made in the call's own scope.
    j->now->done = true;
    j->now->ok = Outcome(e, this, *j, j->now->value);
  } else if (j->deferred != nullptr) {
    Napi::HandleScope hs(e);
    napi_value v = nullptr;
    if (Outcome(e, this, *j, v))
      napi_resolve_deferred(env, j->deferred, v);
    else
      napi_reject_deferred(env, j->deferred, v);
  } else if (j->onMain) {
    Napi::HandleScope hs(e);  // nobody waits for the result: the main-thread step only
    try {
      j->onMain(*j);
    } catch (const Napi::Error &) {
    }
  }
  if (auto *o = std::get_if<res::Object>(&j->result); o != nullptr && o->ref != nullptr)
    napi_delete_reference(env, o->ref);
  delete j;
}

int EnvState::PollParked(bool stop) {
  int settled = 0;
  std::vector<Job *> left;
  for (Job *j : parked) {
    std::shared_ptr<CtxCore> ctx = j->ctx;
    if (ctx && ctx->ctx != nullptr) cu::api().CtxSetCurrent(ctx->ctx);
    if (!j->ready()) {
      left.push_back(j);
      continue;
    }
    j->wait(*j);  // returns at once: what it waits for is done (it still reports errors, flushes output)
    j->wait = nullptr;
    Settle(j);  // deletes j
    pending--;
    settled++;
    if (ctx) ctx->WaitDone();
  }
  parked.swap(left);
  parkedDone += settled;
  if (stop && settled == 0) {
    parkedHandedOn += parked.size();
    for (Job *j : parked) SubmitWait(j);  // counted in pending and in its context's waits already
    parked.clear();
    parking = false;
  } else {
    parking = true;
  }
  if (pending == 0) uv_unref(reinterpret_cast<uv_handle_t *>(&async));
  return settled;
}

void EnvState::Drain() {
  std::deque<Job *> batch;
  {
    std::lock_guard<std::mutex> lk(mu);
    batch.swap(done);
  }
  if (batch.empty()) return;
  Napi::Env e(env);
  Napi::HandleScope hs(e);
  napi_callback_scope scope = nullptr;
  // Settling inside a callback scope runs the promise reactions (microtasks) when it closes.
  napi_open_callback_scope(env, Napi::Object::New(e), asyncCtx, &scope);
  for (Job *j : batch) {
    Settle(j);
    pending--;
  }
  napi_close_callback_scope(env, scope);
  if (pending == 0) uv_unref(reinterpret_cast<uv_handle_t *>(&async));
}

// ---- Ev

Ev::~Ev() {
  if (ev == nullptr) return;
  cu::api().CtxSetCurrent(ctx);
  cu::api().EventDestroy(ev);
}

// ---- CtxCore

bool CtxCore::Start(std::string *why) {
  std::shared_ptr<CtxCore> self = shared_from_this();
  try {
    std::thread([self] { self->Loop(); }).detach();
    return true;
  } catch (const std::exception &e) {  // std::system_error: thread or memory limits
    *why = e.what();
  }
  std::lock_guard<std::mutex> lk(mu);
  dead = true;  // Submit refuses everything from now on
  return false;
}

void CtxCore::Loop() {
  for (;;) {
    Job *j;
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return !q.empty(); });
      j = q.front();
      q.pop_front();
    }
    if (ctx != nullptr) cu::api().CtxSetCurrent(ctx);
    j->run(*j);
    j->run = nullptr;
    const bool exit = j->exitThread;
    if (!exit) {
      // Idle again before the job's answer can reach JavaScript: woken by
      // it, JS may submit its next call at once, and that call should find
      // the thread idle and run inline. Counted down after AfterRun (as it
      // was), a loaded machine let JS in first, and the call queued here.
      std::lock_guard<std::mutex> lk(mu);
      busy--;
    }
    AfterRun(j, false);
    if (exit) {
      std::lock_guard<std::mutex> lk(mu);
      dead = true;
      // Anything queued after the end is refused (the JS side stops submitting at destroy()).
      for (Job *k : q) {
        k->Fail(cu::kContextIsDestroyed, "qcuda: context destroyed");
        k->env->Post(k);
      }
      q.clear();
      busy = 0;
      return;
    }
  }
}

namespace {
std::atomic<uint64_t> g_inlineRuns{0};
}  // namespace

CtxCore::SubmitResult CtxCore::Submit(Job *j, bool inlineOk) {
  j->ctx = shared_from_this();
  j->env = env;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (dead) return SubmitResult::kRefused;
    if (!inlineOk || busy != 0) {
      env->MakePromise(j);
      env->AddPending();
      q.push_back(j);
      busy++;
      cv.notify_one();
      return SubmitResult::kQueued;
    }
  }
  // Idle: nothing earlier is left to enqueue, and only this (JS) thread submits,
  // so running here keeps the order.
  g_inlineRuns.fetch_add(1, std::memory_order_relaxed);
  cu::api().CtxSetCurrent(ctx);
  j->run(*j);
  j->run = nullptr;
  AfterRun(j, true);
  return SubmitResult::kInline;
}

namespace {
std::atomic<int64_t> g_inlineWaitNs{0};
std::atomic<uint64_t> g_inlineDone{0}, g_inlineHandedOn{0}, g_inlinePollNs{0};

// Polls j->ready for up to the inline wait; true if it became ready (then the wait returns at once).
bool PollInline(Job *j) {
  const int64_t budget = g_inlineWaitNs.load(std::memory_order_relaxed);
  if (budget <= 0 || !j->ready) return false;
  const auto t0 = std::chrono::steady_clock::now();
  const bool ok = PollReady(*j, budget);
  g_inlinePollNs += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  (ok ? g_inlineDone : g_inlineHandedOn)++;
  return ok;
}
}  // namespace

bool PollReady(const Job &j, int64_t ns) {
  if (!j.ready) return false;
  const auto t0 = std::chrono::steady_clock::now();
  bool ok = j.ready();
  while (!ok && std::chrono::steady_clock::now() - t0 < std::chrono::nanoseconds(ns)) ok = j.ready();
  return ok;
}

void SetInlineWait(int64_t ns) { g_inlineWaitNs = ns > 0 ? ns : 0; }
int64_t InlineWaitNs() { return g_inlineWaitNs.load(std::memory_order_relaxed); }

namespace {
std::atomic<bool> g_inlineCalls{false};
}  // namespace
void SetInlineCalls(bool on) { g_inlineCalls = on; }
bool InlineCalls() { return g_inlineCalls.load(std::memory_order_relaxed); }

InlineWaitStats GetInlineWaitStats() {
  InlineWaitStats s;
  s.done = g_inlineDone, s.handedOn = g_inlineHandedOn, s.pollNs = g_inlinePollNs, s.runs = g_inlineRuns;
  return s;
}

void CtxCore::AfterRun(Job *j, bool onJsThread) {
  if (j->wait && onJsThread && PollInline(j)) {
    j->wait(*j);  // returns at once: what it waits for is done (it still reports errors, flushes output)
    j->wait = nullptr;
  }
  if (j->wait && j->handOff) j->handOff(*j);
  if (j->wait) {
    if (onJsThread) {
      env->MakePromise(j);
      env->AddPending();
    }
    {
      std::lock_guard<std::mutex> lk(wmu);
      waiting++;
    }
    if (onJsThread && env->parking && j->ready && j->readyLater) {
      env->parked.push_back(j);  // the JS thread's poll loop settles it (EnvState::PollParked)
      return;
    }
    SubmitWait(j);
  } else if (onJsThread) {
    env->Settle(j);
  } else {
    env->Post(j);
  }
}

void CtxCore::LaunchesDone(uint64_t mark) {
  uint64_t seen = launchesDone.load();
  while (seen < mark && !launchesDone.compare_exchange_weak(seen, mark)) {
  }
}

void CtxCore::WaitDone() {
  std::lock_guard<std::mutex> lk(wmu);
  if (--waiting == 0) wcv.notify_all();
}

bool CtxCore::LookupStream(Job &j, uint32_t id, cu::Stream *out) {
  if (id == 0) {
    *out = nullptr;  // the legacy NULL stream
    return true;
  }
  auto it = streams.find(id);
  if (it == streams.end()) {
    j.Fail(cu::kInvalidHandle, "qcuda: no stream " + std::to_string(id) + " in this context");
    return false;
  }
  *out = it->second;
  return true;
}

std::shared_ptr<Ev> CtxCore::LookupEvent(Job &j, uint32_t id) {
  auto it = events.find(id);
  if (it == events.end()) {
    j.Fail(cu::kInvalidHandle, "qcuda: no event " + std::to_string(id) + " in this context");
    return nullptr;
  }
  return it->second;
}

bool CtxCore::LookupModule(Job &j, uint32_t id, cu::Module *out) {
  auto it = modules.find(id);
  if (it == modules.end()) {
    j.Fail(cu::kInvalidHandle, "qcuda: no module " + std::to_string(id) + " in this context");
    return false;
  }
  *out = it->second;
  return true;
}

const CtxCore::Fn *CtxCore::LookupFunction(Job &j, uint32_t id) {
  auto it = functions.find(id);
  if (it == functions.end()) {
    j.Fail(cu::kInvalidHandle, "qcuda: no function " + std::to_string(id) + " in this context");
    return nullptr;
  }
  return &it->second;
}

cu::Event CtxCore::AcquireEvent(Job &j) {
  {
    std::lock_guard<std::mutex> lk(pmu);
    if (!pool.empty()) {
      cu::Event e = pool.back();
      pool.pop_back();
      return e;
    }
  }
  cu::Event e = nullptr;
  // BLOCKING_SYNC: a waiter that gives up polling sleeps (WaitEvent) instead of spinning.
  if (!j.Check(cu::api().EventCreate(&e, cu::kEventDisableTiming | cu::kEventBlockingSync), "cuEventCreate"))
    return nullptr;
  return e;
}

void CtxCore::ReleaseEvent(cu::Event e) {
  std::lock_guard<std::mutex> lk(pmu);
  pool.push_back(e);
}

void CtxCore::Teardown(Job &j) {
  {
    std::unique_lock<std::mutex> lk(wmu);
    wcv.wait(lk, [&] { return waiting == 0; });
  }
  if (ctx != nullptr) {
    const cu::Api &a = cu::api();
    a.CtxSetCurrent(ctx);
    FreeVmm();
    for (auto &x : graphExecs) a.GraphExecDestroy(x.second);  // present whenever one was made
    graphExecs.clear();
    for (auto &g : graphs) a.GraphDestroy(g.second);
    graphs.clear();
    events.clear();
    for (auto &s : streams) a.StreamDestroy(s.second);
    streams.clear();
    functions.clear();
    for (auto &m : modules) a.ModuleUnload(m.second);
    modules.clear();
    {
      std::lock_guard<std::mutex> lk(pmu);
      for (cu::Event e : pool) a.EventDestroy(e);
      pool.clear();
    }
    if (primary) {
      a.CtxSetCurrent(nullptr);
      j.Check(a.DevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease_v2");
    } else {
      j.Check(a.CtxDestroy(ctx), "cuCtxDestroy_v2");
    }
    ctx = nullptr;
  }
  j.exitThread = true;
}

Napi::Value ProbeValue(Napi::Env env) {
  const cu::ProbeResult &p = cu::Probe();
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", p.ok);
  o.Set("reason", p.reason);
  o.Set("library", p.library);
  o.Set("driverVersion", p.driverVersion);
  o.Set("deviceCount", p.deviceCount);
  return o;
}

}  // namespace qcuda::cuda
