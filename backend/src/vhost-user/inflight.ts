// What a ring's owner has taken and not yet answered, kept in shared memory
// so that another process can finish the job if the owner dies. A ring can
// be handed to another process (Vring.detach / Vring.adopt: a session's GPU
// worker serving its own queue); should that process be killed mid-request,
// the backend answers what it left in flight (used length 0, which the
// driver reads as a failed request) and serves the ring again from where
// the owner stopped, so the guest neither waits forever nor sees an answer
// twice.
//
// Layout (little-endian): u16 lastAvail, u16 usedIdx, u32 size, u32 served
// (answers published, for the backend's status), u32 servedInC (those of
// them a ring front in C published: qcuda's ring server), then one bit per
// descriptor head (addon/src/guest_ring.cc writes it the same way). Only
// the owner writes it, in an order that makes it right at every point where
// the owner can die:
//   take:    set the head's bit, then store lastAvail;
//   publish: write the used entry and used->idx, then clear the bit, then
//            store usedIdx.
// recover() undoes each half-done step: a head whose answer reached the used
// ring after usedIdx was stored is done; a head marked but still at the
// avail slot lastAvail names was not taken.
import { native, type Mapping } from './platform/native';
import { RingError } from './errors';
import { Fd } from './platform/fd';

const HEADER = 16;

export class InflightRecord {
  readonly #bytes: Uint8Array;
  readonly #words: Uint16Array;
  readonly #served: Uint32Array;
  readonly #servedInC: Uint32Array;

  private constructor(
    readonly fd: Fd,
    readonly size: number,
    private readonly mapping: Mapping,
  ) {
    this.#bytes = new Uint8Array(mapping.window(0, InflightRecord.bytesFor(size)));
    this.#words = new Uint16Array(this.#bytes.buffer, this.#bytes.byteOffset, 2);
    this.#served = new Uint32Array(this.#bytes.buffer, this.#bytes.byteOffset + 8, 1);
    this.#servedInC = new Uint32Array(this.#bytes.buffer, this.#bytes.byteOffset + 12, 1);
  }

  /** The record's memory (a ring's front in C writes it as this class does). */
  get bytes(): Uint8Array {
    return this.#bytes;
  }

  static bytesFor(size: number): number {
    return HEADER + Math.ceil(size / 8);
  }

  /** A new, empty record for a ring of `size` entries (whose owner starts at lastAvail / usedIdx). */
  static create(size: number, lastAvail: number, usedIdx: number): InflightRecord {
    const fd = new Fd(native.memfdCreate('vhost-user-inflight', InflightRecord.bytesFor(size)));
    const r = new InflightRecord(fd, size, new native.Mapping(fd.value, InflightRecord.bytesFor(size), 0));
    new DataView(r.#bytes.buffer, r.#bytes.byteOffset).setUint32(4, size, true);
    r.#words[0] = lastAvail;
    r.#words[1] = usedIdx;
    return r;
  }

  /** The owner's view of a record it was handed (it takes fd over). */
  static open(fd: Fd, size: number): InflightRecord {
    const r = new InflightRecord(fd, size, new native.Mapping(fd.value, InflightRecord.bytesFor(size), 0));
    const recorded = new DataView(r.#bytes.buffer, r.#bytes.byteOffset).getUint32(4, true);
    if (recorded !== size) {
      r.close();
      throw new RingError(`an in-flight record for ${recorded} entries, not ${size}`);
    }
    return r;
  }

  get lastAvail(): number {
    return Atomics.load(this.#words, 0);
  }

  get usedIdx(): number {
    return Atomics.load(this.#words, 1);
  }

  /** Answers the owner has published (its session's calls, for the backend's status). */
  get served(): number {
    return Atomics.load(this.#served, 0);
  }

  /** Of those, the answers a ring front in C published. */
  get servedInC(): number {
    return Atomics.load(this.#servedInC, 0);
  }

  inFlight(head: number): boolean {
    return head < this.size && (this.#bytes[HEADER + (head >> 3)] & (1 << (head & 7))) !== 0;
  }

  /** Heads marked in flight, in order. */
  heads(): number[] {
    const out: number[] = [];
    for (let h = 0; h < this.size; h++) if (this.inFlight(h)) out.push(h);
    return out;
  }

  /** The owner took head, and its next avail index is lastAvail. */
  took(head: number, lastAvail: number): void {
    this.#mark(head, true);
    Atomics.store(this.#words, 0, lastAvail);
  }

  /** The owner published head's answer; used->idx is now usedIdx. */
  published(head: number, usedIdx: number): void {
    this.#mark(head, false);
    Atomics.store(this.#words, 1, usedIdx);
    Atomics.add(this.#served, 0, 1);
  }

  #mark(head: number, on: boolean): void {
    if (head >= this.size) return;
    const at = HEADER + (head >> 3);
    const bit = 1 << (head & 7);
    this.#bytes[at] = on ? this.#bytes[at] | bit : this.#bytes[at] & ~bit;
  }

  close(): void {
    this.mapping.unmap();
    this.fd.close();
  }
}

/** What the owner left: where to go on from, and the heads still to answer. */
export interface Leftover {
  lastAvail: number;
  heads: number[];
}

/** The ring as it is now, for leftover(). */
export interface RingNow {
  /** used->idx and avail->idx. */
  usedIdx: number;
  availIdx: number;
  /** The head in used entry i and in avail slot i (indices mod the ring size). */
  usedHead(i: number): number;
  availHead(i: number): number;
}

/** After the owner died: the heads it took and never answered, and where to take from next. */
export function leftover(r: InflightRecord, ring: RingNow): Leftover {
  const open = new Set(r.heads());
  // Answers published after the record's usedIdx was last stored (at most a ring's worth).
  const published = Math.min((ring.usedIdx - r.usedIdx) & 0xffff, r.size);
  for (let i = 0; i < published; i++) open.delete(ring.usedHead((r.usedIdx + i) & 0xffff));
  // A head marked but not yet counted in lastAvail was never taken: it is still available.
  // (Only when that slot holds a new entry: else it is an old one, whose head may be in flight.)
  const lastAvail = r.lastAvail;
  if (((ring.availIdx - lastAvail) & 0xffff) > 0) open.delete(ring.availHead(lastAvail));
  return { lastAvail, heads: [...open] };
}
