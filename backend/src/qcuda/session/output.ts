// Device output of one session (what its kernels printf, its failed device
// asserts) waiting for the guest library to fetch it with OUTPUT_READ. While
// any waits, every reply to the session carries QCUDA_ST_OUTPUT. Bounded:
// beyond the limit bytes are dropped, and a note saying how many takes their
// place in the stream.
import { QCUDA_OUTPUT_STDERR, QCUDA_OUTPUT_STDOUT } from '../proto';

/** Bytes of device output a session may have waiting. */
export const MAX_SESSION_OUTPUT = 1 << 20;

export type OutputKind = typeof QCUDA_OUTPUT_STDOUT | typeof QCUDA_OUTPUT_STDERR;

export interface OutputPiece {
  kind: OutputKind | 0;
  bytes: Uint8Array;
}

export class OutputQueue {
  readonly #pieces: { kind: OutputKind; bytes: Uint8Array }[] = [];
  #size = 0;
  /** Bytes dropped since the last note. */
  #dropped = 0;
  #closed = false;

  constructor(readonly limit = MAX_SESSION_OUTPUT) {}

  /** Something waits (output, or the note of a loss). */
  get pending(): boolean {
    return this.#pieces.length > 0 || this.#dropped > 0;
  }

  /** Bytes waiting. */
  get size(): number {
    return this.#size;
  }

  push(kind: OutputKind, bytes: Uint8Array): void {
    if (this.#closed || bytes.length === 0) return;
    if (this.#dropped > 0) {
      // The note goes in first, so these bytes come whole after it or are
      // counted in it: never cut by the note taking their room.
      if (noteOf(this.#dropped).length + bytes.length > this.limit - this.#size) {
        this.#dropped += bytes.length;
        return;
      }
      this.#note(); // the loss happened here, before these bytes
    }
    const room = Math.max(0, this.limit - this.#size);
    if (bytes.length > room) {
      this.#dropped += bytes.length - room;
      bytes = bytes.subarray(0, room);
    }
    if (bytes.length === 0) return;
    this.#pieces.push({ kind, bytes: bytes.slice() });
    this.#size += bytes.length;
  }

  /** Takes up to max bytes of the oldest waiting output, of one kind. */
  read(max: number): OutputPiece & { more: boolean } {
    if (this.#pieces.length === 0 && this.#dropped > 0) this.#note();
    const first = this.#pieces[0];
    if (first === undefined || max <= 0) return { kind: 0, bytes: new Uint8Array(0), more: this.pending };
    const parts: Uint8Array[] = [];
    let n = 0;
    while (n < max && this.#pieces.length > 0 && this.#pieces[0].kind === first.kind) {
      const p = this.#pieces[0];
      const take = Math.min(p.bytes.length, max - n);
      parts.push(p.bytes.subarray(0, take));
      n += take;
      if (take === p.bytes.length) this.#pieces.shift();
      else p.bytes = p.bytes.subarray(take);
    }
    this.#size -= n;
    return { kind: first.kind, bytes: parts.length === 1 ? parts[0] : Buffer.concat(parts), more: this.pending };
  }

  /** The session is gone: what waits is dropped and nothing more is taken. */
  close(): void {
    this.#closed = true;
    this.#pieces.length = 0;
    this.#size = 0;
    this.#dropped = 0;
  }

  #note(): void {
    const bytes = noteOf(this.#dropped);
    this.#pieces.push({ kind: QCUDA_OUTPUT_STDERR, bytes });
    this.#size += bytes.length;
    this.#dropped = 0;
  }
}

/** The note that takes the place of dropped bytes in the stream. */
function noteOf(dropped: number): Uint8Array {
  return new TextEncoder().encode(`[qcuda: ${dropped} bytes of device output dropped]\n`);
}
