// The GPU share table and its policy (issue 36), for the ring server: the
// same table the backends map (backend/src/qcuda/share/table.ts) and the
// same decisions (share/policy.ts, share/gate.ts), so that a worker's
// launches, copies and batches served in C wait their VM's turn as the ones
// JavaScript serves do. The layout is declared here only: qcuda_sys exports
// it (shareLayout) and table.ts takes its offsets from there.
//
// A process's gate state lives in its process slot (busy since, last
// synchronized), not in either side's memory: the worker's JavaScript gate
// and its ring server run on one thread and take turns on the same words.
#pragma once
#include <napi.h>

#include <cstdint>
#include <vector>

namespace qcuda::share {

constexpr int64_t kMagic = 0x71637368;  // "qcsh"
constexpr uint32_t kHeaderWords = 8;
/** VMs one GPU's table holds. */
constexpr uint32_t kVmSlots = 64;
constexpr uint32_t kVmWords = 8;
/** Processes (workers, backends) with work to post, all VMs together. */
constexpr uint32_t kProcSlots = 1024;
constexpr uint32_t kProcWords = 6;
constexpr uint64_t kWords = kHeaderWords + kVmSlots * kVmWords + kProcSlots * kProcWords;
constexpr uint64_t kBytes = (kWords * 8 + 4095) / 4096 * 4096;

// Header words. kHProcs: one more than the highest process slot ever taken (readers look no further).
enum HeaderWord : uint32_t { kHMagic = 0, kHProcs = 1 };
// A VM slot's words. kVUsage: what the policy counts (raised on a return from idle);
// kVUsed: the GPU time it was charged, only ever added to (what status reports).
enum VmWord : uint32_t { kVPid = 0, kVWeight = 1, kVUsage = 2, kVUsed = 3 };
// A process slot's words. kPVm: the VM's slot + 1 (0: none); kPSince: busy since (ns), 0 idle;
// kPWaiting: while it waits to post, since when (ns, at least 1), 0 not waiting; kPSynced: when it last synchronized
// (ns), 0 never; kPTurn: when its busy time began (its turn, under MPS mode), 0 idle.
enum ProcWord : uint32_t { kPPid = 0, kPVm = 1, kPSince = 2, kPWaiting = 3, kPSynced = 4, kPTurn = 5 };

/** One VM as the table shows it at one moment (policy.ts VmView). Times in ns, as doubles: JavaScript's numbers. */
struct VmView {
  uint32_t slot = 0;
  double weight = 1;
  double usage = 0;
  std::vector<double> busySince;
  uint32_t waiting = 0;
  /** When the first of its waiting processes began to wait; 0 while none waits. */
  double firstWaiting = 0;
  double lastSync = 0;
  /** When the latest turn of its busy processes began; 0 while none is busy. */
  double turnSince = 0;
};

struct Policy {
  double slackNs = 4e6, maxWaitNs = 100e6, idleNs = 20e6, gapNs = 1e6;
  /** MPS mode: no admission across VMs; a VM's processes take turns (MayPostInVm). */
  bool mps = false;
  /** MPS mode: how long a turn may be held before the next in line goes beside it. */
  double maxTurnNs = 100e6;
};

/** The process that asks to post (policy.ts Asker): busy now, and since when it waits (0: it does not). */
struct Asker {
  bool busy = false;
  double waitingSince = 0;
};

// The policy, as share/policy.ts has it (test/qcuda/share-native.test.ts runs both on the same inputs).
uint32_t BusyProcesses(const std::vector<VmView> &vms);
double Charge(double dtNs, uint32_t busy);
bool Wants(const VmView &v, double now, const Policy &p);
bool BackFromIdle(double idleSince, double now, const Policy &p);
bool MayPost(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p, const Asker &asker = {});
bool MayPostInVm(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p, const Asker &asker);
bool MayPostAcrossVms(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p);
double CatchUp(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p);

/** The table's words, mapped by JavaScript (ShareTable.words); every access atomic. */
class Table {
 public:
  explicit Table(int64_t *words) : w_(words) {}
  /** The live VMs and their processes' state (table.ts snapshot). */
  std::vector<VmView> Snapshot() const;
  void AddUsage(uint32_t vm, double ns);
  void RaiseUsage(uint32_t vm, double ns);
  double Get(uint64_t word) const;
  void Set(uint64_t word, double v);
  static uint64_t Vm(uint32_t slot) { return kHeaderWords + static_cast<uint64_t>(slot) * kVmWords; }
  static uint64_t Proc(uint32_t slot) {
    return kHeaderWords + kVmSlots * kVmWords + static_cast<uint64_t>(slot) * kProcWords;
  }

 private:
  int64_t *w_;
};

/** One process's admission (gate.ts ShareGate), minus the wait: a post that may not go now is JavaScript's to wait for.
 */
class Gate {
 public:
  Gate(int64_t *words, uint32_t vm, uint32_t proc, Policy p) : t_(words), vm_(vm), proc_(proc), p_(p) {}
  /** Before a post at now: true (the process is busy from now) where the VM may post, false where it must wait. */
  bool Admit(uint64_t now);
  /** A synchronizing call returned: the process is charged and idle. */
  void Synced(uint64_t now);

 private:
  bool Decide(double now);
  void ChargeTo(double now);
  void StartTurn(double now);
  Table t_;
  uint32_t vm_, proc_;
  Policy p_;
  uint64_t okUntil_ = 0;
  uint32_t busy_ = 1;
};

/** A policy.ts Policy (a JavaScript object) as the C one: the ring server's share() and the tests'. */
Policy PolicyOf(const Napi::Object &o);

/** qcuda_sys's exports: shareLayout (the offsets table.ts uses) and sharePolicy (mayPost, catchUp: for the tests). */
void InitShare(Napi::Env env, Napi::Object exports);

}  // namespace qcuda::share
