// One guest process's view of the device: its context, its allocations and
// its stream and event handles. Everything the guest names is looked up
// here, so a pointer or handle of another session (or VM) is simply unknown.
import { randomBytes } from 'node:crypto';
import { Callbacks } from './callbacks';
import { CudaErr, CudaError } from './cuda-error';
import { Budget, HOST_MAP_RAM_FACTOR, Ledger, Share, type VmLimits } from './limits';
import type { ArrayDesc, ArrayRef, GraphExecRef, GraphRef, MipmapRef, DevPtr, EventRef, FunctionRef, GuestSeg, HostPiece, ModuleRef, Provider, ProviderContext, StreamRef, VmmRef } from './provider';
import { ModuleCache, type ModuleStore } from './module-cache';
import { IMAGE_PADDING } from './module-image';
import { OutputQueue } from './output';
import { QCUDA_MAX_MODULE, QCUDA_OUTPUT_STDERR, QCUDA_OUTPUT_STDOUT, QCUDA_STREAM_LEGACY, QCUDA_STREAM_PER_THREAD, Status } from './proto';
import { RangeSet, type Range } from './ranges';
import { printable } from '../sys/log-limiter';
import { VmmSpace } from './vmm';
import type { Now } from '../sys/now';

/** Module images being uploaded at once by one session (each up to QCUDA_MAX_MODULE bytes). */
export const MAX_PENDING_UPLOADS = 4;
/** LINK results a session keeps at once (each until read whole: commands/link.ts). */
export const MAX_LINK_RESULTS = 4;

/** Disjoint received pieces an upload may have before it is complete (the driver sends QCUDA_CHUNK-sized chunks: at most 4 for an image of QCUDA_MAX_MODULE bytes). */
const MAX_UPLOAD_PIECES = 1024;

interface Upload {
  bytes: Uint8Array;
  /** The VM's cached image (MODULE_FIND): complete, and never written. */
  cached?: boolean;
  /** Received byte ranges [start, end), sorted and merged. */
  got: [number, number][];
}

interface ModuleEntry {
  ref: ModuleRef;
  /** Device memory the load took (counted against the quota until it is unloaded). */
  bytes: bigint;
  /** name -> function handle, name -> variable range (one handle / range per name). */
  funcs: Map<string, bigint>;
  vars: Map<string, Range>;
}

/**
 * Told of what a session holds as it changes: its allocations, functions,
 * streams and events (a queue owner's ring server checks requests against them:
 * providers/ring-server.ts). Whatever it is not told of, it leaves to the
 * session's own checks.
 */
export interface SessionMirror {
  /** size 0n: freed. */
  alloc(base: DevPtr, size: bigint): void;
  func(h: bigint, f: FunctionRef | undefined): void;
  stream(h: bigint, s: StreamRef | undefined): void;
  event(h: bigint, e: EventRef | undefined): void;
  /** Everything is gone (a reset, the close). */
  clear(): void;
}

export interface SessionFunction {
  ref: FunctionRef;
  module: bigint;
  params: { offset: number; size: number }[];
  paramBytes: number;
}

/** A CUDA array of the session: its shape (copies are checked against it) and what it counts against the quota. */
export interface SessionArray {
  ref: ArrayRef;
  desc: ArrayDesc;
  /** Bytes per element (channels * the format's size). */
  elemSize: bigint;
  bytes: bigint;
  /** A level of this mipmapped array (handle): freed with it, never by itself. */
  levelOf?: bigint;
}

/** Graphs and executable graphs a session may hold at once (each is host memory of the driver's). */
export const MAX_GRAPHS = 4096;
/** Conditional handles one graph may have. */
export const MAX_COND_HANDLES = 1024;

/** A graph of the session (GRAPH_CREATE) and the conditional handles made on it. */
export interface SessionGraph {
  ref: GraphRef;
  conds: Set<bigint>;
}

/** A mipmapped array of the session: its level-0 shape, levels, and the handles of the levels asked for. */
export interface SessionMipmap {
  ref: MipmapRef;
  desc: ArrayDesc;
  levels: number;
  elemSize: bigint;
  bytes: bigint;
  levelHandles: Map<number, bigint>;
}

/** What a VM's sessions share: its bounds and what they count. */
export interface VmShared {
  readonly limits: VmLimits;
  /** Where the budgets below are counted (shared memory: limits.ts Ledger). */
  readonly ledger: Ledger;
  /** Device memory (deviceMemory). */
  readonly quota: Budget;
  /** Module image bytes being uploaded (moduleStaging). */
  readonly staging: Budget;
  /** Sessions with a context (contexts). */
  readonly contexts: Budget;
  /** Pieces of guest memory mapped for the GPU (hostMapPieces). */
  readonly hostMaps: Budget;
  /** Bytes of guest memory mapped for the GPU (bounded by HOST_MAP_RAM_FACTOR x guest RAM when taken). */
  readonly hostMapBytes: Budget;
  /** Module images by content (moduleCache): the backend's, also where a session's worker asks. */
  readonly modules: ModuleStore;
}

/** Holder slots of a VM's ledger: one per session, those still closing included (device.ts allows 4096 open). */
const LEDGER_SLOTS = 8192;

/** The limits of a VM's ledger, budget by budget (the Budgets of vmShared, in order; 0: unbounded). */
export function ledgerLimits(limits: VmLimits): bigint[] {
  return [limits.deviceMemory, limits.moduleStaging, BigInt(limits.contexts), BigInt(limits.hostMapPieces), 0n];
}

/**
 * The VM's bounds, counted in `ledger`, and its module images in `modules`
 * (default: new ones; a session's worker passes the VM's ledger and asks the
 * backend for images).
 */
export function vmShared(
  limits: VmLimits,
  ledger = Ledger.create(ledgerLimits(limits), LEDGER_SLOTS),
  modules: ModuleStore = new ModuleCache(limits.moduleCache),
): VmShared {
  return {
    limits,
    ledger,
    quota: new Budget(ledger, 0, 'the device memory quota'),
    staging: new Budget(ledger, 1, 'the module upload staging bound'),
    contexts: new Budget(ledger, 2, 'the bound on CUDA processes per VM', CudaErr.DevicesUnavailable),
    hostMaps: new Budget(ledger, 3, 'the bound on pieces of guest memory mapped for the GPU'),
    hostMapBytes: new Budget(ledger, 4, 'the bound on bytes of guest memory mapped for the GPU'),
    modules,
  };
}

export interface SessionOptions {
  /** The session's id (default: a new random one). */
  id?: bigint;
  /** Its slot in the VM's ledger, held by another process (default: one of its own, freed at close). */
  slot?: number;
  /** Its place among the VM's contexts (processes) was taken when its worker was started: context() takes none. */
  placeTaken?: boolean;
  /** Where its lines for the host's log go: the VM's LogLimiter (default: none). */
  log?: (line: string) => void;
}

/** Pieces and bytes of the VM's bounds on mapped guest memory taken for a mapping in flight (Session.takeHostMap). */
export interface HostMapTicket {
  readonly epoch: number;
  readonly pieces: number;
  readonly bytes: bigint;
  /** The guest memory mapped, as host ranges: no other mapping of the session may share a byte with them. */
  readonly host: readonly HostPiece[];
}

/** A session's place among the VM's contexts (held: taken by it, not by its worker's start) and the overhead it counts in the quota. */
interface ContextPlace {
  held: boolean;
  overhead: bigint;
}

/** Device memory taken from the quota for a request in flight (Session.reserve). */
export interface Reservation {
  readonly epoch: number;
  readonly bytes: bigint;
}

export class Session {
  readonly id: bigint;
  /** Requests served for this session (qcuda status, the close log line). */
  calls = 0;
  readonly #allocs = new RangeSet<Range>();
  readonly #hostMaps = new RangeSet<Range & { pieces: number; bytes: bigint }>();
  /** The guest memory of #hostMaps, by host address, with the device pointer of its mapping. */
  readonly #mappedHost = new RangeSet<Range & { map: DevPtr }>();
  /** The VM's bound on mapped pieces: what this session's host maps hold. */
  readonly #hostMapPieces: Share;
  readonly #hostMapBytes: Share;
  readonly #streams = new Map<bigint, StreamRef>();
  readonly #events = new Map<bigint, EventRef>();
  readonly #arrays = new Map<bigint, SessionArray>();
  readonly #mipmaps = new Map<bigint, SessionMipmap>();
  /** Texture and surface objects the session made (their values are the GPU's): only these may be destroyed. */
  readonly #graphs = new Map<bigint, SessionGraph>();
  readonly #graphExecs = new Map<bigint, GraphExecRef>();
  readonly #textures = new Set<bigint>();
  readonly #surfaces = new Set<bigint>();
  readonly #uploads = new Map<bigint, Upload>();
  /** LINK results not read whole yet: image, info log, error log (counted against the staging bound). */
  readonly #linkResults = new Map<bigint, Uint8Array>();
  #nextLinkResult = 1n;
  readonly #modules = new Map<bigint, ModuleEntry>();
  readonly #functions = new Map<bigint, SessionFunction>();
  /** __device__ variables asked for with VAR_GET: addressable, not freeable. */
  readonly #symbols = new RangeSet<Range & { module: bigint }>();
  /** Virtual memory management: reservations, physical allocations, mappings (vmm.ts). */
  readonly vmm = new VmmSpace();
  #nextHandle = 0x100n;
  #ctx: Promise<ProviderContext> | undefined;
  /** #ctx once it has resolved. */
  #opened: ProviderContext | undefined;
  #closed = false;
  /**
   * Counts resets: a result that comes back from a context after a reset
   * (or the close) is not recorded: the context that made it is gone, and
   * its pointer could name the next context's memory (see live()).
   */
  #epoch = 0;
  /** This session's slot in the VM's ledger: what its shares below hold. */
  readonly #ledgerSlot: number;
  #slotFreed = false;
  /** Device memory of the VM's quota held by this session. */
  readonly #memory: Share;
  readonly #staging: Share;
  /** This session's place among the VM's contexts, while it has one (#slot: the current context's). */
  readonly #contextSlot: Share;
  #slot: ContextPlace | undefined;
  /** Device memory of the quota held for this session's contexts that exist (contextOverhead each; a reset's old one may still be going). */
  #overheads = 0n;
  /** Contexts being destroyed (by a reset) and the promises that settle when they are gone. */
  readonly #ending = new Set<ProviderContext>();
  readonly #endings = new Set<Promise<void>>();
  /** cudaLimit -> the device memory its value reserves beyond the context's default (counted). */
  readonly #limitCharges = new Map<number, bigint>();
  /** cudaLimit -> its value in a fresh context (what the context's overhead holds already). */
  readonly #limitBases = new Map<number, bigint>();
  /** Host functions marked in its streams, and the gates they put there. */
  readonly callbacks: Callbacks;
  /** Posted launches handed to the provider and not enqueued yet (batch.ts bounds them). */
  readonly launchJobs = new Set<Promise<void>>();
  /** The first failure of posted work that ran after its batch was answered (0: none). */
  #asyncError = 0;
  /** Device output for the guest (OUTPUT_READ). Kept across cudaDeviceReset, which natively prints it too. */
  readonly output = new OutputQueue();
  /** Told of allocations, functions, streams and events as they come and go (SessionMirror). */
  mirror: SessionMirror | undefined;

  constructor(
    private readonly provider: Provider,
    readonly vm: VmShared,
    public device = 0,
    private readonly o: SessionOptions = {},
  ) {
    this.id = o.id ?? randomBytes(8).readBigUInt64LE() | 1n; // never 0: 0 means "no session"
    this.#ledgerSlot = o.slot ?? vm.ledger.allocSlot();
    this.#memory = new Share(vm.quota, this.#ledgerSlot);
    this.#staging = new Share(vm.staging, this.#ledgerSlot);
    this.#contextSlot = new Share(vm.contexts, this.#ledgerSlot);
    this.#hostMapPieces = new Share(vm.hostMaps, this.#ledgerSlot);
    this.#hostMapBytes = new Share(vm.hostMapBytes, this.#ledgerSlot);
    this.callbacks = new Callbacks(vm.limits.deferredBytes);
  }

  /** The CUDA context, created on first use (a NOP-only process costs nothing). */
  context(): Promise<ProviderContext> {
    // A command that waited at a gate may run after the session ended.
    if (this.#closed) return Promise.reject(new CudaError(Status.NO_SESSION, 'the session has closed'));
    if (!this.#ctx) {
      try {
        if (!this.o.placeTaken) this.#contextSlot.take(1n); // given back once the context is gone (#free) or failed to open
      } catch (e) {
        return Promise.reject(e);
      }
      const slot: ContextPlace = { held: !this.o.placeTaken, overhead: 0n };
      try {
        this.#takeOverhead(slot);
      } catch (e) {
        this.#giveSlot(slot);
        return Promise.reject(e);
      }
      const p = this.provider.openContext(this.device, (kind, bytes) => this.#deviceOutput(kind, bytes));
      this.#ctx = p;
      this.#slot = slot;
      p.then((c) => {
        if (this.#ctx === p) this.#opened = c;
      }, () => this.#giveSlot(slot)); // no context: the session's calls keep failing with the reason, as before
    }
    return this.#ctx;
  }

  /**
   * Throws unless x is still this session's context: an object a command
   * made on x may be recorded only then. After a DEVICE_RESET or the close,
   * x is destroyed with everything made on it, and a device pointer it
   * returned may be reused by the next context (with isolation none, in
   * the same process), so it must never become addressable.
   */
  live(x: ProviderContext): void {
    if (this.#closed || this.#opened !== x)
      throw new CudaError(CudaErr.ContextIsDestroyed, 'the context was reset or closed while the call ran: its result is gone with it');
  }

  // ---- the VM's quota ----

  /** Takes bytes of device memory from the VM's quota before the call that uses them awaits anything. */
  reserve(bytes: bigint): Reservation {
    this.#memory.take(bytes);
    return { epoch: this.#epoch, bytes };
  }

  /** Bytes the session holds now, as a reservation: unreserve gives them back unless a reset meanwhile gave them back already. */
  heldBytes(bytes: bigint): Reservation {
    return { epoch: this.#epoch, bytes };
  }

  /** Gives a reservation back (a failed call); a reset gave it back already. */
  unreserve(r: Reservation): void {
    if (r.epoch === this.#epoch) this.#memory.give(r.bytes);
  }

  /** This session's slot in the VM's ledger (a worker serving its queue counts there too). */
  get slot(): number {
    return this.#ledgerSlot;
  }

  /** Takes the session's place among the VM's contexts for a worker started ahead of its context (given back when the slot is freed). */
  takeProcessPlace(): void {
    this.#contextSlot.take(1n);
  }

  /** Device memory this session holds against the quota. */
  get allocated(): bigint {
    return this.#memory.held;
  }

  /** A limit's value before the program first set it (asked of x once). */
  async limitBase(x: ProviderContext, limit: number): Promise<bigint> {
    let v = this.#limitBases.get(limit);
    if (v === undefined) {
      v = await x.limitGet(limit);
      this.live(x);
      if (!this.#limitBases.has(limit)) this.#limitBases.set(limit, v);
    }
    return this.#limitBases.get(limit)!;
  }

  /**
   * cudaDeviceSetLimit: the device memory a limit's value reserves beyond
   * the context's default (`extra`) replaces what the limit counted before.
   * Returns the undo for a call that then fails.
   */
  chargeLimit(limit: number, extra: bigint): () => void {
    const before = this.#limitCharges.get(limit) ?? 0n;
    const epoch = this.#epoch;
    if (extra > before) this.#memory.take(extra - before);
    else this.#memory.give(before - extra);
    this.#limitCharges.set(limit, extra);
    return () => {
      if (epoch !== this.#epoch) return;
      if (extra > before) this.#memory.give(extra - before);
      else this.#memory.take(before - extra);
      this.#limitCharges.set(limit, before);
    };
  }

  /**
   * Runs f on the context: at once where it is open, so that the first
   * chunk of a transfer reaches the GPU before the ring's next request is
   * even parsed (an await would let every request taken with it go first),
   * and a call that finished on this thread answers with no promise step.
   * A throw of f stays synchronous (commands' callers take both kinds of
   * failure: the dispatcher, an await).
   */
  withContext<T>(f: (ctx: ProviderContext) => Now<T>): Now<T> {
    if (!this.#opened || this.#closed) return this.context().then(f);
    return f(this.#opened);
  }

  noteAsyncError(status: number): void {
    if (this.#asyncError === 0) this.#asyncError = status;
  }

  /** For synchronizing commands: the async error, once. */
  takeAsyncError(): number {
    const e = this.#asyncError;
    this.#asyncError = 0;
    return e;
  }

  /** The context, once open (undefined before, and after a reset or the close). */
  get openedContext(): ProviderContext | undefined {
    return this.#closed ? undefined : this.#opened;
  }

  /**
   * Nothing of the session's own is pending: no host function gates a
   * stream, no posted work's error or launch waits, no device output waits
   * for the guest. Only then may its requests be answered without it.
   */
  get quiet(): boolean {
    return !this.#closed && this.#asyncError === 0 && this.callbacks.quiet && !this.output.pending && this.launchJobs.size === 0;
  }

  get hasContext(): boolean {
    return this.#ctx !== undefined;
  }

  // ---- device memory ----

  /** Records an allocation made on x with the bytes reserved for it. */
  addAlloc(x: ProviderContext, base: DevPtr, r: Reservation): void {
    this.live(x);
    this.#allocs.add({ base, size: r.bytes });
    this.mirror?.alloc(base, r.bytes);
  }

  /** Removes the allocation that starts exactly at ptr and gives its bytes back to the quota; returns its size. */
  removeAlloc(ptr: DevPtr): bigint {
    const r = this.#allocs.removeAt(ptr);
    if (!r) throw new CudaError(CudaErr.InvalidValue, `free of 0x${ptr.toString(16)}, which is not an allocation of this process`);
    this.mirror?.alloc(ptr, 0n);
    this.#memory.give(r.size);
    return r.size;
  }

  /** [ptr, ptr+size) must lie inside one allocation or host mapping of this session, or in its VMM mappings with access. */
  checkRange(ptr: DevPtr, size: bigint, what: string): void {
    if (size === 0n || this.#allocs.holding(ptr, size) || this.#hostMaps.holding(ptr, size) || this.#symbols.holding(ptr, size)) return;
    if (this.vmm.accessible(ptr, size)) return;
    throw new CudaError(CudaErr.InvalidValue, `${what}: 0x${ptr.toString(16)}+${size} is not inside memory of this process`);
  }

  /**
   * Takes pieces and bytes of the VM's bounds on mapped guest memory before
   * the mapping of host is made: given back by dropHostMap if it fails, kept
   * by addHostMap if it is recorded. A reset meanwhile gives back everything
   * the session held (its epoch tells the late call not to give again).
   * Refused: pieces that share a byte with each other or with a mapping the
   * session has (the same pages mapped again are the same pages pinned
   * again), and bytes that would take the VM's mapped total past
   * HOST_MAP_RAM_FACTOR x guestRam (taken first, then checked: concurrent
   * takers cannot all pass).
   */
  takeHostMap(host: readonly HostPiece[], guestRam: bigint): HostMapTicket {
    const sorted = [...host].sort((a, b) => (a.addr < b.addr ? -1 : a.addr > b.addr ? 1 : 0));
    let bytes = 0n;
    for (const [i, r] of sorted.entries()) {
      if (i > 0 && sorted[i - 1].addr + sorted[i - 1].size > r.addr)
        throw new CudaError(CudaErr.InvalidValue, 'host mapping: two of its pieces share guest memory');
      const m = this.#mappedHost.overlapping(r.addr, r.size);
      if (m) throw new CudaError(CudaErr.InvalidValue, `host mapping: its guest memory is mapped already (device 0x${m.map.toString(16)})`);
      bytes += r.size;
    }
    this.#hostMapPieces.take(BigInt(host.length));
    try {
      this.#hostMapBytes.take(bytes);
    } catch (e) {
      this.#hostMapPieces.give(BigInt(host.length));
      throw e;
    }
    const ticket = { epoch: this.#epoch, pieces: host.length, bytes, host: sorted };
    const bound = HOST_MAP_RAM_FACTOR * guestRam;
    if (this.vm.hostMapBytes.used > bound) {
      this.dropHostMap(ticket);
      throw new CudaError(CudaErr.MemoryAllocation, `host mapping of ${bytes} bytes: the VM's mapped guest memory would pass ${HOST_MAP_RAM_FACTOR} x its ${guestRam} bytes of RAM`);
    }
    return ticket;
  }

  dropHostMap(r: HostMapTicket): void {
    if (r.epoch !== this.#epoch) return;
    this.#hostMapPieces.give(BigInt(r.pieces));
    this.#hostMapBytes.give(r.bytes);
  }

  /** Records a mapping made of what r took; after a reset meanwhile it is given back and this throws. */
  addHostMap(x: ProviderContext, base: DevPtr, size: bigint, r: HostMapTicket): void {
    try {
      this.live(x);
    } catch (e) {
      this.dropHostMap(r);
      throw e;
    }
    this.#hostMaps.add({ base, size, pieces: r.pieces, bytes: r.bytes });
    for (const h of r.host) this.#mappedHost.add({ base: h.addr, size: h.size, map: base });
  }

  removeHostMap(base: DevPtr): void {
    const m = this.#hostMaps.removeAt(base);
    if (!m) throw new CudaError(CudaErr.InvalidValue, `0x${base.toString(16)} is not mapped host memory of this process`);
    this.#mappedHost.removeWhere((h) => h.map === base);
    this.#hostMapPieces.give(BigInt(m.pieces));
    this.#hostMapBytes.give(m.bytes);
  }

  // ---- handles ----

  #newHandle(): bigint {
    const h = this.#nextHandle;
    this.#nextHandle += 1n;
    return h;
  }

  /**
   * Refuses one more stream, event, module, texture/surface object or VMM
   * object (a reservation, physical allocation or mapping: bounded as
   * objects are, on their own count) past the process's bound (VmLimits),
   * before it is made.
   */
  checkRoom(kind: 'stream' | 'event' | 'module' | 'object' | 'vmm'): void {
    const l = this.vm.limits;
    const [held, bound] = {
      stream: [this.#streams.size, l.processStreams],
      event: [this.#events.size, l.processEvents],
      module: [this.#modules.size, l.processModules],
      object: [this.objectCount, l.processObjects],
      vmm: [this.vmm.count, l.processObjects],
    }[kind];
    if (held >= bound) throw new CudaError(CudaErr.MemoryAllocation, `${bound} ${kind}s held by this process at once (its bound)`);
  }

  addStream(x: ProviderContext, s: StreamRef): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#streams.set(h, s);
    this.mirror?.stream(h, s);
    return h;
  }

  /** The stream behind a handle; undefined for the NULL / per-thread stream. */
  stream(h: bigint): StreamRef | undefined {
    if (h === QCUDA_STREAM_LEGACY || h === QCUDA_STREAM_PER_THREAD) return undefined;
    const s = this.#streams.get(h);
    if (s === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `stream 0x${h.toString(16)} is not a stream of this process`);
    return s;
  }

  takeStream(h: bigint): StreamRef {
    const s = this.stream(h);
    if (s === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, 'the NULL stream cannot be destroyed');
    this.#streams.delete(h);
    this.mirror?.stream(h, undefined);
    return s;
  }

  addEvent(x: ProviderContext, e: EventRef): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#events.set(h, e);
    this.mirror?.event(h, e);
    return h;
  }

  event(h: bigint): EventRef {
    const e = this.#events.get(h);
    if (e === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `event 0x${h.toString(16)} is not an event of this process`);
    return e;
  }

  takeEvent(h: bigint): EventRef {
    const e = this.event(h);
    this.#events.delete(h);
    this.mirror?.event(h, undefined);
    return e;
  }

  // ---- arrays, texture and surface objects ----

  /** Records an array made on x with the bytes reserved for it. */
  addArray(x: ProviderContext, ref: ArrayRef, desc: ArrayDesc, elemSize: bigint, r: Reservation): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#arrays.set(h, { ref, desc, elemSize, bytes: r.bytes });
    return h;
  }

  array(h: bigint): SessionArray {
    const a = this.#arrays.get(h);
    if (a === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `array 0x${h.toString(16)} is not an array of this process`);
    return a;
  }

  /** Forgets an array and gives its bytes back to the quota (a mipmap level is freed with its mipmapped array only). */
  takeArray(h: bigint): SessionArray {
    const a = this.array(h);
    if (a.levelOf !== undefined) throw new CudaError(CudaErr.InvalidValue, `array 0x${h.toString(16)} is a level of a mipmapped array: free that`);
    this.#arrays.delete(h);
    this.#memory.give(a.bytes);
    return a;
  }

  get arrayCount(): number {
    return this.#arrays.size + this.#mipmaps.size;
  }

  addMipmap(x: ProviderContext, ref: MipmapRef, desc: ArrayDesc, levels: number, elemSize: bigint, r: Reservation): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#mipmaps.set(h, { ref, desc, levels, elemSize, bytes: r.bytes, levelHandles: new Map() });
    return h;
  }

  mipmap(h: bigint): SessionMipmap {
    const m = this.#mipmaps.get(h);
    if (m === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `mipmapped array 0x${h.toString(16)} is not one of this process`);
    return m;
  }

  /** A level of mipmapped array h as an array of the session (its shape desc), once per level. */
  addLevel(x: ProviderContext, h: bigint, level: number, ref: ArrayRef, desc: ArrayDesc): bigint {
    this.live(x);
    const m = this.mipmap(h); // destroyed meanwhile: refused
    const known = m.levelHandles.get(level);
    if (known !== undefined) return known;
    const lh = this.#newHandle();
    this.#arrays.set(lh, { ref, desc, elemSize: m.elemSize, bytes: 0n, levelOf: h });
    m.levelHandles.set(level, lh);
    return lh;
  }

  /** Forgets a mipmapped array with its levels and gives its bytes back. */
  takeMipmap(h: bigint): SessionMipmap {
    const m = this.mipmap(h);
    this.#mipmaps.delete(h);
    for (const lh of m.levelHandles.values()) this.#arrays.delete(lh);
    this.#memory.give(m.bytes);
    return m;
  }

  /** Records physical memory (VMM_CREATE) made on x, whose bytes were reserved: its handle. */
  addVmmAlloc(x: ProviderContext, ref: VmmRef, size: bigint): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.vmm.addAlloc(h, ref, size);
    return h;
  }

  addObject(x: ProviderContext, kind: 'texture' | 'surface', v: bigint): void {
    this.live(x);
    (kind === 'texture' ? this.#textures : this.#surfaces).add(v);
  }

  /** Forgets a texture or surface object of this session (another's, or a destroyed one, is refused). */
  takeObject(kind: 'texture' | 'surface', v: bigint): void {
    const set = kind === 'texture' ? this.#textures : this.#surfaces;
    if (!set.delete(v)) throw new CudaError(CudaErr.InvalidValue, `${kind} object 0x${v.toString(16)} is not one of this process`);
  }

  get objectCount(): number {
    return this.#textures.size + this.#surfaces.size;
  }

  // ---- graphs with conditional nodes ----

  /** Refuses one more graph or executable graph past MAX_GRAPHS. */
  checkGraphRoom(): void {
    if (this.#graphs.size + this.#graphExecs.size >= MAX_GRAPHS)
      throw new CudaError(CudaErr.MemoryAllocation, `${MAX_GRAPHS} graphs and executable graphs held at once`);
  }

  addGraph(x: ProviderContext, ref: GraphRef): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#graphs.set(h, { ref, conds: new Set() });
    return h;
  }

  graph(h: bigint): SessionGraph {
    const g = this.#graphs.get(h);
    if (g === undefined) throw new CudaError(CudaErr.InvalidValue, `graph 0x${h.toString(16)} is not a graph of this process`);
    return g;
  }

  takeGraph(h: bigint): SessionGraph {
    const g = this.graph(h);
    this.#graphs.delete(h);
    return g;
  }

  addGraphExec(x: ProviderContext, ref: GraphExecRef): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#graphExecs.set(h, ref);
    return h;
  }

  graphExec(h: bigint): GraphExecRef {
    const e = this.#graphExecs.get(h);
    if (e === undefined) throw new CudaError(CudaErr.InvalidValue, `executable graph 0x${h.toString(16)} is not one of this process`);
    return e;
  }

  takeGraphExec(h: bigint): GraphExecRef {
    const e = this.graphExec(h);
    this.#graphExecs.delete(h);
    return e;
  }

  get graphCount(): number {
    return this.#graphs.size + this.#graphExecs.size;
  }

  // ---- modules ----

  /** Stores one chunk of module image `id` (of `size` bytes in all) at `at`. */
  uploadChunk(id: bigint, size: bigint, at: bigint, data: GuestSeg[]): void {
    if (size === 0n) throw new CudaError(CudaErr.InvalidValue, 'module upload of 0 bytes');
    if (size > BigInt(QCUDA_MAX_MODULE)) throw new CudaError(Status.TOO_LARGE, `module of ${size} bytes (QCUDA_MAX_MODULE is ${QCUDA_MAX_MODULE})`);
    const len = data.reduce((n, d) => n + d.len, 0);
    if (at < 0n || at + BigInt(len) > size) throw new CudaError(CudaErr.InvalidValue, `module chunk ${at}+${len} outside an image of ${size} bytes`);
    let u = this.#uploads.get(id);
    if (u === undefined) {
      if (this.#uploads.size >= MAX_PENDING_UPLOADS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_PENDING_UPLOADS} module uploads pending`);
      this.#staging.take(size); // the VM's bound on staged bytes, given back when the upload is taken or dropped
      // NUL padding after the image: the driver reads PTX up to a NUL (module-image.ts).
      u = { bytes: new Uint8Array(Number(size) + IMAGE_PADDING).subarray(0, Number(size)), got: [] };
      this.#uploads.set(id, u);
    } else if (u.cached) {
      throw new CudaError(CudaErr.InvalidValue, `module upload ${id} is the VM's cached image: it takes no chunks`);
    } else if (BigInt(u.bytes.length) !== size) {
      throw new CudaError(CudaErr.InvalidValue, `module upload ${id}: size ${size}, earlier chunks said ${u.bytes.length}`);
    }
    let off = Number(at);
    for (const d of data) {
      u.bytes.set(d.view, off);
      off += d.len;
    }
    if (len > 0) addInterval(u.got, Number(at), off);
    if (u.got.length > MAX_UPLOAD_PIECES) {
      this.#dropUpload(id, u);
      throw new CudaError(CudaErr.InvalidValue, `module upload ${id} arrives in more than ${MAX_UPLOAD_PIECES} separate pieces: dropped`);
    }
  }

  /**
   * Stages the VM's cached image of `size` bytes with this SHA-256 as upload
   * `id`, complete, if the cache has it (MODULE_FIND); it counts against the
   * staging bound like an upload until it is loaded. false: not cached.
   */
  async stageCached(id: bigint, size: bigint, sha256: Uint8Array): Promise<boolean> {
    if (size === 0n || size > BigInt(QCUDA_MAX_MODULE)) throw new CudaError(CudaErr.InvalidValue, `module of ${size} bytes`);
    if (this.#uploads.has(id)) throw new CudaError(CudaErr.InvalidValue, `module upload ${id} exists already`);
    const image = await this.vm.modules.find(sha256, size);
    if (image === undefined) return false;
    // The same id may have been taken while the cache was asked (another thread of the process).
    if (this.#uploads.has(id)) throw new CudaError(CudaErr.InvalidValue, `module upload ${id} exists already`);
    if (this.#uploads.size >= MAX_PENDING_UPLOADS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_PENDING_UPLOADS} module uploads pending`);
    this.#staging.take(size);
    this.#uploads.set(id, { bytes: image, got: [[0, image.length]], cached: true });
    return true;
  }

  /**
   * The whole image of upload `id` (IMAGE_PADDING zero bytes follow it in its
   * buffer), which is forgotten (complete or not); cached: it is the VM's
   * cached image (stageCached), already kept by content.
   */
  takeUpload(id: bigint): { image: Uint8Array; cached: boolean } {
    const u = this.#uploads.get(id);
    if (u === undefined) throw new CudaError(CudaErr.InvalidValue, `no module upload ${id} in this process`);
    this.#dropUpload(id, u);
    const done = u.got.length === 1 && u.got[0][0] === 0 && u.got[0][1] === u.bytes.length;
    if (!done) {
      const have = u.got.reduce((n, [a, b]) => n + b - a, 0);
      throw new CudaError(CudaErr.InvalidValue, `module upload ${id} is incomplete: ${have} of ${u.bytes.length} bytes arrived`);
    }
    return { image: u.bytes, cached: u.cached === true };
  }

  #dropUpload(id: bigint, u: Upload): void {
    this.#uploads.delete(id);
    this.#staging.give(BigInt(u.bytes.length));
  }

  /** Keeps a LINK result until it is read whole (readLinkResult) or the session ends: its id. */
  addLinkResult(bytes: Uint8Array): bigint {
    if (this.#linkResults.size >= MAX_LINK_RESULTS) throw new CudaError(Status.TOO_LARGE, `more than ${MAX_LINK_RESULTS} link results not read yet`);
    this.#staging.take(BigInt(bytes.length));
    const id = this.#nextLinkResult++;
    this.#linkResults.set(id, bytes);
    return id;
  }

  /** Up to `len` bytes of LINK result `id` from `offset`; the result is dropped once its last byte is read. */
  readLinkResult(id: bigint, offset: bigint, len: number): Uint8Array {
    const r = this.#linkResults.get(id);
    if (r === undefined) throw new CudaError(CudaErr.InvalidValue, `no link result ${id} in this process`);
    if (offset < 0n || offset >= BigInt(r.length)) throw new CudaError(CudaErr.InvalidValue, `offset ${offset} outside link result ${id} of ${r.length} bytes`);
    const at = Number(offset);
    const end = Math.min(r.length, at + len);
    if (end === r.length) this.#dropLinkResult(id, r);
    return r.subarray(at, end);
  }

  #dropLinkResult(id: bigint, r: Uint8Array): void {
    this.#linkResults.delete(id);
    this.#staging.give(BigInt(r.length));
  }

  get linkResults(): number {
    return this.#linkResults.size;
  }

  get pendingUploads(): number {
    return this.#uploads.size;
  }

  get moduleCount(): number {
    return this.#modules.size;
  }

  /** Records a module loaded on x, whose load took r.bytes of device memory (reserved). */
  addModule(x: ProviderContext, ref: ModuleRef, r: Reservation): bigint {
    this.live(x);
    const h = this.#newHandle();
    this.#modules.set(h, { ref, bytes: r.bytes, funcs: new Map(), vars: new Map() });
    return h;
  }

  module(h: bigint): ModuleRef {
    const m = this.#modules.get(h);
    if (m === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `module 0x${h.toString(16)} is not a module of this process`);
    return m.ref;
  }

  /** Forgets a module with its functions and variables; returns its ref for unloading. */
  takeModule(h: bigint): ModuleRef {
    const ref = this.module(h);
    const m = this.#modules.get(h)!;
    this.#modules.delete(h);
    this.#memory.give(m.bytes);
    for (const f of m.funcs.values()) {
      this.#functions.delete(f);
      this.mirror?.func(f, undefined);
    }
    this.#symbols.removeWhere((r) => r.module === h);
    return ref;
  }

  /** The handle of a function of module h already asked for by name, if any. */
  knownFunction(h: bigint, name: string): bigint | undefined {
    return this.#modules.get(h)?.funcs.get(name);
  }

  addFunction(x: ProviderContext, h: bigint, name: string, f: SessionFunction): bigint {
    this.live(x);
    const m = this.#modules.get(h);
    if (m === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `module 0x${h.toString(16)} was unloaded meanwhile`);
    const known = m.funcs.get(name);
    if (known !== undefined) return known;
    const fh = this.#newHandle();
    this.#functions.set(fh, f);
    this.mirror?.func(fh, f.ref);
    m.funcs.set(name, fh);
    return fh;
  }

  func(h: bigint): SessionFunction {
    const f = this.#functions.get(h);
    if (f === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `function 0x${h.toString(16)} is not a function of this process`);
    return f;
  }

  /** Makes a module variable addressable memory of this session. */
  addVariable(x: ProviderContext, h: bigint, name: string, base: DevPtr, size: bigint): void {
    this.live(x);
    const m = this.#modules.get(h);
    if (m === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `module 0x${h.toString(16)} was unloaded meanwhile`);
    if (m.vars.has(name)) return;
    m.vars.set(name, { base, size });
    this.#symbols.add({ base, size, module: h });
  }

  /**
   * The process is gone: frees everything; nothing can use the session
   * after. Requests of it still in flight fail (a wait at a gate ends, then
   * finds the session closed; a call in the context fails as the context
   * goes), and the context is ended the fast way: nobody will read what it
   * would still print, and a kernel that never ends must not keep it.
   */
  async close(): Promise<void> {
    this.#closed = true;
    this.callbacks.close();
    // A context a reset is still destroying (gracefully: a worker asked to
    // stop) is ended the fast way too: the close is answered once every
    // context of the session is gone.
    for (const x of this.#ending) void x.destroy('exit');
    await Promise.all([this.#free('exit'), ...this.#endings]);
    // Everything is given back by now; the slot may go to the next session, so these shares stop here.
    if (this.#slotFreed) return;
    this.#slotFreed = true;
    for (const share of [this.#memory, this.#staging, this.#contextSlot, this.#hostMapPieces, this.#hostMapBytes]) share.retire();
    // A slot held by another process is that process's to free.
    if (this.o.slot === undefined) this.vm.ledger.freeSlot(this.#ledgerSlot);
  }

  /**
   * The process serving this session ends with it (a queue owner after its
   * SESSION_CLOSE): requests of it still waiting fail as after close(), and
   * the context and what it holds go with the process instead of being
   * destroyed here (which waits for the GPU to finish what is queued).
   */
  abandon(): void {
    this.#closed = true;
    this.callbacks.close();
  }

  /** Frees everything (cudaDeviceReset): the context goes with it. */
  reset(): Promise<void> {
    this.callbacks.reset();
    return this.#free('reset');
  }

  /**
   * Device output for the guest (OutputSink). A stderr line of the driver's
   * that is no device assert is the guest's too, and one line of the host's
   * log, named by the session: through the VM's rate limit, escaped.
   */
  #deviceOutput(kind: number, bytes: Uint8Array): void {
    if (kind !== 1 && kind !== 2 && kind !== 3) return;
    this.output.push(kind === 1 ? QCUDA_OUTPUT_STDOUT : QCUDA_OUTPUT_STDERR, bytes);
    if (kind === 3) this.o.log?.(`qcuda: session ${this.id.toString(16)}: device stderr: ${printable(bytes)}`);
  }

  /**
   * A context costs the driver device memory of its own (its stack, heap,
   * printf FIFO and code areas; the worker's primary context too), which no
   * allocation shows: the VM's quota counts contextOverhead for it from
   * before it is opened until it is destroyed (security review 2, M3).
   */
  #takeOverhead(slot: ContextPlace): void {
    const o = this.vm.limits.contextOverhead;
    if (o === 0n) return;
    try {
      this.#memory.take(o);
    } catch (e) {
      throw new CudaError(CudaErr.MemoryAllocation, `a CUDA context counts ${o} bytes of the device memory quota: ${(e as Error).message}`);
    }
    slot.overhead = o;
    this.#overheads += o;
  }

  /** Gives a context's place and overhead back, once. */
  #giveSlot(slot: ContextPlace | undefined): void {
    if (!slot) return;
    if (slot.held) {
      slot.held = false;
      this.#contextSlot.give(1n);
    }
    if (slot.overhead > 0n) {
      this.#overheads -= slot.overhead;
      this.#memory.give(slot.overhead);
      slot.overhead = 0n;
    }
  }

  async #free(why: 'reset' | 'exit'): Promise<void> {
    const ctx = this.#ctx;
    const slot = this.#slot;
    this.#ctx = undefined;
    this.#slot = undefined;
    this.#opened = undefined;
    this.#epoch++;
    this.#allocs.clear();
    this.mirror?.clear();
    this.#hostMaps.clear();
    this.#mappedHost.clear();
    this.#hostMapPieces.giveAll();
    this.#hostMapBytes.giveAll();
    this.#streams.clear();
    this.#events.clear();
    this.#arrays.clear(); // the context's destruction frees them, and its texture and surface objects
    this.#mipmaps.clear();
    this.#textures.clear();
    this.#surfaces.clear();
    this.#graphs.clear(); // the context's destruction frees them
    this.#graphExecs.clear();
    for (const [id, u] of this.#uploads) this.#dropUpload(id, u);
    for (const [id, r] of this.#linkResults) this.#dropLinkResult(id, r);
    this.#modules.clear(); // the context's destruction unloads them
    this.#functions.clear();
    this.#symbols.clear();
    this.vmm.clear(); // the context's end frees it (the addon's teardown; the host provider's destroy)
    this.#limitCharges.clear();
    this.#limitBases.clear();
    // Everything but the overhead of contexts still there, which goes when each context does (#giveSlot).
    const held = this.#memory.held;
    if (held > this.#overheads) this.#memory.give(held - this.#overheads);
    if (!ctx) return;
    // The slot is the VM's bound on contexts (worker processes), and its overhead: given back once this one is gone.
    let gone!: () => void;
    const done = new Promise<void>((r) => (gone = r));
    this.#endings.add(done);
    let x: ProviderContext | undefined;
    try {
      x = await ctx.catch(() => undefined);
      if (x) {
        this.#ending.add(x);
        await x.destroy(this.#closed ? 'exit' : why);
      }
    } finally {
      if (x) this.#ending.delete(x);
      this.#giveSlot(slot);
      this.#endings.delete(done);
      gone();
    }
  }
}

/** Adds [a, b) to sorted, merged intervals. */
function addInterval(list: [number, number][], a: number, b: number): void {
  const out: [number, number][] = [];
  let i = 0;
  while (i < list.length && list[i][1] < a) out.push(list[i++]);
  while (i < list.length && list[i][0] <= b) {
    a = Math.min(a, list[i][0]);
    b = Math.max(b, list[i][1]);
    i++;
  }
  out.push([a, b]);
  while (i < list.length) out.push(list[i++]);
  list.splice(0, list.length, ...out);
}
