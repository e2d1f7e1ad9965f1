// The qcuda command table: for every command, the argument struct it takes,
// the output struct it writes, whether it moves data, and what it does. Every
// device pointer and handle is checked against the caller's session first.
import { batchCommand, launchDesc } from './batch';
import { checkFuncAttr, checkLimit, checkStreamAttr, limitBytes, limitReservesMemory, OCCUPANCY_FLAGS, residentThreads, streamAttrValue } from './attrs';
import { CudaErr, CudaError } from './cuda-error';
import { checkImage } from './module-image';
import { OUTPUT_READ } from './output';
import type { GuestSeg, StreamRef } from './provider';
import { Cmd, decode, encode, QCUDA_CAP_GPU, QCUDA_MAX_NAME, QCUDA_MAX_PARAMS, QCUDA_ATTR_VALUE_BYTES, QCUDA_NUM_ATTRS, QCUDA_NUM_FUNC_ATTRS, QCUDA_PROTO_VERSION, Status, type Decoded, type StructName } from './proto';
import type { Session } from './session';

/** What a command sees: its session, decoded arguments and its chunk of data. */
export interface Call {
  session: Session;
  args: Decoded;
  queue: number;
  /** The data of this chunk: the bytes after the arguments (to device) or after the output (from device). */
  data: GuestSeg[];
  dataOffset: bigint;
  dataLen: bigint;
  dev: DeviceState;
  /** Argument bytes after the argument struct (commands with varArgs). */
  extra: Uint8Array;
}

/** What the commands need from the device. */
export interface DeviceState {
  readonly provider: import('./provider').Provider;
  /** Host address of a guest-physical range, checked whole. */
  hostAddressOfGpa(gpa: bigint, size: bigint): bigint;
}

export interface Result {
  status?: number;
  value?: bigint;
  out?: Uint8Array;
}

export interface Command {
  args?: StructName;
  out?: StructName;
  data?: 'to' | 'from';
  /** The argument struct may be followed by more argument bytes (hdr.len >= its size); run checks them. */
  varArgs?: boolean;
  /** The argument naming the stream it works on ('all': every stream): it runs only after the host
   * functions marked there before it have run (see callbacks.ts). */
  stream?: string;
  /** The argument naming an event it uses: it waits for a deferred record of that event. */
  event?: string;
  run(c: Call): Promise<Result | void>;
}

const u64 = (c: Call, k: string) => c.args[k] as bigint;
const u32 = (c: Call, k: string) => c.args[k] as number;
/** The caller's context (created on first use). */
const ctx = (c: Call) => c.session.context();
/** cudaStreamQuery / cudaEventQuery answer with a status, not a value. */
const readiness = (done: boolean): Result => ({ status: done ? CudaErr.Success : CudaErr.NotReady });

/** A transfer's chunk must lie inside the transfer. */
function chunkOf(c: Call, size: bigint): { at: bigint; len: bigint } {
  if (c.dataOffset + c.dataLen > size) throw new CudaError(CudaErr.InvalidValue, `chunk ${c.dataOffset}+${c.dataLen} outside a transfer of ${size}`);
  return { at: c.dataOffset, len: c.dataLen };
}

async function malloc(c: Call): Promise<Result> {
  const size = u64(c, 'size');
  if (size === 0n) return { value: 0n }; // cudaMalloc(0) succeeds with a NULL pointer
  // Reserved before the first await: concurrent mallocs cannot all pass the quota.
  const r = c.session.reserve(size);
  try {
    const x = await ctx(c);
    const ptr = await x.malloc(size);
    c.session.addAlloc(x, ptr, r); // after a reset meanwhile, the memory went with the old context
    return { value: ptr };
  } catch (e) {
    c.session.unreserve(r);
    throw e;
  }
}

async function free(c: Call): Promise<Result | void> {
  const ptr = u64(c, 'ptr');
  if (ptr === 0n) return; // cudaFree(NULL) is a no-op
  c.session.removeAlloc(ptr);
  await (await ctx(c)).free(ptr);
}

async function memInfo(c: Call): Promise<Result> {
  const info = await c.dev.provider.memGetInfo(c.session.device);
  let { free: avail, total } = info;
  const quota = c.session.vm.quota;
  const left = quota.left;
  if (left !== undefined) {
    total = quota.limit < total ? quota.limit : total;
    avail = left < avail ? left : avail;
  }
  return { out: encode('qcuda_out_mem_info', { free: avail, total }) };
}

async function props(c: Call): Promise<Result> {
  const device = u32(c, 'device');
  if (device >= c.dev.provider.deviceCount()) throw new CudaError(CudaErr.InvalidDevice, `device ${device}`);
  const p = c.dev.provider.deviceProps(device);
  const limit = c.session.vm.quota.limit;
  const attrs = new Uint32Array(QCUDA_NUM_ATTRS);
  attrs.set(new Uint32Array(p.attrs.buffer, p.attrs.byteOffset, Math.min(p.attrs.length, QCUDA_NUM_ATTRS)));
  return {
    out: encode('qcuda_out_device_props', {
      name: p.name, uuid: p.uuid, total_mem: limit > 0n && limit < p.totalMem ? limit : p.totalMem, attrs,
    }),
  };
}

/** The NUL-terminated name of a qcuda_args_symbol. */
function symbolName(c: Call): string {
  const raw = c.args.name as Uint8Array;
  const end = raw.indexOf(0);
  if (end < 0) throw new CudaError(CudaErr.InvalidValue, `symbol name not NUL-terminated within ${QCUDA_MAX_NAME} bytes`);
  if (end === 0) throw new CudaError(CudaErr.InvalidValue, 'empty symbol name');
  if (raw.subarray(0, end).some((b) => b < 0x21 || b > 0x7e)) throw new CudaError(CudaErr.SymbolNotFound, 'symbol name with bytes no symbol has');
  return Buffer.from(raw.subarray(0, end)).toString('latin1');
}

async function funcGet(c: Call): Promise<Result> {
  const mh = u64(c, 'module');
  const name = symbolName(c);
  const module = c.session.module(mh);
  let fh = c.session.knownFunction(mh, name);
  if (fh === undefined) {
    const x = await ctx(c);
    const info = await x.functionGet(module, name, QCUDA_MAX_PARAMS);
    if (info.params.length > QCUDA_MAX_PARAMS) throw new CudaError(CudaErr.NotSupported, `kernel ${name} has ${info.params.length} parameters (at most ${QCUDA_MAX_PARAMS})`);
    fh = c.session.addFunction(x, mh, name, { ref: info.ref, module: mh, params: info.params, paramBytes: info.paramBytes });
  }
  const f = c.session.func(fh);
  const offset = new Uint32Array(QCUDA_MAX_PARAMS);
  const size = new Uint32Array(QCUDA_MAX_PARAMS);
  f.params.forEach((p, i) => {
    offset[i] = p.offset;
    size[i] = p.size;
  });
  return { value: fh, out: encode('qcuda_out_func_info', { num_params: f.params.length, param_bytes: f.paramBytes, offset, size }) };
}

async function varGet(c: Call): Promise<Result> {
  const mh = u64(c, 'module');
  const name = symbolName(c);
  const module = c.session.module(mh);
  const x = await ctx(c);
  const v = await x.variableGet(module, name);
  c.session.addVariable(x, mh, name, v.dptr, v.size);
  return { out: encode('qcuda_out_var_info', { dptr: v.dptr, size: v.size }) };
}

/**
 * What the command must wait for first: the host functions marked before on
 * its stream. Undefined (the usual case) lets the command start in the same
 * tick, before the next request of the ring is even parsed.
 */
export function gateOf(c: Call, spec: Command): Promise<unknown> | undefined {
  const cb = c.session.callbacks;
  const e = spec.event ? cb.eventGate(c.args[spec.event] as bigint) : undefined;
  const g = !spec.stream ? undefined : spec.stream === 'all' ? cb.all() : cb.gate(c.args[spec.stream] as bigint);
  return e && g ? Promise.all([e, g]) : e ?? g;
}

/**
 * HOST_FUNC: marks the point at once (later work on the stream waits for the
 * function); an event recorded there, once the stream's earlier gates are
 * open, says when the GPU gets to it.
 */
async function hostFunc(c: Call): Promise<void> {
  const h = u64(c, 'stream');
  const stream = c.session.stream(h);
  const gate = c.session.callbacks.gate(h);
  const record = reachedAt(c, stream);
  c.session.callbacks.mark(h, u64(c, 'id'), gate ? gate.then(record) : record());
}

/** Enqueues an event on the stream and resolves (never rejects) with its status once the GPU got there. */
function reachedAt(c: Call, stream: StreamRef | undefined): () => Promise<number> {
  const code = (e: unknown) => (e instanceof CudaError ? e.code : CudaErr.Unknown);
  return async () => {
    try {
      const x = await ctx(c);
      const ev = await x.eventCreate(2); // cudaEventDisableTiming
      await x.eventRecord(ev, stream);
      const status = await x.eventSynchronize(ev).then(() => 0, code);
      await x.eventDestroy(ev).catch(() => undefined);
      return status;
    } catch (e) {
      return code(e); // the function still runs, with the stream's error, as CUDA calls it
    }
  };
}

/** A synchronizing command's status: posted work's failure that came after its batch, if any. */
function withAsyncError(run: (c: Call) => Promise<unknown>): (c: Call) => Promise<Result | void> {
  return async (c) => {
    await run(c);
    const e = c.session.takeAsyncError();
    if (e !== 0) return { status: e };
  };
}

async function callbackWait(c: Call): Promise<Result> {
  const r = await c.session.callbacks.wait(u64(c, 'done'));
  return { out: encode('qcuda_out_callback', { id: r.id, status: r.status }) };
}

/** LAUNCH, and LAUNCH_COOPERATIVE (the same arguments) when cooperative. */
async function launch(c: Call, cooperative = false): Promise<void> {
  const l = launchDesc(c.session, c.args, c.extra);
  const x = await ctx(c);
  if (cooperative) await x.launchCooperative(l.f, l.grid, l.block, l.sharedMem, l.stream, l.params);
  else await x.launch(l.f, l.grid, l.block, l.sharedMem, l.stream, l.params);
}

// ---- function attributes, occupancy, limits, stream attributes (the checks: attrs.ts)

async function funcAttrs(c: Call): Promise<Result> {
  const f = c.session.func(u64(c, 'handle'));
  const v = await (await ctx(c)).funcGetAttributes(f.ref);
  if (v.length !== QCUDA_NUM_FUNC_ATTRS) throw new CudaError(CudaErr.Unknown, `the provider gave ${v.length} function attributes`);
  return { out: encode('qcuda_out_func_attrs', { values: new Uint32Array(v.buffer, v.byteOffset, v.length) }) };
}

// Arguments are checked before the function handle: the guest library has
// resolved the function already (cudaErrorInvalidDeviceFunction is its answer).
async function funcSetAttr(c: Call): Promise<void> {
  const attr = u32(c, 'attr');
  const value = c.args.value as number;
  checkFuncAttr(attr, value);
  const f = c.session.func(u64(c, 'func'));
  await (await ctx(c)).funcSetAttribute(f.ref, attr, value);
}

/** A count CUDA takes as a signed int: negative ones are refused. */
function count(c: Call, k: string): number {
  const n = c.args[k] as number;
  if (n < 0) throw new CudaError(CudaErr.InvalidValue, `${k} ${n} is negative`);
  return n;
}

async function occupancyBlocks(c: Call): Promise<Result> {
  const flags = u32(c, 'flags');
  if (flags & ~OCCUPANCY_FLAGS) throw new CudaError(CudaErr.InvalidValue, `occupancy flags 0x${flags.toString(16)}`);
  const blockSize = count(c, 'block_size');
  const f = c.session.func(u64(c, 'func'));
  const n = await (await ctx(c)).occupancyBlocks(f.ref, blockSize, u64(c, 'dynamic_smem'), flags);
  return { value: BigInt(n) };
}

async function occupancySmem(c: Call): Promise<Result> {
  const numBlocks = count(c, 'num_blocks');
  const blockSize = count(c, 'block_size');
  const f = c.session.func(u64(c, 'func'));
  return { value: await (await ctx(c)).occupancySmem(f.ref, numBlocks, blockSize) };
}

/**
 * The stack, heap and printf limits reserve device memory: what a value
 * reserves beyond the context's default counts against the VM's quota
 * (every session's together), given back when set lower or at reset.
 */
async function limitSet(c: Call): Promise<void> {
  const limit = u32(c, 'limit');
  checkLimit(limit);
  const value = u64(c, 'value');
  const x = await ctx(c);
  let undo = () => {};
  if (limitReservesMemory(limit)) {
    const threads = residentThreads(c.dev.provider.deviceProps(c.session.device).attrs);
    undo = c.session.chargeLimit(limit, limitBytes(limit, value, await c.session.limitBase(x, limit), threads));
  }
  try {
    await x.limitSet(limit, value);
  } catch (e) {
    undo();
    throw e;
  }
}

/**
 * MODULE_LOAD: the image is checked and its globals estimated before the
 * driver sees it; the estimate is reserved from the quota first, and what
 * the load measurably took beyond it after (the module is unloaded again
 * if that passes the quota).
 */
async function moduleLoad(c: Call): Promise<Result> {
  const image = c.session.takeUpload(u64(c, 'upload_id'));
  const { globalBytes } = checkImage(image);
  const s = c.session;
  const r = s.reserve(globalBytes);
  let x;
  let loaded;
  try {
    x = await ctx(c);
    loaded = await x.moduleLoad(image);
  } catch (e) {
    s.unreserve(r);
    throw e;
  }
  try {
    const more = loaded.bytes > r.bytes ? s.reserve(loaded.bytes - r.bytes) : undefined;
    const all = more ? { epoch: r.epoch, bytes: r.bytes + more.bytes } : r;
    try {
      return { value: s.addModule(x, loaded.ref, all) };
    } catch (e) {
      if (more) s.unreserve(more);
      throw e;
    }
  } catch (e) {
    s.unreserve(r);
    await x.moduleUnload(loaded.ref).catch(() => undefined);
    throw e;
  }
}

async function limitGet(c: Call): Promise<Result> {
  const limit = u32(c, 'limit');
  checkLimit(limit);
  return { value: await (await ctx(c)).limitGet(limit) };
}

async function streamSetAttr(c: Call): Promise<void> {
  const s = c.session.stream(u64(c, 'stream'));
  const attr = u32(c, 'attr');
  const value = streamAttrValue(attr, c.args.value as Uint8Array, (p, n) => c.session.checkRange(p, n, 'access policy window'));
  await (await ctx(c)).streamSetAttribute(s, attr, value);
}

async function streamGetAttr(c: Call): Promise<Result> {
  const s = c.session.stream(u64(c, 'stream'));
  const attr = u32(c, 'attr');
  checkStreamAttr(attr);
  const v = await (await ctx(c)).streamGetAttribute(s, attr);
  if (v.length !== QCUDA_ATTR_VALUE_BYTES) throw new CudaError(CudaErr.Unknown, `the provider gave a ${v.length}-byte attribute value`);
  return { out: encode('qcuda_out_stream_attr_value', { value: v }) };
}

export const COMMANDS: Partial<Record<Cmd, Command>> = {
  [Cmd.HELLO]: {
    args: 'qcuda_args_hello',
    out: 'qcuda_out_hello',
    async run(c) {
      if (u32(c, 'proto_version') !== QCUDA_PROTO_VERSION) return { status: Status.VERSION, value: BigInt(QCUDA_PROTO_VERSION) };
      const p = c.dev.provider;
      return {
        out: encode('qcuda_out_hello', {
          proto_version: QCUDA_PROTO_VERSION, driver_version: p.driverVersion(), device_count: p.deviceCount(),
          capabilities: p.hasGpu ? QCUDA_CAP_GPU : 0n, memory_limit: c.session.vm.quota.limit,
        }),
      };
    },
  },
  [Cmd.DEVICE_PROPS]: { args: 'qcuda_args_device', out: 'qcuda_out_device_props', run: props },
  [Cmd.SET_DEVICE]: {
    args: 'qcuda_args_device',
    async run(c) {
      const device = u32(c, 'device');
      if (device >= c.dev.provider.deviceCount()) throw new CudaError(CudaErr.InvalidDevice, `device ${device}`);
      if (device !== c.session.device && c.session.hasContext)
        throw new CudaError(CudaErr.NotSupported, 'switching devices after the context exists');
      c.session.device = device;
    },
  },
  [Cmd.DEVICE_SYNC]: { stream: 'all', run: withAsyncError((c) => c.session.withContext((x) => x.synchronize())) },
  [Cmd.DEVICE_RESET]: { run: (c) => c.session.reset() },
  [Cmd.MEM_GET_INFO]: { out: 'qcuda_out_mem_info', run: memInfo },
  [Cmd.MALLOC]: { args: 'qcuda_args_malloc', run: malloc },
  [Cmd.FREE]: { args: 'qcuda_args_ptr', run: free },
  [Cmd.MEMCPY_HTOD]: {
    args: 'qcuda_args_memcpy',
    stream: 'stream',
    data: 'to',
    async run(c) {
      const size = u64(c, 'size');
      const { at, len } = chunkOf(c, size);
      c.session.checkRange(u64(c, 'dst'), size, 'cudaMemcpy destination');
      const stream = c.session.stream(u64(c, 'stream'));
      if (len > 0n) await c.session.withContext((x) => x.copyToDevice(u64(c, 'dst') + at, c.data, stream));
    },
  },
  [Cmd.MEMCPY_DTOH]: {
    args: 'qcuda_args_memcpy',
    stream: 'stream',
    data: 'from',
    async run(c) {
      const size = u64(c, 'size');
      const { at, len } = chunkOf(c, size);
      c.session.checkRange(u64(c, 'src'), size, 'cudaMemcpy source');
      const stream = c.session.stream(u64(c, 'stream'));
      if (len > 0n) await c.session.withContext((x) => x.copyFromDevice(c.data, u64(c, 'src') + at, stream));
    },
  },
  [Cmd.MEMCPY_DTOD]: {
    args: 'qcuda_args_memcpy',
    stream: 'stream',
    async run(c) {
      const size = u64(c, 'size');
      c.session.checkRange(u64(c, 'dst'), size, 'cudaMemcpy destination');
      c.session.checkRange(u64(c, 'src'), size, 'cudaMemcpy source');
      const stream = c.session.stream(u64(c, 'stream'));
      if (size > 0n) await (await ctx(c)).copyOnDevice(u64(c, 'dst'), u64(c, 'src'), size, stream, u32(c, 'async') !== 0);
    },
  },
  [Cmd.MEMSET]: {
    args: 'qcuda_args_memset',
    stream: 'stream',
    async run(c) {
      const size = u64(c, 'size');
      c.session.checkRange(u64(c, 'dst'), size, 'cudaMemset destination');
      const stream = c.session.stream(u64(c, 'stream'));
      if (size > 0n) await (await ctx(c)).memset(u64(c, 'dst'), u32(c, 'value') & 0xff, size, stream, u32(c, 'async') !== 0);
    },
  },
  [Cmd.HOST_MAP]: {
    args: 'qcuda_args_host_map',
    async run(c) {
      const size = u64(c, 'size');
      if (size === 0n) throw new CudaError(CudaErr.InvalidValue, 'mapping of 0 bytes');
      const addr = c.dev.hostAddressOfGpa(u64(c, 'gpa'), size);
      const x = await ctx(c);
      const ptr = await x.hostDevicePointer(addr, size);
      c.session.addHostMap(x, ptr, size); // not after a reset meanwhile: the guest driver then drops its hold on the pages
      return { value: ptr };
    },
  },
  [Cmd.HOST_UNMAP]: {
    args: 'qcuda_args_ptr',
    async run(c) {
      c.session.removeHostMap(u64(c, 'ptr'));
      await (await ctx(c)).hostUnmap(u64(c, 'ptr')); // the GPU loses its way to those pages before the guest frees them
    },
  },
  [Cmd.STREAM_CREATE]: {
    args: 'qcuda_args_stream_create',
    async run(c) {
      const flags = u32(c, 'flags');
      if (flags & ~1) throw new CudaError(CudaErr.InvalidValue, `stream flags 0x${flags.toString(16)}`);
      const x = await ctx(c);
      const s = await x.streamCreate(flags, c.args.priority as number);
      return { value: c.session.addStream(x, s) };
    },
  },
  [Cmd.STREAM_DESTROY]: { args: 'qcuda_args_handle', run: async (c) => (await ctx(c)).streamDestroy(c.session.takeStream(u64(c, 'handle'))) },
  [Cmd.STREAM_SYNC]: { args: 'qcuda_args_handle', stream: 'handle', run: withAsyncError(async (c) => (await ctx(c)).streamSynchronize(c.session.stream(u64(c, 'handle')))) },
  [Cmd.STREAM_QUERY]: {
    args: 'qcuda_args_handle',
    run: async (c) => {
      const s = c.session.stream(u64(c, 'handle'));
      if (c.session.callbacks.gate(u64(c, 'handle'))) return readiness(false); // a host function has not run yet
      return readiness(await (await ctx(c)).streamQuery(s));
    },
  },
  [Cmd.STREAM_WAIT_EVENT]: {
    args: 'qcuda_args_stream_wait_event',
    stream: 'stream',
    event: 'event',
    async run(c) {
      const s = c.session.stream(u64(c, 'stream'));
      const e = c.session.event(u64(c, 'event'));
      await (await ctx(c)).streamWaitEvent(s, e, u32(c, 'flags'));
    },
  },
  [Cmd.EVENT_CREATE]: {
    args: 'qcuda_args_event_create',
    async run(c) {
      const flags = u32(c, 'flags');
      if (flags & ~0x7) throw new CudaError(CudaErr.InvalidValue, `event flags 0x${flags.toString(16)}`);
      const x = await ctx(c);
      const e = await x.eventCreate(flags);
      return { value: c.session.addEvent(x, e) };
    },
  },
  [Cmd.EVENT_DESTROY]: { args: 'qcuda_args_handle', run: async (c) => (await ctx(c)).eventDestroy(c.session.takeEvent(u64(c, 'handle'))) },
  [Cmd.EVENT_RECORD]: {
    args: 'qcuda_args_event_record',
    stream: 'stream',
    async run(c) {
      const e = c.session.event(u64(c, 'event'));
      await (await ctx(c)).eventRecord(e, c.session.stream(u64(c, 'stream')));
    },
  },
  [Cmd.EVENT_SYNC]: { args: 'qcuda_args_handle', event: 'handle', run: withAsyncError(async (c) => (await ctx(c)).eventSynchronize(c.session.event(u64(c, 'handle')))) },
  [Cmd.EVENT_QUERY]: {
    args: 'qcuda_args_handle',
    run: async (c) => {
      const e = c.session.event(u64(c, 'handle'));
      if (c.session.callbacks.eventGate(u64(c, 'handle'))) return readiness(false); // its record waits for a host function
      return readiness(await (await ctx(c)).eventQuery(e));
    },
  },
  [Cmd.EVENT_ELAPSED]: {
    args: 'qcuda_args_event_elapsed',
    out: 'qcuda_out_event_elapsed',
    async run(c) {
      const a = c.session.event(u64(c, 'start'));
      const b = c.session.event(u64(c, 'end'));
      const ms = await (await ctx(c)).eventElapsed(a, b);
      const f = new DataView(new ArrayBuffer(4));
      f.setFloat32(0, ms, true);
      return { out: encode('qcuda_out_event_elapsed', { ms_bits: f.getUint32(0, true) }) };
    },
  },
  [Cmd.MODULE_UPLOAD]: {
    args: 'qcuda_args_module_upload',
    data: 'to',
    async run(c) {
      c.session.uploadChunk(u64(c, 'upload_id'), u64(c, 'size'), c.dataOffset, c.data);
    },
  },
  [Cmd.MODULE_LOAD]: { args: 'qcuda_args_module_load', run: moduleLoad },
  [Cmd.MODULE_UNLOAD]: { args: 'qcuda_args_handle', run: async (c) => (await ctx(c)).moduleUnload(c.session.takeModule(u64(c, 'handle'))) },
  [Cmd.FUNC_GET]: { args: 'qcuda_args_symbol', out: 'qcuda_out_func_info', run: funcGet },
  [Cmd.VAR_GET]: { args: 'qcuda_args_symbol', out: 'qcuda_out_var_info', run: varGet },
  [Cmd.LAUNCH]: { args: 'qcuda_args_launch', varArgs: true, stream: 'stream', run: launch },
  [Cmd.HOST_FUNC]: { args: 'qcuda_args_host_func', run: hostFunc },
  [Cmd.CALLBACK_WAIT]: { args: 'qcuda_args_callback_wait', out: 'qcuda_out_callback', run: callbackWait },
  [Cmd.FUNC_ATTRS]: { args: 'qcuda_args_handle', out: 'qcuda_out_func_attrs', run: funcAttrs },
  [Cmd.FUNC_SET_ATTR]: { args: 'qcuda_args_func_attr', run: funcSetAttr },
  [Cmd.OCCUPANCY_BLOCKS]: { args: 'qcuda_args_occupancy', run: occupancyBlocks },
  [Cmd.OCCUPANCY_SMEM]: { args: 'qcuda_args_occupancy', run: occupancySmem },
  [Cmd.LIMIT_SET]: { args: 'qcuda_args_limit', run: limitSet },
  [Cmd.LIMIT_GET]: { args: 'qcuda_args_limit', run: limitGet },
  [Cmd.STREAM_SET_ATTR]: { args: 'qcuda_args_stream_attr', run: streamSetAttr },
  [Cmd.STREAM_GET_ATTR]: { args: 'qcuda_args_stream_attr', out: 'qcuda_out_stream_attr_value', run: streamGetAttr },
  [Cmd.LAUNCH_COOPERATIVE]: { args: 'qcuda_args_launch', varArgs: true, stream: 'stream', run: (c) => launch(c, true) },
};

COMMANDS[Cmd.BATCH] = batchCommand(COMMANDS);
COMMANDS[Cmd.OUTPUT_READ] = OUTPUT_READ;

export { decode };
