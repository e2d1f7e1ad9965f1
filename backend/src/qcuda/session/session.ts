// One guest process's view of the device: its context, what it holds
// against the VM's bounds, and its stream and event handles. What else it
// names is held by its parts: memory (session-memory.ts), modules
// (session-modules.ts), arrays and graphs (session-objects.ts). Everything
// the guest names is looked up there, so a pointer or handle of another
// session (or VM) is simply unknown.
import { randomBytes } from 'node:crypto';
import { Callbacks } from './callbacks';
import { CudaErr, CudaError } from '../cuda-error';
import { HandleCounter, HandleTable } from './handles';
import { Budget, Ledger, Share, type VmLimits } from '../quota/limits';
import { LEDGER_SLOTS, ledgerLimits, quotaBudget } from '../quota/vm-ledger';
import type { DevPtr, EventRef, Provider, ProviderContext, QueueOwner, StreamRef, VmmRef } from '../provider';
import { ModuleCache, type ModuleStore } from '../modules/module-cache';
import { OutputQueue } from './output';
import { QCUDA_OUTPUT_STDERR, QCUDA_OUTPUT_STDOUT, QCUDA_STREAM_LEGACY, QCUDA_STREAM_PER_THREAD, Status } from '../proto';
import type { Reservation, SessionCore, SessionMirror } from './session-core';
import { SessionMemory } from './session-memory';
import { SessionModules } from './session-modules';
import { SessionObjects } from './session-objects';
import { printable } from '../../vhost-user';
import { VmmSpace } from '../vmm/vmm';
import { VmmShareTable, type VmmShare, type VmmShareBook } from '../vmm/vmm-share';
import type { Fd } from '../../vhost-user';
import { IpcTable, type IpcBook } from '../ipc/ipc';
import type { Now } from '../../sys/now';
import { identityKey } from '../gpu-identity';
import { Limit, residentThreads } from '../attrs';
import { LocalMemory } from '../quota/local-memory';

/** A session's own tables as migration/ saves them (Session.tables). */
export interface SessionTables {
  next: bigint;
  contexts: { device: number; ctx: Promise<ProviderContext>; opened: ProviderContext | undefined }[];
  streams: { h: bigint; ref: StreamRef; device: number }[];
  events: { h: bigint; ref: EventRef; device: number }[];
  limitCharges: [string, bigint][];
  limitBases: [string, bigint][];
  local: { device: number; base: bigint; threads: bigint; stack: bigint; launched: bigint }[];
  asyncError: number;
}

/** Dropped imports a process's session remembers for their close (Session.droppedImports). */
export const IPC_DROPPED_KEPT = 4096;

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
  /**
   * The IPC handles minted by its sessions (ipc.ts): a handle opens only in a
   * session of the same VM's backend. A queue owner's worker asks the
   * backend's table (ipc-remote.ts).
   */
  readonly ipc: IpcBook<Session>;
  /** The IPC event handles minted by its sessions, as ipc (by the owner's event handle). */
  readonly ipcEvents: IpcBook<Session>;
  /** The shareable handles of VMM allocations minted by its sessions (vmm-share.ts), as ipc (vmm-remote.ts). */
  readonly vmmShares: VmmShareBook<Session>;
  /** The key its GPU identity (UUID, PCI location) is derived with (gpu-identity.ts); undefined: the real one is shown. */
  readonly identityKey: Uint8Array | undefined;
}

/**
 * The VM's bounds, counted in `ledger`, and its module images in `modules`
 * (default: new ones; a session's worker passes the VM's ledger and asks the
 * backend for images). identity: the key of its GPU identity (default: a
 * new one; a session's worker gets the backend's), or 'real'.
 */
export function vmShared(
  limits: VmLimits,
  ledger = Ledger.create(ledgerLimits(limits), LEDGER_SLOTS),
  modules: ModuleStore = new ModuleCache(limits.moduleCache),
  ipc?: Pick<VmShared, 'ipc' | 'ipcEvents' | 'vmmShares'>,
  identity: Uint8Array | 'real' = identityKey(),
): VmShared {
  return {
    identityKey: identity === 'real' ? undefined : identity,
    limits,
    ledger,
    quota: quotaBudget(ledger),
    staging: new Budget(ledger, 1, 'the module upload staging bound'),
    contexts: new Budget(ledger, 2, 'the bound on CUDA processes per VM', CudaErr.DevicesUnavailable),
    hostMaps: new Budget(ledger, 3, 'the bound on pieces of guest memory mapped for the GPU'),
    hostMapBytes: new Budget(ledger, 4, 'the bound on bytes of guest memory mapped for the GPU'),
    modules,
    ipc:
      ipc?.ipc ??
      new IpcTable<Session>(
        'IPC handle',
        (opener, at) => opener.dropImport(at),
        (opener, why) => opener.endProcess(`its close of IPC memory whose owner freed it failed (${why})`),
      ),
    ipcEvents: ipc?.ipcEvents ?? new IpcTable<Session>('IPC event handle'),
    vmmShares:
      ipc?.vmmShares ??
      new VmmShareTable<Session>(
        (importer, h) => importer.dropVmmImport(h),
        (e, importer, x) => importer.importVmm(e, x),
        (importer, why) => importer.endProcess(`its release of imported memory whose owner freed it failed (${why})`),
      ),
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

/** A session's place among the VM's contexts (held: taken by it, not by its worker's start) and the overhead it counts in the quota. */
interface ContextPlace {
  held: boolean;
  overhead: bigint;
}

/**
 * The session's context on one device (a guest process has one per device
 * it uses, as CUDA's primary contexts): opening, then opened, and its place.
 */
interface DeviceContext {
  readonly ctx: Promise<ProviderContext>;
  opened?: ProviderContext;
  readonly slot: ContextPlace;
}

export class Session {
  readonly id: bigint;
  /** Requests served for this session (qcuda status, the close log line). */
  calls = 0;
  /** Where every handle of the session comes from (handles.ts). */
  readonly #handles = new HandleCounter();
  readonly #streams: HandleTable<StreamRef>;
  readonly #events: HandleTable<EventRef>;
  /** The device each stream and event was made on (one handle counter serves both): its work runs in that device's context. */
  readonly #handleDevices = new Map<bigint, number>();
  /** Its allocations and mapped guest memory. */
  readonly memory: SessionMemory;
  /** Its module uploads, modules, functions and variables. */
  readonly modules: SessionModules;
  /** Its arrays, texture and surface objects, and graphs. */
  readonly objects: SessionObjects;
  /** Virtual memory management: reservations, physical allocations, mappings (vmm.ts). */
  readonly vmm = new VmmSpace();
  /** Its contexts by device, each created on first use there. */
  readonly #contexts = new Map<number, DeviceContext>();
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
  /** The VM's bounds on mapped guest memory: what this session's host maps hold. */
  readonly #hostMapPieces: Share;
  readonly #hostMapBytes: Share;
  /** This session's place among the VM's contexts (one per process, whatever its devices), while it has one. */
  readonly #contextSlot: Share;
  /** Device memory of the quota held for this session's contexts that exist (contextOverhead each; a reset's old one may still be going). */
  #overheads = 0n;
  /** Contexts being destroyed (by a reset) and the promises that settle when they are gone. */
  readonly #ending = new Set<ProviderContext>();
  readonly #endings = new Set<Promise<void>>();
  /** "device:cudaLimit" -> the device memory its value reserves beyond the context's default (counted; the stack's: #local's). */
  readonly #limitCharges = new Map<string, bigint>();
  /** "device:cudaLimit" -> its value in a fresh context (what the context's overhead holds already). */
  readonly #limitBases = new Map<string, bigint>();
  /** device -> its context's per-thread local memory (local-memory.ts), once a limit or a kernel needed it. */
  readonly #local = new Map<number, LocalMemory>();
  /** The L2 set-aside this session asked for: a hint, never set on the GPU (attrs.ts isL2SetAside). */
  l2SetAside = 0n;
  /** Host functions marked in its streams, and the gates they put there. */
  readonly callbacks: Callbacks;
  /** Posted launches handed to the provider and not enqueued yet (batch.ts bounds them). */
  readonly launchJobs = new Set<Promise<void>>();
  /** The first failure of posted work that ran after its batch was answered (0: none). */
  #asyncError = 0;
  /** Device output for the guest (OUTPUT_READ). Kept across cudaDeviceReset, which natively prints it too. */
  readonly output = new OutputQueue();
  /** Peer access enabled (PEER_ENABLE), as "device>peer": it goes with the contexts at a reset. */
  readonly peers = new Set<string>();
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
    const core: SessionCore = {
      handles: this.#handles,
      live: (x) => this.live(x),
      epoch: () => this.#epoch,
      quota: this.#memory,
      staging: this.#staging,
      mirror: () => this.mirror,
    };
    this.memory = new SessionMemory(core, this.#hostMapPieces, this.#hostMapBytes);
    this.modules = new SessionModules(core, vm.modules);
    this.objects = new SessionObjects(core);
    this.#streams = new HandleTable('stream', this.#handles, CudaErr.InvalidResourceHandle, (h, s) => this.mirror?.stream(h, s));
    this.#events = new HandleTable('event', this.#handles, CudaErr.InvalidResourceHandle, (h, e) => this.mirror?.event(h, e));
  }

  /**
   * The CUDA context on a device (default: the session's current one),
   * created on first use (a NOP-only process costs nothing). The first
   * takes the session's place among the VM's contexts (a process, whatever
   * its devices); each counts its overhead in the quota.
   */
  context(device = this.device): Promise<ProviderContext> {
    // A command that waited at a gate may run after the session ended.
    if (this.#closed) return Promise.reject(new CudaError(Status.NO_SESSION, 'the session has closed'));
    let d = this.#contexts.get(device);
    if (!d) {
      const place = this.#contexts.size === 0 && !this.o.placeTaken;
      try {
        if (place) this.#contextSlot.take(1n); // given back once the context is gone (#free) or failed to open
      } catch (e) {
        return Promise.reject(e);
      }
      const slot: ContextPlace = { held: place, overhead: 0n };
      try {
        this.#takeOverhead(slot);
      } catch (e) {
        this.#giveSlot(slot);
        return Promise.reject(e);
      }
      const p = this.provider.openContext(device, (kind, bytes) => this.#deviceOutput(kind, bytes));
      const entry: DeviceContext = { ctx: p, slot };
      d = entry;
      this.#contexts.set(device, entry);
      p.then(
        (c) => {
          if (this.#contexts.get(device) === entry) entry.opened = c;
        },
        () => this.#giveSlot(slot),
      ); // no context: the session's calls keep failing with the reason, as before
    }
    return d.ctx;
  }

  /** The device of one of the session's open contexts. */
  deviceOfContext(x: ProviderContext): number | undefined {
    for (const [device, d] of this.#contexts) if (d.opened === x) return device;
    return undefined;
  }

  /**
   * Throws unless x is still this session's context: an object a command
   * made on x may be recorded only then. After a DEVICE_RESET or the close,
   * x is destroyed with everything made on it, and a device pointer it
   * returned may be reused by the next context (with isolation none, in
   * the same process), so it must never become addressable.
   */
  live(x: ProviderContext): void {
    if (this.#closed || this.deviceOfContext(x) === undefined)
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

  /** A limit's value in x's context before the program first set it (asked of x once). */
  async limitBase(x: ProviderContext, limit: number): Promise<bigint> {
    const key = `${this.deviceOfContext(x) ?? this.device}:${limit}`;
    let v = this.#limitBases.get(key);
    if (v === undefined) {
      v = await x.limitGet(limit);
      this.live(x);
      if (!this.#limitBases.has(key)) this.#limitBases.set(key, v);
    }
    return this.#limitBases.get(key)!;
  }

  /**
   * cudaDeviceSetLimit: the device memory a limit's value reserves beyond
   * the default of device's context (`extra`) replaces what the limit
   * counted there before. Returns the undo for a call that then fails.
   */
  chargeLimit(limit: number, extra: bigint, device = this.device): () => void {
    const key = `${device}:${limit}`;
    const before = this.#limitCharges.get(key) ?? 0n;
    const epoch = this.#epoch;
    if (extra > before) this.#memory.take(extra - before);
    else this.#memory.give(before - extra);
    this.#limitCharges.set(key, extra);
    return () => {
      if (epoch !== this.#epoch) return;
      if (extra > before) this.#memory.give(extra - before);
      else this.#memory.take(before - extra);
      this.#limitCharges.set(key, before);
    };
  }

  // ---- the context's local memory (local-memory.ts) ----

  /** x's context's per-thread local memory (its default stack asked of x once); the ring server is told it. */
  async localMemory(x: ProviderContext): Promise<LocalMemory> {
    const device = this.deviceOfContext(x) ?? this.device;
    const base = await this.limitBase(x, Limit.StackSize);
    let l = this.#local.get(device);
    if (!l) {
      l = new LocalMemory(base, residentThreads(this.provider.deviceProps(device).attrs));
      this.#local.set(device, l);
      this.mirror?.localMemory(l.perThread);
    }
    return l;
  }

  /**
   * Counts device's context's local memory as next (the stack limit's and
   * launched kernels' one charge); throws past the quota, counting nothing.
   * Returns the undo for a call that then fails.
   */
  setLocalMemory(next: LocalMemory, device = this.device): () => void {
    const before = this.#local.get(device);
    const undo = this.chargeLimit(Limit.StackSize, next.bytes, device);
    const epoch = this.#epoch;
    this.#local.set(device, next);
    this.mirror?.localMemory(next.perThread);
    return () => {
      if (epoch !== this.#epoch) return;
      undo();
      if (before) this.#local.set(device, before);
      else this.#local.delete(device);
      this.mirror?.localMemory(before?.perThread ?? 0n);
    };
  }

  /**
   * A launch, on the current device's context, of a kernel needing local
   * bytes per thread: where that is more than the context holds, the driver
   * grows the reservation at the launch for every resident thread and keeps
   * it, so the growth is counted now, before the launch, and stays counted
   * (whatever the launch's outcome: the driver may have grown it); past the
   * quota the launch is refused with cudaErrorMemoryAllocation (natively a
   * launch's CUDA_ERROR_OUT_OF_MEMORY). A context whose default stack was
   * never asked for (its kernels are got with FUNC_GET, which asks) counts
   * from 0.
   */
  chargeLocal(local: number): void {
    if (local === 0) return;
    const device = this.device;
    const now = this.#local.get(device) ?? new LocalMemory(0n, residentThreads(this.provider.deviceProps(device).attrs));
    const next = now.afterLaunch(BigInt(local));
    if (!next) return;
    try {
      this.setLocalMemory(next, device);
    } catch (e) {
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `a kernel needing ${local} bytes of local memory a thread makes the driver reserve ${next.bytes - now.bytes} more bytes for the device's ${now.threads} resident threads: ${(e as Error).message}`,
      );
    }
  }

  /**
   * Runs f on the context: at once where it is open, so that the first
   * chunk of a transfer reaches the GPU before the ring's next request is
   * even parsed (an await would let every request taken with it go first),
   * and a call that finished on this thread answers with no promise step.
   * A throw of f stays synchronous (commands' callers take both kinds of
   * failure: the dispatcher, an await).
   */
  withContext<T>(f: (ctx: ProviderContext) => Now<T>, device = this.device): Now<T> {
    const x = this.#contexts.get(device)?.opened;
    if (!x || this.#closed) return this.context(device).then(f);
    return f(x);
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

  /** The current device's context, once open (undefined before, and after a reset or the close). */
  get openedContext(): ProviderContext | undefined {
    return this.#closed ? undefined : this.#contexts.get(this.device)?.opened;
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
    return this.#contexts.size > 0;
  }

  /** How many devices the session has a context on (opening or open). */
  get contextCount(): number {
    return this.#contexts.size;
  }

  /** [ptr, ptr+size) must lie inside one allocation, host mapping or variable of this session, or in its VMM mappings with access. */
  checkRange(ptr: DevPtr, size: bigint, what: string): void {
    if (size === 0n || this.memory.holds(ptr, size) || this.modules.holdsVariable(ptr, size)) return;
    if (this.vmm.accessible(ptr, size)) return;
    throw new CudaError(CudaErr.InvalidValue, `${what}: 0x${ptr.toString(16)}+${size} is not inside memory of this process`);
  }

  // ---- migration (src/qcuda/migration/session-state.ts) ----

  /** What the session's own tables hold, for its state to be saved. */
  tables(): SessionTables {
    const byHandle = <T>(entries: Iterable<[bigint, T]>) =>
      [...entries].map(([h, ref]) => ({ h, ref, device: this.#handleDevices.get(h)! }));
    return {
      next: this.#handles.upcoming,
      contexts: [...this.#contexts].map(([device, d]) => ({ device, ctx: d.ctx, opened: d.opened })),
      streams: byHandle(this.#streams.entries()),
      events: byHandle(this.#events.entries()),
      limitCharges: [...this.#limitCharges],
      limitBases: [...this.#limitBases],
      local: [...this.#local].map(([device, l]) => ({ device, base: l.base, threads: l.threads, stack: l.stack, launched: l.launched })),
      asyncError: this.#asyncError,
    };
  }

  /** Where a restored session's handles come from: each is asked for again (HandleCounter.reuse). */
  get handleCounter(): HandleCounter {
    return this.#handles;
  }

  /** A restored session's limits, local memory and posted work's error, as tables() gave them at its source. */
  restoreTables(t: Pick<SessionTables, 'limitCharges' | 'limitBases' | 'local' | 'asyncError'>): void {
    for (const [k, v] of t.limitBases) this.#limitBases.set(k, v);
    for (const l of t.local) this.setLocalMemory(new LocalMemory(l.base, l.threads, l.stack, l.launched), l.device);
    for (const [k, v] of t.limitCharges) {
      const [device, limit] = k.split(':').map(Number);
      this.chargeLimit(limit, v, device);
    }
    if (t.asyncError !== 0) this.noteAsyncError(t.asyncError);
  }

  // ---- handles ----

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
      module: [this.modules.moduleCount, l.processModules],
      object: [this.objects.objectCount, l.processObjects],
      vmm: [this.vmm.count, l.processObjects],
    }[kind];
    if (held >= bound) throw new CudaError(CudaErr.MemoryAllocation, `${bound} ${kind}s held by this process at once (its bound)`);
  }

  addStream(x: ProviderContext, s: StreamRef): bigint {
    this.live(x);
    const h = this.#streams.add(s);
    this.#handleDevices.set(h, this.deviceOfContext(x)!);
    return h;
  }

  /**
   * The device a stream or event was made on, whatever device is current
   * now: CUDA runs a stream's work in its own context, and an event records
   * and waits in its own. Undefined for the NULL and per-thread streams
   * (the current device's) and for an unknown handle.
   */
  deviceOfHandle(h: bigint): number | undefined {
    return this.#handleDevices.get(h);
  }

  /** The stream behind a handle; undefined for the NULL / per-thread stream. */
  stream(h: bigint): StreamRef | undefined {
    if (h === QCUDA_STREAM_LEGACY || h === QCUDA_STREAM_PER_THREAD) return undefined;
    return this.#streams.get(h);
  }

  takeStream(h: bigint): StreamRef {
    const s = this.stream(h);
    if (s === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, 'the NULL stream cannot be destroyed');
    this.#streams.remove(h);
    this.#handleDevices.delete(h);
    return s;
  }

  addEvent(x: ProviderContext, e: EventRef): bigint {
    this.live(x);
    const h = this.#events.add(e);
    this.#handleDevices.set(h, this.deviceOfContext(x)!);
    return h;
  }

  event(h: bigint): EventRef {
    return this.#events.get(h);
  }

  takeEvent(h: bigint): EventRef {
    const e = this.#events.take(h);
    this.#handleDevices.delete(h);
    void this.vm.ipcEvents.forget(this, h); // its IPC handle names nothing now (nothing of the opener's to wait for)
    return e;
  }

  /** Records physical memory (VMM_CREATE) made on x, whose bytes were reserved: its handle. */
  addVmmAlloc(x: ProviderContext, ref: VmmRef, size: bigint, token?: string): bigint {
    this.live(x);
    const h = this.#handles.next();
    this.vmm.addAlloc(h, ref, size, token);
    return h;
  }

  /** The owner of the allocation imported as h freed it: h and its mappings go, and the provider unmaps and lets go of them (resolves once it has; rejects where it could not). */
  async dropVmmImport(h: bigint): Promise<void> {
    if (this.ownWorker) return this.ownWorker.vmmDrop(h);
    const d = this.vmm.dropAlloc(h);
    const x = d && this.openedContext;
    if (!d || !x) return; // gone with a reset or the exit: the context's end let go of it
    await this.#whileLive(x, async () => {
      for (const m of d.maps) await x.vmmUnmap(m.base, m.size);
      await x.vmmRelease(d.ref);
    });
  }

  /**
   * Runs f, a letting go of memory in x; a failure counts only while x is
   * still the session's context: one reset or closed meanwhile let go of
   * everything with it.
   */
  async #whileLive(x: ProviderContext, f: () => Promise<void>): Promise<void> {
    try {
      await f();
    } catch (e) {
      if (!this.#closed && this.deviceOfContext(x) !== undefined) throw e;
    }
  }

  /**
   * The worker that serves the session on its own queue (delegation.ts):
   * what it opened by IPC, and its VMM allocations and imports, are there;
   * that worker closes, exports and drops them.
   */
  ownWorker: Pick<QueueOwner, 'ipcDrop' | 'vmmExport' | 'vmmDrop' | 'kill' | 'returned'> | undefined;

  /** In the worker that serves the session on its own queue: ends that process (endProcess; the backend serves the ring again). */
  endSelf: (() => void) | undefined;

  /**
   * Ends the process's CUDA at once, as a native process's exit would: its
   * worker is killed (a queue owner's, or each context's), and the driver
   * lets go of everything its contexts held, memory of other processes it
   * opened or imported included. Its later calls fail, as after its
   * worker's death. For an opening of freed memory that it could not close
   * (a context with a sticky fault keeps it until it exits: security
   * review 3, N4); resolves once the process is gone.
   */
  async endProcess(why: string): Promise<void> {
    this.o.log?.(`qcuda: session ${this.id.toString(16)}: ${why}: its CUDA process is ended`);
    if (this.endSelf) return this.endSelf();
    if (this.ownWorker) {
      this.ownWorker.kill();
      await this.ownWorker.returned;
      return;
    }
    const ends = [...this.#contexts.values()].map(async (d) => (await d.ctx.catch(() => undefined))?.destroy('exit'));
    await Promise.all(ends);
  }

  /** A POSIX fd of this session's allocation `handle` (ref in its context on device), the caller's to hand on or close. */
  async vmmExportFd(handle: bigint, ref: VmmRef, device: number): Promise<Fd> {
    if (this.ownWorker) return this.ownWorker.vmmExport(handle, device);
    if (!this.provider.vmmExportFd)
      throw new CudaError(CudaErr.NotSupported, `shareable memory handles: the ${this.provider.name} provider exports no fds`);
    return this.provider.vmmExportFd(await this.context(device), ref);
  }

  /**
   * e's memory imported into x, this session's context: from the owner's
   * context where the provider holds both (the emu provider; a worker per
   * session), else as a POSIX fd of it from the owner's worker.
   */
  async importVmm(e: VmmShare<Session>, x: ProviderContext): Promise<VmmRef> {
    const p = this.provider;
    if (p.vmmImport && !e.owner.ownWorker) return p.vmmImport(await e.owner.context(e.device), e.ref, x);
    if (!p.vmmImportFd) throw new CudaError(CudaErr.NotSupported, `shareable memory handles: the ${p.name} provider imports no fds`);
    return p.vmmImportFd(x, await e.owner.vmmExportFd(e.handle, e.ref, e.device));
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

  /**
   * Imports whose owner freed them (or reset, or exited) before this process
   * closed them: its cudaIpcCloseMemHandle of one still succeeds, as CUDA's
   * does (NCCL's ranks tear down in any order). At most IPC_DROPPED_KEPT,
   * the oldest forgotten first.
   */
  readonly droppedImports = new Set<DevPtr>();

  /**
   * The owner of memory opened at ptr freed it: it is dropped here, and its
   * close will still succeed. No request of this session reaches it from
   * the first step on (removeImport); resolves once the provider has closed
   * it (served by its own worker: that worker's answer), and rejects where
   * the close failed: CUDA keeps the memory while it is opened, so the
   * owner's quota counts it until then (ipc.ts letGo).
   */
  async dropImport(ptr: DevPtr): Promise<void> {
    this.droppedImports.add(ptr);
    if (this.droppedImports.size > IPC_DROPPED_KEPT) this.droppedImports.delete(this.droppedImports.values().next().value!);
    if (this.ownWorker) return this.ownWorker.ipcDrop(ptr);
    await this.closeImport(ptr);
  }

  /** Forgets another session's memory opened at ptr (IPC_OPEN) and has the provider drop it. */
  async closeImport(ptr: DevPtr): Promise<void> {
    if (this.ownWorker) return this.ownWorker.ipcDrop(ptr);
    const device = this.memory.deviceOf(ptr, 1n);
    if (!this.memory.removeImport(ptr) || device === undefined) return;
    const x = this.#closed ? undefined : await this.#contexts.get(device)?.opened;
    if (x) await this.#whileLive(x, async () => this.provider.ipcClose?.(x, ptr));
  }

  /** Frees everything (cudaDeviceReset): the context goes with it. */
  reset(): Promise<void> {
    this.callbacks.reset();
    this.l2SetAside = 0n;
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
    const contexts = [...this.#contexts.values()];
    this.#contexts.clear();
    this.#epoch++;
    this.mirror?.clear();
    this.memory.clear();
    this.#streams.clear();
    this.#events.clear();
    this.#handleDevices.clear();
    this.objects.clear(); // the context's destruction frees them
    this.modules.clear(); // the context's destruction unloads them
    this.vmm.clear(); // the context's end frees it (the addon's teardown; the emu provider's destroy)
    this.#limitCharges.clear();
    this.#limitBases.clear();
    this.#local.clear();
    this.peers.clear();
    const eventsGone = this.vm.ipcEvents.forgetSession(this);
    const sharesGone = this.vm.vmmShares.forgetSession(this); // importers of its memory lose it
    // Others' openings of its memory end with it, before the reset or exit is answered.
    const openingsGone = this.vm.ipc.forgetSession(this);
    // Everything but the overhead of contexts still there, which goes when each context does (#giveSlot);
    // given back once other processes have let go of what they opened or imported of it (CUDA keeps it
    // while they have it: ipc.ts letGo), and counted until then. What the session takes meanwhile is
    // its next context's, not given here.
    const held = this.#memory.held;
    const old = held > this.#overheads ? held - this.#overheads : 0n;
    try {
      await Promise.all([eventsGone, sharesGone, openingsGone, ...contexts.map((d) => this.#end(d, why))]);
    } finally {
      this.#memory.give(old);
    }
  }

  /** Destroys one of the session's contexts (#free took it out). */
  async #end({ ctx, slot }: DeviceContext, why: 'reset' | 'exit'): Promise<void> {
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
