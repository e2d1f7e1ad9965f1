// What one VM may make the backend hold. Everything a guest can make the
// backend allocate (device memory, host memory, processes, threads, log
// lines) is counted against a bound here, per VM (each VM has a backend
// process of its own), and a request that would pass one fails with a CUDA
// error instead of growing the backend. The defaults are safe for a host
// serving several VMs; each is a qcuda-backend option (cli/backend.ts).
import { CudaErr, CudaError } from '../cuda-error';
import { Fd } from '../../vhost-user';
import { native, type NativeLedger } from '../../sys/native';

export interface VmLimits {
  /** Device memory the VM's processes may hold, in bytes (0: no quota): allocations, module globals, stack/heap/printf reservations, contexts (contextOverhead). */
  deviceMemory: bigint;
  /**
   * Device memory each guest process's CUDA context counts against
   * deviceMemory while it exists: what the driver takes for a context
   * (and, with isolation, its worker's primary context) beyond any
   * allocation. Default GPU_CONTEXT_OVERHEAD on a GPU, 0 on the host
   * provider (QcudaDevice decides where not given).
   */
  contextOverhead: bigint;
  /** Module image bytes being uploaded at once, all sessions together (each image is at most QCUDA_MAX_MODULE). */
  moduleStaging: bigint;
  /** Module image bytes kept by content for the VM's next processes (module-cache.ts; 0: none). */
  moduleCache: bigint;
  /** Bytes of posted work one session may have held behind host functions that have not run. */
  deferredBytes: bigint;
  /** Guest processes with a CUDA context at once (with isolation: worker processes). */
  contexts: number;
  /** Backend log lines per second caused by the VM (more are counted and summed up). */
  logLinesPerSecond: number;
  /** The cuda addon's waiter threads per process (each blocking synchronize holds one while it waits; more waits queue). */
  waiterThreads: number;
  /** Pieces of guest memory mapped for the GPU at once (HOST_MAP: 1, HOST_MAP_PAGES: its extents), all sessions: each is a mapping in the backend (Linux allows 65530 per process). */
  hostMapPieces: number;
  /**
   * What one guest process may hold at once (each costs the driver host
   * memory in its worker, and nothing else bounds them: security review 2,
   * M4): streams, events, loaded modules, texture and surface objects
   * (processObjects also bounds virtual memory management's reservations,
   * physical allocations and mappings, on a count of their own).
   * Past it the creation fails with cudaErrorMemoryAllocation.
   */
  processStreams: number;
  processEvents: number;
  processModules: number;
  processObjects: number;
  /**
   * How long one JIT or link job (a module load, a JIT link) may run in a
   * guest process's worker, ms (0: no bound): past it the worker is ended
   * (providers/cuda/jit-jobs.ts). With --isolation=none nothing bounds it.
   */
  jitTimeMs: number;
}

/**
 * Bytes of guest memory mapped for the GPU at once, all sessions, as a
 * multiple of the guest's RAM (its memory table now). Each mapping is
 * registered whole for the GPU, whose pinning costs host kernel memory no
 * quota counts; without a bound in bytes, pieces naming the same pages over
 * and over made 32 MiB of guest RAM into 4 x 64 GiB of cuMemHostRegister
 * (security review 2, H3). A session cannot map the same pages twice, so
 * this allows every process of a VM four mappings of all of its RAM.
 */
export const HOST_MAP_RAM_FACTOR = 4n;

/**
 * What one guest process's contexts take of the GPU's memory before it
 * allocates anything, measured on the H100 (driver 580): 1049 MiB, its
 * worker's primary context (which registers guest RAM) and the session's
 * context. Outside the quota, 64 processes took ~64 GiB past any
 * --device-memory-limit (security review 2, M3).
 */
export const GPU_CONTEXT_OVERHEAD = 1049n << 20n;

export const DEFAULT_LIMITS: VmLimits = {
  deviceMemory: 0n,
  contextOverhead: GPU_CONTEXT_OVERHEAD,
  moduleStaging: 256n << 20n,
  moduleCache: 256n << 20n,
  deferredBytes: 16n << 20n,
  contexts: 64,
  logLinesPerSecond: 20,
  waiterThreads: 64,
  hostMapPieces: 32768,
  processStreams: 65536,
  processEvents: 65536,
  // cuBLAS alone registers about 3,000 fat binaries (a module each, loaded lazily).
  processModules: 8192,
  processObjects: 65536,
  // The largest real modules (cuBLAS's, PyTorch's PTX) JIT in seconds to tens of seconds a module.
  jitTimeMs: 120_000,
};

/**
 * A VM's bounded counts in shared memory (addon/src/ledger.cc), so that every
 * process serving the VM's sessions takes from the same budgets: a lock word
 * (the holder's thread id, taken over when that thread is gone), a total per budget, and a slot per holder saying
 * what it holds (given back whole when the holder goes, or dies). The limits
 * are each process's own (a worker gets the backend's with its queue): a
 * worker, which can write the shared file, cannot lift them.
 */
export class Ledger {
  readonly #n: NativeLedger;
  readonly #free: number[];

  /** The slots this process hands out, [from, to): its holders' (every slot for the creator). */
  readonly #own: { from: number; to: number };

  private constructor(
    n: NativeLedger,
    /** The memfd behind it, for the processes that open it too. */
    readonly fd: Fd,
    own: { from: number; to: number } = { from: 0, to: n.slots },
  ) {
    this.#n = n;
    this.#own = own;
    this.#free = Array.from({ length: own.to - own.from }, (_, i) => own.to - 1 - i);
  }

  /** A new ledger with these limits (0: unbounded) and room for `slots` holders. */
  static create(limits: bigint[], slots: number): Ledger {
    const fd = new Fd(native.memfdCreate('qcuda-ledger', 0));
    try {
      return new Ledger(new native.Ledger(fd.value, limits, slots), fd);
    } catch (e) {
      fd.close();
      throw e;
    }
  }

  /**
   * A ledger another process created, counted here against these limits
   * (this process's own, never the file's). A session's worker hands out no
   * slots; a backend sharing the VM's ledger (`qcuda vm`: the qcuda backend
   * and its GPU disks' backends) hands out the `count` slots from `from`,
   * given back first: what they hold was a previous holder's (a backend
   * restarted).
   */
  static open(fd: Fd, limits: bigint[], own?: { from: number; count: number }): Ledger {
    const n = new native.Ledger(fd.value, limits);
    const from = own?.from ?? 0;
    const to = from + (own?.count ?? 0);
    if (to > n.slots) {
      n.close();
      throw new RangeError(`the ledger has ${n.slots} holder slots, not slots ${from} to ${to - 1}`);
    }
    for (let s = from; s < to; s++) n.reclaim(s);
    return new Ledger(n, fd, { from, to });
  }

  get native(): NativeLedger {
    return this.#n;
  }

  /** A holder's slot (Share); throws when every slot is taken. */
  allocSlot(): number {
    const s = this.#free.pop();
    if (s === undefined) throw new CudaError(CudaErr.MemoryAllocation, `all ${this.#n.slots} holder slots of the VM's ledger are taken`);
    return s;
  }

  /** The holder is gone: what it still held is given back and its slot is free again. */
  freeSlot(s: number): void {
    this.#n.reclaim(s);
    this.#free.push(s);
  }

  /** What the slots this process does not hand out hold of a budget (`qcuda vm`'s qcuda backend: its GPU disks'). */
  heldOutside(budget: number): bigint {
    let n = 0n;
    for (let s = 0; s < this.#n.slots; s++)
      if (s < this.#own.from || s >= this.#own.to) {
        const h = this.#n.held(budget, s);
        if (h > 0n) n += h; // what another process wrote: counted only as it can count
      }
    return n;
  }

  close(): void {
    this.#n.close();
    this.fd.close();
  }
}

/** The most a ledger counts (int64 in shared memory): asking for more fails as passing the bound does. */
const MAX_COUNT = (1n << 63n) - 1n;

/** A bounded count shared by the VM's sessions: a Share's take() fails instead of passing the bound (0: unbounded). */
export class Budget {
  readonly limit: bigint;

  constructor(
    readonly ledger: Ledger,
    readonly index: number,
    /** What is counted, for the error ("device memory quota"). */
    readonly what: string,
    /** The CUDA error a request that would pass the bound gets. */
    readonly code: number = CudaErr.MemoryAllocation,
  ) {
    this.limit = ledger.native.limit(index);
  }

  get used(): bigint {
    return this.ledger.native.total(this.index);
  }

  /** What is left (undefined: unbounded). */
  get left(): bigint | undefined {
    if (this.limit === 0n) return undefined;
    const used = this.used;
    return this.limit > used ? this.limit - used : 0n;
  }
}

/**
 * A share of a Budget held by one owner (a session, through its ledger
 * slot): everything it took is given back at once when the owner goes
 * (giveAll, or the slot's reclaim), so nothing it held stays counted
 * against the VM.
 */
export class Share {
  #retired = false;

  constructor(
    readonly budget: Budget,
    readonly slot: number,
  ) {}

  get held(): bigint {
    return this.#retired ? 0n : this.budget.ledger.native.held(this.budget.index, this.slot);
  }

  take(n: bigint): void {
    if (n < 0n) throw new RangeError(`take(${n})`);
    const b = this.budget;
    if (this.#retired) throw new CudaError(b.code, `${b.what}: the holder has gone`);
    let ok: boolean;
    try {
      ok = n <= MAX_COUNT && b.ledger.native.take(b.index, this.slot, n);
    } catch (e) {
      // The ledger's lock was kept from us: nothing is counted, so nothing is allowed.
      throw new CudaError(b.code, `${b.what}: ${(e as Error).message}`);
    }
    if (!ok) throw new CudaError(b.code, `${b.what} of ${b.limit} bytes would be exceeded (${b.used} in use, ${n} more asked)`);
  }

  give(n: bigint): void {
    if (this.#retired) return; // the slot was reclaimed whole
    if (n < 0n || !this.budget.ledger.native.give(this.budget.index, this.slot, n))
      throw new RangeError(`give(${n}) with ${this.held} held`);
  }

  giveAll(): void {
    this.give(this.held);
  }

  /** The slot is about to be freed (and may go to another holder): this share neither takes nor gives from now on. */
  retire(): void {
    this.#retired = true;
  }
}
