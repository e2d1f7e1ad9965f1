// RingPlanner (ring_plan.h): a request of the ring server checked against
// the table's row and the session's tables, and run.
#include "ring_plan.h"

#include <cstddef>
#include <cstring>

namespace qcuda::cuda {
namespace {

/** Largest integer JavaScript's checks hold exactly (virtio-device.ts: MAX_SAFE_BIG). */
constexpr uint64_t kMaxSafe = (1ull << 53) - 1;
constexpr size_t kReq = sizeof(qcuda_req_hdr), kResp = sizeof(qcuda_resp_hdr);

// LAUNCH_EX's struct begins as LAUNCH's: one check serves both.
static_assert(offsetof(qcuda_args_launch_ex, param_bytes) == offsetof(qcuda_args_launch, param_bytes) &&
                  offsetof(qcuda_args_launch_ex, cluster) == sizeof(qcuda_args_launch),
              "qcuda_args_launch_ex extends qcuda_args_launch");
static_assert(ring::MaxData() <= kMaxInlinePageableCopy, "a copy served here may be from pageable guest RAM");

bool NoData(const qcuda_req_hdr &h) { return h.data_len == 0 && h.data_offset == 0; }

/** Whether len argument bytes are what call k takes: its struct's, or at least those where more may follow. */
bool Fits(const ring::Call &k, uint64_t len) { return k.varArgs ? len >= k.args : len == k.args; }

uint64_t U64At(const uint8_t *args, uint32_t offset) {
  uint64_t v;
  std::memcpy(&v, args + offset, sizeof v);
  return v;
}

/** The context's id behind the session's handle h in table m; false if JavaScript told of none. */
bool IdOf(const std::unordered_map<uint64_t, uint32_t> &m, uint64_t h, uint32_t *id) {
  auto it = m.find(h);
  if (it == m.end()) return false;
  *id = it->second;
  return true;
}

/** Whether job's wait would return at once: it has none, or its ready() says so within the inline wait. */
bool Ready(const Job &job) { return !job.wait || PollReady(job, InlineWaitNs()); }

}  // namespace

// ---- what JavaScript tells of the session

void RingPlanner::SetAlloc(uint64_t base, uint64_t size) {
  if (size == 0)
    allocs_.erase(base);
  else
    allocs_[base] = size;
}

void RingPlanner::SetId(ring::Kind k, uint64_t h, uint32_t id) {
  auto &m = ids_[static_cast<int>(k)];
  if (id == 0)
    m.erase(h);
  else
    m[h] = id;
}

void RingPlanner::Clear() {
  localMemory_ = 0;
  allocs_.clear();
  for (auto &m : ids_) m.clear();
}

// ---- the request (virtio-device.ts: #dispatch, then the command's checks)

/** The session's stream behind handle h (0: the NULL stream); false if it is not one JavaScript told of. */
bool RingPlanner::StreamOf(uint64_t h, uint32_t *id) const {
  if (h == QCUDA_STREAM_LEGACY || h == QCUDA_STREAM_PER_THREAD) {
    *id = 0;
    return true;
  }
  return IdOf(ids_[static_cast<int>(ring::Kind::kStream)], h, id);
}

/** [ptr, ptr+size) inside one allocation (Session.checkRange, allocations only: mappings and symbols take the
 * JavaScript path). */
bool RingPlanner::InAlloc(uint64_t ptr, uint64_t size) const {
  if (size == 0) return true;
  auto it = allocs_.upper_bound(ptr);
  if (it == allocs_.begin()) return false;
  --it;
  return ptr - it->first < it->second && size <= it->second - (ptr - it->first);
}

/** Whether stream id has nothing left to do (a call on it would not wait behind other work). */
bool RingPlanner::StreamIdle(uint32_t id) const {
  cu::Stream s = nullptr;
  if (id != 0) {
    auto it = core_->streams.find(id);
    if (it == core_->streams.end()) return false;
    s = it->second;
  }
  return cu::api().StreamQuery(s) == cu::kSuccess;
}

/**
 * The request at the chain, checked as the dispatcher (virtio-device.ts) and the
 * call's own checks would take it: only a call of the table (ring_calls.h),
 * sent on its own, with its argument bytes, no data unless it moves some
 * (then checked by its kind), its handles the session's and its range in
 * one of its allocations; then what its kind checks.
 */
bool RingPlanner::Check(const Chain &c, Plan &p) {
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
      return CheckCopy(c, p, h);
    case ring::Serves::kLaunch:
      posted_.clear();
      return PlanPosted(*k, args_.data(), h.len) && Backlog(1);
    case ring::Serves::kBatch:
      return CheckBatch(c, p, h);
    default:
      return false;  // the rest only in a batch (RingDecl.batchOnly)
  }
}

/** Each handle argument of call k (in args, which Fits k) one of the session's, as the context's id in o. */
bool RingPlanner::Resolve(const ring::Call &k, const uint8_t *args, Operands *o) const {
  for (const ring::Handle &h : k.handles) {
    if (h.kind == ring::Kind::kNone) continue;
    const uint64_t v = U64At(args, h.offset);
    const auto &ids = ids_[static_cast<int>(h.kind)];
    const bool known = h.kind == ring::Kind::kStream  ? StreamOf(v, &o->stream)
                       : h.kind == ring::Kind::kEvent ? IdOf(ids, v, &o->event)
                                                      : IdOf(ids, v, &o->func);
    if (!known) return false;
  }
  return true;
}

/**
 * The run phase of synchronize k (of the device, or p's stream or event,
 * as its handle says); true if its wait would return at once, polled for
 * the inline wait (the wait itself is the caller's to run).
 */
bool RingPlanner::Sync(Plan &p, const ring::Call &k) {
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

/** A synchronize: only once what it waits for is done (polled for the inline wait); its wait then returns at once. */
bool RingPlanner::CheckSync(Plan &p) {
  if (!Sync(p, *p.call)) return false;
  p.flushes = true;
  return true;
}

/** A copy (data to or from the device) of at most the declared bytes, on an idle stream. */
bool RingPlanner::CheckCopy(const Chain &c, Plan &p, const qcuda_req_hdr &h) {
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
  p.segs = p.job.env->given.Resolve(p.segs);
  if (!StreamIdle(p.ops.stream)) return false;
  p.dataOut = dataOut;
  return true;
}

/** Posted work of call k (a launch, a cluster launch or an event record; its argument bytes args) checked as
 * JavaScript checks it, and added to posted_. */
bool RingPlanner::PlanPosted(const ring::Call &k, uint8_t *args, uint32_t len) {
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
bool RingPlanner::PlanCluster(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o) {
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

/**
 * A kernel launch of call k whose struct (k.args long, beginning as
 * qcuda_args_launch) and parameters are args (its function and stream in
 * o): its parameter size and dimensions checked, and that its local memory
 * is what JavaScript counted (setLocalMemory: one needing more per thread
 * makes the driver grow it for every resident thread, which JavaScript
 * charges to the quota or refuses: security review 3, N3); added to posted_.
 */
bool RingPlanner::PlanKernel(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o,
                             const LaunchExtras &x) {
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

/** Launches among posted_. */
uint64_t RingPlanner::Launches() const {
  uint64_t n = 0;
  for (const Posted &w : posted_) n += w.serves == ring::Serves::kLaunch || w.serves == ring::Serves::kClusterLaunch;
  return n;
}

/** n more launches stay below the launch bound: cuLaunchKernel blocks once the GPU's launch queue is full, not here
 * (Context::LaunchWhere). */
bool RingPlanner::Backlog(uint64_t n) const {
  return core_->launchesRun.load() - core_->launchesDone.load() + n <= kInlineLaunchBound;
}

/**
 * BATCH (commands/batch.ts: parseBatch's framing): served only when every
 * posted entry is one PlanPosted takes and the ending synchronize or query,
 * if any, is one EndBatch runs; otherwise all of it is left to JavaScript.
 */
bool RingPlanner::CheckBatch(const Chain &c, Plan &p, const qcuda_req_hdr &h) {
  qcuda_args_batch a;
  std::memcpy(&a, args_.data(), sizeof a);
  if (a.flags != 0 && a.flags != QCUDA_BATCH_ENDS_SYNC && a.flags != QCUDA_BATCH_ENDS_QUERY) return false;
  const bool ends = a.flags != 0;
  if (a.bytes > QCUDA_MAX_BATCH || h.data_offset != 0 || h.data_len != a.bytes || (ends && a.count == 0)) return false;
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
bool RingPlanner::CheckEnding(Plan &p, uint32_t flags, const ring::Call &k, const uint8_t *args, uint32_t len) {
  if (k.ends == 0 || k.ends != flags || !Fits(k, len) || !Resolve(k, args, &p.ops)) return false;
  p.end = &k;
  p.endArgs = args;
  p.endLen = len;
  return true;
}

// ---- the run

bool RingPlanner::Execute(Plan &p) {
  Job &j = p.job;
  bool launched = false;
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
      launched = Launches() != 0;
      break;
    default:
      break;  // a synchronize's run phase ran in the check
  }
  // A copy on an idle stream ends within microseconds; waited for here as a native program's cudaMemcpy does.
  if (j.wait) {
    Ready(j);
    j.wait(j);
  }
  return launched;
}

bool RingPlanner::EndBatch(Plan &p) {
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

Napi::Array RingCallTable(Napi::Env env) {
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

}  // namespace qcuda::cuda
