// One guest process's view of the device: its context, its allocations and
// its stream and event handles. Everything the guest names is looked up
// here, so a pointer or handle of another session (or VM) is simply unknown.
import { randomBytes } from 'node:crypto';
import { CudaErr, CudaError } from './cuda-error';
import type { DevPtr, EventRef, Provider, ProviderContext, StreamRef } from './provider';
import { QCUDA_STREAM_LEGACY, QCUDA_STREAM_PER_THREAD } from './proto';
import { RangeSet, type Range } from './ranges';

export class Session {
  readonly id: bigint;
  readonly #allocs = new RangeSet<Range>();
  readonly #hostMaps = new RangeSet<Range>();
  readonly #streams = new Map<bigint, StreamRef>();
  readonly #events = new Map<bigint, EventRef>();
  #nextHandle = 0x100n;
  #ctx: Promise<ProviderContext> | undefined;
  allocated = 0n;

  constructor(
    private readonly provider: Provider,
    public device = 0,
  ) {
    this.id = randomBytes(8).readBigUInt64LE() | 1n; // never 0: 0 means "no session"
  }

  /** The CUDA context, created on first use (a NOP-only process costs nothing). */
  context(): Promise<ProviderContext> {
    this.#ctx ??= this.provider.openContext(this.device);
    return this.#ctx;
  }

  get hasContext(): boolean {
    return this.#ctx !== undefined;
  }

  // ---- device memory ----

  addAlloc(base: DevPtr, size: bigint): void {
    this.#allocs.add({ base, size });
    this.allocated += size;
  }

  /** Removes the allocation that starts exactly at ptr; returns its size. */
  removeAlloc(ptr: DevPtr): bigint {
    const r = this.#allocs.removeAt(ptr);
    if (!r) throw new CudaError(CudaErr.InvalidValue, `free of 0x${ptr.toString(16)}, which is not an allocation of this process`);
    this.allocated -= r.size;
    return r.size;
  }

  /** [ptr, ptr+size) must lie inside one allocation or host mapping of this session. */
  checkRange(ptr: DevPtr, size: bigint, what: string): void {
    if (size === 0n || this.#allocs.holding(ptr, size) || this.#hostMaps.holding(ptr, size)) return;
    throw new CudaError(CudaErr.InvalidValue, `${what}: 0x${ptr.toString(16)}+${size} is not inside memory of this process`);
  }

  addHostMap(base: DevPtr, size: bigint): void {
    this.#hostMaps.add({ base, size });
  }

  removeHostMap(base: DevPtr): void {
    if (!this.#hostMaps.removeAt(base)) throw new CudaError(CudaErr.InvalidValue, `0x${base.toString(16)} is not mapped host memory of this process`);
  }

  // ---- handles ----

  #newHandle(): bigint {
    const h = this.#nextHandle;
    this.#nextHandle += 1n;
    return h;
  }

  addStream(s: StreamRef): bigint {
    const h = this.#newHandle();
    this.#streams.set(h, s);
    return h;
  }

  /** The stream behind a handle; undefined for the NULL / per-thread stream. */
  stream(h: bigint): StreamRef | undefined {
    if (h === QCUDA_STREAM_LEGACY || h === QCUDA_STREAM_PER_THREAD) return undefined;
    const s = this.#streams.get(h);
    if (s === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `stream 0x${h.toString(16)} is not a stream of this process`);
    return s;
  }

  takeStream(h: bigint): StreamRef {
    const s = this.stream(h);
    if (s === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, 'the NULL stream cannot be destroyed');
    this.#streams.delete(h);
    return s;
  }

  addEvent(e: EventRef): bigint {
    const h = this.#newHandle();
    this.#events.set(h, e);
    return h;
  }

  event(h: bigint): EventRef {
    const e = this.#events.get(h);
    if (e === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `event 0x${h.toString(16)} is not an event of this process`);
    return e;
  }

  takeEvent(h: bigint): EventRef {
    const e = this.event(h);
    this.#events.delete(h);
    return e;
  }

  /** Frees everything (cudaDeviceReset, process exit): the context goes with it. */
  async reset(): Promise<void> {
    const ctx = this.#ctx;
    this.#ctx = undefined;
    this.#allocs.clear();
    this.#hostMaps.clear();
    this.#streams.clear();
    this.#events.clear();
    this.allocated = 0n;
    if (ctx) await (await ctx).destroy();
  }
}
