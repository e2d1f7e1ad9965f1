// How the CUDA work of one context runs without blocking Node's event loop.
//
// Every request becomes a Job with up to two phases:
//  - run:  the ordered part (allocation, enqueueing copies/memsets, recording
//          an event, creating or destroying a handle). Each context has ONE
//          thread that runs these in submission order with the context
//          current, so work enqueued on a stream keeps the order in which the
//          guest asked for it. When that thread has nothing queued or running,
//          cheap non-blocking jobs (async enqueues from pinned memory, event
//          record, queries) run inline on the JS thread instead, which keeps
//          the order too: nothing earlier is still waiting to be enqueued.
//  - wait: optional, the blocking part (event/stream/context synchronize). It
//          runs on a shared pool of waiter threads, after its run phase, so it
//          waits for everything enqueued before it, and the context thread
//          goes on enqueueing meanwhile. The pool grows on demand (one blocked
//          wait does not hold up another) up to a limit per process
//          (kDefaultWaiterLimit, SetWaiterLimit); past it, waits queue for the
//          next free thread. Queueing cannot deadlock: a wait only waits for
//          work already on the GPU, and the backend never enqueues work that
//          depends on a guest host function (it holds it back until the guest
//          says the function returned), so every running wait ends without
//          help from a queued one. It can delay: with the limit reached, a
//          wait queues behind the running ones (a long kernel's, say). When a
//          thread cannot be created (std::system_error: thread or memory
//          limits), the pool goes on with the threads it has; with none at
//          all, the waits fail with CUDA_ERROR_OPERATING_SYSTEM
//          (cudaErrorOperatingSystem) instead of the process ending.
// A finished job goes back to the JS thread through one uv_async per Node
// environment, which settles the job's promise inside a callback scope.
#pragma once
#include <napi.h>
#include <uv.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "cuda_api.h"
#include "given.h"

namespace qcuda::cuda {

struct CtxCore;
struct EnvState;

// What probe() and probeAsync() return: the driver's availability, and why not.
Napi::Value ProbeValue(Napi::Env env);

// What a job resolves its promise with: one alternative per kind of result,
// each turned into its JS value in one place (MakeValue, cuda_exec.cc).
namespace res {
struct None {};  // undefined
struct Big {
  uint64_t v = 0;
};  // bigint
struct Num {
  double v = 0;
};  // number
struct Flag {
  bool v = false;
};  // boolean
struct MemInfo {
  uint64_t free = 0, total = 0;
};  // {free, total} (bigints)
struct Object {
  napi_ref ref = nullptr;
};                // an object made on the JS thread at submit (its ref goes with the job)
struct Probe {};  // ProbeValue()
struct Param {
  uint64_t offset = 0, size = 0;
};
struct Func {
  uint32_t id = 0;
  std::vector<Param> params;
  uint64_t localBytes = 0;
};  // {id, params: [{offset, size}], localBytes}
struct Var {
  uint64_t dptr = 0, size = 0;
};  // {dptr, size} (bigints)
struct Module {
  uint32_t id = 0;
  uint64_t bytes = 0;
};  // {id, bytes}: bytes = the device memory the load took
struct Ints {
  std::vector<int32_t> v;
};  // Int32Array
struct Bytes {
  std::vector<uint8_t> v;
};  // Uint8Array
struct Named {
  std::vector<std::pair<const char *, double>> fields;
};  // {name: number, ...}: a driver call's results by the out struct's field names (cuda_ctx_calls.cc)
}  // namespace res
using Value = std::variant<res::None, res::Big, res::Num, res::Flag, res::MemInfo, res::Object, res::Probe, res::Func,
                           res::Var, res::Module, res::Ints, res::Bytes, res::Named>;

/** Where a job settled on the JS thread inside the call that made it puts its outcome (Context::SubmitNow). */
struct Settled {
  bool done = false;
  bool ok = false;
  napi_value value = nullptr;  // the result, or the error to throw
};

struct Job {
  EnvState *env = nullptr;
  napi_deferred deferred = nullptr;  // JS thread only; null = nobody waits for the result
  // A call that returns its outcome at once when it can (SubmitNow): the
  // promise is made (into *promise) only once the job turns out to need one
  // (MakePromise: it is queued or leaves a wait); a job that finishes inline
  // settles into *now instead. Both point into the calling native frame and
  // are used only on the JS thread before that call returns.
  napi_value *promise = nullptr;
  Settled *now = nullptr;
  std::shared_ptr<CtxCore> ctx;     // null for jobs that need no context
  std::function<void(Job &)> run;   // phase 1 (ordered)
  std::function<void(Job &)> wait;  // phase 2 (waiter pool); run may set it
  // Optional with wait: whether wait would return at once (non-blocking). A
  // job run on the JS thread polls it for a while before handing wait to the
  // pool (SetInlineWait): a short wait then costs no thread hop at all.
  std::function<bool()> ready;
  // False: ready() may only be polled right after the run phase, on the
  // thread that ran it (it uses handles a later job may free), so the wait
  // is never parked for later polling.
  bool readyLater = true;
  // Optional with wait: run on the thread that ran the job, right after the
  // run (and any inline poll), just before wait goes to the pool or is
  // parked; nothing later is queued yet. It lets a wait whose ready was good
  // only right after the run (readyLater false) go on from here: it may
  // record what marks the same work (an event) and set ready and readyLater
  // for that.
  std::function<void(Job &)> handOff;
  std::function<void(Job &)> onMain;  // JS thread, before the promise settles
  bool exitThread = false;            // the context thread ends after this job

  // Outcome.
  cu::Result rc = cu::kSuccess;
  std::string call;    // the driver call (or qcuda check) that failed
  Value result;        // what the promise resolves with (when rc is kSuccess)
  int64_t index = -1;  // batches: which item failed first (set on the error as `index`)

  void Fail(cu::Result r, std::string c) {
    if (rc != cu::kSuccess) return;  // the first failure is the one reported
    rc = r;
    call = std::move(c);
  }
  bool Check(cu::Result r, const char *c) {
    if (r != cu::kSuccess) Fail(r, c);
    return r == cu::kSuccess;
  }
};

/** Pageable bytes a copy may have and still run on the JS thread (the ring server's, or inline): the
 *  driver stages this much at once, so the call does not wait for the copy engine for long. */
constexpr uint64_t kMaxInlinePageableCopy = 64 * 1024;

// One per Node environment; never freed (threads may post to it while the
// environment goes away: then their jobs are dropped).
struct EnvState {
  napi_env env = nullptr;
  uv_async_t async{};
  std::mutex mu;
  std::deque<Job *> done;
  bool alive = true;
  // JS thread only:
  int pending = 0;  // jobs whose promise is not settled yet
  napi_async_context asyncCtx = nullptr;
  napi_ref errorFactory = nullptr;
  napi_ref contextCtor = nullptr;
  /** Registered (pinned) host ranges: start -> length. Decides which copies may be enqueued inline. */
  std::map<uint64_t, uint64_t> pinned;
  /** Guest RAM that sessions mapped for the GPU: copies from it go through its registered alias. */
  GivenRanges given;
  /** Polled waits (PollParked): while the JS thread polls, waits begun on it are parked here, not
   *  handed to a waiter thread, and the JS thread settles them as they become ready. */
  bool parking = false;
  std::vector<Job *> parked;
  uint64_t parkedDone = 0, parkedHandedOn = 0;

  bool IsPinned(uint64_t addr, uint64_t len) const;
  /** From any thread: hand a finished job back to the JS thread. */
  void Post(Job *j);
  /** JS thread: count a job that will come back through Post. */
  void AddPending();
  /** JS thread: settle a job's promise (creates the value/error) and delete the job. */
  void Settle(Job *j);
  /** JS thread, while the call that made j runs: gives j the promise it now needs (a SubmitNow job that will not finish
   * inline). */
  void MakePromise(Job *j);
  void Drain();
  /**
   * JS thread, once a turn of its poll loop: settles the parked waits that are
   * ready and returns how many. The first call starts parking; a call with
   * stop set (the loop's last turn) that settles none hands what is left to
   * the waiter pool and stops parking, so no wait outlives the polling.
   */
  int PollParked(bool stop);
};

EnvState *InitEnv(napi_env env);

// Shared pool of threads for the blocking phase (one per process, all contexts and environments).
/** Waiter threads a process may have unless told otherwise (qcuda-backend --waiter-threads). */
constexpr int kDefaultWaiterLimit = 64;
/** The largest limit SetWaiterLimit takes. */
constexpr int kMaxWaiterLimit = 4096;
// A launch blocks in the driver while the GPU's launch queue is full: on the
// JS thread that would keep a session's worker from its queue (its
// SESSION_CLOSE included) for as long as the GPU stays busy, a kernel that
// never ends included. So a launch runs there only while the launches not
// yet seen done (CtxCore::launchesRun - launchesDone) stay below this
// bound, far below the queue's depth (driver_costs.cu measures it: on the
// H100 and the H200, driver 580, 1021 null launches queue behind a running
// kernel before one blocks, 722 with 4 KiB of parameters).
constexpr uint64_t kInlineLaunchBound = 256;
// Posted batches of up to this many launches run on the JS thread when it
// may (a launch + synchronize then takes no thread hop); longer ones go to
// the context thread, so the JS thread reads the next batch meanwhile.
constexpr uint32_t kInlineBatchLaunches = 8;
/** Queues j's wait phase (j->wait set); from any thread. j comes back through j->env->Post. */
void SubmitWait(Job *j);
/** 1..kMaxWaiterLimit. Lowering it ends idle threads above it at once, busy ones once their wait is done. */
void SetWaiterLimit(int n);
struct WaiterStats {
  int threads = 0;  // waiter threads now (those being started included)
  int limit = 0;
  int peak = 0;                // the most there have been at once
  size_t queued = 0;           // waits not yet taken by a thread
  uint64_t spawnFailures = 0;  // thread creations that failed
};
WaiterStats GetWaiterStats();
/**
 * How long a job run on the JS thread polls its ready() before its wait goes
 * to the pool (0, the default: never). Polling, not blocking in the driver:
 * a synchronize made after the work is done costs 1.3-1.9 us more than one
 * already waiting when it ends (test/gpu/driver_costs.cu, H200: launch +
 * synchronize 8.3-9.3 us, with a polling loop first 9.6-11.1), but a JS
 * thread blocked in the driver would hold up its guest process's other
 * threads' calls, and could take its session's SESSION_CLOSE only by being
 * killed (the backend kills a worker that takes nothing while its close
 * waits: qcuda/virtio-device.ts). A waiter thread kept spinning while the session
 * is busy, blocking in the driver while the JS thread spun on it, was tried
 * (6787b8f, reverted): on the H100 the two hand-overs between cores cost
 * what the driver's cheaper wait saved, and a 4 B copy got slower (docs/latency.md,
 * call latency). For a process whose JS thread serves
 * one guest process (a session's worker), where blocking it briefly is what
 * a native program's thread does; not for a backend serving many.
 */
void SetInlineWait(int64_t ns);
/**
 * Whether ordered calls (allocations, launches, handle changes: Where::
 * kContextThread) run on the JS thread too when the context thread is idle,
 * as the cheap ones always do (false, the default: they go to the context
 * thread). For the same processes as SetInlineWait: a call then costs no
 * thread hop, and its caller blocks in the driver as a native thread would.
 */
void SetInlineCalls(bool on);
bool InlineCalls();
struct InlineWaitStats {
  uint64_t done = 0;      // waits that ended while polled on the JS thread
  uint64_t handedOn = 0;  // waits still running after the poll, handed to the pool
  uint64_t pollNs = 0;    // time spent polling, all waits
  uint64_t runs = 0;      // jobs whose run phase ran on the JS thread
};
InlineWaitStats GetInlineWaitStats();
/** The inline wait SetInlineWait set, in ns (how long a short wait may be polled on the JS thread). */
int64_t InlineWaitNs();
/** Polls j.ready (once at least) for up to ns; true once it says the wait would return at once, false if it has none.
 */
bool PollReady(const Job &j, int64_t ns);
int WaiterThreads();

struct Ev {
  cu::Event ev = nullptr;
  cu::Ctx ctx = nullptr;
  ~Ev();
};

struct CtxCore : std::enable_shared_from_this<CtxCore> {
  EnvState *env = nullptr;
  int ordinal = 0;
  unsigned flags = 0;
  bool primary = false;
  cu::Device dev = 0;
  cu::Ctx ctx = nullptr;

  // The ordered queue and its thread.
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Job *> q;
  int busy = 0;          // queued + running on the context thread
  bool dead = false;     // the context thread has ended
  bool closing = false;  // JS thread: destroy() was called; no more jobs are accepted

  // Waits in flight (destroy waits for them to end before the context goes).
  std::mutex wmu;
  std::condition_variable wcv;
  int waiting = 0;

  // Handles: touched only by whoever runs phase 1 (the context thread, or the
  // JS thread while the context thread is idle).
  uint32_t nextId = 1;
  std::unordered_map<uint32_t, cu::Stream> streams;
  std::unordered_map<uint32_t, std::shared_ptr<Ev>> events;
  std::unordered_map<uint32_t, cu::Module> modules;
  std::unordered_map<uint32_t, cu::Array> arrays;  // cuda_ctx_arrays.cc (freed with the context)
  struct Mip {
    cu::Mipmap m;
    std::unordered_map<unsigned, uint32_t> levels;  // level -> its id in arrays
  };
  std::unordered_map<uint32_t, Mip> mipmaps;
  std::unordered_map<uint32_t, cu::Graph> graphs;  // cuda_ctx_graphs.cc
  std::unordered_map<uint32_t, cu::GraphExec> graphExecs;
  // Virtual memory management (cuda_ctx_vmm.cc): not the context's, so freed
  // by its teardown (mappings, then allocations, then reservations).
  std::unordered_map<uint32_t, cu::MemHandle> vmmAllocs;
  std::map<cu::Ptr, size_t> vmmRanges, vmmMaps;
  struct Fn {
    cu::Function fn;
    uint32_t module;
    uint64_t paramBytes;
    // Each parameter's offset in the packed block: cuLaunchCooperativeKernel takes
    // one pointer per parameter, not the packed buffer cuLaunchKernel takes.
    std::vector<uint32_t> offsets;
    // CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: a launch needing more per thread than the context holds grows its
    // reservation for every resident thread (the ring server leaves such a launch to JavaScript, which counts it).
    uint64_t localBytes;
  };
  std::unordered_map<uint32_t, Fn> functions;

  // Launches (kernels and graphs) enqueued, counted by whoever runs phase 1
  // (so in submission order), and how many of them a finished wait has seen
  // done: a context synchronize, or a wait for the NULL stream where the
  // context has no other stream. What kInlineLaunchBound is checked against
  // (Context::LaunchWhere, on the JS thread while the context thread is idle,
  // when every launch submitted has been counted).
  std::atomic<uint64_t> launchesRun{0};
  std::atomic<uint64_t> launchesDone{0};
  /** Phase 1 of a wait that, once it has finished, proves every launch enqueued so far done: the mark to give
   * LaunchesDone. */
  uint64_t LaunchMark() const { return launchesRun.load(); }
  /** Such a wait (its mark) has finished. From any thread. */
  void LaunchesDone(uint64_t mark);

  // Internal completion events (timing disabled), reused.
  std::mutex pmu;
  std::vector<cu::Event> pool;

  /** Starts the context thread; false (and the core refuses every job) when it cannot be created. */
  bool Start(std::string *why);
  enum class SubmitResult { kInline, kQueued, kRefused };
  /** JS thread: run now (inlineOk and the context thread idle), or queue on the
   *  context thread; kRefused once the context thread has ended (j untouched). */
  SubmitResult Submit(Job *j, bool inlineOk);
  /** Phase 1 done (on whichever thread ran it): move on to the wait phase or post the result. */
  void AfterRun(Job *j, bool onJsThread);
  void WaitDone();
  /** Phase 1 helpers. */
  bool LookupStream(Job &j, uint32_t id, cu::Stream *out);
  std::shared_ptr<Ev> LookupEvent(Job &j, uint32_t id);
  bool LookupModule(Job &j, uint32_t id, cu::Module *out);
  const Fn *LookupFunction(Job &j, uint32_t id);
  cu::Event AcquireEvent(Job &j);
  void ReleaseEvent(cu::Event e);
  /** Phase 1 of destroy: waits for the waits, frees every handle, destroys the context. */
  void Teardown(Job &j);
  /** Teardown's part: unmaps, releases and frees what virtual memory management holds (cuda_ctx_vmm.cc). */
  void FreeVmm();

 private:
  void Loop();
};

}  // namespace qcuda::cuda
