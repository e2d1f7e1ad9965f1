// Migration of a device's state (VHOST_USER_PROTOCOL_F_DEVICE_STATE):
// SET_DEVICE_STATE_FD hands the backend one end of a pipe, the backend writes
// (save) or reads (load) the device's state through it off the message loop,
// and CHECK_DEVICE_STATE asks how that went. The pipe is driven
// non-blocking by libuv (net.Socket over the fd), so a slow or stuck reader
// holds up only the transfer, never the event loop.
//
// The stream is framed by the library, around whatever the device writes:
//   header  "VUST" (u32 le 0x54535556), u32 format version (1)
//   body    the device's bytes (saveState's writes, in order)
//   trailer "VUSE" (u32 le 0x45535556), u64 body length, u32 crc32 of body
// so a truncated or corrupted stream is refused before the device sees a
// byte of it, whatever the device's own format. A restart's state file
// (restart-state.ts) holds the same frame.
import net from 'node:net';
import stream from 'node:stream';
import zlib from 'node:zlib';
import type { StateSink, StateSource, VhostUserDevice } from './device';
import type { Fd } from './platform/fd';

export const STATE_MAGIC = 0x54535556; // "VUST"
export const STATE_END_MAGIC = 0x45535556; // "VUSE"
export const STATE_FORMAT = 1;
const HEADER = 8;
const TRAILER = 16;
/** The most a load takes in (bytes of the stream): it is held in memory until its end. */
export const MAX_STATE_BYTES = 2 ** 36;

export enum StateDirection {
  SAVE = 0,
  LOAD = 1,
}

export enum StatePhase {
  STOPPED = 0,
}

/** A finished transfer: what CHECK_DEVICE_STATE reports. */
export interface TransferResult {
  ok: boolean;
  /** Why it failed (logged; the reply says only non-zero). */
  reason?: string;
  /** Body bytes moved (the device's state, without the framing). */
  bytes: number;
  ms: number;
}

/** One transfer in either direction; `done` settles (never rejects) once it is over. */
export class StateTransfer {
  readonly done: Promise<TransferResult>;
  readonly #sock: net.Socket;
  #aborted: string | undefined;

  private constructor(
    readonly direction: StateDirection,
    fd: Fd,
    run: (t: StateTransfer, sock: net.Socket) => Promise<number>,
  ) {
    const start = performance.now();
    // A file or other fd net.Socket cannot drive throws here, the fd still
    // owned by the message (closed with it).
    this.#sock = new net.Socket({
      fd: fd.value,
      readable: direction === StateDirection.LOAD,
      writable: direction === StateDirection.SAVE,
      allowHalfOpen: true,
    });
    fd.take();
    this.#sock.on('error', () => {}); // surfaced through the pending read or write
    this.done = run(this, this.#sock)
      .then((bytes) => {
        if (this.#aborted) throw new Error(this.#aborted);
        return { ok: true, bytes, ms: performance.now() - start };
      })
      .catch((e: unknown) => {
        this.#sock.destroy();
        return { ok: false, reason: (e as Error).message ?? String(e), bytes: 0, ms: performance.now() - start };
      });
  }

  /** Writes device.saveState's state, framed, into fd, then closes it. */
  static save(device: VhostUserDevice, fd: Fd): StateTransfer {
    return new StateTransfer(StateDirection.SAVE, fd, async (t, sock) => {
      const w = new PipeWriter(sock);
      const bytes = await saveFramed(
        device,
        (b) => w.write(b),
        () => t.#aborted,
      );
      await w.end();
      return bytes;
    });
  }

  /** Reads the framed state from fd to its end, checks it, then hands the body to device.loadState. */
  static load(device: VhostUserDevice, fd: Fd, maxBytes = MAX_STATE_BYTES): StateTransfer {
    return new StateTransfer(StateDirection.LOAD, fd, async (t) => {
      const chunks = await readAll(t.#sock, maxBytes);
      const body = checkFrame(chunks);
      if (t.#aborted) throw new Error(t.#aborted);
      await loadFramed(device, body.chunks);
      return body.length;
    });
  }

  /** Ends the transfer early (the frontend went away or reset): it then fails. */
  abort(reason: string): void {
    this.#aborted ??= reason;
    this.#sock.destroy();
  }
}

/**
 * device.saveState's state, framed (header, body, trailer with the body's
 * length and CRC32), through write: the migration's pipe, or a restart's
 * file (restart-state.ts). Returns the body's length. aborted: a reason to
 * stop at the next chunk.
 */
export async function saveFramed(
  device: VhostUserDevice,
  write: (b: Uint8Array) => Promise<void>,
  aborted: () => string | undefined = () => undefined,
): Promise<number> {
  const header = new Uint8Array(HEADER);
  const hv = new DataView(header.buffer);
  hv.setUint32(0, STATE_MAGIC, true);
  hv.setUint32(4, STATE_FORMAT, true);
  await write(header);
  let crc = 0;
  let bytes = 0;
  const sink: StateSink = {
    write: async (chunk) => {
      const why = aborted();
      if (why) throw new Error(why);
      if (chunk.length === 0) return;
      crc = zlib.crc32(chunk, crc);
      bytes += chunk.length;
      // The pipe takes the bytes later: a caller may reuse its buffer.
      await write(Uint8Array.from(chunk));
    },
  };
  try {
    await device.saveState!(sink);
  } catch (e) {
    throw new Error(`the device's saveState failed: ${(e as Error).message ?? String(e)}`);
  }
  await write(trailer(bytes, crc));
  return bytes;
}

/** Hands a checked frame's body (checkFrame) to device.loadState, which must read all of it. */
export async function loadFramed(device: VhostUserDevice, body: Buffer[]): Promise<void> {
  const source = new ChunkSource(body);
  try {
    await device.loadState!(source);
  } catch (e) {
    throw new Error(`the device refused the state: ${(e as Error).message ?? String(e)}`);
  }
  const left = source.remaining;
  if (left > 0) throw new Error(`the device left ${left} bytes of the state unread`);
}

function trailer(bytes: number, crc: number): Uint8Array {
  const b = new Uint8Array(TRAILER);
  const v = new DataView(b.buffer);
  v.setUint32(0, STATE_END_MAGIC, true);
  v.setBigUint64(4, BigInt(bytes), true);
  v.setUint32(12, crc >>> 0, true);
  return b;
}

/** Writes that wait while the pipe is full (the reader is slower), never blocking the loop. */
class PipeWriter {
  #failed: Error | undefined = undefined;
  readonly #closed: Promise<void>;

  constructor(readonly sock: net.Socket) {
    this.#closed = new Promise((resolve) => sock.once('close', () => resolve()));
    sock.on('error', (e: Error) => {
      this.#failed ??= e;
    });
  }

  #check(): void {
    const failed = this.#failed as Error | undefined;
    if (failed) throw new Error(`writing the state: ${failed.message}`);
  }

  async write(b: Uint8Array): Promise<void> {
    this.#check();
    if (this.sock.destroyed) throw new Error('writing the state: the pipe is closed');
    if (this.sock.write(b)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        this.sock.off('drain', done);
        this.sock.off('close', done);
        resolve();
      };
      this.sock.on('drain', done);
      this.sock.on('close', done);
    });
    this.#check();
    if (this.sock.destroyed && this.sock.writableLength > 0) throw new Error('writing the state: the pipe closed');
  }

  /** Flushes and closes the pipe: the reader sees the end of the stream. */
  async end(): Promise<void> {
    const err = await new Promise<Error | null | undefined>((resolve) => {
      stream.finished(this.sock, { readable: false }, resolve);
      this.sock.end();
    });
    this.sock.destroy();
    await this.#closed;
    this.#check();
    if (err) throw new Error(`writing the state: ${err.message}`);
  }
}

function readAll(sock: net.Socket, maxBytes: number): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let total = 0;
    let settled = false;
    const fail = (why: string) => {
      if (settled) return;
      settled = true;
      sock.destroy();
      reject(new Error(why));
    };
    sock.on('data', (c: Buffer) => {
      total += c.length;
      if (total > maxBytes) return fail(`the state stream exceeds ${maxBytes} bytes`);
      chunks.push(c);
    });
    sock.on('end', () => {
      if (settled) return;
      settled = true;
      resolve(chunks);
    });
    sock.on('error', (e) => fail(`reading the state: ${e.message}`));
    sock.on('close', () => fail('reading the state: the pipe closed before its end'));
  });
}

/** Checks header and trailer; the body as the chunks between them. */
export function checkFrame(chunks: Buffer[]): { chunks: Buffer[]; length: number } {
  const all = new ChunkSource(chunks);
  const total = all.remaining;
  if (total < HEADER + TRAILER) throw new Error(`the state stream is truncated: ${total} bytes, less than its framing`);
  const h = all.take(HEADER);
  const hv = new DataView(h.buffer, h.byteOffset, h.length);
  if (hv.getUint32(0, true) !== STATE_MAGIC) throw new Error('the stream is not a vhost-user device state (bad magic)');
  const format = hv.getUint32(4, true);
  if (format !== STATE_FORMAT) throw new Error(`the state stream has format ${format}, this backend reads ${STATE_FORMAT}`);
  const bodyLen = total - HEADER - TRAILER;
  const body = all.takeChunks(bodyLen);
  const t = all.take(TRAILER);
  const tv = new DataView(t.buffer, t.byteOffset, t.length);
  const said = tv.getBigUint64(4, true);
  if (tv.getUint32(0, true) !== STATE_END_MAGIC || said !== BigInt(bodyLen))
    throw new Error(`the state stream is truncated or corrupted: no valid end after ${bodyLen} bytes of state`);
  let crc = 0;
  for (const c of body) crc = zlib.crc32(c, crc);
  if (crc >>> 0 !== tv.getUint32(12, true)) throw new Error('the state stream is corrupted (crc32 mismatch)');
  return { chunks: body, length: bodyLen };
}

/** A StateSource over chunks already in memory. */
export class ChunkSource implements StateSource {
  readonly #chunks: Buffer[];
  #i = 0;
  #off = 0;
  #left: number;

  constructor(chunks: Buffer[]) {
    this.#chunks = chunks.filter((c) => c.length > 0);
    this.#left = this.#chunks.reduce((n, c) => n + c.length, 0);
  }

  get remaining(): number {
    return this.#left;
  }

  read(len: number): Promise<Uint8Array> {
    try {
      return Promise.resolve(this.take(len));
    } catch (e) {
      return Promise.reject(e as Error);
    }
  }

  atEnd(): Promise<boolean> {
    return Promise.resolve(this.#left === 0);
  }

  /** Exactly len bytes (a view where they lie in one chunk). */
  take(len: number): Uint8Array {
    if (!Number.isSafeInteger(len) || len < 0) throw new RangeError(`state read of ${len} bytes`);
    if (len > this.#left) throw new Error(`the state ended: ${len} bytes wanted, ${this.#left} left`);
    const c = this.#chunks[this.#i];
    if (len === 0) return new Uint8Array(0);
    if (this.#off + len <= c.length) {
      const out = c.subarray(this.#off, this.#off + len);
      this.#advance(len);
      return out;
    }
    const out = new Uint8Array(len);
    let got = 0;
    for (const part of this.takeChunks(len)) {
      out.set(part, got);
      got += part.length;
    }
    return out;
  }

  /** The next len bytes as views of the chunks. */
  takeChunks(len: number): Buffer[] {
    if (len > this.#left) throw new Error(`the state ended: ${len} bytes wanted, ${this.#left} left`);
    const out: Buffer[] = [];
    while (len > 0) {
      const c = this.#chunks[this.#i];
      const n = Math.min(len, c.length - this.#off);
      out.push(c.subarray(this.#off, this.#off + n));
      this.#advance(n);
      len -= n;
    }
    return out;
  }

  #advance(n: number): void {
    this.#off += n;
    this.#left -= n;
    if (this.#off === this.#chunks[this.#i]?.length) {
      this.#i++;
      this.#off = 0;
    }
  }
}
