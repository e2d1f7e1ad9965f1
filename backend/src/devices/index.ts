// The devices the backend command can serve.
import os from 'node:os';
import { QcudaDevice } from '../qcuda/virtio-device';
import { Share, type VmLimits } from '../qcuda/quota/limits';
import { openDiskLedger, quotaBudget } from '../qcuda/quota/vm-ledger';
import { Fd } from '../vhost-user';
import type { VmShared } from '../qcuda/session/session';
import { createProvider, DEFAULT_POLL_US, type ProviderKind } from '../qcuda/choose-provider';
import { emuState } from '../qcuda/migration';
import { IsolatedProvider } from '../qcuda/workers/isolated';
import type { WorkerSandbox } from '../qcuda/workers/worker-messages';
import { cudaEnv } from '../qcuda/workers/worker-env';
import type { ShareGate } from '../qcuda/share/gate';
import { mpsEnv } from '../qcuda/share/mps';
import type { VhostUserDevice } from '../vhost-user';
import { BlkDevice } from './blk';
import { ProviderStore } from './blk-store';
import { EchoDevice } from './echo';

export interface DeviceOptions {
  queues?: number;
  provider?: ProviderKind;
  /** The host GPU; qcuda also takes a list, guest device i being the i-th (--gpu=0,1). */
  gpu?: number | readonly number[];
  /** qcuda, emu provider: how many devices it emulates (default 1). */
  hostDevices?: number;
  memoryLimit?: bigint;
  /** qcuda: the VM's bounds (limits.ts). */
  limits?: Partial<VmLimits>;
  /** cuda provider: 'process' (default) runs each guest process's context in a worker process of its own. */
  isolation?: 'process' | 'none';
  /** cuda, isolation process: how long a worker polls for a short wait on its own thread (ProviderSetup.inlineWaitUs). */
  inlineWaitUs?: number;
  /** cuda, isolation process: ordered calls on the worker's own thread when its context thread is idle (ProviderSetup.inlineCalls). */
  inlineCalls?: boolean;
  /** cuda, isolation process: a worker serving its session's own queue answers the short calls of a round trip in C (ProviderSetup.ringServer). */
  ringServer?: boolean;
  /** qcuda, cuda: register all of guest RAM for the device where guest kernels run (ProviderSetup.pinGuestRam; default false). */
  pinGuestRam?: boolean;
  /** qcuda, isolation process: sessions that keep to a queue of their own have it served by their worker (QcudaOptions.ownQueues). Default: yes with the cuda provider, no with the emu provider. */
  ownQueues?: boolean;
  /** qcuda and blk: how long the rings (qcuda with isolation process: each worker's channel too) are polled after each request and answer (DEFAULT_POLL_US). */
  pollUs?: number;
  /** qcuda, isolation process: each worker process's sandbox (default seccomp: no new privileges, a system call filter). */
  workerSandbox?: WorkerSandbox;
  /** qcuda: the guest sees the host GPU's real UUID and PCI location (QcudaOptions.realGpuIdentity; default false: the VM's own). */
  realGpuIdentity?: boolean;
  /** qcuda: the bounds and what they count, shared with other devices of this process (one quota for the frontends of `qcuda run`); default: the device's own. */
  vm?: VmShared;
  /** qcuda: the VM's GPU share gate (--gpu-share: joinShare's); absent: no gate. */
  share?: ShareGate;
  /** Where to say which provider was chosen. */
  log?: (line: string) => void;
  /**
   * qcuda and blk: the VM's ledger, inherited as this fd (made by `qcuda vm`,
   * qcuda/quota/vm-ledger.ts): the disk takes its device memory from the qcuda
   * device's quota (memoryLimit, each process its own) as it is written.
   */
  ledgerFd?: number;
  /** blk, with ledgerFd: the disk's slot in it. */
  ledgerSlot?: number;
  /** blk: the disk's size in bytes (whole sectors), where it lives, and whether the guest may write it. */
  size?: bigint;
  store?: 'gpu' | 'host';
  readOnly?: boolean;
}

/** A disk's share of the VM's device memory quota, where it has the VM's ledger (ledgerFd). */
function diskQuota(o: DeviceOptions): Share | undefined {
  if (o.ledgerFd === undefined) return undefined;
  const slot = o.ledgerSlot ?? -1;
  const ledger = openDiskLedger(new Fd(o.ledgerFd), o.memoryLimit ?? 0n, slot);
  // What the disk held goes back to the VM as this process exits (SIGTERM
  // ends it without closing the device); killed, `qcuda vm` reclaims it.
  process.once('exit', () => {
    try {
      ledger.native.reclaim(slot);
    } catch {
      // the ledger's lock kept from us: `qcuda vm` reclaims the slot once we are gone
    }
  });
  return new Share(quotaBudget(ledger), slot);
}

export const DEVICES: Record<
  string,
  { describe: string; create(o: DeviceOptions): Promise<VhostUserDevice>; dispose?(d: VhostUserDevice): Promise<void> }
> = {
  qcuda: {
    describe: 'the virtual CUDA device (virtio id 60)',
    async create(o) {
      let device: QcudaDevice | undefined;
      // The emu provider reads mapped guest memory through the device, which exists by the time it asks.
      const isolate = (o.isolation ?? 'process') === 'process';
      // Without isolation guest modules load in this process: eagerly, and JIT-cached per VM, as a worker's (worker-env.ts), from CUDA's start on;
      // under --gpu-share-mps it is the VM's one MPS client (share/mps.ts).
      if (!isolate) Object.assign(process.env, cudaEnv(), mpsEnv(o.gpu ?? 0));
      // Without isolation the VM has one CUDA process at a time (below), which this process's waits and calls may block for.
      const chosen = await createProvider(
        o.provider ?? 'auto',
        o.gpu ?? 0,
        { guestView: (addr, len) => device!.guestViews(addr, len), devices: o.hostDevices },
        {
          isolate,
          inlineHere: !isolate,
          captureOutput: true,
          waiterThreads: o.limits?.waiterThreads,
          inlineWaitUs: o.inlineWaitUs,
          inlineCalls: o.inlineCalls,
          ringServer: o.ringServer,
          pinGuestRam: o.pinGuestRam,
          pollUs: o.pollUs,
          log: o.log,
          workerSandbox: o.workerSandbox,
        },
      );
      // The emu provider has nothing to isolate, but with own queues its
      // sessions get (host-memory) workers too: the owned-queue path, whole,
      // on a machine without a GPU (the tests' way to run it in a guest).
      const emuWorkers = o.ownQueues === true && isolate && chosen.provider.name === 'emu';
      // A worker's emu provider is one device of its own: peer copies need the devices in one process.
      if (emuWorkers && chosen.provider.deviceCount() > 1)
        throw new Error('--host-devices above 1 with --own-queues=yes: not yet (docs/multi-gpu.md)');
      // By default a GPU's sessions, each in a worker of its own, are served on their own queues by
      // those workers; the emu provider's are served here (no worker), unless asked.
      const ownQueues = o.ownQueues ?? (isolate && chosen.provider.startOwner !== undefined);
      const provider = emuWorkers
        ? new IsolatedProvider(chosen.provider, {
            worker: { kind: 'emu', gpu: 0, pollUs: o.pollUs ?? DEFAULT_POLL_US, sandbox: o.workerSandbox },
            log: o.log,
          })
        : chosen.provider;
      const note = emuWorkers ? `${chosen.note}, a worker process per guest process` : chosen.note;
      o.log?.(note);
      // All contexts in one process (isolation none, or an emu provider: no
      // kernels, no context to share) can address one another's device
      // memory with a guessed pointer (a kernel in one context read another's
      // on the H100): with isolation none, one CUDA process per VM at a time.
      const shared = provider.name === 'cuda' && provider.startOwner === undefined;
      const limits = { ...o.limits, ...(shared ? { contexts: 1 } : {}) };
      device = new QcudaDevice({
        queues: o.queues,
        memoryLimit: o.memoryLimit,
        limits,
        provider,
        // Only the emu provider's sessions, in this process, are carried yet.
        state: provider === chosen.provider && provider.name === 'emu' ? emuState : undefined,
        log: o.log,
        pollUs: o.pollUs ?? DEFAULT_POLL_US,
        ownQueues,
        vm: o.vm,
        share: o.share,
        realGpuIdentity: o.realGpuIdentity,
        ledgerFd: o.ledgerFd === undefined ? undefined : new Fd(o.ledgerFd),
      });
      return device;
    },
    // A frontend's device is gone with it (listenEach): so are its provider's workers and context.
    dispose: (d) => (d as QcudaDevice).provider.close(),
  },
  blk: {
    describe: "a disk in GPU memory (or host memory) for stock QEMU's vhost-user-blk-pci",
    async create(o) {
      if (o.size === undefined) throw new Error('--device=blk needs --size');
      const kind = o.store ?? 'gpu';
      // The host store may take at most half the host's RAM (it is all committed at start).
      const { provider, note } = await createProvider(
        kind === 'gpu' ? 'cuda' : 'emu',
        typeof o.gpu === 'number' ? o.gpu : (o.gpu?.[0] ?? 0),
        { totalMem: BigInt(os.totalmem()) / 2n },
        { captureOutput: false, waiterThreads: o.limits?.waiterThreads, pinGuestRam: true },
      ); // no guest kernel runs here
      const quota = diskQuota(o);
      const store = await ProviderStore.open(provider, o.size, quota);
      const taken = quota ? `, taken from the VM's device memory quota${o.memoryLimit ? ` of ${o.memoryLimit} bytes` : ''} as written` : '';
      o.log?.(`disk of ${o.size} bytes${o.readOnly ? ', read-only' : ''} in the ${note}${taken}`);
      return new BlkDevice({ queues: o.queues, store, readOnly: o.readOnly, provider, pollUs: o.pollUs ?? DEFAULT_POLL_US, log: o.log });
    },
  },
  echo: {
    describe: 'example device: echoes requests with a checksum (for tests and benchmarks)',
    create: async (o) => new EchoDevice({ queues: o.queues }),
  },
};
