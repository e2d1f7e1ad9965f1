// A shared mapping of a file that another process can cut short (the GPU
// share table: any process of the backends' user, a compromised worker
// included, can truncate it) faults its next access past the new end with
// SIGBUS, which ends the process: every VM of that GPU at once (security
// review 3, N6). The table is read and written in place by JavaScript
// (BigInt64Array) and by the ring server in C, so no access can check first.
// Instead this process's SIGBUS handler looks at the faulting address: inside
// a guarded mapping, it puts zeroed private memory over the whole mapping
// (same address, same length: every view stays valid), counts it, and
// returns, so the access is made again on memory of this process's own. The
// table then reads as empty: no VM in it, so the process admits its work as
// it would without shares. A fault anywhere else goes to the handler that
// was there before (the default: the process ends, as before).
#include "sigbus_guard.h"

#include <signal.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>

#include "vhost-user/native/errors.h"

namespace qcuda {
namespace {

using vhost_user::ThrowErrno;
using vhost_user::ThrowRange;

constexpr int kMaxGuarded = 16;

struct Range {
  uintptr_t start;  // 0: free
  size_t length;
};

Range g_ranges[kMaxGuarded];
uint32_t g_caught = 0;
struct sigaction g_previous;
bool g_installed = false;

void OnSigbus(int sig, siginfo_t *info, void *context) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Range &r : g_ranges) {
    const uintptr_t start = __atomic_load_n(&r.start, __ATOMIC_ACQUIRE);
    const size_t length = __atomic_load_n(&r.length, __ATOMIC_ACQUIRE);
    if (start == 0 || at < start || at - start >= length) continue;
    void *p = mmap(reinterpret_cast<void *>(start), length, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED) {
      __atomic_fetch_add(&g_caught, 1u, __ATOMIC_RELAXED);
      return;
    }
    break;
  }
  // Not ours (or it could not be replaced): as the handler before would have it.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction != nullptr) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  // The default action: restore it and return, so that the fault comes again and ends the process.
  signal(SIGBUS, SIG_DFL);
}

void Install(Napi::Env env) {
  if (g_installed) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGBUS, &sa, &g_previous) != 0) ThrowErrno(env, "sigaction(SIGBUS)", errno);
  g_installed = true;
}

uintptr_t AddressArg(const Napi::CallbackInfo &info) {
  bool lossless = false;
  uint64_t a = info.Length() > 0 && info[0].IsBigInt() ? info[0].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
  if (!lossless || a == 0) ThrowRange(info.Env(), "address must be a bigint other than 0");
  return static_cast<uintptr_t>(a);
}

// guardMapping(address: bigint, length): a SIGBUS inside [address, address+length) replaces the range with zeroed
// private memory.
Napi::Value Guard(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  const uintptr_t start = AddressArg(info);
  if (info.Length() < 2 || !info[1].IsNumber()) ThrowRange(env, "length must be a number");
  const double len = info[1].As<Napi::Number>().DoubleValue();
  if (!(len > 0 && len < 1e15)) ThrowRange(env, "length must be positive");
  Install(env);
  for (Range &r : g_ranges) {
    if (__atomic_load_n(&r.start, __ATOMIC_ACQUIRE) != 0) continue;
    __atomic_store_n(&r.length, static_cast<size_t>(len), __ATOMIC_RELEASE);
    __atomic_store_n(&r.start, start, __ATOMIC_RELEASE);
    return env.Undefined();
  }
  ThrowRange(env, "no more than 16 guarded mappings");
}

// unguardMapping(address: bigint): before the mapping is unmapped.
Napi::Value Unguard(const Napi::CallbackInfo &info) {
  const uintptr_t start = AddressArg(info);
  for (Range &r : g_ranges)
    if (__atomic_load_n(&r.start, __ATOMIC_ACQUIRE) == start)
      __atomic_store_n(&r.start, uintptr_t{0}, __ATOMIC_RELEASE);
  return info.Env().Undefined();
}

// sigbusCaught(): how many faults the guard turned into private memory.
Napi::Value Caught(const Napi::CallbackInfo &info) {
  return Napi::Number::New(info.Env(), __atomic_load_n(&g_caught, __ATOMIC_RELAXED));
}

}  // namespace

void InitSigbusGuard(Napi::Env env, Napi::Object exports) {
  exports.Set("guardMapping", Napi::Function::New(env, Guard));
  exports.Set("unguardMapping", Napi::Function::New(env, Unguard));
  exports.Set("sigbusCaught", Napi::Function::New(env, Caught));
}

}  // namespace qcuda
