// The local memory a launch makes the driver reserve counts against the
// VM's quota (security review 3, N3; local-memory.ts). On the fake driver
// (fixtures/fakecuda.c: a kernel lmem<n> needs n bytes of local memory a
// thread) with an H100's 132 multiprocessors of 2048 threads, in cuda
// workers: a kernel's launch charges (its local size - what the context
// holds) x 270,336 threads, once; past the quota it is refused with
// cudaErrorMemoryAllocation, by every launch route, the ring server's
// included (it leaves such a launch to JavaScript, which counts it); the
// stack limit is the same reservation.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { batch, DEVICE_SYNC, kernels, launch, launchArgs, launchEx, one } from './ring-story';

// Workers inherit the environment: the fake driver, as an H100 (132 x 2048 resident threads).
process.env.QCUDA_LIBCUDA = fakeLibcuda();
process.env.FAKECUDA_SMS = '132';
process.env.FAKECUDA_SM_THREADS = '2048';

const GIB = 1n << 30n;
const THREADS = 132n * 2048n;
const STACK = 0; // cudaLimitStackSize
const DEFAULT_STACK = 1024n;
/** The quota's charge for a context holding perThread bytes a thread. */
const charge = (perThread: bigint) => (perThread - DEFAULT_STACK) * THREADS;

/** The backend's view of the device (what a session on queue 0 counts with): the H100's resident threads. */
class H100 extends EmuProvider {
  override deviceProps(device: number) {
    const p = super.deviceProps(device);
    const attrs = p.attrs.slice();
    attrs[16] = 132;
    attrs[39] = 2048;
    return { ...p, attrs };
  }
}

async function setup(t: ExecutionContext, o: { ownQueue?: boolean; ringServer?: boolean } = {}) {
  const provider = new IsolatedProvider(new H100({ totalMem: 80n * GIB }), {
    worker: { kind: 'cuda', gpu: 0, ringServer: o.ringServer ?? true },
  });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: o.ownQueue ?? false, limits: { deviceMemory: 8n * GIB } });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  const c = new QcudaClient(fe, 1, 16);
  if (o.ownQueue) await c.openOwn(1);
  else await c.open();
  const inC = (): number => dev.status().sessions.find((s) => s.id === c.session.toString(16))?.callsInC ?? -1;
  return { dev, c, inC };
}

const run = async (c: QcudaClient, f: bigint) => (await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(f, new Uint8Array(0)) })).status;
const stack = async (c: QcudaClient, value: bigint) =>
  (await c.call(Cmd.LIMIT_SET, { args: ['qcuda_args_limit', { limit: STACK, value }] })).status;

test('a launch counts the local memory it makes the driver reserve, once, and is refused past the quota', async (t) => {
  const { dev, c } = await setup(t);
  const [big, small, smaller] = await kernels(c, ['lmem204800', 'lmem16384', 'lmem8192']);
  const used = dev.vm.quota.used;
  t.is(await run(c, big), CudaErr.MemoryAllocation, '200 KiB a thread: 51 GiB for 270,336 threads, past 8 GiB');
  t.is(dev.vm.quota.used, used, 'the refused launch counts nothing');
  t.is(await run(c, small), 0, '16 KiB a thread: 3.87 GiB');
  t.is(dev.vm.quota.used, used + charge(16384n), '(16 KiB - the default 1 KiB stack) x 270,336 threads');
  t.is(await run(c, small), 0);
  t.is(await run(c, smaller), 0);
  t.is(dev.vm.quota.used, used + charge(16384n), 'the context keeps its reservation: later launches charge nothing');
  // The stack limit is the same reservation: the larger of the two counts.
  t.is(await stack(c, 8192n), 0);
  t.is(dev.vm.quota.used, used + charge(16384n), 'a stack below what a launch took adds nothing');
  t.is(await stack(c, 20480n), 0);
  t.is(dev.vm.quota.used, used + charge(20480n), 'a larger stack counts only its difference');
  t.is(await stack(c, DEFAULT_STACK), 0);
  t.is(dev.vm.quota.used, used + charge(16384n), 'set back down: what the launch took stays counted');
  t.is(await stack(c, 65536n), CudaErr.MemoryAllocation, 'a stack past the quota');
  t.is(await run(c, big), CudaErr.MemoryAllocation, 'and the large kernel still');
  t.is(dev.vm.quota.used, used + charge(16384n));
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(dev.vm.quota.used, 0n, 'a reset gives it back with the context');
  await c.close();
});

test('every launch route counts it: posted, cooperative, with a cluster', async (t) => {
  const { dev, c } = await setup(t);
  const [big, small] = await kernels(c, ['lmem204800', 'lmem16384']);
  const used = dev.vm.quota.used;
  const exArgs = (f: bigint) =>
    encode('qcuda_args_launch_ex', { func: f, stream: 0n, grid: one, block: one, shared_mem: 0, param_bytes: 0, cluster: one, flags: 0 });
  t.is((await c.call(Cmd.LAUNCH_EX, { rawArgs: exArgs(big) })).status, CudaErr.MemoryAllocation, 'cudaLaunchKernelEx');
  t.is(
    (await c.call(Cmd.LAUNCH_COOPERATIVE, { rawArgs: launchArgs(big, new Uint8Array(0)) })).status,
    CudaErr.MemoryAllocation,
    'cooperative',
  );
  t.deepEqual(await batch(c, [launch(big, new Uint8Array(0))]), { status: CudaErr.MemoryAllocation, value: 0n }, 'posted in a batch');
  t.is(dev.vm.quota.used, used, 'none counted anything');
  t.deepEqual(await batch(c, [launch(small, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is(dev.vm.quota.used, used + charge(16384n), 'a posted launch is counted as a launch is');
  t.is((await c.call(Cmd.LAUNCH_EX, { rawArgs: exArgs(small) })).status, 0);
  t.is(dev.vm.quota.used, used + charge(16384n));
  await c.close();
});

test('the ring server leaves a launch needing more local memory than is counted to JavaScript, which counts or refuses it', async (t) => {
  const { dev, c, inC } = await setup(t, { ownQueue: true });
  const [big, small, nop, mid] = await kernels(c, ['lmem204800', 'lmem16384', 'nop', 'lmem24576']);
  t.is(await run(c, nop), 0);
  const before = inC();
  t.true(before >= 1, `a launch of a kernel with no local memory is answered in C (${before})`);
  const used = dev.vm.quota.used;
  t.is(await run(c, big), CudaErr.MemoryAllocation, 'refused');
  t.is(dev.vm.quota.used, used);
  t.is(await run(c, small), 0);
  t.is(dev.vm.quota.used, used + charge(16384n), 'counted: it did not run in C uncounted');
  t.is(inC(), before, 'both left to JavaScript');
  t.is(await run(c, small), 0);
  t.deepEqual(await batch(c, [launch(small, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is(inC(), before + 2, 'once counted, its launches and batches are answered in C again');
  t.deepEqual(await batch(c, [launch(big, new Uint8Array(0))]), { status: CudaErr.MemoryAllocation, value: 0n }, 'a batch: left, refused');
  t.is(inC(), before + 2);
  t.is(dev.vm.quota.used, used + charge(16384n));
  // Posted cluster launches (LAUNCH_EX), which the ring server plans too: the same.
  const ex = (f: bigint) => launchEx(f, new Uint8Array(0), [1, 1, 1]);
  t.deepEqual(await batch(c, [ex(mid), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is(dev.vm.quota.used, used + charge(24576n), 'a cluster launch needing more: counted in JavaScript');
  t.is(inC(), before + 2);
  t.deepEqual(await batch(c, [ex(mid), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is(inC(), before + 3, 'then answered in C');
  t.deepEqual(await batch(c, [ex(big)]), { status: CudaErr.MemoryAllocation, value: 0n }, 'refused');
  t.is(dev.vm.quota.used, used + charge(24576n));
  await c.close();
});
