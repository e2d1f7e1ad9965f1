// Emulated device memory of the emu provider: allocations, address
// reservations and physical memory of virtual memory management (one address
// space for every context, as a GPU's), and each context's own mappings
// (guest memory mapped for the device, VMM mappings).
import { CudaErr, CudaError } from '../../cuda-error';
import type { DevPtr, HostPiece, VmmRef } from '../../provider';
import { RangeSet, type Range } from '../../../sys/ranges';
import { MAX_SAFE_BIG } from '../../../vhost-user';

/**
 * Where the device pointers of mappings of several pieces (HOST_MAP_PAGES)
 * start: above every user address of x86-64 and aarch64, so that none is
 * also a host address some single-piece mapping hands out; 2 MiB apart.
 */
const HOST_MAP_PAGES_BASE = 0xffff_c000_0000_0000n;
const MAP_ALIGN = 2n << 20n;

/**
 * Reservations of virtual memory management (vmmReserve) live in
 * [VMM_BASE, HOST_MAP_PAGES_BASE): 64 TiB above every user address, as
 * HOST_MAP_PAGES' are, and below theirs.
 */
const VMM_BASE = 0xffff_8000_0000_0000n;
const VMM_END = HOST_MAP_PAGES_BASE;

/** Emulated device addresses live here, far from any host mapping. */
const DEVICE_BASE = 0x2000_0000_0000n;
const ALIGN = 512n;
const GUARD = 1n << 16n; // unmapped gap between allocations

/** What owns device memory: a context, its device, and where its own mappings are. */
export interface MemoryOwner {
  /** Destroyed: it makes nothing more. */
  readonly dead: boolean;
  readonly device: number;
  readonly mappings: ContextMappings;
}

interface Alloc extends Range {
  bytes: Uint8Array;
  owner: MemoryOwner;
  /** Another context's allocation opened here by IPC: its bytes, not counted here, never freed here. */
  imported?: true;
}

/** Physical memory of virtual memory management (vmmCreate): counted in the device's use like an allocation. */
interface VmmMemory {
  bytes: Uint8Array;
  owner: MemoryOwner;
  /** Another context's physical memory imported here (vmmShare): not counted here. */
  imported?: true;
}

function alive(owner: MemoryOwner): void {
  if (owner.dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'the context was destroyed');
}

/**
 * The device memory of the provider: what every context allocates from,
 * totalMem bytes on each emulated device, in one address space (as unified
 * addressing has it: a pointer names one device's memory).
 */
export class EmuMemory {
  readonly #allocs = new RangeSet<Alloc>();
  #next = DEVICE_BASE;
  /** Every context's VMM reservations: one address space, as a GPU's. */
  readonly #reserved = new RangeSet<Range & { owner: MemoryOwner }>();
  readonly #vmm = new Map<number, VmmMemory>();
  #nextVmm = 1;
  /** Bytes in use, by device. */
  readonly #used: bigint[];

  constructor(
    readonly totalMem: bigint,
    devices: number,
    /** Views of guest RAM by host address: the device pointers of mapped host memory. */
    readonly guestView: (addr: bigint, len: number) => Uint8Array[],
  ) {
    this.#used = new Array<bigint>(devices).fill(0n);
  }

  /** Bytes in use on every device together. */
  get used(): bigint {
    return this.#used.reduce((a, b) => a + b, 0n);
  }

  /** Bytes in use on one device. */
  usedOn(device: number): bigint {
    return this.#used[device];
  }

  /** Host memory standing for size bytes of device memory, within what the device has left. */
  #backing(size: bigint, device: number): Uint8Array {
    const free = this.totalMem - this.#used[device];
    if (size > free || size > MAX_SAFE_BIG)
      throw new CudaError(CudaErr.MemoryAllocation, `out of device memory: ${size} bytes requested, ${free} free on device ${device}`);
    try {
      return new Uint8Array(Number(size));
    } catch {
      throw new CudaError(CudaErr.MemoryAllocation, `host cannot back ${size} bytes`);
    }
  }

  allocate(size: bigint, owner: MemoryOwner): DevPtr {
    alive(owner);
    if (size <= 0n) throw new CudaError(CudaErr.InvalidValue, 'allocation size 0');
    const bytes = this.#backing(size, owner.device);
    const base = this.#next;
    this.#next += ((size + ALIGN - 1n) / ALIGN) * ALIGN + GUARD;
    this.#allocs.add({ base, size, bytes, owner });
    this.#used[owner.device] += size;
    return base;
  }

  /** The bytes of owner's allocation at ptr, for another context to open (IPC). */
  exportBytes(ptr: DevPtr, owner: MemoryOwner): Uint8Array {
    const a = this.#allocs.find(ptr);
    if (!a || a.base !== ptr || a.owner !== owner || a.imported)
      throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not an allocation of the handle's owner`);
    return a.bytes;
  }

  /**
   * Another memory's allocation, opened by owner at an address of this one
   * (each device of a backend has its own memory: the two address spaces
   * may use the same numbers). Not counted: its owner's memory counts it.
   */
  importBytes(bytes: Uint8Array, owner: MemoryOwner): DevPtr {
    alive(owner);
    const base = this.#next;
    const size = BigInt(bytes.length);
    this.#next += ((size + ALIGN - 1n) / ALIGN) * ALIGN + GUARD;
    this.#allocs.add({ base, size, bytes, owner, imported: true });
    return base;
  }

  /** Drops what importBytes opened; false where owner opened nothing at ptr. */
  unimport(ptr: DevPtr, owner: MemoryOwner): boolean {
    return this.#allocs.removeAt(ptr, (x) => x.owner === owner && x.imported === true) !== undefined;
  }

  release(ptr: DevPtr, owner: MemoryOwner): void {
    const a = this.#allocs.removeAt(ptr, (x) => x.owner === owner && !x.imported);
    if (!a) throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not an allocation`);
    this.#used[owner.device] -= a.size;
  }

  /**
   * A migrated allocation: bytes at base, as at its source; refused where
   * the range is taken here or past the device's memory (nothing is kept).
   */
  adoptAllocation(base: DevPtr, bytes: Uint8Array, owner: MemoryOwner): void {
    alive(owner);
    const size = BigInt(bytes.length);
    if (size === 0n || base < DEVICE_BASE || base + size >= VMM_BASE || this.#allocs.overlapping(base, size + GUARD))
      throw new CudaError(CudaErr.MemoryAllocation, `device memory 0x${base.toString(16)}+${size} is taken or out of range here`);
    const free = this.totalMem - this.#used[owner.device];
    if (size > free) throw new CudaError(CudaErr.MemoryAllocation, `out of device memory: ${size} bytes to restore, ${free} free`);
    this.#allocs.add({ base, size, bytes, owner });
    this.#used[owner.device] += size;
    const end = base + ((size + ALIGN - 1n) / ALIGN) * ALIGN + GUARD;
    if (end > this.#next) this.#next = end;
  }

  /** A migrated opening of another context's allocation (importBytes), at its address at the source. */
  adoptImport(base: DevPtr, bytes: Uint8Array, owner: MemoryOwner): void {
    alive(owner);
    const size = BigInt(bytes.length);
    if (base < DEVICE_BASE || base + size >= VMM_BASE || this.#allocs.overlapping(base, size))
      throw new CudaError(CudaErr.InvalidValue, `IPC memory at 0x${base.toString(16)}+${size} is taken or out of range here`);
    this.#allocs.add({ base, size, bytes, owner, imported: true });
    const end = base + ((size + ALIGN - 1n) / ALIGN) * ALIGN + GUARD;
    if (end > this.#next) this.#next = end;
  }

  /** Physical memory m's bytes and whether it was imported (migration/). */
  vmmBytes(m: VmmRef, owner: MemoryOwner): Uint8Array {
    return this.vmmMemory(m, owner);
  }

  /** Migrated physical memory: these bytes, counted as vmmCreate's. */
  vmmAdopt(bytes: Uint8Array, owner: MemoryOwner): number {
    alive(owner);
    const free = this.totalMem - this.#used[owner.device];
    if (BigInt(bytes.length) > free)
      throw new CudaError(CudaErr.MemoryAllocation, `out of device memory: ${bytes.length} bytes to restore, ${free} free`);
    const id = this.#nextVmm++;
    this.#vmm.set(id, { bytes, owner });
    this.#used[owner.device] += BigInt(bytes.length);
    return id;
  }

  releaseAll(owner: MemoryOwner): void {
    for (const a of this.#allocs.removeWhere((x) => x.owner === owner)) if (!a.imported) this.#used[owner.device] -= a.size;
    this.#reserved.removeWhere((r) => r.owner === owner);
    for (const [id, m] of this.#vmm) if (m.owner === owner) this.vmmRelease(id, owner);
  }

  /**
   * The range at hint where it is aligned, free and in [VMM_BASE, VMM_END)
   * (a migrated reservation asks for its address so), else the lowest free
   * range of size bytes, aligned.
   */
  vmmReserve(size: bigint, alignment: bigint, owner: MemoryOwner, hint = 0n): DevPtr {
    alive(owner);
    if (hint !== 0n && hint % alignment === 0n && hint >= VMM_BASE && hint + size <= VMM_END && !this.#reserved.overlapping(hint, size)) {
      this.#reserved.add({ base: hint, size, owner });
      return hint;
    }
    const up = (p: bigint): bigint => ((p + alignment - 1n) / alignment) * alignment;
    let at = up(VMM_BASE);
    for (const r of this.#reserved.values()) {
      if (at + size <= r.base) break;
      if (r.base + r.size > at) at = up(r.base + r.size);
    }
    if (at + size > VMM_END) throw new CudaError(CudaErr.MemoryAllocation, `no free address range of ${size} bytes`);
    this.#reserved.add({ base: at, size, owner });
    return at;
  }

  vmmFree(ptr: DevPtr, size: bigint, owner: MemoryOwner): void {
    if (!this.#reserved.removeAt(ptr, (r) => r.owner === owner && r.size === size))
      throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)}+${size} is not an address reservation`);
  }

  /** A reservation of owner's holds all of [ptr, ptr + size). */
  vmmReserved(ptr: DevPtr, size: bigint, owner: MemoryOwner): boolean {
    return this.#reserved.holding(ptr, size)?.owner === owner;
  }

  vmmCreate(size: bigint, owner: MemoryOwner): number {
    alive(owner);
    const bytes = this.#backing(size, owner.device);
    const id = this.#nextVmm++;
    this.#vmm.set(id, { bytes, owner });
    this.#used[owner.device] += size;
    return id;
  }

  /** Owner's physical memory m as importer's (cuMemImportFromShareableHandle): the same bytes, counted in the owner's use only. */
  vmmShare(m: VmmRef, owner: MemoryOwner, importer: MemoryOwner): number {
    alive(importer);
    const bytes = this.vmmMemory(m, owner);
    const id = this.#nextVmm++;
    this.#vmm.set(id, { bytes, owner: importer, imported: true });
    return id;
  }

  vmmMemory(m: VmmRef, owner: MemoryOwner): Uint8Array {
    const x = typeof m === 'number' ? this.#vmm.get(m) : undefined;
    if (!x || x.owner !== owner) throw new CudaError(CudaErr.InvalidValue, `not physical memory of this context: ${String(m)}`);
    return x.bytes;
  }

  vmmRelease(m: VmmRef, owner: MemoryOwner): void {
    const bytes = this.vmmMemory(m, owner);
    const imported = this.#vmm.get(m as number)!.imported;
    this.#vmm.delete(m as number);
    if (!imported) this.#used[owner.device] -= BigInt(bytes.length);
  }

  /** Views of [ptr, ptr+size): emulated device memory, or mapped guest memory. */
  views(ptr: DevPtr, size: bigint, owner: MemoryOwner): Uint8Array[] {
    const a = this.#allocs.find(ptr);
    if (a && a.owner === owner) {
      const off = Number(ptr - a.base);
      if (off + Number(size) > a.bytes.length) throw new CudaError(CudaErr.InvalidValue, 'range runs past its allocation');
      return [a.bytes.subarray(off, off + Number(size))];
    }
    const pieces = owner.mappings.mappedPieces(ptr, size);
    if (pieces) return pieces.flatMap((p) => this.guestView(p.addr, Number(p.size)));
    const vmm = owner.mappings.vmmViews(ptr, size);
    if (vmm) return vmm;
    throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not device memory of this context`);
  }
}

/** A context's own mappings: guest memory mapped for the device, and VMM mappings of physical memory. */
export class ContextMappings {
  /** Mapped guest memory by device pointer: one piece's pointer is its host address; several get a range of their own. */
  readonly #maps = new RangeSet<Range & { pieces: readonly HostPiece[] }>();
  #nextMapBase = HOST_MAP_PAGES_BASE;
  /** VMM mappings: each a view of its physical memory. */
  readonly #vmmMaps = new RangeSet<Range & { bytes: Uint8Array }>();

  /** The pieces of guest memory (host addresses) that [ptr, ptr+size) of a mapping is, or undefined. */
  mappedPieces(ptr: bigint, size: bigint): HostPiece[] | undefined {
    const m = this.#maps.holding(ptr, size);
    if (!m) return undefined;
    const out: HostPiece[] = [];
    let at = m.base;
    for (const p of m.pieces) {
      const from = ptr > at ? ptr : at;
      const to = ptr + size < at + p.size ? ptr + size : at + p.size;
      if (from < to) out.push({ addr: p.addr + (from - at), size: to - from });
      at += p.size;
    }
    return out;
  }

  /** Views of [ptr, ptr + size) where VMM mappings, one after the other, hold all of it; else undefined. */
  vmmViews(ptr: bigint, size: bigint): Uint8Array[] | undefined {
    const out: Uint8Array[] = [];
    for (let at = ptr; at < ptr + size;) {
      const m = this.#vmmMaps.find(at);
      if (!m) return undefined;
      const end = ptr + size < m.base + m.size ? ptr + size : m.base + m.size;
      out.push(m.bytes.subarray(Number(at - m.base), Number(end - m.base)));
      at = end;
    }
    return out;
  }

  /** The device pointer of guest memory (hostDevicePointer). */
  map(pieces: readonly HostPiece[]): DevPtr {
    const size = pieces.reduce((n, p) => n + p.size, 0n);
    const base = pieces.length === 1 ? pieces[0].addr : this.#nextMapBase;
    if (pieces.length > 1) this.#nextMapBase += ((size + MAP_ALIGN - 1n) / MAP_ALIGN) * MAP_ALIGN + MAP_ALIGN;
    this.#maps.add({ base, size, pieces: pieces.slice() });
    return base;
  }

  unmap(ptr: DevPtr): void {
    this.#maps.removeAt(ptr);
  }

  /** The guest memory mapped at ptr, by host address (migration/). */
  piecesAt(ptr: DevPtr): readonly HostPiece[] | undefined {
    const m = this.#maps.find(ptr);
    return m && m.base === ptr ? m.pieces : undefined;
  }

  /** A migrated mapping: its device pointer as at its source, its guest memory where it lies here. */
  mapAt(base: DevPtr, pieces: readonly HostPiece[]): void {
    const size = pieces.reduce((n, p) => n + p.size, 0n);
    if (this.#maps.overlapping(base, size))
      throw new CudaError(CudaErr.InvalidValue, `mapped host memory at 0x${base.toString(16)} is taken`);
    this.#maps.add({ base, size, pieces: pieces.slice() });
    if (base >= this.#nextMapBase) this.#nextMapBase = base + ((size + MAP_ALIGN - 1n) / MAP_ALIGN) * MAP_ALIGN + MAP_ALIGN;
  }

  /** Whether a VMM mapping overlaps [ptr, ptr + size). */
  vmmMapped(ptr: DevPtr, size: bigint): boolean {
    return this.#vmmMaps.overlapping(ptr, size) !== undefined;
  }

  /** One VMM mapping holds all of [ptr, ptr + size). */
  vmmHolds(ptr: DevPtr, size: bigint): boolean {
    return this.#vmmMaps.holding(ptr, size) !== undefined;
  }

  vmmMap(ptr: DevPtr, bytes: Uint8Array): void {
    this.#vmmMaps.add({ base: ptr, size: BigInt(bytes.length), bytes });
  }

  vmmUnmap(ptr: DevPtr, size: bigint): boolean {
    return this.#vmmMaps.removeAt(ptr, (m) => m.size === size) !== undefined;
  }

  clear(): void {
    this.#maps.clear();
    this.#vmmMaps.clear();
  }
}
