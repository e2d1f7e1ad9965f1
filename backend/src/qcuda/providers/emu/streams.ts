// An emu context's streams, events and limits: records of what was set, as
// CUDA reports it back (work completes at once here, so nothing waits).
import { StreamAttr } from '../../attrs';
import { CudaErr, CudaError } from '../../cuda-error';
import { QCUDA_ATTR_VALUE_BYTES } from '../../proto';

/** cudaEventDisableTiming */
export const EVENT_DISABLE_TIMING = 0x2;
export const EVENT_INTERPROCESS = 0x4;

export interface EmuEvent {
  flags: number;
  at: number | undefined; // ms, when recorded
  /** The id of the context that made it (a number: refs cross a worker's channel as copies). */
  owner?: number;
}

/** A stream: its creation priority and the attributes set on it (cudaLaunchAttributeValue bytes by id). */
export interface EmuStream {
  priority: number;
  attrs: Map<number, Uint8Array>;
  /** The id of the context that made it (a number: refs cross a worker's channel as copies). */
  owner?: number;
}

/**
 * Throws unless a stream or event is the context's own (or none): the
 * driver runs a stream's work and an event's record in the context that
 * made them, and the backend must bring each call to that context (a
 * session has one per device). Here every context would serve any, so
 * this is what keeps the backend's choice of context honest without a GPU.
 */
export function checkOwner(ctx: number, what: 'stream' | 'event', o: { owner?: number } | undefined): void {
  if (o?.owner !== undefined && o.owner !== ctx)
    throw new CudaError(CudaErr.InvalidResourceHandle, `a ${what} of another context (device) used in this one`);
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

/** Stream priorities, as the H100's driver reports them: a lower number is a higher priority. */
export const PRIORITY_LEAST = 0;
export const PRIORITY_GREATEST = -5;

/** A stream attribute nobody set, as CUDA reports it for a fresh stream. */
export function defaultStreamAttr(attr: number, priority: number): Uint8Array {
  const out = new Uint8Array(QCUDA_ATTR_VALUE_BYTES);
  const v = new DataView(out.buffer);
  if (attr === StreamAttr.Priority) v.setInt32(0, priority, true);
  else if (attr === StreamAttr.SynchronizationPolicy)
    v.setUint32(0, 1, true); // cudaSyncPolicyAuto
  else if (attr === StreamAttr.MemSyncDomainMap) out[1] = 1; // default domain 0, remote domain 1
  return out;
}

/** A context's limits (cudaLimit order): a table that keeps what is set, clamping the hints as CUDA does. */
export class EmuLimits {
  readonly #values = LIMIT_DEFAULTS.slice();

  set(limit: number, value: bigint): void {
    if (this.#values[limit] === undefined)
      throw new CudaError(CudaErr.UnsupportedLimit, `cudaLimit ${limit} is not supported on this device`);
    const max = LIMIT_MAX[limit];
    this.#values[limit] = max !== undefined && value > max ? max : value;
  }

  get(limit: number): bigint {
    const v = this.#values[limit];
    if (v === undefined) throw new CudaError(CudaErr.UnsupportedLimit, `cudaLimit ${limit} is not supported on this device`);
    return v;
  }
}
