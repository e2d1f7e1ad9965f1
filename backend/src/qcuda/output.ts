// Device output of one session (what its kernels printf, its failed device
// asserts) waiting for the guest library to fetch it with OUTPUT_READ. While
// any waits, every reply to the session carries QCUDA_ST_OUTPUT. Bounded:
// beyond the limit bytes are dropped, and a note saying how many takes their
// place in the stream.
import type { Call, Command, Result } from './commands';
import { CudaError } from './cuda-error';
import { encode, QCUDA_CHUNK, QCUDA_OUTPUT_STDERR, QCUDA_OUTPUT_STDOUT, Status } from './proto';

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
      if (bytes.length > this.limit - this.#size) {
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
    const text = `[qcuda: ${this.#dropped} bytes of device output dropped]\n`;
    this.#pieces.push({ kind: QCUDA_OUTPUT_STDERR, bytes: new TextEncoder().encode(text) });
    this.#size += text.length;
    this.#dropped = 0;
  }
}

/** OUTPUT_READ: the oldest waiting output of the caller's session into the guest's buffer. */
function outputRead(c: Call): Result {
  // Reading consumes, so the buffer must be one request: a chunked one could
  // complete in any order and its pieces would be lost or misplaced.
  if (c.dataOffset !== 0n || c.dataLen === 0n || c.dataLen > BigInt(QCUDA_CHUNK))
    throw new CudaError(Status.BAD_REQUEST, `OUTPUT_READ: a buffer of ${c.dataLen} bytes at offset ${c.dataOffset} (1 to ${QCUDA_CHUNK} bytes at offset 0)`);
  const p = c.session.output.read(Number(c.dataLen));
  let at = 0;
  for (const d of c.data) {
    if (at >= p.bytes.length) break;
    const n = Math.min(d.len, p.bytes.length - at);
    d.view.set(p.bytes.subarray(at, at + n));
    at += n;
  }
  return { value: BigInt(p.bytes.length), out: encode('qcuda_out_output_read', { kind: p.kind, more: p.more ? 1 : 0 }) };
}

export const OUTPUT_READ: Command = { out: 'qcuda_out_output_read', data: 'from', run: async (c) => outputRead(c) };
