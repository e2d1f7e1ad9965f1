// One request taken from a virtqueue, as a device handler sees it: the
// readable bytes the driver sent and the writable space for the reply.
import type { Buf, DescChain } from './chain';
import { Reader, Writer } from './cursor';
import { RequestError } from './errors';
import type { GuestRegion, MemoryTable } from './memory';

export class Request {
  /** Each part as one view when it is one contiguous host range (the usual case; null when not); undefined until asked. */
  #readable: Uint8Array | null | undefined;
  #writable: Uint8Array | null | undefined;
  /**
   * While the request is in flight (hold() to release()): the releases of
   * the memory tables it holds, the one it was taken with and each one its
   * buffers were resolved in since (the table may change while it waits at
   * a gate). Undefined for a request only looked at.
   */
  #holds: (() => void)[] | undefined;
  #heldTable: readonly GuestRegion[] | undefined;

  constructor(
    readonly queue: number,
    readonly chain: DescChain,
    readonly memory: MemoryTable,
  ) {}

  /**
   * Keeps every region of the current memory table mapped (and registered)
   * until release(). Called when the request is taken, and again by
   * segments(): their host addresses may be used until the request completes.
   */
  hold(): void {
    const table = this.memory.regions;
    if (table === this.#heldTable) return;
    (this.#holds ??= []).push(this.memory.hold());
    this.#heldTable = table;
  }

  /** Lets go of what hold() kept: the request has completed. */
  release(): void {
    const holds = this.#holds;
    this.#holds = undefined;
    this.#heldTable = undefined;
    for (const r of holds ?? []) r();
  }

  get readableBytes(): number {
    return this.chain.readableBytes;
  }

  get writableBytes(): number {
    return this.chain.writableBytes;
  }

  /** A cursor over the readable bytes (what the driver sent), from the first. */
  reader(): Reader {
    return new Reader(this);
  }

  /** A cursor over the writable bytes (room for the reply), from the first. */
  writer(): Writer {
    return new Writer(this);
  }

  /** The readable bytes [offset, offset+len): a view when contiguous, else a copy. */
  read(offset = 0, len = this.readableBytes - offset): Uint8Array {
    checkRange('read', offset, len, this.readableBytes);
    const whole = (this.#readable ??= this.#whole(this.chain.readable));
    if (whole) return whole.subarray(offset, offset + len);
    const parts = this.#views(this.chain.readable, offset, len);
    return parts.length === 1 ? parts[0] : concat(parts, len);
  }

  /** Copies data into the writable space at offset. */
  write(offset: number, data: Uint8Array): void {
    checkRange('write', offset, data.length, this.writableBytes);
    const whole = (this.#writable ??= this.#whole(this.chain.writable));
    if (whole) return whole.set(data, offset);
    let done = 0;
    for (const v of this.#views(this.chain.writable, offset, data.length)) {
      v.set(data.subarray(done, done + v.length));
      done += v.length;
    }
  }

  /**
   * The readable or writable bytes [offset, offset+len) as pieces with host
   * addresses and views, for consumers that copy natively (DMA). A request
   * in flight holds the regions they lie in until it completes.
   */
  segments(part: 'readable' | 'writable', offset: number, len: number): { addr: bigint; len: number; view: Uint8Array }[] {
    const limit = part === 'readable' ? this.readableBytes : this.writableBytes;
    checkRange(part, offset, len, limit);
    const out: { addr: bigint; len: number; view: Uint8Array }[] = [];
    for (const { gpa, n } of pieces(this.chain[part], offset, len)) {
      const at = this.memory.hostSegmentsGpa(gpa, n);
      let addr = at.addr;
      for (const view of at.views) {
        out.push({ addr, len: view.length, view });
        addr += BigInt(view.length);
      }
    }
    // In the same tick as the lookups: the table held is the one they used.
    if (this.#holds) this.hold();
    return out;
  }

  /** A single buffer in a single host range: its view (a request's header and its reply are). */
  #whole(bufs: Buf[]): Uint8Array | null {
    if (bufs.length !== 1) return null;
    const views = (bufs[0].views ??= this.memory.segmentsGpa(bufs[0].gpa, bufs[0].len));
    return views.length === 1 ? views[0] : null;
  }

  /** Host views over [offset, offset+len) of a list of guest buffers. */
  #views(bufs: Buf[], offset: number, len: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    for (const { gpa, n } of pieces(bufs, offset, len)) out.push(...this.memory.segmentsGpa(gpa, n));
    return out;
  }
}

/** The guest ranges that [offset, offset+len) of a list of buffers covers, in order (an array: a generator costs more on every request). */
function pieces(bufs: Buf[], offset: number, len: number): { gpa: bigint; n: number }[] {
  const out: { gpa: bigint; n: number }[] = [];
  for (const b of bufs) {
    if (len === 0) break;
    if (offset >= b.len) {
      offset -= b.len;
      continue;
    }
    const n = Math.min(b.len - offset, len);
    out.push({ gpa: offset === 0 ? b.gpa : b.gpa + BigInt(offset), n });
    offset = 0;
    len -= n;
  }
  return out;
}

function checkRange(what: string, offset: number, len: number, limit: number): void {
  if (!Number.isInteger(offset) || !Number.isInteger(len) || offset < 0 || len < 0 || offset + len > limit)
    throw new RequestError(`${what} of ${len} bytes at ${offset} exceeds the ${limit} bytes of the chain`);
}

function concat(parts: Uint8Array[], len: number): Uint8Array {
  const out = new Uint8Array(len);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
