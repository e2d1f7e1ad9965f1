// A guest's side of virtio-qcuda over the test frontend: builds requests the
// way the guest driver does (header, arguments, data split into chunks over
// the queues) for tests and benchmarks that run without a VM.
import {
  Cmd,
  decode,
  encode,
  LAYOUT,
  QCUDA_CHUNK,
  QCUDA_MAX_BATCH,
  QCUDA_PROTO_VERSION,
  QCUDA_SESSION_OWN_QUEUE,
  type StructName,
} from '../../backend/src/qcuda/proto';
import type { ExecutionContext } from 'ava';
import { Frontend, GuestMemory, type GuestBuf } from '../../backend/src/vhost-user/frontend';

const REQ = LAYOUT.qcuda_req_hdr.size;
const RESP = LAYOUT.qcuda_resp_hdr.size;
const OUT_AT = 4608; // in a slot: request at 0, reply here
const SLOT = OUT_AT + 4608;
const NO_ARGS = new Uint8Array(0);

/** A request's scratch space in guest RAM, with its bytes mapped here once (a call costs no lookups). */
interface Slot {
  gpa: bigint;
  bytes: Uint8Array;
}

export interface Reply {
  status: number;
  value: bigint;
  len: number;
  used: number;
  /** The output struct's fields (loosely typed: the struct is chosen at run time). */
  out?: Record<string, number | bigint | Uint8Array | Uint32Array | BigUint64Array>;
}

export interface CallOptions {
  args?: [StructName, Record<string, number | bigint | string | Uint8Array | undefined>];
  out?: StructName;
  /** Guest data read by the device (HTOD) or written by it (DTOH). */
  to?: GuestBuf[];
  from?: GuestBuf[];
  dataOffset?: bigint;
  dataLen?: bigint;
  session?: bigint;
  queue?: number;
  /** Raw argument bytes instead of args (for hostile tests). */
  rawArgs?: Uint8Array;
  /** Room for output when no out struct is named. */
  outLen?: number;
}

/** The bytes of a BATCH's entries, framed as the guest library frames them (each entry's arguments padded to 8 bytes). */
export function frameBatch(entries: readonly (readonly [cmd: number, args: Uint8Array])[]): Uint8Array {
  const ENTRY = LAYOUT.qcuda_batch_entry.size;
  const size = entries.reduce((n, [, a]) => n + ENTRY + ((a.length + 7) & ~7), 0);
  const bytes = new Uint8Array(size);
  const v = new DataView(bytes.buffer);
  let at = 0;
  for (const [cmd, args] of entries) {
    v.setUint32(at, cmd, true);
    v.setUint32(at + 4, args.length, true);
    bytes.set(args, at + ENTRY);
    at += ENTRY + ((args.length + 7) & ~7);
  }
  return bytes;
}

/** A BATCH of as many copies of one posted entry as fit in QCUDA_MAX_BATCH: its bytes, entry count and bytes per entry. */
export function fullBatch(cmd: number, args: Uint8Array): { bytes: Uint8Array; count: number; entryBytes: number } {
  const entryBytes = LAYOUT.qcuda_batch_entry.size + ((args.length + 7) & ~7);
  const count = Math.floor(QCUDA_MAX_BATCH / entryBytes);
  return { bytes: frameBatch(Array.from({ length: count }, () => [cmd, args] as const)), count, entryBytes };
}

export class QcudaClient {
  session = 0n;
  #nextQueue = 0;
  /** The queue every request goes on, as the driver does for a session that owns one (openOwn). */
  #ownQueue: number | undefined;
  /** Scratch slots for headers and outputs: one per request in flight. */
  readonly #slots: Slot[] = [];
  readonly #slotWaiters: (() => void)[] = [];

  constructor(
    readonly fe: Frontend,
    readonly queues = fe.queues.length,
    slots = 256,
  ) {
    for (let i = 0; i < slots; i++) {
      const gpa = fe.mem.alloc(SLOT, 64);
      this.#slots.push({ gpa, bytes: fe.mem.bytes(gpa, SLOT) });
    }
  }

  async #slot(): Promise<Slot> {
    while (this.#slots.length === 0) await new Promise<void>((r) => this.#slotWaiters.push(r));
    return this.#slots.pop()!;
  }

  #release(slot: Slot): void {
    this.#slots.push(slot);
    this.#slotWaiters.shift()?.();
  }

  #pickQueue(q?: number): number {
    if (q !== undefined) return q;
    if (this.#ownQueue !== undefined) return this.#ownQueue;
    const n = this.#nextQueue;
    this.#nextQueue = (n + 1) % this.queues;
    return n;
  }

  /** Posts at once when a slot is free: a transfer's first chunk goes before the next one is even encoded. */
  call(cmd: number, o: CallOptions = {}): Promise<Reply> {
    const slot = this.#slots.pop();
    return slot !== undefined ? this.#callIn(slot, cmd, o) : this.#slot().then((s) => this.#callIn(s, cmd, o));
  }

  async #callIn(slot: Slot, cmd: number, o: CallOptions): Promise<Reply> {
    try {
      return await this.#post(slot, cmd, o);
    } finally {
      this.#release(slot);
    }
  }

  /**
   * Benchmarks: the same step of calls (cmd and its options each) n times in
   * a row, made from C as the guest driver makes them (Frontend.loop: no
   * JavaScript between the calls); each must succeed. Each step's time in ns.
   */
  loop(calls: [cmd: number, o?: CallOptions][], n: number): Float64Array {
    if (calls.length === 0 || calls.length > this.#slots.length)
      throw new Error(`${calls.length} calls for ${this.#slots.length} free slots`);
    const slots = calls.map(() => this.#slots.pop()!);
    try {
      const built = calls.map(([cmd, o], j) => this.#build(slots[j], cmd, o ?? {}));
      // One queue for the whole step (the first call's): a ring loop posts on one ring.
      const queue = this.#pickQueue(calls[0][1]?.queue);
      if (calls.some(([, o]) => o?.queue !== undefined && o.queue !== queue)) throw new Error("a step's calls go on one queue");
      return this.fe.loop(
        queue,
        built.map((b) => b.bufs),
        n,
        built.map((b) => b.reply),
      );
    } finally {
      for (const slot of slots) this.#release(slot);
    }
  }

  async #post(slot: Slot, cmd: number, o: CallOptions): Promise<Reply> {
    const { bufs, reply, outSize } = this.#build(slot, cmd, o);
    const used = await this.fe.submit(this.#pickQueue(o.queue), bufs, bufs.length > 4);
    const r = decode('qcuda_resp_hdr', reply);
    return {
      status: r.status,
      value: r.value,
      len: r.len,
      used: used.len,
      out: o.out && r.len >= outSize ? (decode(o.out, reply.subarray(RESP)) as Reply['out']) : undefined,
    };
  }

  /** Writes a request into slot (header and arguments; the reply's room filled with 0xcc): its buffers and reply. */
  #build(slot: Slot, cmd: number, o: CallOptions): { bufs: GuestBuf[]; reply: Uint8Array; outSize: number } {
    const args = o.rawArgs ?? (o.args ? encode(o.args[0], o.args[1]) : NO_ARGS);
    const outSize = o.out ? LAYOUT[o.out].size : (o.outLen ?? 0);
    let data = 0;
    for (const b of o.to ?? []) data += b.len;
    for (const b of o.from ?? []) data += b.len;
    const hdr = encode('qcuda_req_hdr', {
      cmd,
      len: args.length,
      session: o.session ?? this.session,
      data_offset: o.dataOffset ?? 0n,
      data_len: o.dataLen ?? BigInt(data),
    });
    // Arguments larger than a slot's room (launches with large parameter
    // blocks, HOST_MAP_PAGES, the QCUDA_MAX_ARGS tests) get a buffer of their own.
    const own = args.length > OUT_AT - REQ;
    const inGpa = own ? this.fe.mem.alloc(REQ + args.length, 64) : slot.gpa;
    const request = own ? this.fe.mem.bytes(inGpa, REQ + args.length) : slot.bytes;
    request.set(hdr);
    if (args.length) request.set(args, REQ);
    const reply = slot.bytes.subarray(OUT_AT, OUT_AT + RESP + outSize);
    reply.fill(0xcc);
    const bufs: GuestBuf[] = [{ gpa: inGpa, len: REQ + args.length }];
    if (o.to) bufs.push(...o.to);
    bufs.push({ gpa: slot.gpa + BigInt(OUT_AT), len: RESP + outSize, write: true });
    if (o.from) for (const b of o.from) bufs.push({ ...b, write: true });
    return { bufs, reply, outSize };
  }

  async open(): Promise<bigint> {
    const r = await this.call(Cmd.SESSION_OPEN, { session: 0n });
    if (r.status !== 0) throw new Error(`SESSION_OPEN failed: ${r.status}`);
    this.session = r.value;
    const h = await this.call(Cmd.HELLO, {
      args: ['qcuda_args_hello', { proto_version: QCUDA_PROTO_VERSION, cuda_version: 13000 }],
      out: 'qcuda_out_hello',
    });
    if (h.status !== 0) throw new Error(`HELLO failed: ${h.status}`);
    return this.session;
  }

  /** As open(), keeping every request on queue q (QCUDA_SESSION_OWN_QUEUE): the backend may hand q to the session's worker. */
  async openOwn(q: number): Promise<bigint> {
    const r = await this.call(Cmd.SESSION_OPEN, {
      session: 0n,
      queue: q,
      args: ['qcuda_args_session_open', { flags: QCUDA_SESSION_OWN_QUEUE, reserved: 0 }],
    });
    if (r.status !== 0) throw new Error(`SESSION_OPEN failed: ${r.status}`);
    this.session = r.value;
    this.#ownQueue = q;
    const h = await this.call(Cmd.HELLO, {
      args: ['qcuda_args_hello', { proto_version: QCUDA_PROTO_VERSION, cuda_version: 13000 }],
      out: 'qcuda_out_hello',
    });
    if (h.status !== 0) throw new Error(`HELLO failed: ${h.status}`);
    return this.session;
  }

  close(): Promise<Reply> {
    return this.call(Cmd.SESSION_CLOSE);
  }

  async malloc(size: bigint | number): Promise<Reply> {
    return this.call(Cmd.MALLOC, { args: ['qcuda_args_malloc', { size: BigInt(size) }] });
  }

  free(ptr: bigint): Promise<Reply> {
    return this.call(Cmd.FREE, { args: ['qcuda_args_ptr', { ptr }] });
  }

  /** Copies guest [gpa, gpa+size) to the device in chunks over all queues, as the driver does. */
  htod(dst: bigint, gpa: bigint, size: number, stream = 0n, chunk = QCUDA_CHUNK): Promise<number> {
    return this.#chunked(Cmd.MEMCPY_HTOD, { dst, src: 0n, size: BigInt(size), stream, async: 0 }, gpa, size, 'to', chunk);
  }

  dtoh(gpa: bigint, src: bigint, size: number, stream = 0n, chunk = QCUDA_CHUNK): Promise<number> {
    return this.#chunked(Cmd.MEMCPY_DTOH, { dst: 0n, src, size: BigInt(size), stream, async: 0 }, gpa, size, 'from', chunk);
  }

  /** Resolves to the first non-zero status (0 if every chunk succeeded). */
  async #chunked(
    cmd: number,
    args: Record<string, bigint | number>,
    gpa: bigint,
    size: number,
    dir: 'to' | 'from',
    chunk: number,
  ): Promise<number> {
    const jobs: Promise<Reply>[] = [];
    for (let at = 0; at < size || (size === 0 && at === 0); at += chunk) {
      const len = Math.min(chunk, size - at);
      const bufs = len > 0 ? [{ gpa: gpa + BigInt(at), len }] : [];
      jobs.push(this.call(cmd, { args: ['qcuda_args_memcpy', args], [dir]: bufs, dataOffset: BigInt(at), dataLen: BigInt(len) }));
      if (size === 0) break;
    }
    const replies = await Promise.all(jobs);
    return replies.find((r) => r.status !== 0)?.status ?? 0;
  }
}

/** A session of its own over the backend listening at sock: a frontend with the default guest RAM, closed at the test's end. */
export async function sessionAt(t: ExecutionContext, sock: string): Promise<QcudaClient> {
  const fe = Frontend.connect(sock, new GuestMemory());
  t.teardown(() => fe.close());
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe, fe.queues.length, 8);
  await c.open();
  return c;
}
