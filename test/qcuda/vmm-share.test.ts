// Shareable handles of VMM allocations between the processes of one VM
// (cuMemExportToShareableHandle / cuMemImportFromShareableHandle, POSIX fd;
// vmm-share.ts), on the emu provider and on the cuda provider with a worker
// per session (the fake driver: the owner's worker exports a real fd, which
// goes through the backend to the importer's worker and is closed once
// imported): a token exported by one session is imported by another, which
// maps the same memory (bytes written by one are read by the other); forged
// tokens, another VM's and a freed allocation's are refused; the owner's
// free or exit unmaps the importer's mappings. With own queues (each
// session's worker serves its queue and asks the backend for the VM's table:
// vmm-remote.ts) the same holds, and between such a session and one the
// backend serves, either way.
import fs from 'node:fs';
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import type { Provider } from '../../backend/src/qcuda/provider';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { Cmd, QCUDA_VMM_ACCESS_RW, QCUDA_VMM_GRANULARITY } from '../../backend/src/qcuda/proto';
import type { QcudaClient } from './client';
import { cudaOwnQueues, PROVIDERS, sharingVm, type MakeProvider } from './sharing-vm';

const G = BigInt(QCUDA_VMM_GRANULARITY);
type Token = { token: Uint8Array; size: bigint; reserved: Uint8Array };

const vm = sharingVm;

async function ok(t: ExecutionContext, p: Promise<{ status: number; value: bigint }>, what: string): Promise<bigint> {
  const r = await p;
  t.is(r.status, 0, what);
  return r.value;
}

const create = (c: QcudaClient, size: bigint) => c.call(Cmd.VMM_CREATE, { args: ['qcuda_args_vmm_create', { size, flags: 0n }] });
const release = (c: QcudaClient, handle: bigint) => c.call(Cmd.VMM_RELEASE, { args: ['qcuda_args_handle', { handle }] });
const unmap = (c: QcudaClient, ptr: bigint, size: bigint) => c.call(Cmd.VMM_UNMAP, { args: ['qcuda_args_vmm_range', { ptr, size }] });
const importOf = (c: QcudaClient, h: Token) => c.call(Cmd.VMM_IMPORT, { args: ['qcuda_ipc_handle', { ...h }] });

async function exportOf(c: QcudaClient, handle: bigint): Promise<{ status: number; token?: Token }> {
  const r = await c.call(Cmd.VMM_EXPORT, { args: ['qcuda_args_handle', { handle }], out: 'qcuda_ipc_handle' });
  return { status: r.status, token: r.status === 0 ? (r.out as unknown as Token) : undefined };
}

/** Reserves, maps handle h (size bytes) and gives it access: its address. */
async function mapped(t: ExecutionContext, c: QcudaClient, h: bigint, size: bigint): Promise<bigint> {
  const va = await ok(
    t,
    c.call(Cmd.VMM_RESERVE, { args: ['qcuda_args_vmm_reserve', { size, alignment: 0n, addr: 0n, flags: 0n }] }),
    'reserve',
  );
  await ok(t, c.call(Cmd.VMM_MAP, { args: ['qcuda_args_vmm_map', { ptr: va, size, offset: 0n, handle: h, flags: 0n }] }), 'map');
  await ok(
    t,
    c.call(Cmd.VMM_SET_ACCESS, { args: ['qcuda_args_vmm_access', { ptr: va, size, device: 0, prot: QCUDA_VMM_ACCESS_RW }] }),
    'access',
  );
  return va;
}

/** Who serves the owner and the importer: each its worker on its own queue (where the VM has them), or the backend. */
type Serving = 'own' | 'owner served' | 'importer served';

/** Owner and importer mapping one exported allocation. */
async function shared(t: ExecutionContext, make: MakeProvider, serving: Serving = 'own') {
  const v = await vm(t, make);
  const owner = serving === 'owner served' ? await v.served() : await v.client();
  const importer = serving === 'importer served' ? await v.served() : await v.client();
  if (make.ownQueues) t.is((v.provider() as IsolatedProvider).ownerPids.length, serving === 'own' ? 2 : 1, 'queues served by workers');
  const h = await ok(t, create(owner, G), 'create');
  const e = await exportOf(owner, h);
  t.is(e.status, 0, 'export');
  t.is(e.token!.size, G);
  t.deepEqual((await exportOf(owner, h)).token!.token, e.token!.token, 'the same token each time');
  const ih = await ok(t, importOf(importer, e.token!), 'import');
  const [ova, iva] = [await mapped(t, owner, h, G), await mapped(t, importer, ih, G)];
  return { ...v, owner, importer, h, ih, token: e.token!, ova, iva };
}

/** The fake driver's VMM memfds open (fds) and mapped (maps) in a process: what its handles and mappings hold. */
function memfdsOf(pid: number | 'self'): { fds: number; maps: number } {
  let fds = 0;
  for (const f of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${f}`).includes('memfd:fakecuda-vmm')) fds++;
    } catch {
      // closed meanwhile
    }
  }
  const maps = fs
    .readFileSync(`/proc/${pid}/maps`, 'utf8')
    .split('\n')
    .filter((l) => l.includes('memfd:fakecuda-vmm')).length;
  return { fds, maps };
}

/** What the workers hold of the fake's VMM memory, each sorted; undefined on the emu provider (no fds). */
function workersHold(p: Provider | undefined): { fds: number[]; maps: number[] } | undefined {
  if (!(p instanceof IsolatedProvider)) return undefined;
  const held = [...p.workerPids, ...p.ownerPids].map((pid) => memfdsOf(pid));
  return { fds: held.map((h) => h.fds).sort(), maps: held.map((h) => h.maps).sort() };
}

/** Waits (up to 5 s) until the workers hold `want`; the last look otherwise (the assert then says what it was). */
async function settled(p: Provider | undefined, want: { fds: number[]; maps: number[] }) {
  const end = Date.now() + 5000;
  let h = workersHold(p);
  while (h && JSON.stringify(h) !== JSON.stringify(want) && Date.now() < end) {
    await new Promise((r) => setTimeout(r, 20));
    h = workersHold(p);
  }
  return h;
}

async function bothWays(t: ExecutionContext, make: MakeProvider, serving?: Serving) {
  const { dev, fe, owner, importer, ova, iva, provider } = await shared(t, make, serving);
  t.is(dev.vm.quota.used, G, 'counted once, to the owner');
  const gpa = fe.mem.alloc(8192, 4096);
  const host = fe.mem.bytes(gpa, 8192);
  host.fill(0).set([1, 2, 3, 4], 0);
  t.is(await owner.htod(ova + 100n, gpa, 4), 0);
  t.is(await importer.dtoh(gpa + 4096n, iva + 100n, 4), 0);
  t.deepEqual([...host.subarray(4096, 4100)], [1, 2, 3, 4], "the owner's bytes, read by the importer");
  host.set([9, 8, 7], 0);
  t.is(await importer.htod(iva + G - 3n, gpa, 3), 0);
  t.is(await owner.dtoh(gpa + 4096n, ova + G - 3n, 3), 0);
  t.deepEqual([...host.subarray(4096, 4099)], [9, 8, 7], "the importer's bytes, read by the owner");
  if (provider() instanceof IsolatedProvider) {
    // The fd was only in transit: the owner's handle and the importer's import are all that hold one.
    t.deepEqual(await settled(provider(), { fds: [1, 1], maps: [1, 1] }), { fds: [1, 1], maps: [1, 1] }, 'one handle and one mapping each');
    t.is(memfdsOf('self').fds, 0, 'the backend keeps no fd of it');
  }
}

async function refusals(t: ExecutionContext, make: MakeProvider) {
  const { owner, importer, h, ih, token, ova } = await shared(t, make);
  const forged = { ...token, token: token.token.map((b) => b ^ 1) };
  t.is((await importOf(importer, forged)).status, CudaErr.InvalidValue, 'forged');
  t.is((await importOf(importer, { ...token, size: 2n * G })).status, CudaErr.InvalidValue, 'the size is part of the token');
  t.is((await exportOf(owner, h + 1000n)).status, CudaErr.InvalidValue, 'not a handle of the process');
  t.is((await exportOf(importer, ih)).status, CudaErr.NotSupported, 'an imported allocation');
  const other = await vm(t, make);
  t.is((await importOf(await other.client(), token)).status, CudaErr.InvalidValue, "another VM's token");
  t.is((await release(owner, h)).status, 0);
  t.is((await importOf(importer, token)).status, 0, 'still mapped by its owner: still there');
  t.is((await unmap(owner, ova, G)).status, 0, 'the last of the owner: freed');
  t.is((await importOf(importer, token)).status, CudaErr.InvalidValue, 'freed');
}

async function ownerEnds(t: ExecutionContext, make: MakeProvider, serving?: Serving) {
  const v = await shared(t, make, serving);
  const { dev, fe, owner, importer, h, ih, ova, iva, provider } = v;
  const client = serving === 'owner served' ? v.served : v.client;
  const gpa = fe.mem.alloc(4096, 4096);
  t.is((await release(importer, ih)).status, 0, "the importer's release");
  t.is(await importer.dtoh(gpa, iva, 16), 0, 'its mapping stays');
  t.is(dev.vm.quota.used, G);
  t.is((await release(owner, h)).status, 0);
  t.is((await unmap(owner, ova, G)).status, 0);
  t.is(dev.vm.quota.used, 0n, 'freed with its owner');
  t.is(await importer.dtoh(gpa, iva, 16), CudaErr.InvalidValue, "the importer's mapping went with it");
  const none = { fds: [0, 0], maps: [0, 0] };
  if (provider() instanceof IsolatedProvider)
    t.deepEqual(await settled(provider(), none), none, "the importer's worker unmapped and let go of its import");
  // The owner's exit: its token and the importer's mappings go.
  const o2 = await client();
  const h2 = await ok(t, create(o2, G), 'create');
  const e2 = await exportOf(o2, h2);
  const ih2 = await ok(t, importOf(importer, e2.token!), 'import');
  const iva2 = await mapped(t, importer, ih2, G);
  t.is(await importer.dtoh(gpa, iva2, 16), 0);
  await o2.close();
  t.is(await importer.dtoh(gpa, iva2, 16), CudaErr.InvalidValue, 'gone with its owner');
  t.is((await importOf(importer, e2.token!)).status, CudaErr.InvalidValue, "an exited owner's token");
  t.is(dev.vm.quota.used, 0n);
  if (provider() instanceof IsolatedProvider)
    t.deepEqual(await settled(provider(), none), none, "the exited owner's import let go of in the importer's worker");
}

async function attribute(c: QcudaClient): Promise<number> {
  const r = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 0 }], out: 'qcuda_out_device_props' });
  return (r.out!.attrs as Uint32Array)[103];
}

for (const [name, make] of PROVIDERS) {
  test(`${name}: an exported allocation imported by another process: the same memory, both ways`, (t) => bothWays(t, make));
  test(`${name}: refused: forged tokens, another VM's, a freed allocation's; an import is not re-exported`, (t) => refusals(t, make));
  test(`${name}: the owner's free or exit unmaps the importer's mappings; the importer's release frees nothing of the owner's`, (t) =>
    ownerEnds(t, make));
  test(`${name}: the device says it takes POSIX fd handles (attribute 103)`, async (t) => {
    const { client } = await vm(t, make);
    t.is(await attribute(await client()), 1);
  });
}

// Own queues next to sessions the backend serves (a process that keeps to queue 0): each way round.
for (const serving of ['owner served', 'importer served'] as const) {
  const name = `own queues, the ${serving === 'owner served' ? 'owner' : 'importer'} served by the backend`;
  test(`${name}: the same memory, both ways`, (t) => bothWays(t, cudaOwnQueues, serving));
  test(`${name}: the owner's free or exit unmaps the importer's mappings`, (t) => ownerEnds(t, cudaOwnQueues, serving));
}
