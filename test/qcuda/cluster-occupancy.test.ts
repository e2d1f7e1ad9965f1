// Context calls whose provider side is derived from their declaration
// (wire/protocol.ts), on the cuda provider: OCCUPANCY_CLUSTERS, whose run
// (commands/module.ts, `checked`) checks the query and calls the derived
// method (cuOccupancyMaxActiveClusters, cuOccupancyMaxPotentialClusterSize);
// and the calls whose addon method is generated as one driver call
// (`driver`: addon/src/context_calls.h). On the fake driver
// (fixtures/fakecuda.c: as many clusters as the grid holds, a potential size
// of 8, none for nop; priorities 0 down to -5), in a worker per session and
// in a worker serving its session's own queue.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, Status } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { kernels } from './ring-story';

// Workers inherit the environment: the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

async function setup(t: ExecutionContext, ownQueue: boolean) {
  const provider = new IsolatedProvider(new EmuProvider({}), { worker: { kind: 'cuda', gpu: 0 } });
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

for (const [name, ownQueue] of [
  ['a worker per session', false],
  ['a worker serving its own queue', true],
] as const) {
  test(`${name}: the calls whose addon method is one driver call, generated, answer as the driver`, async (t) => {
    const c = await setup(t, ownQueue);
    const range = await c.call(Cmd.STREAM_PRIORITY_RANGE, { out: 'qcuda_out_priority_range' });
    t.is(range.status, 0);
    t.deepEqual({ least: range.out!.least, greatest: range.out!.greatest }, { least: 0, greatest: -5 }, 'named by the out struct');
    const created = await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 1, priority: -3 }] });
    t.is(created.status, 0);
    const prio = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: created.value }] });
    t.deepEqual([prio.status, BigInt.asIntN(64, prio.value)], [0, -3n], "the stream's own priority, looked up in the context");
    const legacy = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: 0n }] });
    t.deepEqual([legacy.status, legacy.value], [0, 0n], 'the legacy NULL stream');
    t.is((await c.call(Cmd.STREAM_DESTROY, { args: ['qcuda_args_handle', { handle: created.value }] })).status, 0);
    const gone = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: created.value }] });
    t.is(gone.status, CudaErr.InvalidResourceHandle, 'a destroyed stream');
    t.is((await c.call(Cmd.CTX_RESET_PERSISTING_L2, {})).status, 0);
    t.is((await c.call(Cmd.CTX_RESET_PERSISTING_L2, { args: ['qcuda_args_handle', { handle: 1n }] })).status, Status.BAD_REQUEST);
  });
}
