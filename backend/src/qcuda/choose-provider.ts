// Picks the provider the backend command asked for.
import os from 'node:os';
import { PROVIDER_ALIASES, PROVIDER_NAMES, type Provider } from './provider';
import { EmuProvider, type EmuProviderOptions } from './providers/emu';
import { IsolatedProvider } from './workers/isolated';
import type { WorkerSandbox } from './workers/worker-messages';

/** What --provider takes: a provider, or auto (the GPU if one answers, else emu). */
export const PROVIDER_KINDS = [...PROVIDER_NAMES, 'auto'] as const;
export type ProviderKind = (typeof PROVIDER_KINDS)[number];

/** The kind a --provider value names (an older name as the provider it stands for: PROVIDER_ALIASES), or undefined. */
export function providerKind(value: string): ProviderKind | undefined {
  return PROVIDER_KINDS.find((k) => k === value) ?? PROVIDER_ALIASES.get(value);
}

interface CudaModule {
  cudaAvailable(): { ok: boolean; reason: string };
  createCudaProvider(gpu: number | readonly number[], o?: { captureOutput?: boolean; pinGuestRam?: boolean }): Promise<Provider>;
  setWaiterThreads(n: number): void;
  setInlineWait(us: number): void;
  setInlineCalls(on: boolean): void;
}

/** Loaded on demand: the emu path must work where the CUDA part cannot. */
function cudaModule(): CudaModule {
  return require('./providers/cuda/cuda') as CudaModule;
}

export interface ProviderChoice {
  provider: Provider;
  /** Why auto chose what it chose (for the log). */
  note: string;
}

export interface ProviderSetup {
  /**
   * cuda only: run each session's context in a worker process of its own
   * (isolated.ts), so a kernel fault in one guest process cannot end CUDA
   * for the others. A backend serving guests does; default false.
   */
  isolate?: boolean;
  /**
   * cuda without isolate: the provider takes the process's stdout and stderr
   * to forward device printf/assert output to the guests (a benchmark or a
   * tool that prints its own results must not). Isolated workers always do.
   */
  captureOutput?: boolean;
  /** cuda: the addon's waiter threads per process, this one's and each worker's (VmLimits.waiterThreads). */
  waiterThreads?: number;
  /**
   * cuda with isolate: how long a session's worker polls the GPU on its own
   * thread for a synchronize, a blocking copy or an event wait before handing
   * the wait to a waiter thread (DEFAULT_INLINE_WAIT_US; 0: never). A worker
   * serves one guest process, whose thread would block there natively; a
   * short wait then takes no thread hop.
   */
  inlineWaitUs?: number;
  /**
   * cuda with isolate: a session's worker runs its ordered calls (allocations,
   * launches, handle changes) on its own thread when the context's thread is
   * idle, as it does its short waits (default true): no thread hop per call.
   */
  inlineCalls?: boolean;
  /**
   * cuda without isolate: this process serves one guest process at a time
   * (the backend with --isolation=none, which allows one CUDA process per
   * VM), so its waits and calls run inline as a worker's do (inlineWaitUs,
   * inlineCalls). Default false: a process serving many must not block.
   */
  inlineHere?: boolean;
  /** cuda with isolate: how long a session's worker keeps polling its channel after each call (DEFAULT_POLL_US; 0: never). */
  pollUs?: number;
  /** cuda with isolate: a worker serving its session's own queue answers the short calls of a round trip in C (ring-server.ts; default true). */
  ringServer?: boolean;
  /** cuda: register all of guest RAM for the device in the process that runs the session's kernels (CudaProviderOptions.pinGuestRam; default false). */
  pinGuestRam?: boolean;
  /** cuda with isolate: where each worker's start and exit are logged (the VM's event log). */
  log?: (line: string) => void;
  /** cuda with isolate: each worker's sandbox (worker.ts; default seccomp). */
  workerSandbox?: WorkerSandbox;
}

/** A worker's inline wait unless told otherwise: a small copy or a short kernel ends within it. */
export const DEFAULT_INLINE_WAIT_US = 50;

/**
 * How long the backend polls its rings, and a worker its channel, after each
 * request and answer before sleeping (vhost-user/platform/busy-poll.ts): a synchronous
 * caller's next request comes within it, with no wake-up on either side.
 * Only where the host has cores to spare: a poller holds a core, and on a
 * 2-core machine with other work (a TCG guest, a build) it took the core
 * from the very process it waited for: a synchronize round trip went from
 * 14 us without polling to 65-116 us with it (emu provider, harness).
 */
export const DEFAULT_POLL_US = os.availableParallelism() >= 4 ? 50 : 0;

/** The most GPUs one backend serves (--gpu=0,1,...): the emu provider's bound on emulated devices too. */
export const MAX_GPUS = 16;

/**
 * --gpu's value: one host GPU ("1") or a list of distinct ones ("0,1"),
 * guest device i being the i-th listed. Throws saying why otherwise.
 */
export function parseGpus(s: string): number[] {
  const gpus = s.split(',').map((x) => x.trim());
  if (gpus.some((x) => !/^\d+$/.test(x) || +x > 63))
    throw new Error(`--gpu must be a GPU number in 0..63 or a list of them (0,1), got '${s}'`);
  const list = gpus.map(Number);
  if (new Set(list).size !== list.length) throw new Error(`--gpu lists a GPU twice: '${s}'`);
  if (list.length > MAX_GPUS) throw new Error(`--gpu lists more than ${MAX_GPUS} GPUs: '${s}'`);
  return list;
}

/**
 * How many devices the emu provider emulates: --host-devices where given,
 * else as many as --gpu lists (a user who asked for two GPUs gets two
 * devices where none answers). A list and a different --host-devices
 * contradict each other: throws saying so.
 */
export function hostDeviceCount(hostDevices: number | undefined, gpus: readonly number[]): number {
  if (hostDevices === undefined) return gpus.length;
  if (gpus.length > 1 && hostDevices !== gpus.length)
    throw new Error(`--host-devices=${hostDevices} contradicts --gpu=${gpus.join(',')}, which asks for ${gpus.length} devices`);
  return hostDevices;
}

/** "GPU 1" or "GPUs 0,1" (for the log). */
function gpuNote(gpu: number | readonly number[]): string {
  return typeof gpu === 'number' || gpu.length === 1 ? `GPU ${String(gpu)}` : `GPUs ${gpu.join(',')}`;
}

/** Whether a GPU answers here, and if not why (what --provider=auto asks). Runs cuInit once: can take a second. */
export function gpuProbe(): { ok: boolean; reason: string } {
  try {
    return cudaModule().cudaAvailable();
  } catch (e) {
    return { ok: false, reason: `the CUDA provider failed to load: ${(e as Error).message}` };
  }
}

/** What the log (and qcuda vm --demo) says of the emu provider. */
const EMU_NOTE = 'device memory in host RAM, no GPU';

export async function createProvider(
  kind: ProviderKind,
  gpu: number | readonly number[],
  emu: EmuProviderOptions = {},
  setup: ProviderSetup = {},
): Promise<ProviderChoice> {
  if (kind === 'emu') return { provider: new EmuProvider(emu), note: `emu provider: ${EMU_NOTE}` };
  let cuda: CudaModule | undefined;
  let avail: { ok: boolean; reason: string };
  try {
    cuda = cudaModule();
    avail = cuda.cudaAvailable();
  } catch (e) {
    avail = { ok: false, reason: `the CUDA provider failed to load: ${(e as Error).message}` };
  }
  if (avail.ok && cuda && setup.waiterThreads !== undefined) cuda.setWaiterThreads(setup.waiterThreads);
  if (avail.ok && cuda && setup.isolate) {
    const local = await cuda.createCudaProvider(gpu, { captureOutput: false });
    warnIfPageableReachable(local, setup);
    return {
      provider: new IsolatedProvider(local, {
        worker: {
          kind: 'cuda',
          gpu,
          waiterThreads: setup.waiterThreads,
          inlineWaitUs: setup.inlineWaitUs ?? DEFAULT_INLINE_WAIT_US,
          inlineCalls: setup.inlineCalls ?? true,
          pollUs: setup.pollUs ?? DEFAULT_POLL_US,
          ringServer: setup.ringServer ?? true,
          pinGuestRam: setup.pinGuestRam ?? false,
          sandbox: setup.workerSandbox,
        },
        log: setup.log,
      }),
      note: `cuda provider on ${gpuNote(gpu)}, a worker process per guest process`,
    };
  }
  if (avail.ok && cuda) {
    if (setup.inlineHere) {
      cuda.setInlineWait(setup.inlineWaitUs ?? DEFAULT_INLINE_WAIT_US);
      cuda.setInlineCalls(setup.inlineCalls ?? true);
    }
    return {
      provider: await cuda.createCudaProvider(gpu, { captureOutput: setup.captureOutput, pinGuestRam: setup.pinGuestRam ?? false }),
      note: `cuda provider on ${gpuNote(gpu)}`,
    };
  }
  if (kind === 'cuda') throw new Error(`--provider=cuda: ${avail.reason}`);
  return { provider: new EmuProvider(emu), note: `emu provider: ${EMU_NOTE} (${avail.reason})` };
}

/** CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS: the GPU reaches pageable host memory (HMM). */
const PAGEABLE_MEMORY_ACCESS = 88;

/**
 * With HMM a kernel reaches every page of its process, registered or not, so
 * leaving guest RAM unregistered (pinGuestRam off) no longer keeps it out of
 * reach of guest kernels: say so once, at start.
 */
function warnIfPageableReachable(p: Provider, setup: ProviderSetup): void {
  if (setup.pinGuestRam || p.deviceProps(0).attrs[PAGEABLE_MEMORY_ACCESS] !== 1) return;
  setup.log?.(
    'warning: this GPU reaches pageable host memory (HMM): a guest kernel can reach guest RAM mapped in its worker at a guessed address, registered or not (docs/security.md: "What a guest kernel can reach")',
  );
}

/** "512M", "2G", "1048576" -> bytes. */
export function parseSize(s: string): bigint {
  const m = /^(\d+)([KMGT]i?B?)?$/i.exec(s.trim());
  if (!m) throw new Error(`not a size: '${s}' (use e.g. 512M, 2G or a byte count)`);
  const shift = { '': 0n, K: 10n, M: 20n, G: 30n, T: 40n }[(m[2] ?? '').charAt(0).toUpperCase() as '' | 'K' | 'M' | 'G' | 'T'];
  const n = BigInt(m[1]) << shift;
  // Sizes go on as 64-bit values (the addon's, the protocol's): past that, a typo.
  if (n >= 1n << 63n) throw new Error(`too large: '${s}' (sizes are below 2^63 bytes)`);
  return n;
}
