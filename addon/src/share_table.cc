// The GPU share table and its policy in C (share_table.h says why): each
// function here follows its namesake in backend/src/qcuda/share/, step for
// step and in the same floating-point order, so that both sides decide alike.
#include "share_table.h"

#include <errno.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace qcuda::share {
namespace {

/** How long an admission is good for before the table is read again (gate.ts RECHECK_NS). */
constexpr uint64_t kRecheckNs = 1000000;

/** JavaScript's Math.round, for the non-negative times the table holds. */
int64_t Round(double v) { return static_cast<int64_t>(std::floor(v + 0.5)); }

/** Whether a process of this pid exists (one of another user's counts). */
bool Alive(int64_t pid) {
  return pid > 0 && pid <= std::numeric_limits<pid_t>::max() &&
         (kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

double UsedBy(const VmView &v, double now, uint32_t busy) {
  double u = v.usage;
  for (double since : v.busySince) u += Charge(now - since, busy);
  return u;
}

double VirtualTime(const VmView &v, double now, uint32_t busy) {
  return UsedBy(v, now, busy) / std::max(1.0, v.weight);
}

const VmView *Find(uint32_t slot, const std::vector<VmView> &vms) {
  for (const VmView &v : vms)
    if (v.slot == slot) return &v;
  return nullptr;
}

}  // namespace

uint32_t BusyProcesses(const std::vector<VmView> &vms) {
  uint32_t n = 0;
  for (const VmView &v : vms) n += static_cast<uint32_t>(v.busySince.size());
  return n;
}

double Charge(double dtNs, uint32_t busy) { return dtNs > 0 ? dtNs / std::max<uint32_t>(1, busy) : 0; }

bool Wants(const VmView &v, double now, const Policy &p) {
  return !v.busySince.empty() || v.waiting > 0 || (v.lastSync > 0 && now - v.lastSync < p.gapNs);
}

bool BackFromIdle(double idleSince, double now, const Policy &p) {
  return idleSince == 0 || now - idleSince >= p.idleNs;
}

bool MayPost(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p, const Asker &asker) {
  return p.mps ? MayPostInVm(self, vms, now, p, asker) : MayPostAcrossVms(self, vms, now, p);
}

bool MayPostInVm(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p, const Asker &asker) {
  if (asker.busy) return true;
  const VmView *me = Find(self, vms);
  if (!me) return true;
  const double turn = me->turnSince;
  if (!me->busySince.empty() && now - turn < p.maxTurnNs) return false;
  const double first = me->firstWaiting;
  if (first == 0 || (asker.waitingSince != 0 && first >= asker.waitingSince)) return true;
  // The first in line has not taken the turn free since then: it is stopped.
  return me->busySince.empty() && now - std::max({me->lastSync, first, turn}) >= p.maxTurnNs;
}

bool MayPostAcrossVms(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p) {
  const VmView *me = Find(self, vms);
  if (!me) return true;
  const uint32_t busy = BusyProcesses(vms);
  const double mine = VirtualTime(*me, now, busy);
  for (const VmView &v : vms)
    if (v.slot != self && Wants(v, now, p) && !(mine <= VirtualTime(v, now, busy) + p.slackNs)) return false;
  return true;
}

double CatchUp(uint32_t self, const std::vector<VmView> &vms, double now, const Policy &p) {
  const VmView *me = Find(self, vms);
  if (!me) return 0;
  const uint32_t busy = BusyProcesses(vms);
  bool any = false;
  double lowest = std::numeric_limits<double>::infinity();
  for (const VmView &v : vms) {
    if (v.slot == self || !Wants(v, now, p)) continue;
    any = true;
    lowest = std::min(lowest, VirtualTime(v, now, busy));
  }
  if (!any) return me->usage;
  return std::max(me->usage, (lowest - p.slackNs) * std::max(1.0, me->weight));
}

// ---- the table ----

double Table::Get(uint64_t word) const { return static_cast<double>(__atomic_load_n(&w_[word], __ATOMIC_SEQ_CST)); }

void Table::Set(uint64_t word, double v) { __atomic_store_n(&w_[word], Round(v), __ATOMIC_SEQ_CST); }

void Table::AddUsage(uint32_t vm, double ns) {
  if (ns <= 0) return;
  __atomic_fetch_add(&w_[Vm(vm) + kVUsage], Round(ns), __ATOMIC_SEQ_CST);
  __atomic_fetch_add(&w_[Vm(vm) + kVUsed], Round(ns), __ATOMIC_SEQ_CST);
}

void Table::RaiseUsage(uint32_t vm, double ns) {
  int64_t *at = &w_[Vm(vm) + kVUsage];
  int64_t u = __atomic_load_n(at, __ATOMIC_SEQ_CST);
  while (static_cast<double>(u) < ns &&
         !__atomic_compare_exchange_n(at, &u, Round(ns), false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
}

std::vector<VmView> Table::Snapshot() const {
  std::map<uint32_t, VmView> vms;
  for (uint32_t s = 0; s < kVmSlots; s++) {
    const int64_t pid = static_cast<int64_t>(Get(Vm(s) + kVPid));
    if (pid == 0 || !Alive(pid)) continue;
    VmView v;
    v.slot = s;
    // As table.ts clampWeight: any process of the user can write it.
    v.weight = std::min(1000.0, std::max(1.0, Get(Vm(s) + kVWeight)));
    v.usage = Get(Vm(s) + kVUsage);
    vms.emplace(s, std::move(v));
  }
  const uint32_t top = static_cast<uint32_t>(std::min<double>(kProcSlots, std::max(0.0, Get(kHProcs))));
  for (uint32_t s = 0; s < top; s++) {
    const uint64_t at = Proc(s);
    const int64_t pid = static_cast<int64_t>(Get(at + kPPid));
    if (pid == 0) continue;
    auto it = vms.find(static_cast<uint32_t>(static_cast<int64_t>(Get(at + kPVm)) - 1));
    if (it == vms.end()) continue;
    const double since = Get(at + kPSince);
    const double waitingSince = Get(at + kPWaiting);
    const bool waiting = waitingSince != 0;
    // A worker ends by SIGKILL: one that was busy must not stay busy.
    if ((since > 0 || waiting) && !Alive(pid)) continue;
    if (since > 0) {
      it->second.busySince.push_back(since);
      const double turn = Get(at + kPTurn);
      // As table.ts: a process made busy without a turn started it when it became busy.
      it->second.turnSince = std::max(it->second.turnSince, turn != 0 ? turn : since);
    }
    if (waiting) {
      it->second.waiting++;
      const double first = it->second.firstWaiting;
      it->second.firstWaiting = first == 0 ? waitingSince : std::min(first, waitingSince);
    }
    it->second.lastSync = std::max(it->second.lastSync, Get(at + kPSynced));
  }
  std::vector<VmView> out;
  for (auto &e : vms) out.push_back(std::move(e.second));
  return out;
}

// ---- the gate ----

void Gate::ChargeTo(double now) {
  const uint64_t p = Table::Proc(proc_);
  const double since = t_.Get(p + kPSince);
  if (since == 0) return;
  t_.AddUsage(vm_, Charge(now - since, busy_));
  t_.Set(p + kPSince, now);
}

bool Gate::Decide(double now) {
  std::vector<VmView> vms = t_.Snapshot();
  busy_ = std::max<uint32_t>(1, BusyProcesses(vms));
  ChargeTo(now);
  for (VmView &me : vms) {
    if (me.slot != vm_) continue;
    if (!Wants(me, now, p_) && BackFromIdle(t_.Get(Table::Proc(proc_) + kPSynced), now, p_)) {
      me.usage = CatchUp(vm_, vms, now, p_);
      t_.RaiseUsage(vm_, me.usage);
    }
  }
  // C never waits: JavaScript does (Admit refuses while it does), so the asker here has not waited.
  return MayPost(vm_, vms, now, p_, Asker{t_.Get(Table::Proc(proc_) + kPSince) != 0, 0});
}

bool Gate::Admit(uint64_t now) {
  const uint64_t p = Table::Proc(proc_);
  // JavaScript waits on a post of this process: nothing overtakes it.
  if (t_.Get(p + kPWaiting) != 0) return false;
  const double n = static_cast<double>(now);
  // MPS mode (gate.ts #admit): a process with work on the GPU keeps posting unread; an idle one asks for its VM's turn.
  if (p_.mps) {
    if (t_.Get(p + kPSince) != 0) return true;
    if (!Decide(n)) return false;
    StartTurn(n);
    return true;
  }
  if (now < okUntil_ || Decide(n)) {
    if (now >= okUntil_) okUntil_ = now + kRecheckNs;
    if (t_.Get(p + kPSince) == 0) StartTurn(n);
    return true;
  }
  return false;
}

void Gate::Synced(uint64_t now) {
  const uint64_t p = Table::Proc(proc_);
  if (t_.Get(p + kPSince) == 0) return;
  const double n = static_cast<double>(now);
  ChargeTo(n);
  t_.Set(p + kPSince, 0);
  t_.Set(p + kPTurn, 0);
  t_.Set(p + kPSynced, n);
}

void Gate::StartTurn(double now) {
  const uint64_t p = Table::Proc(proc_);
  // Turn first, as table.ts startTurn: a reader that sees it busy sees since when.
  t_.Set(p + kPTurn, now);
  t_.Set(p + kPSince, now);
}

// ---- to JavaScript ----

namespace {

Napi::Object Words(Napi::Env env, std::initializer_list<std::pair<const char *, uint32_t>> words) {
  Napi::Object o = Napi::Object::New(env);
  for (const auto &w : words) o.Set(w.first, w.second);
  return o;
}

Napi::Object Layout(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("magic", Napi::Number::New(env, static_cast<double>(kMagic)));
  o.Set("headerWords", kHeaderWords);
  o.Set("vmSlots", kVmSlots);
  o.Set("vmWords", kVmWords);
  o.Set("procSlots", kProcSlots);
  o.Set("procWords", kProcWords);
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(kBytes)));
  o.Set("header", Words(env, {{"magic", kHMagic}, {"procs", kHProcs}}));
  o.Set("vm", Words(env, {{"pid", kVPid}, {"weight", kVWeight}, {"usage", kVUsage}, {"used", kVUsed}}));
  o.Set("proc", Words(env, {{"pid", kPPid},
                            {"vm", kPVm},
                            {"since", kPSince},
                            {"waiting", kPWaiting},
                            {"synced", kPSynced},
                            {"turn", kPTurn}}));
  return o;
}

double Num(const Napi::Object &o, const char *key) { return o.Get(key).ToNumber().DoubleValue(); }

/** policy.ts VmView[] -> VmView. */
std::vector<VmView> ViewsOf(const Napi::Value &v) {
  Napi::Array list = v.As<Napi::Array>();
  std::vector<VmView> out;
  for (uint32_t i = 0; i < list.Length(); i++) {
    Napi::Object o = list.Get(i).As<Napi::Object>();
    VmView x;
    x.slot = static_cast<uint32_t>(Num(o, "slot"));
    x.weight = Num(o, "weight");
    x.usage = Num(o, "usage");
    Napi::Array busy = o.Get("busySince").As<Napi::Array>();
    for (uint32_t k = 0; k < busy.Length(); k++) x.busySince.push_back(busy.Get(k).ToNumber().DoubleValue());
    x.waiting = static_cast<uint32_t>(Num(o, "waiting"));
    // Optional in policy.ts (absent while none waits).
    if (Napi::Value f = o.Get("firstWaiting"); !f.IsUndefined()) x.firstWaiting = f.ToNumber().DoubleValue();
    x.lastSync = Num(o, "lastSync");
    if (Napi::Value t = o.Get("turnSince"); !t.IsUndefined()) x.turnSince = t.ToNumber().DoubleValue();
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace

Policy PolicyOf(const Napi::Object &o) {
  return Policy{Num(o, "slackNs"), Num(o, "maxWaitNs"),      Num(o, "idleNs"),
                Num(o, "gapNs"),   o.Get("mps").ToBoolean(), Num(o, "maxTurnNs")};
}

namespace {

/** policy.ts Asker, or a fresh one where absent. */
Asker AskerOf(const Napi::Value &v) {
  if (!v.IsObject()) return Asker{};
  Napi::Object o = v.As<Napi::Object>();
  return Asker{o.Get("busy").ToBoolean(), Num(o, "waitingSince")};
}

}  // namespace

void InitShare(Napi::Env env, Napi::Object exports) {
  exports.Set("shareLayout", Layout(env));
  // (self, vms, now, policy[, asker]), as policy.ts's: for the tests that hold the two to the same answers.
  Napi::Object policy = Napi::Object::New(env);
  policy.Set("mayPost", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
               return Napi::Boolean::New(info.Env(), MayPost(info[0].ToNumber().Uint32Value(), ViewsOf(info[1]),
                                                             info[2].ToNumber().DoubleValue(),
                                                             PolicyOf(info[3].As<Napi::Object>()), AskerOf(info[4])));
             }));
  policy.Set("catchUp", Napi::Function::New(env, [](const Napi::CallbackInfo &info) {
               return Napi::Number::New(
                   info.Env(), CatchUp(info[0].ToNumber().Uint32Value(), ViewsOf(info[1]),
                                       info[2].ToNumber().DoubleValue(), PolicyOf(info[3].As<Napi::Object>())));
             }));
  exports.Set("sharePolicy", policy);
}

}  // namespace qcuda::share
