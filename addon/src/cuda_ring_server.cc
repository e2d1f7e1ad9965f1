// A session's own queue served in C (issue 15). A session's worker serves
// its guest process's ring on its JS thread; for each request JavaScript
// walks the chain, decodes, dispatches and answers, some microseconds more
// than the driver call itself. The ring server takes that path's place for
// the short calls of a round trip, and only while the session is plainly
// quiet: it runs inside the JS thread's own turn (Vring calls serve() where
// it would take the next request), so no other thread touches the ring, the
// session or the context meanwhile, and it serves a request only when it can
// tell, before doing anything, that the JavaScript path would serve it the
// same way and at once:
//  - the chain walks as chain.ts walks it (the same rules; a chain of more
//    than GuestRing::kMaxBufs buffers is left to JavaScript; guest_ring.h);
//  - the call is one of the table (ring_calls.h, generated from the calls'
//    declarations: RingDecl in backend/src/qcuda/wire/protocol.ts), which
//    says how each is served and what is checked of it; its header and
//    arguments, copied out of guest memory once, pass the dispatcher's
//    checks (qcuda/device.ts) and the command's (its handles the session's
//    functions, streams and events, its range in one of its allocations:
//    the tables JavaScript keeps it told of, setAlloc/setFunc/setStream/setEvent);
//  - the call cannot block for long: a synchronize (of the device, a stream
//    or an event) only once what it waits for is done (polled for the
//    inline wait), a copy of at most its declared maxData bytes only on an
//    idle stream (from pinned memory, or pageable guest RAM, which the
//    driver stages at once at that size: kMaxInlinePageableCopy), a launch
//    only below the launch bound (kInlineLaunchBound); an event query never
//    waits.
// Anything else, a bad request included, is left where it is and serve()
// returns kHandOff: JavaScript takes it, and answers it (or its error)
// exactly as before. The calls run through the same run phases as the
// context's methods (RunSynchronize, RunStreamSynchronize, RunEventRecord,
// RunEventSynchronize, RunEventQuery, RunCopyHtoD, RunCopyDtoH, LaunchOne).
//
// Under --gpu-share (issue 36) a launch, copy or batch is served only where
// its VM may post now (share_table.h Gate: the table and policy JavaScript's
// gate reads, share/gate.ts); one that must wait is handed off, and
// JavaScript's gate waits for it, bounded, without holding the thread. A
// synchronize served here ends the process's busy time, as JavaScript's.
//
// A BATCH (commands/batch.ts) is served when every posted entry is a launch
// that would be served alone, a LAUNCH_EX (a cluster launch: every cuBLASLt
// kernel on Hopper) checked as JavaScript checks it, or an event record of
// the session's event and stream, there are at most kInlineBatchLaunches of them (the device's own
// bound for launching on the JS thread), and its ending synchronize, if
// any, is one served alone, or its ending query (QCUDA_BATCH_ENDS_QUERY) an
// EVENT_QUERY of the session's event. Its entries run here, in order; the ending
// synchronize waits here for the inline wait, the query does not wait. If it would wait longer, or
// an entry failed (posted work's error, which the synchronize reports), the
// request is taken but left unanswered: serve() returns kLeft and left()
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

#include <cstddef>
#include <cstring>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda_args.h"
#include "cuda_context.h"
#include "cuda_ring_server.h"
#include "guest_ring.h"
#include "qcuda_proto.h"
#include "ring_calls.h"
#include "share_table.h"
#include "vhost-user/typed_view.h"

namespace qcuda::cuda {
namespace {

/** Largest integer JavaScript's checks hold exactly (device.ts: MAX_SAFE_BIG). */
constexpr uint64_t kMaxSafe = (1ull << 53) - 1;
constexpr size_t kReq = sizeof(qcuda_req_hdr), kResp = sizeof(qcuda_resp_hdr);

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

/** Posted work checked and ready to run: a launch (its parameters in the server's copy of the request; a cluster
 * launch's cluster and flags in extras) or an event record. */
struct Posted {
  ring::Serves serves;
  LaunchHeader header;
  uint8_t *params;
  uint32_t event, stream;
  LaunchExtras extras;
};

// LAUNCH_EX's struct begins as LAUNCH's: one check serves both.
static_assert(offsetof(qcuda_args_launch_ex, param_bytes) == offsetof(qcuda_args_launch, param_bytes) &&
                  offsetof(qcuda_args_launch_ex, cluster) == sizeof(qcuda_args_launch),
              "qcuda_args_launch_ex extends qcuda_args_launch");

/** The session's objects a request's handle arguments name (ring::Call.handles), as the context's ids. */
struct Operands {
  uint32_t stream = 0, event = 0, func = 0;
};

/** A call checked and ready to run: what it runs, and what its answer says. */
struct Plan {
  const ring::Call *call = nullptr;  // its row of the table (ring_calls.h)
  Job job;                   // the run phase's job (its outcome is the status; a batch's: its launches' first failure)
  Job records;               // a batch's event records and cluster launches (their first failure, the entry's own)
  int64_t failedEntry = -1;  // and which entry that was
  bool flushes = false;      // a point where CUDA flushes device output
  uint64_t dataOut = 0;      // bytes the answer carries on success
  uint64_t value = 0;        // the answer's value
  // The call's operands, decided by the checks.
  uint64_t ptr = 0;
  Operands ops;
  std::vector<Seg> segs;
  // A batch's ending synchronize or query (nullptr: none) and its argument bytes in the server's copy (its operands in
  // ops).
  const ring::Call *end = nullptr;
  const uint8_t *endArgs = nullptr;
  uint32_t endLen = 0;
};

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
         StaticValue("STOP", StopNames(env)), StaticValue("CALLS", CallTable(env))});
  }

  /** The table this server was built with (ring_calls.h), as the test of its declaration reads it
   * (RingServer.CALLS; enums as numbers, offsets in bytes). */
  static Napi::Array CallTable(Napi::Env env) {
    Napi::Array rows = Napi::Array::New(env);
    for (const ring::Call &k : ring::kCalls) {
      Napi::Object o = Napi::Object::New(env);
      o.Set("cmd", k.cmd);
      o.Set("serves", static_cast<int>(k.serves));
      o.Set("alone", k.alone);
      o.Set("posted", k.posted);
      o.Set("ends", k.ends);
      o.Set("args", k.args);
      o.Set("varArgs", k.varArgs);
      o.Set("data", static_cast<int>(k.data));
      o.Set("posts", k.posts);
      o.Set("syncs", k.syncs);
      Napi::Array handles = Napi::Array::New(env);
      for (const ring::Handle &h : k.handles) {
        if (h.kind == ring::Kind::kNone) continue;
        Napi::Object x = Napi::Object::New(env);
        x.Set("offset", h.offset);
        x.Set("kind", static_cast<int>(h.kind));
        handles.Set(handles.Length(), x);
      }
      o.Set("handles", handles);
      if (k.range.present) {
        Napi::Object r = Napi::Object::New(env);
        r.Set("ptr", k.range.ptr);
        r.Set("size", k.range.size);
        o.Set("range", r);
      }
      o.Set("maxData", Napi::Number::New(env, static_cast<double>(k.maxData)));
      rows.Set(rows.Length(), o);
    }
    return rows;
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

  explicit RingServer(const Napi::CallbackInfo &info) : Napi::ObjectWrap<RingServer>(info) {
    session_ = ArgU64(info[0], "session");
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
                 TypedView<uint16_t>(info[1], 3 + size, "avail"), TypedView<uint16_t>(info[2], 3 + size * 4, "used"),
                 size, info[3].ToBoolean(), info[4].ToBoolean(), ArgU32(info[5], "maxIndirect"),
                 ArgI32(info[6], "callFd"));
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
    core_.reset();
    if (info[0].IsObject()) {
      napi_value ctor = nullptr;
      napi_get_reference_value(env, State(env)->contextCtor, &ctor);
      if (!info[0].As<Napi::Object>().InstanceOf(Napi::Function(env, ctor)))
        throw Napi::TypeError::New(env, "bind: not a CudaContext");
      core_ = Napi::ObjectWrap<Context>::Unwrap(info[0].As<Napi::Object>())->core();
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

  Napi::Value SetAlloc(const Napi::CallbackInfo &info) {
    uint64_t base = ArgU64(info[0], "base"), size = ArgU64(info[1], "size");
    if (size == 0)
      allocs_.erase(base);
    else
      allocs_[base] = size;
    return info.Env().Undefined();
  }
  Napi::Value SetFunc(const Napi::CallbackInfo &info) { return SetId(info, funcs_); }
  Napi::Value SetStream(const Napi::CallbackInfo &info) { return SetId(info, streams_); }
  Napi::Value SetEvent(const Napi::CallbackInfo &info) { return SetId(info, events_); }
  Napi::Value SetId(const Napi::CallbackInfo &info, std::unordered_map<uint64_t, uint32_t> &m) {
    uint64_t h = ArgU64(info[0], "handle");
    uint32_t id = ArgU32(info[1], "id");
    if (id == 0)
      m.erase(h);
    else
      m[h] = id;
    return info.Env().Undefined();
  }
  Napi::Value SetLocalMemory(const Napi::CallbackInfo &info) {
    localMemory_ = ArgU64(info[0], "bytes");
    return info.Env().Undefined();
  }
  Napi::Value Clear(const Napi::CallbackInfo &info) {
    localMemory_ = 0;
    allocs_.clear();
    funcs_.clear();
    streams_.clear();
    events_.clear();
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
    if (!core_ || st->pending != 0 || !st->parked.empty()) return false;
    std::lock_guard<std::mutex> lk(core_->mu);
    return core_->busy == 0 && !core_->dead && !core_->closing;
  }

  Stop ServeOne(Napi::Env env, uint16_t head, const Napi::Function &onFlush) {
    if (!ring_.Walk(head, &chain_)) return Stop::kHandOff;
    Plan p;
    p.job.ctx = core_;
    p.job.env = State(env);
    cu::api().CtxSetCurrent(core_->ctx);
    if (!Check(p)) return Stop::kHandOff;
    if (gate_ && p.call->posts && !gate_->Admit(NowNs())) return Stop::kHandOff;
    // Taken: from here the request is answered here, whatever the driver
    // says, or (a batch's ending synchronize that would wait) left to JavaScript.
    ring_.Took(head);
    Execute(p);
    // A batch's outcome, as the device's batches have it (commands/batch.ts): a
    // failed launch is the session's async error (late); a failed event
    // record is its entry's failure, the reply's value and status.
    int late = 0;
    if (p.call->serves == ring::Serves::kBatch) {
      late = p.job.rc == cu::kSuccess ? 0 : cu::ToCudaError(p.job.rc);
      const int failed = p.records.rc == cu::kSuccess ? 0 : cu::ToCudaError(p.records.rc);
      if (p.failedEntry >= 0) p.value = static_cast<uint64_t>(p.failedEntry);
      if (p.end != nullptr && (late != 0 || failed != 0 || !EndBatch(p))) {
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
    // The data went out only if the command succeeded (device.ts: #answer).
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

  /** A batch's ending call, once its posted work ran: true (its outcome in p.job) if it returned within the inline
   * wait, as a query always does (not done yet is its answer, cudaErrorNotReady; the reply's value, posted work's
   * failure, is 0: one that failed is left to JavaScript). */
  bool EndBatch(Plan &p) {
    if (p.end->serves == ring::Serves::kQuery) {
      if (!RunEventQuery(p.job, p.ops.event) && p.job.rc == cu::kSuccess) p.job.rc = cu::kNotReady;
      p.value = 0;
      return true;
    }
    if (!Sync(p, *p.end)) return false;
    if (p.job.wait) p.job.wait(p.job);
    p.flushes = true;
    return true;
  }

  /**
   * The run phase of synchronize k (of the device, or p's stream or event,
   * as its handle says); true if its wait would return at once, polled for
   * the inline wait (the wait itself is the caller's to run).
   */
  bool Sync(Plan &p, const ring::Call &k) {
    Job &j = p.job;
    if (k.serves != ring::Serves::kSync) return false;
    switch (k.handles[0].kind) {
      case ring::Kind::kNone:
        RunSynchronize(j);
        break;
      case ring::Kind::kStream:
        RunStreamSynchronize(j, p.ops.stream);
        break;
      case ring::Kind::kEvent:
        RunEventSynchronize(j, p.ops.event);
        break;
      default:
        return false;
    }
    return j.rc == cu::kSuccess && Ready(j);
  }

  // ---- the request (device.ts: #dispatch, then the command's checks) ----

  /** The session's stream behind handle h (0: the NULL stream); false if it is not one JavaScript told of. */
  bool StreamOf(uint64_t h, uint32_t *id) const {
    if (h == QCUDA_STREAM_LEGACY || h == QCUDA_STREAM_PER_THREAD) {
      *id = 0;
      return true;
    }
    return IdOf(streams_, h, id);
  }

  /** The context's id behind the session's handle h in table m; false if JavaScript told of none. */
  static bool IdOf(const std::unordered_map<uint64_t, uint32_t> &m, uint64_t h, uint32_t *id) {
    auto it = m.find(h);
    if (it == m.end()) return false;
    *id = it->second;
    return true;
  }

  /** [ptr, ptr+size) inside one allocation (Session.checkRange, allocations only: mappings and symbols take the
   * JavaScript path). */
  bool InAlloc(uint64_t ptr, uint64_t size) const {
    if (size == 0) return true;
    auto it = allocs_.upper_bound(ptr);
    if (it == allocs_.begin()) return false;
    --it;
    return ptr - it->first < it->second && size <= it->second - (ptr - it->first);
  }

  /** Whether stream id has nothing left to do (a call on it would not wait behind other work). */
  bool StreamIdle(uint32_t id) const {
    cu::Stream s = nullptr;
    if (id != 0) {
      auto it = core_->streams.find(id);
      if (it == core_->streams.end()) return false;
      s = it->second;
    }
    return cu::api().StreamQuery(s) == cu::kSuccess;
  }

  /**
   * The request at the chain, checked as the dispatcher (device.ts) and the
   * call's own checks would take it: only a call of the table (ring_calls.h),
   * sent on its own, with its argument bytes, no data unless it moves some
   * (then checked by its kind), its handles the session's and its range in
   * one of its allocations; then what its kind checks.
   */
  bool Check(Plan &p) {
    const Chain &c = chain_;
    if (c.readableBytes < kReq || c.writableBytes < kResp) return false;
    qcuda_req_hdr h;
    if (!Gather(c.readable, 0, reinterpret_cast<uint8_t *>(&h), kReq)) return false;
    if (h.session != session_ || h.len > QCUDA_MAX_ARGS) return false;
    args_.resize(h.len);
    if (!Gather(c.readable, kReq, args_.data(), h.len)) return false;
    const ring::Call *k = ring::Find(h.cmd);
    if (k == nullptr || !k->alone || !Fits(*k, h.len)) return false;
    if (k->data == ring::Data::kNone && (!NoData(h) || c.readableBytes != kReq + h.len)) return false;
    p.call = k;
    switch (k->serves) {
      case ring::Serves::kSync:
        return Resolve(*k, args_.data(), &p.ops) && CheckSync(p);
      case ring::Serves::kQuery:
        return Resolve(*k, args_.data(), &p.ops);
      case ring::Serves::kCopy:
        return CheckCopy(p, h);
      case ring::Serves::kLaunch:
        posted_.clear();
        return PlanPosted(*k, args_.data(), h.len) && Backlog(1);
      case ring::Serves::kBatch:
        return CheckBatch(p, h);
      default:
        return false;  // the rest only in a batch (RingDecl.batchOnly)
    }
  }

  static bool NoData(const qcuda_req_hdr &h) { return h.data_len == 0 && h.data_offset == 0; }

  /** Whether len argument bytes are what call k takes: its struct's, or at least those where more may follow. */
  static bool Fits(const ring::Call &k, uint64_t len) { return k.varArgs ? len >= k.args : len == k.args; }

  static uint64_t U64At(const uint8_t *args, uint32_t offset) {
    uint64_t v;
    std::memcpy(&v, args + offset, sizeof v);
    return v;
  }

  /** Each handle argument of call k (in args, which Fits k) one of the session's, as the context's id in o. */
  bool Resolve(const ring::Call &k, const uint8_t *args, Operands *o) const {
    for (const ring::Handle &h : k.handles) {
      if (h.kind == ring::Kind::kNone) continue;
      const uint64_t v = U64At(args, h.offset);
      const bool known = h.kind == ring::Kind::kStream  ? StreamOf(v, &o->stream)
                         : h.kind == ring::Kind::kEvent ? IdOf(events_, v, &o->event)
                                                        : IdOf(funcs_, v, &o->func);
      if (!known) return false;
    }
    return true;
  }

  /** A synchronize: only once what it waits for is done (polled for the inline wait); its wait then returns at once. */
  bool CheckSync(Plan &p) {
    if (!Sync(p, *p.call)) return false;
    p.flushes = true;
    return true;
  }

  /** A copy (data to or from the device) of at most the declared bytes, on an idle stream. */
  bool CheckCopy(Plan &p, const qcuda_req_hdr &h) {
    const Chain &c = chain_;
    const ring::Call &k = *p.call;
    const bool toDevice = k.data == ring::Data::kTo;
    const uint64_t n = h.data_len;
    if (n > kMaxSafe || n > k.maxData || !k.range.present) return false;
    const uint64_t dataIn = toDevice ? n : 0, dataOut = toDevice ? 0 : n;
    if (c.readableBytes != kReq + h.len + dataIn || c.writableBytes < kResp + dataOut) return false;
    // The chunk inside the transfer, the transfer inside one allocation, the stream the session's.
    const uint64_t ptr = U64At(args_.data(), k.range.ptr), size = U64At(args_.data(), k.range.size);
    if (h.data_offset > size || n > size - h.data_offset) return false;
    if (!InAlloc(ptr, size) || !Resolve(k, args_.data(), &p.ops)) return false;
    p.ptr = ptr + h.data_offset;
    p.flushes = true;
    if (n == 0) return true;  // nothing to copy: answered with status 0, as JavaScript does
    const bool sliced =
        toDevice ? Slice(c.readable, kReq + h.len, n, &p.segs) : Slice(c.writable, c.writableBytes - n, n, &p.segs);
    if (!sliced) return false;
    static_assert(ring::MaxData() <= kMaxInlinePageableCopy, "a copy served here may be from pageable guest RAM");
    p.segs = p.job.env->given.Resolve(p.segs);
    if (!StreamIdle(p.ops.stream)) return false;
    p.dataOut = dataOut;
    return true;
  }

  /** Posted work of call k (a launch, a cluster launch or an event record; its argument bytes args) checked as
   * JavaScript checks it, and added to posted_. */
  bool PlanPosted(const ring::Call &k, uint8_t *args, uint32_t len) {
    Operands o;
    if (!Fits(k, len) || !Resolve(k, args, &o)) return false;
    switch (k.serves) {
      case ring::Serves::kLaunch:
        return PlanKernel(k, args, len, o, LaunchExtras{{1, 1, 1}, false});
      case ring::Serves::kClusterLaunch:
        return PlanCluster(k, args, len, o);
      case ring::Serves::kRecord:
        posted_.push_back({k.serves, {}, nullptr, o.event, o.stream, {}});
        return true;
      default:
        return false;
    }
  }

  /** A cluster launch: its launch checked as PlanKernel's, its cluster and flags as commands/launch.ts's clusterOf
   * checks them (anything else is JavaScript's to refuse). */
  bool PlanCluster(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o) {
    qcuda_args_launch_ex a;
    if (len < sizeof a) return false;
    std::memcpy(&a, args, sizeof a);
    if ((a.flags & ~QCUDA_LAUNCH_COOPERATIVE) != 0) return false;
    for (uint32_t c : a.cluster)
      if (c == 0 || c > QCUDA_MAX_CLUSTER_BLOCKS) return false;
    if (uint64_t{a.cluster[0]} * a.cluster[1] * a.cluster[2] > QCUDA_MAX_CLUSTER_BLOCKS) return false;
    const LaunchExtras x{{a.cluster[0], a.cluster[1], a.cluster[2]}, (a.flags & QCUDA_LAUNCH_COOPERATIVE) != 0};
    return PlanKernel(k, args, len, o, x);
  }

  /** A kernel launch of call k whose struct (k.args long, beginning as qcuda_args_launch) and parameters are args
   * (its function and stream in o): its parameter size and dimensions checked; added to posted_. */
  bool PlanKernel(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o, const LaunchExtras &x) {
    qcuda_args_launch a;
    if (k.args < sizeof a || len < k.args) return false;
    std::memcpy(&a, args, sizeof a);
    const uint64_t paramBytes = len - k.args;
    if (paramBytes != a.param_bytes) return false;
    auto fn = core_->functions.find(o.func);
    if (fn == core_->functions.end() || fn->second.paramBytes != paramBytes || !LocalCounted(fn->second)) return false;
    for (int i = 0; i < 3; i++)
      if (a.grid[i] == 0 || a.block[i] == 0) return false;
    posted_.push_back(
        {k.serves, MakeLaunchHeader(o.func, o.stream, a.grid, a.block, a.shared_mem, static_cast<uint32_t>(paramBytes)),
         args + k.args, 0, 0, x});
    return true;
  }

  /**
   * Whether f's launch leaves the context's local memory as JavaScript counted it
   * (setLocalMemory): one needing more per thread makes the driver grow it for every
   * resident thread, which JavaScript charges to the quota or refuses (security review 3, N3).
   */
  bool LocalCounted(const CtxCore::Fn &f) const { return f.localBytes <= localMemory_; }

  /** Launches among posted_. */
  uint64_t Launches() const {
    uint64_t n = 0;
    for (const Posted &w : posted_) n += w.serves == ring::Serves::kLaunch || w.serves == ring::Serves::kClusterLaunch;
    return n;
  }

  /** n more launches stay below the launch bound: cuLaunchKernel blocks once the GPU's launch queue is full, not here
   * (Context::LaunchWhere). */
  bool Backlog(uint64_t n) const {
    return core_->launchesRun.load() - core_->launchesDone.load() + n <= kInlineLaunchBound;
  }

  /**
   * BATCH (commands/batch.ts: parseBatch's framing): served only when every
   * posted entry is one PlanPosted takes and the ending synchronize or query,
   * if any, is one EndBatch runs; otherwise all of it is left to JavaScript.
   */
  bool CheckBatch(Plan &p, const qcuda_req_hdr &h) {
    const Chain &c = chain_;
    qcuda_args_batch a;
    std::memcpy(&a, args_.data(), sizeof a);
    if (a.flags != 0 && a.flags != QCUDA_BATCH_ENDS_SYNC && a.flags != QCUDA_BATCH_ENDS_QUERY) return false;
    const bool ends = a.flags != 0;
    if (a.bytes > QCUDA_MAX_BATCH || h.data_offset != 0 || h.data_len != a.bytes || (ends && a.count == 0))
      return false;
    if (c.readableBytes != kReq + h.len + a.bytes || c.writableBytes < kResp) return false;
    const uint32_t posted = ends ? a.count - 1 : a.count;
    // A longer batch goes to the context thread, so the JS thread reads the next one meanwhile
    // (kInlineBatchLaunches): left before its bytes are copied (a full batch is 64 KiB).
    if (posted > kInlineBatchLaunches) return false;
    batch_.resize(a.bytes);
    if (!Gather(c.readable, kReq + h.len, batch_.data(), a.bytes)) return false;
    posted_.clear();
    uint64_t at = 0;
    for (uint32_t i = 0; i < a.count; i++) {
      qcuda_batch_entry e;
      if (batch_.size() - at < sizeof e) return false;
      std::memcpy(&e, batch_.data() + at, sizeof e);
      at += sizeof e;
      const uint64_t padded = (static_cast<uint64_t>(e.len) + 7) & ~7ull;
      if (padded > batch_.size() - at) return false;
      uint8_t *args = batch_.data() + at;
      at += padded;
      const ring::Call *k = ring::Find(e.cmd);
      if (k == nullptr) return false;
      if (i < posted ? !(k->posted && PlanPosted(*k, args, e.len)) : !CheckEnding(p, a.flags, *k, args, e.len))
        return false;
    }
    if (at != batch_.size() || !Backlog(Launches())) return false;
    p.value = posted;
    return true;
  }

  /** A batch's ending call (its flags say which kind) that EndBatch runs: a synchronize served alone, or the query
   * (the rest are JavaScript's). */
  bool CheckEnding(Plan &p, uint32_t flags, const ring::Call &k, const uint8_t *args, uint32_t len) {
    if (k.ends == 0 || k.ends != flags || !Fits(k, len) || !Resolve(k, args, &p.ops)) return false;
    p.end = &k;
    p.endArgs = args;
    p.endLen = len;
    return true;
  }

  /** Whether job's wait would return at once: it has none, or its ready() says so within the inline wait. */
  static bool Ready(const Job &job) { return !job.wait || PollReady(job, InlineWaitNs()); }

  void Execute(Plan &p) {
    Job &j = p.job;
    switch (p.call->serves) {
      case ring::Serves::kQuery:
        // Not done yet is the call's answer (cudaErrorNotReady), as eventQuery's false is the device's.
        if (!RunEventQuery(j, p.ops.event) && j.rc == cu::kSuccess) j.rc = cu::kNotReady;
        break;
      case ring::Serves::kCopy:
        if (p.segs.empty()) break;
        if (p.call->data == ring::Data::kTo)
          RunCopyHtoD(j, p.ptr, p.segs, p.ops.stream);
        else
          RunCopyDtoH(j, p.segs, p.ptr, p.ops.stream);
        break;
      case ring::Serves::kLaunch:
      case ring::Serves::kBatch:
        // In order, each tried even after one failed, as the device's batches run them; the job keeps the first
        // failure.
        p.records.ctx = core_;
        for (size_t i = 0; i < posted_.size(); i++) {
          const Posted &w = posted_[i];
          if (w.serves == ring::Serves::kLaunch) {
            LaunchOne(j, w.header, w.params);
            continue;
          }
          // An event record or a cluster launch fails as its own entry, as JavaScript runs them (one at a
          // time, each awaited: batch.ts's Runner), where launches' failures are the session's async error.
          const bool clean = p.records.rc == cu::kSuccess;
          if (w.serves == ring::Serves::kClusterLaunch)
            LaunchOneEx(p.records, w.header, w.params, w.extras);
          else
            RunEventRecord(p.records, w.event, w.stream);
          if (clean && p.records.rc != cu::kSuccess) p.failedEntry = static_cast<int64_t>(i);
        }
        if (Launches() != 0) cursor_[kLaunched] = 1;
        break;
      default:
        break;  // a synchronize's run phase ran in the check
    }
    // A copy on an idle stream ends within microseconds; waited for here as a native program's cudaMemcpy does.
    if (j.wait) {
      Ready(j);
      j.wait(j);
    }
  }

  uint64_t session_ = 0;
  uint32_t *cursor_ = nullptr;
  Napi::ObjectReference cursorRef_;
  // The ring (attach), its memory kept alive by views_ and recordRef_.
  GuestRing ring_;
  std::vector<Napi::ObjectReference> views_;
  Napi::ObjectReference recordRef_;
  std::shared_ptr<CtxCore> core_;
  // What JavaScript told of the session (its tables are the truth; a miss here only sends the request there).
  std::map<uint64_t, uint64_t> allocs_;
  std::unordered_map<uint64_t, uint32_t> funcs_, streams_, events_;
  uint64_t localMemory_ = 0;  // bytes per thread (setLocalMemory)
  // Per request, reused.
  Chain chain_;
  std::vector<uint8_t> args_, batch_;
  std::vector<Posted> posted_;
  std::unique_ptr<Left> left_;
  // The GPU share gate (share()), on the table JavaScript mapped.
  std::unique_ptr<share::Gate> gate_;
  Napi::ObjectReference tableRef_;
};

}  // namespace

void InitRingServer(Napi::Env env, Napi::Object exports) { exports.Set("RingServer", RingServer::Define(env)); }

}  // namespace qcuda::cuda
