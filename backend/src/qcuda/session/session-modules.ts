// A session's modules: the images being uploaded (and LINK results being
// read back), the modules loaded from them, their functions and their
// __device__ variables. Each counts against a bound of the VM's while the
// session holds it.
import { CudaErr, CudaError } from '../cuda-error';
import { HandleTable } from './handles';
import type { ModuleStore } from '../modules/module-cache';
import { IMAGE_PADDING } from '../modules/module-image';
import type { DevPtr, FunctionRef, GuestSeg, ModuleRef, ProviderContext } from '../provider';
import { QCUDA_MAX_MODULE, Status } from '../proto';
import { RangeSet, type Range } from '../../sys/ranges';
import type { Reservation, SessionCore } from './session-core';

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

export interface SessionFunction {
  ref: FunctionRef;
  module: bigint;
  params: { offset: number; size: number }[];
  paramBytes: number;
  /** Local memory one thread needs (FunctionInfo.localBytes). */
  localBytes: number;
}

export class SessionModules {
  readonly #uploads = new Map<bigint, Upload>();
  /** LINK results not read whole yet: image, info log, error log (counted against the staging bound). */
  readonly #linkResults = new Map<bigint, Uint8Array>();
  #nextLinkResult = 1n;
  readonly #modules: HandleTable<ModuleEntry>;
  readonly #functions: HandleTable<SessionFunction>;
  /** __device__ variables asked for with VAR_GET: addressable, not freeable. */
  readonly #symbols = new RangeSet<Range & { module: bigint }>();

  /** store: the VM's module images by content (stageCached). */
  constructor(
    private readonly s: SessionCore,
    private readonly store: ModuleStore,
  ) {
    this.#modules = new HandleTable('module', s.handles, CudaErr.InvalidResourceHandle);
    this.#functions = new HandleTable('function', s.handles, CudaErr.InvalidResourceHandle, (h, f) => s.mirror()?.func(h, f?.ref));
  }

  // ---- uploads ----

  /** Stores one chunk of module image `id` (of `size` bytes in all) at `at`. */
  uploadChunk(id: bigint, size: bigint, at: bigint, data: GuestSeg[]): void {
    if (size === 0n) throw new CudaError(CudaErr.InvalidValue, 'module upload of 0 bytes');
    if (size > BigInt(QCUDA_MAX_MODULE))
      throw new CudaError(Status.TOO_LARGE, `module of ${size} bytes (QCUDA_MAX_MODULE is ${QCUDA_MAX_MODULE})`);
    const len = data.reduce((n, d) => n + d.len, 0);
    if (at < 0n || at + BigInt(len) > size)
      throw new CudaError(CudaErr.InvalidValue, `module chunk ${at}+${len} outside an image of ${size} bytes`);
    let u = this.#uploads.get(id);
    if (u === undefined) {
      if (this.#uploads.size >= MAX_PENDING_UPLOADS)
        throw new CudaError(Status.TOO_LARGE, `more than ${MAX_PENDING_UPLOADS} module uploads pending`);
      this.s.staging.take(size); // the VM's bound on staged bytes, given back when the upload is taken or dropped
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
    const image = await this.store.find(sha256, size);
    if (image === undefined) return false;
    // The same id may have been taken while the cache was asked (another thread of the process).
    if (this.#uploads.has(id)) throw new CudaError(CudaErr.InvalidValue, `module upload ${id} exists already`);
    if (this.#uploads.size >= MAX_PENDING_UPLOADS)
      throw new CudaError(Status.TOO_LARGE, `more than ${MAX_PENDING_UPLOADS} module uploads pending`);
    this.s.staging.take(size);
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
    this.s.staging.give(BigInt(u.bytes.length));
  }

  get pendingUploads(): number {
    return this.#uploads.size;
  }

  // ---- link results ----

  /** Keeps a LINK result until it is read whole (readLinkResult) or the session ends: its id. */
  addLinkResult(bytes: Uint8Array): bigint {
    if (this.#linkResults.size >= MAX_LINK_RESULTS)
      throw new CudaError(Status.TOO_LARGE, `more than ${MAX_LINK_RESULTS} link results not read yet`);
    this.s.staging.take(BigInt(bytes.length));
    const id = this.#nextLinkResult++;
    this.#linkResults.set(id, bytes);
    return id;
  }

  /** Up to `len` bytes of LINK result `id` from `offset`; the result is dropped once its last byte is read. */
  readLinkResult(id: bigint, offset: bigint, len: number): Uint8Array {
    const r = this.#linkResults.get(id);
    if (r === undefined) throw new CudaError(CudaErr.InvalidValue, `no link result ${id} in this process`);
    if (offset < 0n || offset >= BigInt(r.length))
      throw new CudaError(CudaErr.InvalidValue, `offset ${offset} outside link result ${id} of ${r.length} bytes`);
    const at = Number(offset);
    const end = Math.min(r.length, at + len);
    if (end === r.length) this.#dropLinkResult(id, r);
    return r.subarray(at, end);
  }

  #dropLinkResult(id: bigint, r: Uint8Array): void {
    this.#linkResults.delete(id);
    this.s.staging.give(BigInt(r.length));
  }

  get linkResults(): number {
    return this.#linkResults.size;
  }

  // ---- modules, functions, variables ----

  get moduleCount(): number {
    return this.#modules.size;
  }

  /** Records a module loaded on x, whose load took r.bytes of device memory (reserved). */
  addModule(x: ProviderContext, ref: ModuleRef, r: Reservation): bigint {
    this.s.live(x);
    return this.#modules.add({ ref, bytes: r.bytes, funcs: new Map(), vars: new Map() });
  }

  module(h: bigint): ModuleRef {
    return this.#modules.get(h).ref;
  }

  /** Forgets a module with its functions and variables; returns its ref for unloading. */
  takeModule(h: bigint): ModuleRef {
    const m = this.#modules.take(h);
    this.s.quota.give(m.bytes);
    for (const f of m.funcs.values()) this.#functions.remove(f);
    this.#symbols.removeWhere((r) => r.module === h);
    return m.ref;
  }

  /** The handle of a function of module h already asked for by name, if any. */
  knownFunction(h: bigint, name: string): bigint | undefined {
    return this.#modules.find(h)?.funcs.get(name);
  }

  addFunction(x: ProviderContext, h: bigint, name: string, f: SessionFunction): bigint {
    this.s.live(x);
    const m = this.#loaded(h);
    const known = m.funcs.get(name);
    if (known !== undefined) return known;
    const fh = this.#functions.add(f);
    m.funcs.set(name, fh);
    return fh;
  }

  func(h: bigint): SessionFunction {
    return this.#functions.get(h);
  }

  /** Makes a module variable addressable memory of this session. */
  addVariable(x: ProviderContext, h: bigint, name: string, base: DevPtr, size: bigint): void {
    this.s.live(x);
    const m = this.#loaded(h);
    if (m.vars.has(name)) return;
    m.vars.set(name, { base, size });
    this.#symbols.add({ base, size, module: h });
  }

  /** Whether [ptr, ptr+size) lies inside one variable asked for. */
  holdsVariable(ptr: DevPtr, size: bigint): boolean {
    return this.#symbols.holding(ptr, size) !== undefined;
  }

  /** Module h, which a call that awaited may find unloaded. */
  #loaded(h: bigint): ModuleEntry {
    const m = this.#modules.find(h);
    if (m === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, `module 0x${h.toString(16)} was unloaded meanwhile`);
    return m;
  }

  /** Drops everything (a reset, the close): the context's destruction unloads the modules. */
  clear(): void {
    for (const [id, u] of this.#uploads) this.#dropUpload(id, u);
    for (const [id, r] of this.#linkResults) this.#dropLinkResult(id, r);
    this.#modules.clear();
    this.#functions.clear();
    this.#symbols.clear();
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
