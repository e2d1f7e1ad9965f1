// Admission of GPU work for one process serving a VM (a session's worker,
// or the backend where it runs sessions itself), under --gpu-share
// (issue 36). Before a command that posts work (a launch, a copy, a batch)
// runs, the VM must not be ahead of its weighted share (policy.ts
// mayPost); if it is, the command, and every command of this process after
// it, waits until it is not, or Policy.maxWaitNs has passed (under MPS mode:
// until its VM's turn is free and it is first in line, policy.ts
// mayPostInVm, which bounds the turn rather than the wait). The process is
// busy (charged, table.ts) from its first posted work until a synchronizing
// command returns. That state (busy since, last synchronized) is kept in the
// process's slot of the table, not here: in a worker the ring server
// (addon/src/cuda_ring_server.cc) admits and charges the posts it serves in
// C on the same words, taking turns with this gate on the one JS thread, and
// hands a post that must wait to this gate.
//
// The backend joins the table (joinShare) and tells its workers where it
// is through the environment they inherit: QCUDA_GPU_SHARE=<VM slot>:<path>,
// or <VM slot>,mps:<path> under MPS mode.
// Without it there is no gate: commands run as before, at the cost of one
// test of an undefined.
import { DEFAULT_POLICY, backFromIdle, busyProcesses, catchUp, charge, mayPost, wants, type Policy, type VmView } from './policy';
import { ShareTable, clockNs } from './table';

/** The environment variable a backend's processes find their VM's place in the table by. */
export const SHARE_ENV = 'QCUDA_GPU_SHARE';
/** How long an admission is good for before the table is read again: reading it costs microseconds, a launch about one. */
export const RECHECK_NS = 1e6;
/** How often a waiting post looks at the table again. */
const POLL_MS = 1;

export class ShareGate {
  #proc = -1;
  #okUntil = 0;
  /** Processes busy at the last snapshot (what a charge divides by). */
  #busy = 1;
  /** The wait in progress: every command after it waits behind it, so that none overtakes it. */
  #waiting: Promise<void> | undefined;

  constructor(
    readonly table: ShareTable,
    readonly vm: number,
    readonly policy: Policy = DEFAULT_POLICY,
    readonly clock: () => number = clockNs,
    readonly sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  ) {}

  /** This process's slot, taken on first use; -1 (no gate) when the table has none left. */
  slot(): number {
    if (this.#proc < 0) {
      this.#proc = this.table.joinProcess(this.vm);
      if (this.#proc >= 0) process.once('exit', () => this.leave());
    }
    return this.#proc;
  }

  leave(): void {
    if (this.#proc >= 0) this.table.leaveProcess(this.#proc);
    this.#proc = -1;
  }

  /** Charges this process's VM for its busy time up to now. */
  #charge(now: number): void {
    if (this.#proc < 0) return;
    const since = this.table.busySince(this.#proc);
    if (since === 0) return;
    this.table.addUsage(this.vm, charge(now - since, this.#busy));
    this.table.setBusy(this.#proc, now);
  }

  /**
   * Reads the table: whether this process may post now (and, where its VM
   * wanted nothing before, it restarts at the others' level). `waitingSince`:
   * when this process began to wait, as the table has it (0: it does not).
   */
  #decide(now: number, waitingSince: number): boolean {
    const vms: VmView[] = this.table.snapshot();
    this.#busy = Math.max(1, busyProcesses(vms));
    this.#charge(now);
    const me = vms.find((v) => v.slot === this.vm);
    if (me && !wants(me, now, this.policy) && backFromIdle(this.table.syncedAt(this.#proc), now, this.policy)) {
      me.usage = catchUp(this.vm, vms, now, this.policy);
      this.table.raiseUsage(this.vm, me.usage);
    }
    return mayPost(this.vm, vms, now, this.policy, { busy: this.table.busySince(this.#proc) !== 0, waitingSince });
  }

  /** Whether a post may go now, without waiting. */
  #admit(now: number): boolean {
    // MPS mode: a process with work on the GPU keeps posting without a look at the table; an idle one asks for its VM's turn.
    if (this.policy.mps === true) return this.table.busySince(this.#proc) !== 0 || this.#decide(now, 0);
    if (now < this.#okUntil) return true;
    if (!this.#decide(now, 0)) return false;
    this.#okUntil = now + RECHECK_NS;
    return true;
  }

  /** This process has work on the GPU from now: busy, and its turn (MPS mode) begins, unless it was busy already. */
  #busyNow(now: number): void {
    if (this.table.busySince(this.#proc) === 0) this.table.startTurn(this.#proc, now);
  }

  /**
   * Before a command: undefined where it may run at once, else a promise
   * that resolves when it may. `posts`: it posts work (else it only waits
   * behind a post that waits).
   */
  before(posts: boolean): Promise<void> | undefined {
    if (this.#waiting) return this.#waiting;
    if (!posts || this.slot() < 0) return undefined;
    const now = this.clock();
    if (this.#admit(now)) {
      this.#busyNow(now);
      return undefined;
    }
    const w = this.#wait(now).finally(() => {
      if (this.#waiting === w) this.#waiting = undefined;
    });
    this.#waiting = w;
    return w;
  }

  async #wait(from: number): Promise<void> {
    // As the table stores it: the gate compares its own with the VM's first waiting (MPS mode).
    const since = Math.max(1, Math.round(from));
    this.table.setWaiting(this.#proc, true, since);
    try {
      for (;;) {
        await this.sleep(POLL_MS);
        const now = this.clock();
        // MPS mode bounds turns, not waits (policy.ts): the eighth in line waits seven turns.
        const waitedOut = this.policy.mps !== true && now - from >= this.policy.maxWaitNs;
        if (waitedOut || this.#decide(now, since)) {
          this.#okUntil = now + RECHECK_NS;
          this.#busyNow(now);
          return;
        }
      }
    } finally {
      this.table.setWaiting(this.#proc, false);
    }
  }

  /** A synchronizing command returned: what this process posted is done; it is charged and idle. */
  synced(): void {
    if (this.#proc < 0 || this.table.busySince(this.#proc) === 0) return;
    const now = this.clock();
    this.#charge(now);
    this.table.setSynced(this.#proc, now);
  }
}

/**
 * A worker's gate, from the QCUDA_GPU_SHARE its backend gave it (undefined:
 * no shares, commands run as they come). Read once where the process
 * starts, and passed to what it makes (the device, the ring server).
 */
export function gateFromEnv(env: NodeJS.ProcessEnv = process.env): ShareGate | undefined {
  const v = env[SHARE_ENV];
  const m = v === undefined ? null : /^([0-9]+)(,mps)?:(.+)$/.exec(v);
  return m ? new ShareGate(ShareTable.open(m[3]), +m[1], m[2] ? MPS_POLICY : DEFAULT_POLICY) : undefined;
}

/** The policy under --gpu-share-mps: a VM's processes take turns, VMs do not wait for each other (policy.ts). */
export const MPS_POLICY: Policy = { ...DEFAULT_POLICY, mps: true };

/**
 * This backend's VM joins the table at `file` with `weight`: its workers
 * inherit where (QCUDA_GPU_SHARE), and whether in MPS mode; the gate is the
 * one this process gates its own sessions with (given to its device).
 */
export function joinShare(file: string, weight: number, mps = false): { table: ShareTable; slot: number; gate: ShareGate } {
  const table = ShareTable.open(file);
  const slot = table.joinVm(weight);
  process.once('exit', () => table.leaveVm(slot));
  process.env[SHARE_ENV] = `${slot}${mps ? ',mps' : ''}:${file}`;
  return { table, slot, gate: new ShareGate(table, slot, mps ? MPS_POLICY : DEFAULT_POLICY) };
}
