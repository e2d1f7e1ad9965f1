// The driver's side of a split virtqueue, as a guest kernel would run it:
// descriptor free list, avail publishing, kick and interrupt suppression
// (EVENT_IDX or flags), used harvesting. Tests also use it to corrupt rings.
import { DESC_SIZE, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT, VIRTQ_DESC_F_WRITE } from '../chain';
import { loadAddon } from '../platform/native';
import type { GuestMemory } from './guest-memory';

/** vhost_user_bench.node (native/ring_loop.cc): loaded on a benchmark's first loop(), never by a backend. */
interface BenchAddon {
  /**
   * n times, posts the chains `heads` one after another on a driver's rings (avail and used as mapped here), kicking only
   * where the device asks, and spins for each answer, which must name its head and put status 0 in the first u32 of its
   * reply (replies[j] for heads[j]). ns: each step of heads.length calls.
   */
  ringLoop(
    avail: Uint16Array,
    used: Uint16Array,
    size: number,
    eventIdx: boolean,
    kickFd: number,
    heads: Uint32Array,
    availIdx: number,
    lastUsed: number,
    n: number,
    replies: Uint8Array[],
    timeoutNs: number,
  ): { ns: Float64Array; availIdx: number; lastUsed: number; kicks: number };
}
let bench: BenchAddon | undefined;

export interface GuestBuf {
  gpa: bigint;
  len: number;
  write?: boolean;
}

export interface Used {
  id: number;
  len: number;
}

const VRING_USED_F_NO_NOTIFY = 1;
const VRING_AVAIL_F_NO_INTERRUPT = 1;
/** Descriptors per indirect table in the ring's pool. */
export const INDIRECT_MAX = 64;

export class GuestRing {
  readonly desc: bigint;
  readonly avail: bigint;
  readonly used: bigint;
  readonly d32: Uint32Array;
  readonly d16: Uint16Array;
  readonly a16: Uint16Array;
  readonly u16: Uint16Array;
  readonly u32: Uint32Array;
  readonly #indirectPool: bigint;
  #free: number[];
  #chainLen = new Map<number, number>();
  availIdx = 0;
  #lastUsed = 0;
  #kickedAt = 0;

  constructor(
    readonly mem: GuestMemory,
    readonly size: number,
    readonly eventIdx: boolean,
    region = 0,
  ) {
    this.desc = mem.alloc(size * DESC_SIZE, 4096, region);
    this.avail = mem.alloc(6 + size * 2, 4096, region);
    this.used = mem.alloc(6 + size * 8, 4096, region);
    this.#indirectPool = mem.alloc(size * INDIRECT_MAX * DESC_SIZE, 4096, region);
    const d = mem.bytes(this.desc, size * DESC_SIZE);
    const a = mem.bytes(this.avail, 6 + size * 2);
    const u = mem.bytes(this.used, 6 + size * 8);
    d.fill(0);
    a.fill(0);
    u.fill(0);
    this.d32 = new Uint32Array(d.buffer, d.byteOffset, size * 4);
    this.d16 = new Uint16Array(d.buffer, d.byteOffset, size * 8);
    this.a16 = new Uint16Array(a.buffer, a.byteOffset, 3 + size);
    this.u16 = new Uint16Array(u.buffer, u.byteOffset, 3 + size * 4);
    this.u32 = new Uint32Array(u.buffer, u.byteOffset, 1 + size * 2);
    this.#free = Array.from({ length: size }, (_, i) => i);
  }

  get numFree(): number {
    return this.#free.length;
  }

  /** Writes one descriptor into a table (the ring's, or an indirect one). */
  static writeDesc(d32: Uint32Array, d16: Uint16Array, i: number, gpa: bigint, len: number, flags: number, next: number): void {
    d32[i * 4] = Number(gpa & 0xffffffffn);
    d32[i * 4 + 1] = Number(gpa >> 32n);
    d32[i * 4 + 2] = len;
    d16[i * 8 + 6] = flags;
    d16[i * 8 + 7] = next;
  }

  /**
   * Benchmarks: n times, posts the chains one after another, each once its
   * predecessor is answered, from C (vhost_user_bench's ringLoop: a guest driver's
   * synchronous calls, spinning for each answer with interrupts
   * suppressed); each reply must carry status 0 in the first u32 of its
   * replies[j]. Returns each step's round trips in ns. Nothing else may be
   * in flight on the ring meanwhile.
   */
  loop(chains: GuestBuf[][], n: number, kickFd: number, replies: Uint8Array[], timeoutNs: number): { ns: Float64Array; kicks: number } {
    if (this.#chainLen.size > 0) throw new Error('the ring has requests in flight');
    const heads: number[] = [];
    try {
      for (const bufs of chains) heads.push(this.#addDirect(bufs));
      if (!this.eventIdx) Atomics.store(this.a16, 0, VRING_AVAIL_F_NO_INTERRUPT);
      bench ??= loadAddon<BenchAddon>('vhost_user_bench');
      const r = bench.ringLoop(
        this.a16,
        this.u16,
        this.size,
        this.eventIdx,
        kickFd,
        Uint32Array.from(heads),
        this.availIdx,
        this.#lastUsed,
        n,
        replies,
        timeoutNs,
      );
      this.availIdx = r.availIdx;
      this.#lastUsed = r.lastUsed;
      this.#kickedAt = r.availIdx;
      return { ns: r.ns, kicks: r.kicks };
    } finally {
      for (const head of heads) this.#release(head);
      if (!this.eventIdx) Atomics.store(this.a16, 0, 0);
    }
  }

  /** Posts a chain (readable buffers first); returns its head. */
  add(bufs: GuestBuf[], indirect = false): number {
    const head = indirect ? this.#addIndirect(bufs) : this.#addDirect(bufs);
    this.a16[2 + (this.availIdx & (this.size - 1))] = head;
    this.availIdx = (this.availIdx + 1) & 0xffff;
    Atomics.store(this.a16, 1, this.availIdx);
    return head;
  }

  #take(n: number): number[] {
    if (n === 0 || n > this.#free.length) throw new RangeError(`need ${n} descriptors, ${this.#free.length} free`);
    return this.#free.splice(0, n);
  }

  #addDirect(bufs: GuestBuf[]): number {
    const ids = this.#take(bufs.length);
    bufs.forEach((b, k) => {
      const last = k === bufs.length - 1;
      const flags = (b.write ? VIRTQ_DESC_F_WRITE : 0) | (last ? 0 : VIRTQ_DESC_F_NEXT);
      GuestRing.writeDesc(this.d32, this.d16, ids[k], b.gpa, b.len, flags, last ? 0 : ids[k + 1]);
    });
    this.#chainLen.set(ids[0], bufs.length);
    return ids[0];
  }

  #addIndirect(bufs: GuestBuf[]): number {
    if (bufs.length > INDIRECT_MAX) throw new RangeError(`indirect chains hold at most ${INDIRECT_MAX} buffers`);
    const [head] = this.#take(1);
    const table = this.#indirectPool + BigInt(head * INDIRECT_MAX * DESC_SIZE);
    const t = this.mem.bytes(table, bufs.length * DESC_SIZE);
    const t32 = new Uint32Array(t.buffer, t.byteOffset, bufs.length * 4);
    const t16 = new Uint16Array(t.buffer, t.byteOffset, bufs.length * 8);
    bufs.forEach((b, k) => {
      const last = k === bufs.length - 1;
      const flags = (b.write ? VIRTQ_DESC_F_WRITE : 0) | (last ? 0 : VIRTQ_DESC_F_NEXT);
      GuestRing.writeDesc(t32, t16, k, b.gpa, b.len, flags, last ? 0 : k + 1);
    });
    GuestRing.writeDesc(this.d32, this.d16, head, table, bufs.length * DESC_SIZE, VIRTQ_DESC_F_INDIRECT, 0);
    this.#chainLen.set(head, 1);
    return head;
  }

  /** Whether the device wants a kick for what was published since the last one. */
  needKick(): boolean {
    const old = this.#kickedAt;
    this.#kickedAt = this.availIdx;
    if (this.eventIdx) {
      const ev = Atomics.load(this.u16, 2 + this.size * 4);
      return ((this.availIdx - ev - 1) & 0xffff) < ((this.availIdx - old) & 0xffff);
    }
    return (Atomics.load(this.u16, 0) & VRING_USED_F_NO_NOTIFY) === 0;
  }

  /** The used index the device has published (what QEMU restores a dead backend's ring from). */
  get usedIdx(): number {
    return Atomics.load(this.u16, 1);
  }

  /** The device has published something not harvested yet. */
  get hasUsed(): boolean {
    return Atomics.load(this.u16, 1) !== this.#lastUsed;
  }

  /**
   * Takes every used element; re-arms the interrupt after (used_event, or
   * the NO_INTERRUPT flag cleared without EVENT_IDX), then looks again: an
   * element the device published before it saw the interrupt re-armed got
   * none, and none would ever come for it. A driver that polls the ring
   * passes rearm = false: no interrupt meanwhile (used_event stays behind,
   * or the flag is set).
   */
  harvest(rearm = true): Used[] {
    const out: Used[] = [];
    for (;;) {
      const end = Atomics.load(this.u16, 1);
      while (this.#lastUsed !== end) {
        const slot = this.#lastUsed & (this.size - 1);
        const id = this.u32[1 + slot * 2];
        out.push({ id, len: this.u32[2 + slot * 2] });
        this.#release(id);
        this.#lastUsed = (this.#lastUsed + 1) & 0xffff;
      }
      if (!rearm) {
        if (!this.eventIdx) Atomics.store(this.a16, 0, VRING_AVAIL_F_NO_INTERRUPT);
        return out;
      }
      if (this.eventIdx) Atomics.store(this.a16, 2 + this.size, this.#lastUsed);
      else Atomics.store(this.a16, 0, 0);
      if (Atomics.load(this.u16, 1) === this.#lastUsed) return out;
    }
  }

  #release(head: number): void {
    const n = this.#chainLen.get(head);
    if (n === undefined) throw new Error(`device returned head ${head}, which is not in flight`);
    this.#chainLen.delete(head);
    let i = head;
    for (let k = 0; k < n; k++) {
      this.#free.push(i);
      i = this.d16[i * 8 + 7];
    }
  }
}
