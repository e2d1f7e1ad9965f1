// The devices the backend command can serve.
import { QcudaDevice } from '../qcuda/device';
import { createProvider, type ProviderKind } from '../qcuda/providers';
import type { VhostUserDevice } from '../vhost-user/device';
import { EchoDevice } from './echo';

export interface DeviceOptions {
  queues?: number;
  provider?: ProviderKind;
  gpu?: number;
  memoryLimit?: bigint;
  /** Where to say which provider was chosen. */
  log?: (line: string) => void;
}

export const DEVICES: Record<string, { describe: string; create(o: DeviceOptions): VhostUserDevice }> = {
  qcuda: {
    describe: 'the virtual CUDA device (virtio id 60)',
    create: (o) => new QcudaDevice({
      queues: o.queues,
      memoryLimit: o.memoryLimit,
      provider: (guestView) => {
        const { provider, note } = createProvider(o.provider ?? 'auto', o.gpu ?? 0, { guestView });
        o.log?.(note);
        return provider;
      },
    }),
  },
  echo: { describe: 'example device: echoes requests with a checksum (for tests and benchmarks)', create: (o) => new EchoDevice({ queues: o.queues }) },
};
