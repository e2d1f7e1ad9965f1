// The virtio-qcuda device on vhost-user-ts. Each request is a qcuda_req_hdr
// with arguments (and data) in the readable part and a qcuda_resp_hdr with
// output (and data) in the writable part. The device checks the shape of
// every request against the command table, finds the caller's session, and
// answers every failure with a status; nothing the guest sends is trusted.
import createDebug from 'debug';
import { InflightRecord, type MemoryTable, type Reader, type Request, type RingState, type Struct, type VhostUserDevice, type Vring, type Writer } from '../vhost-user';
import { IsolatedProvider, type QueueOwner } from './providers/isolated';
import type { Call, DeviceState, Result, Run, SessionCmd } from './command';
import { COMMANDS, finishBatch, runGated } from './commands';
import type { BatchEnding } from './commands/batch';
import { CudaErr, CudaError } from './cuda-error';
import { LogLimiter } from '../sys/log-limiter';
import type { BusyPoll } from '../sys/busy-poll';
import { later, type Now } from '../sys/now';
import { MAX_SAFE_BIG } from '../sys/numbers';
import { DEFAULT_LIMITS, type VmLimits } from './limits';
import { HostProvider } from './providers/host';
import type { GuestSeg, Provider } from './provider';
import { CALLS, Cmd, decode, encode, LAYOUT, QCUDA_CAP_GPU, QCUDA_CONFIG_SIZE, QCUDA_MAGIC, QCUDA_MAX_ARGS, QCUDA_PROTO_VERSION, QCUDA_SESSION_OWN_QUEUE, QCUDA_ST_OUTPUT, Status } from './proto';
import { Session, vmShared, type VmShared } from './session';
import { describeCalls, describeSession, sessionStatus, type QcudaStatus, type SessionStatus } from './status';
import type { CallDecl, CmdName } from './wire/protocol';

const debug = createDebug('qcuda:device');

const REQ = LAYOUT.qcuda_req_hdr.size;
const RESP = LAYOUT.qcuda_resp_hdr.size;
/** A request's header, read by a cursor. */
const REQ_HDR: Struct<ReturnType<typeof decode<'qcuda_req_hdr'>>> = { size: REQ, decode: (b) => decode('qcuda_req_hdr', b) };
/** An empty reply payload or argument tail: one shared array (a new empty typed array costs an allocation outside the heap). */
const NOTHING = new Uint8Array(0);

/** What handle() learns of a request while it runs. */
interface Caller {
  session?: Session;
  /** Bytes of data the command writes back to the guest (counted in the used length if it succeeds). */
  dataOut?: number;
}
/** Largest payload a NOP may echo. */
const MAX_NOP_PAYLOAD = 64 << 10;
/** Sessions (guest processes with the device open) per VM. */
const MAX_SESSIONS = 4096;

export interface QcudaOptions {
  queues?: number;
  queueSize?: number;
  /** Default: a host provider over this device's guest memory. */
  provider?: Provider;
  /** Per-VM device memory quota in bytes; 0 = none (the same as limits.deviceMemory). */
  memoryLimit?: bigint;
  /** The VM's bounds (limits.ts); DEFAULT_LIMITS where not given. */
  limits?: Partial<VmLimits>;
  /** Microseconds the rings are polled after each request and answer (VhostUserDevice.pollUs); default 0: kicks only. */
  pollUs?: number;
  /** Where the backend's lines about this VM go (rate-limited); default stderr. */
  log?: (line: string) => void;
  /** The VM's bounds and what they count, where another process keeps them (a session's worker); default: new ones from limits. */
  vm?: VmShared;
  /**
   * A session that asks for its own queue (QCUDA_SESSION_OWN_QUEUE) gets it
   * served by its worker process (owned-queue.ts), with an isolated provider
   * (default false: the backend serves every queue).
   */
  ownQueues?: boolean;
  /** Told after a session's SESSION_CLOSE is done (a worker serving that session's queue gives it back then). */
  onSessionClosed?: (id: bigint) => void;
}

/** A session served by its worker on the queue it owns (QcudaOptions.ownQueues). */
interface Delegation {
  session: Session;
  queue: number;
  /** The worker, once it serves the queue. */
  owner?: QueueOwner;
  /** Settles once the first hand-over is over (owner set, or it failed). */
  started: Promise<void>;
  /** The in-flight record of the current hand-over (none while parked). */
  record?: InflightRecord;
  /** Requests the worker answered in earlier hand-overs (before a park). */
  servedBefore: number;
  /** Of those, the ones its ring server answered in C. */
  servedInCBefore: number;
  /** The VM stopped the ring: the worker keeps the session, and gets the ring again when it starts. */
  parked: boolean;
  /** Ends it early: the worker gives the ring back (handback) or is killed; asked before the worker serves, it happens as soon as it does. */
  end: (how: 'handback' | 'kill') => void;
  ending?: 'handback' | 'kill';
  /** Settles once the ring is served here again and the session is gone. */
  done: Promise<void>;
  /** The owner's lastAvail at the last check (#checkOwner), and checks in a row it has not moved while the session's close waited. */
  seen?: number;
  stuck: number;
}

/** The requests a session's worker answered on its own queue, all told (earlier hand-overs and now), and those of them in C. */
function servedBy(d: Delegation): { calls: number; callsInC: number } {
  return { calls: d.servedBefore + (d.record?.served ?? 0), callsInC: d.servedInCBefore + (d.record?.servedInC ?? 0) };
}

/**
 * How often the backend looks at what waits on the owned queues, while there
 * are any (#checkOwner): one timer for them all, so an idle VM costs two
 * wake-ups a second. A worker that has taken nothing for two such looks
 * while its session's SESSION_CLOSE waits is killed.
 */
const OWNER_CHECK_MS = 500;

/** What dispatch needs of a session command: found once per command number, not by name on each request. */
interface Route {
  name: SessionCmd;
  spec: CallDecl;
  argsSize: number;
  outSize: number;
  run: Run<CmdName>;
}

const ROUTES = new Map<number, Route>(
  (Object.keys(COMMANDS) as SessionCmd[]).map((name) => {
    const spec: CallDecl = CALLS[name];
    const size = (s: string | undefined) => (s ? LAYOUT[s as keyof typeof LAYOUT].size : 0);
    return [spec.cmd, { name, spec, argsSize: size(spec.args), outSize: size(spec.out), run: COMMANDS[name] as Run<CmdName> }];
  }),
);

/** Whether req is s's SESSION_CLOSE. */
function isCloseOf(req: Request, s: Session): boolean {
  if (req.readableBytes < REQ || req.writableBytes < RESP) return false;
  const h = req.reader().readObj(REQ_HDR);
  return h.cmd === Cmd.SESSION_CLOSE && h.session === s.id;
}

/** The guest memory a command's data lies in (all of sent's or room's bytes), resolved from the current memory table (and held with the request). */
function dataOf(dir: 'to' | 'from' | undefined, sent: Reader, room: Writer): GuestSeg[] {
  try {
    if (dir === 'to') return sent.segments();
    if (dir === 'from') return room.segments();
    return [];
  } catch (e) {
    // The guest's buffers left guest memory while the request waited (a memory table change).
    throw new CudaError(Status.BAD_REQUEST, `data buffers: ${(e as Error).message}`);
  }
}

export class QcudaDevice implements VhostUserDevice, DeviceState {
  readonly name = 'qcuda';
  readonly numQueues: number;
  readonly maxQueueSize: number;
  readonly features = 0n;
  readonly configSize = QCUDA_CONFIG_SIZE;
  /** A 16 MiB chunk (QCUDA_CHUNK) page by page, unaligned, no two pages adjacent: 4097 data descriptors, plus
   * header, arguments, response and output, 4101. The next power of two (larger tables fail their request). */
  readonly maxIndirect = 8192;
  readonly pollUs: number;
  readonly provider: Provider;
  /** The VM's bounds and what its sessions hold against them. */
  readonly vm: VmShared;
  readonly log: LogLimiter;
  readonly sessions = new Map<bigint, Session>();
  /** Requests served, per queue (tests and stats read it). */
  readonly served: number[];
  /** Session events (opened, closed, reset): the embedder's log where it gave one, else DEBUG=qcuda:device. */
  readonly #event: (line: string) => void;
  #memory: MemoryTable | undefined;
  readonly #ownQueues: boolean;
  readonly #onSessionClosed: ((id: bigint) => void) | undefined;
  /** This device serves one adopted session and opens no others (adoptSession: a worker serving its session's queue). */
  #adoptedOnly = false;
  #rings: readonly Vring[] | undefined;
  /** Queue -> the session its worker serves there. */
  readonly #delegated = new Map<number, Delegation>();
  /** The same delegations by session: every request looks its session up here. */
  readonly #delegatedSessions = new Map<Session, Delegation>();
  /** The timer of #watchOwners, while any queue is owned. */
  #ownerWatch: NodeJS.Timeout | undefined;
  /** Sessions whose worker died with their SESSION_CLOSE waiting, untaken, on their queue: that close is answered as done. At most one per queue. */
  readonly #closedUntaken = new Set<bigint>();

  constructor(o: QcudaOptions = {}) {
    this.numQueues = o.queues ?? 4;
    this.maxQueueSize = o.queueSize ?? 256;
    this.pollUs = o.pollUs ?? 0;
    this.provider = o.provider ?? new HostProvider({ guestView: (addr, len) => this.guestViews(addr, len) });
    const limits = { ...DEFAULT_LIMITS, ...(o.memoryLimit !== undefined ? { deviceMemory: o.memoryLimit } : {}), ...o.limits };
    if (o.limits?.contextOverhead === undefined && !this.provider.hasGpu) limits.contextOverhead = 0n; // no driver, no context to pay for
    this.vm = o.vm ?? vmShared(limits);
    this.#ownQueues = o.ownQueues ?? false;
    this.#onSessionClosed = o.onSessionClosed;
    this.log = new LogLimiter(limits.logLinesPerSecond, o.log ?? ((l) => console.error(l)));
    this.#event = o.log ? (l) => this.log.log(l) : (l) => debug('%s', l);
    this.served = new Array(this.numQueues).fill(0);
  }

  readConfig(): Uint8Array {
    return encode('virtio_qcuda_config', {
      magic: QCUDA_MAGIC, proto_version: QCUDA_PROTO_VERSION, num_queues: this.numQueues, queue_size: this.maxQueueSize,
      capabilities: this.provider.hasGpu ? QCUDA_CAP_GPU : 0n,
    });
  }

  usePoll(poll: BusyPoll): void {
    this.provider.pollWith?.(poll);
  }

  /** Guest memory as this process maps it, registered with the provider by someone else (a worker's own table). */
  useMemory(memory: MemoryTable): void {
    this.#memory = memory;
  }

  /** The backend's rings: a queue a session owns is handed to its worker (ownQueues). */
  useRings(rings: readonly Vring[]): void {
    this.#rings = rings;
  }

  /**
   * This process serves one session of another's making (a worker serving
   * that session's queue): the session with this id and ledger slot, and
   * no other (SESSION_OPEN is refused).
   */
  adoptSession(id: bigint, slot: number): Session {
    const s = new Session(this.provider, this.vm, 0, { id, slot, placeTaken: true, log: (l) => this.log.log(l) });
    this.sessions.set(id, s);
    this.#adoptedOnly = true;
    return s;
  }

  /**
   * GET_VRING_BASE on a ring a worker serves (a VM stop): the worker hands
   * the ring back as the stop would find it and keeps its session; the ring
   * goes back to it when it starts again (ringStarting, ringStarted). A
   * worker that cannot (what it had in flight did not finish) is ended.
   */
  async reclaimRing(index: number): Promise<void> {
    const d = this.#delegated.get(index);
    const ring = this.#rings?.[index];
    if (!d || !ring || d.parked) return;
    await d.started;
    if (!d.owner || !ring.delegated) return;
    try {
      const state = await d.owner.park();
      d.servedBefore += d.record?.served ?? 0;
      d.servedInCBefore += d.record?.servedInC ?? 0;
      d.record?.close();
      d.record = undefined;
      d.parked = true;
      ring.resume(state); // stopped and disabled: nothing is taken here
    } catch (e) {
      this.log.log(`qcuda: session ${d.session.id.toString(16)}: queue ${index} could not be parked: ${(e as Error).message}`);
      d.end('kill');
      await d.done;
    }
  }

  /** Before a ring's kick, call or enable changes: a parked ring stays the worker's (nothing is taken here). */
  ringStarting(index: number): void {
    if (this.#delegated.get(index)?.parked) this.#rings?.[index]?.holdForOwner();
  }

  /** After: once the parked ring is started and enabled again, it goes back to its worker. */
  ringStarted(index: number): void {
    const d = this.#delegated.get(index);
    const ring = this.#rings?.[index];
    if (!d?.parked || !d.owner || !ring?.started || !ring.enabled || !ring.kick || !ring.call) return;
    d.parked = false;
    const state = ring.state();
    const record = InflightRecord.create(state.size, state.lastAvail, state.usedIdx);
    d.record = record;
    d.owner.ownAgain(state, [ring.kick.value, ring.call.value, record.fd.value]).catch((e: Error) => {
      this.log.log(`qcuda: session ${d.session.id.toString(16)}: queue ${index} could not go back to its worker: ${e.message}`);
      d.end('kill');
    });
  }

  attachMemory(memory: MemoryTable): void {
    this.#memory = memory;
    memory.listener = {
      added: (r, fd) => this.provider.registerGuestMemory(r.hostAddress, r.size, { fd: fd.value, region: r }),
      removing: (r) => this.provider.unregisterGuestMemory(r.hostAddress),
    };
  }

  guestRamBytes(): bigint {
    return (this.#memory?.regions ?? []).reduce((n, r) => n + r.size, 0n);
  }

  hostAddressOfGpa(gpa: bigint, size: bigint): bigint {
    if (!this.#memory || size > MAX_SAFE_BIG) throw new CudaError(CudaErr.InvalidValue, 'no such guest memory');
    try {
      return this.#memory.hostAddressGpa(gpa, Number(size));
    } catch (e) {
      throw new CudaError(CudaErr.InvalidValue, (e as Error).message);
    }
  }

  /** Views of guest RAM by host address (what mapped host memory's device pointers name). */
  guestViews(addr: bigint, len: number): Uint8Array[] {
    const { region, offset } = this.#memory!.atHost(addr, len);
    return region.segments(offset, len);
  }

  /** Answers req: at once where the command finished on this thread (Now), else once it has. */
  handle(req: Request): Now<number> {
    if (req.writableBytes < RESP) throw new RangeError(`no room for a reply header (${req.writableBytes} bytes)`);
    const caller: Caller = {};
    return this.#reply(req, caller, () => this.#dispatch(req, caller));
  }

  /**
   * A BATCH of session's that the ring server took and ran the other
   * entries of (ring-server.ts): its ending synchronize runs here, and is
   * answered as the batch's reply.
   */
  finishBatch(req: Request, session: Session, ending: BatchEnding): Now<number> {
    if (req.writableBytes < RESP) throw new RangeError(`no room for a reply header (${req.writableBytes} bytes)`);
    return this.#reply(req, { session }, () => finishBatch({ session, queue: req.queue, dev: this }, ending));
  }

  /** Runs a request's command and answers it: at once where it finished on this thread (Now), else once it has. */
  #reply(req: Request, caller: Caller, run: () => Now<Result>): Now<number> {
    let r: Now<Result>;
    try {
      r = run();
    } catch (e) {
      r = this.#failure(e);
    }
    if (!later(r)) return this.#answer(req, r, caller);
    return r.then(
      (x) => this.#answer(req, x, caller),
      (e: unknown) => this.#answer(req, this.#failure(e), caller),
    );
  }

  /** Writes the reply header and output; returns the bytes written (the data out counts only if the command succeeded). */
  #answer(req: Request, r: Result, caller: Caller): number {
    const out = r.out ?? NOTHING;
    // Checked last: the command itself may just have brought device output.
    const status = (r.status ?? 0) | (caller.session?.output.pending ? QCUDA_ST_OUTPUT : 0);
    const reply = req.writer();
    reply.write(encode('qcuda_resp_hdr', { status, len: out.length, value: r.value ?? 0n }));
    reply.write(out);
    this.served[req.queue]++;
    if (caller.session) caller.session.calls++;
    // The data went out only if the command succeeded; otherwise the guest must not read it.
    return RESP + out.length + ((r.status ?? 0) === 0 ? (caller.dataOut ?? 0) : 0);
  }

  #failure(e: unknown): Result {
    if (e instanceof CudaError) {
      debug('status 0x%s: %s', e.code.toString(16), e.message);
      return { status: e.code };
    }
    this.log.log(`qcuda: internal error: ${(e as Error)?.stack ?? e}`);
    return { status: CudaErr.Unknown };
  }

  /** Runs the request; caller.session is set once the caller's session is known, caller.dataOut once the data's direction is. */
  #dispatch(req: Request, caller: Caller): Now<Result> {
    // body: the bytes the guest sent, read from the front: the header, then the arguments, split from the data after them.
    const body = req.reader();
    if (body.available < REQ) throw new CudaError(Status.BAD_REQUEST, `request of ${req.readableBytes} bytes`);
    const h = body.readObj(REQ_HDR);
    const { cmd, len, data_len: dataLen } = h;
    if (len > QCUDA_MAX_ARGS && cmd !== Cmd.NOP) throw new CudaError(Status.TOO_LARGE, `${len} argument bytes`);
    switch (cmd) {
      case Cmd.NOP:
        return this.#nop(req, body, len);
      case Cmd.SESSION_OPEN:
        return this.#openSession(req, body, len);
      case Cmd.SESSION_CLOSE:
        return this.#closeSession(h.session);
      default:
        break;
    }
    const route = ROUTES.get(cmd);
    if (!route) throw new CudaError(Status.UNKNOWN_CMD, `unknown command ${cmd}`);
    const { name, spec, argsSize, outSize } = route;
    const session = this.sessions.get(h.session);
    caller.session = session;
    if (!session) throw new CudaError(Status.NO_SESSION, `command ${name} for unknown session`);
    const owned = this.#delegatedSessions.get(session);
    if (owned) throw new CudaError(Status.BAD_REQUEST, `${name} on queue ${req.queue}: the session is served on its own queue ${owned.queue}`);
    if (spec.varArgs ? len < argsSize : len !== argsSize)
      throw new CudaError(Status.BAD_REQUEST, `${name}: ${len} argument bytes, expected ${spec.varArgs ? 'at least ' : ''}${argsSize}`);
    if (!spec.data && (dataLen !== 0n || h.data_offset !== 0n)) throw new CudaError(Status.BAD_REQUEST, `${name} carries no data`);
    const dataIn = spec.data === 'to' ? Number(dataLen) : 0;
    const dataOut = spec.data === 'from' ? Number(dataLen) : 0;
    if (dataLen > MAX_SAFE_BIG || body.available !== len + dataIn)
      throw new CudaError(Status.BAD_REQUEST, `${name}: ${req.readableBytes} readable bytes for ${len} argument and ${dataLen} data bytes`);
    const reply = req.writer();
    if (reply.available < RESP + outSize + dataOut)
      throw new CudaError(Status.BAD_REQUEST, `${name}: ${req.writableBytes} writable bytes, needs ${RESP + outSize + dataOut}`);
    const dataSent = body.splitAt(len);
    const dataRoom = reply.splitAt(reply.available - dataOut);
    const call = {
      session, args: spec.args ? decode(spec.args, body.read(argsSize)) : {}, queue: req.queue, data: [],
      dataOffset: h.data_offset, dataLen, dev: this,
      extra: body.available > 0 ? body.read(body.available).slice() : NOTHING,
    } as Call;
    return runGated(spec, route.run, call, () => {
      // Host addresses of the data are worked out here, after any wait: the
      // memory table may have changed meanwhile. The request then holds the
      // table they were resolved in too, until it completes (Request.segments).
      call.data = dataOf(spec.data, dataSent, dataRoom);
      caller.dataOut = dataOut;
    });
  }

  #nop(req: Request, body: Reader, len: number): Result {
    if (len > MAX_NOP_PAYLOAD || body.available !== len || req.writableBytes < RESP + len)
      throw new CudaError(Status.TOO_LARGE, `NOP of ${len} bytes`);
    return { value: BigInt(req.queue), out: body.read(len).slice() };
  }

  #openSession(req: Request, body: Reader, len: number): Result {
    if (this.#adoptedOnly) throw new CudaError(Status.BAD_REQUEST, `SESSION_OPEN on queue ${req.queue}, which its session's worker serves`);
    const argsSize = LAYOUT.qcuda_args_session_open.size;
    if (len !== 0 && (len !== argsSize || body.available !== len)) throw new CudaError(Status.BAD_REQUEST, `SESSION_OPEN with ${len} argument bytes`);
    const flags = len === 0 ? 0 : decode('qcuda_args_session_open', body.read(argsSize)).flags;
    if (this.sessions.size >= MAX_SESSIONS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_SESSIONS} sessions`);
    const s = new Session(this.provider, this.vm, 0, { log: (l) => this.log.log(l) });
    this.sessions.set(s.id, s);
    this.#event(`qcuda: session ${s.id.toString(16)} opened (${this.sessions.size} open)`);
    if (flags & QCUDA_SESSION_OWN_QUEUE) this.#handOver(s, req.queue);
    return { value: s.id };
  }

  /**
   * Hands queue q to s's worker when it may: owned queues are on, q is not
   * queue 0 and not another session's, and there is a place for another
   * worker. The ring stops taking requests now (this SESSION_OPEN is the
   * last one this process answers there); the worker takes it from there.
   */
  #handOver(s: Session, q: number): void {
    const ring = this.#rings?.[q];
    if (!this.#ownQueues || !ring || q === 0 || this.#delegated.has(q) || !(this.provider instanceof IsolatedProvider)) return;
    try {
      s.takeProcessPlace();
    } catch {
      return; // at the bound on processes: served here, where its context fails the same way
    }
    const provider = this.provider;
    let started!: () => void;
    const d: Delegation = {
      session: s, queue: q, parked: false, servedBefore: 0, servedInCBefore: 0, started: new Promise((r) => (started = r)), done: Promise.resolve(), stuck: 0,
      end: (how) => {
        d.ending ??= how;
        if (d.owner) (how === 'kill' ? d.owner.kill() : d.owner.handback());
      },
    };
    this.#delegated.set(q, d);
    this.#delegatedSessions.set(s, d);
    const detaching = ring.detach();
    d.done = this.#serveElsewhere(d, ring, detaching, provider, started).catch((e: Error) => this.log.log(`qcuda: queue ${q}: ${e.message}`));
  }

  async #serveElsewhere(d: Delegation, ring: Vring, detaching: Promise<RingState>, provider: IsolatedProvider, started: () => void): Promise<void> {
    const s = d.session;
    let returned: RingState | undefined;
    try {
      const state = await detaching;
      d.record = InflightRecord.create(state.size, state.lastAvail, state.usedIdx);
      const owner = await provider.startOwner({ session: s.id, slot: s.slot, limits: this.vm.limits, state },
        [ring.kick!.value, ring.call!.value, d.record.fd.value, this.vm.ledger.fd.value], this.vm.modules);
      d.owner = owner;
      if (d.ending) d.end(d.ending); // a close or reset came while it started
      started();
      this.#event(`qcuda: session ${s.id.toString(16)}: queue ${d.queue} served by its worker, pid ${owner.pid}`);
      this.#watchOwners();
      returned = await owner.returned;
    } catch (e) {
      this.log.log(`qcuda: session ${s.id.toString(16)}: queue ${d.queue} could not be handed to a worker: ${(e as Error).message}; the session is closed`);
    } finally {
      started();
      // Free first: the ring's next SESSION_OPEN, taken as it resumes, may hand it to a new worker.
      this.#delegated.delete(d.queue);
      this.#delegatedSessions.delete(s);
      if (this.sessions.get(s.id) === s) this.sessions.delete(s.id);
      s.output.close();
      try {
        // What the session held in the VM's ledger is given back before the ring goes on (and its close is answered).
        await s.close();
      } finally {
        // The ring is served here again: from where the worker left it, or past what a dead one left in flight
        // (answered as failed, but for the session's SESSION_CLOSE, which its worker leaves for this answer: owned-queue.ts).
        if (returned && !d.parked) ring.resume(returned);
        else if (d.record) {
          if (ring.waiting(d.record, (req) => isCloseOf(req, s))) this.#closedUntaken.add(s.id);
          ring.recover(d.record, (req) => this.#closedWithWorker(req, s));
        } else ring.resume();
        const { calls, callsInC } = servedBy(d);
        d.record?.close();
        this.#event(`qcuda: session ${s.id.toString(16)} (queue ${d.queue}) ended after ${describeCalls(calls, callsInC)} on its queue (${this.sessions.size} open)`);
      }
    }
  }

  /**
   * A request the session's dead worker left in flight: its SESSION_CLOSE
   * is answered (the session ended with the process, and with it the
   * context); anything else failed (used length 0).
   */
  #closedWithWorker(req: Request, s: Session): number {
    if (!isCloseOf(req, s)) return 0;
    req.write(0, encode('qcuda_resp_hdr', { status: 0, len: 0, value: 0n }));
    return RESP;
  }

  /** Looks at every owned queue each OWNER_CHECK_MS while there are any. */
  #watchOwners(): void {
    if (this.#ownerWatch) return;
    this.#ownerWatch = setInterval(() => {
      if (this.#delegated.size === 0) {
        clearInterval(this.#ownerWatch);
        this.#ownerWatch = undefined;
        return;
      }
      for (const d of this.#delegated.values()) {
        const ring = this.#rings?.[d.queue];
        if (ring) this.#checkOwner(d, ring);
      }
    }, OWNER_CHECK_MS);
    this.#ownerWatch.unref();
  }

  /**
   * A worker whose session's SESSION_CLOSE waits on its queue, untaken, for
   * two looks in a row is stuck: its thread is held in the driver (a call
   * that waits for a kernel that never ends, say), where the close cannot
   * reach it. The close ends the process anyway (owned-queue.ts), so it is
   * killed, and its context with it, as a native process's would be: the
   * ring comes back here, which answers the close. Anything else waiting
   * means only that the worker is busy, as a native process may be.
   */
  #checkOwner(d: Delegation, ring: Vring): void {
    const r = d.record;
    if (!r || !d.owner || d.parked || d.ending) return;
    const at = r.lastAvail;
    const moved = at !== d.seen;
    d.seen = at;
    if (moved || !ring.waiting(r, (req) => isCloseOf(req, d.session))) {
      d.stuck = 0;
      return;
    }
    if (++d.stuck < 2) return;
    this.#event(`qcuda: session ${d.session.id.toString(16)}: its worker (pid ${d.owner.pid}) took nothing for ${d.stuck * OWNER_CHECK_MS} ms while the session's close waited: killed`);
    d.end('kill');
  }

  async #closeSession(id: bigint): Promise<Result> {
    const s = this.sessions.get(id);
    if (!s && this.#closedUntaken.delete(id)) return {}; // it ended with its worker, which never took this close
    if (!s) throw new CudaError(Status.NO_SESSION, 'close of an unknown session');
    const owned = this.#delegatedSessions.get(s);
    if (owned) {
      // Its close should have come on its own queue; it ends all the same.
      owned.end('kill');
      await owned.done;
      return {};
    }
    this.sessions.delete(id);
    const held = describeSession(sessionStatus(s));
    s.output.close();
    // A worker serving this one session ends with it (owned-queue.ts): its
    // context goes with the process, the fast way a dead process's does, as
    // when the backend kills a session's worker; the backend gives back what
    // the session held in the VM's ledger once the process is gone.
    if (this.#adoptedOnly) s.abandon();
    else await s.close();
    this.#event(`qcuda: session ${id.toString(16)} closed after ${held} (${this.sessions.size} open)`);
    this.#onSessionClosed?.(id);
    return {};
  }

  /** The VM went away: every session's resources are freed. */
  async reset(): Promise<void> {
    this.#closedUntaken.clear();
    const owned = [...this.#delegated.values()];
    for (const d of owned) d.end('kill');
    await Promise.all(owned.map((d) => d.done));
    const all = [...this.sessions.values()];
    this.sessions.clear();
    for (const s of all) s.output.close();
    if (all.length > 0) this.#event(`qcuda: device reset: closing ${all.length} sessions (${all.map((s) => `${s.id.toString(16)}: ${describeSession(sessionStatus(s))}`).join('; ')})`);
    const results = await Promise.allSettled(all.map((s) => s.close()));
    for (const r of results) if (r.status === 'rejected') this.log.log(`qcuda: freeing a session failed: ${r.reason}`);
  }

  /** A session's status; one its worker serves on its own queue counts the requests answered there too. */
  #sessionStatus(s: Session): SessionStatus {
    const st = sessionStatus(s);
    const d = this.#delegatedSessions.get(s);
    if (d) {
      const worker = servedBy(d);
      st.calls += worker.calls;
      st.callsInC += worker.callsInC;
    }
    return st;
  }

  status(): QcudaStatus {
    return {
      device: 'qcuda', provider: this.provider.name, gpu: this.provider.hasGpu,
      sessions: [...this.sessions.values()].map((s) => this.#sessionStatus(s)),
      deviceMemory: { used: Number(this.vm.quota.used), quota: Number(this.vm.quota.limit) },
      served: [...this.served], logDropped: this.log.dropped,
    };
  }
}
