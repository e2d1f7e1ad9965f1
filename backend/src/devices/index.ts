// The devices the backend command can serve.
import { QcudaDevice } from '../qcuda/device';
import type { VhostUserDevice } from '../vhost-user/device';
import { EchoDevice } from './echo';

export interface DeviceOptions {
  queues?: number;
}

export const DEVICES: Record<string, { describe: string; create(o: DeviceOptions): VhostUserDevice }> = {
  qcuda: { describe: 'the virtual CUDA device (virtio id 60)', create: (o) => new QcudaDevice({ queues: o.queues }) },
  echo: { describe: 'example device: echoes requests with a checksum (for tests and benchmarks)', create: (o) => new EchoDevice({ queues: o.queues }) },
};
