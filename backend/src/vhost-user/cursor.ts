// Cursors over a request's descriptor chain, as virtio-queue's Reader and
// Writer: a device reads its header, then its arguments, then its data, one
// after another, instead of working out offsets by hand. Every length comes
// from the guest, so each step is checked against what is left in the
// cursor's own range (RequestError past it), and a cursor split in two
// (splitAt) can never read or write into the other's bytes.
import { RequestError } from './errors';

/** A fixed-size structure: its size in bytes and how to read it from them (a device's wire format). */
export interface Struct<T> {
  readonly size: number;
  decode(bytes: Uint8Array): T;
}

/** Host pieces of a range of guest buffers (Request.segments). */
export type Segment = { addr: bigint; len: number; view: Uint8Array };

/** What a cursor needs of a request (request.ts's Request), each call range-checked there too. */
export interface Parts {
  readonly readableBytes: number;
  readonly writableBytes: number;
  read(offset: number, len: number): Uint8Array;
  write(offset: number, data: Uint8Array): void;
  segments(part: 'readable' | 'writable', offset: number, len: number): Segment[];
}

/** [at, end) of one part of a request, consumed from the front. */
abstract class Cursor {
  #at: number;
  #end: number;

  protected constructor(at: number, end: number) {
    this.#at = at;
    this.#end = end;
  }

  /** Bytes left. */
  get available(): number {
    return this.#end - this.#at;
  }

  /** Where the next byte is, from the start of the part (readable or writable bytes). */
  get offset(): number {
    return this.#at;
  }

  /** Moves past n bytes; RequestError where fewer are left (or n is not a count). */
  skip(n: number): void {
    this.take(n);
  }

  /**
   * Splits at n bytes from here (virtio-queue's split_at): this cursor keeps
   * the first n, the one returned has the rest.
   */
  splitAt(n: number): this {
    const at = this.take(n);
    const rest = this.#at;
    this.#at = at;
    const other = this.clone(rest, this.#end);
    this.#end = rest;
    return other as this;
  }

  /** The next n bytes as host pieces, for a consumer that copies natively; the request holds their regions while in flight. */
  segments(n = this.available): Segment[] {
    const at = this.take(n);
    return this.request.segments(this.part, at, n);
  }

  protected abstract readonly request: Parts;
  protected abstract readonly part: 'readable' | 'writable';
  protected abstract clone(at: number, end: number): Cursor;

  /** Consumes n bytes; returns where they start. */
  protected take(n: number): number {
    if (!Number.isInteger(n) || n < 0 || n > this.available)
      throw new RequestError(`${this.part} cursor: ${n} bytes at ${this.#at}, ${this.available} left`);
    const at = this.#at;
    this.#at += n;
    return at;
  }
}

/** The readable bytes of a request (what the driver sent), consumed from the front. */
export class Reader extends Cursor {
  protected readonly part = 'readable';

  constructor(
    protected readonly request: Parts,
    at = 0,
    end = request.readableBytes,
  ) {
    super(at, end);
  }

  /** The next n bytes: a view into guest memory when contiguous, else a copy (slice() one to keep it). */
  read(n: number): Uint8Array {
    const at = this.take(n);
    return this.request.read(at, n);
  }

  /** The next s.size bytes, decoded. */
  readObj<T>(s: Struct<T>): T {
    return s.decode(this.read(s.size));
  }

  protected clone(at: number, end: number): Reader {
    return new Reader(this.request, at, end);
  }
}

/** The writable bytes of a request (room for the reply), filled from the front. */
export class Writer extends Cursor {
  protected readonly part = 'writable';

  constructor(
    protected readonly request: Parts,
    at = 0,
    end = request.writableBytes,
  ) {
    super(at, end);
  }

  /** Copies data in at the cursor. */
  write(data: Uint8Array): void {
    const at = this.take(data.length);
    this.request.write(at, data);
  }

  protected clone(at: number, end: number): Writer {
    return new Writer(this.request, at, end);
  }
}
