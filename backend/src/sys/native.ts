// The native addons' surface for qcuda, typed: the vhost-user library's
// (sockets, memfd windows, eventfds, watchers) and qcuda_sys's
// (addon/src/sys_addon.cc: the VM quota ledger and the worker's sandbox),
// as one object. Only system calls live there.
import path from 'node:path';
import { native as vhostUser, type Native as VhostUserNative } from '../vhost-user';

/**
 * Budgets in shared memory (addon/src/ledger.cc; qcuda/quota/limits.ts Ledger). Amounts are bigints from 0 to 2^63-1.
 * Each step takes the ledger's lock, and throws (code ETIMEDOUT) where another process keeps it for over a second.
 */
export interface NativeLedger {
  readonly budgets: number;
  readonly slots: number;
  /** Counts n against budget for slot; false (nothing counted) where it would pass the limit (0: none), or where the counts in the file are out of range. */
  take(budget: number, slot: number, n: bigint): boolean;
  /** false (nothing changes) where the slot holds less than n. */
  give(budget: number, slot: number, n: bigint): boolean;
  /** Gives back everything the slot holds. */
  reclaim(slot: number): void;
  held(budget: number, slot: number): bigint;
  total(budget: number): bigint;
  /** This process's own copy (the file does not hold the limits). */
  limit(budget: number): bigint;
  close(): void;
  /** Takes the lock and keeps it (tests: a process that then dies leaves the next locker to repair the totals). */
  lockForTest(): void;
}

/** The GPU share table's layout (addon/src/share_table.h; qcuda/share/table.ts maps it): word offsets within each part. */
export interface ShareLayout {
  magic: number;
  headerWords: number;
  vmSlots: number;
  vmWords: number;
  procSlots: number;
  procWords: number;
  bytes: number;
  header: { magic: number; procs: number };
  vm: { pid: number; weight: number; usage: number; used: number };
  proc: { pid: number; vm: number; since: number; waiting: number; synced: number; turn: number };
}

/** qcuda_sys.node. */
export interface QcudaSys {
  shareLayout: ShareLayout;
  /** The share policy in C (the ring server's), for the tests that hold it to qcuda/share/policy.ts's answers. */
  sharePolicy: {
    mayPost(self: number, vms: readonly object[], now: number, policy: object, asker?: object): boolean;
    catchUp(self: number, vms: readonly object[], now: number, policy: object): number;
  };
  /**
   * For good, for every thread of this process: no new privileges and the
   * GPU worker's system call filter (addon/src/sandbox.cc). Throws where the
   * kernel refuses.
   */
  sandboxWorker(): void;
  /**
   * A SIGBUS at an address in [address, address+length) (a file mapped there
   * was cut short by another process) puts zeroed private memory over the
   * whole range and the access goes on (addon/src/sigbus_guard.cc); at most 16 ranges.
   */
  guardMapping(address: bigint, length: number): void;
  /** Before the range is unmapped. */
  unguardMapping(address: bigint): void;
  /** How many faults the guard caught in this process. */
  sigbusCaught(): number;
  /** PR_SET_DUMPABLE 0 for this process (sys/harden.ts). */
  undumpable(): void;
  /** PR_SET_PDEATHSIG signal; whether the parent is still parentPid (sys/harden.ts). */
  dieWithParent(signal: number, parentPid: number): boolean;
  /** (fd, limits, slots) formats a new ledger in the file; (fd, limits) opens one made with these limits. The fd stays the caller's. */
  Ledger: new (fd: number, limits: bigint[], slots?: number) => NativeLedger;
}

export type Native = VhostUserNative & QcudaSys;
export type { Mapping, RecvResult, Watcher } from '../vhost-user';
export { POLL_READABLE, POLL_WRITABLE } from '../vhost-user';

function load(): QcudaSys {
  const root = path.resolve(__dirname, '..', '..', '..', '..');
  return require(path.join(root, 'addon', 'build', 'Release', 'qcuda_sys.node')) as QcudaSys;
}

export const native: Native = { ...vhostUser, ...load() };
