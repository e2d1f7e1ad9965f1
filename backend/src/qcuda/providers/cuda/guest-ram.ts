// Guest RAM as the cuda provider holds it: each region of the VM's memory
// table page-locked for the device (or not: pinGuestRam), and the aliases
// HOST_MAP makes of its pages, so that a kernel is given a mapping of just
// those pages, never an address inside guest RAM (see Alias).
import createDebug from 'debug';
import { CudaErr, CudaError } from '../../cuda-error';
import type { GuestMemorySource, HostPiece } from '../../provider';
import type { CudaContextNative, CudaNative } from './native-cuda';
import { native as sys, type Mapping } from '../../../sys/native';
import { Fd } from '../../../vhost-user';
import { MAX_SAFE_BIG } from '../../../vhost-user';

const debug = createDebug('qcuda:cuda');

interface Region {
  size: bigint;
  /** Settles when registration is over; true if the range is registered. */
  done: Promise<boolean>;
  /** A dup of the region's file and where the region starts in it (for HOST_MAP's aliases). */
  fd?: Fd;
  fileOffset: bigint;
}

/**
 * Mapped host memory (HOST_MAP) as a kernel sees it: a second mapping of
 * just those guest pages, at a random address, registered for the device.
 * Registered guest RAM can be read by any kernel of the process through its
 * host address whatever the registration flags (measured on the H100), so a
 * device pointer that were an address inside the guest RAM mapping would
 * tell a guest where all of guest RAM lies (its kernel memory, the other
 * processes' pages). The alias tells it nothing: it lies elsewhere, at an
 * address unrelated to the mapping's.
 */
export interface Alias {
  mapping: Mapping;
  /** Where the registered alias starts (the mapping's address). */
  base: bigint;
  /** Its pieces of guest RAM, once registered (copies from them use the alias). */
  given?: GivenPiece[];
}

/** A piece of guest RAM at its place in a registered alias (copies from the piece go there). */
export interface GivenPiece {
  addr: bigint;
  size: bigint;
  alias: bigint;
}

/** Where each piece lies in the alias made of them, in order, from `base` (+ the first piece's offset in its page). */
export function givenPieces(pieces: readonly HostPiece[], base: bigint): GivenPiece[] {
  let at = base + (pieces[0].addr % BigInt(sys.pageSize));
  return pieces.map((p) => {
    const g = { addr: p.addr, size: p.size, alias: at };
    at += p.size;
    return g;
  });
}

export class GuestRam {
  readonly #regions = new Map<bigint, Region>();

  constructor(
    readonly n: CudaNative,
    /** The context that registers guest RAM (the first GPU's primary context). */
    readonly primary: CudaContextNative,
    readonly pinGuestRam: boolean,
  ) {}

  /**
   * Page-locks guest RAM (PORTABLE | DEVICEMAP) on the primary context's thread,
   * unless pinGuestRam is off: then only keeps what HOST_MAP's aliases need.
   * Returns a promise that never rejects (a failure only costs speed: copies
   * then go through the driver's staging buffers); await it where it matters.
   */
  register(addr: bigint, size: bigint, source?: GuestMemorySource): Promise<void> {
    const flags = this.registerFlags;
    const prev = this.#regions.get(addr)?.done ?? Promise.resolve(false);
    const fd = source ? new Fd(sys.dup(source.fd)) : undefined;
    const done = !this.pinGuestRam
      ? prev.then(() => false)
      : prev.then(() =>
          this.primary.hostRegister(addr, size, flags).then(
            () => true,
            (e: Error) => {
              debug('cuMemHostRegister 0x%s+%s failed: %s', addr.toString(16), size, e.message);
              return false;
            },
          ),
        );
    this.#regions.get(addr)?.fd?.close();
    this.#regions.set(addr, { size, done, fd, fileOffset: source?.region.mmapOffset ?? 0n });
    return done.then(() => undefined);
  }

  /** How guest RAM and HOST_MAP aliases are registered: pinned for every context, mapped for the device. */
  get registerFlags(): number {
    return this.n.HOST_REGISTER_PORTABLE | this.n.HOST_REGISTER_DEVICEMAP;
  }

  /** Where a piece of guest RAM lies in its region's file: [fd, offset, length] (whole pages). */
  #filePiece(addr: bigint, size: bigint): [number, number, number] {
    const page = BigInt(sys.pageSize);
    for (const [start, r] of this.#regions) {
      if (addr < start || addr + size > start + r.size) continue;
      if (!r.fd) throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: the region of 0x${addr.toString(16)} came without its file`);
      const off = r.fileOffset + (addr - start);
      if (off % page !== 0n || size % page !== 0n) break;
      return [r.fd.value, Number(off), Number(size)];
    }
    throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not whole pages of guest memory`);
  }

  /** Scattered guest pages as one new mapping, in order, at a random address (see Alias). */
  aliasPieces(pieces: readonly HostPiece[]): Alias {
    const mapping = new sys.Mapping(pieces.map((p) => this.#filePiece(p.addr, p.size)));
    return { mapping, base: mapping.address };
  }

  /** A new mapping of the guest pages holding [addr, addr+size), at a random address (see Alias). */
  alias(addr: bigint, size: bigint): Alias {
    const page = BigInt(sys.pageSize);
    for (const [start, r] of this.#regions) {
      if (addr < start || addr + size > start + r.size) continue;
      if (!r.fd) throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: the region of 0x${addr.toString(16)} came without its file`);
      const first = r.fileOffset + (addr - start);
      const from = first - (first % page);
      const len = ((first + size + page - 1n) / page) * page - from;
      if (len > MAX_SAFE_BIG) break;
      const mapping = new sys.Mapping(r.fd.value, Number(len), Number(from), true);
      return { mapping, base: mapping.address };
    }
    throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not guest memory`);
  }

  /**
   * Unpins a region registered before. The mapping must stay mapped until the
   * returned promise settles (it never rejects).
   */
  unregister(addr: bigint): Promise<void> {
    const r = this.#regions.get(addr);
    if (r === undefined) return Promise.resolve();
    this.#regions.delete(addr);
    r.fd?.close();
    return r.done.then(async (ok) => {
      if (!ok) return;
      try {
        await this.primary.hostUnregister(addr);
      } catch (e) {
        debug('cuMemHostUnregister 0x%s failed: %s', addr.toString(16), (e as Error).message);
      }
    });
  }

  /** Whether [addr, addr+size) lies in one registered region (waits for a registration in progress). */
  async isRegistered(addr: bigint, size: bigint): Promise<boolean> {
    for (const [start, r] of this.#regions) {
      if (addr >= start && addr + size <= start + r.size) return r.done;
    }
    return false;
  }

  /** Whether [addr, addr+size) lies in one region of guest RAM (registered, when all of it is, once that is over). */
  async isGuestMemory(addr: bigint, size: bigint): Promise<boolean> {
    for (const [start, r] of this.#regions) {
      if (addr >= start && addr + size <= start + r.size) return this.pinGuestRam ? r.done : true;
    }
    return false;
  }

  /** Copies from or to these pieces of guest RAM go through their registered alias (addon/src/given.h). */
  give(pieces: readonly GivenPiece[]): void {
    for (const g of pieces) this.n.giveHost(g.addr, g.size, g.alias);
  }

  ungive(pieces: readonly GivenPiece[]): void {
    for (const g of pieces) this.n.ungiveHost(g.addr, g.alias);
  }

  /** Unpins every region (at the provider's close). */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#regions.keys()].map((a) => this.unregister(a)));
  }
}
