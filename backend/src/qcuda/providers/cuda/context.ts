// A session's context on the cuda provider: the addon's context (one CUDA
// context, its own thread) and what the provider adds around it: device
// output attributed to it, HOST_MAP's aliases of guest pages (guest-ram.ts),
// handles checked as the addon's ids, and the calls a context answers one to
// one, defined from their declarations.
import { CudaErr, CudaError } from '../../cuda-error';
import {
  defineContextCalls,
  type ContextCalls,
  type DevPtr,
  type Dim3,
  type EventRef,
  type FunctionInfo,
  type FunctionRef,
  type GuestSeg,
  type HostPiece,
  type LaunchDesc,
  type ModuleRef,
  type OutputSink,
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
import { packDim3, packSegs, type CudaContextNative } from './native-cuda';
import { deviceOutput, type OutputSource } from './cuda-output';
import { graphRecords } from './graph-records';
import { packLaunches, type LaunchIds } from './launch-record';
import { givenPieces, type Alias, type GuestRam } from './guest-ram';
import { native as sys } from '../../../sys/native';
import { later, type Now } from '../../../sys/now';

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
export interface CudaSessionContext extends ContextCalls {}

/** The cuda provider's side of a session context, for the ring server (ring-server.ts); undefined for another provider's. */
export function cudaSide(x: ProviderContext): CudaSessionContext | undefined {
  return x instanceof CudaSessionContext ? x : undefined;
}

export class CudaSessionContext implements ProviderContext, VmmFdContext, OutputSource {
  #dead = false;
  #launched = false;
  /** HOST_MAP aliases, by the device pointer handed out. */
  readonly #aliases = new Map<bigint, Alias>();

  constructor(
    readonly native: CudaContextNative,
    readonly ram: GuestRam,
    readonly output: OutputSink | undefined,
    /** Called once, at destroy(): the provider stops counting the context. */
    private readonly destroyed: (c: CudaSessionContext) => void,
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
      if (!(await this.ram.isGuestMemory(addr, size)))
        throw new CudaError(CudaErr.InvalidValue, `hostDevicePointer: 0x${addr.toString(16)}+${size} is not guest memory`);
    const addr = pieces[0].addr;
    const a: Alias = pieces.length === 1 ? this.ram.alias(addr, pieces[0].size) : this.ram.aliasPieces(pieces);
    let registered = false;
    try {
      await this.native.hostRegister(a.base, BigInt(a.mapping.length), this.ram.registerFlags);
      registered = true;
      const ptr = (await this.native.hostDevicePointer(a.base)) + (addr % BigInt(sys.pageSize));
      if (this.#dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'hostDevicePointer: the context was destroyed meanwhile');
      a.given = givenPieces(pieces, a.base);
      this.ram.give(a.given);
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
    this.ram.ungive(a.given ?? []);
    try {
      await this.native.hostUnregister(a.base);
    } finally {
      a.mapping.unmap();
    }
  }
  async destroy(_why?: 'reset' | 'exit'): Promise<void> {
    if (this.#dead) return;
    this.#dead = true;
    this.destroyed(this);
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
