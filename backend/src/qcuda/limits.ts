// What one VM may make the backend hold. Everything a guest can make the
// backend allocate (device memory, host memory, processes, threads, log
// lines) is counted against a bound here, per VM (each VM has a backend
// process of its own), and a request that would pass one fails with a CUDA
// error instead of growing the backend. The defaults are safe for a host
// serving several VMs; each is a qcuda-backend option (cli/backend.ts).
import { CudaErr, CudaError } from './cuda-error';

export interface VmLimits {
  /** Device memory the VM's processes may hold, in bytes (0: no quota): allocations, module globals, stack/heap/printf reservations. */
  deviceMemory: bigint;
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
}

export const DEFAULT_LIMITS: VmLimits = {
  deviceMemory: 0n,
  moduleStaging: 256n << 20n,
  moduleCache: 256n << 20n,
  deferredBytes: 16n << 20n,
  contexts: 64,
  logLinesPerSecond: 20,
  waiterThreads: 64,
  hostMapPieces: 32768,
};

/** A bounded count shared by the VM's sessions: take() fails instead of passing the bound (0: unbounded). */
export class Budget {
  #used = 0n;

  constructor(
    readonly limit: bigint,
    /** What is counted, for the error ("device memory quota"). */
    readonly what: string,
    /** The CUDA error a request that would pass the bound gets. */
    readonly code: number = CudaErr.MemoryAllocation,
  ) {}

  get used(): bigint {
    return this.#used;
  }

  /** What is left (undefined: unbounded). */
  get left(): bigint | undefined {
    if (this.limit === 0n) return undefined;
    return this.limit > this.#used ? this.limit - this.#used : 0n;
  }

  take(n: bigint): void {
    if (n < 0n) throw new RangeError(`take(${n})`);
    if (this.limit > 0n && this.#used + n > this.limit)
      throw new CudaError(this.code, `${this.what} of ${this.limit} bytes would be exceeded (${this.#used} in use, ${n} more asked)`);
    this.#used += n;
  }

  give(n: bigint): void {
    if (n < 0n || n > this.#used) throw new RangeError(`give(${n}) with ${this.#used} taken`);
    this.#used -= n;
  }
}

/**
 * A share of a Budget held by one owner (a session): everything it took is
 * given back at once when the owner goes (giveAll), so nothing it held stays
 * counted against the VM.
 */
export class Share {
  #held = 0n;

  constructor(readonly budget: Budget) {}

  get held(): bigint {
    return this.#held;
  }

  take(n: bigint): void {
    this.budget.take(n);
    this.#held += n;
  }

  give(n: bigint): void {
    if (n > this.#held) throw new RangeError(`give(${n}) with ${this.#held} held`);
    this.budget.give(n);
    this.#held -= n;
  }

  giveAll(): void {
    this.give(this.#held);
  }
}
