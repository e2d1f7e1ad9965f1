// A session's own queue served in C (issue 15). A session's worker serves
// its guest process's ring on its JS thread; for each request JavaScript
// walks the chain, decodes, dispatches and answers, some microseconds more
// than the driver call itself. The ring server takes that path's place for
// the short calls of a round trip, and only while the session is plainly
// quiet: it runs inside the JS thread's own turn (Vring calls serve() where
// it would take the next request), so no other thread touches the ring, the
// session or the context meanwhile, and it serves a request only when it can
// tell, before doing anything, that the JavaScript path would serve it the
// same way and at once: the chain walks as chain.ts walks it (the same
// rules; a chain of more than GuestRing::kMaxBufs buffers is left to
// JavaScript; guest_ring.h), and the request is one the planner takes
// (ring_plan.h: the calls of the table generated from their declarations,
// ring_calls.h, and their checks). Anything else, a bad request included,
// is left where it is and serve() returns kHandOff: JavaScript takes it, and
// answers it (or its error) exactly as before.
//
// Under --gpu-share (issue 36) a launch, copy or batch is served only where
// its VM may post now (share_table.h Gate: the table and policy JavaScript's
// gate reads, share/gate.ts); one that must wait is handed off, and
// JavaScript's gate waits for it, bounded, without holding the thread. A
// synchronize served here ends the process's busy time, as JavaScript's.
//
// A BATCH taken here (ring_plan.h says which) runs its entries in order,
// then its ending: a synchronize waits here for the inline wait, a query
// does not wait. If the synchronize would wait longer, or an entry failed
// (posted work's error, which the synchronize reports), the request is
// taken but left unanswered: serve() returns kLeft and left()
// gives JavaScript what remains, the ending synchronize, the reply's value
// and the failures, which the device runs and answers
// (QcudaDevice.finishBatch). A batch with no ending synchronize whose launch
// failed is answered, and serve() returns kPosted: JavaScript notes the
// failure as the session's async error before anything else is served.
//
// JS: new RingServer(session: bigint, cursor: Uint32Array(CURSOR.words))
//   attach(desc: Uint8Array, avail: Uint16Array, used: Uint16Array, eventIdx, indirect, maxIndirect, callFd)
//   setRegions([{gpa, size, host}])     guest memory (bigints: host = where the region is mapped here)
//   setRecord(bytes: Uint8Array)        the ring's in-flight record (vhost-user/inflight.ts lays it out)
//   bind(context | null)                the session's CudaContext now
//   share(table: BigInt64Array, vm, proc, policy)   the GPU share gate (share/gate.ts), or share() for none
//   setAlloc(base, size) / setFunc(handle, id) / setStream(handle, id) / setEvent(handle, id)   (0: forget) ; clear()
//   setLocalMemory(bytes)               the context's per-thread local memory counted in the quota (0 after clear())
//   serve(spinNs, budgetNs, onFlush) -> Stop   cursor: lastAvail, usedIdx, signalledUsed in; also served, launched,
//   postedError out left() -> { head, cmd, args: Uint8Array, value, postedError, lateError }   after kLeft: the batch's
//   ending synchronize, for JavaScript
// RingServer.CURSOR and RingServer.STOP name the cursor's words and serve()'s answers.
#include <napi.h>
#include <time.h>

#include <cstring>
#include <memory>
#include <vector>

#include "cuda_args.h"
#include "cuda_context.h"
#include "cuda_ring_server.h"
#include "guest_ring.h"
#include "qcuda_proto.h"
#include "ring_plan.h"
#include "share_table.h"
#include "vhost-user/native/typed_view.h"

namespace qcuda::cuda {
namespace {

using vhost_user::TypedView;

constexpr size_t kResp = sizeof(qcuda_resp_hdr);

// Cursor words (JS's Uint32Array) after the ring's (guest_ring.h: RingWord):
// what serve() did (postedError: a CUDA error of an answered batch's launch).
enum Cursor { kServed = kRingWords, kLaunched, kPostedError, kCursorWords = 8 };

/** Why serve() returned. */
enum class Stop {
  kIdle = 0,
  kHandOff = 1,
  kOutput = 2,
  kBusy = 3,
  kBudget = 4,
  kLeft = 5,
  kPosted = 6,
  kServedOne = -1
};

uint64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

/** What a batch taken here leaves to JavaScript (kLeft): its ending synchronize, and the reply's value. */
struct Left {
  uint16_t head = 0;
  uint32_t cmd = 0;
  std::vector<uint8_t> args;
  uint64_t value = 0;
  int postedError = 0;  // the failed entry's error (an event record's)
  int lateError = 0;    // the launches' first failure: the session's async error, noted first
};

class RingServer : public Napi::ObjectWrap<RingServer> {
 public:
  static Napi::Function Define(Napi::Env env) {
    return DefineClass(
        env, "RingServer",
        {InstanceMethod("attach", &RingServer::Attach), InstanceMethod("setRegions", &RingServer::SetRegions),
         InstanceMethod("setRecord", &RingServer::SetRecord), InstanceMethod("bind", &RingServer::Bind),
         InstanceMethod("setAlloc", &RingServer::SetAlloc), InstanceMethod("setFunc", &RingServer::SetFunc),
         InstanceMethod("setStream", &RingServer::SetStream), InstanceMethod("setEvent", &RingServer::SetEvent),
         InstanceMethod("setLocalMemory", &RingServer::SetLocalMemory), InstanceMethod("clear", &RingServer::Clear),
         InstanceMethod("share", &RingServer::Share), InstanceMethod("serve", &RingServer::Serve),
         InstanceMethod("left", &RingServer::LeftToJs), StaticValue("CURSOR", CursorNames(env)),
         StaticValue("STOP", StopNames(env)), StaticValue("CALLS", RingCallTable(env))});
  }

  /** The cursor's words by name (ring-server.ts reads them from here: RingServer.CURSOR). */
  static Napi::Object CursorNames(Napi::Env env) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("lastAvail", static_cast<int>(kLastAvail));
    o.Set("usedIdx", static_cast<int>(kUsedIdx));
    o.Set("signalledUsed", static_cast<int>(kSignalledUsed));
    o.Set("served", static_cast<int>(kServed));
    o.Set("launched", static_cast<int>(kLaunched));
    o.Set("postedError", static_cast<int>(kPostedError));
    o.Set("words", static_cast<int>(kCursorWords));
    return o;
  }

  static Napi::Object StopNames(Napi::Env env) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("idle", static_cast<int>(Stop::kIdle));
    o.Set("handOff", static_cast<int>(Stop::kHandOff));
    o.Set("output", static_cast<int>(Stop::kOutput));
    o.Set("busy", static_cast<int>(Stop::kBusy));
    o.Set("budget", static_cast<int>(Stop::kBudget));
    o.Set("left", static_cast<int>(Stop::kLeft));
    o.Set("posted", static_cast<int>(Stop::kPosted));
    return o;
  }

  explicit RingServer(const Napi::CallbackInfo &info)
      : Napi::ObjectWrap<RingServer>(info), planner_(ArgU64(info[0], "session")) {
    cursor_ = TypedView<uint32_t>(info[1], kCursorWords, "cursor");
    cursorRef_ = Napi::Persistent(info[1].As<Napi::Object>());
    ring_.SetCursor(cursor_);
  }

 private:
  // ---- set-up, from JS ----

  Napi::Value Attach(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    // avail is flags, idx, ring[size], used_event: the ring's size is its length less 3.
    const size_t availLen = info[1].IsTypedArray() ? info[1].As<Napi::TypedArray>().ElementLength() : 0;
    const uint32_t size = static_cast<uint32_t>(availLen > 3 ? availLen - 3 : 0);
    if (size == 0 || (size & (size - 1)) != 0 || size > 32768)
      throw Napi::RangeError::New(env, "avail: 3 + a power of two of u16");
    ring_.Attach(TypedView<uint8_t>(info[0], size * GuestRing::kDescBytes, "desc"),
                 TypedView<uint16_t>(info[1], vring::AvailWords(size), "avail"),
                 TypedView<uint16_t>(info[2], vring::UsedWords(size), "used"), size, info[3].ToBoolean(),
                 info[4].ToBoolean(), ArgU32(info[5], "maxIndirect"), ArgI32(info[6], "callFd"));
    // Kept alive with the views: their memory is the ring.
    views_.clear();
    for (int i = 0; i < 3; i++) views_.push_back(Napi::Persistent(info[i].As<Napi::Object>()));
    return env.Undefined();
  }

  Napi::Value SetRegions(const Napi::CallbackInfo &info) {
    Napi::Array list = info[0].As<Napi::Array>();
    std::vector<Region> regions;
    for (uint32_t i = 0; i < list.Length(); i++) {
      Napi::Object o = list.Get(i).As<Napi::Object>();
      regions.push_back({ArgU64(o.Get("gpa"), "gpa"), ArgU64(o.Get("size"), "size"),
                         reinterpret_cast<uint8_t *>(ArgU64(o.Get("host"), "host"))});
    }
    ring_.SetRegions(std::move(regions));
    return info.Env().Undefined();
  }

  Napi::Value SetRecord(const Napi::CallbackInfo &info) {
    if (info[0].IsUndefined() || info[0].IsNull()) {
      ring_.SetRecord(nullptr);
      recordRef_.Reset();
    } else {
      ring_.SetRecord(TypedView<uint8_t>(info[0], GuestRing::RecordBytes(ring_.size()), "record"));
      recordRef_ = Napi::Persistent(info[0].As<Napi::Object>());
    }
    return info.Env().Undefined();
  }

  Napi::Value Bind(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    planner_.Bind(nullptr);
    if (info[0].IsObject()) {
      napi_value ctor = nullptr;
      napi_get_reference_value(env, State(env)->contextCtor, &ctor);
      if (!info[0].As<Napi::Object>().InstanceOf(Napi::Function(env, ctor)))
        throw Napi::TypeError::New(env, "bind: not a CudaContext");
      planner_.Bind(Napi::ObjectWrap<Context>::Unwrap(info[0].As<Napi::Object>())->core());
    }
    return env.Undefined();
  }

  Napi::Value Share(const Napi::CallbackInfo &info) {
    gate_.reset();
    tableRef_.Reset();
    if (info[0].IsUndefined()) return info.Env().Undefined();
    const uint32_t vm = ArgU32(info[1], "vm"), proc = ArgU32(info[2], "proc");
    if (vm >= share::kVmSlots || proc >= share::kProcSlots)
      throw Napi::RangeError::New(info.Env(), "share: no such slot");
    gate_ = std::make_unique<share::Gate>(TypedView<int64_t>(info[0], share::kWords, "table"), vm, proc,
                                          share::PolicyOf(info[3].As<Napi::Object>()));
    tableRef_ = Napi::Persistent(info[0].As<Napi::Object>());
    return info.Env().Undefined();
  }

  // What JavaScript tells of the session: the planner's tables (ring_plan.h).
  Napi::Value SetAlloc(const Napi::CallbackInfo &info) {
    planner_.SetAlloc(ArgU64(info[0], "base"), ArgU64(info[1], "size"));
    return info.Env().Undefined();
  }
  Napi::Value SetFunc(const Napi::CallbackInfo &info) { return SetId(info, ring::Kind::kFunction); }
  Napi::Value SetStream(const Napi::CallbackInfo &info) { return SetId(info, ring::Kind::kStream); }
  Napi::Value SetEvent(const Napi::CallbackInfo &info) { return SetId(info, ring::Kind::kEvent); }
  Napi::Value SetId(const Napi::CallbackInfo &info, ring::Kind kind) {
    planner_.SetId(kind, ArgU64(info[0], "handle"), ArgU32(info[1], "id"));
    return info.Env().Undefined();
  }
  Napi::Value SetLocalMemory(const Napi::CallbackInfo &info) {
    planner_.SetLocalMemory(ArgU64(info[0], "bytes"));
    return info.Env().Undefined();
  }
  Napi::Value Clear(const Napi::CallbackInfo &info) {
    planner_.Clear();
    return info.Env().Undefined();
  }

  // ---- serving ----

  // serve(spinNs, budgetNs, onFlush): serves the requests at the ring's head
  // for as long as it can (see the top of the file), waiting up to spinNs
  // after the last answer for the caller's next request, for budgetNs in
  // all. onFlush() (after a flush point of a context that launched) hands
  // device output to the session and says whether any is now waiting.
  Napi::Value Serve(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    const uint64_t spinNs = ArgU64(info[0], "spinNs"), budgetNs = ArgU64(info[1], "budgetNs");
    Napi::Function onFlush = info[2].IsFunction() ? info[2].As<Napi::Function>() : Napi::Function();
    cursor_[kPostedError] = 0;
    return Napi::Number::New(env, static_cast<int>(Run(env, spinNs, budgetNs, onFlush)));
  }

  // left(): what the batch serve() stopped at (kLeft) leaves to JavaScript, once; undefined if nothing.
  Napi::Value LeftToJs(const Napi::CallbackInfo &info) {
    Napi::Env env = info.Env();
    if (!left_) return env.Undefined();
    const Left l = std::move(*left_);
    left_.reset();
    Napi::Object o = Napi::Object::New(env);
    o.Set("head", l.head);
    o.Set("cmd", l.cmd);
    Napi::Uint8Array args = Napi::Uint8Array::New(env, l.args.size());
    if (!l.args.empty()) std::memcpy(args.Data(), l.args.data(), l.args.size());
    o.Set("args", args);
    o.Set("value", Napi::Number::New(env, static_cast<double>(l.value)));
    o.Set("postedError", l.postedError);
    o.Set("lateError", l.lateError);
    return o;
  }

  Stop Run(Napi::Env env, uint64_t spinNs, uint64_t budgetNs, const Napi::Function &onFlush) {
    if (!ring_.attached() || !Quiet(State(env))) return Stop::kBusy;
    const uint64_t t0 = NowNs();
    uint64_t last = t0;
    for (;;) {
      const uint16_t availIdx = ring_.AvailIdx();
      const uint16_t lastAvail = ring_.LastAvail();
      if (availIdx == lastAvail) {
        const uint64_t now = NowNs();
        if (now - t0 >= budgetNs) return Stop::kBudget;
        if (now - last >= spinNs) return Stop::kIdle;
        __builtin_ia32_pause();
        continue;
      }
      // A driver that moved avail->idx too far: JavaScript fails the ring.
      if (static_cast<uint16_t>(availIdx - lastAvail) > ring_.size()) return Stop::kHandOff;
      const uint16_t head = ring_.HeadAt(lastAvail);
      const Stop s = ServeOne(env, head, onFlush);
      if (s != Stop::kServedOne) return s;
      last = NowNs();
      if (last - t0 >= budgetNs) return Stop::kBudget;
    }
  }

  /** Nothing else may touch the context meanwhile: no job queued, running or unsettled (its errors are the session's
   * next status). */
  bool Quiet(EnvState *st) {
    const std::shared_ptr<CtxCore> &core = planner_.core();
    if (!core || st->pending != 0 || !st->parked.empty()) return false;
    std::lock_guard<std::mutex> lk(core->mu);
    return core->busy == 0 && !core->dead && !core->closing;
  }

  Stop ServeOne(Napi::Env env, uint16_t head, const Napi::Function &onFlush) {
    if (!ring_.Walk(head, &chain_)) return Stop::kHandOff;
    Plan p;
    p.job.ctx = planner_.core();
    p.job.env = State(env);
    cu::api().CtxSetCurrent(p.job.ctx->ctx);
    if (!planner_.Check(chain_, p)) return Stop::kHandOff;
    if (gate_ && p.call->posts && !gate_->Admit(NowNs())) return Stop::kHandOff;
    // Taken: from here the request is answered here, whatever the driver
    // says, or (a batch's ending synchronize that would wait) left to JavaScript.
    ring_.Took(head);
    if (planner_.Execute(p)) cursor_[kLaunched] = 1;
    // A batch's outcome, as the device's batches have it (commands/batch.ts): a
    // failed launch is the session's async error (late); a failed event
    // record is its entry's failure, the reply's value and status.
    int late = 0;
    if (p.call->serves == ring::Serves::kBatch) {
      late = p.job.rc == cu::kSuccess ? 0 : cu::ToCudaError(p.job.rc);
      const int failed = p.records.rc == cu::kSuccess ? 0 : cu::ToCudaError(p.records.rc);
      if (p.failedEntry >= 0) p.value = static_cast<uint64_t>(p.failedEntry);
      if (p.end != nullptr && (late != 0 || failed != 0 || !planner_.EndBatch(p))) {
        left_ = std::make_unique<Left>(
            Left{head, p.end->cmd, std::vector<uint8_t>(p.endArgs, p.endArgs + p.endLen), p.value, failed, late});
        return Stop::kLeft;
      }
      if (p.end == nullptr) p.job.rc = p.records.rc;
    }
    if (gate_ && Syncs(p)) gate_->Synced(NowNs());
    uint32_t status = p.job.rc == cu::kSuccess ? 0 : static_cast<uint32_t>(cu::ToCudaError(p.job.rc));
    bool output = false;
    if (p.flushes && cursor_[kLaunched] != 0 && !onFlush.IsEmpty()) {
      try {
        output = onFlush.Call({}).ToBoolean();
      } catch (const Napi::Error &) {
        output = false;  // the drain's own failure is its to report; the answer goes out
      }
    }
    qcuda_resp_hdr r{};
    r.status = status | (output ? QCUDA_ST_OUTPUT : 0);
    r.value = p.value;
    Scatter(chain_.writable, 0, reinterpret_cast<const uint8_t *>(&r), kResp);
    // The data went out only if the command succeeded (virtio-device.ts: #answer).
    ring_.Publish(head, static_cast<uint32_t>(kResp + (status == 0 ? p.dataOut : 0)));
    ring_.Signal();
    cursor_[kServed]++;
    if (late != 0) {
      cursor_[kPostedError] = static_cast<uint32_t>(late);
      return Stop::kPosted;
    }
    return output ? Stop::kOutput : Stop::kServedOne;
  }

  /** Whether the answered call waited for the process's posted work (share/commands.ts syncs): a synchronize, or a
   * batch ending in one (not one ending in a query: its work may still run). */
  static bool Syncs(const Plan &p) {
    return p.call->syncs || (p.call->serves == ring::Serves::kBatch && p.end != nullptr && p.end->syncs);
  }

  uint32_t *cursor_ = nullptr;
  Napi::ObjectReference cursorRef_;
  // The ring (attach), its memory kept alive by views_ and recordRef_.
  GuestRing ring_;
  std::vector<Napi::ObjectReference> views_;
  Napi::ObjectReference recordRef_;
  // The session's context, what JavaScript told of the session, and the checks of a request (ring_plan.h).
  RingPlanner planner_;
  // Per request, reused.
  Chain chain_;
  std::unique_ptr<Left> left_;
  // The GPU share gate (share()), on the table JavaScript mapped.
  std::unique_ptr<share::Gate> gate_;
  Napi::ObjectReference tableRef_;
};

}  // namespace

void InitRingServer(Napi::Env env, Napi::Object exports) { exports.Set("RingServer", RingServer::Define(env)); }

}  // namespace qcuda::cuda
