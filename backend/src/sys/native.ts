// The native addon's surface, typed. Only system calls live there.
// (sys/: the process's system pieces -- addon, fds, socket write queue, log
// rate limit -- shared by the vhost-user library and the qcuda worker channel.)
import path from 'node:path';

export interface RecvResult {
  n: number;
  fds?: number[];
  ctrunc?: boolean;
}

export interface Mapping {
  readonly length: number;
  readonly address: bigint;
  readonly mapped: boolean;
  window(offset: number, length: number): ArrayBuffer;
  unmap(): void;
}

export interface Watcher {
  start(events: number): void;
  stop(): void;
  close(): void;
}

/**
 * Budgets in shared memory (addon/src/ledger.cc; qcuda/limits.ts Ledger). Amounts are bigints from 0 to 2^63-1.
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

export interface Native {
  unixListen(path: string): number;
  unixAccept(fd: number): number;
  unixConnect(path: string): number;
  socketPair(): [number, number];
  sendMsg(fd: number, data: Uint8Array, fds: number[]): number;
  recvMsg(fd: number, buf: Uint8Array, maxFds?: number): RecvResult;
  close(fd: number): void;
  dup(fd: number): number;
  shutdown(fd: number): void;
  /** Who connected a unix socket (SO_PEERCRED, as at connect time). */
  peerCred(fd: number): { pid: number; uid: number; gid: number };
  /**
   * For good, for every thread of this process: no new privileges and the
   * GPU worker's system call filter (addon/src/sandbox.cc). Throws where the
   * kernel refuses.
   */
  sandboxWorker(): void;
  memfdCreate(name: string, size: number): number;
  fdInfo(fd: number): { size: number; seals: number; regular: boolean };
  addSeals(fd: number, seals: number): void;
  /** random: at an unguessable address (guest RAM the GPU can reach: addon/src/memory.cc says why). */
  Mapping: {
    new (fd: number, length: number, offset: number, random?: boolean): Mapping;
    /** The pieces ([fd, offset, length], whole pages) one after another, at a random address. */
    new (pieces: readonly (readonly [number, number, number])[]): Mapping;
  };
  pageSize: number;
  F_SEAL_SHRINK: number;
  F_SEAL_GROW: number;
  eventfd(): number;
  eventfdRead(fd: number): number;
  eventfdWrite(fd: number, n?: number): void;
  Watcher: new (fd: number, cb: (events: number, status: number) => void, drainEventfd?: boolean) => Watcher;
  /** (fd, limits, slots) formats a new ledger in the file; (fd, limits) opens one made with these limits. The fd stays the caller's. */
  Ledger: new (fd: number, limits: bigint[], slots?: number) => NativeLedger;
  /**
   * Benchmarks: a guest driver's synchronous calls in C (addon/src/ring_loop.cc): n times, posts the
   * chains `heads` one after another on a driver's rings (avail and used as mapped here), kicking only
   * where the device asks, and spins for each answer, which must name its head and put status 0 in the
   * first u32 of its reply (replies[j] for heads[j]). ns: each step of heads.length calls.
   */
  ringLoop(avail: Uint16Array, used: Uint16Array, size: number, eventIdx: boolean, kickFd: number, heads: Uint32Array, availIdx: number,
    lastUsed: number, n: number, replies: Uint8Array[], timeoutNs: number): { ns: Float64Array; availIdx: number; lastUsed: number; kicks: number };
}

export const POLL_READABLE = 1;
export const POLL_WRITABLE = 2;

function load(): Native {
  const root = path.resolve(__dirname, '..', '..', '..', '..');
  return require(path.join(root, 'addon', 'build', 'Release', 'qcuda_native.node')) as Native;
}

export const native: Native = load();
