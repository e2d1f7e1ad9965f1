// A VM's bounds (device memory quota, staging, contexts, mapped pieces) as
// counters in shared memory, so that the processes serving one VM's
// sessions (the backend and each session's worker) take from the same
// budgets. Each budget has a limit and a total; each holder (a session) a
// slot that says what it holds of each, so that what a dead process held
// can be given back (reclaim).
//
// One robust, process-shared mutex guards it all. A process that dies inside
// it leaves the next locker EOWNERDEAD: the totals are then recomputed from
// the slots, which are always written first (take: slot, then total; give:
// slot, then total), so a half-done step counts as undone.
#include "ledger.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "errors.h"

namespace qcuda {
namespace {

constexpr uint32_t kMagic = 0x71636c67;  // "qclg"
constexpr uint32_t kMaxBudgets = 8;
constexpr uint32_t kMaxSlots = 1 << 16;

struct Header {
  pthread_mutex_t mu;
  uint32_t magic;
  uint32_t budgets;
  uint32_t slots;
  uint32_t reserved;
  int64_t limit[kMaxBudgets];  // 0: unbounded
  int64_t total[kMaxBudgets];
};

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
    return DefineClass(env, "Ledger",
                       {InstanceMethod("take", &Ledger::Take), InstanceMethod("give", &Ledger::Give),
                        InstanceMethod("reclaim", &Ledger::Reclaim), InstanceMethod("held", &Ledger::Held),
                        InstanceMethod("total", &Ledger::Total), InstanceMethod("limit", &Ledger::Limit),
                        InstanceMethod("close", &Ledger::Close), InstanceMethod("lockForTest", &Ledger::LockForTest),
                        InstanceAccessor("budgets", &Ledger::Budgets, nullptr),
                        InstanceAccessor("slots", &Ledger::Slots, nullptr)});
  }

  // new Ledger(fd, limits: bigint[], slots): formats the (new, empty) file, or
  // new Ledger(fd): opens one another process formatted. The fd stays the caller's.
  explicit Ledger(const Napi::CallbackInfo &info) : Napi::ObjectWrap<Ledger>(info) {
    Napi::Env env = info.Env();
    int fd = ArgFd(info, 0);
    bool create = info.Length() > 1;
    uint32_t budgets = 0, slots = 0;
    if (create) {
      if (!info[1].IsArray()) ThrowRange(env, "limits must be an array of bigints");
      Napi::Array limits = info[1].As<Napi::Array>();
      budgets = limits.Length();
      if (budgets == 0 || budgets > kMaxBudgets) ThrowRange(env, "1 to " + std::to_string(kMaxBudgets) + " budgets");
      slots = ArgIndex(info, 2, kMaxSlots + 1, "slots");
      if (ftruncate(fd, static_cast<off_t>(BytesFor(slots))) != 0) ThrowErrno(env, "ftruncate", errno);
    }
    struct stat st;
    if (fstat(fd, &st) != 0) ThrowErrno(env, "fstat", errno);
    if (static_cast<size_t>(st.st_size) < sizeof(Header)) ThrowRange(env, "not a ledger: too small");
    length_ = static_cast<size_t>(st.st_size);
    void *p = mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) ThrowErrno(env, "mmap", errno);
    h_ = static_cast<Header *>(p);
    if (create) {
      Napi::Array limits = info[1].As<Napi::Array>();
      pthread_mutexattr_t a;
      pthread_mutexattr_init(&a);
      pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
      pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
      pthread_mutex_init(&h_->mu, &a);
      pthread_mutexattr_destroy(&a);
      h_->budgets = budgets;
      h_->slots = slots;
      for (uint32_t b = 0; b < budgets; b++) {
        Napi::Value v = limits[b];
        bool lossless = false;
        int64_t l = v.IsBigInt() ? v.As<Napi::BigInt>().Int64Value(&lossless) : -1;
        if (!lossless || l < 0) {
          Unmap();
          ThrowRange(env, "each limit must be a bigint from 0 to 2^63-1");
        }
        h_->limit[b] = l;
      }
      __atomic_store_n(&h_->magic, kMagic, __ATOMIC_RELEASE);
    } else if (__atomic_load_n(&h_->magic, __ATOMIC_ACQUIRE) != kMagic || h_->budgets == 0 || h_->budgets > kMaxBudgets ||
               h_->slots > kMaxSlots || BytesFor(h_->slots) > length_) {
      Unmap();
      ThrowRange(env, "not a ledger");
    }
    // Read once: another process may write the header, never these two.
    budgets_ = h_->budgets;
    slots_ = h_->slots;
  }

  ~Ledger() override { Unmap(); }

 private:
  Header *h_ = nullptr;
  size_t length_ = 0;
  uint32_t budgets_ = 0, slots_ = 0;

  void Unmap() {
    if (h_ != nullptr) munmap(h_, length_);
    h_ = nullptr;
  }

  Slot *SlotAt(uint32_t s) { return reinterpret_cast<Slot *>(reinterpret_cast<char *>(h_) + sizeof(Header)) + s; }

  void Open(Napi::Env env) {
    if (h_ == nullptr) ThrowRange(env, "the ledger is closed");
  }

  // Locks; repairs the totals if the last holder died inside.
  void Lock(Napi::Env env) {
    int r = pthread_mutex_lock(&h_->mu);
    if (r == EOWNERDEAD) {
      for (uint32_t b = 0; b < budgets_; b++) {
        int64_t sum = 0;
        for (uint32_t s = 0; s < slots_; s++) sum += SlotAt(s)->held[b];
        h_->total[b] = sum;
      }
      pthread_mutex_consistent(&h_->mu);
    } else if (r != 0) {
      ThrowErrno(env, "pthread_mutex_lock", r);
    }
  }

  void Unlock() { pthread_mutex_unlock(&h_->mu); }

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
    int64_t limit = h_->limit[b], total = h_->total[b];
    bool ok = limit == 0 ? total <= INT64_MAX - n : total <= limit && n <= limit - total;
    if (ok) {
      SlotAt(s)->held[b] += n;
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
      h_->total[b] -= n;
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
      h_->total[b] -= n;
    }
    return info.Env().Undefined();
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
    return Napi::BigInt::New(info.Env(), h_->limit[BudgetArg(info, 0)]);
  }

  Napi::Value Close(const Napi::CallbackInfo &info) {
    Unmap();
    return info.Env().Undefined();
  }

  // Takes the lock and keeps it: a process that then exits leaves the next locker EOWNERDEAD (tests).
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
