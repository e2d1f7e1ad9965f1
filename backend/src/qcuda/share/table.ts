// The table the VMs of one GPU share their compute time through (issue 36):
// a small file in shared memory that every backend started with
// --gpu-share maps, and its workers with it. Backends of different VMs know
// nothing else of each other, so this is where a VM says its weight and
// what it has used, and where each process serving it says whether it has
// work on the GPU now. policy.ts decides from a snapshot of it.
//
// Every word is an int64 read and written with Atomics, with no lock: each
// slot is written by its owner only (a VM's usage by each of its processes,
// through an atomic add), and a reader that sees one slot half-claimed sees
// a VM or process that is about to be there anyway. A slot whose owner's
// pid is gone is taken back by the next process that looks for a free one.
//
// Trust: a worker runs code the guest chose, and can write this file; a
// worker that lies (says its VM used nothing) can take more than its
// share, but no more than the GPU as it was before shares: the table bounds
// nothing else (memory, processes). Weights are read clamped to 1-1000.
// Nor may it end the processes that map it (security review 3, N6):
//  - the file lives in a directory only the backends' user can write
//    (tableDir), is made whole (sized, mode 0600) under another name and
//    linked into place, and opened only when this user owns it, its mode is
//    0600 and it holds the whole table: another user cannot make it first
//    for the backends to adopt;
//  - a process of the same user can still cut it short under the mappings:
//    a fault there is caught (native.guardMapping, addon/src/
//    sigbus_guard.cc), the mapping becomes this process's own zeroed memory,
//    and the process goes on as without shares, saying so once.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native, type Mapping } from '../../sys/native';
import type { VmView } from './policy';

// The layout is declared once, in addon/src/share_table.h (the ring server
// reads and writes the same words): its offsets come from there.
const L = native.shareLayout;
const MAGIC = BigInt(L.magic); // "qcsh"
const HEADER = L.headerWords;
/** VMs one GPU's table holds. */
export const VM_SLOTS = L.vmSlots;
const VM_WORDS = L.vmWords;
/** Processes (workers, backends) with work to post, all VMs together. */
export const PROC_SLOTS = L.procSlots;
const PROC_WORDS = L.procWords;
const BYTES = L.bytes;

// Header words.
const H_MAGIC = L.header.magic;
/** One more than the highest process slot ever taken: readers look no further. */
const H_PROCS = L.header.procs;
// A VM slot's words.
const V_PID = L.vm.pid;
const V_WEIGHT = L.vm.weight;
/** What the policy counts (raised when the VM comes back from idle: policy.ts catchUp). */
const V_USAGE = L.vm.usage;
/** The GPU time it was charged, only ever added to (what qcuda status shows). */
const V_USED = L.vm.used;
// A process slot's words: the process's gate state (gate.ts, and the ring server's in C).
const P_PID = L.proc.pid;
const P_VM = L.proc.vm; // the VM's slot + 1 (0: none)
const P_SINCE = L.proc.since; // busy since (ns of the table's clock), 0: idle
const P_WAITING = L.proc.waiting; // while it waits to post: since when (ns, at least 1); 0: not waiting
const P_SYNCED = L.proc.synced; // when it last synchronized (ns), 0: never
const P_TURN = L.proc.turn; // when its busy time began (ns: its turn, under MPS mode), 0: idle

/** One VM as qcuda status shows it. */
export interface VmReport {
  slot: number;
  /** Its backend's pid. */
  pid: number;
  weight: number;
  /** GPU time it was charged since it joined, ns. */
  usedNs: number;
}

/** The table's clock: CLOCK_MONOTONIC, the same in every process of the host. */
export function clockNs(): number {
  return Number(process.hrtime.bigint());
}

/** Whether a process of this pid exists (one of another user's counts). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const WEIGHT_MAX = 1000;

/** A weight as read from the table (any process of the user can write it): 1-1000. */
function clampWeight(w: number): number {
  return Math.min(WEIGHT_MAX, Math.max(1, Number.isFinite(w) ? w : 1));
}

/** Whether dir is a real directory (not a link) of uid that no one else may write. */
function ownDir(dir: string, uid: number): boolean {
  const st = fs.lstatSync(dir, { throwIfNoEntry: false });
  return st !== undefined && st.isDirectory() && st.uid === uid && (st.mode & 0o022) === 0;
}

/**
 * The directory the tables of this user's backends meet in, one only that
 * user can write: /run/qcuda where it is its own (root's) or, as root,
 * can be made; else $XDG_RUNTIME_DIR where it
 * is its own; else qcuda-UID, made mode 0700, in /dev/shm (or the temporary
 * directory). Throws where that last one is not this user's alone.
 */
export function tableDir(): string {
  const uid = process.geteuid?.() ?? 0;
  const run = '/run/qcuda';
  if (ownDir(run, uid)) return run;
  if (uid === 0 && fs.existsSync('/run') && !fs.existsSync(run)) {
    try {
      fs.mkdirSync(run, { mode: 0o700 });
      if (ownDir(run, uid)) return run;
    } catch {
      /* the next place */
    }
  }
  const xdg = process.env.XDG_RUNTIME_DIR;
  if (xdg && path.isAbsolute(xdg) && ownDir(xdg, uid)) return xdg;
  const dir = path.join(fs.existsSync('/dev/shm') ? '/dev/shm' : os.tmpdir(), `qcuda-${uid}`);
  try {
    fs.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  if (!ownDir(dir, uid))
    throw new Error(
      `${dir} is not a directory of uid ${uid} that only it can write: no place for the GPU share table (set QCUDA_GPU_SHARE_TABLE)`,
    );
  return dir;
}

/** Where the table of GPU `gpu` is unless QCUDA_GPU_SHARE_TABLE says: in tableDir, one per user. */
export function defaultTablePath(gpu = 0): string {
  return path.join(tableDir(), `qcuda-gpu-share-${process.geteuid?.() ?? 0}-gpu${gpu}`);
}

/** Opens the table file at `file` for reading and writing, making it (whole, mode 0600) where there is none. */
function openTableFile(file: string): number {
  const { O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW } = fs.constants;
  for (let attempt = 0; ; attempt++) {
    try {
      return checkTableFile(file, fs.openSync(file, O_RDWR | O_NOFOLLOW));
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== 'ENOENT' || attempt > 3) throw e;
    }
    // None there: made whole under a name of this process's own, then linked into place (fails where another came first).
    const tmp = `${file}.${process.pid}.${Math.random().toString(36).slice(2)}`;
    const fd = fs.openSync(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
    try {
      fs.fchmodSync(fd, 0o600);
      fs.ftruncateSync(fd, BYTES);
      fs.linkSync(tmp, file);
      return fd;
    } catch (e) {
      fs.closeSync(fd);
      if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  }
}

/** fd, if the file is this user's own, mode 0600 and holds the whole table; else closes it and says why. */
function checkTableFile(file: string, fd: number): number {
  const st = fs.fstatSync(fd);
  const uid = process.geteuid?.() ?? 0;
  let why: string | undefined;
  if (!st.isFile()) why = 'is not a regular file';
  else if (st.uid !== uid) why = `is owned by uid ${st.uid}, not by this process's uid ${uid}`;
  else if ((st.mode & 0o777) !== 0o600) why = `has mode 0${(st.mode & 0o777).toString(8)}, not 0600`;
  else if (st.size < BYTES) why = `holds ${st.size} bytes, less than the table's ${BYTES}`;
  if (why === undefined) return fd;
  fs.closeSync(fd);
  throw new Error(
    `the GPU share table ${file} ${why}: refusing it (another user or process may have made it; remove it, or set QCUDA_GPU_SHARE_TABLE)`,
  );
}

export class ShareTable {
  readonly #map: Mapping;
  readonly #w: BigInt64Array;
  /** The guard's count when this table was last looked at (a change: it was cut short, here or in another table). */
  #caught = native.sigbusCaught();
  #cut = false;

  private constructor(
    readonly path: string,
    map: Mapping,
  ) {
    this.#map = map;
    this.#w = new BigInt64Array(map.window(0, BYTES));
  }

  /** Maps the table at `file`, making it where there is none; throws where the file there is not one this user made. */
  static open(file: string): ShareTable {
    const fd = openTableFile(file);
    try {
      const map = new native.Mapping(fd, BYTES, 0);
      native.guardMapping(map.address, map.length);
      const t = new ShareTable(file, map);
      const m = Atomics.compareExchange(t.#w, H_MAGIC, 0n, MAGIC);
      if (m !== 0n && m !== MAGIC) {
        t.close();
        throw new Error(`${file} is not a qcuda GPU share table`);
      }
      return t;
    } finally {
      fs.closeSync(fd);
    }
  }

  /** The table's words, for the ring server (addon/src/share_table.h Gate), which works on them in place. */
  get words(): BigInt64Array {
    return this.#w;
  }

  close(): void {
    if (!this.#map.mapped) return;
    native.unguardMapping(this.#map.address);
    this.#map.unmap();
  }

  /**
   * Whether the file was cut short under this process's mapping: its words
   * are then this process's own zeros (no VM in it). Said once, on stderr.
   */
  get cut(): boolean {
    const c = native.sigbusCaught();
    if (c !== this.#caught && !this.#cut) {
      this.#caught = c;
      // The guard's count is the process's: this table was cut if its magic is gone.
      if (Atomics.load(this.#w, H_MAGIC) === 0n) {
        this.#cut = true;
        process.stderr.write(
          `qcuda: the GPU share table ${this.path} was cut short by another process; this process goes on without GPU shares\n`,
        );
      }
    }
    return this.#cut;
  }

  #get(i: number): number {
    return Number(Atomics.load(this.#w, i));
  }

  #set(i: number, v: number): void {
    Atomics.store(this.#w, i, BigInt(Math.round(v)));
  }

  /** Takes a free slot of `count` (or one whose owner is gone) for pid; its index, or -1 when all are taken. */
  #claim(base: number, words: number, count: number, pid: number): number {
    for (let s = 0; s < count; s++) {
      const at = base + s * words;
      const owner = Number(Atomics.load(this.#w, at));
      if (owner !== 0 && (owner === pid || alive(owner))) continue;
      if (Atomics.compareExchange(this.#w, at, BigInt(owner), BigInt(pid)) !== BigInt(owner)) continue;
      for (let k = 1; k < words; k++) this.#set(at + k, 0);
      return s;
    }
    return -1;
  }

  #vm(slot: number): number {
    return HEADER + slot * VM_WORDS;
  }

  #proc(slot: number): number {
    return HEADER + VM_SLOTS * VM_WORDS + slot * PROC_WORDS;
  }

  /** A VM (this backend, pid) joins with its weight; its slot. Throws when the table is full. */
  joinVm(weight: number, pid = process.pid): number {
    const s = this.#claim(HEADER, VM_WORDS, VM_SLOTS, pid);
    if (s < 0) throw new Error(`the GPU share table ${this.path} has all ${VM_SLOTS} VM slots taken`);
    this.#set(this.#vm(s) + V_WEIGHT, weight);
    return s;
  }

  leaveVm(slot: number, pid = process.pid): void {
    Atomics.compareExchange(this.#w, this.#vm(slot) + V_PID, BigInt(pid), 0n);
  }

  /** Whether VM slot `slot` is still the one pid joined as. */
  holdsVm(slot: number, pid: number): boolean {
    return this.#get(this.#vm(slot) + V_PID) === pid;
  }

  weight(slot: number): number {
    return clampWeight(this.#get(this.#vm(slot) + V_WEIGHT));
  }

  /** Adds ns of GPU time to VM slot's usage (and to what it was charged). */
  addUsage(slot: number, ns: number): void {
    if (ns <= 0) return;
    Atomics.add(this.#w, this.#vm(slot) + V_USAGE, BigInt(Math.round(ns)));
    Atomics.add(this.#w, this.#vm(slot) + V_USED, BigInt(Math.round(ns)));
  }

  /** Raises VM slot's usage to at least `ns` (policy.ts catchUp). */
  raiseUsage(slot: number, ns: number): void {
    const at = this.#vm(slot) + V_USAGE;
    for (;;) {
      const u = Atomics.load(this.#w, at);
      if (Number(u) >= ns || Atomics.compareExchange(this.#w, at, u, BigInt(Math.round(ns))) === u) return;
    }
  }

  /** A process of VM slot `vm` takes a slot of its own; -1 when all are taken. */
  joinProcess(vm: number, pid = process.pid): number {
    const s = this.#claim(this.#proc(0), PROC_WORDS, PROC_SLOTS, pid);
    if (s < 0) return -1;
    this.#set(this.#proc(s) + P_VM, vm + 1);
    for (;;) {
      const top = Atomics.load(this.#w, H_PROCS);
      if (Number(top) > s || Atomics.compareExchange(this.#w, H_PROCS, top, BigInt(s + 1)) === top) break;
    }
    return s;
  }

  leaveProcess(slot: number, pid = process.pid): void {
    const at = this.#proc(slot);
    this.#set(at + P_SINCE, 0);
    this.#set(at + P_TURN, 0);
    this.#set(at + P_WAITING, 0);
    Atomics.compareExchange(this.#w, at + P_PID, BigInt(pid), 0n);
  }

  /** Process slot's work on the GPU: busy since `since` (ns), or idle (0). */
  setBusy(slot: number, since: number): void {
    this.#set(this.#proc(slot) + P_SINCE, since);
  }

  /** Process slot has work on the GPU from `at` (ns), after none: busy, and its turn begins. */
  startTurn(slot: number, at: number): void {
    // Turn first: a reader that sees it busy sees since when.
    this.#set(this.#proc(slot) + P_TURN, at);
    this.#set(this.#proc(slot) + P_SINCE, at);
  }

  /** Process slot synchronized at `at` (ns): idle, and its VM between jobs for a while (policy.ts wants). */
  setSynced(slot: number, at: number): void {
    this.#set(this.#proc(slot) + P_SINCE, 0);
    this.#set(this.#proc(slot) + P_TURN, 0);
    this.#set(this.#proc(slot) + P_SYNCED, at);
  }

  /** When process slot became busy or was last charged (ns), 0: idle. */
  busySince(slot: number): number {
    return this.#get(this.#proc(slot) + P_SINCE);
  }

  /** When process slot last synchronized (ns), 0: never. */
  syncedAt(slot: number): number {
    return this.#get(this.#proc(slot) + P_SYNCED);
  }

  /** Process slot waits to post, since `since` (ns: who came first, under MPS mode), or no longer. */
  setWaiting(slot: number, waiting: boolean, since = 1): void {
    this.#set(this.#proc(slot) + P_WAITING, waiting ? Math.max(1, since) : 0);
  }

  /**
   * The VMs now, with their processes' state. `live` says whether a pid
   * still runs (asked of the system for each VM, and for each process that
   * says it is busy or waiting: a dead one is neither; its slot is taken
   * back when a slot is next claimed).
   */
  snapshot(live: (pid: number) => boolean = alive): VmView[] {
    const vms = new Map<number, VmView>();
    for (let s = 0; s < VM_SLOTS; s++) {
      const at = this.#vm(s);
      const pid = this.#get(at + V_PID);
      if (pid === 0 || !live(pid)) continue;
      vms.set(s, {
        slot: s,
        weight: clampWeight(this.#get(at + V_WEIGHT)),
        usage: this.#get(at + V_USAGE),
        busySince: [],
        waiting: 0,
        lastSync: 0,
      });
    }
    const top = Math.min(PROC_SLOTS, this.#get(H_PROCS));
    for (let s = 0; s < top; s++) {
      const at = this.#proc(s);
      const pid = this.#get(at + P_PID);
      const v = pid === 0 ? undefined : vms.get(this.#get(at + P_VM) - 1);
      if (!v) continue;
      const since = this.#get(at + P_SINCE);
      const waitingSince = this.#get(at + P_WAITING);
      const waiting = waitingSince !== 0;
      // A worker ends by SIGKILL (its session's close): one that was busy must not stay busy.
      if ((since > 0 || waiting) && !live(pid)) continue;
      if (since > 0) {
        v.busySince.push(since);
        // A process made busy without a turn (setBusy alone) started it when it became busy.
        v.turnSince = Math.max(v.turnSince ?? 0, this.#get(at + P_TURN) || since);
      }
      if (waiting) {
        v.waiting++;
        v.firstWaiting = Math.min(v.firstWaiting ?? Infinity, waitingSince);
      }
      v.lastSync = Math.max(v.lastSync, this.#get(at + P_SYNCED));
    }
    // Read from a file cut short while it was read: what was read is this process's zeros, or half of them.
    if (this.cut) return [];
    return [...vms.values()];
  }

  /** The live VMs as qcuda status shows them. */
  report(live: (pid: number) => boolean = alive): VmReport[] {
    const out: VmReport[] = [];
    for (let s = 0; s < VM_SLOTS; s++) {
      const at = this.#vm(s);
      const pid = this.#get(at + V_PID);
      if (pid !== 0 && live(pid)) out.push({ slot: s, pid, weight: clampWeight(this.#get(at + V_WEIGHT)), usedNs: this.#get(at + V_USED) });
    }
    return out;
  }
}

export { BYTES as TABLE_BYTES };
