// What executes CUDA work: a real GPU through the driver API (`cuda`) or
// device memory emulated in host RAM (`host`). The dispatcher checks every
// pointer, size and handle before a provider sees it; a provider reports
// failures by throwing CudaError.

import type { MemRegion } from '../vhost-user/message';

export type DevPtr = bigint;

/** A piece of guest memory, already checked to lie inside guest RAM. */
export interface GuestSeg {
  /** Host virtual address (for native copies). */
  addr: bigint;
  len: number;
  /** The same bytes as a JS view. */
  view: Uint8Array;
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

/** A kernel as the driver describes it (cuFuncGetParamInfo). */
export interface FunctionInfo {
  ref: FunctionRef;
  /** Each parameter's offset and size in the packed parameter block, in order. */
  params: { offset: number; size: number }[];
  /** offset + size of the last parameter (0 without parameters). */
  paramBytes: number;
}

export type Dim3 = readonly [number, number, number];

/**
 * Where a context's device output goes (kernels' printf: kind 1, stdout;
 * failed device asserts: kind 2, stderr): the session's queue for the guest.
 * A provider calls it, before the reply of the flush point that produced the
 * output goes back, where it has such output; the host provider never does.
 */
export type OutputSink = (kind: 1 | 2, bytes: Uint8Array) => void;

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

/** One CUDA context's worth of state: the backend opens one per guest session. */
export interface ProviderContext {
  malloc(size: bigint): Promise<DevPtr>;
  free(ptr: DevPtr): Promise<void>;
  /** stream undefined = the legacy NULL stream. Resolves once the data has moved. */
  copyToDevice(dst: DevPtr, src: GuestSeg[], stream: StreamRef | undefined): Promise<void>;
  copyFromDevice(dst: GuestSeg[], src: DevPtr, stream: StreamRef | undefined): Promise<void>;
  copyOnDevice(dst: DevPtr, src: DevPtr, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void>;
  memset(dst: DevPtr, value: number, size: bigint, stream: StreamRef | undefined, async: boolean): Promise<void>;
  synchronize(): Promise<void>;
  streamCreate(flags: number, priority: number): Promise<StreamRef>;
  streamDestroy(s: StreamRef): Promise<void>;
  streamSynchronize(s: StreamRef | undefined): Promise<void>;
  /** true when all work on the stream is done. */
  streamQuery(s: StreamRef | undefined): Promise<boolean>;
  streamWaitEvent(s: StreamRef | undefined, e: EventRef, flags: number): Promise<void>;
  eventCreate(flags: number): Promise<EventRef>;
  eventDestroy(e: EventRef): Promise<void>;
  eventRecord(e: EventRef, s: StreamRef | undefined): Promise<void>;
  eventSynchronize(e: EventRef): Promise<void>;
  eventQuery(e: EventRef): Promise<boolean>;
  /** Milliseconds between two recorded events. */
  eventElapsed(start: EventRef, end: EventRef): Promise<number>;
  /**
   * The device pointer through which the GPU addresses registered guest
   * memory at host address addr (size bytes): valid until hostUnmap or
   * destroy, and telling nothing of where the rest of guest RAM lies.
   */
  hostDevicePointer(addr: bigint, size: bigint): Promise<DevPtr>;
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
  /** The context's cudaLimit values (limit already checked to be one the runtime names). */
  limitSet(limit: number, value: bigint): Promise<void>;
  limitGet(limit: number): Promise<bigint>;
  /** A stream attribute's value (cudaLaunchAttributeValue, QCUDA_ATTR_VALUE_BYTES), rebuilt from checked fields. */
  streamSetAttribute(s: StreamRef | undefined, attr: number, value: Uint8Array): Promise<void>;
  streamGetAttribute(s: StreamRef | undefined, attr: number): Promise<Uint8Array>;
  /** As launch(), for a cooperative grid (cudaLaunchCooperativeKernel): every block resident at once. */
  launchCooperative(f: FunctionRef, grid: Dim3, block: Dim3, sharedMem: number, stream: StreamRef | undefined, params: Uint8Array): Promise<void>;
  /**
   * Enqueues a kernel on the stream, after the work already enqueued there;
   * resolves once enqueued, not completed (the kernel's own errors surface at
   * the next synchronizing call). params is the packed parameter block,
   * exactly paramBytes long: the provider never interprets it.
   */
  launch(f: FunctionRef, grid: Dim3, block: Dim3, sharedMem: number, stream: StreamRef | undefined, params: Uint8Array): Promise<void>;
  /**
   * Enqueues several launches in order, as launch() does each, in one go.
   * Every launch is tried; the promise rejects with the first failure's
   * CudaError, which carries `index`, that launch's position in the list.
   */
  launchMany(list: readonly LaunchDesc[]): Promise<void>;
  /**
   * Frees everything the context holds. Called once; the context is dead
   * after. why: 'reset' (cudaDeviceReset: the process lives on, so device
   * output is flushed to it) or 'exit' (the process is gone: end it at once,
   * even with a kernel still running, e.g. by ending its worker process).
   */
  destroy(why?: 'reset' | 'exit'): Promise<void>;
}

export interface Provider {
  readonly name: 'cuda' | 'host';
  readonly hasGpu: boolean;
  deviceCount(): number;
  driverVersion(): number;
  deviceProps(device: number): DeviceProps;
  /** Device-wide free and total bytes (the dispatcher applies the quota). */
  memGetInfo(device: number): Promise<{ free: bigint; total: bigint }>;
  openContext(device: number, output?: OutputSink): Promise<ProviderContext>;
  /**
   * Guest RAM as it is mapped in this process: register so copies run at
   * pinned speed. Unregistering resolves before the memory may be unmapped.
   * source: the file behind it, for a provider that maps guest RAM in other
   * processes too (its fd is open only during the call).
   */
  registerGuestMemory(addr: bigint, size: bigint, source?: GuestMemorySource): void | Promise<void>;
  unregisterGuestMemory(addr: bigint): void | Promise<void>;
  close(): Promise<void>;
}
