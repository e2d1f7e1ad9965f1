// The virtio-qcuda device on vhost-user-ts. Each request is a qcuda_req_hdr
// with arguments (and data) in the readable part and a qcuda_resp_hdr with
// output (and data) in the writable part. The device checks the shape of
// every request against the command table, finds the caller's session, and
// answers every failure with a status; nothing the guest sends is trusted.
import createDebug from 'debug';
import type { MemoryTable, Reader, Request, StateSink, StateSource, Struct, VhostUserDevice, Vring, Writer } from '../vhost-user';
import type { ShareGate } from './share/gate';
import type { BatchEnding, Call, DeviceState, Result, Run, SessionCmd } from './command';
import { COMMANDS, finishBatch, runGated } from './commands';
import { CudaErr, CudaError } from './cuda-error';
import { QueueDelegation, servedBy } from './workers/delegation';
import { LogLimiter } from '../vhost-user';
import type { BusyPoll } from '../vhost-user';
import { later, type Now } from '../sys/now';
import { MAX_SAFE_BIG } from '../vhost-user';
import { DEFAULT_LIMITS, type VmLimits } from './quota/limits';
import { openVmLedger } from './quota/vm-ledger';
import type { Fd } from '../vhost-user';
import type { GuestAddresses, GuestSeg, Provider } from './provider';
import {
  CALLS,
  Cmd,
  decode,
  encode,
  LAYOUT,
  QCUDA_CAP_GPU,
  QCUDA_CONFIG_SIZE,
  QCUDA_MAGIC,
  QCUDA_MAX_ARGS,
  QCUDA_PROTO_VERSION,
  QCUDA_SESSION_OWN_QUEUE,
  QCUDA_ST_OUTPUT,
  Status,
} from './proto';
import { Session, vmShared, type VmShared } from './session/session';
import { describeSession, sessionStatus, type QcudaStatus, type SessionStatus } from './status';
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

/**
 * How a device's sessions go into a migration stream and come back
 * (saveState, loadState): the provider's, given by whoever chose the
 * provider (devices/index.ts), so that the dispatcher imports none.
 */
export interface StateCarrier {
  save(device: QcudaDevice, out: StateSink): Promise<void>;
  load(device: QcudaDevice, input: StateSource): Promise<void>;
}

export interface QcudaOptions {
  /** How its sessions are carried in a migration; absent: the device has no saveState or loadState. */
  state?: StateCarrier;
  queues?: number;
  queueSize?: number;
  /**
   * What runs the CUDA work (devices/index.ts chooses it), or how to make it
   * over this device's guest memory: guestView gives views of guest RAM by
   * host address (what mapped host memory's device pointers name).
   */
  provider: Provider | ((guestView: (addr: bigint, len: number) => Uint8Array[]) => Provider);
  /** The VM's GPU share gate (--gpu-share: share/gate.ts joinShare, or gateFromEnv in a worker); absent: no gate. */
  share?: ShareGate;
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
  /** Where vm is not given: the VM's ledger, made by `qcuda vm` and shared with its GPU disks' backends (vm-ledger.ts); default: a new one. */
  ledgerFd?: Fd;
  /**
   * A session that asks for its own queue (QCUDA_SESSION_OWN_QUEUE) gets it
   * served by its worker process (owned-queue.ts), where the provider has workers (Provider.startOwner)
   * (default false: the backend serves every queue).
   */
  ownQueues?: boolean;
  /** Told after a session's SESSION_CLOSE is done (a worker serving that session's queue gives it back then). */
  onSessionClosed?: (id: bigint) => void;
  /** The guest sees the host GPU's real UUID and PCI location (default false: the VM's own: gpu-identity.ts). Where vm is not given. */
  realGpuIdentity?: boolean;
}

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
  readonly share: ShareGate | undefined;
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
  /** Sessions served by their workers on their own queues (ownQueues). */
  readonly #delegation: QueueDelegation;

  constructor(o: QcudaOptions) {
    const carrier = o.state;
    if (carrier) {
      this.saveState = (out) => carrier.save(this, out);
      this.loadState = (input) => carrier.load(this, input);
    }
    this.numQueues = o.queues ?? 4;
    this.maxQueueSize = o.queueSize ?? 256;
    this.pollUs = o.pollUs ?? 0;
    this.share = o.share;
    this.provider = typeof o.provider === 'function' ? o.provider((addr, len) => this.guestViews(addr, len)) : o.provider;
    const limits = { ...DEFAULT_LIMITS, ...(o.memoryLimit !== undefined ? { deviceMemory: o.memoryLimit } : {}), ...o.limits };
    if (o.limits?.contextOverhead === undefined && !this.provider.hasGpu) limits.contextOverhead = 0n; // no driver, no context to pay for
    this.vm =
      o.vm ??
      vmShared(limits, o.ledgerFd && openVmLedger(o.ledgerFd, limits), undefined, undefined, o.realGpuIdentity ? 'real' : undefined);
    this.#ownQueues = o.ownQueues ?? false;
    this.#onSessionClosed = o.onSessionClosed;
    this.log = new LogLimiter(limits.logLinesPerSecond, o.log ?? ((l) => console.error(l)));
    this.#event = o.log ? (l) => this.log.log(l) : (l) => debug('%s', l);
    this.served = new Array(this.numQueues).fill(0);
    this.#delegation = new QueueDelegation({
      provider: this.provider,
      vm: this.vm,
      log: this.log,
      sessions: this.sessions,
      event: (l) => this.#event(l),
    });
  }

  readConfig(): Uint8Array {
    return encode('virtio_qcuda_config', {
      magic: QCUDA_MAGIC,
      proto_version: QCUDA_PROTO_VERSION,
      num_queues: this.numQueues,
      queue_size: this.maxQueueSize,
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
    this.#delegation.useRings(rings);
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

  /** GET_VRING_BASE on a ring a worker serves (a VM stop): see QueueDelegation.reclaimRing. */
  reclaimRing(index: number): Promise<void> {
    return this.#delegation.reclaimRing(index);
  }

  ringStarting(index: number): void {
    this.#delegation.ringStarting(index);
  }

  ringStarted(index: number): void {
    this.#delegation.ringStarted(index);
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

  /** Guest RAM by guest physical address, as this process maps it (mapped host memory is migrated so: migration/). */
  readonly where: GuestAddresses = {
    gpaOf: (host, size) => {
      if (!this.#memory || size > MAX_SAFE_BIG) throw new Error('no guest memory');
      const { region, offset } = this.#memory.atHost(host, Number(size));
      return region.gpa + BigInt(offset);
    },
    hostOf: (gpa, size) => this.hostAddressOfGpa(gpa, size),
    guestRam: () => this.guestRamBytes(),
  };

  /**
   * Migration (VhostUserDevice): every session's state, through the
   * provider's carrier; present only where one was given, so that a
   * backend whose provider cannot carry its sessions does not offer the
   * device state and QEMU refuses the migration at its start.
   */
  readonly saveState?: (out: StateSink) => Promise<void>;
  /** The sessions of a saved state, on this device with none of its own yet; refused, making nothing, where it cannot be. */
  readonly loadState?: (input: StateSource) => Promise<void>;

  /**
   * A stop for a restart (VhostUserDevice.quiesce): the rings take nothing
   * more. A parked CALLBACK_WAIT is answered (id 0: wait again) where its
   * session has no host function waiting to run, so that it does not hold
   * the stop; a session whose state cannot be carried now says why at once
   * (the rest, such as loaded modules, the save itself refuses).
   */
  quiesce(): string | undefined {
    if (!this.saveState) return `the ${this.provider.name} provider's sessions are not carried yet`;
    for (const s of this.sessions.values()) {
      const id = s.id.toString(16);
      if (this.#delegation.of(s)) return `session ${id}: not yet carried: a session served on its own queue by a worker`;
      if (s.callbacks.waiting > 0) return `session ${id}: not yet carried: a host function (cudaLaunchHostFunc) that has not run yet`;
    }
    for (const s of this.sessions.values()) s.callbacks.releaseParked();
    return undefined;
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
    const owned = this.#delegation.of(session);
    if (owned)
      throw new CudaError(Status.BAD_REQUEST, `${name} on queue ${req.queue}: the session is served on its own queue ${owned.queue}`);
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
      session,
      args: spec.args ? decode(spec.args, body.read(argsSize)) : {},
      queue: req.queue,
      data: [],
      dataOffset: h.data_offset,
      dataLen,
      dev: this,
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
    if (len !== 0 && (len !== argsSize || body.available !== len))
      throw new CudaError(Status.BAD_REQUEST, `SESSION_OPEN with ${len} argument bytes`);
    const flags = len === 0 ? 0 : decode('qcuda_args_session_open', body.read(argsSize)).flags;
    if (this.sessions.size >= MAX_SESSIONS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_SESSIONS} sessions`);
    const s = new Session(this.provider, this.vm, 0, { log: (l) => this.log.log(l) });
    this.sessions.set(s.id, s);
    this.#event(`qcuda: session ${s.id.toString(16)} opened (${this.sessions.size} open)`);
    if (flags & QCUDA_SESSION_OWN_QUEUE && this.#ownQueues) this.#delegation.handOver(s, req.queue);
    return { value: s.id };
  }

  async #closeSession(id: bigint): Promise<Result> {
    const s = this.sessions.get(id);
    if (!s && this.#delegation.takeClosedUntaken(id)) return {}; // it ended with its worker, which never took this close
    if (!s) throw new CudaError(Status.NO_SESSION, 'close of an unknown session');
    const owned = this.#delegation.of(s);
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
    await this.#delegation.endAll();
    const all = [...this.sessions.values()];
    this.sessions.clear();
    for (const s of all) s.output.close();
    if (all.length > 0)
      this.#event(
        `qcuda: device reset: closing ${all.length} sessions (${all.map((s) => `${s.id.toString(16)}: ${describeSession(sessionStatus(s))}`).join('; ')})`,
      );
    const results = await Promise.allSettled(all.map((s) => s.close()));
    for (const r of results) if (r.status === 'rejected') this.log.log(`qcuda: freeing a session failed: ${r.reason}`);
  }

  /** A session's status; one its worker serves on its own queue counts the requests answered there too. */
  #sessionStatus(s: Session): SessionStatus {
    const st = sessionStatus(s);
    const d = this.#delegation.of(s);
    if (d) {
      const worker = servedBy(d);
      st.calls += worker.calls;
      st.callsInC += worker.callsInC;
    }
    return st;
  }

  status(): QcudaStatus {
    return {
      device: 'qcuda',
      provider: this.provider.name,
      gpu: this.provider.hasGpu,
      sessions: [...this.sessions.values()].map((s) => this.#sessionStatus(s)),
      deviceMemory: {
        used: Number(this.vm.quota.used),
        quota: Number(this.vm.quota.limit),
        disks: Number(this.vm.ledger.heldOutside(this.vm.quota.index)),
      },
      served: [...this.served],
      logDropped: this.log.dropped,
    };
  }
}
