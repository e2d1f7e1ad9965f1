// The hot waiter (cuda_exec.h: WaitHot): one thread per process that, while
// the process's short waits keep coming, spins ready to run the next one.
//
// Why: a wait polled on the JS thread (PollInline: cuStreamQuery until the
// work is done, then the synchronize that reports errors and flushes device
// printf) pays the driver's synchronize after the work has ended, 1.3-1.9 us
// (test/gpu/driver_costs.cu: launch_query_ctxsync against launch_ctxsync,
// H100 and H200, driver 580), on every launch + synchronize. Blocking in the
// synchronize from the start costs nothing beyond the work, but on the JS
// thread it could block for as long as a kernel runs, holding up the guest
// process's other threads' calls (which natively go on), and a kernel that
// waits for one of those would never end. A thread woken for each wait
// starts 5-60 us late on the GPU machine. So this thread stays awake
// (spinning) for kHotWindowNs after each wait handed to it: the JS thread
// hands the wait over and spins on its state for the inline-wait budget, as
// PollInline would; the wait blocks in the driver here. If it has not
// finished by then, it goes on here as a waiter thread's wait does (its
// promise settles when it is done) and the JS thread goes back to its queue.
// A process whose waits stop lets the thread sleep again: an idle worker
// costs no CPU.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cuda_exec.h"

namespace qcuda::cuda {
namespace {

// How long the thread spins after the last wait handed to it (or offered
// while it slept) before it sleeps. A busy session's next wait comes within
// microseconds; this bounds what a session that stopped costs: one core for
// this long.
constexpr int64_t kHotWindowNs = 200 * 1000;

// A handed wait's state. The JS thread hands (kIdle -> kHanded) and may
// withdraw one not yet taken (kHanded -> kIdle) or give up on one running
// (kRunning -> kAbandoned); the waiter takes (kHanded -> kRunning) and
// finishes (kRunning -> kDone, which the JS thread takes back to kIdle; or,
// abandoned, posts the job as a waiter thread would and goes back to kIdle).
enum State : int { kIdle, kHanded, kRunning, kDone, kAbandoned };

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline void Relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

struct HotWaiter {
  std::atomic<int> state{kIdle};
  Job *job = nullptr;  // written before kHanded is stored, read after it is seen
  std::atomic<int64_t> hotUntil{0};
  std::atomic<bool> asleep{false};
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;  // JS thread only
  std::atomic<uint64_t> done{0}, handedOn{0}, missed{0};

  void Loop() {
    for (;;) {
      while (NowNs() < hotUntil) {
        int handed = kHanded;
        if (state.load(std::memory_order_acquire) == kHanded && state.compare_exchange_strong(handed, kRunning)) Run();
        Relax();
      }
      std::unique_lock<std::mutex> lk(mu);
      asleep = true;
      // A wait offered after the spin ended but before asleep was set saw it
      // false and did not wake this thread: its hotUntil is seen here.
      if (NowNs() < hotUntil) {
        asleep = false;
        continue;
      }
      cv.wait(lk, [&] { return NowNs() < hotUntil; });
      asleep = false;
    }
  }

  void Run() {
    Job *j = job;
    std::shared_ptr<CtxCore> ctx = j->ctx;  // j may be settled and gone as soon as kDone is stored
    if (ctx && ctx->ctx != nullptr) cu::api().CtxSetCurrent(ctx->ctx);
    j->wait(*j);
    j->wait = nullptr;  // drops what the wait held (events) before the context may go
    int running = kRunning;
    if (!state.compare_exchange_strong(running, kDone)) {
      // Abandoned: the JS thread gave it a promise; finish it as a waiter thread does.
      j->env->Post(j);
      if (ctx) ctx->WaitDone();
      state.store(kIdle, std::memory_order_release);
    }
    hotUntil = NowNs() + kHotWindowNs;
  }
};

std::atomic<bool> g_on{false};

HotWaiter &Hot() {
  static HotWaiter *h = new HotWaiter;  // leaked: its detached thread uses it until the process ends
  return *h;
}

}  // namespace

void SetHotWaiter(bool on) { g_on = on; }

HotWait WaitHot(Job *j, int64_t budgetNs) {
  if (!g_on.load(std::memory_order_relaxed) || budgetNs <= 0 || !j->ctx) return HotWait::kNotTaken;
  HotWaiter &h = Hot();
  const int64_t now = NowNs();
  h.hotUntil = now + kHotWindowNs;  // before asleep is read (see Loop)
  if (!h.started) {
    h.missed++;
    try {
      std::thread([&h] { h.Loop(); }).detach();  // spinning from now on, for the next wait
      h.started = true;
    } catch (const std::exception &) {
    }
    return HotWait::kNotTaken;  // polled here, as without it
  }
  if (h.asleep) {
    // Woken for the next wait; this one is polled here.
    std::lock_guard<std::mutex> lk(h.mu);
    h.cv.notify_one();
    h.missed++;
    return HotWait::kNotTaken;
  }
  if (h.state.load(std::memory_order_acquire) != kIdle) {
    h.missed++;  // still on an abandoned one
    return HotWait::kNotTaken;
  }
  {
    std::lock_guard<std::mutex> lk(j->ctx->wmu);
    j->ctx->waiting++;  // as a waiter thread's wait: the context's teardown waits for it
  }
  h.job = j;
  h.state.store(kHanded, std::memory_order_release);
  const int64_t end = now + budgetNs;
  while (h.state.load(std::memory_order_acquire) != kDone && NowNs() < end) Relax();
  int s = kHanded;
  if (h.state.compare_exchange_strong(s, kIdle)) {
    j->ctx->WaitDone();  // never taken: the caller goes on as before
    h.missed++;
    return HotWait::kNotTaken;
  }
  if (s == kRunning && h.state.compare_exchange_strong(s, kAbandoned)) {
    h.handedOn++;
    return HotWait::kRunsOn;
  }
  // kDone (now, or between the spin and the exchange): the wait has run.
  h.state.store(kIdle, std::memory_order_release);
  j->ctx->WaitDone();
  h.done++;
  return HotWait::kDone;
}

HotWaiterStats GetHotWaiterStats() {
  HotWaiter &h = Hot();
  HotWaiterStats s;
  s.done = h.done, s.handedOn = h.handedOn, s.missed = h.missed;
  return s;
}

}  // namespace qcuda::cuda
