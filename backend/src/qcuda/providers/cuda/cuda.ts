// The `cuda` provider: one host GPU through the CUDA driver API (the
// qcuda_cuda addon, which dlopens libcuda.so.1).
//
// - The guest sees the host GPUs chosen at creation (--gpu=0,1), in that
//   order: guest device i is the i-th listed GPU, its properties that GPU's.
//   A session's contexts on two of them live in one process, so a copy
//   between them (copyPeer) goes device to device (docs/multi-gpu.md).
// - Each guest session gets a context of its own (cuCtxCreate), as each native
//   process does: its allocations, streams and events are its own and go with
//   it at destroy(), and a sticky fault (an illegal address in a kernel) kills
//   only that session's context, never the others'.
// - The provider itself holds the first GPU's primary context, for what is
//   not a session's: registering guest RAM (PORTABLE, so every context of
//   every device sees it as pinned; DEVICEMAP, for hostDevicePointer).
// - Stream and event refs are the addon's per-context ids (numbers); undefined
//   is the legacy NULL stream.
// - Device printf/assert output: the provider captures the process's stdout
//   and stderr and hands what kernels print to the sessions' output sinks at
//   the flush points, before their replies (cuda-output.ts says how output
//   is attributed to sessions).
import createDebug from 'debug';
import { CudaErr, CudaError } from '../../cuda-error';
import {
  defineContextCalls,
  type ContextCalls,
  type DevPtr,
  type DeviceProps,
  type Dim3,
  type EventRef,
  type FunctionInfo,
  type FunctionRef,
  type GuestSeg,
  type HostPiece,
  type LaunchDesc,
  type ModuleRef,
  type OutputSink,
  type Provider,
  type ProviderContext,
  type StreamRef,
  type ArrayDesc,
  type ArrayRef,
  type MipmapRef,
  type Extent,
  type HostBlock,
  type Place,
  type Pos,
  type TexDesc,
  type TexResource,
  type GraphExecRef,
  type GraphRef,
  type GraphSpec,
  type VmmRef,
  type VmmFdContext,
  type LinkInput,
  type LinkResult,
} from '../../provider';
import type { HandleKind } from '../../wire/protocol';
import { cudaNative, packDim3, packSegs, type CudaContextNative, type CudaNative } from './native-cuda';
import { deviceOutput, type OutputSource } from './cuda-output';
import { graphRecords } from './graph-records';
import { packLaunches, type LaunchIds } from './launch-record';
import { native as sys, type Mapping } from '../../../sys/native';
import { Fd } from '../../../sys/fd';
import type { GuestMemorySource } from '../../provider';
import type { BusyPoll } from '../../../sys/busy-poll';
import { later, type Now } from '../../../sys/now';
import { MAX_SAFE_BIG } from '../../../sys/numbers';

const debug = createDebug('qcuda:cuda');

let factorySet = false;

function addon(): CudaNative {
  const n = cudaNative();
  if (!factorySet) {
    n.setErrorFactory((code, message) => new CudaError(code, message));
    factorySet = true;
  }
  return n;
}

/** The most waiter threads (blocking waits) the addon may run in this process (VmLimits.waiterThreads). */
export function setWaiterThreads(n: number): void {
  addon().setWaiterLimit(n);
}

/** How long a wait run on this process's JS thread polls before going to a waiter thread (ProviderSetup.inlineWaitUs). */
export function setInlineWait(us: number): void {
  addon().setInlineWait(us);
}

/** Whether ordered calls run on this process's JS thread when the context thread is idle (ProviderSetup.inlineCalls). */
export function setInlineCalls(on: boolean): void {
  addon().setInlineCalls(on);
}

/** Whether the cuda provider can run here, and if not why (for --provider auto). Runs cuInit once: can take a second. */
export function cudaAvailable(): { ok: boolean; reason: string } {
  const p = addon().probe();
  return { ok: p.ok, reason: p.ok ? `${p.deviceCount} CUDA device(s), driver ${p.driverVersion}` : p.reason };
}

export interface CudaProviderOptions {
  /** Flags for each session's cuCtxCreate (CU_CTX_*; the runtime's cudaDeviceSchedule* values). Default: MAP_HOST, scheduling auto. */
  contextFlags?: number;
  /** Capture device printf/assert output for the sessions (cuda-output.ts). Default false: only a backend process should take over its stdout and stderr. */
  captureOutput?: boolean;
  /**
   * Register all of guest RAM for the device (default true): copies from
   * anywhere in it run at pinned speed, but every kernel of this process can
   * then reach all of it (registered host memory is mapped for the device
   * whatever the flags, measured on the H200). False where guest kernels run
   * beside other guest processes' memory: only what a session maps (HOST_MAP)
   * is registered, through its alias, and other copies are pageable ones.
   */
  pinGuestRam?: boolean;
}

interface Region {
  size: bigint;
  /** Settles when registration is over; true if the range is registered. */
  done: Promise<boolean>;
  /** A dup of the region's file and where the region starts in it (for HOST_MAP's aliases). */
  fd?: Fd;
  fileOffset: bigint;
}

/**
 * Mapped host memory (HOST_MAP) as a kernel sees it: a second mapping of
 * just those guest pages, at a random address, registered for the device.
 * Registered guest RAM can be read by any kernel of the process through its
 * host address whatever the registration flags (measured on the H100), so a
 * device pointer that were an address inside the guest RAM mapping would
 * tell a guest where all of guest RAM lies (its kernel memory, the other
 * processes' pages). The alias tells it nothing: it lies elsewhere, at an
 * address unrelated to the mapping's.
 */
interface Alias {
  mapping: Mapping;
  /** Where the registered alias starts (the mapping's address). */
  base: bigint;
  /** Its pieces of guest RAM, once registered (copies from them use the alias). */
  given?: GivenPiece[];
}

/** A piece of guest RAM at its place in a registered alias (copies from the piece go there). */
interface GivenPiece {
  addr: bigint;
  size: bigint;
  alias: bigint;
}

/** Where each piece lies in the alias made of them, in order, from `base` (+ the first piece's offset in its page). */
function givenPieces(pieces: readonly HostPiece[], base: bigint): GivenPiece[] {
  let at = base + (pieces[0].addr % BigInt(sys.pageSize));
  return pieces.map((p) => {
    const g = { addr: p.addr, size: p.size, alias: at };
    at += p.size;
    return g;
  });
}

function streamId(s: StreamRef | undefined): number {
  if (s === undefined || s === null) return 0;
  if (typeof s === 'number' && Number.isInteger(s) && s > 0) return s;
  throw new CudaError(CudaErr.InvalidResourceHandle, `not a cuda provider stream: ${String(s)}`);
}

function eventId(e: EventRef): number {
  if (typeof e === 'number' && Number.isInteger(e) && e > 0) return e;
  throw new CudaError(CudaErr.InvalidResourceHandle, `not a cuda provider event: ${String(e)}`);
}

/** Module and function refs are addon ids too. */
function handleId(x: unknown, what: string): number {
  if (typeof x === 'number' && Number.isInteger(x) && x > 0) return x;
  throw new CudaError(CudaErr.InvalidResourceHandle, `not a cuda provider ${what}: ${String(x)}`);
}

/** A Place and position as a copy3D record's 7 fields. */
function sideFields(p: Place, pos: Pos): bigint[] {
  if ('array' in p) return [1n, BigInt(handleId(p.array, 'array')), 0n, 0n, pos.x, pos.y, pos.z];
  return [0n, p.ptr, p.pitch, p.rows, pos.x, pos.y, pos.z];
}

/** copy3D records of host blocks: the host side an offset in the staging buffer (the chunk). */
function blockRecords(place: Place, blocks: readonly HostBlock[], toDevice: boolean): BigUint64Array {
  const out = new BigUint64Array(blocks.length * 17);
  blocks.forEach((b, i) => {
    const host = [2n, b.off, b.pitch, b.rows, 0n, 0n, 0n];
    const dev = sideFields(place, b.pos);
    out.set([...(toDevice ? host : dev), ...(toDevice ? dev : host), b.extent.width, b.extent.height, b.extent.depth], i * 17);
  });
  return out;
}

/** launchMany's ids (launch-record.ts packs the records). */
const LAUNCH_IDS: LaunchIds = { func: (f) => handleId(f, 'function'), stream: streamId };

// The calls a context answers one to one are the addon's methods of the same
// names (defined after the class), with handles as the addon's ids.
interface CudaSessionContext extends ContextCalls {}

/** The cuda provider's side of a session context, for the ring server (ring-server.ts); undefined for another provider's. */
export function cudaSide(x: ProviderContext): CudaSessionContext | undefined {
  return x instanceof CudaSessionContext ? x : undefined;
}

class CudaSessionContext implements ProviderContext, VmmFdContext, OutputSource {
  #dead = false;
  #launched = false;
  /** HOST_MAP aliases, by the device pointer handed out. */
  readonly #aliases = new Map<bigint, Alias>();

  constructor(
    readonly native: CudaContextNative,
    readonly provider: CudaProvider,
    readonly output: OutputSink | undefined,
  ) {}

  get launched(): boolean {
    return this.#launched;
  }

  /** call ends at a point where CUDA flushes device output: hand it to the session before the reply goes back. */
  flushing<T>(call: () => Promise<T>): Promise<T>;
  flushing<T>(call: () => Now<T>): Now<T>;
  flushing<T>(call: () => Now<T>): Now<T> {
    // Only a context that has launched can have printed (deviceOutput.drain): no step more for the others.
    if (!this.#launched) return call();
    let p: Now<T>;
    try {
      p = call();
    } catch (e) {
      deviceOutput.drain(this);
      throw e;
    }
    if (!later(p)) {
      deviceOutput.drain(this);
      return p;
    }
    // then, not finally: finally takes two promise steps more, on every synchronize and blocking copy.
    return p.then(
      (v) => {
        deviceOutput.drain(this);
        return v;
      },
      (e: unknown) => {
        deviceOutput.drain(this);
        throw e;
      },
    );
  }

  /** A kernel goes in: output from nowhere in particular is now likely this context's. */
  #launching(): void {
    this.#launched = true;
    deviceOutput.launched(this);
  }

  /** A kernel went in by the ring server (ring-server.ts), which launches without this object. */
  noteLaunched(): void {
    this.#launching();
  }

  /** The ring server answered at a flush point: the session gets what CUDA printed before the reply goes out. */
  drainOutput(): void {
    deviceOutput.drain(this);
  }

  malloc(size: bigint): Promise<DevPtr> {
    return this.native.malloc(size);
  }
  free(ptr: DevPtr): Promise<void> {
    return this.native.free(ptr);
  }
  copyToDevice(dst: DevPtr, src: GuestSeg[], stream: StreamRef | undefined): Now<void> {
    return this.flushing(() => this.native.copyHtoD(dst, packSegs(src), streamId(stream)));
  }
  copyFromDevice(dst: GuestSeg[], src: DevPtr, stream: StreamRef | undefined): Now<void> {
    return this.flushing(() => this.native.copyDtoH(packSegs(dst), src, streamId(stream)));
  }
  copyOnDevice(dst: DevPtr, src: DevPtr, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void> {
    const copy = () => this.native.copyDtoD(dst, src, size, streamId(stream), !async);
    return async ? copy() : this.flushing(copy);
  }
  memset(dst: DevPtr, value: number, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void> {
    return this.native.memset(dst, value & 0xff, size, streamId(stream), !async);
  }
  synchronize(): Now<void> {
    return this.flushing(() => this.native.synchronize());
  }
  copy3DOnDevice(
    dst: Place,
    dstPos: Pos,
    src: Place,
    srcPos: Pos,
    e: Extent,
    stream: StreamRef | undefined,
    async: boolean,
  ): Promise<void> {
    const rec = BigUint64Array.from([...sideFields(src, srcPos), ...sideFields(dst, dstPos), e.width, e.height, e.depth]);
    return this.native.copy3D(rec, null, false, streamId(stream), !async);
  }
  copy3DToDevice(dst: Place, src: GuestSeg[], blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void> {
    return this.flushing(() => this.native.copy3D(blockRecords(dst, blocks, true), src, true, streamId(stream), true));
  }
  copy3DFromDevice(dst: GuestSeg[], src: Place, blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void> {
    return this.flushing(() => this.native.copy3D(blockRecords(src, blocks, false), dst, false, streamId(stream), true));
  }
  memset2D(
    dst: DevPtr,
    pitch: bigint,
    value: number,
    width: bigint,
    height: bigint,
    stream: StreamRef | undefined,
    async: boolean,
  ): Promise<void> {
    return this.native.memset2D(dst, pitch, value & 0xff, width, height, streamId(stream), !async);
  }
  vmmReserve(size: bigint, alignment: bigint, hint: DevPtr): Promise<DevPtr> {
    return this.native.vmmReserve(size, alignment, hint);
  }
  vmmFree(ptr: DevPtr, size: bigint): Promise<void> {
    return this.native.vmmFree(ptr, size);
  }
  vmmCreate(size: bigint): Promise<VmmRef> {
    return this.native.vmmCreate(size);
  }
  vmmRelease(m: VmmRef): Promise<void> {
    return this.native.vmmRelease(handleId(m, 'physical memory'));
  }
  vmmExportFd(m: VmmRef): Promise<number> {
    return this.native.vmmExport(handleId(m, 'physical memory'));
  }
  vmmImportFd(fd: number): Promise<VmmRef> {
    return this.native.vmmImport(fd);
  }
  vmmMap(ptr: DevPtr, size: bigint, m: VmmRef): Promise<void> {
    return this.native.vmmMap(ptr, size, handleId(m, 'physical memory'));
  }
  vmmUnmap(ptr: DevPtr, size: bigint): Promise<void> {
    return this.native.vmmUnmap(ptr, size);
  }
  vmmSetAccess(ptr: DevPtr, size: bigint): Promise<void> {
    return this.native.vmmSetAccess(ptr, size);
  }
  arrayCreate(d: ArrayDesc): Promise<ArrayRef> {
    return this.native.arrayCreate(d.width, d.height, d.depth, d.format, d.channels, d.flags);
  }
  arrayDestroy(a: ArrayRef): Promise<void> {
    return this.native.arrayDestroy(handleId(a, 'array'));
  }
  mipmapCreate(d: ArrayDesc, levels: number): Promise<MipmapRef> {
    return this.native.mipmapCreate(d.width, d.height, d.depth, d.format, d.channels, d.flags, levels);
  }
  mipmapLevel(m: MipmapRef, level: number): Promise<ArrayRef> {
    return this.native.mipmapLevel(handleId(m, 'mipmapped array'), level);
  }
  mipmapDestroy(m: MipmapRef): Promise<void> {
    return this.native.mipmapDestroy(handleId(m, 'mipmapped array'));
  }
  texCreate(r: TexResource, d: TexDesc): Promise<bigint> {
    const res =
      r.kind === 'array'
        ? [0n, BigInt(handleId(r.array, 'array')), 0n, 0n, 0n, 0n, 0n, 0n]
        : r.kind === 'mipmap'
          ? [1n, BigInt(handleId(r.mipmap, 'mipmapped array')), 0n, 0n, 0n, 0n, 0n, 0n]
          : r.kind === 'linear'
            ? [2n, r.ptr, BigInt(r.format), BigInt(r.channels), 0n, 0n, 0n, r.size]
            : [3n, r.ptr, BigInt(r.format), BigInt(r.channels), r.width, r.height, r.pitch, 0n];
    const desc = [
      ...d.addressMode,
      d.filterMode,
      d.flags,
      d.maxAnisotropy,
      d.mipmapFilterMode,
      d.mipmapLevelBias,
      d.minLod,
      d.maxLod,
      ...d.borderColor,
    ].map(BigInt);
    return this.native.texCreate(BigUint64Array.from([...res, ...desc]));
  }
  texDestroy(t: bigint): Promise<void> {
    return this.native.texDestroy(t);
  }
  surfCreate(a: ArrayRef): Promise<bigint> {
    return this.native.surfCreate(handleId(a, 'array'));
  }
  surfDestroy(s: bigint): Promise<void> {
    return this.native.surfDestroy(s);
  }
  graphCreate(): Promise<GraphRef> {
    return this.native.graphCreate();
  }
  graphDestroy(g: GraphRef): Promise<void> {
    return this.native.graphDestroy(handleId(g, 'graph'));
  }
  graphCondHandle(g: GraphRef, defaultValue: number, flags: number): Promise<bigint> {
    return this.native.graphCondHandle(handleId(g, 'graph'), defaultValue, flags);
  }
  graphInstantiate(g: GraphRef, spec: GraphSpec): Promise<GraphExecRef> {
    const { records, params } = graphRecords(spec, { func: (f) => handleId(f, 'function'), event: eventId });
    return this.native.graphInstantiate(handleId(g, 'graph'), records, spec.edges, params);
  }
  graphExecDestroy(x: GraphExecRef): Promise<void> {
    return this.native.graphExecDestroy(handleId(x, 'executable graph'));
  }
  graphLaunch(x: GraphExecRef, stream: StreamRef | undefined): Promise<void> {
    this.#launching(); // its kernel nodes may print
    return this.native.graphLaunch(handleId(x, 'executable graph'), streamId(stream));
  }
  eventElapsed(start: EventRef, end: EventRef): Promise<number> {
    return this.native.eventElapsed(eventId(start), eventId(end));
  }
  async moduleLoad(image: Uint8Array): Promise<{ ref: ModuleRef; bytes: bigint }> {
    const m = await this.flushing(() => this.native.moduleLoad(image));
    return { ref: m.id, bytes: m.bytes };
  }
  async link(inputs: readonly LinkInput[], options: readonly (readonly [number, number])[]): Promise<LinkResult> {
    return unpackLink(await this.native.link(inputs, options));
  }
  moduleUnload(m: ModuleRef): Promise<void> {
    return this.flushing(() => this.native.moduleUnload(handleId(m, 'module')));
  }
  async functionGet(m: ModuleRef, name: string, maxParams: number): Promise<FunctionInfo> {
    const f = await this.native.functionGet(handleId(m, 'module'), name, maxParams);
    const paramBytes = f.params.reduce((n, p) => Math.max(n, p.offset + p.size), 0);
    return { ref: f.id, params: f.params, paramBytes, localBytes: f.localBytes };
  }
  variableGet(m: ModuleRef, name: string): Promise<{ dptr: DevPtr; size: bigint }> {
    return this.native.variableGet(handleId(m, 'module'), name);
  }
  funcGetAttributes(f: FunctionRef): Promise<Int32Array> {
    return this.native.funcGetAttributes(handleId(f, 'function'));
  }
  funcSetAttribute(f: FunctionRef, attr: number, value: number): Promise<void> {
    return this.native.funcSetAttribute(handleId(f, 'function'), attr, value);
  }
  occupancyBlocks(f: FunctionRef, blockSize: number, dynamicSmem: bigint, flags: number): Promise<number> {
    return this.native.occupancyBlocks(handleId(f, 'function'), blockSize, dynamicSmem, flags);
  }
  occupancySmem(f: FunctionRef, numBlocks: number, blockSize: number): Promise<bigint> {
    return this.native.occupancySmem(handleId(f, 'function'), numBlocks, blockSize);
  }

  tensorMapEncode(args: Uint8Array): Promise<Uint8Array> {
    return this.native.tensorMapEncode(args);
  }
  limitSet(limit: number, value: bigint): Promise<void> {
    return this.native.limitSet(limit, value);
  }
  limitGet(limit: number): Promise<bigint> {
    return this.native.limitGet(limit);
  }
  streamSetAttribute(s: StreamRef | undefined, attr: number, value: Uint8Array): Promise<void> {
    return this.native.streamSetAttribute(streamId(s), attr, value);
  }
  streamGetAttribute(s: StreamRef | undefined, attr: number): Promise<Uint8Array> {
    return this.native.streamGetAttribute(streamId(s), attr);
  }
  launchCooperative(
    f: FunctionRef,
    grid: Dim3,
    block: Dim3,
    sharedMem: number,
    stream: StreamRef | undefined,
    params: Uint8Array,
  ): Promise<void> {
    this.#launching();
    return this.native.launchCooperative(
      handleId(f, 'function'),
      packDim3(0, grid),
      packDim3(1, block),
      sharedMem,
      streamId(stream),
      params,
    );
  }
  launchEx(
    f: FunctionRef,
    grid: Dim3,
    block: Dim3,
    sharedMem: number,
    stream: StreamRef | undefined,
    params: Uint8Array,
    cluster: Dim3,
    cooperative: boolean,
  ): Promise<void> {
    this.#launching();
    return this.native.launchEx(
      handleId(f, 'function'),
      packDim3(0, grid),
      packDim3(1, block),
      sharedMem,
      streamId(stream),
      params,
      [...cluster],
      cooperative,
    );
  }
  launch(f: FunctionRef, grid: Dim3, block: Dim3, sharedMem: number, stream: StreamRef | undefined, params: Uint8Array): Now<void> {
    this.#launching();
    return this.native.launch(handleId(f, 'function'), packDim3(0, grid), packDim3(1, block), sharedMem, streamId(stream), params);
  }
  launchMany(list: readonly LaunchDesc[]): Now<void> {
    if (list.length > 0) this.#launching();
    return this.native.launchMany(packLaunches(list, LAUNCH_IDS), list.length);
  }
  /**
   * Maps the pieces for the device: an alias of their pages, registered.
   * Whatever fails or finds the context destroyed meanwhile drops the alias
   * (security review 2, L4): nothing else would.
   */
  async hostDevicePointer(pieces: readonly HostPiece[]): Promise<DevPtr> {
    for (const { addr, size } of pieces)
      if (!(await this.provider.isGuestMemory(addr, size)))
        throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not guest memory`);
    const addr = pieces[0].addr;
    const a: Alias = pieces.length === 1 ? this.provider.alias(addr, pieces[0].size) : this.provider.aliasPieces(pieces);
    let registered = false;
    try {
      await this.native.hostRegister(a.base, BigInt(a.mapping.length), this.provider.registerFlags);
      registered = true;
      const ptr = (await this.native.hostDevicePointer(a.base)) + (addr % BigInt(sys.pageSize));
      if (this.#dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'hostDevicePointer: the context was destroyed meanwhile');
      a.given = givenPieces(pieces, a.base);
      this.provider.give(a.given);
      this.#aliases.set(ptr, a);
      return ptr;
    } catch (e) {
      if (registered) await this.native.hostUnregister(a.base).catch(() => undefined);
      a.mapping.unmap();
      throw e;
    }
  }

  ipcMemExport(ptr: DevPtr): Promise<Uint8Array> {
    return this.native.ipcMemExport(ptr);
  }
  ipcMemOpen(handle: Uint8Array): Promise<DevPtr> {
    return this.native.ipcMemOpen(handle);
  }
  ipcMemClose(ptr: DevPtr): Promise<void> {
    return this.native.ipcMemClose(ptr);
  }
  ipcEventExport(e: EventRef): Promise<Uint8Array> {
    return this.native.ipcEventExport(eventId(e));
  }
  ipcEventOpen(handle: Uint8Array): Promise<EventRef> {
    return this.native.ipcEventOpen(handle);
  }

  async hostUnmap(ptr: DevPtr): Promise<void> {
    const a = this.#aliases.get(ptr);
    if (!a) return;
    this.#aliases.delete(ptr);
    await this.#dropAlias(a);
  }

  async #dropAlias(a: Alias): Promise<void> {
    this.provider.ungive(a.given ?? []);
    try {
      await this.native.hostUnregister(a.base);
    } finally {
      a.mapping.unmap();
    }
  }
  async destroy(_why?: 'reset' | 'exit'): Promise<void> {
    if (this.#dead) return;
    this.#dead = true;
    this.provider.forget(this);
    const aliases = [...this.#aliases.values()];
    this.#aliases.clear();
    await Promise.allSettled(aliases.map((a) => this.#dropAlias(a)));
    try {
      await this.native.destroy(); // destroying a context flushes its device output too
    } finally {
      deviceOutput.drain(this);
      deviceOutput.forget(this);
    }
  }
}

/** An argument of a one-to-one call as the addon takes it: handles as ids (0: the legacy NULL stream). */
function nativeArg(kind: HandleKind | undefined, a: unknown): unknown {
  if (kind === undefined) return a;
  return kind === 'stream' ? streamId(a) : kind === 'event' ? eventId(a) : handleId(a, kind);
}

// A synchronizing call ends at a point where CUDA flushes device output.
defineContextCalls(CudaSessionContext, (x, call, args) => {
  const method = x.native[call.method] as (...a: unknown[]) => Now<unknown>;
  const run = () =>
    method.apply(
      x.native,
      args.map((a, i) => nativeArg(call.kinds[i], a)),
    );
  return call.decl.syncs ? x.flushing(run) : run();
});

export class CudaProvider implements Provider {
  readonly name = 'cuda' as const;
  readonly hasGpu = true;
  readonly #n: CudaNative;
  /** Each listed GPU's properties, read at creation (guest device i: gpus[i]). */
  readonly #props: DeviceProps[];
  readonly #driverVersion: number;
  readonly #contexts = new Set<CudaSessionContext>();
  readonly #regions = new Map<bigint, Region>();
  readonly #contextFlags: number;
  readonly #capturing: boolean;
  readonly #pinGuestRam: boolean;
  #closed = false;

  constructor(
    n: CudaNative,
    readonly gpus: readonly number[],
    readonly primary: CudaContextNative,
    o: CudaProviderOptions,
  ) {
    this.#n = n;
    this.#props = gpus.map((g) => {
      const p = n.deviceProps(g);
      return { name: p.name, uuid: p.uuid, totalMem: p.totalMem, attrs: p.attrs };
    });
    this.#driverVersion = n.probe().driverVersion;
    this.#contextFlags = o.contextFlags ?? n.CTX_MAP_HOST;
    this.#pinGuestRam = o.pinGuestRam ?? true;
    this.#capturing = (o.captureOutput ?? false) && deviceOutput.acquire(n); // last: nothing after it may throw
  }

  deviceCount(): number {
    return this.gpus.length;
  }

  driverVersion(): number {
    return this.#driverVersion;
  }

  /** The host GPU of guest device `device`. */
  gpuOf(device: number): number {
    if (!Number.isInteger(device) || device < 0 || device >= this.gpus.length)
      throw new CudaError(CudaErr.InvalidDevice, `no device ${device} (the cuda provider exposes ${this.gpus.length})`);
    return this.gpus[device];
  }

  deviceProps(device: number): DeviceProps {
    const p = this.#props[device];
    if (!p) this.gpuOf(device);
    return { name: p.name, uuid: p.uuid.slice(), totalMem: p.totalMem, attrs: p.attrs.slice() };
  }

  async openContext(device: number, output?: OutputSink): Promise<ProviderContext> {
    const gpu = this.gpuOf(device);
    if (this.#closed) throw new CudaError(CudaErr.InitializationError, 'the cuda provider is closed');
    const native = await this.#n.openContext(gpu, this.#contextFlags, false);
    const c = new CudaSessionContext(native, this, output);
    this.#contexts.add(c);
    return c;
  }

  /**
   * A copy from src's device to dst's, both contexts of this process: the
   * driver moves it device to device (cuMemcpyPeer, on dst's context thread),
   * ordered after what both contexts were given before.
   */
  copyPeer(dst: ProviderContext, dstPtr: DevPtr, src: ProviderContext, srcPtr: DevPtr, size: bigint): Promise<void> {
    const [x, y] = [cudaSide(dst), cudaSide(src)];
    if (!x || !y) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'copyPeer: not contexts of the cuda provider'));
    return x.native.copyPeer(y.native, dstPtr, srcPtr, size);
  }

  /** Whether guest device `device` can reach `peer`'s memory (cuDeviceCanAccessPeer between their GPUs): 0 or 1. */
  canAccessPeer(device: number, peer: number): number {
    const [a, b] = [this.gpuOf(device), this.gpuOf(peer)];
    return a === b ? 0 : this.#n.canAccessPeer(a, b);
  }

  /** cuDeviceGetP2PAttribute between two guest devices' GPUs. */
  p2pAttribute(attr: number, src: number, dst: number): number {
    return this.#n.p2pAttribute(attr, this.gpuOf(src), this.gpuOf(dst));
  }

  /** cuCtxEnablePeerAccess on ctx's thread for peer's context. */
  enablePeerAccess(ctx: ProviderContext, peer: ProviderContext): Promise<void> {
    const [x, y] = [cudaSide(ctx), cudaSide(peer)];
    if (!x || !y)
      return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'enablePeerAccess: not contexts of the cuda provider'));
    return x.native.enablePeerAccess(y.native);
  }

  disablePeerAccess(ctx: ProviderContext, peer: ProviderContext): Promise<void> {
    const [x, y] = [cudaSide(ctx), cudaSide(peer)];
    if (!x || !y)
      return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'disablePeerAccess: not contexts of the cuda provider'));
    return x.native.disablePeerAccess(y.native);
  }

  /**
   * Page-locks guest RAM (PORTABLE | DEVICEMAP) on the primary context's thread,
   * unless pinGuestRam is off: then only keeps what HOST_MAP's aliases need.
   * Returns a promise that never rejects (a failure only costs speed: copies
   * then go through the driver's staging buffers); await it where it matters.
   */
  registerGuestMemory(addr: bigint, size: bigint, source?: GuestMemorySource): Promise<void> {
    const flags = this.registerFlags;
    const prev = this.#regions.get(addr)?.done ?? Promise.resolve(false);
    const fd = source ? new Fd(sys.dup(source.fd)) : undefined;
    const done = !this.#pinGuestRam
      ? prev.then(() => false)
      : prev.then(() =>
          this.primary.hostRegister(addr, size, flags).then(
            () => true,
            (e: Error) => {
              debug('cuMemHostRegister 0x%s+%s failed: %s', addr.toString(16), size, e.message);
              return false;
            },
          ),
        );
    this.#regions.get(addr)?.fd?.close();
    this.#regions.set(addr, { size, done, fd, fileOffset: source?.region.mmapOffset ?? 0n });
    return done.then(() => undefined);
  }

  /** How guest RAM and HOST_MAP aliases are registered: pinned for every context, mapped for the device. */
  get registerFlags(): number {
    return this.#n.HOST_REGISTER_PORTABLE | this.#n.HOST_REGISTER_DEVICEMAP;
  }

  /** Where a piece of guest RAM lies in its region's file: [fd, offset, length] (whole pages). */
  #filePiece(addr: bigint, size: bigint): [number, number, number] {
    const page = BigInt(sys.pageSize);
    for (const [start, r] of this.#regions) {
      if (addr < start || addr + size > start + r.size) continue;
      if (!r.fd) throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: the region of 0x${addr.toString(16)} came without its file`);
      const off = r.fileOffset + (addr - start);
      if (off % page !== 0n || size % page !== 0n) break;
      return [r.fd.value, Number(off), Number(size)];
    }
    throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not whole pages of guest memory`);
  }

  /** Scattered guest pages as one new mapping, in order, at a random address (see Alias). */
  aliasPieces(pieces: readonly HostPiece[]): Alias {
    const mapping = new sys.Mapping(pieces.map((p) => this.#filePiece(p.addr, p.size)));
    return { mapping, base: mapping.address };
  }

  /** A new mapping of the guest pages holding [addr, addr+size), at a random address (see Alias). */
  alias(addr: bigint, size: bigint): Alias {
    const page = BigInt(sys.pageSize);
    for (const [start, r] of this.#regions) {
      if (addr < start || addr + size > start + r.size) continue;
      if (!r.fd) throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: the region of 0x${addr.toString(16)} came without its file`);
      const first = r.fileOffset + (addr - start);
      const from = first - (first % page);
      const len = ((first + size + page - 1n) / page) * page - from;
      if (len > MAX_SAFE_BIG) break;
      const mapping = new sys.Mapping(r.fd.value, Number(len), Number(from), true);
      return { mapping, base: mapping.address };
    }
    throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not guest memory`);
  }

  /**
   * Unpins a region registered before. The mapping must stay mapped until the
   * returned promise settles (it never rejects).
   */
  unregisterGuestMemory(addr: bigint): Promise<void> {
    const r = this.#regions.get(addr);
    if (r === undefined) return Promise.resolve();
    this.#regions.delete(addr);
    r.fd?.close();
    return r.done.then(async (ok) => {
      if (!ok) return;
      try {
        await this.primary.hostUnregister(addr);
      } catch (e) {
        debug('cuMemHostUnregister 0x%s failed: %s', addr.toString(16), (e as Error).message);
      }
    });
  }

  /** Whether [addr, addr+size) lies in one registered region (waits for a registration in progress). */
  async isRegistered(addr: bigint, size: bigint): Promise<boolean> {
    for (const [start, r] of this.#regions) {
      if (addr >= start && addr + size <= start + r.size) return r.done;
    }
    return false;
  }

  /** Whether [addr, addr+size) lies in one region of guest RAM (registered, when all of it is, once that is over). */
  async isGuestMemory(addr: bigint, size: bigint): Promise<boolean> {
    for (const [start, r] of this.#regions) {
      if (addr >= start && addr + size <= start + r.size) return this.#pinGuestRam ? r.done : true;
    }
    return false;
  }

  /** Copies from or to these pieces of guest RAM go through their registered alias (addon/src/given.h). */
  give(pieces: readonly GivenPiece[]): void {
    for (const g of pieces) this.#n.giveHost(g.addr, g.size, g.alias);
  }

  ungive(pieces: readonly GivenPiece[]): void {
    for (const g of pieces) this.#n.ungiveHost(g.addr, g.alias);
  }

  forget(c: CudaSessionContext): void {
    this.#contexts.delete(c);
  }

  pollWith(poll: BusyPoll): void {
    // A turn that settled a wait is activity: the window goes on (and its
    // last turn, which then settled something, does not hand the rest on).
    // Quiet (a turn may spin) while no job is in flight: a settle needs the loop.
    poll.keep(
      (expired) => {
        if (this.#n.pollWaits(expired) > 0) poll.touch();
      },
      () => this.#n.pendingJobs() === 0,
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#contexts].map((c) => c.destroy()));
    await Promise.allSettled([...this.#regions.keys()].map((a) => this.unregisterGuestMemory(a)));
    try {
      await this.primary.destroy();
    } finally {
      if (this.#capturing) deviceOutput.release();
    }
  }
}

/**
 * The cuda provider on host GPU `gpu`, or on a list of them (guest device i:
 * the i-th). Rejects with a CudaError saying why where CUDA cannot be used.
 * cuInit and the primary context's creation run on worker threads.
 */
export async function createCudaProvider(gpu: number | readonly number[] = 0, o: CudaProviderOptions = {}): Promise<CudaProvider> {
  const gpus = typeof gpu === 'number' ? [gpu] : [...gpu];
  const n = addon();
  const p = await n.probeAsync();
  if (!p.ok) {
    const code = /no CUDA-capable device/.test(p.reason) ? CudaErr.NoDevice : CudaErr.InitializationError;
    throw new CudaError(code, `CUDA is not available: ${p.reason}`);
  }
  if (gpus.length === 0 || new Set(gpus).size !== gpus.length)
    throw new CudaError(CudaErr.InvalidDevice, `not a list of distinct GPUs: ${gpus.join(',')}`);
  for (const g of gpus) {
    if (!Number.isInteger(g) || g < 0 || g >= p.deviceCount)
      throw new CudaError(CudaErr.InvalidDevice, `no GPU ${g}: this host has ${p.deviceCount}`);
  }
  const primary = await n.openContext(gpus[0], 0, true);
  try {
    return new CudaProvider(n, gpus, primary, o);
  } catch (e) {
    await primary.destroy().catch(() => undefined);
    throw e;
  }
}

/** The addon's link result (native-cuda.ts: link): its header, then the image and the two logs. */
export function unpackLink(b: Uint8Array): LinkResult {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const [status, image, info, error] = [0, 4, 8, 12].map((at) => v.getUint32(at, true));
  if (24 + image + info + error !== b.length)
    throw new CudaError(CudaErr.Unknown, `the addon's link result of ${b.length} bytes does not match its header`);
  const at = (from: number, n: number) => b.slice(from, from + n);
  return {
    status,
    image: at(24, image),
    infoLog: at(24 + image, info),
    errorLog: at(24 + image + info, error),
    wallMs: v.getFloat32(16, true),
  };
}
