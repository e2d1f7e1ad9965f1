// Host functions of one session (cudaLaunchHostFunc, cudaStreamAddCallback).
// They run in the guest process, so the backend only keeps stream order:
// HOST_FUNC marks a point in a stream, and every later command on that stream
// waits at a "gate" until the guest says the function has run. The guest
// library's callback thread parks a CALLBACK_WAIT request here; it is
// answered with the next marked point the GPU has reached, and the next
// CALLBACK_WAIT says that one has run.
//
// Posted work (batch.ts) that meets a gate is not waited for: it is deferred
// behind the gate and becomes the stream's new gate, so a batch never blocks
// on a host function (whose own thread may be waiting for the program), and
// an event recorded by deferred work carries a gate of its own for those
// who wait on the event.
//
// The legacy NULL stream orders with every other stream (as in CUDA, ignoring
// non-blocking streams: waiting too much is safe, too little is not): a
// command on it waits for every gate, and a command on another stream also
// waits for the NULL stream's gate.
import { CudaErr, CudaError } from '../cuda-error';
import { QCUDA_STREAM_LEGACY, Status } from '../proto';

/** Host functions marked and not yet run, per session. */
export const MAX_CALLBACKS = 4096;
/** CALLBACK_WAIT requests one session may park (each holds a virtqueue slot). */
export const MAX_WAITERS = 8;

export interface Reached {
  id: bigint;
  /** The stream's error when the GPU got there (0 if none). */
  status: number;
}

interface Marked {
  stream: bigint;
  ran: () => void;
  handedOut: boolean;
}

interface Waiter {
  resolve: (r: Reached) => void;
  reject: (e: Error) => void;
}

export class Callbacks {
  /** Bytes of posted work deferred behind gates and not run yet (bounded by the constructor's limit). */
  #deferredBytes = 0n;
  readonly #marked = new Map<bigint, Marked>();
  readonly #reached: Reached[] = [];
  readonly #waiters: Waiter[] = [];
  /** Stream handle -> settles when every function marked on it so far has run. */
  readonly #gates = new Map<bigint, Promise<void>>();
  /** Event handle -> settles when its deferred record has run. */
  readonly #eventGates = new Map<bigint, Promise<void>>();
  #closed = false;

  /** deferredLimit: VmLimits.deferredBytes (0: unbounded). */
  constructor(readonly deferredLimit: bigint) {}

  /** What a command on stream h must wait for first; undefined if nothing. */
  gate(h: bigint): Promise<void> | undefined {
    if (this.#gates.size === 0) return undefined;
    if (h === QCUDA_STREAM_LEGACY) return this.all();
    const own = this.#gates.get(h);
    const legacy = this.#gates.get(QCUDA_STREAM_LEGACY);
    if (own && legacy) return Promise.all([own, legacy]).then(() => undefined);
    return own ?? legacy;
  }

  /** What a command using event e must wait for: a deferred record of it. */
  eventGate(e: bigint): Promise<void> | undefined {
    return this.#eventGates.get(e);
  }

  /**
   * Runs `fn` once `gate` opens, as the next work on stream h (and, if
   * `records` is given, as that event's pending record); later work on h
   * waits for it. Its failure goes to onError. `bytes` is what the deferred
   * entry holds in memory: a guest that never runs its host function must
   * not make the backend hold its later work without bound, so past the
   * limit the entry fails at once (cudaErrorMemoryAllocation).
   */
  defer(h: bigint, gate: Promise<void>, fn: () => Promise<void>, onError: (e: unknown) => void, bytes: number, records?: bigint): void {
    const n = BigInt(bytes);
    if (this.deferredLimit > 0n && this.#deferredBytes + n > this.deferredLimit)
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `more than ${this.deferredLimit} bytes of posted work held behind host functions that have not run`,
      );
    this.#deferredBytes += n;
    const p = gate
      .then(fn)
      .catch(onError)
      .finally(() => (this.#deferredBytes -= n));
    setUntilSettled(this.#gates, h, p);
    if (records !== undefined) setUntilSettled(this.#eventGates, records, p);
  }

  /** Every gate (cudaDeviceSynchronize waits for host functions too). */
  all(): Promise<void> | undefined {
    if (this.#gates.size === 0) return undefined;
    return Promise.all(this.#gates.values()).then(() => undefined);
  }

  /** Marks function `id` on stream h; the GPU reaches the point when `reached` settles (with the stream's status). */
  mark(h: bigint, id: bigint, reached: Promise<number>): void {
    if (this.#closed) throw new CudaError(Status.NO_SESSION, 'the session is closing');
    if (id === 0n || this.#marked.has(id)) throw new CudaError(CudaErr.InvalidValue, `host function id ${id} is 0 or in use`);
    if (this.#marked.size >= MAX_CALLBACKS)
      throw new CudaError(CudaErr.MemoryAllocation, `more than ${MAX_CALLBACKS} host functions waiting to run`);
    let ran!: () => void;
    const done = new Promise<void>((r) => (ran = r));
    this.#marked.set(id, { stream: h, ran, handedOut: false });
    const prev = this.#gates.get(h);
    setUntilSettled(this.#gates, h, prev ? prev.then(() => done) : done);
    void reached.then((status) => this.#reach({ id, status }));
  }

  #reach(r: Reached): void {
    const m = this.#marked.get(r.id);
    if (this.#closed || !m) return;
    const w = this.#waiters.shift();
    if (!w) {
      this.#reached.push(r);
      return;
    }
    m.handedOut = true;
    w.resolve(r);
  }

  /** CALLBACK_WAIT: function `done` (0: none) has run; resolves with the next one to run. */
  wait(done: bigint): Promise<Reached> {
    if (this.#closed) throw new CudaError(Status.NO_SESSION, 'the session is closing');
    if (done !== 0n) {
      const m = this.#marked.get(done);
      if (!m || !m.handedOut) throw new CudaError(CudaErr.InvalidValue, `host function ${done} was not handed out to run`);
      this.#marked.delete(done);
      m.ran();
    }
    const r = this.#reached.shift();
    if (r) {
      this.#marked.get(r.id)!.handedOut = true;
      return Promise.resolve(r);
    }
    if (this.#waiters.length >= MAX_WAITERS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_WAITERS} callback waits parked`);
    return new Promise((resolve, reject) => this.#waiters.push({ resolve, reject }));
  }

  /**
   * cudaDeviceReset: marked functions are forgotten (natively they never
   * run) and their gates open; each parked wait is answered with id 0
   * ("nothing to run: wait again"), so no request stays parked on a point
   * that no longer exists.
   */
  reset(): void {
    for (const m of this.#marked.values()) m.ran();
    this.#marked.clear();
    this.#reached.length = 0;
    for (const w of this.#waiters.splice(0)) w.resolve({ id: 0n, status: 0 });
  }

  /**
   * A stop for a restart (QcudaDevice.quiesce), with no function marked:
   * each parked wait is answered with id 0 ("nothing to run: wait again"),
   * as after a reset, so that none is in flight when the state is saved;
   * the guest's callback thread parks again, on the restarted backend.
   * Returns how many were answered.
   */
  releaseParked(): number {
    if (this.#marked.size > 0) throw new Error('host functions are marked: their waits cannot be answered');
    const all = this.#waiters.splice(0);
    for (const w of all) w.resolve({ id: 0n, status: 0 });
    return all.length;
  }

  /** Session end: every gate opens and every parked wait ends. */
  close(): void {
    this.#closed = true;
    for (const m of this.#marked.values()) m.ran();
    this.#marked.clear();
    this.#reached.length = 0;
    for (const w of this.#waiters.splice(0)) w.reject(new CudaError(Status.NO_SESSION, 'the session closed'));
  }

  /** Bytes of posted work deferred and not run yet (tests read it). */
  get deferredBytes(): bigint {
    return this.#deferredBytes;
  }

  get waiting(): number {
    return this.#marked.size;
  }

  /** CALLBACK_WAIT requests parked here now, waiting for a host function to reach. */
  get parked(): number {
    return this.#waiters.length;
  }

  /** No stream or event is gated: every command may start at once. */
  get quiet(): boolean {
    return this.#gates.size === 0 && this.#eventGates.size === 0;
  }
}

/** map[k] = p until p settles (unless replaced meanwhile). */
function setUntilSettled(map: Map<bigint, Promise<void>>, k: bigint, p: Promise<void>): void {
  map.set(k, p);
  const drop = () => {
    if (map.get(k) === p) map.delete(k);
  };
  p.then(drop, drop);
}
