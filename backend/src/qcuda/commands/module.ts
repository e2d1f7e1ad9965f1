// Module commands: images uploaded in chunks, checked and loaded (their
// globals counted against the quota), kernels and variables looked up,
// kernel attributes and occupancy.
import { checkFuncAttr, OCCUPANCY_FLAGS } from '../attrs';
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { checkImage } from '../modules/module-image';
import { encode, LAYOUT, QCUDA_MAX_NAME, QCUDA_MAX_PARAMS, QCUDA_NUM_FUNC_ATTRS } from '../proto';

/** The NUL-terminated name of a qcuda_args_symbol. */
function symbolName(c: Call<'FUNC_GET' | 'VAR_GET'>): string {
  const raw = c.args.name;
  const end = raw.indexOf(0);
  if (end < 0) throw new CudaError(CudaErr.InvalidValue, `symbol name not NUL-terminated within ${QCUDA_MAX_NAME} bytes`);
  if (end === 0) throw new CudaError(CudaErr.InvalidValue, 'empty symbol name');
  if (raw.subarray(0, end).some((b) => b < 0x21 || b > 0x7e))
    throw new CudaError(CudaErr.SymbolNotFound, 'symbol name with bytes no symbol has');
  return Buffer.from(raw.subarray(0, end)).toString('latin1');
}

/** qcuda_args_tensor_map's kinds, and its arrays' room. */
const TENSOR_MAP_TILED = 0;
const TENSOR_MAP_REPLACE = 3;
const TENSOR_MAP_MAX_RANK = 5;
const TENSOR_MAP_BYTES = LAYOUT.qcuda_out_tensor_map.size;

/** A count CUDA takes as a signed int: negative ones are refused. */
function count(what: string, n: number): number {
  if (n < 0) throw new CudaError(CudaErr.InvalidValue, `${what} ${n} is negative`);
  return n;
}

export const RUNS: Runs<
  | 'MODULE_UPLOAD'
  | 'MODULE_FIND'
  | 'MODULE_LOAD'
  | 'MODULE_UNLOAD'
  | 'FUNC_GET'
  | 'VAR_GET'
  | 'FUNC_ATTRS'
  | 'FUNC_SET_ATTR'
  | 'OCCUPANCY_BLOCKS'
  | 'OCCUPANCY_SMEM'
  | 'OCCUPANCY_CLUSTERS'
  | 'TENSOR_MAP_ENCODE'
> = {
  async MODULE_UPLOAD(c) {
    c.session.modules.uploadChunk(c.args.upload_id, c.args.size, c.dataOffset, c.data);
  },

  MODULE_FIND: async (c) => ({ value: (await c.session.modules.stageCached(c.args.upload_id, c.args.size, c.args.sha256)) ? 1n : 0n }),

  /**
   * The image is checked and what it declares it takes (module-image.ts) is
   * reserved from the quota before the driver sees it, and what the load
   * measurably took beyond that after (the module is unloaded again if that
   * passes the quota): the larger of the two is counted, so a free in
   * another process during the load, which makes the measurement small,
   * cannot make the count smaller than the image's. A checked image is kept
   * by content for the VM's next processes (whether this device runs it or
   * not: the next load answers the same).
   */
  async MODULE_LOAD(c) {
    const s = c.session;
    const { image, cached } = s.modules.takeUpload(c.args.upload_id); // dropped (its staging given back) whatever follows
    s.checkRoom('module');
    const info = checkImage(image);
    if (!cached) s.vm.modules.add(image); // a cached one was found by content: not hashed again
    const r = s.reserve(info.globalBytes);
    let x;
    let loaded;
    try {
      x = await s.context();
      loaded = await x.moduleLoad(image);
    } catch (e) {
      s.unreserve(r);
      throw e;
    }
    const more = loaded.bytes > r.bytes ? loaded.bytes - r.bytes : 0n;
    let extra;
    try {
      extra = more > 0n ? s.reserve(more) : undefined;
      return { value: s.modules.addModule(x, loaded.ref, { epoch: r.epoch, bytes: r.bytes + (extra?.bytes ?? 0n) }) };
    } catch (e) {
      s.unreserve(r);
      if (extra) s.unreserve(extra);
      await x.moduleUnload(loaded.ref).catch(() => undefined);
      throw e;
    }
  },

  MODULE_UNLOAD: async (c) => (await c.session.context()).moduleUnload(c.session.modules.takeModule(c.args.handle)),

  async FUNC_GET(c) {
    const mh = c.args.module;
    const name = symbolName(c);
    const module = c.session.modules.module(mh);
    let fh = c.session.modules.knownFunction(mh, name);
    if (fh === undefined) {
      const x = await c.session.context();
      const info = await x.functionGet(module, name, QCUDA_MAX_PARAMS);
      if (info.params.length > QCUDA_MAX_PARAMS)
        throw new CudaError(CudaErr.NotSupported, `kernel ${name} has ${info.params.length} parameters (at most ${QCUDA_MAX_PARAMS})`);
      // A kernel with local memory: its context's default stack is asked for now, so its launch counts what it grows synchronously.
      if (info.localBytes > 0) await c.session.localMemory(x);
      fh = c.session.modules.addFunction(x, mh, name, {
        ref: info.ref,
        module: mh,
        params: info.params,
        paramBytes: info.paramBytes,
        localBytes: info.localBytes,
      });
    }
    const f = c.session.modules.func(fh);
    const offset = new Uint32Array(QCUDA_MAX_PARAMS);
    const size = new Uint32Array(QCUDA_MAX_PARAMS);
    f.params.forEach((p, i) => {
      offset[i] = p.offset;
      size[i] = p.size;
    });
    return { value: fh, out: encode('qcuda_out_func_info', { num_params: f.params.length, param_bytes: f.paramBytes, offset, size }) };
  },

  async VAR_GET(c) {
    const mh = c.args.module;
    const name = symbolName(c);
    const module = c.session.modules.module(mh);
    const x = await c.session.context();
    const v = await x.variableGet(module, name);
    c.session.modules.addVariable(x, mh, name, v.dptr, v.size);
    return { out: encode('qcuda_out_var_info', { dptr: v.dptr, size: v.size }) };
  },

  async FUNC_ATTRS(c) {
    const f = c.session.modules.func(c.args.handle);
    const v = await (await c.session.context()).funcGetAttributes(f.ref);
    if (v.length !== QCUDA_NUM_FUNC_ATTRS) throw new CudaError(CudaErr.Unknown, `the provider gave ${v.length} function attributes`);
    return { out: encode('qcuda_out_func_attrs', { values: new Uint32Array(v.buffer, v.byteOffset, v.length) }) };
  },

  // Arguments are checked before the function handle: the guest library has
  // resolved the function already (cudaErrorInvalidDeviceFunction is its answer).
  async FUNC_SET_ATTR(c) {
    const { attr, value } = c.args;
    checkFuncAttr(attr, value);
    const f = c.session.modules.func(c.args.func);
    await (await c.session.context()).funcSetAttribute(f.ref, attr, value);
  },

  async OCCUPANCY_BLOCKS(c) {
    const { flags } = c.args;
    if (flags & ~OCCUPANCY_FLAGS) throw new CudaError(CudaErr.InvalidValue, `occupancy flags 0x${flags.toString(16)}`);
    const blockSize = count('block_size', c.args.block_size);
    const f = c.session.modules.func(c.args.func);
    const n = await (await c.session.context()).occupancyBlocks(f.ref, blockSize, c.args.dynamic_smem, flags);
    return { value: BigInt(n) };
  },

  async OCCUPANCY_SMEM(c) {
    const numBlocks = count('num_blocks', c.args.num_blocks);
    const blockSize = count('block_size', c.args.block_size);
    const f = c.session.modules.func(c.args.func);
    return { value: await (await c.session.context()).occupancySmem(f.ref, numBlocks, blockSize) };
  },

  // The driver checks the configuration; only the query is the backend's to check.
  async OCCUPANCY_CLUSTERS(c) {
    const { grid, block, smem, cluster, policy, query } = c.args;
    if (query > 1) throw new CudaError(CudaErr.InvalidValue, `cluster query ${query}`);
    const f = c.session.modules.func(c.args.func);
    const n = await (await c.session.context()).occupancyClusters(f.ref, grid, block, smem, cluster, policy, query);
    return { value: BigInt(n) };
  },

  // The driver reads rank entries of each array: rank must fit them. Every
  // other field is the driver's to check, as natively.
  async TENSOR_MAP_ENCODE(c) {
    const { kind, rank } = c.args;
    if (kind > TENSOR_MAP_REPLACE) throw new CudaError(CudaErr.InvalidValue, `tensor map kind ${kind}`);
    const least = kind === TENSOR_MAP_TILED || kind === TENSOR_MAP_REPLACE ? 1 : 3;
    if (kind !== TENSOR_MAP_REPLACE && (rank < least || rank > TENSOR_MAP_MAX_RANK))
      throw new CudaError(CudaErr.InvalidValue, `tensor map rank ${rank}: ${least} to ${TENSOR_MAP_MAX_RANK}`);
    const map = await (await c.session.context()).tensorMapEncode(encode('qcuda_args_tensor_map', c.args));
    if (map.length !== TENSOR_MAP_BYTES) throw new CudaError(CudaErr.Unknown, `the provider gave a ${map.length}-byte tensor map`);
    return { out: map };
  },
};
