// An example device on vhost-user-ts: echoes the readable bytes back into the
// writable part, followed by their FNV-1a checksum and the queue index, so a
// test can tell a wrong byte, a short copy and a wrong queue apart.
import type { Request, VhostUserDevice } from '../vhost-user';

/** Bytes the device adds after the echoed data: u32 FNV-1a checksum, u32 queue index. */
export const ECHO_TRAILER = 8;

export function fnv1a(data: Uint8Array): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < data.length; i++) h = Math.imul(h ^ data[i], 0x01000193);
  return h >>> 0;
}

export interface EchoOptions {
  queues?: number;
  /** Complete each request after a random 0..maxDelayMs delay: out of order. */
  maxDelayMs?: number;
  /** Complete each request after exactly holdMs: for tests that must find every request still in flight. */
  holdMs?: number;
  /** VhostUserDevice.pollUs: poll the rings this long after each request and answer. */
  pollUs?: number;
}

export class EchoDevice implements VhostUserDevice {
  readonly name = 'echo';
  readonly numQueues: number;
  readonly maxQueueSize = 1024;
  // maxIndirect: the library's default (DEFAULT_MAX_INDIRECT).
  readonly features = 0n;
  readonly configSize = 8;
  readonly #maxDelayMs: number;
  readonly #holdMs: number;
  readonly pollUs: number;
  requests = 0;

  constructor(o: EchoOptions = {}) {
    this.numQueues = o.queues ?? 4;
    this.pollUs = o.pollUs ?? 0;
    this.#maxDelayMs = o.maxDelayMs ?? 0;
    this.#holdMs = o.holdMs ?? 0;
  }

  /** Config space: u32 queues, u32 magic "ECHO". */
  readConfig(): Uint8Array {
    const b = new Uint8Array(8);
    const v = new DataView(b.buffer);
    v.setUint32(0, this.numQueues, true);
    v.setUint32(4, 0x4f484345, true);
    return b;
  }

  handle(req: Request): number | Promise<number> {
    this.requests++;
    if (this.#maxDelayMs === 0 && this.#holdMs === 0) return echo(req);
    const delay = this.#holdMs || Math.random() * this.#maxDelayMs;
    return new Promise((resolve, reject) =>
      setTimeout(() => {
        try {
          resolve(echo(req));
        } catch (e) {
          reject(e);
        }
      }, delay),
    );
  }
}

function echo(req: Request): number {
  const data = req.read();
  if (req.writableBytes < data.length + ECHO_TRAILER)
    throw new RangeError(`echo: ${req.writableBytes} writable bytes for ${data.length} + ${ECHO_TRAILER}`);
  const trailer = new Uint8Array(ECHO_TRAILER);
  const v = new DataView(trailer.buffer);
  v.setUint32(0, fnv1a(data), true);
  v.setUint32(4, req.queue, true);
  req.write(0, data);
  req.write(data.length, trailer);
  return data.length + ECHO_TRAILER;
}
