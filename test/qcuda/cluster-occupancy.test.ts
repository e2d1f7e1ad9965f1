// OCCUPANCY_CLUSTERS on the cuda provider: the driver answers
// (cuOccupancyMaxActiveClusters, cuOccupancyMaxPotentialClusterSize), through
// the context method its declaration derives (occupancyClusters, `checked`:
// the run in commands/module.ts checks the query, the forwarding to the
// worker and the addon's call follow from wire/protocol.ts). On the fake
// driver (fixtures/fakecuda.c: as many clusters as the grid holds, a
// potential size of 8, none for nop), in a worker per session and in a
// worker serving its session's own queue.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/device';
import { Cmd, encode } from '../../backend/src/qcuda/proto';
import { HostProvider } from '../../backend/src/qcuda/providers/host';
import { IsolatedProvider } from '../../backend/src/qcuda/providers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { kernels } from './ring-story';

// Workers inherit the environment: the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

async function setup(t: ExecutionContext, ownQueue: boolean) {
  const provider = new IsolatedProvider(new HostProvider({}), { worker: { kind: 'cuda', gpu: 0 } });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: ownQueue, limits: {} });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 64 });
  const c = new QcudaClient(fe, 1, 16);
  if (ownQueue) await c.openOwn(1);
  else await c.open();
  return c;
}

function clusters(c: QcudaClient, func: bigint, query: number, cluster: number[]) {
  return c.call(Cmd.OCCUPANCY_CLUSTERS, {
    rawArgs: encode('qcuda_args_cluster_occupancy', {
      func,
      grid: new Uint32Array([64, 2, 1]),
      block: new Uint32Array([128, 1, 1]),
      cluster: new Uint32Array(cluster),
      smem: 1024,
      query,
    }),
  });
}

for (const [name, ownQueue] of [
  ['a worker per session', false],
  ['a worker serving its own queue', true],
] as const) {
  test(`${name}: cluster occupancy is the driver's answer for the function and configuration given`, async (t) => {
    const c = await setup(t, ownQueue);
    const [say, nop] = await kernels(c, ['say', 'nop']);
    const active = await clusters(c, say, 0, [2, 1, 1]);
    t.is(active.status, 0);
    t.is(active.value, 64n, '128 blocks in clusters of 2');
    t.is((await clusters(c, say, 0, [0, 0, 0])).value, 128n, 'no cluster attribute: a block each');
    t.is((await clusters(c, say, 1, [0, 0, 0])).value, 8n, 'the potential cluster size');
    t.is((await clusters(c, nop, 1, [0, 0, 0])).value, 0n, "another function's answer");
    t.is((await clusters(c, say, 2, [0, 0, 0])).status, CudaErr.InvalidValue, 'the run refuses a query that is neither');
    t.is((await clusters(c, 0x1234n, 0, [2, 1, 1])).status, CudaErr.InvalidResourceHandle, 'no such function');
  });
}
