// What executes CUDA work: a real GPU through the driver API (`cuda`) or
// a CUDA device emulated in host RAM (`emu`). The dispatcher checks every
// pointer, size and handle before a provider sees it; a provider reports
// failures by throwing CudaError.

import type { BusyPoll } from '../vhost-user';
import type { Fd } from '../vhost-user';
import type { Now } from '../sys/now';
import type { MemRegion, RingState } from '../vhost-user';
import { CudaErr, CudaError } from './cuda-error';
import type { VmLimits } from './quota/limits';
import type { ModuleStore } from './modules/module-cache';
import type { IpcAnswerer } from './ipc/ipc-wire';
import type { FieldInput, Fields } from './wire/layout';
import { CALLS, type CallDecl, type CmdName, type HandleKind, type StructName, type STRUCTS } from './wire/protocol';

export type DevPtr = bigint;

/** A piece of guest memory, already checked to lie inside guest RAM. */
export interface GuestSeg {
  /** Host virtual address (for native copies). */
  addr: bigint;
  len: number;
  /** The same bytes as a JS view. */
  view: Uint8Array;
}

/** Guest memory by host address, one piece of a HOST_MAP / HOST_MAP_PAGES range. */
export interface HostPiece {
  addr: bigint;
  size: bigint;
}

export interface DeviceProps {
  name: string;
  uuid: Uint8Array; // 16 bytes
  totalMem: bigint;
  /** Indexed by CUdevice_attribute; QCUDA_NUM_ATTRS entries. */
  attrs: Int32Array;
}

/** Opaque provider objects behind the session's handle ids. */
export type StreamRef = unknown;
export type EventRef = unknown;
export type ModuleRef = unknown;
export type FunctionRef = unknown;
/** A CUDA array (a provider's id: it crosses to a session's worker and back). */
export type ArrayRef = unknown;
/** A mipmapped array (the same). */
export type MipmapRef = unknown;
/** Physical memory of virtual memory management (cuMemCreate; the same). */
export type VmmRef = unknown;

/** A CUDA array's shape, as CUDA_ARRAY3D_DESCRIPTOR (height 0: 1D, depth 0: 2D; checked by the dispatcher). */
export interface ArrayDesc {
  width: bigint;
  height: bigint;
  depth: bigint;
  /** CUarray_format */
  format: number;
  channels: number;
  flags: number;
}

/** A CUDA graph of the context (GRAPH_CREATE: where conditional handles live), and an executable one. */
export type GraphRef = unknown;
export type GraphExecRef = unknown;

/**
 * A node of a graph to instantiate, checked by the dispatcher
 * (commands/graph.ts): every range inside the session's memory, every
 * handle the session's. parent: the index of the conditional node whose
 * body `body` holds it (always lower), or -1 for the graph itself.
 */
export type GraphNodeSpec = { parent: number; body: number } & (
  | { type: 'kernel'; f: FunctionRef; grid: Dim3; block: Dim3; sharedMem: number; params: Uint8Array; cluster: Dim3 }
  /** width bytes x height rows x depth slices; rows pitch apart, slices pitch * rows apart. */
  | {
      type: 'memcpy';
      dst: DevPtr;
      src: DevPtr;
      dstPitch: bigint;
      dstRows: bigint;
      srcPitch: bigint;
      srcRows: bigint;
      width: bigint;
      height: bigint;
      depth: bigint;
    }
  /** width elements of elem (1, 2, 4) bytes x height rows, pitch bytes apart. */
  | { type: 'memset'; dst: DevPtr; pitch: bigint; value: number; elem: number; width: bigint; height: bigint }
  | { type: 'empty' }
  | { type: 'eventRecord' | 'eventWait'; event: EventRef }
  /** condType: cudaGraphCondType (0 if, 1 while, 2 switch); size bodies. */
  | { type: 'cond'; handle: bigint; condType: number; size: number }
);

/** The nodes, and the edges as pairs (from, to) of node indices, from < to, in one body. */
export interface GraphSpec {
  nodes: GraphNodeSpec[];
  edges: Uint32Array;
}

/** Where one side of a 2D/3D copy lies on the device: linear memory (rows pitch bytes apart, slices pitch * rows apart) or an array. */
export type Place = { array: ArrayRef } | { ptr: DevPtr; pitch: bigint; rows: bigint };
/** A position in a Place: x in bytes. */
export interface Pos {
  x: bigint;
  y: bigint;
  z: bigint;
}
/** width bytes x height rows x depth slices. */
export interface Extent {
  width: bigint;
  height: bigint;
  depth: bigint;
}
/**
 * A box of a 2D/3D copy between guest memory (the chunk's segments) and a
 * Place, checked by the dispatcher: its first byte lies `off` bytes into the
 * chunk, its rows pitch bytes apart and its slices pitch * rows apart, all
 * inside the chunk; on the device side it starts at pos.
 */
export interface HostBlock {
  off: bigint;
  pitch: bigint;
  rows: bigint;
  pos: Pos;
  extent: Extent;
}

/** A texture object's resource, resolved from the session's handles and checked. */
export type TexResource =
  | { kind: 'array'; array: ArrayRef }
  | { kind: 'mipmap'; mipmap: MipmapRef }
  | { kind: 'linear'; ptr: DevPtr; format: number; channels: number; size: bigint }
  | { kind: 'pitch2d'; ptr: DevPtr; format: number; channels: number; width: bigint; height: bigint; pitch: bigint };
/** CUDA_TEXTURE_DESC's fields (floats as their bits). */
export interface TexDesc {
  addressMode: [number, number, number];
  filterMode: number;
  flags: number;
  maxAnisotropy: number;
  mipmapFilterMode: number;
  mipmapLevelBias: number;
  minLod: number;
  maxLod: number;
  borderColor: [number, number, number, number];
}

/** A kernel as the driver describes it (cuFuncGetParamInfo). */
export interface FunctionInfo {
  ref: FunctionRef;
  /** Each parameter's offset and size in the packed parameter block, in order. */
  params: { offset: number; size: number }[];
  /** offset + size of the last parameter (0 without parameters). */
  paramBytes: number;
  /** Local memory one thread of it needs (CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES): what its launch may grow the context's reservation to (local-memory.ts). */
  localBytes: number;
}

export type Dim3 = readonly [number, number, number];

/**
 * Where a context's device output goes (kernels' printf: kind 1, stdout;
 * failed device asserts: kind 2, stderr; another line the driver wrote to
 * stderr: kind 3, one line, which is the guest's stderr too and worth a
 * line in the host's log): the session's queue for the guest. A provider
 * calls it, before the reply of the flush point that produced the output
 * goes back, where it has such output; the emu provider never does.
 */
export type OutputSink = (kind: 1 | 2 | 3, bytes: Uint8Array) => void;

/** One launch of a batch, already checked by the dispatcher. */
export interface LaunchDesc {
  f: FunctionRef;
  grid: Dim3;
  block: Dim3;
  sharedMem: number;
  stream: StreamRef | undefined;
  params: Uint8Array;
}

/** Where a region of guest RAM comes from: an fd and the vhost-user region that maps it. */
export interface GuestMemorySource {
  fd: number;
  region: MemRegion;
}

// ---- the methods of calls a context answers one to one, derived from their
// declaration (wire/protocol.ts ContextDecl): handles become the provider's
// objects, the other arguments their decoded fields.

type RefOf<K extends HandleKind> = K extends 'stream'
  ? StreamRef | undefined
  : K extends 'event'
    ? EventRef
    : K extends 'module'
      ? ModuleRef
      : FunctionRef;
type ArgFields<D> = D extends { args: infer S extends StructName } ? Fields<(typeof STRUCTS)[S]> : Record<string, never>;
type OutFields<D> = D extends { out: infer S extends StructName } ? Fields<(typeof STRUCTS)[S]> : never;
type OutInput<D> = D extends { out: infer S extends StructName } ? Required<FieldInput<(typeof STRUCTS)[S]>> : never;
type ParamOf<D, P> = D extends { handles: infer H }
  ? P extends keyof H
    ? H[P] extends HandleKind
      ? RefOf<H[P]>
      : never
    : ArgOf<D, P>
  : ArgOf<D, P>;
type ArgOf<D, P> = P extends keyof ArgFields<D> ? ArgFields<D>[P] : never;
type ResultOf<D, R> = R extends 'none'
  ? void
  : R extends 'value'
    ? bigint
    : R extends 'signed'
      ? number
      : R extends 'ready'
        ? boolean
        : R extends 'stream'
          ? StreamRef
          : R extends 'event'
            ? EventRef
            : R extends 'out'
              ? OutInput<D>
              : R extends 'memory'
                ? OutFields<D>
                : never;
type MethodOf<D> = D extends { context: { params: infer P extends readonly string[]; result: infer R } }
  ? (...args: { [I in keyof P]: ParamOf<D, P[I]> }) => Now<ResultOf<D, R>>
  : never;

/** The methods of the calls declared with `context`, by method name. */
export type ContextCalls = {
  [K in CmdName as (typeof CALLS)[K] extends { context: { method: infer M extends string } } ? M : never]: MethodOf<(typeof CALLS)[K]>;
};

/** A ContextCalls method at run time: its declaration, and the handle kind of each argument (undefined: a plain value). */
export interface ContextCallInfo {
  method: keyof ContextCalls;
  decl: CallDecl;
  kinds: (HandleKind | undefined)[];
}

const CONTEXT_CALLS: readonly ContextCallInfo[] = Object.values(CALLS as Record<string, CallDecl>).flatMap((d) =>
  d.context ? [{ method: d.context.method as keyof ContextCalls, decl: d, kinds: d.context.params.map((p) => d.handles?.[p]) }] : [],
);

/**
 * Gives a class every ContextCalls method, each running impl with its
 * declaration and arguments: for implementations that treat them alike (a
 * worker's forwarding, the addon's methods of the same names). The class
 * declares them with `interface X extends ContextCalls {}`.
 */
export function defineContextCalls<T>(
  cls: { prototype: T },
  impl: (self: T, call: ContextCallInfo, args: unknown[]) => Now<unknown>,
): void {
  for (const call of CONTEXT_CALLS) {
    Object.defineProperty(cls.prototype, call.method, {
      value(this: T, ...args: unknown[]) {
        return impl(this, call, args);
      },
      writable: true,
      configurable: true,
    });
  }
}

/** One CUDA context's worth of state: the backend opens one per guest session. */
export interface ProviderContext extends ContextCalls, CoreContext {}

/** The context's methods that are not one call's (copies, launches, modules, teardown). */
/** One input of a JIT link: a CUjitInputType, its bytes, the name the linker's messages give it. */
export interface LinkInput {
  readonly type: number;
  readonly name: string;
  readonly data: Uint8Array;
}

/** What a link made: the cubin (empty when status is not 0), the linker's logs, CU_JIT_WALL_TIME. */
export interface LinkResult {
  readonly status: number;
  readonly image: Uint8Array;
  readonly infoLog: Uint8Array;
  readonly errorLog: Uint8Array;
  readonly wallMs: number;
}

export interface CoreContext {
  malloc(size: bigint): Promise<DevPtr>;
  free(ptr: DevPtr): Promise<void>;
  /** stream undefined = the legacy NULL stream. Resolves once the data has moved. */
  copyToDevice(dst: DevPtr, src: GuestSeg[], stream: StreamRef | undefined): Now<void>;
  copyFromDevice(dst: GuestSeg[], src: DevPtr, stream: StreamRef | undefined): Now<void>;
  copyOnDevice(dst: DevPtr, src: DevPtr, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void>;
  memset(dst: DevPtr, value: number, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void>;
  synchronize(): Now<void>;
  /** A 2D/3D copy between device places (linear memory, arrays); async: resolve once enqueued. */
  copy3DOnDevice(
    dst: Place,
    dstPos: Pos,
    src: Place,
    srcPos: Pos,
    extent: Extent,
    stream: StreamRef | undefined,
    async: boolean,
  ): Promise<void>;
  /** The blocks of a 2D/3D copy from guest memory (one chunk's segments) to a place. Resolves once the bytes have left the segments. */
  copy3DToDevice(dst: Place, src: GuestSeg[], blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void>;
  /** The blocks of a 2D/3D copy from a place to guest memory (one chunk's segments). Resolves once the bytes are there. */
  copy3DFromDevice(dst: GuestSeg[], src: Place, blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void>;
  /** cudaMemset2D (range checked): height rows of width bytes, pitch apart. */
  memset2D(
    dst: DevPtr,
    pitch: bigint,
    value: number,
    width: bigint,
    height: bigint,
    stream: StreamRef | undefined,
    async: boolean,
  ): Promise<void>;
  /** A CUDA array (shape checked by the dispatcher). */
  arrayCreate(desc: ArrayDesc): Promise<ArrayRef>;
  arrayDestroy(a: ArrayRef): Promise<void>;
  /** A mipmapped array of `levels` levels, level 0 of shape desc. */
  mipmapCreate(desc: ArrayDesc, levels: number): Promise<MipmapRef>;
  /** A level of it, as an array (valid until the mipmapped array is destroyed; never destroyed by itself). */
  mipmapLevel(m: MipmapRef, level: number): Promise<ArrayRef>;
  mipmapDestroy(m: MipmapRef): Promise<void>;
  /** A texture object: the value kernels take (on a GPU, the CUtexObject itself). */
  texCreate(res: TexResource, desc: TexDesc): Promise<bigint>;
  texDestroy(t: bigint): Promise<void>;
  /** A surface object of an array (made with CUDA_ARRAY3D_SURFACE_LDST). */
  surfCreate(a: ArrayRef): Promise<bigint>;
  surfDestroy(s: bigint): Promise<void>;
  /** An empty CUDA graph, for conditional handles (GRAPH_CREATE). */
  graphCreate(): Promise<GraphRef>;
  graphDestroy(g: GraphRef): Promise<void>;
  /** cuGraphConditionalHandleCreate on g: the handle as kernels take it. */
  graphCondHandle(g: GraphRef, defaultValue: number, flags: number): Promise<bigint>;
  /** The nodes built into g (whose handles the conditional nodes use) and instantiated; g is left as it was. */
  graphInstantiate(g: GraphRef, spec: GraphSpec): Promise<GraphExecRef>;
  graphExecDestroy(x: GraphExecRef): Promise<void>;
  /** Enqueues the executable graph; resolves once enqueued. */
  graphLaunch(x: GraphExecRef, stream: StreamRef | undefined): Promise<void>;
  /**
   * Virtual memory management, checked by the dispatcher (commands/vmm.ts,
   * vmm.ts): everything granularity-aligned, mappings inside a reservation
   * of the context over nothing mapped, whole mappings unmapped and given
   * access. A reservation of size bytes, aligned so, at the hint if it can.
   */
  vmmReserve(size: bigint, alignment: bigint, hint: DevPtr): Promise<DevPtr>;
  /** Frees a whole reservation, nothing mapped in it. */
  vmmFree(ptr: DevPtr, size: bigint): Promise<void>;
  /** Physical device memory (cuMemCreate, pinned, on the context's device). */
  vmmCreate(size: bigint): Promise<VmmRef>;
  /** Frees it (cuMemRelease): called once nothing maps it. */
  vmmRelease(m: VmmRef): Promise<void>;
  /** Maps size bytes of m, from its start, at ptr (cuMemMap). */
  vmmMap(ptr: DevPtr, size: bigint, m: VmmRef): Promise<void>;
  /** Unmaps one whole mapping (cuMemUnmap). */
  vmmUnmap(ptr: DevPtr, size: bigint): Promise<void>;
  /** Gives the context's device read-write access to one whole mapping (cuMemSetAccess). */
  vmmSetAccess(ptr: DevPtr, size: bigint): Promise<void>;
  /** Milliseconds between two recorded events. */
  eventElapsed(start: EventRef, end: EventRef): Promise<number>;
  /**
   * The device pointer through which the GPU addresses registered guest
   * memory, the pieces (host addresses; after the first, whole pages) one
   * after another as one range: valid until hostUnmap or destroy, and
   * telling nothing of where the rest of guest RAM lies.
   */
  hostDevicePointer(pieces: readonly HostPiece[]): Promise<DevPtr>;
  /** Undoes hostDevicePointer (the guest's HOST_UNMAP): the GPU can no longer reach those pages through it. */
  hostUnmap(ptr: DevPtr): Promise<void>;
  /**
   * Loads a module (fat binary, cubin or PTX; checked by module-image.ts and
   * followed by NUL padding). bytes: the device memory the load took, as far
   * as the provider can measure it (0 where it cannot).
   */
  moduleLoad(image: Uint8Array): Promise<{ ref: ModuleRef; bytes: bigint }>;
  /** Unloads a module; its functions become invalid. */
  moduleUnload(m: ModuleRef): Promise<void>;
  /**
   * JIT-links the inputs (each followed by NUL padding, as a module image)
   * with the driver's linker (cuLinkCreate, cuLinkAddData, cuLinkComplete):
   * a failed link resolves too, with its CUresult as status and its logs.
   */
  link(inputs: readonly LinkInput[], options: readonly (readonly [option: number, value: number])[]): Promise<LinkResult>;
  /** A kernel of a module and its parameter layout (at most maxParams parameters). */
  functionGet(m: ModuleRef, name: string, maxParams: number): Promise<FunctionInfo>;
  /** A __device__ variable of a module: where it lives and its size. */
  variableGet(m: ModuleRef, name: string): Promise<{ dptr: DevPtr; size: bigint }>;
  /** Every CUfunction_attribute of a kernel (QCUDA_NUM_FUNC_ATTRS values, indexed by it). */
  funcGetAttributes(f: FunctionRef): Promise<Int32Array>;
  /** cudaFuncSetAttribute (attr and value already range-checked). */
  funcSetAttribute(f: FunctionRef, attr: number, value: number): Promise<void>;
  /** Active blocks per multiprocessor for a block size and dynamic shared memory per block. */
  occupancyBlocks(f: FunctionRef, blockSize: number, dynamicSmem: bigint, flags: number): Promise<number>;
  /** Dynamic shared memory per block that lets numBlocks blocks of blockSize threads fit on a multiprocessor. */
  occupancySmem(f: FunctionRef, numBlocks: number, blockSize: number): Promise<bigint>;
  /** The driver's CUtensorMap (128 bytes) for a qcuda_args_tensor_map whose rank fits its arrays. */
  tensorMapEncode(args: Uint8Array): Promise<Uint8Array>;
  /** The context's cudaLimit values (limit already checked to be one the runtime names). */
  limitSet(limit: number, value: bigint): Promise<void>;
  limitGet(limit: number): Promise<bigint>;
  /** A stream attribute's value (cudaLaunchAttributeValue, QCUDA_ATTR_VALUE_BYTES), rebuilt from checked fields. */
  streamSetAttribute(s: StreamRef | undefined, attr: number, value: Uint8Array): Promise<void>;
  streamGetAttribute(s: StreamRef | undefined, attr: number): Promise<Uint8Array>;
  /** As launch(), for a cooperative grid (cudaLaunchCooperativeKernel): every block resident at once. */
  launchCooperative(
    f: FunctionRef,
    grid: Dim3,
    block: Dim3,
    sharedMem: number,
    stream: StreamRef | undefined,
    params: Uint8Array,
  ): Promise<void>;
  /** As launch(), with launch attributes (cuLaunchKernelEx): blocks in clusters of `cluster` (1, 1, 1: none), cooperative or not. */
  launchEx(
    f: FunctionRef,
    grid: Dim3,
    block: Dim3,
    sharedMem: number,
    stream: StreamRef | undefined,
    params: Uint8Array,
    cluster: Dim3,
    cooperative: boolean,
  ): Promise<void>;
  /**
   * Enqueues a kernel on the stream, after the work already enqueued there;
   * resolves once enqueued, not completed (the kernel's own errors surface at
   * the next synchronizing call). params is the packed parameter block,
   * exactly paramBytes long: the provider never interprets it.
   */
  launch(f: FunctionRef, grid: Dim3, block: Dim3, sharedMem: number, stream: StreamRef | undefined, params: Uint8Array): Now<void>;
  /**
   * Enqueues several launches in order, as launch() does each, in one go.
   * Every launch is tried; the promise rejects with the first failure's
   * CudaError, which carries `index`, that launch's position in the list.
   */
  launchMany(list: readonly LaunchDesc[]): Now<void>;
  /**
   * IPC between processes served by processes of their own (a worker each,
   * isolated.ts): CUDA's own handle (64 bytes, cuIpcGetMemHandle) of this
   * context's allocation at ptr. The backend keeps it; the guest never sees
   * it. NotSupported where the context's memory cannot leave its process.
   */
  ipcMemExport(ptr: DevPtr): Promise<Uint8Array>;
  /** Opens another process's memory handle here (cuIpcOpenMemHandle_v2): its address in this context, for copies and kernels. */
  ipcMemOpen(handle: Uint8Array): Promise<DevPtr>;
  /** Undoes an ipcMemOpen (cuIpcCloseMemHandle). */
  ipcMemClose(ptr: DevPtr): Promise<void>;
  /** CUDA's handle of an interprocess event of this context (cuIpcGetEventHandle), as ipcMemExport. */
  ipcEventExport(e: EventRef): Promise<Uint8Array>;
  /** Opens another process's event handle here (cuIpcOpenEventHandle): an event of this context to wait on. */
  ipcEventOpen(handle: Uint8Array): Promise<EventRef>;
  /**
   * Frees everything the context holds. Called once; the context is dead
   * after. why: 'reset' (cudaDeviceReset: the process lives on, so device
   * output is flushed to it) or 'exit' (the process is gone: end it at once,
   * even with a kernel still running, e.g. by ending its worker process).
   */
  destroy(why?: 'reset' | 'exit'): Promise<void>;
}

/**
 * A context whose VMM allocations travel between processes as POSIX fds
 * (the cuda provider's): what Provider.vmmImport runs where each session's
 * context is in a worker of its own (isolated.ts). Not a CoreContext call:
 * the fds go with the worker's messages, never as a call's values.
 */
export interface VmmFdContext {
  /** cuMemExportToShareableHandle (POSIX fd) of vmmCreate's m: the fd, the caller's to close. */
  vmmExportFd(m: VmmRef): Promise<number>;
  /** cuMemImportFromShareableHandle of such an fd (still the caller's): the same memory, released by vmmRelease. */
  vmmImportFd(fd: number): Promise<VmmRef>;
}

/** Every method of CoreContext, at run time (checked complete below). */
const CORE_METHODS = [
  'malloc',
  'free',
  'copyToDevice',
  'copyFromDevice',
  'copyOnDevice',
  'memset',
  'synchronize',
  'copy3DOnDevice',
  'copy3DToDevice',
  'copy3DFromDevice',
  'memset2D',
  'arrayCreate',
  'arrayDestroy',
  'mipmapCreate',
  'mipmapLevel',
  'mipmapDestroy',
  'texCreate',
  'texDestroy',
  'surfCreate',
  'surfDestroy',
  'graphCreate',
  'graphDestroy',
  'graphCondHandle',
  'graphInstantiate',
  'graphExecDestroy',
  'graphLaunch',
  'vmmReserve',
  'vmmFree',
  'vmmCreate',
  'vmmRelease',
  'vmmMap',
  'vmmUnmap',
  'vmmSetAccess',
  'eventElapsed',
  'hostDevicePointer',
  'hostUnmap',
  'moduleLoad',
  'moduleUnload',
  'link',
  'functionGet',
  'variableGet',
  'funcGetAttributes',
  'funcSetAttribute',
  'occupancyBlocks',
  'occupancySmem',
  'tensorMapEncode',
  'limitSet',
  'limitGet',
  'streamSetAttribute',
  'streamGetAttribute',
  'launchCooperative',
  'launchEx',
  'launch',
  'launchMany',
  'ipcMemExport',
  'ipcMemOpen',
  'ipcMemClose',
  'ipcEventExport',
  'ipcEventOpen',
  'destroy',
] as const satisfies readonly (keyof CoreContext)[];
type Unlisted = Exclude<keyof CoreContext, (typeof CORE_METHODS)[number]>;
const complete: [Unlisted] extends [never] ? true : Unlisted = true;
void complete;

/** Every ProviderContext method a session's worker may be asked to run (destroy is the worker's own). */
export const CONTEXT_METHODS: readonly (keyof ProviderContext)[] = [...CORE_METHODS, ...CONTEXT_CALLS.map((c) => c.method)];

/** Where guest RAM lies in this backend's address space: a migrated state names mapped guest memory by guest physical address. */
export interface GuestAddresses {
  gpaOf(host: bigint, size: bigint): bigint;
  hostOf(gpa: bigint, size: bigint): bigint;
  guestRam(): bigint;
}

/** The providers by the names --provider takes: the GPU, or a CUDA device emulated in host memory. */
export const PROVIDER_NAMES = ['cuda', 'emu'] as const;
export type ProviderName = (typeof PROVIDER_NAMES)[number];
/**
 * Older names of providers, taken where a name is read (--provider, a saved
 * state's header): emu was called host, which clashed with CUDA's host
 * memory and host functions.
 */
export const PROVIDER_ALIASES: ReadonlyMap<string, ProviderName> = new Map([['host', 'emu']]);

export interface Provider {
  readonly name: ProviderName;
  readonly hasGpu: boolean;
  deviceCount(): number;
  driverVersion(): number;
  deviceProps(device: number): DeviceProps;
  openContext(device: number, output?: OutputSink): Promise<ProviderContext>;
  /**
   * Copies size bytes from srcPtr, memory of src's device, to dstPtr,
   * memory of dst's (contexts of one session on two devices; ranges checked
   * by the dispatcher): device to device, never through guest RAM. Absent
   * where the provider serves one device per session.
   */
  copyPeer?(dst: ProviderContext, dstPtr: DevPtr, src: ProviderContext, srcPtr: DevPtr, size: bigint): Promise<void>;
  /**
   * Whether device `device` may reach `peer`'s memory (cudaDeviceCanAccessPeer
   * of two valid, distinct devices): 0 or 1. Absent where the provider has
   * no peer access (no copyPeer either): 0.
   */
  canAccessPeer?(device: number, peer: number): number;
  /** cudaDeviceGetP2PAttribute (attr 1-4) of two valid, distinct devices. Absent: 0, as between devices without peer access. */
  p2pAttribute?(attr: number, src: number, dst: number): number;
  /**
   * ctx's kernels may reach peer's memory (contexts of one session on two
   * devices; the session refuses enabling twice and disabling what is not
   * enabled). Absent where nothing needs doing (one address space).
   */
  enablePeerAccess?(ctx: ProviderContext, peer: ProviderContext): Promise<void>;
  disablePeerAccess?(ctx: ProviderContext, peer: ProviderContext): Promise<void>;
  /**
   * IPC between two sessions of one VM (cudaIpcOpenMemHandle): opener, a
   * context of another session, may reach owner's allocation at ptr (checked
   * by the backend to be one; undefined where the owner is served by another
   * process: exported is all there is). Returns its address in opener.
   * Absent where the provider cannot share memory between its contexts:
   * NotSupported.
   */
  ipcOpen?(owner: ProviderContext | undefined, ptr: DevPtr, opener: ProviderContext, exported?: Uint8Array): Promise<DevPtr>;
  /**
   * What ipcOpen needs of the owner's side, asked once at cudaIpcGetMemHandle
   * and kept in the VM's table: CUDA's handle where the opener is another
   * process (isolated.ts). Absent where ipcOpen needs nothing of it.
   */
  ipcExport?(owner: ProviderContext, ptr: DevPtr): Promise<Uint8Array>;
  /**
   * IPC event handles (cudaIpcOpenEventHandle): an event of opener that
   * waits for what owner's event e waits for. Absent: NotSupported.
   */
  ipcEventOpen?(
    owner: ProviderContext | undefined,
    e: EventRef | undefined,
    opener: ProviderContext,
    exported?: Uint8Array,
  ): Promise<EventRef>;
  /** As ipcExport, for an event (cuIpcGetEventHandle). */
  ipcEventExport?(owner: ProviderContext, e: EventRef): Promise<Uint8Array>;
  /** Undoes an ipcOpen (cudaIpcCloseMemHandle, or the owner freed the memory). */
  ipcClose?(opener: ProviderContext, ptr: DevPtr): Promise<void>;
  /**
   * Physical memory of VMM (vmmCreate's m in owner) as importer may map and
   * release it (cuMemImportFromShareableHandle): the same memory, still the
   * owner's; the importer's vmmRelease lets go of its hold only. Absent
   * where the provider cannot share memory between its contexts:
   * NotSupported, and the device says it takes no POSIX fd handles.
   */
  vmmImport?(owner: ProviderContext, m: VmmRef, importer: ProviderContext): Promise<VmmRef>;
  /**
   * vmmImport in two halves, where each context is in a process of its own
   * (isolated.ts): owner's allocation m as a POSIX fd (the caller's), and an
   * import of such an fd (from this provider's context or a queue owner's
   * worker) into importer, which takes the fd over (closed on every path).
   */
  vmmExportFd?(owner: ProviderContext, m: VmmRef): Promise<Fd>;
  vmmImportFd?(importer: ProviderContext, fd: Fd): Promise<VmmRef>;
  /**
   * Guest RAM as it is mapped in this process: register so copies run at
   * pinned speed. Unregistering resolves before the memory may be unmapped.
   * source: the file behind it, for a provider that maps guest RAM in other
   * processes too (its fd is open only during the call).
   */
  registerGuestMemory(addr: bigint, size: bigint, source?: GuestMemorySource): void | Promise<void>;
  unregisterGuestMemory(addr: bigint): void | Promise<void>;
  /**
   * This process's poll loop (vhost-user/platform/busy-poll.ts) also waits for the GPU: a
   * wait begun on the JS thread while it polls is settled by a later turn
   * instead of a waiter thread, so a completion needs no thread's wake-up.
   * Absent where the provider has no waits of its own.
   */
  pollWith?(poll: BusyPoll): void;
  /**
   * Starts a worker process that serves one session's own queue
   * (workers/owned-queue.ts; fds: its kick, call, in-flight record and
   * the VM's ledger). Only a provider that runs each session in a worker
   * of its own has it: without, every queue is served by the backend.
   */
  startOwner?(order: OwnOrder, fds: number[], modules?: ModuleStore, ipc?: IpcAnswerer): Promise<QueueOwner>;
  /**
   * The JIT and link jobs (moduleLoad, link) running in the provider's
   * workers, which the device's worker watch bounds in time
   * (VmLimits.jitTimeMs). Only a provider with workers has it: a job in
   * the backend itself (--isolation=none) is not bounded.
   */
  readonly jobs?: JobWatch;
  close(): Promise<void>;
}

/** The JIT and link jobs of a provider's workers (providers/cuda/jit-jobs.ts). */
export interface JobWatch {
  /** Calls onStart at each job's start (the watch runs while any job does); returns what stops that. */
  listen(onStart: () => void): () => void;
  /** Whether any job runs now. */
  readonly running: boolean;
  /** Kills the worker of each job that has run longer than ms: a line for each, to log. */
  endPast(ms: number): string[];
}

/**
 * The provider-level methods of a provider whose every context lives in a
 * process of its own (a worker per session, isolated.ts; a queue owner's
 * worker, worker.ts): each runs in one of the contexts it is given, as
 * that context's method. Such a provider takes them all (Object.assign), so
 * a provider-level method added here reaches every worker with no list to
 * join. Emu contexts refuse at the export with NotSupported: host memory
 * does not leave its process.
 */
export const CONTEXT_TWINS = {
  ipcExport(owner: ProviderContext, ptr: DevPtr): Promise<Uint8Array> {
    return owner.ipcMemExport(ptr);
  },
  ipcOpen(_owner: ProviderContext | undefined, _ptr: DevPtr, opener: ProviderContext, exported?: Uint8Array): Promise<DevPtr> {
    if (!exported) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'an IPC handle without its CUDA handle'));
    return opener.ipcMemOpen(exported);
  },
  ipcClose(opener: ProviderContext, ptr: DevPtr): Promise<void> {
    return opener.ipcMemClose(ptr);
  },
  ipcEventExport(owner: ProviderContext, e: EventRef): Promise<Uint8Array> {
    return owner.ipcEventExport(e);
  },
  ipcEventOpen(
    _owner: ProviderContext | undefined,
    _e: EventRef | undefined,
    opener: ProviderContext,
    exported?: Uint8Array,
  ): Promise<EventRef> {
    if (!exported) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'an IPC event handle without its CUDA handle'));
    return opener.ipcEventOpen(exported);
  },
} satisfies Partial<Provider>;
export type ContextTwins = typeof CONTEXT_TWINS;

/** What a queue owner is handed (owned-queue.ts); the kick, call, in-flight record and ledger fds come with it. */
export interface OwnOrder {
  session: bigint;
  /** The session's slot in the VM's ledger. */
  slot: number;
  limits: VmLimits;
  state: RingState;
  /** The VM's GPU identity key (VmShared.identityKey): its sessions all see one UUID; absent: the real one. */
  identityKey?: Uint8Array;
}

/** A session's worker serving the session's own queue (owned-queue.ts), as the backend sees it. */
export interface QueueOwner {
  readonly pid: number | undefined;
  /** Where the worker left the ring once it is gone; undefined if it died without saying (see Vring.recover). */
  readonly returned: Promise<RingState | undefined>;
  /** Asks it to give the ring back (its session ends). */
  handback(): void;
  /** A VM stop: the ring back, the session kept (see ownAgain). */
  park(): Promise<RingState>;
  /** After the stop: the ring served by the worker again (fds: kick, call, a new in-flight record). */
  ownAgain(state: RingState, fds: number[]): Promise<void>;
  kill(): void;
  /** Tells it to close what its session opened by IPC at ptr (the owner's memory went: ipc-remote.ts); resolves once it has closed it or is gone, rejects where the close failed. */
  ipcDrop(ptr: DevPtr): Promise<void>;
  /** A POSIX fd of its session's VMM allocation `handle` (its context on device), the caller's: for another session's import. */
  vmmExport(handle: bigint, device: number): Promise<Fd>;
  /** Tells it to drop its session's import `handle` (the owner's memory went: vmm-remote.ts); resolves once unmapped and released or gone, rejects where that failed. */
  vmmDrop(handle: bigint): Promise<void>;
}
