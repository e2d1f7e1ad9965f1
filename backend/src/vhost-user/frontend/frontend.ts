// A vhost-user frontend that plays QEMU and the guest driver over a real
// socket: negotiation in QEMU 10's order, memfd guest RAM, rings, kicks and
// call eventfds. Tests and benchmarks drive backends through it.
import { native } from '../platform/native';
import { Connection, type Message } from '../connection';
import { EventFd, Fd } from '../platform/fd';
import {
  bit,
  decodeConfig,
  decodeU64,
  encodeDeviceStateParams,
  decodeVringState,
  encodeConfig,
  encodeMemTable,
  encodeSingleRegion,
  encodeU64,
  encodeVringAddr,
  encodeVringState,
  FLAG_NEED_REPLY,
  FLAG_VERSION,
  ProtoF,
  Req,
  reqName,
  VirtioF,
} from '../message';
import { BusyPoll } from '../platform/busy-poll';
import { GuestMemory } from './guest-memory';
import { GuestRing, type GuestBuf, type Used } from './guest-ring';
import { openPipe, readToEnd, writeAndClose } from './pipe';

/** A state transfer as QEMU's vhost_save/load_backend_state does it: SET_DEVICE_STATE_FD's and CHECK_DEVICE_STATE's replies. */
export interface StateOutcome {
  /** SET_DEVICE_STATE_FD's reply (0x100: accepted, our pipe used). */
  set: bigint;
  /** CHECK_DEVICE_STATE's reply (0: the backend took or gave the whole state). */
  check: bigint;
  /** What the backend wrote (save). */
  data?: Buffer;
}

export interface StartOptions {
  queues?: number; // default: all the backend has
  size?: number; // default 256
  eventIdx?: boolean; // default true
  indirect?: boolean; // default true
  /** Send the table with ADD_MEM_REG (CONFIGURE_MEM_SLOTS) instead of SET_MEM_TABLE. */
  addMemReg?: boolean;
  /** Region index where rings are placed (1 = above 4 GiB). */
  ringRegion?: number;
  /** Microseconds the used rings are polled after each submission, interrupts suppressed, as the guest driver's poll_us (default 0: interrupts only). */
  pollUs?: number;
  /**
   * Microseconds a poll turn may spin on the used rings while nothing is
   * answered, as the guest driver's poll loop does (busy-poll.ts; default 0).
   * Only with the backend in another process: a spin holds up this one.
   */
  spinUs?: number;
}

interface Queue {
  ring: GuestRing;
  kick: EventFd;
  call: EventFd;
  waiting: Map<number, (u: Used) => void>;
  /** Submitters waiting for free descriptors, as a driver does when its ring is full. */
  space: (() => void)[];
  /** Kicks sent (the device asked for them). */
  kicks: number;
  /** Interrupts taken (the call eventfd woke this process). */
  calls: number;
}

export class Frontend {
  /** The connection to the backend (a new one after reconnect()). */
  conn: Connection;
  readonly mem: GuestMemory;
  readonly queues: Queue[] = [];
  features = 0n;
  protocolFeatures = 0n;
  queueNum = 0;
  #replies: Message[] = [];
  #replyWaiter: ((m: Message) => void) | undefined;
  #closeReason: Error | undefined;
  #closed = false;
  #poll = new BusyPoll(0);
  /** What start() acked and how it sent memory: reconnect() does the same. */
  #started: { acked: bigint; addMemReg: boolean } | undefined;

  private constructor(sock: Fd, mem: GuestMemory) {
    this.mem = mem;
    this.conn = this.#connection(sock);
  }

  #connection(sock: Fd): Connection {
    const conn: Connection = new Connection(
      sock,
      {
        onMessage: (m) => this.#onReply(m),
        onClose: (reason) => {
          if (conn !== this.conn) return; // an old connection, left by reconnect()
          this.#closed = true;
          this.#closeReason = reason;
          this.#replyWaiter?.(undefined as unknown as Message);
        },
      },
      true,
    );
    return conn;
  }

  static connect(path: string, mem = new GuestMemory()): Frontend {
    return new Frontend(new Fd(native.unixConnect(path)), mem);
  }

  static fromFd(fd: number, mem = new GuestMemory()): Frontend {
    return new Frontend(new Fd(fd), mem);
  }

  get closed(): boolean {
    return this.#closed;
  }

  #onReply(m: Message): void {
    for (const fd of m.fds) fd.close(); // replies carry no fds we use
    if (this.#replyWaiter) this.#replyWaiter(m);
    else this.#replies.push(m);
  }

  /** Sends a request and, when one is due, waits for its reply. */
  async request(
    req: Req,
    payload: Uint8Array = new Uint8Array(0),
    fds: number[] = [],
    opts: { reply?: boolean; needReply?: boolean } = {},
  ): Promise<Message | undefined> {
    const flags = FLAG_VERSION | (opts.needReply ? FLAG_NEED_REPLY : 0);
    this.conn.send(req, flags, payload, fds);
    if (!opts.reply && !opts.needReply) return undefined;
    const m = await this.#nextReply();
    if (!m)
      throw new Error(
        `backend closed the connection instead of answering ${reqName(req)}${this.#closeReason ? `: ${this.#closeReason.message}` : ''}`,
      );
    if (m.request !== req) throw new Error(`reply to ${reqName(m.request)} while waiting for ${reqName(req)}`);
    return m;
  }

  #nextReply(): Promise<Message | undefined> {
    const queued = this.#replies.shift();
    if (queued) return Promise.resolve(queued);
    if (this.#closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      this.#replyWaiter = (m) => {
        this.#replyWaiter = undefined;
        resolve(m);
      };
    });
  }

  async getU64(req: Req): Promise<bigint> {
    const m = await this.request(req, undefined, [], { reply: true });
    return decodeU64(reqName(req), m!.payload);
  }

  /** A request acked through REPLY_ACK: resolves to the backend's status (0 = ok). */
  async acked(req: Req, payload?: Uint8Array, fds: number[] = []): Promise<bigint> {
    const m = await this.request(req, payload, fds, { needReply: true });
    return decodeU64(reqName(req), m!.payload);
  }

  /** What QEMU does at device realize. */
  async negotiate(): Promise<void> {
    this.features = await this.getU64(Req.GET_FEATURES);
    if (!(this.features & bit(VirtioF.PROTOCOL_FEATURES))) throw new Error('backend lacks PROTOCOL_FEATURES');
    this.protocolFeatures = await this.getU64(Req.GET_PROTOCOL_FEATURES);
    await this.request(Req.SET_PROTOCOL_FEATURES, encodeU64(this.protocolFeatures));
    this.queueNum = Number(await this.getU64(Req.GET_QUEUE_NUM));
    await this.getU64(Req.GET_MAX_MEM_SLOTS);
    await this.request(Req.SET_OWNER);
    await this.getU64(Req.GET_FEATURES);
  }

  async getConfig(offset: number, size: number): Promise<Uint8Array> {
    const m = await this.request(Req.GET_CONFIG, encodeConfig({ offset, size, flags: 0, data: new Uint8Array(size) }), [], { reply: true });
    return decodeConfig('GET_CONFIG', m!.payload).data;
  }

  /** What QEMU does when the guest driver sets DRIVER_OK. */
  async start(o: StartOptions = {}): Promise<void> {
    const n = o.queues ?? this.queueNum;
    const size = o.size ?? 256;
    const eventIdx = o.eventIdx ?? true;
    const indirect = o.indirect ?? true;
    let acked = bit(VirtioF.VERSION_1) | bit(VirtioF.PROTOCOL_FEATURES);
    if (eventIdx) acked |= bit(VirtioF.RING_EVENT_IDX);
    if (indirect) acked |= bit(VirtioF.RING_INDIRECT_DESC);
    await this.#ack(Req.SET_FEATURES, encodeU64(acked & this.features));
    this.#started = { acked: acked & this.features, addMemReg: o.addMemReg ?? false };
    await this.sendMemory(o.addMemReg ?? false);
    this.#poll = new BusyPoll(o.pollUs ?? 0, o.spinUs ?? 0);
    for (let i = 0; i < n; i++) await this.#startQueue(i, size, eventIdx, o.ringRegion ?? 0);
  }

  async sendMemory(oneByOne: boolean): Promise<void> {
    const fd = this.mem.fd.value;
    if (!oneByOne)
      return this.#ack(
        Req.SET_MEM_TABLE,
        encodeMemTable(this.mem.regions),
        this.mem.regions.map(() => fd),
      );
    for (const r of this.mem.regions) await this.#ack(Req.ADD_MEM_REG, encodeSingleRegion(r), [fd]);
  }

  async #startQueue(i: number, size: number, eventIdx: boolean, region: number): Promise<void> {
    const ring = new GuestRing(this.mem, size, eventIdx, region);
    const kick = EventFd.create();
    const call = EventFd.create();
    await this.#sendRing(i, ring, 0, kick, call);
    const q: Queue = { ring, kick, call, waiting: new Map(), space: [], kicks: 0, calls: 0 };
    this.queues[i] = q;
    // An interrupt that comes while the rings are polled must not re-arm
    // used_event: the device would then interrupt for every answer of the
    // window (a write here, a wake-up there); the window's last turn re-arms.
    call.watch(() => {
      q.calls++;
      this.#onCall(q, !this.#poll.polling);
    }, true);
    await this.#ack(Req.SET_VRING_ENABLE, encodeVringState({ index: i, num: 1 }));
  }

  /** Ring i's size, base (the next avail index), addresses, kick and call fds, as QEMU sends them before it enables the ring. */
  async #sendRing(i: number, ring: GuestRing, base: number, kick: EventFd, call: EventFd): Promise<void> {
    await this.#ack(Req.SET_VRING_NUM, encodeVringState({ index: i, num: ring.size }));
    await this.#ack(Req.SET_VRING_BASE, encodeVringState({ index: i, num: base }));
    await this.#ack(
      Req.SET_VRING_ADDR,
      encodeVringAddr({
        index: i,
        flags: 0,
        desc: this.mem.va(ring.desc),
        used: this.mem.va(ring.used),
        avail: this.mem.va(ring.avail),
        log: 0n,
      }),
    );
    await this.#ack(Req.SET_VRING_KICK, encodeU64(BigInt(i)), [kick.value]);
    await this.#ack(Req.SET_VRING_CALL, encodeU64(BigInt(i)), [call.value]);
  }

  /** Sends with NEED_REPLY when REPLY_ACK was negotiated and insists on success. */
  async #ack(req: Req, payload: Uint8Array, fds: number[] = []): Promise<void> {
    if (!(this.protocolFeatures & bit(ProtoF.REPLY_ACK))) {
      await this.request(req, payload, fds);
      return;
    }
    const status = await this.acked(req, payload, fds);
    if (status !== 0n) throw new Error(`${reqName(req)} failed in the backend (status ${status})`);
  }

  /** Polling after a submission: every queue is harvested each loop turn without re-arming its interrupt, and once more re-armed at the end. */
  readonly #pollTurn = (expired: boolean): void => {
    for (const q of this.queues) this.#onCall(q, expired);
  };

  readonly #quiet = (): boolean => !this.queues.some((q) => q.ring.hasUsed);

  #onCall(q: Queue, rearm = true): void {
    for (const u of q.ring.harvest(rearm)) {
      const w = q.waiting.get(u.id);
      q.waiting.delete(u.id);
      w?.(u);
    }
    for (const wake of q.space.splice(0)) wake();
  }

  /** Posts a chain on queue i, kicks if the backend asked for it, resolves with its used element. */
  async submit(i: number, bufs: GuestBuf[], indirect = false): Promise<Used> {
    const q = this.queues[i];
    while (q.ring.numFree < (indirect ? 1 : bufs.length)) await new Promise<void>((r) => q.space.push(r));
    const head = q.ring.add(bufs, indirect);
    const done = new Promise<Used>((resolve) => q.waiting.set(head, resolve));
    if (q.ring.needKick()) {
      q.kick.signal();
      q.kicks++;
    }
    if (this.#poll.enabled) {
      this.#poll.add(this.#pollTurn, this.#quiet);
      this.#poll.touch();
    }
    return done;
  }

  /** Benchmarks: n steps of synchronous calls, one per chain, on queue i, made from C (GuestRing.loop); each step's time in ns. */
  loop(i: number, chains: GuestBuf[][], n: number, replies: Uint8Array[], timeoutNs = 5e9): Float64Array {
    const q = this.queues[i];
    const r = q.ring.loop(chains, n, q.kick.value, replies, timeoutNs);
    q.kicks += r.kicks;
    return r.ns;
  }

  /** What QEMU does on stop: disable, then GET_VRING_BASE (which stops the ring). */
  async stop(): Promise<number[]> {
    const bases: number[] = [];
    for (let i = 0; i < this.queues.length; i++) {
      await this.#ack(Req.SET_VRING_ENABLE, encodeVringState({ index: i, num: 0 }));
      const m = await this.request(Req.GET_VRING_BASE, encodeVringState({ index: i, num: 0 }), [], { reply: true });
      bases.push(decodeVringState('GET_VRING_BASE', m!.payload).num);
    }
    return bases;
  }

  /** What QEMU does when the VM goes on after stop(): the same rings, from where GET_VRING_BASE left them. */
  async resume(bases: number[]): Promise<void> {
    for (const [i, q] of this.queues.entries()) {
      await this.#sendRing(i, q.ring, bases[i], q.kick, q.call);
      await this.#ack(Req.SET_VRING_ENABLE, encodeVringState({ index: i, num: 1 }));
    }
  }

  /**
   * What QEMU does when its backend went away and one listens on the socket
   * again (qemu-patches/0002, -chardev ...,reconnect-ms): a new connection,
   * the handshake, and the started device set up again as vhost_dev_start
   * does: features, memory, every ring (its base the used index found in
   * guest memory, as QEMU restores it from a dead backend), and only then
   * the rings enabled. The rings, their kick and call fds and the requests
   * waiting on them stay: what the old backend never took is there for the
   * new one.
   */
  async reconnect(path: string): Promise<void> {
    if (!this.#closed) this.conn.close();
    this.#closed = false;
    this.#closeReason = undefined;
    this.#replies = [];
    this.conn = this.#connection(new Fd(native.unixConnect(path)));
    await this.negotiate();
    if (!this.#started) return;
    await this.#ack(Req.SET_FEATURES, encodeU64(this.#started.acked));
    await this.sendMemory(this.#started.addMemReg);
    for (const [i, q] of this.queues.entries()) await this.#sendRing(i, q.ring, q.ring.usedIdx, q.kick, q.call);
    for (let i = 0; i < this.queues.length; i++) await this.#ack(Req.SET_VRING_ENABLE, encodeVringState({ index: i, num: 1 }));
  }

  /** SET_DEVICE_STATE_FD with fd; its u64 reply. */
  async setDeviceStateFd(direction: number, phase: number, fd: number): Promise<bigint> {
    const m = await this.request(Req.SET_DEVICE_STATE_FD, encodeDeviceStateParams({ direction, phase }), [fd], { reply: true });
    return decodeU64('SET_DEVICE_STATE_FD', m!.payload);
  }

  async checkDeviceState(): Promise<bigint> {
    return this.getU64(Req.CHECK_DEVICE_STATE);
  }

  /** QEMU's vhost_save_backend_state: a pipe, its write end to the backend, read to EOF, then CHECK. */
  async saveDeviceState(direction = 0, phase = 0): Promise<StateOutcome> {
    const p = openPipe();
    let set: bigint;
    try {
      set = await this.setDeviceStateFd(direction, phase, p.write);
    } finally {
      native.close(p.write);
    }
    const data = await readToEnd(p.read);
    return { set, check: await this.checkDeviceState(), data };
  }

  /** QEMU's vhost_load_backend_state: a pipe, its read end to the backend, the state written and the end closed, then CHECK. */
  async loadDeviceState(data: Uint8Array, direction = 1, phase = 0): Promise<StateOutcome> {
    const p = openPipe();
    let set: bigint;
    try {
      set = await this.setDeviceStateFd(direction, phase, p.read);
    } finally {
      native.close(p.read);
    }
    await writeAndClose(p.write, data);
    return { set, check: await this.checkDeviceState() };
  }

  close(): void {
    for (const q of this.queues) {
      q.kick.close();
      q.call.close();
    }
    this.queues.length = 0;
    this.conn.close();
    this.mem.close();
  }
}
