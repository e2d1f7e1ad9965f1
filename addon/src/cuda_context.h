// The CudaContext JS class (CudaContextNative in backend/src/qcuda/providers/cuda/native-cuda.ts):
// one CUDA context (a CtxCore, cuda_exec.h) and the calls on it. Every call
// reads its arguments on the JS thread (cuda_args.h), then hands the driver
// work to Submit() as one job and returns the job's promise. The calls are
// spread over files by concern, each small, and each call is named only where
// it is written (QCUDA_CONTEXT_METHOD below):
//   cuda_context.cc      the class itself: Define, Submit's way in (Go), destroy, the getters
//   cuda_ctx_memory.cc   allocations, copies, filling memory, host registration, free memory
//   cuda_ctx_streams.cc  context waits, streams, events, stream attributes and priorities, limits,
//                        L2, the wait for a stream (WaitForStream)
//   cuda_ctx_modules.cc  modules, functions, variables, function attributes, occupancy
//   cuda_ctx_launch.cc   kernel launches (launch_record.h)
//   cuda_ctx_vmm.cc      virtual memory management: reservations, physical memory, mappings, access
#pragma once
#include <napi.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cuda_api.h"
#include "cuda_args.h"
#include "cuda_exec.h"
#include "launch_record.h"

namespace qcuda::cuda {

inline EnvState *State(Napi::Env env) { return env.GetInstanceData<EnvState>(); }

/** The optional entry points (cuda_api.cc): a driver without one fails the job. */
template <typename Fp>
bool Have(Job &job, Fp fn, const char *name) {
  if (fn != nullptr) return true;
  job.Fail(cu::kNotSupported, std::string("qcuda: the driver has no ") + name);
  return false;
}

/** Phase-1 tail: wait (phase 2) until everything enqueued so far on stream s is done. */
void WaitForStream(Job &job, cu::Stream s);

// The run phases of the calls a session's worker also serves straight from
// its ring (cuda_ring_server.cc): one body each, whichever way the call came.
/** synchronize(): ready once every stream is idle; the wait is cuCtxSynchronize. */
void RunSynchronize(Job &job);
/** streamSynchronize(): the wait for stream sid. */
void RunStreamSynchronize(Job &job, uint32_t sid);
/** eventRecord(): event eid recorded on stream sid. */
void RunEventRecord(Job &job, uint32_t eid, uint32_t sid);
/** eventSynchronize(): ready once the device has passed event eid; the wait is cuEventSynchronize. */
void RunEventSynchronize(Job &job, uint32_t eid);
/** eventQuery(): whether the device has passed event eid (false with the job failed if the query did). */
bool RunEventQuery(Job &job, uint32_t eid);
/** copyHtoD(): the segments' bytes to dst on stream sid, then the wait for that stream. */
void RunCopyHtoD(Job &job, uint64_t dst, const std::vector<Seg> &segs, uint32_t sid);
/** copyDtoH(): src's bytes into the segments on stream sid, then the wait for that stream. */
void RunCopyDtoH(Job &job, const std::vector<Seg> &segs, uint64_t src, uint32_t sid);
/** A launch's header (launch_record.h's fields, in order). */
using LaunchHeader = std::array<uint32_t, launch_record::kWords>;
/** The header of a launch of function fid on stream sid (context ids), its parameter block paramBytes long. */
inline LaunchHeader MakeLaunchHeader(uint32_t fid, uint32_t sid, const uint32_t grid[3], const uint32_t block[3],
                                     uint32_t sharedMem, uint32_t paramBytes) {
  namespace lr = launch_record;
  LaunchHeader h{};
  h[lr::kFunc] = fid;
  h[lr::kStream] = sid;
  h[lr::kGridX] = grid[0];
  h[lr::kGridY] = grid[1];
  h[lr::kGridZ] = grid[2];
  h[lr::kBlockX] = block[0];
  h[lr::kBlockY] = block[1];
  h[lr::kBlockZ] = block[2];
  h[lr::kSharedMem] = sharedMem;
  h[lr::kParamBytes] = paramBytes;
  return h;
}
/** One launch (launch(), one record of launchMany()): its function, stream and parameter size checked, then
 * cuLaunchKernel. */
void LaunchOne(Job &job, const LaunchHeader &h, uint8_t *params);
/** What LAUNCH_EX adds to a launch: its thread-block cluster and the cooperative attribute. */
struct LaunchExtras {
  uint32_t cluster[3];
  bool cooperative;
};
/** One launch with its extras (launchEx(), a posted LAUNCH_EX of the ring server): checked as LaunchOne, then
 * cuLaunchKernelEx. */
void LaunchOneEx(Job &job, const LaunchHeader &h, uint8_t *params, const LaunchExtras &x);

// Where a job's phase 1 runs (cuda_exec.h): always on the context thread (in
// submission order), or inline on the JS thread when the context thread is
// idle (cheap calls that never block), else queued there all the same.
// Where a job's run phase goes: kInlineWhenIdle (cheap, never blocks long) runs
// on the JS thread when the context thread is idle; kContextThread (ordered,
// may block) does so too in a process with inline calls on (SetInlineCalls);
// kContextThreadOnly never does: teardown (it waits for the waiter threads);
// posted launch batches of more than kInlineBatchLaunches, which nobody
// waits for, so the JS thread takes the next batch while the context thread
// launches this one (inline, the H100 harness's batched launch rate fell
// from 147-225k/s to 118-148k/s); launches beyond kInlineLaunchBound
// (LaunchWhere); and the long calls, module loads and graph instantiation
// (milliseconds to seconds: a thread hop is nothing beside them, and the JS
// thread keeps answering meanwhile).
enum class Where { kContextThread, kInlineWhenIdle, kContextThreadOnly };

class Context : public Napi::ObjectWrap<Context> {
 public:
  static Napi::Function Define(Napi::Env env);
  // Only openContext() makes these (it passes the core as an External).
  explicit Context(const Napi::CallbackInfo &info);
  ~Context() override;

  // The one way a call becomes a job: `run(Job &)` does the driver work in
  // phase 1 (it may set job.wait for a blocking phase 2) and returns what the
  // promise resolves with: void (undefined) or one of the res:: alternatives
  // (cuda_exec.h), which counts only if the job did not fail. `onMain` runs on
  // the JS thread before the promise settles. Public for the calls
  // (QCUDA_CONTEXT_METHOD), which are free functions; it is all they use of
  // the context.
  template <typename Run>
  Napi::Value Submit(const Napi::CallbackInfo &info, Where where, Run run,
                     std::function<void(Job &)> onMain = nullptr) {
    return Go(info.Env(), MakeJob(std::move(run), std::move(onMain)), InlineOk(where), false);
  }

  // As Submit, but a job that finishes inside this call (run on the JS
  // thread, no wait left) returns its value, or throws its error, at once:
  // no promise and no promise step, which on a session's worker is most of
  // what a short call costs beyond the driver. Otherwise a promise, as
  // Submit. For the calls of a round trip (synchronizes, queries, small
  // copies, launches); the JS side types them as a value or a promise
  // (native-cuda.ts: Now).
  template <typename Run>
  Napi::Value SubmitNow(const Napi::CallbackInfo &info, Where where, Run run,
                        std::function<void(Job &)> onMain = nullptr) {
    return Go(info.Env(), MakeJob(std::move(run), std::move(onMain)), InlineOk(where), true);
  }

  /** Where n launches (a batch of them when n > 1) go (kInlineBatchLaunches, kInlineLaunchBound). */
  Where LaunchWhere(uint32_t n) const;

  /** The context itself, for the ring server (cuda_ring_server.cc), which runs calls on it without a job's promise. */
  const std::shared_ptr<CtxCore> &core() const { return core_; }

 private:
  static bool InlineOk(Where where) {
    return where == Where::kInlineWhenIdle || (where == Where::kContextThread && InlineCalls());
  }

  template <typename Run>
  static Job *MakeJob(Run run, std::function<void(Job &)> onMain) {
    Job *j = new Job;
    if constexpr (std::is_void_v<std::invoke_result_t<Run &, Job &>>) {
      j->run = std::move(run);
    } else {
      j->run = [run = std::move(run)](Job &job) mutable {
        auto r = run(job);
        if (job.rc == cu::kSuccess) job.result = std::move(r);
      };
    }
    j->onMain = std::move(onMain);
    return j;
  }

  // Runs the job inline when allowed and idle; settles through the promise,
  // or (now) returns or throws its outcome when it finished inline.
  Napi::Value Go(Napi::Env env, Job *j, bool inlineOk, bool now);

  // Every QCUDA_CONTEXT_METHOD call: info.Data() is its ContextMethod (Define).
  Napi::Value Dispatch(const Napi::CallbackInfo &info);

  // cuda_context.cc
  Napi::Value Destroy(const Napi::CallbackInfo &info);
  Napi::Value Device(const Napi::CallbackInfo &info);
  Napi::Value Primary(const Napi::CallbackInfo &info);
  Napi::Value Busy(const Napi::CallbackInfo &info);
  Napi::Value Destroyed(const Napi::CallbackInfo &info);

  std::shared_ptr<CtxCore> core_;
};

// ---- The calls' registry. Each JS call of CudaContext is written once, in its
// cuda_ctx_*.cc file, as
//
//   QCUDA_CONTEXT_METHOD(someCall, ctx, info) {
//     uint32_t flags = ArgU32(info[0], "flags");  // arguments, on the JS thread
//     return ctx.Submit(info, Where::kContextThread, [flags](Job &job) { ... });
//   }
//
// which defines the call as a free function of the Context and the call's
// CallbackInfo and adds {"someCall", that function} to ContextMethods()
// during static initialisation; Define() makes every entry an instance method
// (through Dispatch). So adding a call touches one file, not three (a
// declaration here, a line in Define and the definition). Threading and errors
// are the call's own, as before: what it passes to Submit, what it throws.
using ContextMethodFn = Napi::Value (*)(Context &ctx, const Napi::CallbackInfo &info);
struct ContextMethod {
  const char *name;  // the JS name
  ContextMethodFn fn;
};
// The table. A function-local static, so that it exists before the first
// registration whatever order the files' static initialisers run in; complete
// (never changed again) by the time the addon's init calls Define().
std::vector<ContextMethod> &ContextMethods();
struct ContextMethodRegistration {
  ContextMethodRegistration(const char *name, ContextMethodFn fn) { ContextMethods().push_back({name, fn}); }
};

// jsName is the call's JS name as a bare identifier; ctx and info name the
// function's parameters (Context &, const Napi::CallbackInfo &).
#define QCUDA_CONTEXT_METHOD(jsName, ctx, info)                                                                \
  static Napi::Value ContextMethod_##jsName(Context &ctx, const Napi::CallbackInfo &info);                     \
  static const ContextMethodRegistration contextMethodRegistration_##jsName(#jsName, &ContextMethod_##jsName); \
  static Napi::Value ContextMethod_##jsName(Context &ctx, const Napi::CallbackInfo &info)

}  // namespace qcuda::cuda
