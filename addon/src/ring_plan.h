// What a request must be for the ring server (cuda_ring_server.cc) to answer
// it in C, and its run. The server hands a walked chain to RingPlanner,
// which serves it only when it can tell, before doing anything, that the
// JavaScript path would serve it the same way and at once:
//  - the call is one of the table (ring_calls.h, generated from the calls'
//    declarations: RingDecl in backend/src/qcuda/wire/protocol.ts), which
//    says how each is served and what is checked of it; its header and
//    arguments, copied out of guest memory once, pass the dispatcher's
//    checks (qcuda/virtio-device.ts) and the command's, as the row has them: its
//    argument bytes, no data unless it moves some, its handles the session's
//    functions, streams and events and its range in one of its allocations
//    (the tables JavaScript keeps the server told of: SetAlloc, SetId);
//  - the call cannot block for long: a synchronize (of the device, a stream
//    or an event) only once what it waits for is done (polled for the
//    inline wait), a copy of at most its declared maxData bytes only on an
//    idle stream (from pinned memory, or pageable guest RAM, which the
//    driver stages at once at that size: kMaxInlinePageableCopy), a launch
//    only below the launch bound (kInlineLaunchBound); a query never waits.
// The calls run through the same run phases as the context's methods
// (RunSynchronize, RunStreamSynchronize, RunEventRecord, RunEventSynchronize,
// RunEventQuery, RunCopyHtoD, RunCopyDtoH, LaunchOne, LaunchOneEx).
//
// A BATCH (commands/batch.ts) is served when each posted entry is a call the
// table serves posted (a launch checked as one alone, a cluster launch
// checked as JavaScript checks it, an event record of the session's event
// and stream), there are at most kInlineBatchLaunches of them (the device's
// own bound for launching on the JS thread), and its ending, if any, is a
// call the table serves as the ending its flags say: a synchronize served
// alone (QCUDA_BATCH_ENDS_SYNC) or a query (QCUDA_BATCH_ENDS_QUERY). Its
// entries run in order (Execute); the ending runs after them (EndBatch):
// the synchronize waits for the inline wait, the query does not wait.
#pragma once
#include <napi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "cuda_args.h"
#include "cuda_context.h"
#include "guest_ring.h"
#include "qcuda_proto.h"
#include "ring_calls.h"

namespace qcuda::cuda {

/** Posted work checked and ready to run: a launch (its parameters in the planner's copy of the request; a cluster
 * launch's cluster and flags in extras) or an event record. */
struct Posted {
  ring::Serves serves;
  LaunchHeader header;
  uint8_t *params;
  uint32_t event, stream;
  LaunchExtras extras;
};

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
  // A batch's ending synchronize or query (nullptr: none) and its argument bytes in the planner's copy (its operands
  // in ops).
  const ring::Call *end = nullptr;
  const uint8_t *endArgs = nullptr;
  uint32_t endLen = 0;
};

class RingPlanner {
 public:
  explicit RingPlanner(uint64_t session) : session_(session) {}

  // What JavaScript tells of the session (its tables are the truth; a miss here only sends the request there).
  void Bind(std::shared_ptr<CtxCore> core) { core_ = std::move(core); }
  const std::shared_ptr<CtxCore> &core() const { return core_; }
  /** The session's allocation at base is size bytes long (0: gone). */
  void SetAlloc(uint64_t base, uint64_t size);
  /** The session's handle h of kind k is the context's object id (0: gone). */
  void SetId(ring::Kind k, uint64_t h, uint32_t id);
  /** The context's per-thread local memory counted in the quota. */
  void SetLocalMemory(uint64_t bytes) { localMemory_ = bytes; }
  void Clear();

  /** The request in chain c checked, and what to run and answer in p (p.job's ctx and env set); false: JavaScript's.
   * A synchronize's run phase runs here. */
  bool Check(const Chain &c, Plan &p);
  /** Runs the checked call p; true if it launched a kernel. */
  bool Execute(Plan &p);
  /** A batch's ending call, once its posted work ran: true (its outcome in p.job) if it returned within the inline
   * wait, as a query always does (not done yet is its answer, cudaErrorNotReady; the reply's value, posted work's
   * failure, is 0: one that failed is left to JavaScript). */
  bool EndBatch(Plan &p);

 private:
  bool StreamOf(uint64_t h, uint32_t *id) const;
  bool InAlloc(uint64_t ptr, uint64_t size) const;
  bool StreamIdle(uint32_t id) const;
  bool Resolve(const ring::Call &k, const uint8_t *args, Operands *o) const;
  bool Sync(Plan &p, const ring::Call &k);
  bool CheckSync(Plan &p);
  bool CheckCopy(const Chain &c, Plan &p, const qcuda_req_hdr &h);
  bool PlanPosted(const ring::Call &k, uint8_t *args, uint32_t len);
  bool PlanCluster(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o);
  bool PlanKernel(const ring::Call &k, uint8_t *args, uint64_t len, const Operands &o, const LaunchExtras &x);
  bool LocalCounted(const CtxCore::Fn &f) const { return f.localBytes <= localMemory_; }
  uint64_t Launches() const;
  bool Backlog(uint64_t n) const;
  bool CheckBatch(const Chain &c, Plan &p, const qcuda_req_hdr &h);
  bool CheckEnding(Plan &p, uint32_t flags, const ring::Call &k, const uint8_t *args, uint32_t len);

  const uint64_t session_;
  std::shared_ptr<CtxCore> core_;
  std::map<uint64_t, uint64_t> allocs_;
  // The session's handles and the context's ids, by ring::Kind (kNone's unused).
  std::unordered_map<uint64_t, uint32_t> ids_[4];
  uint64_t localMemory_ = 0;  // bytes per thread
  // Per request, reused.
  std::vector<uint8_t> args_, batch_;
  std::vector<Posted> posted_;
};

/** The table this addon was built with (ring_calls.h), as the test of its declaration reads it (RingServer.CALLS;
 * enums as numbers, offsets in bytes). */
Napi::Array RingCallTable(Napi::Env env);

}  // namespace qcuda::cuda
