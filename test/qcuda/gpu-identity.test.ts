// The GPU identity a guest sees (security review 3, N11; gpu-identity.ts):
// a UUID of the VM's own, derived from the real one with a key its backend
// draws, the same for every session (process) of the VM, including one its
// worker serves on its own queue, and another in another VM; a neutral PCI
// location; --real-gpu-identity (realGpuIdentity) passes the real ones.
import test from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { vmUuid } from '../../backend/src/qcuda/gpu-identity';
import { Cmd } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { cudaOwnQueues, sharingVm } from './sharing-vm';
import type { ExecutionContext } from 'ava';

async function props(c: QcudaClient, device = 0) {
  const r = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device }], out: 'qcuda_out_device_props' });
  if (r.status !== 0) throw new Error(`DEVICE_PROPS: ${r.status}`);
  const attrs = r.out!.attrs as Uint32Array;
  return { uuid: Array.from(r.out!.uuid as Uint8Array), pci: [attrs[50], attrs[33], attrs[34]] };
}

/** A VM on the emu provider (devices emulated): its device, the provider's real properties, and sessions. */
async function hostVm(t: ExecutionContext, o: { realGpuIdentity?: boolean; devices?: number } = {}) {
  let made: EmuProvider | undefined;
  const dev = new QcudaDevice({
    provider: (guestView) => (made = new EmuProvider({ guestView, devices: o.devices ?? 1 })),
    queues: 2,
    realGpuIdentity: o.realGpuIdentity,
  });
  t.teardown(() => made?.close());
  const { fe } = await started(t, dev, { size: 256 });
  const client = async () => {
    const c = new QcudaClient(fe);
    await c.open();
    return c;
  };
  return { dev, client, real: (d = 0) => made!.deviceProps(d) };
}

test('emu provider: each VM sees a UUID of its own, the same in each of its processes, and a neutral PCI location', async (t) => {
  const a = await hostVm(t, { devices: 2 });
  const b = await hostVm(t, { devices: 2 });
  const [a1, a2, b1] = [await a.client(), await a.client(), await b.client()];
  const seen = await props(a1);
  const real = Array.from(a.real().uuid);
  t.is(seen.uuid.length, 16);
  t.notDeepEqual(seen.uuid, real, 'not the GPU’s real UUID');
  t.deepEqual(Array.from(b.real().uuid), real, 'the two VMs share one (emulated) GPU');
  t.is(seen.uuid[6] >> 4, 4, 'a version 4 UUID');
  t.is(seen.uuid[8] >> 6, 2, 'of the RFC 4122 variant');
  t.deepEqual((await props(a2)).uuid, seen.uuid, 'every process of the VM sees the same');
  t.deepEqual((await props(a1)).uuid, seen.uuid, 'and again later');
  t.notDeepEqual((await props(b1)).uuid, seen.uuid, 'another VM sees another');
  t.deepEqual(seen.pci, [0, 1, 0], 'PCI location: domain 0, bus device + 1, device 0');
  const d1 = await props(a1, 1);
  t.deepEqual(d1.pci, [0, 2, 0]);
  t.notDeepEqual(d1.uuid, seen.uuid, 'each device its own');
  t.notDeepEqual(d1.uuid, Array.from(a.real(1).uuid));
});

test('emu provider: --real-gpu-identity passes the real UUID and PCI location through', async (t) => {
  const v = await hostVm(t, { realGpuIdentity: true, devices: 2 });
  const c = await v.client();
  const real = v.real(1);
  const seen = await props(c, 1);
  t.deepEqual(seen.uuid, Array.from(real.uuid));
  t.deepEqual(seen.pci, [real.attrs[50], real.attrs[33], real.attrs[34]]);
});

test('own queues: a session its worker serves sees the UUID the VM’s key gives, not the real one', async (t) => {
  // Its worker answers from the fake driver, whose device 0 has the UUID of sixteen 7s; the backend from its emu provider.
  const v = await sharingVm(t, cudaOwnQueues);
  const own = await v.client();
  const fakeReal = new Uint8Array(16).fill(7);
  const mine = await props(own);
  t.notDeepEqual(mine.uuid, Array.from(fakeReal));
  t.deepEqual(mine.uuid, Array.from(vmUuid(v.dev.vm.identityKey!, fakeReal)), "the backend's key, handed to the worker");
  t.deepEqual(mine.pci, [0, 1, 0]);
  const served = await props(await v.served());
  t.deepEqual(served.uuid, Array.from(vmUuid(v.dev.vm.identityKey!, v.provider()!.deviceProps(0).uuid)), 'the same key in the backend');
});
