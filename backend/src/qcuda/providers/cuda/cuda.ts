// The `cuda` provider: one host GPU through the CUDA driver API (the
// qcuda_cuda addon, which dlopens libcuda.so.1).
//
// - The guest sees the host GPUs chosen at creation (--gpu=0,1), in that
//   order: guest device i is the i-th listed GPU, its properties that GPU's.
//   A session's contexts on two of them live in one process, so a copy
//   between them (copyPeer) goes device to device (docs/multi-gpu.md).
// - Each guest session gets a context of its own (cuCtxCreate), as each native
//   process does: its allocations, streams and events are its own and go with
//   it at destroy(), and a sticky fault (an illegal address in a kernel) kills
//   only that session's context, never the others'.
// - The provider itself holds the first GPU's primary context, for what is
//   not a session's: registering guest RAM (PORTABLE, so every context of
//   every device sees it as pinned; DEVICEMAP, for hostDevicePointer).
// - Stream and event refs are the addon's per-context ids (numbers); undefined
//   is the legacy NULL stream.
// - Device printf/assert output: the provider captures the process's stdout
//   and stderr and hands what kernels print to the sessions' output sinks at
//   the flush points, before their replies (cuda-output.ts says how output
//   is attributed to sessions).
import { CudaErr, CudaError } from '../../cuda-error';
import type { DevPtr, DeviceProps, GuestMemorySource, OutputSink, Provider, ProviderContext } from '../../provider';
import { cudaNative, type CudaContextNative, type CudaNative } from './native-cuda';
import { deviceOutput } from './cuda-output';
import { CudaSessionContext, cudaSide } from './context';
import { GuestRam } from './guest-ram';
import type { BusyPoll } from '../../../vhost-user';

let factorySet = false;

function addon(): CudaNative {
  const n = cudaNative();
  if (!factorySet) {
    n.setErrorFactory((code, message) => new CudaError(code, message));
    factorySet = true;
  }
  return n;
}

/** The most waiter threads (blocking waits) the addon may run in this process (VmLimits.waiterThreads). */
export function setWaiterThreads(n: number): void {
  addon().setWaiterLimit(n);
}

/** How long a wait run on this process's JS thread polls before going to a waiter thread (ProviderSetup.inlineWaitUs). */
export function setInlineWait(us: number): void {
  addon().setInlineWait(us);
}

/** Whether ordered calls run on this process's JS thread when the context thread is idle (ProviderSetup.inlineCalls). */
export function setInlineCalls(on: boolean): void {
  addon().setInlineCalls(on);
}

/** Whether the cuda provider can run here, and if not why (for --provider auto). Runs cuInit once: can take a second. */
export function cudaAvailable(): { ok: boolean; reason: string } {
  const p = addon().probe();
  return { ok: p.ok, reason: p.ok ? `${p.deviceCount} CUDA device(s), driver ${p.driverVersion}` : p.reason };
}

export interface CudaProviderOptions {
  /** Flags for each session's cuCtxCreate (CU_CTX_*; the runtime's cudaDeviceSchedule* values). Default: MAP_HOST, scheduling auto. */
  contextFlags?: number;
  /** Capture device printf/assert output for the sessions (cuda-output.ts). Default false: only a backend process should take over its stdout and stderr. */
  captureOutput?: boolean;
  /**
   * Register all of guest RAM for the device (default true): copies from
   * anywhere in it run at pinned speed, but every kernel of this process can
   * then reach all of it (registered host memory is mapped for the device
   * whatever the flags, measured on the H200). False where guest kernels run
   * beside other guest processes' memory: only what a session maps (HOST_MAP)
   * is registered, through its alias, and other copies are pageable ones.
   */
  pinGuestRam?: boolean;
}

export class CudaProvider implements Provider {
  readonly name = 'cuda' as const;
  readonly hasGpu = true;
  readonly #n: CudaNative;
  /** Each listed GPU's properties, read at creation (guest device i: gpus[i]). */
  readonly #props: DeviceProps[];
  readonly #driverVersion: number;
  readonly #contexts = new Set<CudaSessionContext>();
  readonly #ram: GuestRam;
  readonly #contextFlags: number;
  readonly #capturing: boolean;
  #closed = false;

  constructor(
    n: CudaNative,
    readonly gpus: readonly number[],
    readonly primary: CudaContextNative,
    o: CudaProviderOptions,
  ) {
    this.#n = n;
    this.#props = gpus.map((g) => {
      const p = n.deviceProps(g);
      return { name: p.name, uuid: p.uuid, totalMem: p.totalMem, attrs: p.attrs };
    });
    this.#driverVersion = n.probe().driverVersion;
    this.#contextFlags = o.contextFlags ?? n.CTX_MAP_HOST;
    this.#ram = new GuestRam(n, primary, o.pinGuestRam ?? true);
    this.#capturing = (o.captureOutput ?? false) && deviceOutput.acquire(n); // last: nothing after it may throw
  }

  deviceCount(): number {
    return this.gpus.length;
  }

  driverVersion(): number {
    return this.#driverVersion;
  }

  /** The host GPU of guest device `device`. */
  gpuOf(device: number): number {
    if (!Number.isInteger(device) || device < 0 || device >= this.gpus.length)
      throw new CudaError(CudaErr.InvalidDevice, `no device ${device} (the cuda provider exposes ${this.gpus.length})`);
    return this.gpus[device];
  }

  deviceProps(device: number): DeviceProps {
    const p = this.#props[device];
    if (!p) this.gpuOf(device);
    return { name: p.name, uuid: p.uuid.slice(), totalMem: p.totalMem, attrs: p.attrs.slice() };
  }

  async openContext(device: number, output?: OutputSink): Promise<ProviderContext> {
    const gpu = this.gpuOf(device);
    if (this.#closed) throw new CudaError(CudaErr.InitializationError, 'the cuda provider is closed');
    const native = await this.#n.openContext(gpu, this.#contextFlags, false);
    const c = new CudaSessionContext(native, this.#ram, output, (x) => this.#contexts.delete(x));
    this.#contexts.add(c);
    return c;
  }

  /**
   * A copy from src's device to dst's, both contexts of this process: the
   * driver moves it device to device (cuMemcpyPeer, on dst's context thread),
   * ordered after what both contexts were given before.
   */
  copyPeer(dst: ProviderContext, dstPtr: DevPtr, src: ProviderContext, srcPtr: DevPtr, size: bigint): Promise<void> {
    const [x, y] = [cudaSide(dst), cudaSide(src)];
    if (!x || !y) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'copyPeer: not contexts of the cuda provider'));
    return x.native.copyPeer(y.native, dstPtr, srcPtr, size);
  }

  /** Whether guest device `device` can reach `peer`'s memory (cuDeviceCanAccessPeer between their GPUs): 0 or 1. */
  canAccessPeer(device: number, peer: number): number {
    const [a, b] = [this.gpuOf(device), this.gpuOf(peer)];
    return a === b ? 0 : this.#n.canAccessPeer(a, b);
  }

  /** cuDeviceGetP2PAttribute between two guest devices' GPUs. */
  p2pAttribute(attr: number, src: number, dst: number): number {
    return this.#n.p2pAttribute(attr, this.gpuOf(src), this.gpuOf(dst));
  }

  /** cuCtxEnablePeerAccess on ctx's thread for peer's context. */
  enablePeerAccess(ctx: ProviderContext, peer: ProviderContext): Promise<void> {
    const [x, y] = [cudaSide(ctx), cudaSide(peer)];
    if (!x || !y)
      return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'enablePeerAccess: not contexts of the cuda provider'));
    return x.native.enablePeerAccess(y.native);
  }

  disablePeerAccess(ctx: ProviderContext, peer: ProviderContext): Promise<void> {
    const [x, y] = [cudaSide(ctx), cudaSide(peer)];
    if (!x || !y)
      return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'disablePeerAccess: not contexts of the cuda provider'));
    return x.native.disablePeerAccess(y.native);
  }

  /**
   * Page-locks guest RAM (guest-ram.ts). Returns a promise that never
   * rejects (a failure only costs speed: copies then go through the driver's
   * staging buffers); await it where it matters.
   */
  registerGuestMemory(addr: bigint, size: bigint, source?: GuestMemorySource): Promise<void> {
    return this.#ram.register(addr, size, source);
  }

  /** Whether [addr, addr+size) lies in one registered region (waits for a registration in progress). */
  isRegistered(addr: bigint, size: bigint): Promise<boolean> {
    return this.#ram.isRegistered(addr, size);
  }

  /** Unpins a region registered before; its mapping must stay until the promise settles (it never rejects). */
  unregisterGuestMemory(addr: bigint): Promise<void> {
    return this.#ram.unregister(addr);
  }

  pollWith(poll: BusyPoll): void {
    // A turn that settled a wait is activity: the window goes on (and its
    // last turn, which then settled something, does not hand the rest on).
    // Quiet (a turn may spin) while no job is in flight: a settle needs the loop.
    poll.keep(
      (expired) => {
        if (this.#n.pollWaits(expired) > 0) poll.touch();
      },
      () => this.#n.pendingJobs() === 0,
    );
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#contexts].map((c) => c.destroy()));
    await this.#ram.close();
    try {
      await this.primary.destroy();
    } finally {
      if (this.#capturing) deviceOutput.release();
    }
  }
}

/**
 * The cuda provider on host GPU `gpu`, or on a list of them (guest device i:
 * the i-th). Rejects with a CudaError saying why where CUDA cannot be used.
 * cuInit and the primary context's creation run on worker threads.
 */
export async function createCudaProvider(gpu: number | readonly number[] = 0, o: CudaProviderOptions = {}): Promise<CudaProvider> {
  const gpus = typeof gpu === 'number' ? [gpu] : [...gpu];
  const n = addon();
  const p = await n.probeAsync();
  if (!p.ok) {
    const code = /no CUDA-capable device/.test(p.reason) ? CudaErr.NoDevice : CudaErr.InitializationError;
    throw new CudaError(code, `CUDA is not available: ${p.reason}`);
  }
  if (gpus.length === 0 || new Set(gpus).size !== gpus.length)
    throw new CudaError(CudaErr.InvalidDevice, `not a list of distinct GPUs: ${gpus.join(',')}`);
  for (const g of gpus) {
    if (!Number.isInteger(g) || g < 0 || g >= p.deviceCount)
      throw new CudaError(CudaErr.InvalidDevice, `no GPU ${g}: this host has ${p.deviceCount}`);
  }
  const primary = await n.openContext(gpus[0], 0, true);
  try {
    return new CudaProvider(n, gpus, primary, o);
  } catch (e) {
    await primary.destroy().catch(() => undefined);
    throw e;
  }
}
