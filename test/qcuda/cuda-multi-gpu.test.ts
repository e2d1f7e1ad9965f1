// Several GPUs in one VM on the cuda provider (issue 37, docs/multi-gpu.md),
// on the fake driver reporting two devices (fixtures/fakecuda.c,
// FAKECUDA_DEVICES=2; it refuses a copy of one device's memory through the
// other's context, so these tests see which context ran each call): the
// provider on a list of GPUs (guest device i = the i-th listed), a session's
// worker serving its own queue with contexts on both devices, peer copies
// device to device byte for byte both ways, downloads and memsets of the
// other device's memory with the ring server in front (which must leave them
// to the JavaScript path, each on its device's context), and --gpu's lists.
import test, { type ExecutionContext } from 'ava';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd } from '../../backend/src/qcuda/proto';
import { parseGpus } from '../../backend/src/qcuda/choose-provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';

// Workers inherit the environment: they load the fake driver, with two devices.
process.env.QCUDA_LIBCUDA = fakeLibcuda();
process.env.FAKECUDA_DEVICES = '2';

async function ownQueue(t: ExecutionContext, ringServer: boolean) {
  const provider = new IsolatedProvider(new EmuProvider({ devices: 2 }), {
    worker: { kind: 'cuda', gpu: [0, 1], inlineWaitUs: 50, pollUs: 0, ringServer },
  });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: true });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  const c = new QcudaClient(fe, 1, 16);
  await c.openOwn(1);
  return { c, fe };
}

/** CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: the fake driver's GPU d has bus 0x10 + d. */
const PCI_BUS_ID = 33;

const setDevice = (c: QcudaClient, device: number) => c.call(Cmd.SET_DEVICE, { args: ['qcuda_args_device', { device }] });
const d2d = (c: QcudaClient, dst: bigint, src: bigint, size: bigint) =>
  c.call(Cmd.MEMCPY_DTOD, { args: ['qcuda_args_memcpy', { dst, src, size, stream: 0n, async: 0 }] });
const memset = (c: QcudaClient, dst: bigint, size: bigint, value: number) =>
  c.call(Cmd.MEMSET, { args: ['qcuda_args_memset', { dst, size, stream: 0n, value, async: 0 }] });

for (const ringServer of [true, false]) {
  test(`a session's worker on two GPUs: peer copies both ways, the other device's memory on its own context (ring server ${ringServer ? 'on' : 'off'})`, async (t) => {
    const { c, fe } = await ownQueue(t, ringServer);
    const size = 2 * 4096 + 3;
    const a = (await c.malloc(size)).value;
    t.is((await setDevice(c, 1)).status, 0);
    const b = (await c.malloc(size)).value;
    t.is((await setDevice(c, 0)).status, 0);
    const src = fe.mem.alloc(size);
    const data = fe.mem.bytes(src, size);
    for (let i = 0; i < size; i++) data[i] = (i * 13 + 5) & 0xff;
    t.is(await c.htod(a, src, size), 0);
    t.is((await d2d(c, b, a, BigInt(size))).status, 0, 'device 0 to device 1');
    t.is((await memset(c, a, BigInt(size), 0)).status, 0);
    const out = fe.mem.alloc(size);
    t.is(await c.dtoh(out, b, size), 0, 'a download of device 1 memory with device 0 current');
    t.deepEqual(Buffer.from(fe.mem.bytes(out, size)), Buffer.from(data), 'byte for byte on device 1');
    t.is(
      (await memset(c, b, 10n, 0xee)).status,
      CudaErr.InvalidValue,
      'a memset of device 1 memory with device 0 current: refused, as natively',
    );
    const peer = await c.call(Cmd.PEER_ENABLE, { args: ['qcuda_args_peer', { device: 0, peer: 1, attr: 0 }] });
    t.is(peer.status, 0);
    t.is((await memset(c, b, 10n, 0xee)).status, 0, 'with peer access to device 1 it goes');
    t.is((await d2d(c, a + 1n, b + 2n, 100n)).status, 0, 'device 1 to device 0, at offsets');
    t.is(await c.dtoh(out, a, 102), 0);
    const back = fe.mem.bytes(out, 102);
    t.is(back[0], 0);
    t.deepEqual(Array.from(back.subarray(1, 9)), Array(8).fill(0xee));
    t.deepEqual(Buffer.from(back.subarray(9, 101)), Buffer.from(data.subarray(10, 102)));
    t.is((await d2d(c, a, b, BigInt(size) + 1n)).status, CudaErr.InvalidValue, "past device 1's allocation");
    t.is((await setDevice(c, 2)).status, CudaErr.InvalidDevice);
    t.is((await c.free(b)).status, 0, 'freed from device 0');
    t.is((await c.free(a)).status, 0);
  });
}

test("IPC with own queues across GPUs: device 1's allocation opened by a session on device 0, bytes both ways", async (t) => {
  const provider = new IsolatedProvider(new EmuProvider({ devices: 2 }), { worker: { kind: 'cuda', gpu: [0, 1], pollUs: 0 } });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: true });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  const [owner, opener] = [new QcudaClient(fe), new QcudaClient(fe)];
  await owner.openOwn(1);
  await opener.openOwn(2);
  t.is(provider.ownerPids.length, 2, 'each served by its worker');
  const size = 4096;
  t.is((await setDevice(owner, 1)).status, 0);
  const ptr = (await owner.malloc(size)).value;
  const src = fe.mem.alloc(size);
  fe.mem.bytes(src, size).fill(0x3c);
  t.is(await owner.htod(ptr, src, size), 0);
  const h = await owner.call(Cmd.IPC_GET, { args: ['qcuda_args_ptr', { ptr }], out: 'qcuda_ipc_handle' });
  t.is(h.status, 0);
  const o = await opener.call(Cmd.IPC_OPEN, { args: ['qcuda_ipc_handle', { ...(h.out as object) }] });
  t.is(o.status, 0, "opened in device 0's context, with lazy peer access (the fake refuses the open without)");
  const out = fe.mem.alloc(size);
  t.is(await opener.dtoh(out, o.value, size), 0);
  t.true(
    fe.mem.bytes(out, size).every((b) => b === 0x3c),
    "device 0's session reads device 1's bytes",
  );
  fe.mem.bytes(src, 8).fill(0xc3);
  t.is(await opener.htod(o.value, src, 8), 0);
  t.is(await owner.dtoh(out, ptr, 8), 0);
  t.true(
    fe.mem.bytes(out, 8).every((b) => b === 0xc3),
    'and writes them',
  );
  t.is((await owner.free(ptr)).status, 0);
  t.is(await opener.dtoh(out, o.value, 8), CudaErr.InvalidValue, "the owner's free takes it away");
});

test("device properties: what qcuda does not serve reads 0 whatever the GPU says, the rest is the GPU's", async (t) => {
  // The fake driver answers 1 for every attribute but a few.
  const { c } = await ownQueue(t, false);
  for (const device of [0, 1]) {
    const p = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device }], out: 'qcuda_out_device_props' });
    t.is(p.status, 0);
    const attrs = p.out!.attrs as Uint32Array;
    // Compression, fabric export, RDMA, dma-buf, multicast, host VMM.
    for (const a of [107, 110, 116, 124, 128, 132, 141, 145, 146]) t.is(attrs[a], 0, `attribute ${a} of device ${device}`);
    t.is(attrs[119], 1, 'pools export POSIX fds (over IPC memory handles)');
    t.is(attrs[125], 1, 'IPC event handles are served');
    t.is(attrs[102], 1, 'virtual memory management is served');
    t.is(attrs[103], 1, "POSIX fd handles are served: the VM's table asked from the worker (vmm-remote.ts)");
    t.is(attrs[115], 1, 'memory pools are served');
    t.is(attrs[PCI_BUS_ID], device + 1, "the VM's own, neutral PCI location (the fake GPU's is 0x10 + device)");
  }
});

test('the cuda provider on a list of GPUs: guest device i is the i-th listed, each its own properties', async (t) => {
  const { createCudaProvider } = await import('../../backend/src/qcuda/providers/cuda/cuda');
  const p = await createCudaProvider([1, 0]);
  t.teardown(() => p.close());
  t.is(p.deviceCount(), 2);
  t.is(p.deviceProps(0).name, 'fake GPU 1', 'guest device 0 is host GPU 1');
  t.is(p.deviceProps(1).name, 'fake GPU');
  t.notDeepEqual(Array.from(p.deviceProps(0).uuid), Array.from(p.deviceProps(1).uuid));
  t.is(p.deviceProps(0).attrs[PCI_BUS_ID], 0x11, "guest device 0: host GPU 1's PCI bus id");
  t.is(p.deviceProps(1).attrs[PCI_BUS_ID], 0x10);
  t.throws(() => p.deviceProps(2), { instanceOf: CudaError });
  const e = await t.throwsAsync(p.openContext(2), { instanceOf: CudaError });
  t.is(e?.code, CudaErr.InvalidDevice);
  const [x, y] = [await p.openContext(0), await p.openContext(1)];
  const [a, b] = [await x.malloc(64n), await y.malloc(64n)];
  await t.throwsAsync(x.memset(b, 1, 64n, undefined, false), undefined, "the fake refuses device 1 memory through device 0's context");
  await p.copyPeer(y, b, x, a, 64n);
  t.is(p.canAccessPeer(0, 1), 1);
  t.is(p.canAccessPeer(1, 1), 0, 'a device is not its own peer');
  await t.throwsAsync(createCudaProvider([0, 0]), { instanceOf: CudaError }, 'a GPU listed twice');
  await t.throwsAsync(createCudaProvider([0, 2]), { instanceOf: CudaError }, 'a GPU this host does not have');
});

test('--gpu takes a GPU or a list of distinct ones', (t) => {
  t.deepEqual(parseGpus('1'), [1]);
  t.deepEqual(parseGpus('0,1'), [0, 1]);
  t.deepEqual(parseGpus('3, 2'), [3, 2]);
  for (const bad of ['0,0', '', '0,', 'a', '64', '-1', '0;1']) t.throws(() => parseGpus(bad), undefined, bad);
});
