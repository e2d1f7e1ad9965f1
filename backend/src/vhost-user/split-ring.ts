// A split virtqueue's memory as the device side reads and writes it (virtio
// 1.x §2.7, as rust-vmm's virtio-queue queue.rs): the descriptor table, the
// driver's avail ring and the device's used ring, and the two ways a side
// says it needs no notification (EVENT_IDX's used_event/avail_event, or the
// flags). The indices it is read and written at are the caller's
// (vring-serve.ts); everything here is the layout and its memory order.
//
// Ordering: ring entries are plain loads/stores; avail->idx is read and
// used->idx written with Atomics, which on x86 give the acquire/release
// order the spec needs, and the seq-cst store is the full barrier between
// publishing used->idx and reading the driver's suppression fields.
import { DescTable, walkChain, type DescChain } from './chain';
import { ProtocolError } from './errors';
import type { MemoryTable } from './memory';
import type { VringAddr } from './message';

const VRING_AVAIL_F_NO_INTERRUPT = 1;
const VRING_USED_F_NO_NOTIFY = 1;

export class SplitRing {
  readonly desc: DescTable;
  /** flags, idx, ring[size], used_event */
  readonly avail: Uint16Array;
  /** flags, idx, ..., avail_event */
  readonly used16: Uint16Array;
  /** flags|idx, {id, len}[size] */
  readonly used32: Uint32Array;

  /** The ring of `size` entries at a's addresses, mapped from mem (ProtocolError where misaligned, MemoryError where outside it). */
  constructor(
    where: string,
    a: VringAddr,
    readonly size: number,
    mem: MemoryTable,
  ) {
    if (a.desc % 16n || a.avail % 2n || a.used % 4n) throw new ProtocolError('bad-value', `${where}: misaligned ring addresses`);
    const desc = mem.viewVa(a.desc, size * 16);
    const avail = mem.viewVa(a.avail, 6 + size * 2);
    const used = mem.viewVa(a.used, 6 + size * 8);
    this.desc = new DescTable(desc);
    this.avail = new Uint16Array(avail.buffer, avail.byteOffset, 3 + size);
    this.used16 = new Uint16Array(used.buffer, used.byteOffset, 3 + size * 4);
    this.used32 = new Uint32Array(used.buffer, used.byteOffset, 1 + size * 2);
  }

  /** The descriptor table's bytes (for a RingFront). */
  get descBytes(): Uint8Array {
    const d = this.desc.u32;
    return new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
  }

  /** avail->idx, the driver's: an acquire load, so the entries before it can be read. */
  availIdx(): number {
    return Atomics.load(this.avail, 1);
  }

  /** The head the driver put at avail position i (any 16-bit index; wraps). */
  availHead(i: number): number {
    return this.avail[2 + (i & (this.size - 1))];
  }

  /** used->idx as it is in memory. */
  usedIdx(): number {
    return Atomics.load(this.used16, 1);
  }

  /** The head at used position i (any 16-bit index; wraps). */
  usedHead(i: number): number {
    return this.used32[1 + (i & (this.size - 1)) * 2];
  }

  /** Writes the element (head, len) at used position `at`, then publishes used->idx = at + 1 (release); returns that index. */
  putUsed(at: number, head: number, len: number): number {
    const slot = at & (this.size - 1);
    this.used32[1 + slot * 2] = head;
    this.used32[2 + slot * 2] = len >>> 0;
    const next = (at + 1) & 0xffff;
    Atomics.store(this.used16, 1, next);
    return next;
  }

  /** The chain at head, walked defensively (chain.ts: a ChainError, its reason saying what is wrong). */
  walk(head: number, mem: MemoryTable, indirect: boolean, maxIndirect: number): DescChain {
    return walkChain(this.desc, head, mem, indirect, maxIndirect);
  }

  /**
   * Whether the driver asked to be interrupted for the used entries from
   * `old` up to `now`: with EVENT_IDX, when used_event lies among them;
   * else unless it set NO_INTERRUPT.
   */
  needsInterrupt(eventIdx: boolean, old: number, now: number): boolean {
    if (eventIdx) {
      const usedEvent = Atomics.load(this.avail, 2 + this.size);
      return ((now - usedEvent - 1) & 0xffff) < ((now - old) & 0xffff);
    }
    return (Atomics.load(this.avail, 0) & VRING_AVAIL_F_NO_INTERRUPT) === 0;
  }

  /**
   * Asks the driver not to kick (suppress), or to kick again for entries
   * past lastAvail: with EVENT_IDX by moving avail_event (suppressing is
   * leaving it behind), else with the NO_NOTIFY flag.
   */
  suppressKicks(eventIdx: boolean, suppress: boolean, lastAvail: number): void {
    if (eventIdx) {
      if (!suppress) Atomics.store(this.used16, 2 + this.size * 4, lastAvail);
    } else {
      Atomics.store(this.used16, 0, suppress ? VRING_USED_F_NO_NOTIFY : 0);
    }
  }
}
