// The qcuda device state's stream (QcudaDevice.saveState, loadState): a
// magic and a version, the description of every session as JSON (counts,
// handles, addresses, sizes: never bytes of memory), then the memory's
// bytes as blobs, each with its length, in the order the description
// names them, and last a SHA-256 of everything before it. The reader
// hashes what it reads and refuses a stream that ends early, runs past
// its end or does not match its hash.
import { createHash, type Hash } from 'node:crypto';
import type { StateSink, StateSource } from '../../vhost-user';

/** "QCUDAST" and a newline: what a state stream starts with. */
export const STATE_MAGIC = new Uint8Array([0x51, 0x43, 0x55, 0x44, 0x41, 0x53, 0x54, 0x0a]);
/** The stream's layout and the description's meaning; another is refused (no conversion yet). */
export const STATE_VERSION = 1;
/** The most bytes of description a stream may have (4096 sessions of thousands of objects fit). */
export const MAX_DESCRIPTION = 64 << 20;
const HASH_BYTES = 32;

/** A state stream refused: its message says why (the migration fails with it). */
export class StateError extends Error {
  constructor(message: string) {
    super(`qcuda device state: ${message}`);
  }
}

/** Bigints as "0x..." strings: JSON has no 64-bit integers. */
export function toJson(v: unknown): Uint8Array {
  return new TextEncoder().encode(JSON.stringify(v, (_k, x: unknown) => (typeof x === 'bigint' ? `0x${x.toString(16)}` : x)));
}

/** Writes a stream: header and description, blobs, the hash. */
export class StateWriter {
  readonly #hash: Hash = createHash('sha256');

  constructor(private readonly sink: StateSink) {}

  async #write(b: Uint8Array): Promise<void> {
    this.#hash.update(b);
    await this.sink.write(b);
  }

  async header(description: unknown): Promise<void> {
    const json = toJson(description);
    const head = new Uint8Array(16);
    head.set(STATE_MAGIC);
    const v = new DataView(head.buffer);
    v.setUint32(8, STATE_VERSION, true);
    v.setUint32(12, json.length, true);
    await this.#write(head);
    await this.#write(json);
  }

  /** One blob: its length, then its bytes (views, one after the other). */
  async blob(views: readonly Uint8Array[]): Promise<void> {
    const len = new Uint8Array(8);
    new DataView(len.buffer).setBigUint64(
      0,
      views.reduce((n, x) => n + BigInt(x.length), 0n),
      true,
    );
    await this.#write(len);
    for (const x of views) if (x.length > 0) await this.#write(x);
  }

  async end(): Promise<void> {
    await this.sink.write(new Uint8Array(this.#hash.digest()));
  }
}

/** Reads a stream, every length checked before anything is read for it. */
export class StateReader {
  readonly #hash: Hash = createHash('sha256');

  constructor(private readonly src: StateSource) {}

  async #read(n: number, what: string): Promise<Uint8Array> {
    let b: Uint8Array;
    try {
      b = await this.src.read(n);
    } catch (e) {
      throw new StateError(`truncated: the stream ends in ${what} (${(e as Error).message})`);
    }
    if (b.length !== n) throw new StateError(`truncated: ${b.length} bytes of ${what}, expected ${n}`);
    return b;
  }

  async #hashed(n: number, what: string): Promise<Uint8Array> {
    const b = await this.#read(n, what);
    this.#hash.update(b);
    return b;
  }

  /** The header's checks, then the description, parsed (not yet checked: checks.ts). */
  async header(): Promise<unknown> {
    const head = await this.#hashed(16, 'the header');
    if (!STATE_MAGIC.every((x, i) => head[i] === x)) throw new StateError('not a qcuda device state (bad magic)');
    const v = new DataView(head.buffer, head.byteOffset, 16);
    const version = v.getUint32(8, true);
    if (version !== STATE_VERSION)
      throw new StateError(`version ${version}: this backend reads version ${STATE_VERSION} only (upgrade or downgrade the destination)`);
    const len = v.getUint32(12, true);
    if (len > MAX_DESCRIPTION) throw new StateError(`a description of ${len} bytes (at most ${MAX_DESCRIPTION})`);
    const json = await this.#hashed(len, 'the description');
    try {
      return JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(json)) as unknown;
    } catch (e) {
      throw new StateError(`corrupted: the description is not JSON (${(e as Error).message})`);
    }
  }

  /** The next blob, which must be of size bytes (what the description said): its bytes, new memory of its own. */
  async blob(size: bigint, what: string): Promise<Uint8Array> {
    const b = await this.#hashed(8, `the length of ${what}`);
    const len = new DataView(b.buffer, b.byteOffset, 8).getBigUint64(0, true);
    if (len !== size) throw new StateError(`corrupted: ${what} of ${len} bytes, the description says ${size}`);
    const out = new Uint8Array(Number(size));
    const CHUNK = 16 << 20;
    for (let at = 0; at < out.length; at += CHUNK) out.set(await this.#hashed(Math.min(CHUNK, out.length - at), what), at);
    return out;
  }

  /** The hash, and nothing after it. */
  async end(): Promise<void> {
    const want = this.#hash.digest();
    const got = await this.#read(HASH_BYTES, 'the hash');
    if (!want.equals(got)) throw new StateError('corrupted: the hash does not match the bytes');
    if (!(await this.src.atEnd())) throw new StateError('corrupted: bytes after the end of the state');
  }
}
