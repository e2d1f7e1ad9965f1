// A VM's bounds (device memory quota, staging, contexts, mapped pieces) as
// counters in shared memory, so that the processes serving one VM's
// sessions (the backend and each session's worker) take from the same
// budgets. Each budget has a total; each holder (a session) a slot that says
// what it holds of each, so that what a dead process held can be given back
// (reclaim).
//
// One lock guards it all: a 32-bit futex word holding the holder's thread
// id, and nothing else. A locker that finds it held by a thread that no
// longer exists (or by no thread at all) takes it over and recomputes the
// totals from the slots, which are always written first (take: slot, then
// total; give: slot, then total), so a half-done step counts as undone.
// It is not a pthread mutex: a robust one keeps the locking thread's list
// pointers in the shared file, which glibc writes through at unlock, so a
// process that can write the file could make the backend write where it
// chose (security review 3, N7). Here the file holds only numbers.
//
// Every process that maps the file can write it, and a session's worker runs
// code the guest chose (NVIDIA's loader and JIT on guest images): the
// ledger's integrity is defence in depth, never trusted (security review 2,
// L1). So:
//  - the file's size is sealed: no process can cut it short under the
//    others' mappings;
//  - the limits are not in the file: each process keeps its own copy, given
//    by the backend (a worker's comes in the message that hands it the
//    ledger), so no worker can lift a bound for the VM;
//  - the lock is taken with a bound (kLockTimeoutSec): a process that keeps
//    it makes takes fail, instead of freezing the backend's event loop;
//  - counts read from the file are checked where they are used: a total or
//    held value out of range (negative, or a sum that would wrap) fails the
//    take, or is clamped where the count only goes down.
#include "ledger.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "vhost-user/native/errors.h"

namespace qcuda {
namespace {

using vhost_user::ArgFd;
using vhost_user::ArgU64;
using vhost_user::ThrowErrno;
using vhost_user::ThrowRange;

// "qclf": the layout with a futex word, at offset 0 and again at 40, where the
// layout before it ("qclh", a pthread mutex first) kept its magic: neither
// version opens a file of the other.
constexpr uint32_t kMagic = 0x71636c66;
constexpr uint32_t kMaxBudgets = 8;
constexpr uint32_t kMaxSlots = 1 << 16;
// How long a step waits for the lock. Each holds it for a few counts' worth
// of work (microseconds); one still held after this is held by a process
// that stopped or means harm, and the step fails rather than wait on.
constexpr time_t kLockTimeoutSec = 1;
// The lock word: 0 when free, else the holder's thread id, with kWaiters set
// once a locker sleeps on it (the unlock then wakes them all).
constexpr uint32_t kWaiters = 1u << 31;
// Thread ids are below this (the kernel's PID_MAX_LIMIT is 2^22); a word
// naming another was written by a process that means harm: no thread holds it.
constexpr uint32_t kTidLimit = 1u << 30;
// How long a waiter sleeps before it looks again whether the holder lives.
constexpr long kWaitSliceNs = 20 * 1000 * 1000;

struct Header {
  uint32_t magic;
  uint32_t lock;
  uint32_t budgets;
  uint32_t slots;
  uint32_t reserved[6];
  uint32_t magic40;  // kMagic again, where the old layout's magic was
  uint32_t reserved2;
  int64_t total[kMaxBudgets];
};
static_assert(offsetof(Header, magic40) == 40, "the old layout's magic was at 40");

uint32_t ThisTid() { return static_cast<uint32_t>(syscall(SYS_gettid)); }

// Whether thread `tid` exists and has not exited (a thread group leader that
// exited stays a zombie until reaped: it holds nothing). Another user's
// thread, whose state cannot be read, counts as alive.
bool ThreadAlive(uint32_t tid) {
  if (tid == 0 || tid >= kTidLimit) return false;
  char path[48];
  snprintf(path, sizeof path, "/proc/%u/stat", tid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == ESRCH) return false;
    return kill(static_cast<pid_t>(tid), 0) == 0 || errno == EPERM;
  }
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;  // gone while read
  buf[n] = 0;
  const char *paren = strrchr(buf, ')');
  if (paren == nullptr || paren[1] != ' ') return true;
  const char state = paren[2];
  return state != 'Z' && state != 'X' && state != 'x';
}

long Futex(uint32_t *word, int op, uint32_t val, const timespec *timeout) {
  return syscall(SYS_futex, word, op, val, timeout, nullptr, 0);
}

struct Slot {
  int64_t held[kMaxBudgets];
};

size_t BytesFor(uint32_t slots) { return sizeof(Header) + static_cast<size_t>(slots) * sizeof(Slot); }

uint32_t ArgIndex(const Napi::CallbackInfo &info, size_t i, uint32_t below, const char *what) {
  if (info.Length() <= i || !info[i].IsNumber()) ThrowRange(info.Env(), std::string(what) + " must be a number");
  double d = info[i].As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d < below) || d != static_cast<double>(static_cast<uint32_t>(d)))
    ThrowRange(info.Env(), std::string(what) + " must be an integer below " + std::to_string(below));
  return static_cast<uint32_t>(d);
}

class Ledger : public Napi::ObjectWrap<Ledger> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "Ledger",
        {InstanceMethod("take", &Ledger::Take), InstanceMethod("give", &Ledger::Give),
         InstanceMethod("reclaim", &Ledger::Reclaim), InstanceMethod("held", &Ledger::Held),
         InstanceMethod("total", &Ledger::Total), InstanceMethod("limit", &Ledger::Limit),
         InstanceMethod("close", &Ledger::Close), InstanceMethod("lockForTest", &Ledger::LockForTest),
         InstanceAccessor("budgets", &Ledger::Budgets, nullptr), InstanceAccessor("slots", &Ledger::Slots, nullptr)});
  }

  // new Ledger(fd, limits: bigint[], slots): formats the (new, empty) file, or
  // new Ledger(fd, limits): opens one another process formatted with these
  // limits (the creator's, as it handed them over: the file does not hold
  // them). The fd stays the caller's.
  explicit Ledger(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Ledger>(info) {
    Napi::Env env = info.Env();
    int fd = ArgFd(info, 0);
    std::vector<int64_t> limits = LimitsArg(info, 1);
    bool create = info.Length() > 2;
    uint32_t budgets = static_cast<uint32_t>(limits.size()), slots = 0;
    if (create) {
      slots = ArgIndex(info, 2, kMaxSlots + 1, "slots");
      if (ftruncate(fd, static_cast<off_t>(BytesFor(slots))) != 0) ThrowErrno(env, "ftruncate", errno);
      // Its size for good: a file cut short under the mappings would make them fault (SIGBUS) here.
      if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        ThrowErrno(env, "fcntl(F_ADD_SEALS)", errno);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) ThrowErrno(env, "fstat", errno);
    if (static_cast<size_t>(st.st_size) < sizeof(Header)) ThrowRange(env, "not a ledger: too small");
    length_ = static_cast<size_t>(st.st_size);
    void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) ThrowErrno(env, "mmap", errno);
    h_ = static_cast<Header *>(p);
    if (create) {
      __atomic_store_n(&h_->lock, 0u, __ATOMIC_RELAXED);
      h_->budgets = budgets;
      h_->slots = slots;
      h_->magic40 = kMagic;
      __atomic_store_n(&h_->magic, kMagic, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&h_->magic, __ATOMIC_ACQUIRE) != kMagic || h_->magic40 != kMagic ||
               h_->budgets != budgets) {
      Unmap();
      ThrowRange(env, "not a ledger (or not one of " + std::to_string(budgets) + " budgets)");
    }
    // From the size the creator sealed, not from the header, which any process may write.
    budgets_ = budgets;
    slots_ =
        create ? slots : static_cast<uint32_t>(std::min<size_t>((length_ - sizeof(Header)) / sizeof(Slot), kMaxSlots));
    for (uint32_t b = 0; b < budgets; b++) limit_[b] = limits[b];
  }

  ~Ledger() override { Unmap(); }

 private:
  Header *h_ = nullptr;
  size_t length_ = 0;
  uint32_t budgets_ = 0, slots_ = 0;
  // This process's own copy (0: unbounded): no other process can change it.
  int64_t limit_[kMaxBudgets] = {};

  // limits: 1 to kMaxBudgets bigints from 0 to 2^63-1.
  static std::vector<int64_t> LimitsArg(const Napi::CallbackInfo &info, size_t i) {
    Napi::Env env = info.Env();
    if (info.Length() <= i || !info[i].IsArray()) ThrowRange(env, "limits must be an array of bigints");
    Napi::Array a = info[i].As<Napi::Array>();
    if (a.Length() == 0 || a.Length() > kMaxBudgets)
      ThrowRange(env, "1 to " + std::to_string(kMaxBudgets) + " budgets");
    std::vector<int64_t> out;
    for (uint32_t b = 0; b < a.Length(); b++) {
      Napi::Value v = a[b];
      bool lossless = false;
      int64_t l = v.IsBigInt() ? v.As<Napi::BigInt>().Int64Value(&lossless) : -1;
      if (!lossless || l < 0) ThrowRange(env, "each limit must be a bigint from 0 to 2^63-1");
      out.push_back(l);
    }
    return out;
  }

  void Unmap() {
    if (h_ != nullptr) munmap(h_, length_);
    h_ = nullptr;
  }

  Slot *SlotAt(uint32_t s) { return reinterpret_cast<Slot *>(reinterpret_cast<char *>(h_) + sizeof(Header)) + s; }

  void Open(Napi::Env env) {
    if (h_ == nullptr) ThrowRange(env, "the ledger is closed");
  }

  // Locks, waiting kLockTimeoutSec at most; repairs the totals if the last holder died inside.
  void Lock(Napi::Env env) {
    uint32_t *word = &h_->lock;
    const uint32_t me = ThisTid();
    timespec now, until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += kLockTimeoutSec;
    for (;;) {
      uint32_t cur = __atomic_load_n(word, __ATOMIC_ACQUIRE);
      if (cur == 0) {
        if (__atomic_compare_exchange_n(word, &cur, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) return;
        continue;
      }
      // Held by no live thread (its holder died inside, or the word was
      // forged; this thread holds nothing here, so not by it either): take it
      // over, keeping the waiters' flag so that they are woken at the unlock.
      const uint32_t holder = cur & ~kWaiters;
      if (holder == me || !ThreadAlive(holder)) {
        if (__atomic_compare_exchange_n(word, &cur, me | (cur & kWaiters), false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
          Rebuild();
          return;
        }
        continue;
      }
      clock_gettime(CLOCK_MONOTONIC, &now);
      int64_t left = (until.tv_sec - now.tv_sec) * 1000000000LL + (until.tv_nsec - now.tv_nsec);
      if (left <= 0) {
        Napi::Error e =
            Napi::Error::New(env, "the VM's ledger stayed locked for over " + std::to_string(kLockTimeoutSec) +
                                      " s (another process serving the VM holds it): nothing was counted");
        e.Set("code", Napi::String::New(env, "ETIMEDOUT"));
        throw e;
      }
      if ((cur & kWaiters) == 0 &&
          !__atomic_compare_exchange_n(word, &cur, cur | kWaiters, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        continue;
      // Bounded by the time left and by a slice, after which the holder's life is looked at again.
      int64_t ns = std::min<int64_t>(left, kWaitSliceNs);
      timespec slice{static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
      Futex(word, FUTEX_WAIT, cur | kWaiters, &slice);
    }
  }
  // Each total as the sum of what the slots hold. A held value below 0 counts
  // as 0; a sum past what a count can be stays at INT64_MAX, so that every
  // take fails (fail closed) until the slots that claim so much are reclaimed.
  void Rebuild() {
    for (uint32_t b = 0; b < budgets_; b++) {
      int64_t sum = 0;
      for (uint32_t s = 0; s < slots_; s++) {
        int64_t h = SlotAt(s)->held[b];
        if (h > 0) sum = h > INT64_MAX - sum ? INT64_MAX : sum + h;
      }
      h_->total[b] = sum;
    }
  }

  // Frees the lock, whoever the word names now (any other value was forged:
  // leaving it would only keep every process's steps waiting), and wakes the
  // waiters if there may be any.
  void Unlock() {
    uint32_t old = __atomic_exchange_n(&h_->lock, 0u, __ATOMIC_RELEASE);
    if (old != ThisTid()) Futex(&h_->lock, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // The lock for a scope: every step below reads or changes the counts only while holding it.
  class Locked {
   public:
    Locked(Ledger *l, Napi::Env env) : l_(l) { l_->Lock(env); }
    ~Locked() { l_->Unlock(); }
    Locked(const Locked &) = delete;
    Locked &operator=(const Locked &) = delete;

   private:
    Ledger *l_;
  };

  // A call's budget and slot arguments, checked against this ledger (it must be open).
  uint32_t BudgetArg(const Napi::CallbackInfo &info, size_t i) {
    Open(info.Env());
    return ArgIndex(info, i, budgets_, "budget");
  }
  uint32_t SlotArg(const Napi::CallbackInfo &info, size_t i) {
    Open(info.Env());
    return ArgIndex(info, i, slots_, "slot");
  }
  // A count to take or give: a bigint from 0 to 2^63-1.
  static int64_t CountArg(const Napi::CallbackInfo &info, size_t i) {
    return static_cast<int64_t>(ArgU64(info, i, "n", INT64_MAX));
  }

  // take(budget, slot, n): true if it fits (then slot and total count it), false if it would pass the limit.
  Napi::Value Take(const Napi::CallbackInfo &info) {
    uint32_t b = BudgetArg(info, 0), s = SlotArg(info, 1);
    int64_t n = CountArg(info, 2);
    Locked lock(this, info.Env());
    int64_t limit = limit_[b], total = h_->total[b], held = SlotAt(s)->held[b];
    // Counts out of range (written by another process) fail the take: nothing below may wrap.
    bool sane = total >= 0 && held >= 0 && held <= INT64_MAX - n;
    bool ok = sane && (limit == 0 ? total <= INT64_MAX - n : total <= limit && n <= limit - total);
    if (ok) {
      SlotAt(s)->held[b] = held + n;
      h_->total[b] = total + n;
    }
    return Napi::Boolean::New(info.Env(), ok);
  }

  // give(budget, slot, n): false (and nothing changes) if the slot holds less than n.
  Napi::Value Give(const Napi::CallbackInfo &info) {
    uint32_t b = BudgetArg(info, 0), s = SlotArg(info, 1);
    int64_t n = CountArg(info, 2);
    Locked lock(this, info.Env());
    bool ok = SlotAt(s)->held[b] >= n;
    if (ok) {
      SlotAt(s)->held[b] -= n;
      h_->total[b] = TotalLess(b, n);
    }
    return Napi::Boolean::New(info.Env(), ok);
  }

  // reclaim(slot): gives back everything the slot holds (its holder is gone).
  Napi::Value Reclaim(const Napi::CallbackInfo &info) {
    uint32_t s = SlotArg(info, 0);
    Locked lock(this, info.Env());
    for (uint32_t b = 0; b < budgets_; b++) {
      int64_t n = SlotAt(s)->held[b];
      SlotAt(s)->held[b] = 0;
      if (n > 0) h_->total[b] = TotalLess(b, n);
    }
    return info.Env().Undefined();
  }

  // The total of budget b less n (0 <= n), never below 0: a slot that says it
  // holds more than the total was written by another process, and what it
  // gives back cannot make room the others did not leave.
  int64_t TotalLess(uint32_t b, int64_t n) {
    int64_t t = h_->total[b];
    return t > n ? t - n : 0;
  }

  Napi::Value Held(const Napi::CallbackInfo &info) {
    uint32_t b = BudgetArg(info, 0), s = SlotArg(info, 1);
    Locked lock(this, info.Env());
    return Napi::BigInt::New(info.Env(), SlotAt(s)->held[b]);
  }

  Napi::Value Total(const Napi::CallbackInfo &info) {
    uint32_t b = BudgetArg(info, 0);
    Locked lock(this, info.Env());
    return Napi::BigInt::New(info.Env(), h_->total[b]);
  }

  Napi::Value Limit(const Napi::CallbackInfo &info) {
    return Napi::BigInt::New(info.Env(), limit_[BudgetArg(info, 0)]);
  }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    Unmap();
    return info.Env().Undefined();
  }

  // Takes the lock and keeps it: a process that then exits leaves it to be taken over (tests).
  Napi::Value LockForTest(const Napi::CallbackInfo &info) {
    Open(info.Env());
    Lock(info.Env());
    return info.Env().Undefined();
  }

  Napi::Value Budgets(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), budgets_); }
  Napi::Value Slots(const Napi::CallbackInfo &info) { return Napi::Number::New(info.Env(), slots_); }
};

}  // namespace

void InitLedger(Napi::Env env, Napi::Object exports) { exports.Set("Ledger", Ledger::Define(env)); }

}  // namespace qcuda
