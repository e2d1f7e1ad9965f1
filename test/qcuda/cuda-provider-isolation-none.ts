// The cuda provider on a GPU, contexts of one process (--isolation=none):
// they read each other's memory, and a kernel fault in one poisons them all.
import test from 'ava';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { promised } from '../helpers';
import { ctx, kernelsFatbin, provider, ram, rejectsWith, seg } from './cuda-provider-fixtures';

/** Registered last by cuda-provider.test.ts: its known failure poisons the process's CUDA. */
export function isolationNoneTests(): void {
  test.serial("--isolation=none: contexts of one process read each other's memory, so a VM gets one CUDA process at a time", async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    // The hazard, measured: a kernel in context a reads memory context b allocated.
    const a = await provider.openContext(0);
    const b = await provider.openContext(0);
    try {
      const secret = await b.malloc(64n);
      await b.memset(secret, 0x5a, 64n, undefined, false);
      const peek = await a.functionGet((await a.moduleLoad(image)).ref, 'peek', 256);
      const out = await a.malloc(64n);
      const p = new DataView(new ArrayBuffer(20));
      p.setBigUint64(0, secret, true);
      p.setBigUint64(8, out, true);
      p.setInt32(16, 16, true);
      const r = await promised(() =>
        a.launch(peek.ref, [1, 1, 1], [32, 1, 1], 0, undefined, new Uint8Array(p.buffer.slice(0, peek.paramBytes))),
      )
        .then(() => a.synchronize())
        .then(
          () => 'ran',
          (e: Error) => e.message,
        );
      t.log(`a kernel in context a given context b's pointer: ${r}`);
    } finally {
      await a.destroy();
      await b.destroy();
    }
    // So the device refuses a second CUDA process with isolation none.
    const { DEVICES } = await import('../../backend/src/devices');
    const { started } = await import('../helpers');
    const { QcudaClient } = await import('./client');
    const { Cmd } = await import('../../backend/src/qcuda/proto');
    const dev = await DEVICES.qcuda.create({ provider: 'cuda', isolation: 'none', queues: 2 });
    const pair = await started(t, dev, { size: 64 });
    const one = new QcudaClient(pair.fe, 2, 8);
    const two = new QcudaClient(pair.fe, 2, 8);
    await one.open();
    await two.open();
    t.is((await one.malloc(64)).status, 0);
    t.is((await two.malloc(64)).status, CudaErr.DevicesUnavailable, 'a second CUDA process of the VM is refused');
    t.is((await one.call(Cmd.SESSION_CLOSE)).status, 0);
    t.is((await two.malloc(64)).status, 0, 'once the first is gone, the next one runs');
    await two.call(Cmd.SESSION_CLOSE);
    await (dev as unknown as { provider: { close(): Promise<void> } }).provider.close();
  });

  // KNOWN FAILURE (measured on the H100, driver 580): an illegal address poisons the whole
  // process, every context and even new ones (cuCtxCreate then returns 700). Contexts per
  // session therefore do not isolate a kernel fault in one process: that is why the backend
  // runs each session in a worker process (IsolatedProvider, cuda-provider-hardening.ts). This test
  // records the driver's behaviour for --isolation=none; ava flags it the day it passes.
  test.serial.failing('an illegal address in a kernel surfaces at synchronize as 700; other contexts keep working', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    // the healthy session loads its module before the other one faults
    const gm = (await ctx.moduleLoad(image)).ref;
    const bump = await ctx.functionGet(gm, 'bump', 256);
    const v = await ctx.variableGet(gm, 'counter');
    const bad = await provider.openContext(0);
    const m = (await bad.moduleLoad(image)).ref;
    const crash = await bad.functionGet(m, 'crash', 256);
    const x = await bad.malloc(64n);
    const p = new DataView(new ArrayBuffer(8));
    p.setBigUint64(0, x, true);
    await bad.launch(crash.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer)); // enqueued: no error yet
    await rejectsWith(t, () => bad.synchronize(), CudaErr.IllegalAddress);
    await rejectsWith(t, () => bad.malloc(64n), CudaErr.IllegalAddress, /illegal/i);
    // what still works in the other context (logged step by step: the driver decides)
    const step = async (name: string, f: () => unknown) => {
      try {
        await f();
        t.log(`after the fault, other context: ${name}: ok`);
        return true;
      } catch (e) {
        t.log(`after the fault, other context: ${name}: ${(e as CudaError).code} ${(e as Error).message}`);
        return false;
      }
    };
    const ok: boolean[] = [];
    ok.push(await step('malloc+free', async () => ctx.free(await ctx.malloc(4096n))));
    ok.push(await step('copy', () => ctx.copyFromDevice([seg(ram, 0, 16)], v.dptr, undefined)));
    ok.push(
      await step('launch+synchronize', async () => {
        await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([5]).buffer));
        await ctx.synchronize();
      }),
    );
    ok.push(await step('moduleLoad', async () => ctx.moduleUnload((await ctx.moduleLoad(image)).ref)));
    await bad.destroy().catch((e: Error) => t.log(`destroy of the faulted context: ${e.message}`));
    const fresh = await provider.openContext(0);
    ok.push(await step('fresh context after destroy: moduleLoad', async () => fresh.moduleUnload((await fresh.moduleLoad(image)).ref)));
    ok.push(await step('old context after destroy: moduleLoad', async () => ctx.moduleUnload((await ctx.moduleLoad(image)).ref)));
    await fresh.destroy().catch(() => undefined);
    await ctx.moduleUnload(gm).catch(() => undefined);
    t.deepEqual(
      ok,
      ok.map(() => true),
      'every step in the healthy context works',
    );
  });
}
