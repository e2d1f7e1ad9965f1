// The GPU compute share between VMs (issue 36): who may post more work now.
// Pure: it reads a snapshot of the shared table (table.ts) and decides;
// nothing here touches a file, a clock or a process.
//
// The model. The driver time-slices the contexts that have work on the GPU,
// so while P processes (of all VMs) are busy each gets about 1/P of it. A
// process busy for dt is charged dt / P of GPU time, to its VM; a VM's
// virtual time is what it was charged over its weight. A process may post
// more work only while its VM's virtual time is within SLACK of the lowest
// among the other VMs that want the GPU (busy or waiting to post): a VM
// ahead of its weighted share waits until the others catch up, whatever
// the number of processes it runs (they all charge the same VM). A VM idle
// for a while (Policy.idleNs) banks no credit: it comes back at most the
// slack behind the lowest virtual time of the others (catchUp); one busy
// again at once keeps what it is owed.
//
// Posted work cannot be taken back: a kernel already on the GPU runs on.
// What a VM's busy processes have used since they were last charged is
// counted by everyone reading the table (pending), so a VM running one long
// kernel falls behind no one: its virtual time grows while the kernel runs,
// and others are let through. A wait is bounded (Policy.maxWaitNs): a VM
// that says it wants the GPU and never takes it (a process stopped in a
// debugger, one that died between the table's updates) cannot hold the
// others back for longer than that per post.
//
// MPS mode (--gpu-share-mps, Policy.mps; mps.ts) decides otherwise. MPS
// already confines each VM to its part of the SMs, so holding a VM back
// because another is behind only leaves its part idle (measured: the
// aggregate fell to 0.73). But MPS caps each client, that is each process,
// not each VM: a VM of 8 processes would get 8 clients' worth. So a VM's
// processes take turns on its one cap (mayPostInVm): a process holds the
// turn from its first post until it synchronizes; another may post only
// while none holds it, and the first of them to wait goes first. Other VMs
// are never waited for. What bounds a wait here is the turn, not the wait:
// eight processes whose turns take 67 ms each wait 470 ms for their next,
// and a bound on the wait (100 ms) let them all run at once again
// (measured: the 8-process VM got 0.54 of the GPU for 0.25). A turn held
// longer than maxTurnNs (a process that never synchronizes) lets the next
// in line go beside it, one more each maxTurnNs; a first in line that does
// not take a free turn for maxTurnNs (a stopped process) lets the others
// past. Two processes of a VM that decide at the same moment may both
// start (the table has no lock): the VM has two clients' worth until one
// synchronizes.

/** One VM as the table shows it at one moment. */
export interface VmView {
  /** Its slot in the table: its id while it runs. */
  slot: number;
  /** Its weight, 1 and up. */
  weight: number;
  /** GPU time it was charged, ns (each busy interval over the busy processes of all VMs meanwhile). */
  usage: number;
  /** Its processes with work on the GPU now, each with when it was last charged (ns, the table's clock). */
  busySince: number[];
  /** Its processes waiting to post work now. */
  waiting: number;
  /** When the first of its waiting processes began to wait (ns); absent or 0 while none waits. */
  firstWaiting?: number;
  /** When a process of it last synchronized (ns; 0: never): a VM between two jobs still wants the GPU. */
  lastSync: number;
  /** When the latest turn of its busy processes began (ns); absent or 0 while none is busy (MPS mode). */
  turnSince?: number;
}

export interface Policy {
  /** How far (ns of virtual time) a VM may run ahead of the lowest before it waits. */
  slackNs: number;
  /** The longest one post waits for the others to catch up. */
  maxWaitNs: number;
  /** How long a VM wants nothing before it counts as back from idle when it posts again (catchUp). */
  idleNs: number;
  /**
   * How long after a synchronize a VM still counts as wanting the GPU: the
   * host's time between one job and the next. Longer, and a VM that uses
   * little (a latency tenant between its steps) would hold the others back
   * from a GPU it leaves idle.
   */
  gapNs: number;
  /** MPS mode: no admission across VMs; a VM's processes take turns (mayPostInVm). */
  mps?: boolean;
  /** MPS mode: how long a turn may be held before the next in line goes beside it. */
  maxTurnNs: number;
}

/** The process that asks to post, as its gate knows it: busy now, and since when it waits (0: it does not). */
export interface Asker {
  busy: boolean;
  waitingSince: number;
}

/** A process that has nothing on the GPU and has not waited yet. */
export const FRESH: Asker = { busy: false, waitingSince: 0 };

export const DEFAULT_POLICY: Policy = { slackNs: 4e6, maxWaitNs: 100e6, idleNs: 20e6, gapNs: 1e6, maxTurnNs: 100e6 };

/** Whether a process that went idle at `idleSince` (0: never busy yet) and posts at `now` comes back from idle. */
export function backFromIdle(idleSince: number, now: number, p: Policy = DEFAULT_POLICY): boolean {
  return idleSince === 0 || now - idleSince >= p.idleNs;
}

/** The most weight a VM may have: shares of 1 to 1000 say everything needed. */
export const MAX_WEIGHT = 1000;

/** A --gpu-share value: an integer weight from 1 to MAX_WEIGHT, or an error that says why not. */
export function parseWeight(s: string): number {
  if (!/^[0-9]+$/.test(s) || +s < 1 || +s > MAX_WEIGHT)
    throw new Error(`--gpu-share=${s}: a weight must be an integer from 1 to ${MAX_WEIGHT}`);
  return +s;
}

/** Processes busy now, all VMs together (P above). */
export function busyProcesses(vms: readonly VmView[]): number {
  return vms.reduce((n, v) => n + v.busySince.length, 0);
}

/** What one process busy for dt ns is charged while `busy` processes (itself included) are busy. */
export function charge(dtNs: number, busy: number): number {
  return dtNs > 0 ? dtNs / Math.max(1, busy) : 0;
}

/** GPU time a VM has used up to `now`: what it was charged, and what its busy processes have used since. */
export function usedBy(v: VmView, now: number, busy: number): number {
  return v.busySince.reduce((u, since) => u + charge(now - since, busy), v.usage);
}

/** Its virtual time: what it used over its weight. */
export function virtualTime(v: VmView, now: number, busy: number): number {
  return usedBy(v, now, busy) / Math.max(1, v.weight);
}

/** Whether a VM wants the GPU now: a process of it is busy or waiting to post, or synchronized within gapNs (it is between two jobs). */
export function wants(v: VmView, now: number, p: Policy = DEFAULT_POLICY): boolean {
  return v.busySince.length > 0 || v.waiting > 0 || (v.lastSync > 0 && now - v.lastSync < p.gapNs);
}

/**
 * Whether process `asker` of VM `self` may post work now: under MPS mode as
 * mayPostInVm says, else as mayPostAcrossVms says.
 */
export function mayPost(self: number, vms: readonly VmView[], now: number, p: Policy = DEFAULT_POLICY, asker: Asker = FRESH): boolean {
  return p.mps === true ? mayPostInVm(self, vms, now, p, asker) : mayPostAcrossVms(self, vms, now, p);
}

/**
 * MPS mode: whether process `asker` of VM `self` may post now: it holds
 * its VM's turn already; or no turn younger than maxTurnNs is held and it
 * is first in line (or the first in line let a free turn pass for
 * maxTurnNs). True also where the VM is not in the table.
 */
export function mayPostInVm(self: number, vms: readonly VmView[], now: number, p: Policy, asker: Asker): boolean {
  if (asker.busy) return true;
  const me = vms.find((v) => v.slot === self);
  if (!me) return true;
  const turn = me.turnSince ?? 0;
  if (me.busySince.length > 0 && now - turn < p.maxTurnNs) return false;
  const first = me.firstWaiting ?? 0;
  if (first === 0 || (asker.waitingSince !== 0 && first >= asker.waitingSince)) return true;
  // The first in line has not taken the turn free since then: it is stopped.
  return me.busySince.length === 0 && now - Math.max(me.lastSync, first, turn) >= p.maxTurnNs;
}

/**
 * Whether a process of VM `self` may post work now: its VM is not more than
 * the slack ahead of every other VM that wants the GPU. True also where
 * the VM is not in the table (nothing to compare against).
 */
export function mayPostAcrossVms(self: number, vms: readonly VmView[], now: number, p: Policy = DEFAULT_POLICY): boolean {
  const me = vms.find((v) => v.slot === self);
  if (!me) return true;
  const busy = busyProcesses(vms);
  const mine = virtualTime(me, now, busy);
  return vms.every((v) => v.slot === self || !wants(v, now, p) || mine <= virtualTime(v, now, busy) + p.slackNs);
}

/**
 * The usage a VM that wants the GPU again after idling (or that just
 * joined) should restart from: no further than the slack below the lowest
 * virtual time of the VMs that want it now, so that time spent idle is not
 * credit to spend at once, in a burst the others wait behind. Only for
 * a VM back from idle (backFromIdle): one between two of its jobs keeps
 * what it is owed. Its own usage where it is not that far behind, or where
 * no other VM wants the GPU.
 */
export function catchUp(self: number, vms: readonly VmView[], now: number, p: Policy = DEFAULT_POLICY): number {
  const me = vms.find((v) => v.slot === self);
  if (!me) return 0;
  const busy = busyProcesses(vms);
  const others = vms.filter((v) => v.slot !== self && wants(v, now, p)).map((v) => virtualTime(v, now, busy));
  if (others.length === 0) return me.usage;
  return Math.max(me.usage, (Math.min(...others) - p.slackNs) * Math.max(1, me.weight));
}

/** Each VM's share of the GPU time used between two snapshots (by slot), and the share its weight asks for among the VMs present. */
export function shares(
  before: readonly VmView[],
  after: readonly VmView[],
  now: number,
): Map<number, { used: number; share: number; target: number }> {
  const busy = busyProcesses(after);
  const was = new Map(before.map((v) => [v.slot, v.usage]));
  const used = after.map((v) => ({ v, used: Math.max(0, usedBy(v, now, busy) - (was.get(v.slot) ?? 0)) }));
  const total = used.reduce((n, u) => n + u.used, 0);
  const weights = after.reduce((n, v) => n + Math.max(1, v.weight), 0);
  return new Map(
    used.map(({ v, used: u }) => [v.slot, { used: u, share: total > 0 ? u / total : 0, target: Math.max(1, v.weight) / weights }]),
  );
}
