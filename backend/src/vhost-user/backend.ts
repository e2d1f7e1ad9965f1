// The backend side of one vhost-user connection: protocol state, memory and
// rings, and one table that says, for every request, how many fds it takes,
// whether it replies, and what it does.
import createDebug from 'debug';
import { BusyPoll } from './platform/busy-poll';
import { EventFd, Fd, closeAll, isEventfd } from './platform/fd';
import { LogLimiter } from './platform/log-limiter';
import { DEFAULT_MAX_INDIRECT, MAX_INDIRECT_LIMIT } from './chain';
import type { Connection, Message } from './connection';
import type { VhostUserDevice } from './device';
import { stderrLogger, type Logger } from './logger';
import { FrontendFault, ProtocolError } from './errors';
import { MemoryTable } from './memory';
import {
  bit,
  decodeConfig,
  decodeDeviceStateParams,
  decodeMemTable,
  decodeSingleRegion,
  decodeU64,
  decodeVringAddr,
  decodeVringFdArg,
  decodeVringState,
  DEVICE_STATE_NOFD,
  encodeConfig,
  encodeU64,
  encodeVringState,
  FLAG_NEED_REPLY,
  FLAG_REPLY,
  FLAG_VERSION,
  MAX_CONFIG_SIZE,
  ProtoF,
  Req,
  reqName,
  VirtioF,
  VRING_ADDR_F_LOG,
} from './message';
import { MAX_QUEUE_SIZE, Vring, type RingFeatures } from './vring';
import { StateDirection, StatePhase, StateTransfer, type TransferResult } from './state-transfer';
import type { RestartSlot } from './restart-state';

const debug = createDebug('vhost-user:backend');

export const MAX_MEM_SLOTS = 32;

type Reply = bigint | Uint8Array | void;

interface Entry {
  /** Accepted fd count, inclusive. */
  fds: [number, number];
  /** The request always answers (GET_*): a failure then ends the connection. */
  replies?: boolean;
  run(b: Backend, m: Message): Reply | Promise<Reply>;
}

const noFds: [number, number] = [0, 0];
const oneFd: [number, number] = [1, 1];
const optFd: [number, number] = [0, 1];

const LOG_LINES_PER_SECOND = 20;

export class Backend {
  /** Every request the backend serves (inside the class: its handlers are private). */
  static readonly #TABLE: Partial<Record<Req, Entry>> = {
    [Req.GET_FEATURES]: { fds: noFds, replies: true, run: (b) => b.offeredFeatures },
    [Req.SET_FEATURES]: { fds: noFds, run: (b, m) => b.#setFeatures(decodeU64('SET_FEATURES', m.payload)) },
    [Req.SET_OWNER]: { fds: noFds, run: (b) => void (b.#owned = true) },
    [Req.RESET_OWNER]: { fds: noFds, run: (b) => b.#reset() },
    [Req.GET_PROTOCOL_FEATURES]: { fds: noFds, replies: true, run: (b) => b.offeredProtocolFeatures },
    [Req.SET_PROTOCOL_FEATURES]: { fds: noFds, run: (b, m) => b.#setProtocolFeatures(decodeU64('SET_PROTOCOL_FEATURES', m.payload)) },
    [Req.GET_QUEUE_NUM]: { fds: noFds, replies: true, run: (b) => BigInt(b.device.numQueues) },
    [Req.GET_MAX_MEM_SLOTS]: { fds: noFds, replies: true, run: () => BigInt(MAX_MEM_SLOTS) },
    [Req.SET_MEM_TABLE]: { fds: [1, 8], run: (b, m) => b.#setMemTable(m) },
    [Req.ADD_MEM_REG]: { fds: oneFd, run: (b, m) => b.#addMemReg(m) },
    [Req.REM_MEM_REG]: { fds: optFd, run: (b, m) => b.#remMemReg(m) },
    [Req.SET_VRING_NUM]: { fds: noFds, run: (b, m) => b.#withRing(m, (r, num) => r.setNum(num)) },
    [Req.SET_VRING_BASE]: { fds: noFds, run: (b, m) => b.#withRing(m, (r, num) => r.setBase(num)) },
    [Req.SET_VRING_ADDR]: { fds: noFds, run: (b, m) => b.#setVringAddr(m) },
    [Req.GET_VRING_BASE]: { fds: noFds, replies: true, run: (b, m) => b.#getVringBase(m) },
    [Req.SET_VRING_KICK]: { fds: optFd, run: (b, m) => b.#setVringFd(m, (r, fd) => r.setKick(fd)) },
    [Req.SET_VRING_CALL]: { fds: optFd, run: (b, m) => b.#setVringFd(m, (r, fd) => r.setCall(fd)) },
    [Req.SET_VRING_ERR]: { fds: optFd, run: (b, m) => b.#setVringFd(m, (r, fd) => r.setErr(fd)) },
    [Req.SET_VRING_ENABLE]: { fds: noFds, run: (b, m) => b.#setVringEnable(m) },
    [Req.SET_BACKEND_REQ_FD]: { fds: oneFd, run: (b, m) => b.#setBackendReqFd(m.fds[0]) },
    [Req.GET_CONFIG]: { fds: noFds, replies: true, run: (b, m) => b.#getConfig(m) },
    [Req.SET_CONFIG]: { fds: noFds, run: (b, m) => b.#setConfig(m) },
    [Req.RESET_DEVICE]: { fds: noFds, run: (b) => b.#reset() },
    [Req.SET_STATUS]: { fds: noFds, run: (b, m) => void (b.#status = Number(decodeU64('SET_STATUS', m.payload) & 0xffn)) },
    [Req.GET_STATUS]: { fds: noFds, replies: true, run: (b) => BigInt(b.#status) },
    [Req.SET_DEVICE_STATE_FD]: { fds: oneFd, replies: true, run: (b, m) => b.#setDeviceStateFd(m) },
    [Req.CHECK_DEVICE_STATE]: { fds: noFds, replies: true, run: (b) => b.#checkDeviceState() },
  };

  readonly memory = new MemoryTable();
  readonly rings: Vring[];
  /** Keeps the rings polled for device.pollUs after each request and answer (none when 0). */
  readonly poll: BusyPoll;
  readonly offeredFeatures: bigint;
  readonly offeredProtocolFeatures: bigint;
  readonly #ringFeatures: RingFeatures = { indirect: false, eventIdx: false };
  #ackedFeatures = 0n;
  #protocolFeatures = 0n;
  #owned = false;
  #status = 0;
  #backendReq: Fd | undefined;
  /** The state transfer SET_DEVICE_STATE_FD began, until CHECK_DEVICE_STATE takes its outcome. */
  #transfer: StateTransfer | undefined;
  /** Why a SET_DEVICE_STATE_FD was refused since the last CHECK_DEVICE_STATE (that CHECK then fails). */
  #refused: string | undefined;
  /** Failed frontend messages are logged, at most LOG_LINES_PER_SECOND a second. */
  readonly #log: LogLimiter;
  /** Memory table changes (the frontend chooses how often), as limited. */
  readonly #events: LogLimiter;
  /** The restored state being loaded into the device (resume): the rings take nothing until it is in or refused. */
  #resuming: Promise<void> | undefined;

  constructor(
    readonly device: VhostUserDevice,
    readonly conn: Connection,
    logger: Logger = stderrLogger,
    /**
     * The frontend is an untrusted program (VhostUserServer.listenEach: one
     * of many a process serves): a region must be a memfd sealed against
     * shrinking, kick and call fds must be eventfds, and one that does what
     * only a hostile frontend does is dropped (FrontendFault).
     */
    readonly untrusted = false,
    /** A restarted backend's state, for the first connection that starts its rings (restart-state.ts). */
    private readonly restart?: RestartSlot,
  ) {
    checkDevice(device);
    this.#log = new LogLimiter(LOG_LINES_PER_SECOND, (l) => logger.error(l));
    this.#events = new LogLimiter(LOG_LINES_PER_SECOND, (l) => logger.info?.(l));
    this.offeredFeatures =
      device.features |
      bit(VirtioF.VERSION_1) |
      bit(VirtioF.RING_INDIRECT_DESC) |
      bit(VirtioF.RING_EVENT_IDX) |
      bit(VirtioF.PROTOCOL_FEATURES);
    this.offeredProtocolFeatures =
      bit(ProtoF.MQ) |
      bit(ProtoF.REPLY_ACK) |
      bit(ProtoF.CONFIGURE_MEM_SLOTS) |
      bit(ProtoF.STATUS) |
      bit(ProtoF.RESET_DEVICE) |
      (device.configSize > 0 ? bit(ProtoF.CONFIG) : 0n) |
      // Not to an untrusted frontend: a load would hold its stream in memory
      // and hand its bytes to the device; such frontends (qcuda run's
      // processes) do not migrate.
      (device.saveState && device.loadState && !untrusted ? bit(ProtoF.DEVICE_STATE) : 0n);
    this.poll = new BusyPoll(device.pollUs ?? 0);
    const handler = (req: Parameters<VhostUserDevice['handle']>[0]) => device.handle(req);
    const limits = { maxSize: device.maxQueueSize, maxIndirect: device.maxIndirect ?? DEFAULT_MAX_INDIRECT };
    this.rings = Array.from(
      { length: device.numQueues },
      (_, i) => new Vring(i, limits, this.#ringFeatures, handler, this.memory, this.poll),
    );
    if (untrusted) {
      this.memory.sealedOnly = true;
      for (const r of this.rings) r.onFault = (e) => this.conn.close(e);
    }
    device.attachMemory?.(this.memory);
    if (this.poll.enabled) device.usePoll?.(this.poll);
    device.useRings?.(this.rings);
  }

  /** The virtio features the frontend acknowledged (SET_FEATURES). */
  get ackedFeatures(): bigint {
    return this.#ackedFeatures;
  }

  /** The protocol features the frontend acknowledged (SET_PROTOCOL_FEATURES). */
  get protocolFeatures(): bigint {
    return this.#protocolFeatures;
  }

  /** SET_OWNER came (nothing else depends on it). */
  get owned(): boolean {
    return this.#owned;
  }

  /** The device status byte (SET_STATUS / GET_STATUS). */
  get status(): number {
    return this.#status;
  }

  /** Handles one message; resolves once its reply (if any) is sent. */
  async handle(m: Message): Promise<void> {
    const name = reqName(m.request);
    const entry = Backend.#TABLE[m.request as Req];
    const needReply = (m.flags & FLAG_NEED_REPLY) !== 0;
    try {
      if (!entry) throw new ProtocolError('unsupported-request', `${name}: request not supported`);
      const [min, max] = entry.fds;
      if (m.fds.length < min || m.fds.length > max)
        throw new ProtocolError('bad-fds', `${name}: came with ${m.fds.length} fds, expected ${min === max ? min : `${min}..${max}`}`);
      const reply = await entry.run(this, m);
      if (entry.replies) this.#send(m.request, reply);
      else if (needReply) this.#send(m.request, 0n);
    } catch (e) {
      const err = e as Error;
      debug('%s failed: %s', name, err.message);
      this.#log.log(`vhost-user: ${name} failed: ${err.message}`);
      if (entry?.replies) throw err; // the frontend waits for an answer we cannot give
      if (err instanceof FrontendFault) throw err; // the frontend is dropped (the server closes its connection, saying why)
      if (needReply && !this.conn.closed) this.#send(m.request, 1n);
    } finally {
      closeAll(m.fds); // every fd a handler keeps it took out of the list
    }
  }

  #send(request: number, reply: Reply): void {
    const payload = typeof reply === 'bigint' ? encodeU64(reply) : (reply ?? new Uint8Array(0));
    this.conn.send(request, FLAG_VERSION | FLAG_REPLY, payload);
  }

  // ---- handlers ----

  #setFeatures(v: bigint): void {
    const unknown = v & ~this.offeredFeatures;
    if (unknown) throw new ProtocolError('not-negotiated', `SET_FEATURES: bits 0x${unknown.toString(16)} were not offered`);
    this.#ackedFeatures = v;
    this.#ringFeatures.indirect = (v & bit(VirtioF.RING_INDIRECT_DESC)) !== 0n;
    this.#ringFeatures.eventIdx = (v & bit(VirtioF.RING_EVENT_IDX)) !== 0n;
    // Without PROTOCOL_FEATURES there is no SET_VRING_ENABLE: rings start enabled.
    if ((v & bit(VirtioF.PROTOCOL_FEATURES)) === 0n) for (const r of this.rings) r.setEnabled(true);
  }

  #setProtocolFeatures(v: bigint): void {
    const unknown = v & ~this.offeredProtocolFeatures;
    if (unknown) throw new ProtocolError('not-negotiated', `SET_PROTOCOL_FEATURES: bits 0x${unknown.toString(16)} were not offered`);
    this.#protocolFeatures = v;
  }

  async #setMemTable(m: Message): Promise<void> {
    const regions = decodeMemTable(m.payload);
    if (regions.length !== m.fds.length)
      throw new ProtocolError('bad-fds', `SET_MEM_TABLE: ${regions.length} regions but ${m.fds.length} fds`);
    await this.memory.replace(regions.map((r, i) => ({ region: r, fd: m.fds[i] })));
    this.#remapRings();
    this.#memoryEvent('memory table');
  }

  async #addMemReg(m: Message): Promise<void> {
    if (this.memory.regions.length >= MAX_MEM_SLOTS) throw new ProtocolError('bad-state', `ADD_MEM_REG: all ${MAX_MEM_SLOTS} slots in use`);
    await this.memory.addSettled(decodeSingleRegion('ADD_MEM_REG', m.payload), m.fds[0]);
    this.#remapRings();
    this.#memoryEvent('memory region added');
  }

  async #remMemReg(m: Message): Promise<void> {
    await this.memory.remove(decodeSingleRegion('REM_MEM_REG', m.payload));
    this.#remapRings();
    this.#memoryEvent('memory region removed');
  }

  /** One line for the table as it now is: what the backend has mapped of the guest. */
  #memoryEvent(what: string): void {
    this.#events.log(`vhost-user: ${this.device.name}: ${what}: ${describeRegions(this.memory.regions)}`);
  }

  #remapRings(): void {
    for (const r of this.rings) {
      try {
        r.remap();
      } catch (e) {
        debug('vring %d: not in the new memory table: %s', r.index, (e as Error).message);
      }
    }
  }

  #ring(index: number, what: string): Vring {
    const r = this.rings[index];
    if (!r) throw new ProtocolError('bad-value', `${what}: vring ${index} does not exist (${this.rings.length} queues)`);
    return r;
  }

  /** For the {index, num} requests. */
  #withRing<T>(m: Message, f: (ring: Vring, num: number) => T): T {
    const s = decodeVringState(reqName(m.request), m.payload);
    return f(this.#ring(s.index, reqName(m.request)), s.num);
  }

  #setVringAddr(m: Message): void {
    const a = decodeVringAddr(m.payload);
    if (a.flags & VRING_ADDR_F_LOG) throw new ProtocolError('not-negotiated', 'SET_VRING_ADDR: dirty logging was not offered');
    this.#ring(a.index, 'SET_VRING_ADDR').setAddr(a);
  }

  async #getVringBase(m: Message): Promise<Uint8Array> {
    const ring = this.#withRing(m, (r) => r);
    if (ring.delegated) await this.device.reclaimRing?.(ring.index);
    return encodeVringState({ index: ring.index, num: await ring.stop() });
  }

  #setVringFd(m: Message, set: (r: Vring, fd: EventFd | undefined) => void): void {
    const name = reqName(m.request);
    const arg = decodeVringFdArg(name, m.payload);
    const ring = this.#ring(arg.index, name);
    if (arg.noFd !== (m.fds.length === 0))
      throw new ProtocolError('bad-fds', `${name}: the no-fd flag says ${arg.noFd} but ${m.fds.length} fds came`);
    if (this.untrusted && !arg.noFd && !isEventfd(m.fds[0].value))
      throw new FrontendFault(`${name}: vring ${arg.index}: the fd is not an eventfd`);
    const fd = arg.noFd ? undefined : new EventFd(m.fds.shift()!.take());
    this.#startingRing(ring, () => set(ring, fd));
  }

  /** A change that may start a ring (kick, call, enable): a device that hands rings to other processes sees it before and after. */
  #startingRing(ring: Vring, change: () => void): void {
    this.device.ringStarting?.(ring.index);
    change();
    this.device.ringStarted?.(ring.index);
  }

  #setVringEnable(m: Message): void {
    this.#withRing(m, (ring, num) => {
      if (num > 1) throw new ProtocolError('bad-value', `SET_VRING_ENABLE: state ${num}`);
      if (num === 1) this.#resume();
      this.#startingRing(ring, () => ring.setEnabled(num === 1));
    });
  }

  /**
   * A restarted backend's state goes into the device when the frontend
   * enables its first ring (QEMU has sent the memory table and every ring's
   * setup by then), before any ring takes a request: the rings are paused
   * until it is in, or refused (the device then starts empty). The reply to
   * SET_VRING_ENABLE does not wait for it: QEMU waits for that reply with
   * its main loop held.
   */
  #resume(): void {
    const state = this.restart?.take();
    if (!state) return;
    for (const r of this.rings) r.pause();
    const name = this.device.name;
    const load = async (): Promise<void> => {
      const why = state.mismatch(this);
      if (why) throw new Error(`not this frontend's: ${why}`);
      const t0 = performance.now();
      await state.load(this.device);
      this.#events.log(
        `vhost-user: ${name}: restored the state saved at ${state.mark.savedAt} (${state.bytes} bytes in ${(performance.now() - t0).toFixed(1)} ms)`,
      );
    };
    this.#resuming = load()
      .catch((e: Error) => this.#log.log(`vhost-user: ${name}: restart state refused, the device starts empty: ${e.message}`))
      .finally(() => {
        this.#resuming = undefined;
        if (this.restart?.loading === done) this.restart.loading = undefined;
        for (const r of this.rings) r.unpause();
      });
    const done = this.#resuming;
    if (this.restart) this.restart.loading = done;
  }

  #setBackendReqFd(fd: Fd): void {
    this.#backendReq?.close();
    this.#backendReq = new Fd(fd.take());
  }

  #getConfig(m: Message): Uint8Array {
    const c = decodeConfig('GET_CONFIG', m.payload);
    const space = this.#configSpace();
    if (c.offset + c.size > space.length)
      throw new ProtocolError('bad-size', `GET_CONFIG: ${c.size} bytes at ${c.offset} exceed the ${space.length}-byte config space`);
    return encodeConfig({ ...c, data: space.subarray(c.offset, c.offset + c.size) });
  }

  #setConfig(m: Message): void {
    const c = decodeConfig('SET_CONFIG', m.payload);
    const size = this.#configSpace().length;
    if (c.offset + c.size > size) throw new ProtocolError('bad-size', `SET_CONFIG: ${c.size} bytes at ${c.offset} exceed ${size}`);
    if (!this.device.writeConfig) throw new ProtocolError('unsupported-request', 'SET_CONFIG: the config space is read-only');
    this.device.writeConfig(c.offset, c.data);
  }

  #configSpace(): Uint8Array {
    if (this.device.configSize === 0 || !this.device.readConfig)
      throw new ProtocolError('unsupported-request', 'the device has no config space');
    return this.device.readConfig();
  }

  // ---- device state (migration) ----

  /**
   * Starts a save or load on the fd; the reply says only whether it began
   * (the outcome comes with CHECK_DEVICE_STATE). The backend uses the
   * frontend's pipe: the reply always carries the no-fd flag.
   */
  #setDeviceStateFd(m: Message): bigint {
    try {
      const p = decodeDeviceStateParams(m.payload);
      if (!(this.#protocolFeatures & bit(ProtoF.DEVICE_STATE)))
        throw new ProtocolError('not-negotiated', 'the DEVICE_STATE protocol feature was not negotiated');
      if (!this.device.saveState || !this.device.loadState)
        throw new ProtocolError('unsupported-request', `${this.device.name} cannot save its state`);
      if (p.direction !== StateDirection.SAVE && p.direction !== StateDirection.LOAD)
        throw new ProtocolError('bad-value', `direction ${p.direction}`);
      if (p.phase !== StatePhase.STOPPED) throw new ProtocolError('bad-value', `phase ${p.phase} (only 0, stopped, exists)`);
      const running = this.rings.find((r) => r.started);
      if (running) throw new ProtocolError('bad-state', `vring ${running.index} is running: the device must be stopped first`);
      if (this.#transfer) throw new ProtocolError('bad-state', `a ${StateDirection[this.#transfer.direction].toLowerCase()} is under way`);
      const fd = m.fds[0];
      this.#transfer = p.direction === StateDirection.SAVE ? StateTransfer.save(this.device, fd) : StateTransfer.load(this.device, fd);
      this.#events.log(`vhost-user: ${this.device.name}: state ${p.direction === StateDirection.SAVE ? 'save' : 'load'} started`);
      return DEVICE_STATE_NOFD;
    } catch (e) {
      const reason = (e as Error).message;
      this.#refused ??= `SET_DEVICE_STATE_FD refused: ${reason}`;
      this.#log.log(`vhost-user: ${this.device.name}: SET_DEVICE_STATE_FD refused: ${reason}`);
      return DEVICE_STATE_NOFD | 1n;
    }
  }

  /** Waits for the transfer to end; 0 if it and everything asked since the last CHECK went well. */
  async #checkDeviceState(): Promise<bigint> {
    const t = this.#transfer;
    const refused = this.#refused;
    const r: TransferResult | undefined = await t?.done;
    this.#transfer = undefined;
    this.#refused = undefined;
    const what = t?.direction === StateDirection.LOAD ? 'load' : 'save';
    if (r?.ok && !refused) {
      this.#events.log(`vhost-user: ${this.device.name}: state ${what}: ${r.bytes} bytes in ${r.ms.toFixed(1)} ms`);
      return 0n;
    }
    const reason = r && !r.ok ? `state ${what} failed: ${r.reason}` : (refused ?? 'no state transfer was asked for');
    this.#log.log(`vhost-user: ${this.device.name}: CHECK_DEVICE_STATE: ${reason}`);
    return 1n;
  }

  /** RESET_OWNER / RESET_DEVICE / disconnect: back to the state of a fresh connection. */
  async #reset(): Promise<void> {
    await this.#resuming; // a state being loaded is in (or refused) before the device resets
    this.#transfer?.abort('the frontend reset the device or went away');
    await this.#transfer?.done;
    this.#transfer = undefined;
    this.#refused = undefined;
    for (const r of this.rings) r.close();
    this.#ackedFeatures = 0n;
    this.#ringFeatures.indirect = this.#ringFeatures.eventIdx = false;
    this.#status = 0;
    await this.device.reset?.();
  }

  /** The connection is gone: the device lets go of guest memory before it is unmapped. */
  async close(): Promise<void> {
    this.#backendReq?.close();
    try {
      await this.#reset();
    } finally {
      await this.memory.clear();
    }
  }
}

/** "2 regions, 2048 MiB: 0x0+2047 MiB, 0x100000000+1 MiB". */
export function describeRegions(rs: readonly { gpa: bigint; size: bigint }[]): string {
  const mib = (n: bigint) => `${Number(n) / (1 << 20)} MiB`;
  const total = rs.reduce((n, r) => n + r.size, 0n);
  return `${rs.length} region${rs.length === 1 ? '' : 's'}, ${mib(total)}${rs.length ? ': ' : ''}${rs.map((r) => `0x${r.gpa.toString(16)}+${mib(r.size)}`).join(', ')}`;
}

function checkDevice(d: VhostUserDevice): void {
  if (!Number.isInteger(d.numQueues) || d.numQueues < 1 || d.numQueues > 256) throw new RangeError(`${d.name}: numQueues ${d.numQueues}`);
  const q = d.maxQueueSize;
  if (!Number.isInteger(q) || q < 1 || q > MAX_QUEUE_SIZE || (q & (q - 1)) !== 0) throw new RangeError(`${d.name}: maxQueueSize ${q}`);
  const ind = d.maxIndirect ?? DEFAULT_MAX_INDIRECT;
  if (!Number.isInteger(ind) || ind < 1 || ind > MAX_INDIRECT_LIMIT) throw new RangeError(`${d.name}: maxIndirect ${ind}`);
  if (d.configSize < 0 || d.configSize > MAX_CONFIG_SIZE) throw new RangeError(`${d.name}: configSize ${d.configSize}`);
}
