// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, ...) through the device on the emu provider: the
// sequence of test/gpu/probes/vmm_probe.cu, what is refused (unaligned,
// outside a reservation, overlapping, another process's handle, a double
// release), the quota taken and given back, and a process's end freeing
// everything. The probe's sequence also runs on cuda workers over the fake
// driver (fixtures/fakecuda.c: its mappings are inaccessible until their
// access is set), the addon's side of it (addon/src/cuda_ctx_vmm.cc).
import test, { type ExecutionContext } from 'ava';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { VmLimits } from '../../backend/src/qcuda/quota/limits';
import type { Provider } from '../../backend/src/qcuda/provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { Cmd, QCUDA_VMM_ACCESS_RW, QCUDA_VMM_GRANULARITY } from '../../backend/src/qcuda/proto';
import { started, until } from '../helpers';
import { QcudaClient } from './client';

// Workers inherit the environment: cuda workers load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

const G = BigInt(QCUDA_VMM_GRANULARITY);
const MIB = 1n << 20n;

async function setup(t: ExecutionContext, limits: Partial<VmLimits> = {}) {
  const provider = new EmuProvider({});
  return { provider, ...(await on(t, provider, limits)) };
}

/** The device on a provider. */
async function on(t: ExecutionContext, provider: Provider, limits: Partial<VmLimits> = {}) {
  const dev = new QcudaDevice({ queues: 4, limits, provider });
  const pair = await started(t, dev, { size: 256 });
  const client = async () => {
    const c = new QcudaClient(pair.fe);
    await c.open();
    return c;
  };
  return { dev, fe: pair.fe, c: await client(), client };
}

/** The calls, as the guest library sends them. */
const vmm = (c: QcudaClient) => ({
  reserve: (size: bigint, alignment = 0n, flags = 0n) =>
    c.call(Cmd.VMM_RESERVE, { args: ['qcuda_args_vmm_reserve', { size, alignment, addr: 0n, flags }] }),
  free: (ptr: bigint, size: bigint) => c.call(Cmd.VMM_FREE, { args: ['qcuda_args_vmm_range', { ptr, size }] }),
  create: (size: bigint, flags = 0n) => c.call(Cmd.VMM_CREATE, { args: ['qcuda_args_vmm_create', { size, flags }] }),
  release: (handle: bigint) => c.call(Cmd.VMM_RELEASE, { args: ['qcuda_args_handle', { handle }] }),
  map: (ptr: bigint, size: bigint, handle: bigint, offset = 0n) =>
    c.call(Cmd.VMM_MAP, { args: ['qcuda_args_vmm_map', { ptr, size, offset, handle, flags: 0n }] }),
  unmap: (ptr: bigint, size: bigint) => c.call(Cmd.VMM_UNMAP, { args: ['qcuda_args_vmm_range', { ptr, size }] }),
  access: (ptr: bigint, size: bigint, device = 0, prot: number = QCUDA_VMM_ACCESS_RW) =>
    c.call(Cmd.VMM_SET_ACCESS, { args: ['qcuda_args_vmm_access', { ptr, size, device, prot }] }),
  getAccess: (ptr: bigint) => c.call(Cmd.VMM_GET_ACCESS, { args: ['qcuda_args_ptr', { ptr }] }),
  retain: (ptr: bigint) => c.call(Cmd.VMM_RETAIN, { args: ['qcuda_args_ptr', { ptr }] }),
  size: (handle: bigint) => c.call(Cmd.VMM_SIZE, { args: ['qcuda_args_handle', { handle }] }),
  memset: (dst: bigint, size: bigint, value: number) =>
    c.call(Cmd.MEMSET, { args: ['qcuda_args_memset', { dst, size, stream: 0n, value, async: 0 }] }),
});

/** The value of a call that must succeed. */
async function ok(t: ExecutionContext, p: Promise<{ status: number; value: bigint }>, what: string): Promise<bigint> {
  const r = await p;
  t.is(r.status, 0, what);
  return r.value;
}

/** vmm_probe's sequence (its kernel a memset and copies), checked at each step; the quota and the provider's memory back at the end. */
async function probeSequence(
  t: ExecutionContext,
  dev: QcudaDevice,
  fe: Awaited<ReturnType<typeof on>>['fe'],
  c: QcudaClient,
  used: () => bigint | Promise<bigint>,
): Promise<void> {
  const v = vmm(c);
  const size = 2n * G;
  const va = await ok(t, v.reserve(size * 2n), 'reserve');
  t.is(va % G, 0n);
  const h = await ok(t, v.create(size), 'create');
  t.is(dev.vm.quota.used, size, 'physical memory counts against the quota');
  t.is(await ok(t, v.size(h), 'size'), size);
  await ok(t, v.map(va, size, h), 'map');
  t.is(await ok(t, v.getAccess(va), 'get access before'), 0n);
  t.is((await v.memset(va, 16n, 1)).status, CudaErr.InvalidValue, 'mapped without access: not memory of the process yet');
  await ok(t, v.access(va, size), 'set access');
  t.is(await ok(t, v.getAccess(va + 4096n), 'get access'), BigInt(QCUDA_VMM_ACCESS_RW));
  await ok(t, v.memset(va, size, 0x5a), 'memset of the whole mapping');
  const gpa = fe.mem.alloc(8192, 4096);
  const host = fe.mem.bytes(gpa, 8192);
  host.fill(0).set([1, 2, 3, 4], 0);
  t.is(await c.htod(va + 4000n, gpa, 4), 0);
  t.is(await c.dtoh(gpa + 4096n, va + 3998n, 8), 0);
  t.deepEqual([...host.subarray(4096, 4104)], [0x5a, 0x5a, 1, 2, 3, 4, 0x5a, 0x5a]);
  const h2 = await ok(t, v.retain(va + 12345n), 'retain');
  t.is(h2, h, 'the handle of the allocation mapped there');
  await ok(t, v.release(h2), 'release of the retained handle');
  await ok(t, v.unmap(va, size), 'unmap');
  t.is((await v.memset(va, 16n, 1)).status, CudaErr.InvalidValue, 'unmapped: no longer memory of the process');
  t.is(dev.vm.quota.used, size, 'still held by its handle');
  await ok(t, v.release(h), 'release');
  t.is(dev.vm.quota.used, 0n);
  t.is(await used(), 0n, 'the provider freed it');
  await ok(t, v.free(va, size * 2n), 'address free');
}

test("vmm_probe's sequence: reserve, create, map, set access, memset and copies, retain, unmap, release, free; the quota comes back", async (t) => {
  const { dev, provider, fe, c } = await setup(t, { deviceMemory: 64n * MIB });
  await probeSequence(t, dev, fe, c, () => provider.used);
  await c.close();
});

test('on cuda workers (the fake driver): the same sequence, every step through the worker', async (t) => {
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } });
  t.teardown(() => provider.close());
  const { dev, fe, c } = await on(t, provider);
  const free = async () => (await c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' })).out!.free as bigint;
  const before = await free();
  await probeSequence(t, dev, fe, c, async () => before - (await free()));
  t.is(await free(), before, 'the driver has its memory back');
  await c.close();
});

test('on the cuda provider in this process (the fake driver, no worker to end with the context): a reset frees what VMM holds on the device', async (t) => {
  const { createCudaProvider } = await import('../../backend/src/qcuda/providers/cuda/cuda');
  const provider = await createCudaProvider(0);
  t.teardown(() => provider.close());
  const { c } = await on(t, provider);
  const free = async () => (await c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' })).out!.free as bigint;
  const before = await free();
  const v = vmm(c);
  const va = await ok(t, v.reserve(4n * G), 'reserve');
  const h = await ok(t, v.create(2n * G), 'create');
  await ok(t, v.map(va, 2n * G, h), 'map');
  await ok(t, v.access(va, 2n * G), 'access');
  await ok(t, v.create(G), 'an allocation never mapped');
  t.is(await free(), before - 3n * G);
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(await free(), before, "the context's teardown unmapped and released it all");
  await c.close();
});

test('a copy may span adjacent mappings; released but mapped memory lives on until unmapped', async (t) => {
  const { dev, provider, fe, c } = await setup(t);
  const v = vmm(c);
  const va = await ok(t, v.reserve(4n * G), 'reserve');
  const a = await ok(t, v.create(G), 'create a');
  const b = await ok(t, v.create(G), 'create b');
  await ok(t, v.map(va, G, a), 'map a');
  await ok(t, v.map(va + G, G, b), 'map b');
  await ok(t, v.access(va, 2n * G), 'access over both mappings');
  await ok(t, v.release(a), 'release a while mapped');
  await ok(t, v.release(b), 'release b while mapped');
  t.is(provider.used, 2n * G, 'mapped memory is kept');
  t.is(dev.vm.quota.used, 2n * G);
  const gpa = fe.mem.alloc(8192, 4096);
  fe.mem.bytes(gpa, 4096).fill(7);
  t.is(await c.htod(va + G - 2048n, gpa, 4096), 0, 'a copy across the two mappings');
  t.is(await c.dtoh(gpa + 4096n, va + G - 2048n, 4096), 0);
  t.true(fe.mem.bytes(gpa + 4096n, 4096).every((x) => x === 7));
  t.is((await v.release(a)).status, CudaErr.InvalidValue, 'a released handle is gone');
  t.is((await v.unmap(va, G)).status, 0);
  t.is(provider.used, G, 'unmapped and released: freed');
  t.is(dev.vm.quota.used, G);
  t.is((await v.unmap(va + G, G)).status, 0);
  t.is(dev.vm.quota.used, 0n);
  t.is(provider.used, 0n);
  await c.close();
});

test("bad input is refused: unaligned, outside a reservation, overlapping, partial unmaps, another process's handle, a double release", async (t) => {
  const { dev, c, client } = await setup(t);
  const v = vmm(c);
  const bad = CudaErr.InvalidValue;
  t.is((await v.reserve(G + 4096n)).status, bad, 'unaligned reservation size');
  t.is((await v.reserve(0n)).status, bad, 'reservation of 0 bytes');
  t.is((await v.reserve(G, 3n * G)).status, bad, 'alignment not a power of two');
  t.is((await v.reserve(G, 0n, 1n)).status, bad, 'flags');
  t.is((await v.create(G / 2n)).status, bad, 'unaligned allocation size');
  t.is((await v.create(G, 1n)).status, bad, 'flags');
  const va = await ok(t, v.reserve(4n * G), 'reserve');
  const h = await ok(t, v.create(2n * G), 'create');
  t.is((await v.map(va + 4096n, G, h)).status, bad, 'unaligned address');
  t.is((await v.map(va, G + 4096n, h)).status, bad, 'unaligned size');
  t.is((await v.map(va, 4n * G, h)).status, CudaErr.NotSupported, 'larger than the allocation (as the driver answers)');
  t.is((await v.map(va, G, h, G)).status, bad, 'an offset into the allocation');
  t.is((await v.map(va + 3n * G, 2n * G, h)).status, bad, 'past the end of the reservation');
  t.is((await v.map(0x7000_0000_0000n, G, h)).status, bad, 'outside any reservation');
  t.is((await v.map(va, G, 0x12345n)).status, bad, 'no such handle');
  await ok(t, v.map(va + G, 2n * G, h), 'map');
  t.is((await v.map(va, 2n * G, h)).status, bad, 'over an existing mapping');
  t.is((await v.unmap(va + G, G)).status, bad, 'part of a mapping');
  t.is((await v.unmap(va, 3n * G)).status, bad, 'a range with nothing mapped in part of it');
  t.is((await v.access(va + G, G)).status, bad, 'access to part of a mapping');
  t.is((await v.access(va + G, 2n * G, 1)).status, CudaErr.InvalidDevice, 'another device');
  t.is((await v.access(va + G, 2n * G, 0, 1)).status, bad, 'read-only access');
  t.is((await v.getAccess(va)).status, bad, 'nothing mapped there');
  t.is((await v.retain(va)).status, bad, 'nothing mapped there');
  t.is((await v.free(va, 4n * G)).status, bad, 'a reservation with memory mapped in it');
  t.is((await v.free(va, 2n * G)).status, bad, 'not the whole reservation');

  const other = await client();
  const o = vmm(other);
  const ova = await ok(t, o.reserve(2n * G), 'other: reserve');
  t.is((await o.map(ova, 2n * G, h)).status, bad, "another process's handle");
  t.is((await o.release(h)).status, bad, "another process's handle");
  t.is((await o.unmap(va + G, 2n * G)).status, bad, "another process's mapping");
  t.is((await o.free(va, 4n * G)).status, bad, "another process's reservation");
  t.is((await o.retain(va + G)).status, bad, "another process's mapping");
  t.is((await o.memset(va + G, 16n, 1)).status, bad, "another process's memory");
  await other.close();

  await ok(t, v.release(h), 'release');
  t.is((await v.release(h)).status, bad, 'double release');
  await ok(t, v.unmap(va + G, 2n * G), 'unmap');
  await ok(t, v.free(va, 4n * G), 'free');
  t.is((await v.free(va, 4n * G)).status, bad, 'double free');
  t.is(dev.vm.quota.used, 0n);
  await c.close();
});

test('physical memory counts against the quota like cudaMalloc; reservations are bounded as objects (--process-handles)', async (t) => {
  const { dev, c } = await setup(t, { deviceMemory: 4n * MIB, processObjects: 4 });
  const v = vmm(c);
  t.is((await c.malloc(MIB)).status, 0);
  const h = await ok(t, v.create(2n * MIB), 'create within the quota');
  t.is((await v.create(2n * MIB)).status, CudaErr.MemoryAllocation, 'past the quota');
  t.is(dev.vm.quota.used, 3n * MIB);
  await ok(t, v.release(h), 'release');
  t.is(dev.vm.quota.used, MIB);
  const held = [];
  for (let i = 0; i < 4; i++) held.push(await ok(t, v.reserve(G), `reservation ${i}`));
  t.is((await v.reserve(G)).status, CudaErr.MemoryAllocation, 'the fifth VMM object');
  t.is((await v.reserve(1n << 45n)).status, CudaErr.MemoryAllocation, 'more address space than a process may hold');
  await ok(t, v.free(held[0], G), 'free');
  await ok(t, v.reserve(G), 'a freed one gives its place back');
  await c.close();
});

test("a process's end and a device reset free its reservations, allocations and mappings", async (t) => {
  const { dev, provider, c, client } = await setup(t, { deviceMemory: 64n * MIB });
  const v = vmm(c);
  const va = await ok(t, v.reserve(8n * G), 'reserve');
  for (let i = 0n; i < 4n; i++) {
    const h = await ok(t, v.create(G), 'create');
    await ok(t, v.map(va + i * G, G, h), 'map');
  }
  await ok(t, v.access(va, 4n * G), 'access');
  await ok(t, v.create(G), 'an allocation never mapped');
  t.is(dev.vm.quota.used, 5n * G);
  t.is(provider.used, 5n * G);
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(dev.vm.quota.used, 0n);
  t.is(provider.used, 0n);
  t.is((await v.memset(va, 16n, 1)).status, CudaErr.InvalidValue, 'gone with the reset');

  const d = await client();
  const w = vmm(d);
  const wva = await ok(t, w.reserve(2n * G), 'reserve');
  const wh = await ok(t, w.create(2n * G), 'create');
  await ok(t, w.map(wva, 2n * G, wh), 'map');
  await ok(t, w.access(wva, 2n * G), 'access');
  t.is(dev.vm.quota.used, 2n * G);
  await d.close();
  t.is(dev.vm.quota.used, 0n);
  t.is(provider.used, 0n);
  await c.close();
});

test('a handle released while its mapping is being made, which then fails: the memory is freed, not left counted', async (t) => {
  let letGo!: () => void;
  const held = new Promise<void>((r) => (letGo = r));
  let mapping = false;
  class FailingMaps extends EmuProvider {
    override async openContext(device: number) {
      const x = await super.openContext(device);
      x.vmmMap = async () => {
        mapping = true;
        await held;
        throw new CudaError(CudaErr.MemoryAllocation, 'the map fails');
      };
      return x;
    }
  }
  const provider = new FailingMaps({});
  const { dev, c } = await on(t, provider, { deviceMemory: 64n * MIB });
  const v = vmm(c);
  const va = await ok(t, v.reserve(2n * G), 'reserve');
  const h = await ok(t, v.create(2n * G), 'create');
  const map = v.map(va, 2n * G, h);
  t.true(await until(() => mapping), 'the map is in the provider');
  await ok(t, v.release(h), 'release while the map is in flight');
  t.is(dev.vm.quota.used, 2n * G, 'still held by the mapping being made');
  letGo();
  t.is((await map).status, CudaErr.MemoryAllocation);
  t.is(dev.vm.quota.used, 0n);
  t.is(provider.used, 0n);
  await c.close();
});
