// A guest driver's synchronous calls, in C, for the benchmarks (test/bench):
// the harness's rings are guest memory mapped in its process, and its
// JavaScript costs several microseconds a call on each side of the ring,
// where the guest's kernel driver costs well under one. This loop posts a
// step of prepared descriptor chains (one call each, a launch then a
// synchronize, say) again and again as the driver does (avail entry,
// avail->idx with release order, a kick only where the device asks for one:
// EVENT_IDX or the NO_NOTIFY flag) and spins on used->idx for each answer
// before the next call (interrupts left suppressed: used_event is not
// moved), so a benchmark can tell the device's cost from the harness's.
#include "ring_loop.h"

#include <time.h>
#include <cerrno>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"
#include "split_ring.h"
#include "typed_view.h"

namespace vhost_user {
namespace {

uint64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

template <typename T>
T *ViewOf(const Napi::CallbackInfo &info, size_t i, size_t atLeast, const char *what) {
  return TypedView<T>(info.Length() > i ? info[i] : info.Env().Undefined(), atLeast, what);
}

// ringLoop(avail: Uint16Array, used: Uint16Array, size, eventIdx, kickFd, heads: Uint32Array, availIdx, lastUsed, n,
//          replies: Uint8Array[] (one per head), timeoutNs)
//   -> {ns: Float64Array (each step of heads.length calls), availIdx, lastUsed, kicks}
// Each answer must name its head and carry status 0 in its reply's first u32 (set to ~0 before each post); else it
// throws.
Napi::Value RingLoop(const Napi::CallbackInfo &info) {
  Napi::Env env = info.Env();
  uint32_t size = static_cast<uint32_t>(ArgU64(info, 2, "size", 32768));
  if (size == 0 || (size & (size - 1)) != 0) ThrowRange(env, "size must be a power of two");
  uint16_t *avail = ViewOf<uint16_t>(info, 0, vring::AvailWords(size), "avail");
  uint16_t *used16 = ViewOf<uint16_t>(info, 1, vring::UsedWords(size), "used");
  uint32_t *used32 = reinterpret_cast<uint32_t *>(used16);
  bool eventIdx = info[3].ToBoolean();
  int kickFd = ArgFd(info, 4);
  if (!info[5].IsTypedArray() || info[5].As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    ThrowRange(env, "heads must be a Uint32Array");
  Napi::Uint32Array headArray = info[5].As<Napi::Uint32Array>();
  if (headArray.ElementLength() == 0 || headArray.ElementLength() > size) ThrowRange(env, "heads: 1 to size chains");
  std::vector<uint32_t> heads(headArray.Data(), headArray.Data() + headArray.ElementLength());
  for (uint32_t h : heads)
    if (h >= size) ThrowRange(env, "a head is past the ring");
  uint16_t ai = static_cast<uint16_t>(ArgU64(info, 6, "availIdx", 0xffff));
  uint16_t lu = static_cast<uint16_t>(ArgU64(info, 7, "lastUsed", 0xffff));
  uint64_t n = ArgU64(info, 8, "n", 1u << 24);
  if (!info[9].IsArray() || info[9].As<Napi::Array>().Length() != heads.size())
    ThrowRange(env, "replies: one per head");
  std::vector<uint32_t *> replies;
  for (uint32_t j = 0; j < heads.size(); j++)
    replies.push_back(TypedView<uint32_t>(info[9].As<Napi::Array>().Get(j), 1, "replies[" + std::to_string(j) + "]"));
  uint64_t timeoutNs = ArgU64(info, 10, "timeoutNs");
  std::vector<double> ns(n);
  uint64_t kicks = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t t0 = NowNs();
    for (uint32_t j = 0; j < heads.size(); j++) {
      uint32_t *reply = replies[j];
      __atomic_store_n(reply, ~0u, __ATOMIC_RELAXED);
      avail[vring::AvailSlot(ai, size)] = static_cast<uint16_t>(heads[j]);
      uint16_t old = ai++;
      __atomic_store_n(&avail[vring::kAvailIdx], ai, __ATOMIC_RELEASE);
      __atomic_thread_fence(__ATOMIC_SEQ_CST);  // publish, then read the device's suppression (virtio's kick rule)
      bool kick;
      if (eventIdx) {
        kick = vring::NeedEvent(__atomic_load_n(&used16[vring::AvailEvent(size)], __ATOMIC_ACQUIRE), ai, old);
      } else {
        kick = (__atomic_load_n(&used16[vring::kUsedFlags], __ATOMIC_ACQUIRE) & vring::kUsedNoNotify) == 0;
      }
      if (kick) {
        uint64_t one = 1;
        if (write(kickFd, &one, sizeof(one)) != sizeof(one)) ThrowErrno(env, "write (kick)", errno);
        kicks++;
      }
      while (__atomic_load_n(&used16[vring::kUsedIdx], __ATOMIC_ACQUIRE) == lu)
        if (NowNs() - t0 > timeoutNs) ThrowRange(env, "no answer within the timeout (step " + std::to_string(i) + ")");
      uint32_t id = __atomic_load_n(&used32[vring::UsedId(lu, size)], __ATOMIC_ACQUIRE);
      lu++;
      if (id != heads[j])
        ThrowRange(env, "the device answered head " + std::to_string(id) + ", not " + std::to_string(heads[j]));
      uint32_t status = __atomic_load_n(reply, __ATOMIC_ACQUIRE);
      if (status != 0)
        ThrowRange(env, "step " + std::to_string(i) + ", call " + std::to_string(j) + " answered status " +
                            std::to_string(status));
    }
    ns[i] = static_cast<double>(NowNs() - t0);
  }
  Napi::Object r = Napi::Object::New(env);
  Napi::Float64Array out = Napi::Float64Array::New(env, n);
  for (uint64_t i = 0; i < n; i++) out[i] = ns[i];
  r.Set("ns", out);
  r.Set("availIdx", Napi::Number::New(env, ai));
  r.Set("lastUsed", Napi::Number::New(env, lu));
  r.Set("kicks", Napi::Number::New(env, static_cast<double>(kicks)));
  return r;
}

}  // namespace

void InitRingLoop(Napi::Env env, Napi::Object exports) { exports.Set("ringLoop", Napi::Function::New(env, RingLoop)); }

}  // namespace vhost_user
