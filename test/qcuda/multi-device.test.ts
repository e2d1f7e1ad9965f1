// Several devices in one VM (issue 37) on the emu provider emulating two:
// the device count, per-device properties and memory info, a context per
// device in one session, allocations on the device that was current, peer
// copies device to device byte for byte, the quota one budget across the
// devices, and what is refused (a device that does not exist, a copy that
// runs past a peer's allocation, another session's pointer).
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { Cmd, QCUDA_PROTO_VERSION } from '../../backend/src/qcuda/proto';
import { started } from '../helpers';
import { QcudaClient } from './client';

const MIB = 1n << 20n;

async function setup(t: ExecutionContext, o: { devices?: number; memoryLimit?: bigint } = {}) {
  const provider = (guestView: (addr: bigint, len: number) => Uint8Array[]) =>
    new EmuProvider({ guestView, devices: o.devices ?? 2, totalMem: 64n * MIB });
  const dev = new QcudaDevice({ provider, queues: 2, memoryLimit: o.memoryLimit });
  const pair = await started(t, dev, { size: 256 });
  const client = async () => {
    const c = new QcudaClient(pair.fe);
    await c.open();
    return c;
  };
  return { dev, fe: pair.fe, c: await client(), client, provider: dev.provider as EmuProvider };
}

const setDevice = (c: QcudaClient, device: number) => c.call(Cmd.SET_DEVICE, { args: ['qcuda_args_device', { device }] });
const d2d = (c: QcudaClient, dst: bigint, src: bigint, size: bigint) =>
  c.call(Cmd.MEMCPY_DTOD, { args: ['qcuda_args_memcpy', { dst, src, size, stream: 0n, async: 0 }] });
const memset = (c: QcudaClient, dst: bigint, size: bigint, value: number) =>
  c.call(Cmd.MEMSET, { args: ['qcuda_args_memset', { dst, size, stream: 0n, value, async: 0 }] });
const memInfo = async (c: QcudaClient) => (await c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' })).out!;

test('two emulated devices: count, properties told apart, a device past the last refused', async (t) => {
  const { c } = await setup(t);
  const hello = await c.call(Cmd.HELLO, {
    args: ['qcuda_args_hello', { proto_version: QCUDA_PROTO_VERSION, cuda_version: 13000 }],
    out: 'qcuda_out_hello',
  });
  t.is(hello.out!.device_count, 2);
  const props = async (device: number) =>
    c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device }], out: 'qcuda_out_device_props' });
  const [p0, p1] = [await props(0), await props(1)];
  t.is(p0.status, 0);
  t.is(p1.status, 0);
  t.notDeepEqual(Array.from(p0.out!.uuid as Uint8Array), Array.from(p1.out!.uuid as Uint8Array), 'each device its own uuid');
  t.is((p1.out!.attrs as Uint32Array)[33], 2, 'and its own PCI bus id (neutral: device index + 1)');
  t.is((await props(2)).status, CudaErr.InvalidDevice);
  t.is((await setDevice(c, 2)).status, CudaErr.InvalidDevice);
});

test('a context per device: allocations on the current device, memory info per device, freed from either', async (t) => {
  const { c, provider } = await setup(t);
  const a = (await c.malloc(8n * MIB)).value;
  t.is((await setDevice(c, 1)).status, 0, 'switching devices after device 0 has its context');
  const b = (await c.malloc(3n * MIB)).value;
  t.is(provider.memory.usedOn(0), 8n * MIB);
  t.is(provider.memory.usedOn(1), 3n * MIB);
  t.is((await memInfo(c)).free, 61n * MIB, 'device 1 counts its own');
  t.is((await setDevice(c, 0)).status, 0);
  t.is((await memInfo(c)).free, 56n * MIB, 'device 0 its own');
  t.is((await c.free(b)).status, 0, 'cudaFree of device 1 memory with device 0 current');
  t.is(provider.memory.usedOn(1), 0n);
  t.is((await c.free(a)).status, 0);
  t.is(provider.used, 0n);
});

test('peer copies move bytes device to device, both ways, and uploads reach a peer pointer', async (t) => {
  const { c, fe } = await setup(t);
  const size = 3 * 4096 + 5;
  const a = (await c.malloc(size)).value;
  t.is((await setDevice(c, 1)).status, 0);
  const b = (await c.malloc(size)).value;
  t.is((await setDevice(c, 0)).status, 0);
  const src = fe.mem.alloc(size);
  const data = fe.mem.bytes(src, size);
  for (let i = 0; i < size; i++) data[i] = (i * 31 + 7) & 0xff;
  t.is(await c.htod(a, src, size), 0);
  t.is((await d2d(c, b, a, BigInt(size))).status, 0, 'device 0 to device 1');
  t.is((await memset(c, a, BigInt(size), 0)).status, 0);
  const out = fe.mem.alloc(size);
  t.is(await c.dtoh(out, b, size), 0, 'a download of device 1 memory with device 0 current');
  t.deepEqual(Buffer.from(fe.mem.bytes(out, size)), Buffer.from(data), 'byte for byte on device 1');
  t.is((await d2d(c, a + 1n, b + 2n, 100n)).status, 0, 'device 1 to device 0, at offsets');
  t.is(await c.dtoh(out, a, 102), 0);
  t.is(fe.mem.bytes(out, 102)[0], 0);
  t.deepEqual(Buffer.from(fe.mem.bytes(out + 1n, 100)), Buffer.from(data.subarray(2, 102)));
});

test("peer copies are checked: past a peer allocation, another session's pointer, freed memory", async (t) => {
  const { c, client } = await setup(t);
  const a = (await c.malloc(4096)).value;
  t.is((await setDevice(c, 1)).status, 0);
  const b = (await c.malloc(4096)).value;
  t.is((await d2d(c, a, b, 4097n)).status, CudaErr.InvalidValue, "one byte past device 1's allocation");
  t.is((await d2d(c, b + 1n, a, 4096n)).status, CudaErr.InvalidValue, 'past the end on device 1');
  const other = await client();
  t.is((await setDevice(other, 1)).status, 0);
  const theirs = (await other.malloc(4096)).value;
  t.is((await d2d(c, a, theirs, 16n)).status, CudaErr.InvalidValue, "another process's device 1 memory");
  t.is((await d2d(other, theirs, a, 16n)).status, CudaErr.InvalidValue, 'nor may it read ours');
  t.is((await c.free(b)).status, 0);
  t.is((await d2d(c, a, b, 16n)).status, CudaErr.InvalidValue, 'freed');
});

test('the quota is one budget for the VM across its devices', async (t) => {
  const { c, dev } = await setup(t, { memoryLimit: 10n * MIB });
  t.is((await c.malloc(6n * MIB)).status, 0);
  t.is((await setDevice(c, 1)).status, 0);
  t.is((await c.malloc(6n * MIB)).status, CudaErr.MemoryAllocation, 'device 1 has room, the VM has not');
  t.is((await c.malloc(4n * MIB)).status, 0);
  t.is(dev.vm.quota.used, 10n * MIB);
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(dev.vm.quota.used, 0n, "a reset gives every device's back");
});

test('one device by default: device 1 does not exist', async (t) => {
  const { c } = await setup(t, { devices: 1 });
  t.is((await setDevice(c, 1)).status, CudaErr.InvalidDevice);
  t.throws(() => new EmuProvider({ devices: 0 }));
  t.throws(() => new EmuProvider({ devices: 17 }));
});
