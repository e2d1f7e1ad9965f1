// A session's device memory as the guest addresses it: its allocations and
// the guest memory it has mapped for the GPU (HOST_MAP), with what each
// counts against the VM's bounds.
import { CudaErr, CudaError } from '../cuda-error';
import { HOST_MAP_RAM_FACTOR, type Share } from '../quota/limits';
import type { DevPtr, HostPiece, ProviderContext } from '../provider';
import { RangeSet, type Range } from '../../sys/ranges';
import type { Reservation, SessionCore } from './session-core';

/** Pieces and bytes of the VM's bounds on mapped guest memory taken for a mapping in flight (takeHostMap). */
export interface HostMapTicket {
  readonly epoch: number;
  readonly pieces: number;
  readonly bytes: bigint;
  /** The guest memory mapped, as host ranges: no other mapping of the session may share a byte with them. */
  readonly host: readonly HostPiece[];
}

/** An allocation of the session's, on the device whose context made it. */
interface Alloc extends Range {
  device: number;
}

export class SessionMemory {
  readonly #allocs = new RangeSet<Alloc>();
  /** Other sessions' allocations opened here by IPC: copied to and from, never freed here. */
  readonly #imports = new RangeSet<Alloc>();
  readonly #hostMaps = new RangeSet<Range & { pieces: number; bytes: bigint }>();
  /** The guest memory of #hostMaps, by host address, with the device pointer of its mapping. */
  readonly #mappedHost = new RangeSet<Range & { map: DevPtr }>();

  /** hostMapPieces, hostMapBytes: the session's shares of the VM's bounds on mapped guest memory. */
  constructor(
    private readonly s: SessionCore,
    private readonly hostMapPieces: Share,
    private readonly hostMapBytes: Share,
  ) {}

  /** Records an allocation made on x, the context of device, with the bytes reserved for it. */
  addAlloc(x: ProviderContext, base: DevPtr, r: Reservation, device = 0): void {
    this.s.live(x);
    this.#allocs.add({ base, size: r.bytes, device });
    this.s.mirror()?.alloc(base, r.bytes);
  }

  /**
   * Removes the allocation that starts exactly at ptr; returns its device
   * and its bytes, still counted against the quota: the caller gives them
   * back (Session.unreserve) once the memory is free, which is after every
   * other process that opened it has let go of it (ipc.ts letGo).
   */
  removeAlloc(ptr: DevPtr): { held: Reservation; device: number } {
    const r = this.#allocs.removeAt(ptr);
    if (!r) throw new CudaError(CudaErr.InvalidValue, `free of 0x${ptr.toString(16)}, which is not an allocation of this process`);
    this.s.mirror()?.alloc(ptr, 0n);
    return { held: { epoch: this.s.epoch(), bytes: r.size }, device: r.device };
  }

  /** The allocation that starts exactly at ptr, or undefined. */
  allocAt(ptr: DevPtr): { size: bigint; device: number } | undefined {
    const a = this.#allocs.find(ptr);
    return a && a.base === ptr ? { size: a.size, device: a.device } : undefined;
  }

  /** Records another session's allocation opened here (IPC_OPEN). */
  addImport(base: DevPtr, size: bigint, device: number): void {
    this.#imports.add({ base, size, device });
    this.s.mirror()?.alloc(base, size); // the ring server checks copies against the mirror
  }

  /** Forgets an imported allocation; false where there is none at base. */
  removeImport(base: DevPtr): boolean {
    if (!this.#imports.removeAt(base)) return false;
    this.s.mirror()?.alloc(base, 0n);
    return true;
  }

  /**
   * The device of the allocation that holds all of [ptr, ptr+size);
   * undefined where none does (mapped guest memory, a module's variable,
   * VMM: memory of the context that made it, reached from there).
   */
  deviceOf(ptr: DevPtr, size: bigint): number | undefined {
    const n = size === 0n ? 1n : size;
    return (this.#allocs.holding(ptr, n) ?? this.#imports.holding(ptr, n))?.device;
  }

  /** Whether [ptr, ptr+size) lies inside one allocation or host mapping. */
  holds(ptr: DevPtr, size: bigint): boolean {
    return (
      this.#allocs.holding(ptr, size) !== undefined ||
      this.#imports.holding(ptr, size) !== undefined ||
      this.#hostMaps.holding(ptr, size) !== undefined
    );
  }

  /**
   * Takes pieces and bytes of the VM's bounds on mapped guest memory before
   * the mapping of host is made: given back by dropHostMap if it fails, kept
   * by addHostMap if it is recorded. A reset meanwhile gives back everything
   * the session held (its epoch tells the late call not to give again).
   * Refused: pieces that share a byte with each other or with a mapping the
   * session has (the same pages mapped again are the same pages pinned
   * again), and bytes that would take the VM's mapped total past
   * HOST_MAP_RAM_FACTOR x guestRam (taken first, then checked: concurrent
   * takers cannot all pass).
   */
  takeHostMap(host: readonly HostPiece[], guestRam: bigint): HostMapTicket {
    const sorted = [...host].sort((a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0));
    let bytes = 0n;
    for (const [i, r] of sorted.entries()) {
      if (i > 0 && sorted[i - 1].addr + sorted[i - 1].size > r.addr)
        throw new CudaError(CudaErr.InvalidValue, 'host mapping: two of its pieces share guest memory');
      const m = this.#mappedHost.overlapping(r.addr, r.size);
      if (m) throw new CudaError(CudaErr.InvalidValue, `host mapping: its guest memory is mapped already (device 0x${m.map.toString(16)})`);
      bytes += r.size;
    }
    this.hostMapPieces.take(BigInt(host.length));
    try {
      this.hostMapBytes.take(bytes);
    } catch (e) {
      this.hostMapPieces.give(BigInt(host.length));
      throw e;
    }
    const ticket = { epoch: this.s.epoch(), pieces: host.length, bytes, host: sorted };
    const bound = HOST_MAP_RAM_FACTOR * guestRam;
    if (this.hostMapBytes.budget.used > bound) {
      this.dropHostMap(ticket);
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `host mapping of ${bytes} bytes: the VM's mapped guest memory would pass ${HOST_MAP_RAM_FACTOR} x its ${guestRam} bytes of RAM`,
      );
    }
    return ticket;
  }

  dropHostMap(r: HostMapTicket): void {
    if (r.epoch !== this.s.epoch()) return;
    this.hostMapPieces.give(BigInt(r.pieces));
    this.hostMapBytes.give(r.bytes);
  }

  /** Records a mapping made of what r took; after a reset meanwhile it is given back and this throws. */
  addHostMap(x: ProviderContext, base: DevPtr, size: bigint, r: HostMapTicket): void {
    try {
      this.s.live(x);
    } catch (e) {
      this.dropHostMap(r);
      throw e;
    }
    this.#hostMaps.add({ base, size, pieces: r.pieces, bytes: r.bytes });
    for (const h of r.host) this.#mappedHost.add({ base: h.addr, size: h.size, map: base });
  }

  removeHostMap(base: DevPtr): void {
    const m = this.#hostMaps.removeAt(base);
    if (!m) throw new CudaError(CudaErr.InvalidValue, `0x${base.toString(16)} is not mapped host memory of this process`);
    this.#mappedHost.removeWhere((h) => h.map === base);
    this.hostMapPieces.give(BigInt(m.pieces));
    this.hostMapBytes.give(m.bytes);
  }

  /** What the session holds, for its state to be saved (src/qcuda/migration/session-state.ts). */
  snapshot(): { allocs: readonly Alloc[]; imports: readonly Alloc[]; hostMaps: readonly Range[] } {
    return { allocs: this.#allocs.values(), imports: this.#imports.values(), hostMaps: this.#hostMaps.values() };
  }

  /** Forgets everything and gives the mapped pieces and bytes back (a reset, the close: the context's end frees the memory). */
  clear(): void {
    this.#allocs.clear();
    this.#imports.clear();
    this.#hostMaps.clear();
    this.#mappedHost.clear();
    this.hostMapPieces.giveAll();
    this.hostMapBytes.giveAll();
  }
}
