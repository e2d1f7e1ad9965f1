// A session's virtual memory management (cuMemAddressReserve, cuMemCreate,
// cuMemMap, cuMemSetAccess and their undoing): its reserved address ranges,
// its physical allocations and what is mapped where. Everything the guest
// asks is checked here, before a provider sees it (commands/vmm.ts runs the
// calls): addresses granularity-aligned, mappings inside one reservation of
// the session and over nothing mapped, handles the session's. A mapping
// becomes memory of the session (Session.checkRange) once its access is set,
// and stops being so when it is unmapped. Physical memory counts against the
// quota until it is released AND unmapped, as CUDA keeps it.
import { CudaErr, CudaError } from '../cuda-error';
import type { DevPtr, VmmRef } from '../provider';
import { QCUDA_VMM_ACCESS_RW, QCUDA_VMM_GRANULARITY } from '../proto';
import { RangeSet, type Range } from '../../sys/ranges';

export const GRANULARITY = BigInt(QCUDA_VMM_GRANULARITY);
/**
 * Address space one session may hold reserved at once: reservations cost
 * no memory, but each is a range of the GPU's page tables; 16 TiB is 100
 * times an H200's memory (XLA and PyTorch reserve about their device's).
 */
export const MAX_VMM_RESERVED = 1n << 44n;
/** The largest alignment a reservation may ask for (CUDA takes any power of two; nobody needs more). */
export const MAX_VMM_ALIGNMENT = 1n << 40n;

/** Physical memory of the session (VMM_CREATE). */
export interface VmmAlloc {
  readonly ref: VmmRef;
  readonly size: bigint;
  /** Holds of the handle: its creation and each VMM_RETAIN, less each VMM_RELEASE. The handle is the guest's while > 0. */
  held: number;
  /** Mappings of it. */
  maps: number;
  /** Another session's allocation imported here (VMM_IMPORT): the token it came by; its bytes are the owner's, not counted here. */
  readonly token?: string;
}

/** A mapping: [base, base + size) is the allocation `handle` from its start. */
export interface VmmMapping extends Range {
  readonly handle: bigint;
  /** QCUDA_VMM_ACCESS_RW once set (the range is then the session's memory), 0 before. */
  access: number;
}

/** What the provider is to free once a release or an unmap leaves an allocation unused. */
export interface VmmFreed {
  /** The session's handle of it (its exported token, if any, goes with it). */
  handle: bigint;
  ref: VmmRef;
  size: bigint;
  /** Set for an import: nothing to give back to the quota, the owner's memory stays. */
  token?: string;
}

/** Bytes of the bound on reserved address space, taken while the table had this generation. */
export interface AddressSpace {
  readonly generation: number;
  readonly size: bigint;
}

function hex(p: bigint): string {
  return `0x${p.toString(16)}`;
}

function aligned(what: string, v: bigint): void {
  if (v % GRANULARITY !== 0n)
    throw new CudaError(CudaErr.InvalidValue, `${what} ${hex(v)} is not a multiple of the granularity (${GRANULARITY})`);
}

/** size > 0 and aligned, ptr aligned. */
export function checkSpan(ptr: DevPtr, size: bigint, what: string): void {
  if (size === 0n) throw new CudaError(CudaErr.InvalidValue, `${what} of 0 bytes`);
  aligned(`${what}: address`, ptr);
  aligned(`${what}: size`, size);
}

export class VmmSpace {
  readonly #ranges = new RangeSet<Range>();
  readonly #allocs = new Map<bigint, VmmAlloc>();
  readonly #maps = new RangeSet<VmmMapping>();
  #reserved = 0n;
  /** Counts clear()s: address space taken before one is not given back after it. */
  #generation = 0;

  /** Reservations, allocations and mappings held: what the process's bound on objects counts. */
  get count(): number {
    return this.#ranges.size + this.#allocs.size + this.#maps.size;
  }

  // ---- reservations ----

  /** Takes bytes of the session's bound on reserved address space before the provider reserves them (giveAddressSpace: when freed, or the reservation failed). */
  takeAddressSpace(size: bigint): AddressSpace {
    if (size > MAX_VMM_RESERVED - this.#reserved)
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `address reservation of ${size} bytes: the process holds ${this.#reserved} of its ${MAX_VMM_RESERVED} already`,
      );
    this.#reserved += size;
    return { generation: this.#generation, size };
  }

  giveAddressSpace(t: AddressSpace): void {
    if (t.generation === this.#generation) this.#reserved -= t.size;
  }

  addReservation(base: DevPtr, size: bigint): void {
    if (this.#ranges.overlapping(base, size))
      throw new CudaError(CudaErr.Unknown, `the provider reserved ${hex(base)}+${size}, which overlaps a reservation`);
    this.#ranges.add({ base, size });
  }

  /** Forgets the reservation [ptr, ptr + size) exactly, which must have nothing mapped in it; its bytes stay taken until giveAddressSpace. */
  takeReservation(ptr: DevPtr, size: bigint): AddressSpace {
    const r = this.#ranges.find(ptr);
    if (!r || r.base !== ptr || r.size !== size)
      throw new CudaError(CudaErr.InvalidValue, `${hex(ptr)}+${size} is not an address reservation of this process`);
    if (this.#maps.overlapping(ptr, size))
      throw new CudaError(CudaErr.InvalidValue, `address reservation ${hex(ptr)}+${size} has memory mapped in it: unmap it first`);
    this.#ranges.removeAt(ptr);
    return { generation: this.#generation, size };
  }

  // ---- physical memory ----

  addAlloc(h: bigint, ref: VmmRef, size: bigint, token?: string): void {
    this.#allocs.set(h, { ref, size, held: 1, maps: 0, token });
  }

  /**
   * The owner of imported allocation h freed it: h and its mappings are
   * gone at once (no copy may use them from now on). What the provider is to
   * unmap and release, or undefined if h is gone already.
   */
  dropAlloc(h: bigint): { ref: VmmRef; maps: VmmMapping[] } | undefined {
    const a = this.#allocs.get(h);
    if (!a) return undefined;
    this.#allocs.delete(h);
    const maps = [...this.#maps.values()].filter((m) => m.handle === h);
    for (const m of maps) this.#maps.removeAt(m.base, (x) => x === m);
    return { ref: a.ref, maps };
  }

  /** The allocation of a handle the guest holds. */
  alloc(h: bigint): VmmAlloc {
    const a = this.#allocs.get(h);
    if (!a || a.held === 0) throw new CudaError(CudaErr.InvalidValue, `${hex(h)} is not a memory handle of this process`);
    return a;
  }

  /** Allocation h while it exists (its handle held, or mapped after its release): what an export of it for another process needs. */
  existing(h: bigint): VmmAlloc | undefined {
    return this.#allocs.get(h);
  }

  /** VMM_RELEASE: one hold less; the allocation if that left it unused (the caller frees it). */
  release(h: bigint): VmmFreed | undefined {
    const a = this.alloc(h);
    a.held--;
    return this.#unused(h, a);
  }

  /** VMM_RETAIN: the handle of the allocation mapped at ptr, held once more. */
  retain(ptr: DevPtr): bigint {
    const m = this.mappingAt(ptr);
    this.#allocs.get(m.handle)!.held++;
    return m.handle;
  }

  #unused(h: bigint, a: VmmAlloc): VmmFreed | undefined {
    if (a.held > 0 || a.maps > 0) return undefined;
    this.#allocs.delete(h);
    return { handle: h, ref: a.ref, size: a.size, token: a.token };
  }

  // ---- mappings ----

  /**
   * Records the mapping of handle h at [ptr, ptr + size) before the provider
   * makes it (a concurrent map of the same range is refused meanwhile):
   * aligned, inside one reservation, over nothing mapped, no larger than
   * the allocation. Undo with dropMapping if the provider fails.
   */
  addMapping(ptr: DevPtr, size: bigint, offset: bigint, h: bigint): VmmAlloc {
    if (offset !== 0n) throw new CudaError(CudaErr.InvalidValue, `cuMemMap at offset ${offset} of its allocation: CUDA takes 0 only`);
    const a = this.alloc(h);
    // As the driver answers (measured, H100, driver 580): a mapping past the allocation is NOT_SUPPORTED, aligned or not.
    if (size > a.size) throw new CudaError(CudaErr.NotSupported, `cuMemMap of ${size} bytes of an allocation of ${a.size}`);
    checkSpan(ptr, size, 'cuMemMap');
    if (!this.#ranges.holding(ptr, size))
      throw new CudaError(CudaErr.InvalidValue, `cuMemMap: ${hex(ptr)}+${size} is not inside one address reservation of this process`);
    const m = this.#maps.overlapping(ptr, size);
    if (m) throw new CudaError(CudaErr.InvalidValue, `cuMemMap: ${hex(ptr)}+${size} overlaps the mapping at ${hex(m.base)}+${m.size}`);
    this.#maps.add({ base: ptr, size, handle: h, access: 0 });
    a.maps++;
    return a;
  }

  /** Undoes addMapping (the provider could not map): the allocation if it is unused now (released meanwhile; the caller frees it). */
  dropMapping(ptr: DevPtr, h: bigint): VmmFreed | undefined {
    if (!this.#maps.removeAt(ptr, (m) => m.handle === h)) return undefined;
    const a = this.#allocs.get(h);
    if (!a) return undefined;
    a.maps--;
    return this.#unused(h, a);
  }

  /**
   * The mappings that tile [ptr, ptr + size) exactly: whole mappings, one
   * after the other, nothing unmapped between them (cuMemUnmap and
   * cuMemSetAccess take no part of a mapping).
   */
  tiling(ptr: DevPtr, size: bigint, what: string): VmmMapping[] {
    checkSpan(ptr, size, what);
    const out: VmmMapping[] = [];
    for (let at = ptr; at < ptr + size;) {
      const m = this.#maps.find(at);
      if (!m) throw new CudaError(CudaErr.InvalidValue, `${what}: nothing is mapped at ${hex(at)}`);
      if (m.base !== at || m.base + m.size > ptr + size)
        throw new CudaError(CudaErr.InvalidValue, `${what}: ${hex(ptr)}+${size} takes part of the mapping at ${hex(m.base)}+${m.size}`);
      out.push(m);
      at += m.size;
    }
    return out;
  }

  /** Forgets mappings (taken from tiling): they stop being memory of the session at once. The allocations they leave unused (the caller frees them once they are unmapped). */
  removeMappings(list: readonly VmmMapping[]): VmmFreed[] {
    const freed: VmmFreed[] = [];
    for (const m of list) {
      if (!this.#maps.removeAt(m.base, (x) => x === m)) continue;
      const a = this.#allocs.get(m.handle)!;
      a.maps--;
      const f = this.#unused(m.handle, a);
      if (f) freed.push(f);
    }
    return freed;
  }

  /** The mapping holding ptr. */
  mappingAt(ptr: DevPtr): VmmMapping {
    const m = this.#maps.find(ptr);
    if (!m) throw new CudaError(CudaErr.InvalidValue, `nothing is mapped at ${hex(ptr)}`);
    return m;
  }

  /** Makes mappings memory of the session (those still there: one unmapped meanwhile stays gone). */
  grantAccess(list: readonly VmmMapping[]): void {
    for (const m of list) m.access = QCUDA_VMM_ACCESS_RW;
  }

  /** Whether [ptr, ptr + size) lies in mappings with access, one after the other (a copy may span several). */
  accessible(ptr: DevPtr, size: bigint): boolean {
    for (let at = ptr; at < ptr + size;) {
      const m = this.#maps.find(at);
      if (!m || m.access === 0) return false;
      at = m.base + m.size;
    }
    return true;
  }

  /** What the session holds, for its state to be saved (src/qcuda/migration/session-state.ts). */
  snapshot(): { ranges: readonly Range[]; allocs: [bigint, VmmAlloc][]; maps: readonly VmmMapping[] } {
    return { ranges: this.#ranges.values(), allocs: [...this.#allocs], maps: this.#maps.values() };
  }

  /** Forgets everything (a reset, the close: the context's end frees it on the device). */
  clear(): void {
    this.#ranges.clear();
    this.#allocs.clear();
    this.#maps.clear();
    this.#reserved = 0n;
    this.#generation++;
  }
}
