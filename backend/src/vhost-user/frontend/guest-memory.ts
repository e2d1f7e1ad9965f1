// Guest RAM for the test frontend: one memfd cut into regions the way QEMU
// does it (RAM below 4 GiB, the rest above), with a bump allocator.
import { native, type Mapping } from '../platform/native';
import { Fd } from '../platform/fd';
import type { MemRegion } from '../message';

export const GIB = 1n << 30n;
/** The frontend-virtual addresses this "QEMU" pretends to have mapped guest RAM at. */
const FAKE_VA_BASE = 0x7f00_0000_0000n;

export interface RegionSpec {
  gpa: bigint;
  size: number;
}

interface Placed extends MemRegion {
  next: number; // bump pointer, bytes into the region
}

export class GuestMemory {
  readonly fd: Fd;
  readonly regions: Placed[];
  readonly #mapping: Mapping;
  readonly #bytes: Uint8Array;

  /** Default: 32 MiB at gpa 0 and 32 MiB at gpa 4 GiB; vaBase: where "QEMU" maps them (another QEMU maps them elsewhere). */
  constructor(
    specs: RegionSpec[] = [
      { gpa: 0n, size: 32 << 20 },
      { gpa: 4n * GIB, size: 32 << 20 },
    ],
    vaBase = FAKE_VA_BASE,
  ) {
    const total = specs.reduce((n, s) => n + s.size, 0);
    this.fd = new Fd(native.memfdCreate('vhost-user-guest-ram', total));
    native.addSeals(this.fd.value, native.F_SEAL_SHRINK | native.F_SEAL_GROW);
    this.#mapping = new native.Mapping(this.fd.value, total, 0);
    this.#bytes = new Uint8Array(this.#mapping.window(0, total));
    let off = 0;
    this.regions = specs.map((s) => {
      const r = { gpa: s.gpa, size: BigInt(s.size), userAddr: vaBase + BigInt(off), mmapOffset: BigInt(off), next: 0 };
      off += s.size;
      return r;
    });
  }

  /** Allocates len bytes (aligned) in the given region; returns the guest-physical address. */
  alloc(len: number, align = 16, region = 0): bigint {
    const r = this.regions[region];
    const at = Math.ceil(r.next / align) * align;
    if (at + len > Number(r.size)) throw new RangeError(`guest memory region ${region} is full`);
    r.next = at + len;
    return r.gpa + BigInt(at);
  }

  /** The allocator's position, to rewind() to when scratch buffers are done with. */
  mark(): number[] {
    return this.regions.map((r) => r.next);
  }

  rewind(mark: number[]): void {
    this.regions.forEach((r, i) => (r.next = mark[i]));
  }

  /** Host bytes of a guest-physical range (one region). */
  bytes(gpa: bigint, len: number): Uint8Array {
    const r = this.#region(gpa, len, 'gpa');
    return this.#bytes.subarray(Number(r.mmapOffset + gpa - r.gpa), Number(r.mmapOffset + gpa - r.gpa) + len);
  }

  /** The frontend-virtual address of a guest-physical address (for SET_VRING_ADDR). */
  va(gpa: bigint): bigint {
    const r = this.#region(gpa, 1, 'gpa');
    return r.userAddr + (gpa - r.gpa);
  }

  #region(addr: bigint, len: number, key: 'gpa'): Placed {
    const r = this.regions.find((x) => addr >= x[key] && addr + BigInt(len) <= x[key] + x.size);
    if (!r) throw new RangeError(`0x${addr.toString(16)}+${len} is outside guest memory`);
    return r;
  }

  close(): void {
    this.#mapping.unmap();
    this.fd.close();
  }
}
