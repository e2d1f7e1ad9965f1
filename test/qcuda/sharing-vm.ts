// The providers the tests of sharing between a VM's processes run on (IPC
// handles: ipc.test.ts; VMM shareable handles: vmm-share.test.ts), and a VM
// of one backend on one of them: the emu provider, and the cuda provider
// on the fake driver with a worker per session, served by the backend or
// serving its session's own queue (the GPU default).
import type { ExecutionContext } from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { Provider } from '../../backend/src/qcuda/provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';

// The cuda provider's workers load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

export type GuestView = (addr: bigint, len: number) => Uint8Array[];
/** A provider, and whether each session keeps to a queue of its own, served by its worker (--own-queues=yes). */
export type MakeProvider = ((guestView: GuestView) => Provider) & { ownQueues?: boolean };

export const host: MakeProvider = (guestView) => new EmuProvider({ guestView });
/** The cuda provider as a backend runs it: each session's context in a worker process of its own, on the fake driver. */
export const cudaWorkers: MakeProvider = () => new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } });
/** The cuda provider's default on a GPU: each session's worker serves the session's own queue, and asks the backend for the VM's tables. */
export const cudaOwnQueues: MakeProvider = Object.assign(
  () => new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } }),
  { ownQueues: true },
);
export const PROVIDERS: [string, MakeProvider][] = [
  ['emu provider', host],
  ['cuda provider (a worker per session, fake driver)', cudaWorkers],
  ['cuda provider (own queues: each worker serves its session, fake driver)', cudaOwnQueues],
];
/** Queues of a VM: queue 0, and one of its own for each session a test opens. */
export const QUEUES = 8;

/**
 * A VM on make's provider: client() opens a session as the VM's processes
 * do (on a queue of its own where the VM has own queues), served() one the
 * backend serves on queue 0 whatever the VM's own queues.
 */
export async function sharingVm(t: ExecutionContext, make: MakeProvider = host) {
  let made: Provider | undefined;
  const own = make.ownQueues === true;
  const dev = new QcudaDevice({ provider: (guestView: GuestView) => (made = make(guestView)), queues: QUEUES, ownQueues: own });
  t.teardown(() => made?.close());
  const { fe } = await started(t, dev, { size: 256, queues: QUEUES });
  let queue = 1;
  const client = async () => {
    const c = new QcudaClient(fe);
    if (!own) await c.open();
    else if (queue >= QUEUES) throw new Error('more sessions than queues');
    else await c.openOwn(queue++);
    return c;
  };
  const served = async () => {
    const c = new QcudaClient(fe, 1);
    await c.open();
    return c;
  };
  return { dev, fe, client, served, provider: () => made };
}
