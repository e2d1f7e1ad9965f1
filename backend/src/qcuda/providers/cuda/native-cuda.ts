// The CUDA addon (addon/build/Release/qcuda_cuda.node), typed. It loads on any
// machine: libcuda.so.1 is dlopened at the first probe(), never linked.
//
// Threads (addon/src/cuda_exec.h): each context has one thread that runs its
// work in submission order; blocking waits run on a pool of waiter threads
// (at most setWaiterLimit() per process; more waits queue for a free one);
// cheap non-blocking calls run inline when the context thread is idle. Every
// operation returns a Promise and never blocks the event loop, except the
// calls of a round trip (typed Now: synchronizes, queries, event records,
// small copies, launches), which return their value, or throw their error,
// at once when they finished inline (addon: SubmitNow).
// Failures reject with the error made by setErrorFactory(code, message), code
// being the runtime API's cudaError_t; the error also carries cuResult (the
// driver's CUresult) and call (the driver call that failed).
import path from 'node:path';
import type { ContextCalls } from '../../provider';
import type { Now } from '../../../sys/now';
import { MAX_SAFE_BIG } from '../../../vhost-user';
import type { Policy } from '../../share/policy';

export interface CudaProbe {
  ok: boolean;
  /** Why CUDA cannot be used, in plain words ('' when ok). */
  reason: string;
  /** What was dlopened: libcuda.so.1, or $QCUDA_LIBCUDA. */
  library: string;
  driverVersion: number;
  deviceCount: number;
}

/** A host range (guest RAM mapped in this process). */
export interface CudaSeg {
  addr: bigint;
  len: number;
}

// The quick forms of the commonest arguments. The addon reads a typed array
// at once, where an array or an object costs it a lookup per element or
// property (a third of a launch's own time, a fifth of a small copy's). Each
// is a view of one scratch buffer, written just before the call that reads
// it (the addon copies its arguments before it returns); the buffer is
// larger than V8 keeps inside its heap, so the addon's read does not first
// move it out (an allocation per call).
const SCRATCH_SEGS = 32;
const segScratch = new Float64Array(2 * SCRATCH_SEGS);
const dimScratch = new Uint32Array(32);
const dimViews = [dimScratch.subarray(0, 3), dimScratch.subarray(3, 6)];

/** Segments as the addon reads them quickest: [addr, len] pairs; as given where one does not fit a double exactly (the addon checks them). */
export function packSegs(segs: readonly CudaSeg[]): Float64Array | readonly CudaSeg[] {
  if (segs.length > SCRATCH_SEGS) return segs;
  for (let i = 0; i < segs.length; i++) {
    if (segs[i].addr > MAX_SAFE_BIG) return segs;
    segScratch[2 * i] = Number(segs[i].addr);
    segScratch[2 * i + 1] = segs[i].len;
  }
  return segScratch.subarray(0, 2 * segs.length);
}

/** A launch's grid (which 0) or block (1) as the addon reads it quickest, a Uint32Array of 3; as given where it is not 3 u32s (the addon refuses it). */
export function packDim3(which: 0 | 1, d: readonly number[]): Uint32Array | readonly number[] {
  if (d.length !== 3) return d;
  const at = 3 * which;
  for (let i = 0; i < 3; i++) {
    if (d[i] >>> 0 !== d[i]) return d;
    dimScratch[at + i] = d[i];
  }
  return dimViews[which];
}

export interface CudaDeviceProps {
  name: string;
  uuid: Uint8Array;
  totalMem: bigint;
  /** cuDeviceGetAttribute(i) for i in 1..NUM_ATTRS-1; 0 where the driver has no such attribute. */
  attrs: Int32Array;
}

/** A provider method as the addon has it: the provider's objects (streams, events, ...) as the addon's ids. */
type WithIds<F> = F extends (...a: infer A) => Now<infer R>
  ? (...a: { [I in keyof A]: unknown extends A[I] ? number : A[I] }) => Now<unknown extends R ? number : R>
  : never;

/**
 * The calls a context answers one to one (wire/protocol.ts), each the driver
 * call of the same name (a query resolves true once the work is done; a stream
 * priority range is {least, greatest}, least 0 and greatest -5 on an H100); a
 * synchronizing one blocks on a waiter thread.
 */
export type CudaContextCalls = { [M in keyof ContextCalls]: WithIds<ContextCalls[M]> };

/** Stream ids: 0 is the legacy NULL stream. Stream and event ids belong to their context. */
export interface CudaContextNative extends CudaContextCalls {
  readonly device: number;
  readonly primary: boolean;
  /** Jobs queued or running on the context thread. */
  readonly busy: number;
  readonly destroyed: boolean;
  malloc(size: bigint): Promise<bigint>;
  free(ptr: bigint): Promise<void>;
  /** Resolves once the bytes have left the segments (the caller may reuse them). */
  copyHtoD(dst: bigint, src: readonly CudaSeg[] | Float64Array, stream: number): Now<void>;
  /** Resolves once the bytes are in the segments. */
  copyDtoH(dst: readonly CudaSeg[] | Float64Array, src: bigint, stream: number): Now<void>;
  /** wait: resolve when the copy is done, else when it is enqueued. */
  copyDtoD(dst: bigint, src: bigint, size: bigint, stream: number, wait: boolean): Promise<void>;
  /** size bytes from src, memory of srcContext's device, to dst, this context's (cuMemcpyPeer; addon/src/cuda_ctx_peer.cc). */
  copyPeer(srcContext: CudaContextNative, dst: bigint, src: bigint, size: bigint): Promise<void>;
  /** This context's kernels may reach peerContext's memory (cuCtxEnablePeerAccess). */
  enablePeerAccess(peerContext: CudaContextNative): Promise<void>;
  disablePeerAccess(peerContext: CudaContextNative): Promise<void>;
  /** IPC (cuda_ctx_ipc.cc): cuIpcGetMemHandle of the allocation at ptr (64 bytes). */
  ipcMemExport(ptr: bigint): Promise<Uint8Array>;
  /** cuIpcOpenMemHandle_v2 (lazy peer access): the memory's address here. */
  ipcMemOpen(handle: Uint8Array): Promise<bigint>;
  ipcMemClose(ptr: bigint): Promise<void>;
  /** cuIpcGetEventHandle of an event id (64 bytes). */
  ipcEventExport(event: number): Promise<Uint8Array>;
  /** cuIpcOpenEventHandle: a new event id of this context. */
  ipcEventOpen(handle: Uint8Array): Promise<number>;
  memset(dst: bigint, value: number, size: bigint, stream: number, wait: boolean): Promise<void>;
  synchronize(): Now<void>;
  /** Virtual memory management (cuda_ctx_vmm.cc): cuMemAddressReserve -> the range's start. */
  vmmReserve(size: bigint, alignment: bigint, hint: bigint): Promise<bigint>;
  /** cuMemAddressFree. */
  vmmFree(ptr: bigint, size: bigint): Promise<void>;
  /** cuMemCreate (pinned, on the context's device) -> the allocation's id. */
  vmmCreate(size: bigint): Promise<number>;
  /** cuMemRelease of the allocation's id. */
  vmmRelease(id: number): Promise<void>;
  /** cuMemExportToShareableHandle (POSIX fd) of the allocation's id -> the fd, the caller's to close. */
  vmmExport(id: number): Promise<number>;
  /** cuMemImportFromShareableHandle of a POSIX fd (still the caller's) -> the allocation's id here. */
  vmmImport(fd: number): Promise<number>;
  /** cuMemMap of the allocation's id, from its start. */
  vmmMap(ptr: bigint, size: bigint, id: number): Promise<void>;
  /** cuMemUnmap. */
  vmmUnmap(ptr: bigint, size: bigint): Promise<void>;
  /** cuMemSetAccess: read-write for the context's device. */
  vmmSetAccess(ptr: bigint, size: bigint): Promise<void>;
  /** cuArray3DCreate_v2 -> the array's id. */
  arrayCreate(width: bigint, height: bigint, depth: bigint, format: number, channels: number, flags: number): Promise<number>;
  arrayDestroy(array: number): Promise<void>;
  /** cuMipmappedArrayCreate -> its id. */
  mipmapCreate(
    width: bigint,
    height: bigint,
    depth: bigint,
    format: number,
    channels: number,
    flags: number,
    levels: number,
  ): Promise<number>;
  /** cuMipmappedArrayGetLevel -> the level's array id (the same id for the same level; freed with the mipmapped array). */
  mipmapLevel(mipmap: number, level: number): Promise<number>;
  mipmapDestroy(mipmap: number): Promise<void>;
  /**
   * cuMemcpy3DAsync of each record (17 u64: src kind, src, pitch, rows, x, y, z, the same for dst, width, height, depth; kinds
   * 0 device pointer, 1 array id, 2 offset in a staging buffer of the segments' length, gathered from them before (toDevice)
   * or scattered to them after). With segments it resolves once the bytes have left or reached them; else once enqueued unless wait.
   */
  copy3D(records: BigUint64Array, segs: readonly CudaSeg[] | null, toDevice: boolean, stream: number, wait: boolean): Promise<void>;
  /** cuMemsetD2D8Async. */
  memset2D(dst: bigint, pitch: bigint, value: number, width: bigint, height: bigint, stream: number, wait: boolean): Promise<void>;
  /** cuTexObjectCreate from a record of 22 u64 (cuda_ctx_arrays.cc; resource 0: an array id, 1: a mipmapped array id) -> the CUtexObject. */
  texCreate(record: BigUint64Array): Promise<bigint>;
  texDestroy(t: bigint): Promise<void>;
  /** cuSurfObjectCreate of an array -> the CUsurfObject. */
  surfCreate(array: number): Promise<bigint>;
  surfDestroy(s: bigint): Promise<void>;
  /** cuGraphCreate -> its id (conditional handles are made on it). */
  graphCreate(): Promise<number>;
  graphDestroy(graph: number): Promise<void>;
  /** cuGraphConditionalHandleCreate -> the handle. */
  graphCondHandle(graph: number, defaultValue: number, flags: number): Promise<bigint>;
  /**
   * Builds the nodes into the graph, instantiates it and removes them again
   * -> the executable graph's id. records: 16 u64 per node (type, parent or
   * 0xffffffff, body, then the type's fields: providers/cuda/cuda.ts graphRecords);
   * edges: (from, to) pairs; params: the kernels' parameters.
   */
  graphInstantiate(graph: number, records: BigUint64Array, edges: Uint32Array, params: Uint8Array): Promise<number>;
  graphExecDestroy(exec: number): Promise<void>;
  /** cuGraphLaunch; resolves once enqueued (on the context thread). */
  graphLaunch(exec: number, stream: number): Promise<void>;
  eventElapsed(start: number, end: number): Promise<number>;
  hostDevicePointer(addr: bigint): Promise<bigint>;
  /** cuMemHostRegister on this context's thread (blocking: ~50 ms per GiB). */
  hostRegister(addr: bigint, size: bigint, flags: number): Promise<void>;
  hostUnregister(addr: bigint): Promise<void>;
  /**
   * cuModuleLoadData on the context thread, of a copy of the image with 16
   * zero bytes after it, once its structure lies inside its length (a fat
   * binary, an ELF64 cubin, or text: else cudaErrorInvalidKernelImage; see
   * addon/src/cuda_image.h). Resolves to the module id and the device memory
   * the load took: the drop in cuMemGetInfo's free memory across the load
   * (max 0). That is an estimate: free memory is the whole device's, so
   * other processes' (and this process's other contexts') allocations in
   * between count in it; check it against the quota after the load and
   * moduleUnload() what does not fit. With `limit` (bytes), a load that took
   * more is unloaded at once and rejects with cudaErrorMemoryAllocation.
   */
  moduleLoad(image: Uint8Array, limit?: bigint): Promise<{ id: number; bytes: bigint }>;
  /** cuModuleUnload; the module's function ids go with it. */
  moduleUnload(module: number): Promise<void>;
  /**
   * cuLinkCreate, cuLinkAddData of each input (a copy, NUL-padded), cuLinkComplete and a copy of
   * its cubin, cuLinkDestroy, on the context thread (optional driver entry points: missing, the
   * call fails with CUDA_ERROR_NOT_SUPPORTED). options: [CUjit_option, integer value] pairs, the
   * logs and wall time being the addon's own. Resolves to LINK_RESULT_HEADER bytes (little-endian
   * u32s: the link's CUresult, image bytes, info log bytes, error log bytes, then the wall time as
   * a float and 4 zero bytes) and the image, info log and error log, one after another: a failed
   * link resolves too, with its CUresult and logs.
   */
  link(
    inputs: readonly { type: number; name: string; data: Uint8Array }[],
    options: readonly (readonly [number, number])[],
  ): Promise<Uint8Array>;
  /** cuModuleGetFunction + cuFuncGetParamInfo for each parameter (driver >= 12.4; fails with more than maxParams). */
  functionGet(
    module: number,
    name: string,
    maxParams: number,
  ): Promise<{ id: number; params: { offset: number; size: number }[]; localBytes: number }>;
  /** cuModuleGetGlobal_v2. */
  variableGet(module: number, name: string): Promise<{ dptr: bigint; size: bigint }>;
  /** cuFuncGetAttribute of every CUfunction_attribute (0 for the cluster ones a pre-sm_90 driver lacks). */
  funcGetAttributes(func: number): Promise<Int32Array>;
  /** cuFuncSetAttribute. */
  funcSetAttribute(func: number, attr: number, value: number): Promise<void>;
  /** cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags -> blocks per multiprocessor. */
  occupancyBlocks(func: number, blockSize: number, dynamicSmem: bigint, flags: number): Promise<number>;
  /** cuOccupancyAvailableDynamicSMemPerBlock -> bytes. */
  occupancySmem(func: number, numBlocks: number, blockSize: number): Promise<bigint>;
  /** cuTensorMapEncode* or cuTensorMapReplaceAddress of a qcuda_args_tensor_map -> the 128-byte CUtensorMap. */
  tensorMapEncode(args: Uint8Array): Promise<Uint8Array>;
  /** cuCtxSetLimit (on the context thread). */
  limitSet(limit: number, value: bigint): Promise<void>;
  /** cuCtxGetLimit. */
  limitGet(limit: number): Promise<bigint>;
  /** cuStreamSetAttribute with a whole CUstreamAttrValue (64 bytes). */
  streamSetAttribute(stream: number, attr: number, value: Uint8Array): Promise<void>;
  /** cuStreamGetAttribute -> the CUstreamAttrValue's 64 bytes. */
  streamGetAttribute(stream: number, attr: number): Promise<Uint8Array>;
  /** cuLaunchCooperativeKernel, parameters as for launch(); resolves once enqueued (on the context thread). */
  launchCooperative(
    func: number,
    grid: readonly number[] | Uint32Array,
    block: readonly number[] | Uint32Array,
    sharedMem: number,
    stream: number,
    params: Uint8Array,
  ): Promise<void>;
  /** cuLaunchKernelEx with a thread-block cluster (cluster: blocks per cluster; 1, 1, 1: none) and the cooperative attribute. */
  launchEx(
    func: number,
    grid: readonly number[] | Uint32Array,
    block: readonly number[] | Uint32Array,
    sharedMem: number,
    stream: number,
    params: Uint8Array,
    cluster: readonly number[],
    cooperative: boolean,
  ): Promise<void>;
  /** cuLaunchKernel with params as CU_LAUNCH_PARAM_BUFFER_POINTER; resolves once enqueued (on the context thread). */
  launch(
    func: number,
    grid: readonly number[] | Uint32Array,
    block: readonly number[] | Uint32Array,
    sharedMem: number,
    stream: number,
    params: Uint8Array,
  ): Now<void>;
  /**
   * Several launches as one job on the context thread: `records` holds `count`
   * records laid out as backend/src/qcuda/providers/cuda/launch-record.ts declares
   * (a header of u32 fields, then the parameters padded; packLaunches writes them).
   * Every launch is tried; rejects with the first failure, its `index` set.
   */
  launchMany(records: Uint8Array, count: number): Now<void>;
  /** Runs after everything submitted before it, waits for running waits, frees every handle. */
  destroy(): Promise<void>;
}

export interface CudaNative {
  /** dlopen + cuInit + cuDeviceGetCount, once per process (synchronous: cuInit can take a second). */
  probe(): CudaProbe;
  /** The same on a worker thread. */
  probeAsync(): Promise<CudaProbe>;
  /** Throws unless probe().ok. */
  deviceProps(ordinal: number): CudaDeviceProps;
  /** cuDeviceCanAccessPeer between two host GPUs: 0 or 1. Throws unless probe().ok. */
  canAccessPeer(ordinal: number, peerOrdinal: number): number;
  /** cuDeviceGetP2PAttribute(attr) from srcOrdinal to dstOrdinal. Throws unless probe().ok. */
  p2pAttribute(attr: number, srcOrdinal: number, dstOrdinal: number): number;
  /**
   * primary: retain the device's primary context, else cuCtxCreate(flags). Throws unless probe().ok.
   * Rejects with cudaErrorOperatingSystem (304) when the context's thread cannot be created.
   */
  openContext(ordinal: number, flags: number, primary: boolean): Promise<CudaContextNative>;
  setErrorFactory(make: ((code: number, message: string) => Error) | undefined): void;
  /** CUresult -> cudaError_t. */
  toCudaError(cuResult: number): number;
  /** "CUDA_ERROR_X (text)" (just "CUresult N" before libcuda is loaded). */
  describe(cuResult: number): string;
  /**
   * waiterThreads: the process's waiter threads now (addon/src/cuda_exec.h); waiterLimit: the most it
   * may have; waiterPeak: the most it has had at once; waiterQueued: waits waiting for a thread;
   * waiterSpawnFailures: thread creations that failed; pending: this environment's unsettled jobs.
   */
  stats(): {
    waiterThreads: number;
    waiterLimit: number;
    waiterPeak: number;
    waiterQueued: number;
    waiterSpawnFailures: number;
    pending: number;
    /** Waits that ended while polled on the JS thread, those handed on to a waiter thread after the poll, and the time polled (setInlineWait). */
    inlineWaitsDone: number;
    inlineWaitsHandedOn: number;
    inlinePollNs: number;
    /** Jobs whose ordered part ran on the JS thread (setInlineCalls; launches within INLINE_LAUNCH_BOUND). */
    inlineRuns: number;
    /** Waits settled by pollWaits, and those its last turn handed on to a waiter thread. */
    parkedWaitsDone: number;
    parkedWaitsHandedOn: number;
  };
  /**
   * The most waiter threads (blocking synchronizes) this process may have, 1..4096 (default
   * DEFAULT_WAITER_LIMIT, 64); throws RangeError otherwise. Past it, waits queue for a free thread.
   * Where a thread cannot be created, waits go on with the threads there are, and fail with
   * cudaErrorOperatingSystem (304) when there are none.
   */
  setWaiterLimit(n: number): void;
  /**
   * How long (microseconds, 0..1e6; default 0) a synchronize, blocking copy or
   * event wait run on the JS thread polls the GPU before its wait goes to a
   * waiter thread: a wait that ends within it costs no thread hop. For a
   * process whose JS thread serves one guest process.
   */
  setInlineWait(us: number): void;
  /**
   * Ordered calls (allocations, launches, handle changes) run on the JS
   * thread too when the context's thread is idle: no thread hop, the JS
   * thread blocking in the driver meanwhile. For the same processes as
   * setInlineWait.
   */
  setInlineCalls(on: boolean): void;
  /**
   * A turn of this process's poll loop (vhost-user/platform/busy-poll.ts): settles the waits
   * begun on the JS thread that are done, and returns how many. From the
   * first call on, such waits are kept for these turns instead of going to a
   * waiter thread; a call with stop set that settles none hands the rest to
   * the waiter threads and ends that, so call it with stop on the loop's last turn.
   */
  pollWaits(stop: boolean): number;
  /** Jobs begun in this process whose promise is not settled yet (0: nothing in flight for the poll loop to settle). */
  pendingJobs(): number;
  /** '' when moduleLoad() would pass the image on to the driver, else why it refuses it (no driver needed). */
  checkModuleImage(image: Uint8Array): string;
  /** Guest RAM [addr, addr+len) is also mapped, registered, at alias: copies from or to it go there (addon/src/given.h). */
  giveHost(addr: bigint, len: bigint, alias: bigint): void;
  /** Forgets what giveHost(addr, …, alias) said. */
  ungiveHost(addr: bigint, alias: bigint): void;
  /** Segments as copies take them after giveHost (for tests). */
  resolveSegments(segs: readonly { addr: bigint; len: number }[]): { addr: bigint; len: number }[];
  readonly DEFAULT_WAITER_LIMIT: number;
  /** Launches not yet seen done (by a finished context synchronize, or a wait for the NULL stream of a context with no other) below which a launch may run on the JS thread (addon/src/cuda_exec.h). */
  readonly INLINE_LAUNCH_BOUND: number;
  /** Posted batches of up to this many launches may run on the JS thread. */
  readonly INLINE_BATCH_LAUNCHES: number;
  /** Zero bytes moduleLoad() puts after every image. */
  readonly MODULE_IMAGE_PADDING: number;
  /**
   * Device output capture (addon/src/cuda_output.h): fds 1 and 2 become pipes;
   * what the driver prints there reaches onOutput (kind 1: stdout, printf;
   * 2: stderr, a device assert with its message's lines; 3: another stderr
   * line, one a piece), from the event loop or synchronously inside
   * outputDrain(). One per process.
   */
  outputStart(onOutput: (kind: number, bytes: Buffer) => void): void;
  /** The process's own stderr output: to the real stderr while the capture runs (fd 2 otherwise). */
  outputWriteStderr(bytes: Uint8Array): void;
  /** fflush(stdout), reads both pipes dry, delivers everything captured before returning. */
  outputDrain(): void;
  /** Puts fds 1 and 2 back and delivers what is left. */
  outputStop(): void;
  outputStats(): { running: boolean; queued: number; dropped: number };
  /** A session's own queue served in C, for the short calls of a round trip (addon/src/cuda_ring_server.cc). */
  RingServer: RingServerClass;
  readonly NUM_ATTRS: number;
  readonly HOST_REGISTER_PORTABLE: number;
  readonly HOST_REGISTER_DEVICEMAP: number;
  readonly CTX_MAP_HOST: number;
}

export interface RingServerClass {
  new (session: bigint, cursor: Uint32Array): RingServerNative;
  /** The cursor's words: where the ring stands (in and out), then what serve() did; words: its length. */
  readonly CURSOR: Readonly<Record<'lastAvail' | 'usedIdx' | 'signalledUsed' | 'served' | 'launched' | 'postedError' | 'words', number>>;
  /** Why serve() returned (cuda_ring_server.cc: Stop). */
  readonly STOP: Readonly<Record<'idle' | 'handOff' | 'output' | 'busy' | 'budget' | 'left' | 'posted', number>>;
  /** The table of calls it was built with (addon/src/ring_calls.h), for the test of its declaration: enums as numbers (ring.ts: RING_SERVES, RING_KINDS, RING_DATA). */
  readonly CALLS: readonly RingServerRow[];
}

/** A row of the ring server's table as the addon has it (ring_calls.h: ring::Call). */
export interface RingServerRow {
  cmd: number;
  serves: number;
  alone: boolean;
  posted: boolean;
  ends: number;
  args: number;
  varArgs: boolean;
  data: number;
  posts: boolean;
  syncs: boolean;
  handles: { offset: number; kind: number }[];
  range?: { ptr: number; size: number };
  maxData: number;
}

/** What a batch the ring server took leaves to the device (STOP.left): its ending synchronize or query, and the reply's value. */
export interface LeftBatch {
  head: number;
  /** The ending command (a synchronize, or an event query) and its argument bytes, as the batch had them. */
  cmd: number;
  args: Uint8Array;
  /** The reply's value (the count of posted entries). */
  value: number;
  /** The failed entry's error (an event record's; 0: none), as the device's batch has it (batch.ts: BatchEnding.postedError). */
  postedError: number;
  /** The first failure of the launches it ran (a CUDA error; 0: none): the session's async error, noted first. */
  lateError: number;
}

export interface RingServerNative {
  attach(
    desc: Uint8Array,
    avail: Uint16Array,
    used: Uint16Array,
    eventIdx: boolean,
    indirect: boolean,
    maxIndirect: number,
    callFd: number,
  ): void;
  /** Guest memory: where each region is mapped in this process. */
  setRegions(list: readonly { gpa: bigint; size: bigint; host: bigint }[]): void;
  /** The ring's in-flight record (vhost-user/inflight.ts), or none. */
  setRecord(bytes: Uint8Array | undefined): void;
  /** The session's context now (none: serve() says Busy). */
  bind(ctx: CudaContextNative | null): void;
  /** What the session holds (0: forgotten): its allocations, and its function, stream and event handles with their addon ids. */
  setAlloc(base: bigint, size: bigint): void;
  setFunc(handle: bigint, id: number): void;
  setStream(handle: bigint, id: number): void;
  setEvent(handle: bigint, id: number): void;
  /** The context's per-thread local memory the quota counts (Session.chargeLocal): a launch of a function needing more is left to the handler. */
  setLocalMemory(bytes: bigint): void;
  clear(): void;
  /** Under --gpu-share: a post waits its VM's turn (share/gate.ts) on this table, as process slot proc of VM slot vm; share() for none. */
  share(table?: BigInt64Array, vm?: number, proc?: number, policy?: Policy): void;
  /**
   * Answers what it can (cursor's served counts them); returns why it
   * stopped (STOP). onFlush: after a flush point of a context that
   * launched, hands device output to the session; true if any now waits.
   */
  serve(spinNs: number, budgetNs: number, onFlush: () => boolean): number;
  /** After STOP.left: the batch it took and left unanswered, once. */
  left(): LeftBatch | undefined;
}

let loaded: CudaNative | undefined;

export function cudaNative(): CudaNative {
  if (loaded === undefined) {
    const root = path.resolve(__dirname, '..', '..', '..', '..', '..', '..');
    loaded = require(path.join(root, 'addon', 'build', 'Release', 'qcuda_cuda.node')) as CudaNative;
  }
  return loaded;
}
