// The virtio-qcuda wire protocol, declared once. Everything else is derived
// from this file: the C header the guest kernel driver and library include
// (guest-driver/include/qcuda_proto.h), the guest library's request builders
// (guest-driver/lib/qc_calls.h), both written by `npm run gen` and checked
// current by test/tools/generated.test.ts; the backend's typed decoders
// (proto.ts), the command table's shape checks (commands/), and the provider
// context's methods for the calls a context answers (provider.ts).
//
// A call declares its command number, argument and output structs, the data
// it moves, the handles it takes, whether it may be posted (sent later in a
// BATCH), whether it reports posted work's errors, and which side answers
// it. Structs list their fields in order; the C header gives each the
// natural alignment and explicit padding (every struct's size is a multiple
// of 8), so offsets computed here (layout.ts) are C's.
//
// The declaration is in three files: the constants and statuses
// (constants.ts), the structs (structs.ts) and, here, the calls; this file
// exports all of it, so its users import from one place.
import type { StructName } from './structs';

export { CONSTANTS, STATUSES, type ConstantDecl } from './constants';
export { STRUCTS, type StructName } from './structs';

// ---- calls

/** Kinds of handle a call may take: ids in the caller's session's tables. */
export type HandleKind = 'stream' | 'event' | 'module' | 'function';

/**
 * How a call a provider context answers maps onto its method: the arguments
 * it passes (handles resolved to the provider's objects), what it makes of
 * the result, and the flag bits it admits. From it come the ProviderContext
 * method (provider.ts), its forwarding to a session's worker (isolated.ts,
 * worker.ts) and, for the cuda provider, the addon method of the same name;
 * and, unless `checked`, the call's run (commands/context-call.ts).
 */
export interface ContextDecl {
  readonly method: string;
  readonly params: readonly string[];
  /**
   * none: no value; value: the u64 reply value; signed: an int as the reply
   * value; ready: cudaSuccess or cudaErrorNotReady (not ready either while a
   * host function holds the handle); out: the output struct's fields;
   * stream / event: a new handle of that kind; memory: free and total bytes
   * (the output struct's), as the VM sees them through its quota (a total
   * of at most its limit, a free of at most what it has left).
   */
  readonly result: 'none' | 'value' | 'signed' | 'ready' | 'out' | 'stream' | 'event' | 'memory';
  /** Argument fields holding flags, and the bits each admits (others: cudaErrorInvalidValue). */
  readonly flags?: Readonly<Record<string, number>>;
  /**
   * The call's run is written by hand (commands/<concept>.ts): it checks
   * what the context cannot (ranges, the session's state) and calls the
   * method itself, with the arguments declared here. The method, its
   * forwarding and the addon's call are derived all the same.
   */
  readonly checked?: boolean;
  /**
   * The driver entry point (a member of cuda_api.h's Api, as StreamGetPriority)
   * that the cuda provider's addon method calls once: with the declared
   * arguments (handles as the context's stream, event or function), then a
   * pointer for each result (result none: no pointer; signed or value: one;
   * out: one per field of the out struct, each an int, in its order). The
   * addon method is then generated (addon/src/context_calls.h, for
   * cuda_ctx_calls.cc): none is written by hand.
   */
  readonly driver?: string;
}

/**
 * How the ring server (addon/src/cuda_ring_server.cc) answers a call in C,
 * before the backend sees it, on a session's own queue in its worker, while
 * the session is quiet. The server serves it only when it can tell that the
 * backend would answer it the same way and at once; anything else it leaves
 * to the backend. What it checks comes from the declaration
 * (addon/src/ring_calls.h, generated): the argument bytes (the struct's,
 * exactly, or at least with `varArgs`), no data but what `data` declares,
 * each of `handles` one the session holds (a stream, an event or a
 * function), and `range` inside one of its allocations. A `posted` call is
 * also served as a posted entry of a BATCH it serves, a `syncs` or
 * `endsBatch` one as the batch's ending.
 */
export interface RingDecl {
  /**
   * What the server does with it. sync: waits for the device, or the stream
   * or event in `handles`, only once that is done (polled for the inline
   * wait); query: asks the event in `handles`, never waiting; copy: moves
   * `data` on an idle stream; launch: a kernel launch (qcuda_args_launch,
   * then its parameters), below the launch bound; cluster-launch: a
   * LAUNCH_EX launch (qcuda_args_launch_ex: its cluster and flags checked);
   * record: an event record; batch: a BATCH whose entries it all serves.
   */
  readonly serves: 'sync' | 'query' | 'copy' | 'launch' | 'cluster-launch' | 'record' | 'batch';
  /** Served only as an entry of a batch: sent on its own, the backend answers it. */
  readonly batchOnly?: boolean;
  /** A device range the call touches, [pointer field, size field]: served only inside one of the session's allocations. */
  readonly range?: readonly [ptr: string, size: string];
  /** The most data bytes it moves when served here (its wait is then microseconds); more: the backend's. */
  readonly maxData?: number;
}

export interface CallDecl {
  readonly cmd: number;
  /** For the header: what the call does. */
  readonly doc: string;
  /** What the reply's value is, for calls that return one (those of `context` results stream, event, value and signed say it themselves). */
  readonly value?: string;
  readonly args?: StructName;
  readonly out?: StructName;
  /** Data moved with the call: 'to' the device (readable) or 'from' it (the last writable bytes). */
  readonly data?: 'to' | 'from';
  /** The argument struct may be followed by more argument bytes (checked by the call). */
  readonly varArgs?: boolean;
  /** Argument fields that are handles, and of what. */
  readonly handles?: Readonly<Record<string, HandleKind>>;
  /** The handle field the call ends: the session forgets it before the provider frees it. */
  readonly ends?: string;
  /** The stream field (or 'all') it runs after the host functions marked before it on (callbacks.ts). */
  readonly stream?: string;
  /** The event field whose deferred record it waits for. */
  readonly event?: string;
  /** May be sent later, in a BATCH (it enqueues work and never waits for it). */
  readonly posted?: boolean;
  /**
   * Puts work on the GPU (a launch, a copy, a memset, a batch): under
   * --gpu-share it waits for its VM's turn before it runs (share/gate.ts).
   */
  readonly gpu?: 'posts';
  /** The guest library sends it without flushing posted work first (the batch itself; the callback thread's wait). */
  readonly unbatched?: boolean;
  /**
   * Synchronizes: its status is also the first error of posted work since
   * the last such call. It takes no data and has no output, so it may also
   * end a batch (QCUDA_BATCH_ENDS_SYNC: the guest library sends it with the
   * posted work it flushes).
   */
  readonly syncs?: boolean;
  /**
   * Asks without waiting (a query), takes no data and has no output, so it
   * may end a batch too (QCUDA_BATCH_ENDS_QUERY: the guest library sends it
   * with the posted work it flushes). Unlike a `syncs` call its status is
   * its own: posted work's first failure comes back as the reply's value,
   * which the guest keeps for its next synchronizing call, as it keeps a
   * batch's.
   */
  readonly endsBatch?: boolean;
  /**
   * Who answers: the virtio device itself (requests of the guest kernel
   * driver, no session), the backend from the session's state, or the
   * session's provider context (in the session's worker when isolated).
   */
  readonly side: 'device' | 'backend' | 'context';
  /** For calls a context answers one to one: how (see ContextDecl). */
  readonly context?: ContextDecl;
  /** Answered by the ring server in C where it can be (see RingDecl). */
  readonly ring?: RingDecl;
}

export const CALLS = {
  NOP: { cmd: 0, side: 'device', doc: 'Echo: out = the arguments.', value: 'the queue index' },
  SESSION_OPEN: {
    cmd: 1,
    side: 'device',
    args: 'qcuda_args_session_open',
    doc: 'Sent by the driver when a process opens / closes the device: the backend creates / frees the session (every handle and allocation of that process). The arguments may be left out (no flags).',
    value: 'the new session id',
  },
  SESSION_CLOSE: { cmd: 2, side: 'device', doc: '' },

  // From the guest library (hdr.session filled in by the driver).
  HELLO: {
    cmd: 16,
    side: 'backend',
    args: 'qcuda_args_hello',
    out: 'qcuda_out_hello',
    doc: '',
    value: "the backend's version when status is QCUDA_ST_VERSION",
  },
  DEVICE_PROPS: { cmd: 17, side: 'backend', args: 'qcuda_args_device', out: 'qcuda_out_device_props', doc: '' },
  SET_DEVICE: { cmd: 18, side: 'backend', args: 'qcuda_args_device', doc: '' },
  DEVICE_SYNC: {
    cmd: 19,
    side: 'context',
    stream: 'all',
    syncs: true,
    doc: 'cudaDeviceSynchronize, cuCtxSynchronize',
    ring: { serves: 'sync' },
  },
  DEVICE_RESET: { cmd: 20, side: 'backend', doc: "frees the session's resources" },
  MEM_GET_INFO: {
    cmd: 21,
    side: 'context',
    out: 'qcuda_out_mem_info',
    doc: 'cudaMemGetInfo',
    context: { method: 'memGetInfo', params: [], result: 'memory' },
  },
  MALLOC: { cmd: 22, side: 'context', args: 'qcuda_args_malloc', doc: '', value: 'the device pointer' },
  FREE: { cmd: 23, side: 'context', args: 'qcuda_args_ptr', doc: '' },
  MEMCPY_HTOD: {
    cmd: 24,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy',
    data: 'to',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'src unused',
    ring: { serves: 'copy', range: ['dst', 'size'], maxData: 64 * 1024 },
  },
  MEMCPY_DTOH: {
    cmd: 25,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy',
    data: 'from',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'dst unused',
    ring: { serves: 'copy', range: ['src', 'size'], maxData: 64 * 1024 },
  },
  MEMCPY_DTOD: {
    cmd: 26,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'posted with async = 1',
  },
  MEMSET: {
    cmd: 27,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memset',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'posted with async = 1',
  },
  HOST_MAP: { cmd: 28, side: 'context', args: 'qcuda_args_host_map', doc: 'guest memory the GPU may address', value: 'its device pointer' },
  HOST_MAP_PAGES: {
    cmd: 160,
    side: 'context',
    args: 'qcuda_args_host_map_pages',
    varArgs: true,
    doc: 'HOST_MAP of guest pages that are not physically contiguous (managed or mapped memory of any size): the backend maps them in order into one range of its own and registers that; QCUDA_MAX_EXTENTS at most',
    value: 'its device pointer',
  },
  HOST_UNMAP: { cmd: 29, side: 'context', args: 'qcuda_args_ptr', doc: 'ptr: the device pointer' },

  STREAM_CREATE: {
    cmd: 32,
    side: 'context',
    args: 'qcuda_args_stream_create',
    doc: 'cudaStreamCreateWithPriority',
    context: { method: 'streamCreate', params: ['flags', 'priority'], result: 'stream', flags: { flags: 0x1 } },
  },
  STREAM_DESTROY: {
    cmd: 33,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    ends: 'handle',
    doc: 'cudaStreamDestroy',
    context: { method: 'streamDestroy', params: ['handle'], result: 'none' },
  },
  STREAM_SYNC: {
    cmd: 34,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    stream: 'handle',
    syncs: true,
    doc: 'cudaStreamSynchronize',
    context: { method: 'streamSynchronize', params: ['handle'], result: 'none' },
    ring: { serves: 'sync' },
  },
  STREAM_QUERY: {
    cmd: 35,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    endsBatch: true,
    doc: 'cudaStreamQuery: status = cudaSuccess or cudaErrorNotReady',
    context: { method: 'streamQuery', params: ['handle'], result: 'ready' },
  },
  STREAM_WAIT_EVENT: {
    cmd: 36,
    side: 'context',
    args: 'qcuda_args_stream_wait_event',
    handles: { stream: 'stream', event: 'event' },
    stream: 'stream',
    event: 'event',
    posted: true,
    doc: 'cudaStreamWaitEvent',
    context: { method: 'streamWaitEvent', params: ['stream', 'event', 'flags'], result: 'none' },
  },
  STREAM_SET_ATTR: { cmd: 66, side: 'context', args: 'qcuda_args_stream_attr', handles: { stream: 'stream' }, doc: '' },
  STREAM_GET_ATTR: {
    cmd: 67,
    side: 'context',
    args: 'qcuda_args_stream_attr',
    out: 'qcuda_out_stream_attr_value',
    handles: { stream: 'stream' },
    doc: 'args.value unused',
  },
  STREAM_GET_PRIORITY: {
    cmd: 71,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'stream' },
    doc: 'cudaStreamGetPriority',
    context: { method: 'streamGetPriority', params: ['handle'], result: 'signed', driver: 'StreamGetPriority' },
  },
  STREAM_PRIORITY_RANGE: {
    cmd: 72,
    side: 'context',
    out: 'qcuda_out_priority_range',
    doc: "cudaDeviceGetStreamPriorityRange (cuCtxGetStreamPriorityRange) of the session's context",
    context: { method: 'streamPriorityRange', params: [], result: 'out', driver: 'CtxGetStreamPriorityRange' },
  },
  CTX_RESET_PERSISTING_L2: {
    cmd: 73,
    side: 'context',
    doc: 'cudaCtxResetPersistingL2Cache: persisting L2 lines become normal',
    context: { method: 'resetPersistingL2Cache', params: [], result: 'none', driver: 'CtxResetPersistingL2Cache' },
  },

  EVENT_CREATE: {
    cmd: 40,
    side: 'context',
    args: 'qcuda_args_event_create',
    doc: 'cudaEventCreateWithFlags, cuEventCreate',
    context: { method: 'eventCreate', params: ['flags'], result: 'event', flags: { flags: 0x7 } },
  },
  EVENT_DESTROY: {
    cmd: 41,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    ends: 'handle',
    doc: 'cudaEventDestroy',
    context: { method: 'eventDestroy', params: ['handle'], result: 'none' },
  },
  EVENT_RECORD: {
    cmd: 42,
    side: 'context',
    args: 'qcuda_args_event_record',
    handles: { event: 'event', stream: 'stream' },
    stream: 'stream',
    posted: true,
    doc: 'cudaEventRecord',
    context: { method: 'eventRecord', params: ['event', 'stream'], result: 'none' },
    ring: { serves: 'record', batchOnly: true },
  },
  EVENT_SYNC: {
    cmd: 43,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    event: 'handle',
    syncs: true,
    doc: 'cudaEventSynchronize',
    context: { method: 'eventSynchronize', params: ['handle'], result: 'none' },
    ring: { serves: 'sync' },
  },
  EVENT_QUERY: {
    cmd: 44,
    side: 'context',
    args: 'qcuda_args_handle',
    handles: { handle: 'event' },
    endsBatch: true,
    doc: 'cudaEventQuery: status = cudaSuccess or cudaErrorNotReady',
    context: { method: 'eventQuery', params: ['handle'], result: 'ready' },
    ring: { serves: 'query' },
  },
  EVENT_ELAPSED: {
    cmd: 45,
    side: 'context',
    args: 'qcuda_args_event_elapsed',
    out: 'qcuda_out_event_elapsed',
    handles: { start: 'event', end: 'event' },
    doc: '',
  },

  MODULE_UPLOAD: {
    cmd: 48,
    side: 'backend',
    args: 'qcuda_args_module_upload',
    data: 'to',
    doc: 'Modules: a fat binary crosses once per module: first MODULE_UPLOAD (data to device, chunked like any transfer) into a staging buffer of the session named by upload_id, then MODULE_LOAD of that buffer (value = module handle; the staging buffer is freed).',
  },
  MODULE_LOAD: { cmd: 49, side: 'context', args: 'qcuda_args_module_load', doc: '', value: 'the module handle' },
  MODULE_FIND: {
    cmd: 57,
    side: 'backend',
    args: 'qcuda_args_module_find',
    doc: 'Before MODULE_UPLOAD: an image the VM loaded before (the backend keeps images by content, bounded in bytes) is staged as upload_id without crossing again; then MODULE_LOAD as after an upload.',
    value: '1: staged (no MODULE_UPLOAD needed); 0: not cached, upload it',
  },
  LINK: {
    cmd: 58,
    side: 'context',
    args: 'qcuda_args_link',
    out: 'qcuda_out_link',
    doc: "JIT linking: the host driver links the uploaded inputs (cuLinkCreate/AddData/Complete) into a cubin, kept by the backend (at most 4 results a session, counted against the VM's staging bound) until LINK_READ has read its last byte or the session ends. A failed link answers status 0 with link_status set and its logs kept.",
    value: 'the result id (for LINK_READ)',
  },
  LINK_READ: {
    cmd: 59,
    side: 'backend',
    args: 'qcuda_args_link_read',
    data: 'from',
    doc: "Copies a LINK result's bytes from args.offset into the data (from device: one chunk, data_offset 0, data_len 1..QCUDA_CHUNK); the result is dropped once its last byte is read.",
    value: 'the bytes written',
  },
  MODULE_UNLOAD: { cmd: 50, side: 'context', args: 'qcuda_args_handle', handles: { handle: 'module' }, ends: 'handle', doc: '' },
  FUNC_GET: {
    cmd: 51,
    side: 'context',
    args: 'qcuda_args_symbol',
    out: 'qcuda_out_func_info',
    handles: { module: 'module' },
    doc: '',
    value: 'the function handle',
  },
  VAR_GET: {
    cmd: 52,
    side: 'context',
    args: 'qcuda_args_symbol',
    out: 'qcuda_out_var_info',
    handles: { module: 'module' },
    doc: 'the variable becomes addressable memory of the session',
  },
  LAUNCH: {
    cmd: 53,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_launch',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    posted: true,
    doc: 'param_bytes of packed parameters follow the struct; enqueued, not waited for: errors of the kernel surface at the next synchronizing call',
    ring: { serves: 'launch' },
  },
  LAUNCH_COOPERATIVE: {
    cmd: 68,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_launch',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    doc: 'as LAUNCH, for a grid whose blocks synchronize (cudaLaunchCooperativeKernel)',
  },
  LAUNCH_EX: {
    cmd: 69,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_launch_ex',
    varArgs: true,
    handles: { func: 'function', stream: 'stream' },
    stream: 'stream',
    posted: true,
    doc: "as LAUNCH, with launch attributes (cuLaunchKernelEx): thread-block clusters, cooperative. Sent on its own, whether the grid can be launched so is this call's answer; the guest library posts it only once the same function, block, cluster and shared memory have launched (every launch of Hopper's cuBLASLt kernels is one)",
    ring: { serves: 'cluster-launch', batchOnly: true },
  },
  FUNC_ATTRS: {
    cmd: 60,
    side: 'context',
    args: 'qcuda_args_handle',
    out: 'qcuda_out_func_attrs',
    handles: { handle: 'function' },
    doc: '',
  },
  FUNC_SET_ATTR: {
    cmd: 61,
    side: 'context',
    args: 'qcuda_args_func_attr',
    handles: { func: 'function' },
    doc: 'attr: a cudaFuncAttribute',
  },
  OCCUPANCY_BLOCKS: {
    cmd: 62,
    side: 'context',
    args: 'qcuda_args_occupancy',
    handles: { func: 'function' },
    doc: '',
    value: 'active blocks per SM',
  },
  OCCUPANCY_SMEM: {
    cmd: 63,
    side: 'context',
    args: 'qcuda_args_occupancy',
    handles: { func: 'function' },
    doc: '',
    value: 'dynamic shared memory bytes per block that lets num_blocks blocks fit',
  },
  OCCUPANCY_CLUSTERS: {
    cmd: 74,
    side: 'context',
    args: 'qcuda_args_cluster_occupancy',
    handles: { func: 'function' },
    context: {
      method: 'occupancyClusters',
      params: ['func', 'grid', 'block', 'smem', 'cluster', 'policy', 'query'],
      result: 'signed',
      checked: true,
    },
    doc: 'cuOccupancyMaxActiveClusters (query 0) or cuOccupancyMaxPotentialClusterSize (query 1) of the launch configuration given, answered by the driver',
    value: 'the number of clusters, or the cluster size',
  },
  TENSOR_MAP_ENCODE: {
    cmd: 75,
    side: 'context',
    args: 'qcuda_args_tensor_map',
    out: 'qcuda_out_tensor_map',
    doc: "cuTensorMapEncodeTiled, cuTensorMapEncodeIm2col, cuTensorMapEncodeIm2colWide or cuTensorMapReplaceAddress (args.kind): the driver's 128-byte descriptor of Hopper's tensor memory accelerator",
  },
  LIMIT_SET: { cmd: 64, side: 'context', args: 'qcuda_args_limit', doc: "a cudaLimit of the session's context" },
  LIMIT_GET: { cmd: 65, side: 'context', args: 'qcuda_args_limit', doc: 'args.value unused', value: 'the limit' },

  MEMCPY_3D_HTOD: {
    cmd: 140,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy_3d',
    data: 'to',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'cudaMemcpy2D/3D from guest memory (src_kind QCUDA_MEM_HOST) to linear memory or an array',
  },
  MEMCPY_3D_DTOH: {
    cmd: 141,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy_3d',
    data: 'from',
    stream: 'stream',
    handles: { stream: 'stream' },
    doc: 'cudaMemcpy2D/3D from linear memory or an array to guest memory (dst_kind QCUDA_MEM_HOST)',
  },
  MEMCPY_3D_DTOD: {
    cmd: 142,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memcpy_3d',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'cudaMemcpy2D/3D between linear memory and arrays on the device; posted with async = 1',
  },
  MEMSET_2D: {
    cmd: 143,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_memset_2d',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'cudaMemset2D (cuMemsetD2D8): height rows of width bytes, pitch apart; posted with async = 1',
  },
  ARRAY_CREATE: {
    cmd: 144,
    side: 'context',
    args: 'qcuda_args_array_create',
    doc: 'a CUDA array, counted against the quota',
    value: 'the array handle',
  },
  ARRAY_DESTROY: { cmd: 145, side: 'context', args: 'qcuda_args_handle', doc: 'cudaFreeArray, cuArrayDestroy' },
  TEX_CREATE: {
    cmd: 146,
    side: 'context',
    args: 'qcuda_args_tex_create',
    doc: 'cudaCreateTextureObject, cuTexObjectCreate',
    value: 'the texture object, as kernels take it',
  },
  TEX_DESTROY: { cmd: 147, side: 'context', args: 'qcuda_args_handle', doc: 'handle: the texture object' },
  SURF_CREATE: {
    cmd: 148,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: 'cudaCreateSurfaceObject (cuSurfObjectCreate) of an array (handle)',
    value: 'the surface object, as kernels take it',
  },
  SURF_DESTROY: { cmd: 149, side: 'context', args: 'qcuda_args_handle', doc: 'handle: the surface object' },

  MIPMAP_CREATE: {
    cmd: 150,
    side: 'context',
    args: 'qcuda_args_mipmap_create',
    doc: 'cudaMallocMipmappedArray (cuMipmappedArrayCreate), counted against the quota (every level)',
    value: 'the mipmapped array handle',
  },
  MIPMAP_LEVEL: {
    cmd: 151,
    side: 'context',
    args: 'qcuda_args_mipmap_level',
    doc: 'cudaGetMipmappedArrayLevel (cuMipmappedArrayGetLevel): the level as an array of the session (freed with its mipmapped array)',
    value: "the level's array handle",
  },
  MIPMAP_DESTROY: { cmd: 152, side: 'context', args: 'qcuda_args_handle', doc: 'cudaFreeMipmappedArray, cuMipmappedArrayDestroy' },

  GRAPH_CREATE: {
    cmd: 170,
    side: 'context',
    doc: "Graphs run as CUDA graphs of the session's context: those with conditional nodes (a kernel sets a condition through the driver) and every other graph the host can run (a replay costs one launch). GRAPH_CREATE makes the graph their handles belong to, GRAPH_COND_HANDLE a handle, GRAPH_INSTANTIATE an executable graph of nodes, GRAPH_LAUNCH runs it; graphs with host nodes or copies of pageable memory the library runs step by step itself",
    value: 'the graph handle',
  },
  GRAPH_DESTROY: { cmd: 171, side: 'context', args: 'qcuda_args_handle', doc: 'its executable graphs live on' },
  GRAPH_COND_HANDLE: {
    cmd: 172,
    side: 'context',
    args: 'qcuda_args_graph_cond',
    doc: 'cudaGraphConditionalHandleCreate',
    value: 'the handle, as kernels take it',
  },
  GRAPH_INSTANTIATE: {
    cmd: 173,
    side: 'context',
    args: 'qcuda_args_graph_instantiate',
    doc: 'cudaGraphInstantiate',
    value: 'the executable graph handle',
  },
  GRAPH_EXEC_DESTROY: { cmd: 174, side: 'context', args: 'qcuda_args_handle', doc: '' },
  GRAPH_LAUNCH: {
    cmd: 175,
    side: 'context',
    gpu: 'posts',
    args: 'qcuda_args_graph_launch',
    stream: 'stream',
    handles: { stream: 'stream' },
    posted: true,
    doc: 'enqueued, not waited for; may be posted (the guest library replays every graph the host can run so)',
  },

  VMM_RESERVE: {
    cmd: 180,
    side: 'context',
    args: 'qcuda_args_vmm_reserve',
    doc: 'Virtual memory management (cuMem*): cuMemAddressReserve, a range of device addresses of the session with nothing behind it. VMM_CREATE makes physical memory (counted against the quota like MALLOC), VMM_MAP puts it at an address of a reservation, VMM_SET_ACCESS makes the mapping memory of the session (copies, memsets and kernels may use it). Physical memory is freed once released and unmapped, as CUDA frees it.',
    value: "the range's start",
  },
  VMM_FREE: {
    cmd: 181,
    side: 'context',
    args: 'qcuda_args_vmm_range',
    doc: 'cuMemAddressFree of a whole reservation, with nothing mapped in it',
  },
  VMM_CREATE: {
    cmd: 182,
    side: 'context',
    args: 'qcuda_args_vmm_create',
    doc: "cuMemCreate: pinned device memory of the session's device",
    value: 'the allocation handle',
  },
  VMM_RELEASE: {
    cmd: 183,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: 'cuMemRelease: the handle is gone; the memory lives on while mapped',
  },
  VMM_MAP: {
    cmd: 184,
    side: 'context',
    args: 'qcuda_args_vmm_map',
    doc: 'cuMemMap: granularity-aligned, inside one reservation, over nothing mapped',
  },
  VMM_UNMAP: {
    cmd: 185,
    side: 'context',
    args: 'qcuda_args_vmm_range',
    doc: 'cuMemUnmap: whole mappings, one after another, and nothing unmapped between them',
  },
  VMM_SET_ACCESS: { cmd: 186, side: 'context', args: 'qcuda_args_vmm_access', doc: 'cuMemSetAccess over whole mappings (as VMM_UNMAP)' },
  VMM_GET_ACCESS: {
    cmd: 187,
    side: 'context',
    args: 'qcuda_args_ptr',
    doc: 'cuMemGetAccess of the mapping holding ptr',
    value: 'its access flags (0 until set)',
  },
  VMM_RETAIN: {
    cmd: 188,
    side: 'context',
    args: 'qcuda_args_ptr',
    doc: 'cuMemRetainAllocationHandle: the handle of the allocation mapped at ptr, held once more (VMM_RELEASE it)',
    value: 'the handle',
  },
  VMM_SIZE: {
    cmd: 189,
    side: 'context',
    args: 'qcuda_args_handle',
    doc: "the size of a live handle's allocation (cuMemGetAllocationPropertiesFromHandle checks the handle)",
    value: 'its bytes',
  },
  VMM_EXPORT: {
    cmd: 176,
    side: 'context',
    args: 'qcuda_args_handle',
    out: 'qcuda_ipc_handle',
    doc: "cuMemExportToShareableHandle (POSIX fd; libcuda puts the token in a sealed memfd): the token of the session's live allocation handle, the same one until the allocation is freed; cudaErrorNotSupported where the provider cannot share memory between processes",
  },
  VMM_IMPORT: {
    cmd: 177,
    side: 'context',
    args: 'qcuda_ipc_handle',
    doc: "cuMemImportFromShareableHandle: a handle of this session naming the allocation a VMM_EXPORT token names (map it with VMM_MAP); the memory stays its owner's, and when the owner frees it (release and unmap, reset, exit) the importers' mappings of it are unmapped. cudaErrorInvalidValue for a token this VM's backend never minted or whose allocation was freed",
    value: 'the allocation handle',
  },

  CAN_ACCESS_PEER: {
    cmd: 190,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceCanAccessPeer (args.attr unused)',
    value: "1: device may reach peer's memory; 0: not (a device and itself too)",
  },
  P2P_ATTRIBUTE: {
    cmd: 191,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceGetP2PAttribute(attr, device, peer): two distinct devices',
    value: "the attribute's value",
  },
  PEER_ENABLE: {
    cmd: 192,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: "cudaDeviceEnablePeerAccess (cuCtxEnablePeerAccess): the current device's context may reach args.peer's memory (args.device and attr unused); cudaErrorPeerAccessAlreadyEnabled the second time, until a PEER_DISABLE or reset",
  },
  PEER_DISABLE: {
    cmd: 193,
    side: 'backend',
    args: 'qcuda_args_peer',
    doc: 'cudaDeviceDisablePeerAccess (cuCtxDisablePeerAccess) of args.peer (as PEER_ENABLE); cudaErrorPeerAccessNotEnabled where not enabled',
  },
  IPC_GET: {
    cmd: 194,
    side: 'backend',
    args: 'qcuda_args_ptr',
    out: 'qcuda_ipc_handle',
    doc: "cudaIpcGetMemHandle: the handle of the session's allocation that starts at args.ptr (the same one each time until it is freed)",
  },
  IPC_OPEN: {
    cmd: 195,
    side: 'backend',
    args: 'qcuda_ipc_handle',
    doc: "cudaIpcOpenMemHandle: another process's allocation, reachable by copies until IPC_CLOSE or its owner frees it; cudaErrorInvalidResourceHandle for a handle this VM's backend never minted or whose memory was freed, cudaErrorDeviceUninitialized (CUDA's invalid context) in the process that minted it, cudaErrorNotSupported where the provider cannot share memory between processes",
    value: "the allocation's address in this process",
  },
  IPC_CLOSE: {
    cmd: 196,
    side: 'backend',
    args: 'qcuda_args_ptr',
    doc: 'cudaIpcCloseMemHandle of a pointer IPC_OPEN returned',
  },
  IPC_EVENT_GET: {
    cmd: 197,
    side: 'backend',
    args: 'qcuda_args_handle',
    out: 'qcuda_ipc_handle',
    doc: "cudaIpcGetEventHandle: the handle (size 0) of the session's event args.handle, made with cudaEventInterprocess | cudaEventDisableTiming (else cudaErrorInvalidValue); the same one until the event is destroyed",
  },
  IPC_EVENT_OPEN: {
    cmd: 198,
    side: 'backend',
    args: 'qcuda_ipc_handle',
    doc: "cudaIpcOpenEventHandle: an event of this process that another process's event completes (wait on it, synchronize, query; destroy it as any event); refusals as IPC_OPEN",
    value: "the new event's handle",
  },

  BATCH: {
    cmd: 54,
    side: 'backend',
    gpu: 'posts',
    unbatched: true,
    args: 'qcuda_args_batch',
    data: 'to',
    doc: "Posted work: several commands in one request (data to device: args.bytes of entries, each a struct qcuda_batch_entry, then its argument struct as the command takes it, then padding to 8 bytes). Only commands that enqueue and never wait may be posted (the postable ones: LAUNCH, LAUNCH_EX and GRAPH_LAUNCH, MEMSET and MEMCPY_DTOD with async = 1, EVENT_RECORD, STREAM_WAIT_EVENT, HOST_FUNC). They run in order; one that fails does not stop the others. status = the first failure's. A malformed batch runs nothing. With flags QCUDA_BATCH_ENDS_SYNC the last entry is a synchronizing command, run after the others: status = its status, which reports the others' first failure as posted work's error. With QCUDA_BATCH_ENDS_QUERY the last entry is a query (declared endsBatch), run after the others: status = its own status (cudaSuccess or cudaErrorNotReady, or its own failure), value = the others' first failure.",
    value:
      "the failed entry's index (the entry count if none failed; with QCUDA_BATCH_ENDS_SYNC, among the entries before the last); with QCUDA_BATCH_ENDS_QUERY, the first failure's status among the entries before the last (0 if none), which the guest keeps as posted work's error",
    ring: { serves: 'batch' },
  },
  HOST_FUNC: {
    cmd: 55,
    side: 'backend',
    args: 'qcuda_args_host_func',
    handles: { stream: 'stream' },
    posted: true,
    doc: "Host functions (cudaLaunchHostFunc, cudaStreamAddCallback) run in the guest process, in stream order. HOST_FUNC marks a point in a stream: work on that stream after it waits until the guest says the function has run. The library's callback thread sends CALLBACK_WAIT, which says that callback `done` (0: none) has run and waits for the next marked point the GPU has reached.",
  },
  CALLBACK_WAIT: { cmd: 70, side: 'backend', args: 'qcuda_args_callback_wait', out: 'qcuda_out_callback', unbatched: true, doc: '' },
  OUTPUT_READ: {
    cmd: 56,
    side: 'backend',
    out: 'qcuda_out_output_read',
    data: 'from',
    doc: "Device-side printf and assert output of the session's kernels. The backend keeps what CUDA flushed for the session (at synchronizing calls, blocking copies, module load/unload, context destruction; some at other moments) and OR-s QCUDA_ST_OUTPUT into the status of every reply to the session while any is waiting. OUTPUT_READ takes the oldest waiting output, up to data_len bytes of one kind, into the data (from device, written from its start; one chunk: data_offset 0, data_len 1..QCUDA_CHUNK, since reading consumes).",
    value: 'the bytes written (0: nothing was waiting)',
  },
} as const satisfies Record<string, CallDecl>;

export type CmdName = keyof typeof CALLS;
