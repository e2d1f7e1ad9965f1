// The `emu` provider: a CUDA device emulated in host RAM, for machines
// without a GPU (and CI). Memory, device, stream and event calls keep CUDA's
// semantics and error codes; work completes synchronously, so every stream
// is always idle. It is not a model of GPU timing and runs no kernels.
// Its parts: device memory and mappings (memory.ts), arrays (arrays.ts),
// graphs (graphs.ts), streams, events and limits (streams.ts).
import { performance } from 'node:perf_hooks';
import { CudaErr, CudaError } from '../../cuda-error';
import type {
  ArrayDesc,
  ArrayRef,
  MipmapRef,
  DeviceProps,
  DevPtr,
  Dim3,
  EventRef,
  Extent,
  FunctionInfo,
  GraphExecRef,
  GraphRef,
  GraphSpec,
  GuestSeg,
  HostBlock,
  HostPiece,
  LaunchDesc,
  Place,
  Pos,
  Provider,
  ProviderContext,
  StreamRef,
  TexDesc,
  TexResource,
  VmmRef,
} from '../../provider';
import { StreamAttr } from '../../attrs';
import { QCUDA_NUM_ATTRS } from '../../proto';
import { EmuArrays } from './arrays';
import { EmuGraphs, noKernels } from './graphs';
import { ContextMappings, EmuMemory, type MemoryOwner } from './memory';
import {
  checkOwner,
  defaultStreamAttr,
  EVENT_DISABLE_TIMING,
  EVENT_INTERPROCESS,
  EmuLimits,
  PRIORITY_GREATEST,
  PRIORITY_LEAST,
  type EmuEvent,
  type EmuStream,
} from './streams';
import { copyViews, segRange } from './views';

const HOST_DEVICE_NAME = 'qcuda host-memory device (no GPU)';

/** A few attributes a program may look at (CUdevice_attribute numbering). */
export const ATTRS: Record<number, number> = {
  1: 1024,
  2: 1024,
  3: 1024,
  4: 64,
  5: 0x7fffffff,
  6: 65535,
  7: 65535,
  8: 49152,
  9: 65536,
  10: 32,
  11: 0x7fffffff,
  12: 65536,
  13: 1000000,
  14: 512,
  15: 1,
  16: 1,
  17: 0,
  18: 0,
  19: 1,
  20: 0,
  31: 1,
  32: 0,
  33: 0,
  34: 0,
  35: 0,
  36: 1000000,
  37: 64,
  38: 0,
  39: 2048,
  40: 1,
  41: 1,
  75: 0,
  76: 0,
  81: 49152,
  82: 65536,
  83: 1,
  84: 0,
};

/** The most devices the emu provider emulates (the guest library's QC_MAX_DEVICES is 64; 16 is plenty to test with). */
export const MAX_HOST_DEVICES = 16;

/** CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: tells emulated devices apart, as bus ids tell GPUs apart. */
const ATTR_PCI_BUS_ID = 33;

export interface EmuProviderOptions {
  /** Emulated device memory size in bytes, per device (default 4 GiB). */
  totalMem?: bigint;
  /** How many devices to emulate (default 1, at most MAX_HOST_DEVICES). */
  devices?: number;
  /** Views of guest RAM by host address: the device pointers of mapped host memory. */
  guestView?: (addr: bigint, len: number) => Uint8Array[];
}

/** An emu provider over a device's guest memory: the factory form of QcudaOptions.provider. */
export function emuProvider(guestView: (addr: bigint, len: number) => Uint8Array[]): EmuProvider {
  return new EmuProvider({ guestView });
}

export class EmuProvider implements Provider {
  readonly name = 'emu' as const;
  readonly hasGpu = false;
  readonly memory: EmuMemory;
  readonly #devices: number;

  constructor(o: EmuProviderOptions = {}) {
    const guestView =
      o.guestView ??
      (() => {
        throw new CudaError(CudaErr.InvalidValue, 'no guest memory to map');
      });
    this.#devices = o.devices ?? 1;
    if (!Number.isInteger(this.#devices) || this.#devices < 1 || this.#devices > MAX_HOST_DEVICES)
      throw new Error(`emu provider: ${this.#devices} devices (1 to ${MAX_HOST_DEVICES})`);
    this.memory = new EmuMemory(o.totalMem ?? 4n << 30n, this.#devices, guestView);
  }

  get totalMem(): bigint {
    return this.memory.totalMem;
  }

  /** Device memory in use, every context's. */
  get used(): bigint {
    return this.memory.used;
  }

  deviceCount(): number {
    return this.#devices;
  }

  driverVersion(): number {
    return 13000;
  }

  deviceProps(device: number): DeviceProps {
    this.#check(device);
    const attrs = new Int32Array(QCUDA_NUM_ATTRS);
    for (const [k, v] of Object.entries(ATTRS)) attrs[Number(k)] = v;
    attrs[ATTR_PCI_BUS_ID] = device;
    const uuid = new Uint8Array(16).fill(0x51);
    uuid[15] = 0x51 + device; // device 0 keeps the uuid it always had
    return { name: HOST_DEVICE_NAME, uuid, totalMem: this.totalMem, attrs };
  }

  async openContext(device: number): Promise<ProviderContext> {
    this.#check(device);
    return new EmuContext(this.memory, device);
  }

  /**
   * A copy between contexts of two devices (cudaMemcpyPeer): device memory
   * to device memory, as NVLink or PCIe P2P would move it, never through
   * guest RAM. Each pointer must be memory of its own context.
   */
  async copyPeer(dst: ProviderContext, dstPtr: DevPtr, src: ProviderContext, srcPtr: DevPtr, size: bigint): Promise<void> {
    if (!(dst instanceof EmuContext) || !(src instanceof EmuContext) || dst.memory !== this.memory || src.memory !== this.memory)
      throw new CudaError(CudaErr.InvalidValue, 'a peer copy between contexts of another provider');
    const from = this.memory.views(srcPtr, size, src).map((v) => v.slice()); // memmove semantics, as copyOnDevice
    copyViews(this.memory.views(dstPtr, size, dst), from);
  }

  /**
   * The opener reaches the owner's bytes at an address of its own memory:
   * the owner may be a session of another device of the backend (qcuda run
   * gives each process a device of its own), whose memory is another
   * EmuMemory with addresses that may be the same numbers.
   */
  async ipcOpen(owner: ProviderContext | undefined, ptr: DevPtr, opener: ProviderContext): Promise<DevPtr> {
    if (!(owner instanceof EmuContext) || !(opener instanceof EmuContext) || opener.memory !== this.memory)
      throw new CudaError(CudaErr.InvalidValue, 'an IPC handle of another provider');
    return this.memory.importBytes(owner.memory.exportBytes(ptr, owner), opener);
  }

  async vmmImport(owner: ProviderContext, m: VmmRef, importer: ProviderContext): Promise<VmmRef> {
    if (!(owner instanceof EmuContext) || !(importer instanceof EmuContext) || importer.memory !== this.memory)
      throw new CudaError(CudaErr.InvalidValue, 'a shareable handle of another provider');
    return this.memory.vmmShare(m, owner, importer);
  }

  async ipcClose(opener: ProviderContext, ptr: DevPtr): Promise<void> {
    if (!(opener instanceof EmuContext) || !opener.memory.unimport(ptr, opener))
      throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} was not opened by IPC here`);
  }

  /** cudaIpcGetEventHandle's check, as CUDA's: an event made interprocess with timing disabled. Nothing is exported. */
  async ipcEventExport(owner: ProviderContext, e: EventRef): Promise<Uint8Array> {
    const want = EVENT_INTERPROCESS | EVENT_DISABLE_TIMING;
    if (!(owner instanceof EmuContext) || ((e as EmuEvent).flags & want) !== want)
      throw new CudaError(
        CudaErr.InvalidValue,
        'IPC event handle: the event was not made with cudaEventInterprocess | cudaEventDisableTiming',
      );
    return new Uint8Array(0);
  }

  /**
   * An event of the opener for the owner's (cudaIpcOpenEventHandle): work
   * here completes as it is submitted, so every wait on either is already
   * over, and the opener's event needs nothing of the owner's.
   */
  async ipcEventOpen(owner: ProviderContext | undefined, e: EventRef | undefined, opener: ProviderContext): Promise<EventRef> {
    if (!(owner instanceof EmuContext) || !(opener instanceof EmuContext) || opener.memory !== this.memory)
      throw new CudaError(CudaErr.InvalidResourceHandle, 'an IPC event handle of another provider');
    return opener.eventCreate((e as EmuEvent | undefined)?.flags ?? 0);
  }

  /** Emulated devices share one address space: each reaches every other's memory. */
  canAccessPeer(device: number, peer: number): number {
    this.#check(device);
    this.#check(peer);
    return device === peer ? 0 : 1;
  }

  /** As two GPUs on NVLink report it: performance rank 0, access and native atomics supported, CUDA arrays not. */
  p2pAttribute(attr: number, src: number, dst: number): number {
    this.#check(src);
    this.#check(dst);
    return attr === 2 || attr === 3 ? 1 : 0;
  }

  registerGuestMemory(): void {
    /* host memory needs no registration */
  }

  unregisterGuestMemory(): void {}

  async close(): Promise<void> {}

  #check(device: number): void {
    if (!Number.isInteger(device) || device < 0 || device >= this.#devices)
      throw new CudaError(CudaErr.InvalidDevice, `device ${device} does not exist`);
  }
}

/** Each context's id, for its streams and events. */
let nextContextId = 1;

export class EmuContext implements ProviderContext, MemoryOwner {
  /** Destroyed: it makes nothing more (a call that reaches it after the destroy fails). */
  dead = false;
  readonly mappings = new ContextMappings();
  readonly #limits = new EmuLimits();
  readonly #arrays: EmuArrays;
  readonly #graphs: EmuGraphs;
  /** The NULL stream's attributes. */
  readonly #legacy: EmuStream = { priority: 0, attrs: new Map() };
  /** Names it in the streams and events it makes (checkOwner). */
  readonly #id = nextContextId++;

  constructor(
    readonly memory: EmuMemory,
    readonly device: number,
  ) {
    this.#arrays = new EmuArrays(memory, this);
    this.#graphs = new EmuGraphs({ copyBox: (d, dp, s, sp, e) => this.#copyBox(d, dp, s, sp, e), views: (p, n) => this.#views(p, n) });
  }

  #views(ptr: DevPtr, size: bigint): Uint8Array[] {
    return this.memory.views(ptr, size, this);
  }

  async malloc(size: bigint): Promise<DevPtr> {
    return this.memory.allocate(size, this);
  }

  async vmmReserve(size: bigint, alignment: bigint, hint: DevPtr = 0n): Promise<DevPtr> {
    return this.memory.vmmReserve(size, alignment, this, hint);
  }

  /** Its parts, for its state to be saved and restored (migration/emu-context.ts). */
  get parts(): { arrays: EmuArrays; graphs: EmuGraphs; legacy: EmuStream } {
    return { arrays: this.#arrays, graphs: this.#graphs, legacy: this.#legacy };
  }

  async vmmFree(ptr: DevPtr, size: bigint): Promise<void> {
    if (this.mappings.vmmMapped(ptr, size)) throw new CudaError(CudaErr.InvalidValue, 'the reservation has memory mapped in it');
    this.memory.vmmFree(ptr, size, this);
  }

  async vmmCreate(size: bigint): Promise<VmmRef> {
    return this.memory.vmmCreate(size, this);
  }

  async vmmRelease(m: VmmRef): Promise<void> {
    this.memory.vmmRelease(m, this);
  }

  async vmmMap(ptr: DevPtr, size: bigint, m: VmmRef): Promise<void> {
    const bytes = this.memory.vmmMemory(m, this);
    if (size > BigInt(bytes.length) || !this.memory.vmmReserved(ptr, size, this) || this.mappings.vmmMapped(ptr, size))
      throw new CudaError(CudaErr.InvalidValue, `cannot map ${size} bytes at 0x${ptr.toString(16)}`);
    this.mappings.vmmMap(ptr, bytes.subarray(0, Number(size)));
  }

  async vmmUnmap(ptr: DevPtr, size: bigint): Promise<void> {
    if (!this.mappings.vmmUnmap(ptr, size)) throw new CudaError(CudaErr.InvalidValue, `no mapping at 0x${ptr.toString(16)}+${size}`);
  }

  /** Mapped memory is always reachable here: the dispatcher is what keeps it out of copies until access is set. */
  async vmmSetAccess(ptr: DevPtr, size: bigint): Promise<void> {
    if (!this.mappings.vmmHolds(ptr, size)) throw new CudaError(CudaErr.InvalidValue, `no mapping at 0x${ptr.toString(16)}+${size}`);
  }

  async free(ptr: DevPtr): Promise<void> {
    this.memory.release(ptr, this);
  }

  /** Device-wide, as natively: every context's allocations on this device count. */
  async memGetInfo(): Promise<{ free: bigint; total: bigint }> {
    return { free: this.memory.totalMem - this.memory.usedOn(this.device), total: this.memory.totalMem };
  }

  async copyToDevice(dst: DevPtr, src: GuestSeg[], _s: StreamRef | undefined): Promise<void> {
    const len = src.reduce((n, s) => n + s.len, 0);
    copyViews(
      this.#views(dst, BigInt(len)),
      src.map((s) => s.view),
    );
  }

  async copyFromDevice(dst: GuestSeg[], src: DevPtr, _s: StreamRef | undefined): Promise<void> {
    const len = dst.reduce((n, s) => n + s.len, 0);
    copyViews(
      dst.map((s) => s.view),
      this.#views(src, BigInt(len)),
    );
  }

  async copyOnDevice(dst: DevPtr, src: DevPtr, size: bigint): Promise<void> {
    const from = this.#views(src, size).map((v) => v.slice()); // memmove semantics for overlaps
    copyViews(this.#views(dst, size), from);
  }

  async memset(dst: DevPtr, value: number, size: bigint): Promise<void> {
    for (const v of this.#views(dst, size)) v.fill(value & 0xff);
  }

  async synchronize(): Promise<void> {}

  async copy3DOnDevice(dst: Place, dstPos: Pos, src: Place, srcPos: Pos, e: Extent): Promise<void> {
    this.#copyBox(dst, dstPos, src, srcPos, e);
  }

  /** copy3DOnDevice's work, synchronous (graph launches run it in a loop). */
  #copyBox(dst: Place, dstPos: Pos, src: Place, srcPos: Pos, e: Extent): void {
    for (let z = 0n; z < e.depth; z++)
      for (let y = 0n; y < e.height; y++) {
        const from = this.#arrays.row(src, srcPos, e.width, y, z).map((v) => v.slice()); // memmove semantics
        copyViews(this.#arrays.row(dst, dstPos, e.width, y, z), from);
      }
  }

  async copy3DToDevice(dst: Place, src: GuestSeg[], blocks: readonly HostBlock[]): Promise<void> {
    for (const b of blocks)
      for (let z = 0n; z < b.extent.depth; z++)
        for (let y = 0n; y < b.extent.height; y++)
          copyViews(
            this.#arrays.row(dst, b.pos, b.extent.width, y, z),
            segRange(src, b.off + z * b.pitch * b.rows + y * b.pitch, b.extent.width),
          );
  }

  async copy3DFromDevice(dst: GuestSeg[], src: Place, blocks: readonly HostBlock[]): Promise<void> {
    for (const b of blocks)
      for (let z = 0n; z < b.extent.depth; z++)
        for (let y = 0n; y < b.extent.height; y++)
          copyViews(
            segRange(dst, b.off + z * b.pitch * b.rows + y * b.pitch, b.extent.width),
            this.#arrays.row(src, b.pos, b.extent.width, y, z),
          );
  }

  async memset2D(dst: DevPtr, pitch: bigint, value: number, width: bigint, height: bigint): Promise<void> {
    for (let y = 0n; y < height; y++) for (const v of this.#views(dst + y * pitch, width)) v.fill(value & 0xff);
  }

  async arrayCreate(desc: ArrayDesc): Promise<ArrayRef> {
    return this.#arrays.create(desc);
  }

  async arrayDestroy(a: ArrayRef): Promise<void> {
    this.#arrays.destroy(a);
  }

  async mipmapCreate(desc: ArrayDesc, levels: number): Promise<MipmapRef> {
    return this.#arrays.mipmapCreate(desc, levels);
  }

  async mipmapLevel(m: MipmapRef, level: number): Promise<ArrayRef> {
    return this.#arrays.mipmapLevel(m, level);
  }

  async mipmapDestroy(m: MipmapRef): Promise<void> {
    this.#arrays.mipmapDestroy(m);
  }

  async texCreate(res: TexResource, _desc: TexDesc): Promise<bigint> {
    return this.#arrays.texCreate(res);
  }

  async texDestroy(t: bigint): Promise<void> {
    this.#arrays.objectDestroy(t, 'texture');
  }

  async surfCreate(a: ArrayRef): Promise<bigint> {
    return this.#arrays.surfCreate(a);
  }

  async surfDestroy(s: bigint): Promise<void> {
    this.#arrays.objectDestroy(s, 'surface');
  }

  async streamCreate(_flags: number, priority: number): Promise<StreamRef> {
    // Clamped to the device's range, as the driver does.
    const st: EmuStream = { priority: Math.min(PRIORITY_LEAST, Math.max(PRIORITY_GREATEST, priority)), attrs: new Map(), owner: this.#id };
    return st;
  }

  async streamGetPriority(s: StreamRef | undefined): Promise<number> {
    return ((s as EmuStream | undefined) ?? this.#legacy).priority;
  }

  async streamPriorityRange(): Promise<{ least: number; greatest: number }> {
    return { least: PRIORITY_LEAST, greatest: PRIORITY_GREATEST };
  }

  /** There is no L2 here: nothing persists. */
  async resetPersistingL2Cache(): Promise<void> {}

  async streamDestroy(s: StreamRef): Promise<void> {
    checkOwner(this.#id, 'stream', s as EmuStream);
  }

  async streamSynchronize(s: StreamRef | undefined): Promise<void> {
    checkOwner(this.#id, 'stream', s as EmuStream | undefined);
  }

  async streamQuery(s: StreamRef | undefined): Promise<boolean> {
    checkOwner(this.#id, 'stream', s as EmuStream | undefined);
    return true;
  }

  /** The event may be another device's (CUDA waits across devices). */
  async streamWaitEvent(s: StreamRef | undefined): Promise<void> {
    checkOwner(this.#id, 'stream', s as EmuStream | undefined);
  }

  async eventCreate(flags: number): Promise<EventRef> {
    const e: EmuEvent = { flags, at: undefined, owner: this.#id };
    return e;
  }

  async eventDestroy(e: EventRef): Promise<void> {
    checkOwner(this.#id, 'event', e as EmuEvent);
  }

  async eventRecord(e: EventRef, s: StreamRef | undefined): Promise<void> {
    checkOwner(this.#id, 'event', e as EmuEvent);
    checkOwner(this.#id, 'stream', s as EmuStream | undefined);
    (e as EmuEvent).at = performance.now();
  }

  async eventSynchronize(e: EventRef): Promise<void> {
    checkOwner(this.#id, 'event', e as EmuEvent);
  }

  async eventQuery(e: EventRef): Promise<boolean> {
    checkOwner(this.#id, 'event', e as EmuEvent);
    return true;
  }

  async eventElapsed(start: EventRef, end: EventRef): Promise<number> {
    const a = start as EmuEvent;
    const b = end as EmuEvent;
    if ((a.flags | b.flags) & EVENT_DISABLE_TIMING)
      throw new CudaError(CudaErr.InvalidResourceHandle, 'event created with cudaEventDisableTiming');
    if (a.at === undefined || b.at === undefined) throw new CudaError(CudaErr.InvalidResourceHandle, 'event was never recorded');
    return b.at - a.at;
  }

  // No kernels here. cudaErrorNoKernelImageForDevice (209) is what CUDA itself
  // says when a program's fat binary holds nothing this device can run, so a
  // program (and the guest library, which loads modules lazily) reports it the
  // way it would on a GPU of the wrong architecture; 801 (not supported) would
  // read as a missing feature of the API rather than of the device.
  async moduleLoad(_image: Uint8Array): Promise<{ ref: never; bytes: bigint }> {
    throw new CudaError(CudaErr.NoKernelImageForDevice, 'the emu provider runs no kernels: kernels need the cuda provider (a GPU)');
  }
  async link(): Promise<never> {
    throw new CudaError(CudaErr.NotSupported, 'the emu provider cannot JIT-link: linking needs the cuda provider (a GPU driver)');
  }
  async moduleUnload(_m: unknown): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no modules');
  }
  async functionGet(_m: unknown, _name: string): Promise<FunctionInfo> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no modules');
  }
  async variableGet(_m: unknown, _name: string): Promise<{ dptr: DevPtr; size: bigint }> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no modules');
  }
  // Function queries and cooperative launches: there are no functions (as for launch).
  async funcGetAttributes(_f: unknown): Promise<Int32Array> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  async funcSetAttribute(_f: unknown, _a: number, _v: number): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  async occupancyBlocks(_f: unknown, _b: number, _s: bigint, _fl: number): Promise<number> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  async occupancySmem(_f: unknown, _n: number, _b: number): Promise<bigint> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  async occupancyClusters(_f: unknown, ..._config: unknown[]): Promise<number> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  // A descriptor only kernels read, in a layout only NVIDIA's driver knows.
  async tensorMapEncode(_args: Uint8Array): Promise<Uint8Array> {
    throw new CudaError(CudaErr.NotSupported, 'the emu provider has no tensor memory accelerator');
  }
  async launchCooperative(_f: unknown, _g: Dim3, _b: Dim3, _s: number, _st: StreamRef | undefined, _p: Uint8Array): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }
  async launchEx(
    _f: unknown,
    _g: Dim3,
    _b: Dim3,
    _s: number,
    _st: StreamRef | undefined,
    _p: Uint8Array,
    _c: Dim3,
    _co: boolean,
  ): Promise<void> {
    throw new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
  }

  async limitSet(limit: number, value: bigint): Promise<void> {
    this.#limits.set(limit, value);
  }
  async limitGet(limit: number): Promise<bigint> {
    return this.#limits.get(limit);
  }

  // Stream attributes: kept per stream, as set (they change nothing here: work completes at once).
  async streamSetAttribute(s: StreamRef | undefined, attr: number, value: Uint8Array): Promise<void> {
    const st = (s as EmuStream | undefined) ?? this.#legacy;
    st.attrs.set(attr, value.slice());
    if (attr === StreamAttr.Priority) st.priority = new DataView(value.buffer, value.byteOffset, 4).getInt32(0, true);
  }
  async streamGetAttribute(s: StreamRef | undefined, attr: number): Promise<Uint8Array> {
    const st = (s as EmuStream | undefined) ?? this.#legacy;
    return (st.attrs.get(attr) ?? defaultStreamAttr(attr, st.priority)).slice();
  }
  async launch(_f: unknown, _g: Dim3, _b: Dim3, _s: number, _st: StreamRef | undefined, _p: Uint8Array): Promise<void> {
    throw noKernels();
  }
  async launchMany(_list: readonly LaunchDesc[]): Promise<void> {
    throw Object.assign(noKernels(), { index: 0 });
  }

  async graphCreate(): Promise<GraphRef> {
    return this.#graphs.create();
  }

  async graphDestroy(g: GraphRef): Promise<void> {
    this.#graphs.destroy(g);
  }

  async graphCondHandle(g: GraphRef, defaultValue: number, flags: number): Promise<bigint> {
    return this.#graphs.condHandle(g, defaultValue, flags);
  }

  async graphInstantiate(g: GraphRef, spec: GraphSpec): Promise<GraphExecRef> {
    return this.#graphs.instantiate(g, spec);
  }

  async graphExecDestroy(x: GraphExecRef): Promise<void> {
    this.#graphs.execDestroy(x);
  }

  async graphLaunch(x: GraphExecRef, _stream: StreamRef | undefined): Promise<void> {
    this.#graphs.launch(x);
  }

  async hostDevicePointer(pieces: readonly HostPiece[]): Promise<DevPtr> {
    return this.mappings.map(pieces);
  }

  // Its memory and events are shared between sessions by the provider itself
  // (EmuProvider.ipcOpen, ipcEventOpen): nothing leaves this process.
  async ipcMemExport(): Promise<Uint8Array> {
    throw new CudaError(CudaErr.NotSupported, 'IPC handles: host memory does not leave its process');
  }
  async ipcMemOpen(): Promise<DevPtr> {
    throw new CudaError(CudaErr.NotSupported, 'IPC handles: host memory does not leave its process');
  }
  async ipcMemClose(): Promise<void> {
    throw new CudaError(CudaErr.NotSupported, 'IPC handles: host memory does not leave its process');
  }
  async ipcEventExport(): Promise<Uint8Array> {
    throw new CudaError(CudaErr.NotSupported, 'IPC handles: emulated events do not leave their process');
  }
  async ipcEventOpen(): Promise<EventRef> {
    throw new CudaError(CudaErr.NotSupported, 'IPC handles: emulated events do not leave their process');
  }

  async hostUnmap(ptr: DevPtr): Promise<void> {
    this.mappings.unmap(ptr);
  }

  async destroy(): Promise<void> {
    this.dead = true;
    this.memory.releaseAll(this);
    this.#arrays.clear();
    this.mappings.clear();
    this.#graphs.clear();
  }
}
