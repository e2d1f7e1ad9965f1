// Memory another process still has open stays counted (security review 3,
// N4): CUDA keeps freed memory while another process has it opened by IPC
// or imported through a shareable handle, and an opener whose context has a
// sticky fault fails its close and keeps the memory until it exits. So the
// owner's bytes stay in the VM's quota until every opener has let go of
// them; an opener whose close or release fails or hangs (the fake driver's
// FAKECUDA_IPC_CLOSE and FAKECUDA_VMM_RELEASE, set in that opener's worker
// only) has its worker ended first, and only then are they uncounted. The
// owner's free is answered with success throughout, as natively.
//
// Serial: the failure is asked through the environment the opener's worker
// is started with, which these tests set and restore around that start.
import test, { type ExecutionContext } from 'ava';
import { Cmd, QCUDA_VMM_ACCESS_RW, QCUDA_VMM_GRANULARITY } from '../../backend/src/qcuda/proto';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { alive, tick, until } from '../helpers';
import type { QcudaClient } from './client';
import { cudaOwnQueues, cudaWorkers, PROVIDERS, sharingVm, type MakeProvider } from './sharing-vm';

const SIZE = 1n << 20n;
const G = BigInt(QCUDA_VMM_GRANULARITY);
type Handle = { token: Uint8Array; size: bigint; reserved: Uint8Array };

async function ok(t: ExecutionContext, p: Promise<{ status: number; value: bigint }>, what: string): Promise<bigint> {
  const r = await p;
  t.is(r.status, 0, what);
  return r.value;
}

async function ipcHandle(c: QcudaClient, ptr: bigint): Promise<Handle> {
  const r = await c.call(Cmd.IPC_GET, { args: ['qcuda_args_ptr', { ptr }], out: 'qcuda_ipc_handle' });
  if (r.status !== 0) throw new Error(`IPC_GET: ${r.status}`);
  return r.out as unknown as Handle;
}

const ipcOpen = (c: QcudaClient, h: Handle) => c.call(Cmd.IPC_OPEN, { args: ['qcuda_ipc_handle', { ...h }] });
const ipcClose = async (c: QcudaClient, ptr: bigint) => (await c.call(Cmd.IPC_CLOSE, { args: ['qcuda_args_ptr', { ptr }] })).status;

/** Every worker pid of the provider (those of contexts and of own queues). */
function pids(v: { provider: () => unknown }): number[] {
  const p = v.provider();
  return p instanceof IsolatedProvider ? [...p.workerPids, ...p.ownerPids] : [];
}

/**
 * Runs f (which starts the opener's worker) with FAKECUDA_<what>=how in the
 * environment, restored after; returns f's result and the one worker it started.
 */
async function withFault<T>(
  t: ExecutionContext,
  v: { provider: () => unknown },
  what: string,
  how: string,
  f: () => Promise<T>,
): Promise<{ r: T; pid: number }> {
  const before = new Set(pids(v));
  const name = `FAKECUDA_${what}`;
  process.env[name] = how;
  let r: T;
  try {
    r = await f();
  } finally {
    delete process.env[name];
  }
  const started = pids(v).filter((p) => !before.has(p));
  t.is(started.length, 1, "the opener's worker");
  return { r, pid: started[0] };
}

/** Owner with an allocation, and an opener (its worker started with FAKECUDA_IPC_CLOSE=how) that opened it. */
async function opened(t: ExecutionContext, make: MakeProvider, how: string) {
  const v = await sharingVm(t, make);
  const owner = await v.client();
  const ptr = await ok(t, owner.malloc(SIZE), 'malloc');
  const h = await ipcHandle(owner, ptr);
  const { r, pid } = await withFault(t, v, 'IPC_CLOSE', how, async () => {
    const opener = await v.client();
    const at = await ok(t, ipcOpen(opener, h), 'open');
    return { opener, at };
  });
  t.is(v.dev.vm.quota.used, SIZE, 'counted once, to the owner');
  return { ...v, owner, ptr, ...r, openerPid: pid };
}

/** The sessions closed: nothing of the VM's quota or contexts is left counted. */
async function leftovers(t: ExecutionContext, v: Awaited<ReturnType<typeof sharingVm>>, clients: QcudaClient[]) {
  for (const c of clients) await c.close();
  t.true(await until(() => v.dev.sessions.size === 0, 5000), 'every session closed');
  t.is(v.dev.vm.quota.used, 0n, 'no quota left counted');
  t.is(v.dev.vm.contexts.used, 0n, 'no process left counted');
}

const workers: [string, MakeProvider][] = [
  ['cuda provider (a worker per session, fake driver)', cudaWorkers],
  ['cuda provider (own queues, fake driver)', cudaOwnQueues],
];

for (const [name, make] of workers) {
  test.serial(`${name}: an opener whose IPC close fails has its worker ended before the owner's freed bytes are uncounted`, async (t) => {
    const v = await opened(t, make, 'fail');
    t.true(alive(v.openerPid));
    t.is((await v.owner.free(v.ptr)).status, 0, "the owner's free succeeds, as natively");
    t.false(alive(v.openerPid), "the opener's worker, which kept the memory, is gone");
    t.is(v.dev.vm.quota.used, 0n, 'uncounted once it is');
    await leftovers(t, v, [v.opener, v.owner]);
  });

  test.serial(
    `${name}: an opener whose own IPC close fails has its worker ended: it would keep the memory past the owner's free`,
    async (t) => {
      const v = await opened(t, make, 'fail');
      t.not(await ipcClose(v.opener, v.at), 0, 'the close fails, as natively');
      t.true(await until(() => !alive(v.openerPid), 5000), "the opener's worker, which kept the memory mapped, is gone");
      t.is((await v.owner.free(v.ptr)).status, 0);
      t.is(v.dev.vm.quota.used, 0n);
      await leftovers(t, v, [v.opener, v.owner]);
    },
  );

  test.serial(`${name}: an opener whose IPC close hangs keeps the owner's freed bytes counted until its worker is ended`, async (t) => {
    const v = await opened(t, make, 'hang');
    const freeing = v.owner.free(v.ptr);
    await tick(500);
    t.is(v.dev.vm.quota.used, SIZE, 'still counted while the opener has it open');
    t.true(alive(v.openerPid), 'its worker is still there (the bound is 2 s)');
    t.is((await freeing).status, 0, "the owner's free succeeds, as natively");
    t.false(alive(v.openerPid), "the opener's worker is gone");
    t.is(v.dev.vm.quota.used, 0n, 'uncounted once it is');
    await leftovers(t, v, [v.opener, v.owner]);
  });

  test.serial(`${name}: the owner's exit with an opener whose IPC close hangs: counted until the opener's worker is ended`, async (t) => {
    const v = await opened(t, make, 'hang');
    const closing = v.owner.close();
    await tick(500);
    t.is(v.dev.vm.quota.used, SIZE, "the exited owner's memory, still open in the opener, is still counted");
    t.true(alive(v.openerPid));
    t.is((await closing).status, 0);
    t.false(alive(v.openerPid), "the opener's worker is gone");
    t.is(v.dev.vm.quota.used, 0n);
    await leftovers(t, v, [v.opener]);
  });

  test.serial(
    `${name}: an importer whose VMM release fails has its worker ended before the owner's freed bytes are uncounted`,
    async (t) => {
      const v = await sharingVm(t, make);
      const owner = await v.client();
      const h = await ok(t, owner.call(Cmd.VMM_CREATE, { args: ['qcuda_args_vmm_create', { size: G, flags: 0n }] }), 'create');
      const e = await owner.call(Cmd.VMM_EXPORT, { args: ['qcuda_args_handle', { handle: h }], out: 'qcuda_ipc_handle' });
      t.is(e.status, 0, 'export');
      const token = e.out as unknown as Handle;
      const { r: importer, pid } = await withFault(t, v, 'VMM_RELEASE', 'fail', async () => {
        const importer = await v.client();
        const ih = await ok(t, importer.call(Cmd.VMM_IMPORT, { args: ['qcuda_ipc_handle', { ...token }] }), 'import');
        const va = await ok(
          t,
          importer.call(Cmd.VMM_RESERVE, { args: ['qcuda_args_vmm_reserve', { size: G, alignment: 0n, addr: 0n, flags: 0n }] }),
          'reserve',
        );
        await ok(
          t,
          importer.call(Cmd.VMM_MAP, { args: ['qcuda_args_vmm_map', { ptr: va, size: G, offset: 0n, handle: ih, flags: 0n }] }),
          'map',
        );
        const access = { ptr: va, size: G, device: 0, prot: QCUDA_VMM_ACCESS_RW };
        await ok(t, importer.call(Cmd.VMM_SET_ACCESS, { args: ['qcuda_args_vmm_access', access] }), 'access');
        return importer;
      });
      t.is(v.dev.vm.quota.used, G, 'counted once, to the owner');
      t.true(alive(pid));
      t.is((await owner.call(Cmd.VMM_RELEASE, { args: ['qcuda_args_handle', { handle: h }] })).status, 0, "the owner's release succeeds");
      t.false(alive(pid), "the importer's worker, which kept the memory, is gone");
      t.is(v.dev.vm.quota.used, 0n, 'uncounted once it is');
      await leftovers(t, v, [importer, owner]);
    },
  );
}

for (const [name, make] of PROVIDERS) {
  test.serial(`${name}: openers that close (first, or when the owner frees) leave the owner's bytes uncounted exactly once`, async (t) => {
    const v = await sharingVm(t, make);
    const [owner, opener] = [await v.client(), await v.client()];
    // The owner frees first: the opener's close follows it.
    const p1 = await ok(t, owner.malloc(SIZE), 'malloc');
    const at1 = await ok(t, ipcOpen(opener, await ipcHandle(owner, p1)), 'open');
    const workersBefore = pids(v);
    t.is(v.dev.vm.quota.used, SIZE);
    t.is((await owner.free(p1)).status, 0);
    t.is(v.dev.vm.quota.used, 0n, 'uncounted once the opener closed it');
    t.is(await ipcClose(opener, at1), 0, "the opener's own close after the owner's free succeeds");
    // The opener closes first.
    const p2 = await ok(t, owner.malloc(SIZE), 'malloc');
    const at2 = await ok(t, ipcOpen(opener, await ipcHandle(owner, p2)), 'open');
    t.is(await ipcClose(opener, at2), 0);
    t.is(v.dev.vm.quota.used, SIZE, "still the owner's until it frees it");
    t.is((await owner.free(p2)).status, 0);
    t.is(v.dev.vm.quota.used, 0n);
    const p3 = await ok(t, owner.malloc(SIZE), 'malloc');
    t.is(v.dev.vm.quota.used, SIZE, 'counted as before: nothing was given back twice');
    t.is((await owner.free(p3)).status, 0);
    t.deepEqual(pids(v).sort(), workersBefore.sort(), 'no worker was ended');
    await leftovers(t, v, [opener, owner]);
  });
}
