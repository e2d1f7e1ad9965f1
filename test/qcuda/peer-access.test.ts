// Peer access between a session's devices (issue 37, docs/multi-gpu.md):
// CAN_ACCESS_PEER, P2P_ATTRIBUTE, PEER_ENABLE and PEER_DISABLE on the host
// provider emulating two devices and on the cuda provider over the fake
// driver with two (fixtures/fakecuda.c, whose cuCtxEnablePeerAccess has
// CUDA's errors too): who may reach whom, CUDA's errors for enabling twice
// (704), disabling what is not enabled (705) and a bad device, a reset
// forgetting what was enabled, sessions apart.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';

// Workers inherit the environment: they load the fake driver, with two devices.
process.env.QCUDA_LIBCUDA = fakeLibcuda();
process.env.FAKECUDA_DEVICES = '2';

const ALREADY_ENABLED = 704;
const NOT_ENABLED = 705;
const ACCESS_SUPPORTED = 2; // cudaDevP2PAttrAccessSupported

type Peer = { device?: number; peer: number; attr?: number };
const peerArgs = (p: Peer): ['qcuda_args_peer', { device: number; peer: number; attr: number }] => [
  'qcuda_args_peer',
  { device: p.device ?? 0, peer: p.peer, attr: p.attr ?? 0 },
];
const canAccess = (c: QcudaClient, device: number, peer: number) => c.call(Cmd.CAN_ACCESS_PEER, { args: peerArgs({ device, peer }) });
const p2p = (c: QcudaClient, attr: number, device: number, peer: number) =>
  c.call(Cmd.P2P_ATTRIBUTE, { args: peerArgs({ device, peer, attr }) });
const enable = async (c: QcudaClient, peer: number) => (await c.call(Cmd.PEER_ENABLE, { args: peerArgs({ peer }) })).status;
const disable = async (c: QcudaClient, peer: number) => (await c.call(Cmd.PEER_DISABLE, { args: peerArgs({ peer }) })).status;
const setDevice = async (c: QcudaClient, device: number) =>
  (await c.call(Cmd.SET_DEVICE, { args: ['qcuda_args_device', { device }] })).status;

async function hostSetup(t: ExecutionContext, devices = 2) {
  const dev = new QcudaDevice({ provider: (guestView) => new EmuProvider({ guestView, devices }), queues: 2 });
  const { fe } = await started(t, dev, { size: 256 });
  const client = async () => {
    const c = new QcudaClient(fe);
    await c.open();
    return c;
  };
  return { c: await client(), client };
}

/** A session's worker serving its own queue, on the fake driver's two GPUs (as cuda-multi-gpu.test.ts). */
async function fakeSetup(t: ExecutionContext) {
  const provider = new IsolatedProvider(new EmuProvider({ devices: 2 }), {
    worker: { kind: 'cuda', gpu: [0, 1], inlineWaitUs: 50, pollUs: 0, ringServer: false },
  });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: true });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  const c = new QcudaClient(fe, 1, 16);
  await c.openOwn(1);
  return c;
}

test('emu provider: two devices reach each other, a device is not its own peer, bad devices refused', async (t) => {
  const { c } = await hostSetup(t);
  t.like(await canAccess(c, 0, 1), { status: 0, value: 1n });
  t.like(await canAccess(c, 1, 0), { status: 0, value: 1n });
  t.like(await canAccess(c, 1, 1), { status: 0, value: 0n });
  t.is((await canAccess(c, 0, 2)).status, CudaErr.InvalidDevice);
  t.is((await canAccess(c, 7, 0)).status, CudaErr.InvalidDevice);
  t.like(await p2p(c, ACCESS_SUPPORTED, 0, 1), { status: 0, value: 1n });
  t.is((await p2p(c, ACCESS_SUPPORTED, 1, 1)).status, CudaErr.InvalidDevice, 'a device and itself');
  t.is((await p2p(c, ACCESS_SUPPORTED, 0, 2)).status, CudaErr.InvalidDevice);
  t.is((await p2p(c, 0, 0, 1)).status, CudaErr.InvalidValue);
  t.is((await p2p(c, 5, 0, 1)).status, CudaErr.InvalidValue);
});

test('emu provider: enable twice is 704, disable what is not enabled 705, per direction, forgotten at reset', async (t) => {
  const { c, client } = await hostSetup(t);
  t.is(await disable(c, 1), NOT_ENABLED);
  t.is(await enable(c, 1), 0);
  t.is(await enable(c, 1), ALREADY_ENABLED);
  t.is(await enable(c, 0), CudaErr.PeerAccessUnsupported, 'the current device is not its own peer (as the driver answers)');
  t.is(await enable(c, 2), CudaErr.InvalidDevice);
  t.is(await disable(c, 2), CudaErr.InvalidDevice);
  t.is(await setDevice(c, 1), 0);
  t.is(await disable(c, 0), NOT_ENABLED, 'enabled from device 0 to 1 only');
  t.is(await enable(c, 0), 0);
  t.is(await setDevice(c, 0), 0);
  const other = await client();
  t.is(await enable(other, 1), 0, "another session's enable is its own");
  t.is(await disable(c, 1), 0);
  t.is(await disable(c, 1), NOT_ENABLED);
  t.is(await enable(c, 1), 0);
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(await disable(c, 1), NOT_ENABLED, 'the reset forgot it');
  t.is(await enable(c, 1), 0);
});

test('emu provider with one device: no peer', async (t) => {
  const { c } = await hostSetup(t, 1);
  t.like(await canAccess(c, 0, 0), { status: 0, value: 0n });
  t.is((await canAccess(c, 0, 1)).status, CudaErr.InvalidDevice);
  t.is(await enable(c, 0), CudaErr.PeerAccessUnsupported, 'itself, as the driver answers on one GPU');
  t.is(await enable(c, 1), CudaErr.InvalidDevice);
});

test("cuda provider on the fake driver's two GPUs: can access, P2P attribute, enable and disable through the driver", async (t) => {
  const c = await fakeSetup(t);
  t.like(await canAccess(c, 0, 1), { status: 0, value: 1n });
  t.like(await canAccess(c, 1, 1), { status: 0, value: 0n });
  t.like(await p2p(c, ACCESS_SUPPORTED, 1, 0), { status: 0, value: 1n });
  t.is((await p2p(c, ACCESS_SUPPORTED, 0, 0)).status, CudaErr.InvalidDevice);
  t.is(await enable(c, 1), 0);
  t.is(await enable(c, 1), ALREADY_ENABLED);
  t.is(await setDevice(c, 1), 0);
  t.is(await enable(c, 0), 0, "device 1's context to device 0's");
  t.is(await disable(c, 0), 0);
  t.is(await setDevice(c, 0), 0);
  t.is(await disable(c, 1), 0);
  t.is(await disable(c, 1), NOT_ENABLED);
  t.is(await enable(c, 1), 0, 'the driver disabled it too: enabling again succeeds');
});
