// The `host` provider: device memory emulated in host RAM, for machines
// without a GPU (and CI). Memory, device, stream and event calls keep CUDA's
// semantics and error codes; work completes synchronously, so every stream
// is always idle. It is not a model of GPU timing and runs no kernels.
import { performance } from 'node:perf_hooks';
import { CudaErr, CudaError } from '../cuda-error';
import type {
  ArrayDesc, ArrayRef, MipmapRef, DeviceProps, DevPtr, Dim3, EventRef, Extent, FunctionInfo, GraphExecRef, GraphNodeSpec, GraphRef, GraphSpec, GuestSeg, HostBlock,
  HostPiece, LaunchDesc, Place, Pos, Provider, ProviderContext, StreamRef, TexDesc, TexResource, VmmRef,
} from '../provider';
import { COND_ASSIGN_DEFAULT, elementSize, levelDesc } from '../cuda-formats';
import { StreamAttr } from '../attrs';
import { QCUDA_ATTR_VALUE_BYTES, QCUDA_NUM_ATTRS } from '../proto';
import { RangeSet, type Range } from '../ranges';
import { MAX_SAFE_BIG } from '../../sys/numbers';

/**
 * Where the device pointers of mappings of several pieces (HOST_MAP_PAGES)
 * start: above every user address of x86-64 and aarch64, so that none is
 * also a host address some single-piece mapping hands out; 2 MiB apart.
 */
const HOST_MAP_PAGES_BASE = 0xffff_c000_0000_0000n;
const MAP_ALIGN = 2n << 20n;

/**
 * Reservations of virtual memory management (vmmReserve) live in
 * [VMM_BASE, HOST_MAP_PAGES_BASE): 64 TiB above every user address, as
 * HOST_MAP_PAGES' are, and below theirs.
 */
const VMM_BASE = 0xffff_8000_0000_0000n;
const VMM_END = HOST_MAP_PAGES_BASE;

/** Emulated device addresses live here, far from any host mapping. */
const DEVICE_BASE = 0x2000_0000_0000n;
const ALIGN = 512n;
const GUARD = 1n << 16n; // unmapped gap between allocations
const HOST_DEVICE_NAME = 'qcuda host-memory device (no GPU)';

/** cudaEventDisableTiming */
const EVENT_DISABLE_TIMING = 0x2;

/** A few attributes a program may look at (CUdevice_attribute numbering). */
const ATTRS: Record<number, number> = {
  1: 1024, 2: 1024, 3: 1024, 4: 64, 5: 0x7fffffff, 6: 65535, 7: 65535, 8: 49152, 9: 65536, 10: 32, 11: 0x7fffffff,
  12: 65536, 13: 1000000, 14: 512, 15: 1, 16: 1, 17: 0, 18: 0, 19: 1, 20: 0, 31: 1, 32: 0, 33: 0, 34: 0, 35: 0,
  36: 1000000, 37: 64, 38: 0, 39: 2048, 40: 1, 41: 1, 75: 0, 76: 0, 81: 49152, 82: 65536, 83: 1, 84: 0,
};

interface Alloc extends Range {
  bytes: Uint8Array;
  owner: HostContext;
}

/** Physical memory of virtual memory management (vmmCreate): counted in the device's use like an allocation. */
interface VmmMemory {
  bytes: Uint8Array;
  owner: HostContext;
}

interface HostEvent {
  flags: number;
  at: number | undefined; // ms, when recorded
}

/** cudaGraphCondType */
const COND_IF = 0;
const COND_WHILE = 1;
/** cudaErrorLaunchTimeout (CudaErr does not name it). */
const LAUNCH_TIMEOUT = 702;
/**
 * Iterations one WHILE node may run per launch. Only kernels set conditions
 * and none run here, so a WHILE that goes round once goes round forever: fail
 * it as a GPU's watchdog would, rather than hang the session.
 */
const MAX_WHILE_ITERATIONS = 1_000_000;
/**
 * What WHILE bodies may do in one launch, in units of a node run or 512 bytes
 * written: the iteration bound alone would let a body of thousands of nodes,
 * or of large memsets, hold the backend's event loop for hours (this provider
 * runs in it, synchronously). About a second of work; a one-node body meets
 * MAX_WHILE_ITERATIONS first.
 */
const MAX_LOOP_WORK = 2_000_000;
const LOOP_WORK_BYTES = 512n;

/** A conditional handle: what a launch starts it at, and its current value. */
interface HostCond {
  defaultValue: number;
  assignDefault: boolean;
  value: number;
}

/** A graph (GRAPH_CREATE): only where conditional handles live; the nodes come at instantiation. */
interface HostGraph {
  conds: Map<bigint, HostCond>;
}

/**
 * An executable graph: a copy of its spec, each body's node indices
 * (bodies.get(-1)![0]: the graph itself; bodies.get(i)![b]: body b of
 * conditional node i), and its own conditions (CUDA keeps their values per
 * executable graph, so they outlive the graph they were made on).
 */
interface HostGraphExec {
  spec: GraphSpec;
  bodies: Map<number, number[][]>;
  conds: Map<bigint, HostCond>;
  hasKernel: boolean;
}

/** One launch of an executable graph: how deep in WHILE bodies it is, and the work they have done. */
interface GraphRun {
  exec: HostGraphExec;
  loops: number;
  loopWork: number;
}

/** The error every kernel call gets here. */
function noKernels(): CudaError {
  return new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
}

/** Counts a node run inside a WHILE body against the launch's MAX_LOOP_WORK. */
function chargeLoopWork(r: GraphRun, n: GraphNodeSpec): void {
  const bytes = n.type === 'memcpy' ? n.width * n.height * n.depth : n.type === 'memset' ? n.width * BigInt(n.elem) * n.height : 0n;
  r.loopWork += 1 + Number(bytes / LOOP_WORK_BYTES);
  if (r.loopWork > MAX_LOOP_WORK) throw new CudaError(LAUNCH_TIMEOUT, `graph: while bodies did more than ${MAX_LOOP_WORK} units of work (node runs, 512 bytes written) in one launch`);
}

/** count elements of elem bytes, each value's low elem bytes little-endian (a memset node's row). */
function pattern(value: number, elem: number, count: number): Uint8Array {
  const out = new Uint8Array(count * elem);
  for (let b = 0; b < elem; b++) out[b] = (value >>> (8 * b)) & 0xff;
  for (let have = elem; have < out.length; have *= 2) out.copyWithin(have, 0, have); // doubling: few calls for any size
  return out;
}

/** A stream: its creation priority and the attributes set on it (cudaLaunchAttributeValue bytes by id). */
interface HostStream {
  priority: number;
  attrs: Map<number, Uint8Array>;
}

/**
 * A fresh context's limits (cudaLimit order) as CUDA 13 reports them on the
 * sm_90 GPUs qcuda serves; undefined: cudaErrorUnsupportedLimit there
 * (cudaLimitDevRuntimeSyncDepth exists only below compute capability 9.0).
 */
const LIMIT_DEFAULTS: readonly (bigint | undefined)[] = [
  1024n, // cudaLimitStackSize
  1n << 20n, // cudaLimitPrintfFifoSize
  8n << 20n, // cudaLimitMallocHeapSize
  undefined, // cudaLimitDevRuntimeSyncDepth
  2048n, // cudaLimitDevRuntimePendingLaunchCount
  32n, // cudaLimitMaxL2FetchGranularity
  0n, // cudaLimitPersistingL2CacheSize
];
/** The hints CUDA clamps: L2 fetch granularity to 128 bytes, persisting L2 to the device's (none here). */
const LIMIT_MAX: Record<number, bigint> = { 5: 128n, 6: 0n };

/** A stream attribute nobody set, as CUDA reports it for a fresh stream. */
/** Stream priorities, as the H100's driver reports them: a lower number is a higher priority. */
const PRIORITY_LEAST = 0;
const PRIORITY_GREATEST = -5;

function defaultStreamAttr(attr: number, priority: number): Uint8Array {
  const out = new Uint8Array(QCUDA_ATTR_VALUE_BYTES);
  const v = new DataView(out.buffer);
  if (attr === StreamAttr.Priority) v.setInt32(0, priority, true);
  else if (attr === StreamAttr.SynchronizationPolicy) v.setUint32(0, 1, true); // cudaSyncPolicyAuto
  else if (attr === StreamAttr.MemSyncDomainMap) out[1] = 1; // default domain 0, remote domain 1
  return out;
}

export interface HostProviderOptions {
  /** Emulated device memory size in bytes (default 4 GiB). */
  totalMem?: bigint;
  /** Views of guest RAM by host address: the device pointers of mapped host memory. */
  guestView?: (addr: bigint, len: number) => Uint8Array[];
}

/** A host provider over a device's guest memory: the factory form of QcudaOptions.provider. */
export function hostProvider(guestView: (addr: bigint, len: number) => Uint8Array[]): HostProvider {
  return new HostProvider({ guestView });
}

export class HostProvider implements Provider {
  readonly name = 'host' as const;
  readonly hasGpu = false;
  readonly totalMem: bigint;
  readonly guestView: (addr: bigint, len: number) => Uint8Array[];
  readonly #allocs = new RangeSet<Alloc>();
  #next = DEVICE_BASE;
  /** Every context's VMM reservations: one address space, as a GPU's. */
  readonly #reserved = new RangeSet<Range & { owner: HostContext }>();
  readonly #vmm = new Map<number, VmmMemory>();
  #nextVmm = 1;
  used = 0n;

  constructor(o: HostProviderOptions = {}) {
    this.totalMem = o.totalMem ?? 4n << 30n;
    this.guestView = o.guestView ?? (() => {
      throw new CudaError(CudaErr.InvalidValue, 'no guest memory to map');
    });
  }

  deviceCount(): number {
    return 1;
  }

  driverVersion(): number {
    return 13000;
  }

  deviceProps(device: number): DeviceProps {
    checkDevice(device);
    const attrs = new Int32Array(QCUDA_NUM_ATTRS);
    for (const [k, v] of Object.entries(ATTRS)) attrs[Number(k)] = v;
    return { name: HOST_DEVICE_NAME, uuid: new Uint8Array(16).fill(0x51), totalMem: this.totalMem, attrs };
  }

  async openContext(device: number): Promise<ProviderContext> {
    checkDevice(device);
    return new HostContext(this);
  }

  registerGuestMemory(): void {
    /* host memory needs no registration */
  }

  unregisterGuestMemory(): void {}

  async close(): Promise<void> {}

  /** Host memory standing for size bytes of device memory, within what the device has left. */
  #backing(size: bigint): Uint8Array {
    if (size > this.totalMem - this.used || size > MAX_SAFE_BIG)
      throw new CudaError(CudaErr.MemoryAllocation, `out of device memory: ${size} bytes requested, ${this.totalMem - this.used} free`);
    try {
      return new Uint8Array(Number(size));
    } catch {
      throw new CudaError(CudaErr.MemoryAllocation, `host cannot back ${size} bytes`);
    }
  }

  allocate(size: bigint, owner: HostContext): DevPtr {
    if (owner.dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'the context was destroyed');
    if (size <= 0n) throw new CudaError(CudaErr.InvalidValue, 'allocation size 0');
    const bytes = this.#backing(size);
    const base = this.#next;
    this.#next += ((size + ALIGN - 1n) / ALIGN) * ALIGN + GUARD;
    this.#allocs.add({ base, size, bytes, owner });
    this.used += size;
    return base;
  }

  release(ptr: DevPtr, owner: HostContext): void {
    const a = this.#allocs.removeAt(ptr, (x) => x.owner === owner);
    if (!a) throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not an allocation`);
    this.used -= a.size;
  }

  releaseAll(owner: HostContext): void {
    for (const a of this.#allocs.removeWhere((x) => x.owner === owner)) this.used -= a.size;
    this.#reserved.removeWhere((r) => r.owner === owner);
    for (const [id, m] of this.#vmm) if (m.owner === owner) this.vmmRelease(id, owner);
  }

  /** The lowest free range of size bytes, aligned, in [VMM_BASE, VMM_END) (the hint is not taken: any address is as good here). */
  vmmReserve(size: bigint, alignment: bigint, owner: HostContext): DevPtr {
    if (owner.dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'the context was destroyed');
    const up = (p: bigint): bigint => ((p + alignment - 1n) / alignment) * alignment;
    let at = up(VMM_BASE);
    for (const r of this.#reserved.values()) {
      if (at + size <= r.base) break;
      if (r.base + r.size > at) at = up(r.base + r.size);
    }
    if (at + size > VMM_END) throw new CudaError(CudaErr.MemoryAllocation, `no free address range of ${size} bytes`);
    this.#reserved.add({ base: at, size, owner });
    return at;
  }

  vmmFree(ptr: DevPtr, size: bigint, owner: HostContext): void {
    if (!this.#reserved.removeAt(ptr, (r) => r.owner === owner && r.size === size))
      throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)}+${size} is not an address reservation`);
  }

  /** A reservation of owner's holds all of [ptr, ptr + size). */
  vmmReserved(ptr: DevPtr, size: bigint, owner: HostContext): boolean {
    return this.#reserved.holding(ptr, size)?.owner === owner;
  }

  vmmCreate(size: bigint, owner: HostContext): number {
    if (owner.dead) throw new CudaError(CudaErr.ContextIsDestroyed, 'the context was destroyed');
    const bytes = this.#backing(size);
    const id = this.#nextVmm++;
    this.#vmm.set(id, { bytes, owner });
    this.used += size;
    return id;
  }

  vmmMemory(m: VmmRef, owner: HostContext): Uint8Array {
    const x = typeof m === 'number' ? this.#vmm.get(m) : undefined;
    if (!x || x.owner !== owner) throw new CudaError(CudaErr.InvalidValue, `not physical memory of this context: ${String(m)}`);
    return x.bytes;
  }

  vmmRelease(m: VmmRef, owner: HostContext): void {
    const bytes = this.vmmMemory(m, owner);
    this.#vmm.delete(m as number);
    this.used -= BigInt(bytes.length);
  }

  /** Views of [ptr, ptr+size): emulated device memory, or mapped guest memory. */
  views(ptr: DevPtr, size: bigint, owner: HostContext): Uint8Array[] {
    const a = this.#allocs.find(ptr);
    if (a && a.owner === owner) {
      const off = Number(ptr - a.base);
      if (off + Number(size) > a.bytes.length) throw new CudaError(CudaErr.InvalidValue, 'range runs past its allocation');
      return [a.bytes.subarray(off, off + Number(size))];
    }
    const pieces = owner.mappedPieces(ptr, size);
    if (pieces) return pieces.flatMap((p) => this.guestView(p.addr, Number(p.size)));
    const vmm = owner.vmmViews(ptr, size);
    if (vmm) return vmm;
    throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not device memory of this context`);
  }
}

function checkDevice(device: number): void {
  if (device !== 0) throw new CudaError(CudaErr.InvalidDevice, `device ${device} does not exist`);
}

/** Copies between lists of views of equal total length. */
function copyViews(dst: Uint8Array[], src: Uint8Array[]): void {
  let si = 0;
  let so = 0;
  for (const d of dst) {
    let done = 0;
    while (done < d.length) {
      const s = src[si];
      const n = Math.min(d.length - done, s.length - so);
      d.set(s.subarray(so, so + n), done);
      done += n;
      so += n;
      if (so === s.length) {
        si++;
        so = 0;
      }
    }
  }
}

/** An array here: dense rows of width * elem bytes, height rows a slice (an allocation of the provider's, reachable only through its id). */
interface HostArray {
  base: DevPtr;
  bytes: Uint8Array;
  desc: ArrayDesc;
  elem: bigint;
}

/** Views of [off, off + len) of a chunk's segments. */
function segRange(segs: GuestSeg[], off: bigint, len: bigint): Uint8Array[] {
  const out: Uint8Array[] = [];
  let at = 0n;
  let want = len;
  for (const s of segs) {
    const n = BigInt(s.len);
    if (want > 0n && off < at + n) {
      const from = off > at ? off - at : 0n;
      const take = n - from < want ? n - from : want;
      out.push(s.view.subarray(Number(from), Number(from + take)));
      want -= take;
      off += take;
    }
    at += n;
    if (want === 0n) break;
  }
  if (want !== 0n) throw new CudaError(CudaErr.InvalidValue, 'a block runs past its chunk');
  return out;
}

class HostContext implements ProviderContext {
  /** Destroyed: it makes nothing more (a call that reaches it after the destroy fails). */
  dead = false;
  /** Mapped guest memory by device pointer: one piece's pointer is its host address; several get a range of their own. */
  readonly #maps = new RangeSet<Range & { pieces: readonly HostPiece[] }>();
  #nextMapBase = HOST_MAP_PAGES_BASE;
  /** VMM mappings: each a view of its physical memory. */
  readonly #vmmMaps = new RangeSet<Range & { bytes: Uint8Array }>();
  readonly #limits = LIMIT_DEFAULTS.slice();
  readonly #arrays = new Map<number, HostArray>();
  #nextArray = 1;
  /** Mipmapped arrays: their levels' array ids. */
  readonly #mipmaps = new Map<number, number[]>();
  /** Texture and surface objects: records (nothing samples them here). */
  readonly #objects = new Map<bigint, 'texture' | 'surface'>();
  #nextObject = 0x7e0000001n;
  /** Graphs and executable graphs, by id (one numbering: neither passes for the other). */
  readonly #graphs = new Map<number, HostGraph>();
  readonly #execs = new Map<number, HostGraphExec>();
  #nextGraph = 1;
  /** Conditional handles: unique in the context, never 0. */
  #nextCond = 0xc0d0000001n;
  /** The NULL stream's attributes. */
  readonly #legacy: HostStream = { priority: 0, attrs: new Map() };
  constructor(private readonly p: HostProvider) {}

  /** The pieces of guest memory (host addresses) that [ptr, ptr+size) of a mapping is, or undefined. */
  mappedPieces(ptr: bigint, size: bigint): HostPiece[] | undefined {
    const m = this.#maps.holding(ptr, size);
    if (!m) return undefined;
    const out: HostPiece[] = [];
    let at = m.base;
    for (const p of m.pieces) {
      const from = ptr > at ? ptr : at;
      const to = ptr + size < at + p.size ? ptr + size : at + p.size;
      if (from < to) out.push({ addr: p.addr + (from - at), size: to - from });
      at += p.size;
    }
    return out;
  }

  /** Views of [ptr, ptr + size) where VMM mappings, one after the other, hold all of it; else undefined. */
  vmmViews(ptr: bigint, size: bigint): Uint8Array[] | undefined {
    const out: Uint8Array[] = [];
    for (let at = ptr; at < ptr + size; ) {
      const m = this.#vmmMaps.find(at);
      if (!m) return undefined;
      const end = ptr + size < m.base + m.size ? ptr + size : m.base + m.size;
      out.push(m.bytes.subarray(Number(at - m.base), Number(end - m.base)));
      at = end;
    }
    return out;
  }

  async malloc(size: bigint): Promise<DevPtr> {
    return this.p.allocate(size, this);
  }

  async vmmReserve(size: bigint, alignment: bigint): Promise<DevPtr> {
    return this.p.vmmReserve(size, alignment, this);
  }

  async vmmFree(ptr: DevPtr, size: bigint): Promise<void> {
    if (this.#vmmMaps.overlapping(ptr, size)) throw new CudaError(CudaErr.InvalidValue, 'the reservation has memory mapped in it');
    this.p.vmmFree(ptr, size, this);
  }

  async vmmCreate(size: bigint): Promise<VmmRef> {
    return this.p.vmmCreate(size, this);
  }

  async vmmRelease(m: VmmRef): Promise<void> {
    this.p.vmmRelease(m, this);
  }

  async vmmMap(ptr: DevPtr, size: bigint, m: VmmRef): Promise<void> {
    const bytes = this.p.vmmMemory(m, this);
    if (size > BigInt(bytes.length) || !this.p.vmmReserved(ptr, size, this) || this.#vmmMaps.overlapping(ptr, size))
      throw new CudaError(CudaErr.InvalidValue, `cannot map ${size} bytes at 0x${ptr.toString(16)}`);
    this.#vmmMaps.add({ base: ptr, size, bytes: bytes.subarray(0, Number(size)) });
  }

  async vmmUnmap(ptr: DevPtr, size: bigint): Promise<void> {
    if (!this.#vmmMaps.removeAt(ptr, (m) => m.size === size)) throw new CudaError(CudaErr.InvalidValue, `no mapping at 0x${ptr.toString(16)}+${size}`);
  }

  /** Mapped memory is always reachable here: the dispatcher is what keeps it out of copies until access is set. */
  async vmmSetAccess(ptr: DevPtr, size: bigint): Promise<void> {
    if (!this.#vmmMaps.holding(ptr, size)) throw new CudaError(CudaErr.InvalidValue, `no mapping at 0x${ptr.toString(16)}+${size}`);
  }

  async free(ptr: DevPtr): Promise<void> {
    this.p.release(ptr, this);
  }

  /** Device-wide, as natively: every context's allocations count. */
  async memGetInfo(): Promise<{ free: bigint; total: bigint }> {
    return { free: this.p.totalMem - this.p.used, total: this.p.totalMem };
  }

  async copyToDevice(dst: DevPtr, src: GuestSeg[], _s: StreamRef | undefined): Promise<void> {
    const len = src.reduce((n, s) => n + s.len, 0);
    copyViews(this.p.views(dst, BigInt(len), this), src.map((s) => s.view));
  }

  async copyFromDevice(dst: GuestSeg[], src: DevPtr, _s: StreamRef | undefined): Promise<void> {
    const len = dst.reduce((n, s) => n + s.len, 0);
    copyViews(dst.map((s) => s.view), this.p.views(src, BigInt(len), this));
  }

  async copyOnDevice(dst: DevPtr, src: DevPtr, size: bigint): Promise<void> {
    const from = this.p.views(src, size, this).map((v) => v.slice()); // memmove semantics for overlaps
    copyViews(this.p.views(dst, size, this), from);
  }

  async memset(dst: DevPtr, value: number, size: bigint): Promise<void> {
    for (const v of this.p.views(dst, size, this)) v.fill(value & 0xff);
  }

  async synchronize(): Promise<void> {}

  #array(a: ArrayRef): HostArray {
    const x = typeof a === 'number' ? this.#arrays.get(a) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidResourceHandle, `not an array of this context: ${String(a)}`);
    return x;
  }

  /** Views of one row of a box: width bytes at pos + (0, y, z) of a place. */
  #row(place: Place, pos: Pos, width: bigint, y: bigint, z: bigint): Uint8Array[] {
    if ('array' in place) {
      const a = this.#array(place.array);
      const rowBytes = a.desc.width * a.elem;
      const h = a.desc.height === 0n ? 1n : a.desc.height;
      const off = ((pos.z + z) * h + pos.y + y) * rowBytes + pos.x;
      if (pos.x + width > rowBytes || off + width > BigInt(a.bytes.length)) throw new CudaError(CudaErr.InvalidValue, 'box outside the array');
      return [a.bytes.subarray(Number(off), Number(off + width))];
    }
    return this.p.views(place.ptr + (pos.z + z) * place.pitch * place.rows + (pos.y + y) * place.pitch + pos.x, width, this);
  }

  async copy3DOnDevice(dst: Place, dstPos: Pos, src: Place, srcPos: Pos, e: Extent): Promise<void> {
    this.#copyBox(dst, dstPos, src, srcPos, e);
  }

  /** copy3DOnDevice's work, synchronous (graph launches run it in a loop). */
  #copyBox(dst: Place, dstPos: Pos, src: Place, srcPos: Pos, e: Extent): void {
    for (let z = 0n; z < e.depth; z++)
      for (let y = 0n; y < e.height; y++) {
        const from = this.#row(src, srcPos, e.width, y, z).map((v) => v.slice()); // memmove semantics
        copyViews(this.#row(dst, dstPos, e.width, y, z), from);
      }
  }

  async copy3DToDevice(dst: Place, src: GuestSeg[], blocks: readonly HostBlock[]): Promise<void> {
    for (const b of blocks)
      for (let z = 0n; z < b.extent.depth; z++)
        for (let y = 0n; y < b.extent.height; y++)
          copyViews(this.#row(dst, b.pos, b.extent.width, y, z), segRange(src, b.off + z * b.pitch * b.rows + y * b.pitch, b.extent.width));
  }

  async copy3DFromDevice(dst: GuestSeg[], src: Place, blocks: readonly HostBlock[]): Promise<void> {
    for (const b of blocks)
      for (let z = 0n; z < b.extent.depth; z++)
        for (let y = 0n; y < b.extent.height; y++)
          copyViews(segRange(dst, b.off + z * b.pitch * b.rows + y * b.pitch, b.extent.width), this.#row(src, b.pos, b.extent.width, y, z));
  }

  async memset2D(dst: DevPtr, pitch: bigint, value: number, width: bigint, height: bigint): Promise<void> {
    for (let y = 0n; y < height; y++) for (const v of this.p.views(dst + y * pitch, width, this)) v.fill(value & 0xff);
  }

  async arrayCreate(desc: ArrayDesc): Promise<ArrayRef> {
    const elem = elementSize(desc.format, desc.channels);
    const size = desc.width * elem * (desc.height === 0n ? 1n : desc.height) * (desc.depth === 0n ? 1n : desc.depth);
    const base = this.p.allocate(size, this);
    const id = this.#nextArray++;
    this.#arrays.set(id, { base, bytes: this.p.views(base, size, this)[0], desc, elem });
    return id;
  }

  async arrayDestroy(a: ArrayRef): Promise<void> {
    const x = this.#array(a);
    this.#arrays.delete(a as number);
    this.p.release(x.base, this);
  }

  async mipmapCreate(desc: ArrayDesc, levels: number): Promise<MipmapRef> {
    const ids: number[] = [];
    try {
      for (let l = 0; l < levels; l++) ids.push((await this.arrayCreate(levelDesc(desc, l))) as number);
    } catch (e) {
      for (const id of ids) await this.arrayDestroy(id);
      throw e;
    }
    const id = this.#nextArray++;
    this.#mipmaps.set(id, ids);
    return id;
  }

  #mipmap(m: MipmapRef): number[] {
    const x = typeof m === 'number' ? this.#mipmaps.get(m) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidResourceHandle, `not a mipmapped array of this context: ${String(m)}`);
    return x;
  }

  async mipmapLevel(m: MipmapRef, level: number): Promise<ArrayRef> {
    const ids = this.#mipmap(m);
    if (level >= ids.length) throw new CudaError(CudaErr.InvalidValue, `level ${level} of ${ids.length}`);
    return ids[level];
  }

  async mipmapDestroy(m: MipmapRef): Promise<void> {
    const ids = this.#mipmap(m);
    this.#mipmaps.delete(m as number);
    for (const id of ids) await this.arrayDestroy(id);
  }

  async texCreate(res: TexResource, _desc: TexDesc): Promise<bigint> {
    if (res.kind === 'array') this.#array(res.array);
    if (res.kind === 'mipmap') this.#mipmap(res.mipmap);
    const t = this.#nextObject++;
    this.#objects.set(t, 'texture');
    return t;
  }

  async texDestroy(t: bigint): Promise<void> {
    if (this.#objects.get(t) !== 'texture') throw new CudaError(CudaErr.InvalidValue, 'not a texture object');
    this.#objects.delete(t);
  }

  async surfCreate(a: ArrayRef): Promise<bigint> {
    this.#array(a);
    const s = this.#nextObject++;
    this.#objects.set(s, 'surface');
    return s;
  }

  async surfDestroy(s: bigint): Promise<void> {
    if (this.#objects.get(s) !== 'surface') throw new CudaError(CudaErr.InvalidValue, 'not a surface object');
    this.#objects.delete(s);
  }

  async streamCreate(_flags: number, priority: number): Promise<StreamRef> {
    // Clamped to the device's range, as the driver does.
    const st: HostStream = { priority: Math.min(PRIORITY_LEAST, Math.max(PRIORITY_GREATEST, priority)), attrs: new Map() };
    return st;
  }

  async streamGetPriority(s: StreamRef | undefined): Promise<number> {
    return ((s as HostStream | undefined) ?? this.#legacy).priority;
  }

  async streamPriorityRange(): Promise<{ least: number; greatest: number }> {
    return { least: PRIORITY_LEAST, greatest: PRIORITY_GREATEST };
  }

  /** There is no L2 here: nothing persists. */
  async resetPersistingL2Cache(): Promise<void> {}

  async streamDestroy(): Promise<void> {}
  async streamSynchronize(): Promise<void> {}

  async streamQuery(): Promise<boolean> {
    return true;
  }

  async streamWaitEvent(): Promise<void> {}

  async eventCreate(flags: number): Promise<EventRef> {
    const e: HostEvent = { flags, at: undefined };
    return e;
  }

  async eventDestroy(): Promise<void> {}

  async eventRecord(e: EventRef): Promise<void> {
    (e as HostEvent).at = performance.now();
  }

  async eventSynchronize(): Promise<void> {}

  async eventQuery(): Promise<boolean> {
    return true;
  }

  async eventElapsed(start: EventRef, end: EventRef): Promise<number> {
    const a = start as HostEvent;
    const b = end as HostEvent;
    if ((a.flags | b.flags) & EVENT_DISABLE_TIMING) throw new CudaError(CudaErr.InvalidResourceHandle, 'event created with cudaEventDisableTiming');
    if (a.at === undefined || b.at === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, 'event was never recorded');
    return b.at - a.at;
  }

  // No kernels here. cudaErrorNoKernelImageForDevice (209) is what CUDA itself
  // says when a program's fat binary holds nothing this device can run, so a
  // program (and the guest library, which loads modules lazily) reports it the
  // way it would on a GPU of the wrong architecture; 801 (not supported) would
  // read as a missing feature of the API rather than of the device.
  async moduleLoad(_image: Uint8Array): Promise<{ ref: never; bytes: bigint }> {
    throw new CudaError(CudaErr.NoKernelImageForDevice, 'the host provider runs no kernels: kernels need the cuda provider (a GPU)');
  }
  async link(): Promise<never> {
    throw new CudaError(CudaErr.NotSupported, 'the host provider cannot JIT-link: linking needs the cuda provider (a GPU driver)');
  }
  async moduleUnload(_m: unknown): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no modules');
  }
  async functionGet(_m: unknown, _name: string): Promise<FunctionInfo> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no modules');
  }
  async variableGet(_m: unknown, _name: string): Promise<{ dptr: DevPtr; size: bigint }> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no modules');
  }
  // Function queries and cooperative launches: there are no functions (as for launch).
  async funcGetAttributes(_f: unknown): Promise<Int32Array> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }
  async funcSetAttribute(_f: unknown, _a: number, _v: number): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }
  async occupancyBlocks(_f: unknown, _b: number, _s: bigint, _fl: number): Promise<number> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }
  async occupancySmem(_f: unknown, _n: number, _b: number): Promise<bigint> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }
  async launchCooperative(_f: unknown, _g: Dim3, _b: Dim3, _s: number, _st: StreamRef | undefined, _p: Uint8Array): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }
  async launchEx(_f: unknown, _g: Dim3, _b: Dim3, _s: number, _st: StreamRef | undefined, _p: Uint8Array, _c: Dim3, _co: boolean): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the host provider has no kernels');
  }

  // Limits: a table per context that keeps what is set (clamping the hints as CUDA does).
  async limitSet(limit: number, value: bigint): Promise<void> {
    if (this.#limits[limit] === undefined) throw new CudaError(CudaErr.UnsupportedLimit, `cudaLimit ${limit} is not supported on this device`);
    const max = LIMIT_MAX[limit];
    this.#limits[limit] = max !== undefined && value > max ? max : value;
  }
  async limitGet(limit: number): Promise<bigint> {
    const v = this.#limits[limit];
    if (v === undefined) throw new CudaError(CudaErr.UnsupportedLimit, `cudaLimit ${limit} is not supported on this device`);
    return v;
  }

  // Stream attributes: kept per stream, as set (they change nothing here: work completes at once).
  async streamSetAttribute(s: StreamRef | undefined, attr: number, value: Uint8Array): Promise<void> {
    const st = (s as HostStream | undefined) ?? this.#legacy;
    st.attrs.set(attr, value.slice());
    if (attr === StreamAttr.Priority) st.priority = new DataView(value.buffer, value.byteOffset, 4).getInt32(0, true);
  }
  async streamGetAttribute(s: StreamRef | undefined, attr: number): Promise<Uint8Array> {
    const st = (s as HostStream | undefined) ?? this.#legacy;
    return (st.attrs.get(attr) ?? defaultStreamAttr(attr, st.priority)).slice();
  }
  async launch(_f: unknown, _g: Dim3, _b: Dim3, _s: number, _st: StreamRef | undefined, _p: Uint8Array): Promise<void> {
    throw noKernels();
  }
  async launchMany(_list: readonly LaunchDesc[]): Promise<void> {
    throw Object.assign(noKernels(), { index: 0 });
  }

  // Graphs with conditional nodes. Refs are ids, as for arrays: they cross to
  // a session's worker and back. Work completes when enqueued here, so a
  // launch runs the whole graph before it resolves, in stream order like any
  // other call.
  async graphCreate(): Promise<GraphRef> {
    const id = this.#nextGraph++;
    this.#graphs.set(id, { conds: new Map() });
    return id;
  }

  async graphDestroy(g: GraphRef): Promise<void> {
    this.#graph(g);
    this.#graphs.delete(g as number); // its executable graphs hold their own copies
  }

  async graphCondHandle(g: GraphRef, defaultValue: number, flags: number): Promise<bigint> {
    const h = this.#nextCond++;
    this.#graph(g).conds.set(h, { defaultValue, assignDefault: (flags & COND_ASSIGN_DEFAULT) !== 0, value: defaultValue });
    return h;
  }

  async graphInstantiate(g: GraphRef, spec: GraphSpec): Promise<GraphExecRef> {
    const graph = this.#graph(g);
    const nodes = spec.nodes.map((n) => (n.type === 'kernel' ? { ...n, params: n.params.slice() } : { ...n })); // params view the staged image
    const bodies = new Map<number, number[][]>([[-1, [[]]]]);
    const conds = new Map<bigint, HostCond>();
    nodes.forEach((n, i) => {
      // Parents come first (the dispatcher checked), so a node's body list exists when it is reached.
      const body = bodies.get(n.parent)?.[n.body];
      if (body === undefined) throw new CudaError(CudaErr.InvalidValue, `graph: node ${i} is in no body of a conditional node before it`);
      body.push(i);
      if (n.type !== 'cond') return;
      const c = graph.conds.get(n.handle);
      if (c === undefined) throw new CudaError(CudaErr.InvalidValue, `graph: node ${i}: conditional handle 0x${n.handle.toString(16)} is not this graph's`);
      conds.set(n.handle, { ...c, value: c.defaultValue });
      bodies.set(i, Array.from({ length: n.size }, () => []));
    });
    const id = this.#nextGraph++;
    this.#execs.set(id, { spec: { nodes, edges: spec.edges.slice() }, bodies, conds, hasKernel: nodes.some((n) => n.type === 'kernel') });
    return id;
  }

  async graphExecDestroy(x: GraphExecRef): Promise<void> {
    this.#exec(x);
    this.#execs.delete(x as number);
  }

  async graphLaunch(x: GraphExecRef, _stream: StreamRef | undefined): Promise<void> {
    const e = this.#exec(x);
    if (e.hasKernel) throw noKernels(); // as launch() would, before any node runs: no half-run graph
    for (const c of e.conds.values()) if (c.assignDefault) c.value = c.defaultValue;
    this.#runBody({ exec: e, loops: 0, loopWork: 0 }, e.bodies.get(-1)![0]);
  }

  #graph(g: GraphRef): HostGraph {
    const x = typeof g === 'number' ? this.#graphs.get(g) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidValue, `not a graph of this context: ${String(g)}`);
    return x;
  }

  #exec(x: GraphExecRef): HostGraphExec {
    const e = typeof x === 'number' ? this.#execs.get(x) : undefined;
    if (!e) throw new CudaError(CudaErr.InvalidValue, `not an executable graph of this context: ${String(x)}`);
    return e;
  }

  /**
   * One body's nodes in index order: every edge runs from a lower index to a
   * higher one inside its body (the dispatcher checked), so that order keeps
   * every dependency, and nodes run one at a time here anyway.
   */
  #runBody(r: GraphRun, body: readonly number[]): void {
    for (const i of body) this.#runNode(r, i);
  }

  #runNode(r: GraphRun, i: number): void {
    const n = r.exec.spec.nodes[i];
    if (r.loops > 0) chargeLoopWork(r, n);
    switch (n.type) {
      case 'memcpy': {
        const zero = { x: 0n, y: 0n, z: 0n };
        this.#copyBox({ ptr: n.dst, pitch: n.dstPitch, rows: n.dstRows }, zero, { ptr: n.src, pitch: n.srcPitch, rows: n.srcRows }, zero, n);
        return;
      }
      case 'memset': {
        const row = pattern(n.value, n.elem, Number(n.width));
        for (let y = 0n; y < n.height; y++) copyViews(this.p.views(n.dst + y * n.pitch, BigInt(row.length), this), [row]);
        return;
      }
      case 'eventRecord':
        (n.event as HostEvent).at = performance.now(); // as eventRecord()
        return;
      case 'eventWait': // as streamWaitEvent(): recorded work is already done
      case 'empty':
        return;
      case 'kernel':
        throw noKernels(); // graphLaunch refused it already
      case 'cond':
        return this.#runCond(r, i, n);
    }
  }

  /** A conditional node: which body runs (and how often) by its handle's value now. */
  #runCond(r: GraphRun, i: number, n: Extract<GraphNodeSpec, { type: 'cond' }>): void {
    const c = r.exec.conds.get(n.handle)!;
    const bodies = r.exec.bodies.get(i)!;
    if (n.condType === COND_IF) {
      const b = c.value !== 0 ? 0 : 1; // body 1: the else branch, where there is one
      if (b < n.size) this.#runBody(r, bodies[b]);
    } else if (n.condType === COND_WHILE) {
      r.loops++;
      for (let k = 0; c.value !== 0; k++) {
        if (k === MAX_WHILE_ITERATIONS)
          throw new CudaError(LAUNCH_TIMEOUT, `graph: while node ${i} still true after ${MAX_WHILE_ITERATIONS} iterations (no kernel runs here to end it)`);
        this.#runBody(r, bodies[0]);
      }
      r.loops--;
    } else if (c.value < n.size) {
      this.#runBody(r, bodies[c.value]); // switch: no body for a value past the last
    }
  }

  async hostDevicePointer(pieces: readonly HostPiece[]): Promise<DevPtr> {
    const size = pieces.reduce((n, p) => n + p.size, 0n);
    const base = pieces.length === 1 ? pieces[0].addr : this.#nextMapBase;
    if (pieces.length > 1) this.#nextMapBase += (size + MAP_ALIGN - 1n) / MAP_ALIGN * MAP_ALIGN + MAP_ALIGN;
    this.#maps.add({ base, size, pieces: pieces.slice() });
    return base;
  }

  async hostUnmap(ptr: DevPtr): Promise<void> {
    this.#maps.removeAt(ptr);
  }

  async destroy(): Promise<void> {
    this.dead = true;
    this.p.releaseAll(this);
    this.#arrays.clear();
    this.#mipmaps.clear();
    this.#objects.clear();
    this.#maps.clear();
    this.#vmmMaps.clear();
    this.#graphs.clear();
    this.#execs.clear();
  }
}
