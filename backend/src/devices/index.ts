// The devices the backend command can serve.
import { QcudaDevice } from '../qcuda/device';
import type { VmLimits } from '../qcuda/limits';
import { createProvider, type ProviderKind } from '../qcuda/providers';
import { IsolatedProvider } from '../qcuda/providers/isolated';
import type { VhostUserDevice } from '../vhost-user';
import { EchoDevice } from './echo';

export interface DeviceOptions {
  queues?: number;
  provider?: ProviderKind;
  gpu?: number;
  memoryLimit?: bigint;
  /** qcuda: the VM's bounds (limits.ts). */
  limits?: Partial<VmLimits>;
  /** cuda provider: 'process' (default) runs each guest process's context in a worker process of its own. */
  isolation?: 'process' | 'none';
  /** cuda, isolation process: how long a worker polls for a short wait on its own thread (ProviderSetup.inlineWaitUs). */
  inlineWaitUs?: number;
  /** Where to say which provider was chosen. */
  log?: (line: string) => void;
}

export const DEVICES: Record<string, { describe: string; create(o: DeviceOptions): Promise<VhostUserDevice> }> = {
  qcuda: {
    describe: 'the virtual CUDA device (virtio id 60)',
    async create(o) {
      let device: QcudaDevice | undefined;
      // The host provider reads mapped guest memory through the device, which exists by the time it asks.
      const { provider, note } = await createProvider(o.provider ?? 'auto', o.gpu ?? 0, { guestView: (addr, len) => device!.guestViews(addr, len) },
        { isolate: (o.isolation ?? 'process') === 'process', captureOutput: true, waiterThreads: o.limits?.waiterThreads, inlineWaitUs: o.inlineWaitUs });
      o.log?.(note);
      // All contexts in one process (isolation none, or a host provider: no
      // kernels, no context to share) can address one another's device
      // memory with a guessed pointer (a kernel in one context read another's
      // on the H100): with isolation none, one CUDA process per VM at a time.
      const shared = provider.name === 'cuda' && !(provider instanceof IsolatedProvider);
      const limits = { ...o.limits, ...(shared ? { contexts: 1 } : {}) };
      device = new QcudaDevice({ queues: o.queues, memoryLimit: o.memoryLimit, limits, provider, log: o.log });
      return device;
    },
  },
  echo: { describe: 'example device: echoes requests with a checksum (for tests and benchmarks)', create: async (o) => new EchoDevice({ queues: o.queues }) },
};
