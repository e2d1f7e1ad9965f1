// What the guest may set or ask for with the function attribute, limit and
// stream attribute commands, checked before any of it reaches a provider.
// Numbers are the runtime API's (cudaFuncAttribute, cudaLimit,
// cudaStreamAttrID), which equal the driver API's (addon/src/cuda_check.cc
// asserts it). Only what is plainly invalid by CUDA's documentation is
// refused here; the driver checks the rest as it does natively.
import { CudaErr, CudaError } from './cuda-error';
import { QCUDA_ATTR_VALUE_BYTES } from './proto';

// ---- cudaFuncSetAttribute

/** cudaFuncAttribute: the settable attributes, 8..15 (CUDA 13). */
export const FuncAttr = {
  MaxDynamicSharedMemorySize: 8,
  PreferredSharedMemoryCarveout: 9,
  ClusterDimMustBeSet: 10,
  RequiredClusterWidth: 11,
  RequiredClusterHeight: 12,
  RequiredClusterDepth: 13,
  NonPortableClusterSizeAllowed: 14,
  ClusterSchedulingPolicyPreference: 15,
} as const;

/** Refuses a cudaFuncSetAttribute CUDA refuses with cudaErrorInvalidValue before any kernel is involved. */
export function checkFuncAttr(attr: number, value: number): void {
  const bad = (why: string) => new CudaError(CudaErr.InvalidValue, `cudaFuncSetAttribute: ${why}`);
  switch (attr) {
    case FuncAttr.MaxDynamicSharedMemorySize:
    case FuncAttr.RequiredClusterWidth:
    case FuncAttr.RequiredClusterHeight:
    case FuncAttr.RequiredClusterDepth:
      if (value < 0) throw bad(`attribute ${attr} cannot be negative (${value})`);
      return;
    case FuncAttr.PreferredSharedMemoryCarveout: // a percentage, or cudaSharedmemCarveoutDefault (-1)
      if (value < -1 || value > 100) throw bad(`shared memory carveout ${value} is not -1 or 0..100`);
      return;
    case FuncAttr.ClusterSchedulingPolicyPreference: // cudaClusterSchedulingPolicy: Default, Spread, LoadBalancing
      if (value < 0 || value > 2) throw bad(`cluster scheduling policy ${value}`);
      return;
    case FuncAttr.ClusterDimMustBeSet:
    case FuncAttr.NonPortableClusterSizeAllowed:
      return;
    default:
      throw bad(`${attr} is not a cudaFuncAttribute that can be set`);
  }
}

// ---- occupancy

/** cudaOccupancyDefault | cudaOccupancyDisableCachingOverride. */
export const OCCUPANCY_FLAGS = 0x1;

// ---- cudaDeviceSetLimit / cudaDeviceGetLimit

/** cudaLimit: the limits the runtime API names (CUDA 13). */
export const Limit = {
  StackSize: 0,
  PrintfFifoSize: 1,
  MallocHeapSize: 2,
  DevRuntimeSyncDepth: 3,
  DevRuntimePendingLaunchCount: 4,
  MaxL2FetchGranularity: 5,
  PersistingL2CacheSize: 6,
} as const;
const LIMIT_COUNT = 7;

/** The driver's limits 7.. (CIG contexts) are not cudaLimit values: the runtime has no name for them. */
export function checkLimit(limit: number): void {
  if (limit >= LIMIT_COUNT)
    throw new CudaError(CudaErr.InvalidValue, `cudaLimit ${limit} does not exist (CUDA 13 names 0..${LIMIT_COUNT - 1})`);
}

/**
 * The limits a guest may set. The persisting L2 set-aside is the device's,
 * not the context's: one VM's cudaDeviceSetLimit would shrink the L2 every
 * other VM's kernels run with (security review 2, L7). It is refused as a
 * GPU without persisting L2 refuses it, and the device reports a maximum of
 * 0 (DEVICE_PROPS), which programs check before setting it.
 */
export function checkLimitSet(limit: number): void {
  checkLimit(limit);
}

/**
 * cudaLimitPersistingL2CacheSize: the L2 set-aside is the GPU's, shared by
 * every VM on it, so a guest's is a hint kept for the guest (what it reads
 * back, up to the device's maximum, attribute 108) and never set on the
 * GPU; its persisting access windows run as Normal accesses.
 */
export function isL2SetAside(limit: number): boolean {
  return limit === Limit.PersistingL2CacheSize;
}

/** CUdevice_attribute HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED: 1 where VMM memory is shared between processes (VmmShareBook.servedBy), else 0. */
export const ATTR_POSIX_FD_HANDLES = 103;

/**
 * CUdevice_attribute MEMPOOL_SUPPORTED_HANDLE_TYPES: POSIX fd (1) where the
 * provider opens IPC memory handles, which the guest's pool export carries
 * (guest-driver/lib/poolipc.c), else 0.
 */
export const ATTR_MEMPOOL_HANDLE_TYPES = 119;
export const MEM_HANDLE_TYPE_POSIX_FD = 1;

/** CUdevice_attribute IPC_EVENT_SUPPORTED: 1 where the provider opens IPC event handles, else 0. */
export const ATTR_IPC_EVENTS = 125;

/** CUdevice_attribute MAX_PERSISTING_L2_CACHE_SIZE: the GPU's, the most a guest's set-aside hint reads back (isL2SetAside). */
export const ATTR_MAX_PERSISTING_L2 = 108;

/**
 * CUdevice_attribute numbers a guest reads as 0 whatever the GPU says: what
 * they promise, qcuda does not serve. NCCL and others choose their paths by
 * them (NCCL takes fabric handles where 128 says so, switch multicast where
 * 132 does), and a path qcuda refuses half-way fails where one it serves
 * would have worked (docs/multi-gpu.md, "NCCL: what it needs").
 */
export const UNSERVED_ATTRS: readonly number[] = [
  107, // GENERIC_COMPRESSION_SUPPORTED: cuMemCreate serves no compression (NVIDIA's compressible-memory sample then failed allocating, where it waives on a GPU without)
  110, // GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED: no third-party device reaches a guest's memory
  116, // GPU_DIRECT_RDMA_SUPPORTED: likewise
  124, // DMA_BUF_SUPPORTED: cuMemGetHandleForAddressRange is not served
  128, // HANDLE_TYPE_FABRIC_SUPPORTED: not exported either
  132, // MULTICAST_SUPPORTED: cuMulticast* is not served
  141, // HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: cuMemCreate serves device memory only
  145, // HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: likewise
  146, // HOST_ALLOC_DMA_BUF_SUPPORTED: no dma-buf
];

/** Threads the device holds at once (CUdevice_attribute 16 MULTIPROCESSOR_COUNT x 39 MAX_THREADS_PER_MULTIPROCESSOR). */
export function residentThreads(attrs: Int32Array): bigint {
  return BigInt(Math.max(attrs[16], 1)) * BigInt(Math.max(attrs[39], 1));
}

/**
 * The device memory a context's per-thread local memory of perThread bytes
 * holds beyond its default (base, which is context overhead): the driver
 * reserves it for every resident thread (threads). The one formula for the
 * stack limit and a launch's local memory, which are one reservation
 * (local-memory.ts).
 */
export function localReservationBytes(perThread: bigint, base: bigint, threads: bigint): bigint {
  return perThread > base ? (perThread - base) * threads : 0n;
}

/**
 * The device memory the printf FIFO's or the malloc heap's value reserves
 * beyond what the context held with its default value (`base`), outside any
 * allocation: what the VM's quota counts for them (0 for the limits that
 * reserve nothing; the stack limit's is the context's local memory,
 * local-memory.ts).
 */
export function limitBytes(limit: number, value: bigint, base: bigint): bigint {
  const extra = value > base ? value - base : 0n;
  if (limit === Limit.PrintfFifoSize || limit === Limit.MallocHeapSize) return extra;
  return 0n;
}

/** The limits limitBytes counts. */
export function limitReservesMemory(limit: number): boolean {
  return limit === Limit.StackSize || limit === Limit.PrintfFifoSize || limit === Limit.MallocHeapSize;
}

// ---- cudaStreamSetAttribute / cudaStreamGetAttribute

/** cudaAccessProperty. */
export const AccessProperty = { Normal: 0, Streaming: 1, Persisting: 2 } as const;

/** cudaStreamAttrID: the launch attributes CUDA 13 documents as valid for streams. */
export const StreamAttr = {
  AccessPolicyWindow: 1,
  SynchronizationPolicy: 3,
  Priority: 8,
  MemSyncDomainMap: 9,
  MemSyncDomain: 10,
  NvlinkUtilCentricScheduling: 16,
} as const;
const STREAM_ATTRS = new Set<number>(Object.values(StreamAttr));

export function checkStreamAttr(attr: number): void {
  if (!STREAM_ATTRS.has(attr))
    throw new CudaError(CudaErr.InvalidValue, `attribute ${attr} is not a stream attribute (streams take ${[...STREAM_ATTRS].join(', ')})`);
}

/**
 * A stream attribute's value (cudaLaunchAttributeValue) rebuilt from its
 * checked fields, so that nothing but those fields reaches the driver.
 * inSession(ptr, size) throws unless the range is memory of the caller's.
 */
export function streamAttrValue(attr: number, raw: Uint8Array, inSession: (ptr: bigint, size: bigint) => void): Uint8Array {
  checkStreamAttr(attr);
  const bad = (why: string) => new CudaError(CudaErr.InvalidValue, `cudaStreamSetAttribute: ${why}`);
  const v = new DataView(raw.buffer, raw.byteOffset, QCUDA_ATTR_VALUE_BYTES);
  const out = new Uint8Array(QCUDA_ATTR_VALUE_BYTES);
  const o = new DataView(out.buffer);
  const enumIn = (what: string, lo: number, hi: number) => {
    const x = v.getUint32(0, true);
    if (x < lo || x > hi) throw bad(`${what} ${x} (${lo}..${hi})`);
    o.setUint32(0, x, true);
  };
  switch (attr) {
    case StreamAttr.AccessPolicyWindow: {
      // struct cudaAccessPolicyWindow: base_ptr, num_bytes, float hitRatio, hitProp, missProp.
      const base = v.getBigUint64(0, true);
      const bytes = v.getBigUint64(8, true);
      const hitRatio = v.getFloat32(16, true);
      const hitProp = v.getUint32(20, true);
      const missProp = v.getUint32(24, true);
      if (!(hitRatio >= 0 && hitRatio <= 1)) throw bad(`access policy hitRatio ${hitRatio} is not in [0, 1]`);
      if (hitProp > 2) throw bad(`access policy hitProp ${hitProp} is not a cudaAccessProperty`);
      if (missProp > 1) throw bad(`access policy missProp ${missProp} is not Normal or Streaming`);
      if (bytes > 0n) inSession(base, bytes); // a window over other processes' memory is refused
      o.setBigUint64(0, base, true);
      o.setBigUint64(8, bytes, true);
      o.setUint32(16, v.getUint32(16, true), true);
      // Persisting hits would take lines of the L2 set-aside, which every VM shares (L7):
      // Normal, as Persisting is on a device whose set-aside is 0 (checkLimitSet).
      o.setUint32(20, hitProp === AccessProperty.Persisting ? AccessProperty.Normal : hitProp, true);
      o.setUint32(24, missProp, true);
      break;
    }
    case StreamAttr.SynchronizationPolicy: // cudaSyncPolicyAuto .. BlockingSync
      enumIn('synchronization policy', 1, 4);
      break;
    case StreamAttr.Priority: // any int: the driver clamps it to the device's range
      o.setInt32(0, v.getInt32(0, true), true);
      break;
    case StreamAttr.MemSyncDomainMap: // two domain ids (bytes): the driver checks them
      out[0] = raw[0];
      out[1] = raw[1];
      break;
    case StreamAttr.MemSyncDomain: // cudaLaunchMemSyncDomainDefault, Remote
      enumIn('memory sync domain', 0, 1);
      break;
    case StreamAttr.NvlinkUtilCentricScheduling:
      enumIn('NVLink utilisation-centric scheduling', 0, 1);
      break;
  }
  return out;
}
