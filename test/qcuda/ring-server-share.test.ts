// The ring server under --gpu-share (issue 36): a worker's launches, copies
// and batches are still answered in C, admitted and charged on the VM's
// share table as the JavaScript gate does (share/gate.ts); a post whose VM
// is ahead of its weighted share is left to JavaScript, whose gate waits
// (bounded); and a session's answers are the ones it gets with the ring
// server off. Real cuda workers on the fake driver (fixtures/fakecuda.c).
import test from 'ava';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Cmd } from '../../backend/src/qcuda/proto';
import { DEFAULT_POLICY } from '../../backend/src/qcuda/share/policy';
import { RECHECK_NS, SHARE_ENV } from '../../backend/src/qcuda/share/gate';
import { ShareTable, clockNs } from '../../backend/src/qcuda/share/table';
import { batch, batchStory, DEVICE_SYNC, i32, kernels, launch, launchArgs, setup, story } from './ring-story';

const MS = 1e6;
// This process's VM, and its workers' (they inherit the environment), on a table of the test's own.
const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-share-ring-')), 'table');
const table = ShareTable.open(file);
const vm = table.joinVm(2);
process.env[SHARE_ENV] = `${vm}:${file}`;
/**
 * Until the gates' last admission has run out (RECHECK_NS; the ring
 * server's kRecheckNs): a post within it is admitted without the table
 * being read, so a change to the table shows from the post after.
 */
async function pastAdmission(): Promise<void> {
  const until = clockNs() + RECHECK_NS;
  while (clockNs() <= until) await new Promise((r) => setTimeout(r, 1));
}
const used = (): number => table.report().find((v) => v.slot === vm)!.usedNs;

test.serial("with shares on, the ring server still answers in C, and charges the VM for its kernels' time", async (t) => {
  const { c, inC } = await setup(t, true);
  const [hold, nop] = await kernels(c, ['hold', 'nop']);
  const before = used();
  t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(hold, i32(200)) })).status, 0);
  // Behind a running kernel the synchronize is the device's (it waits); the next ones are C's.
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  const n = inC();
  t.deepEqual(await batch(c, [launch(nop, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(nop, new Uint8Array(0)) })).status, 0);
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  t.true(inC() >= n + 3 && inC() >= 4, `calls answered in C: ${inC()}`);
  // The launch of 200 ms was charged (alone on the GPU: all of it), the process is idle again.
  const charged = used() - before;
  t.true(charged >= 150 * MS && charged < 2000 * MS, `charged ${charged / MS} ms`);
  const me = table.snapshot().find((v) => v.slot === vm)!;
  t.deepEqual(me.busySince, [], 'synchronized: no process of the VM busy');
});

test.serial(
  'a post answered in C waits while its VM is ahead of its share, no longer than the bounded wait; at once when it is not',
  async (t) => {
    const { c, inC } = await setup(t, true);
    const [nop] = await kernels(c, ['nop']);
    const post = async (): Promise<number> => {
      const t0 = clockNs();
      t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(nop, new Uint8Array(0)) })).status, 0);
      t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
      return (clockNs() - t0) / MS;
    };
    await post();
    const n = inC();
    t.true((await post()) < 80, 'alone: at once');
    t.true(inC() >= n + 2, 'and in C');
    // Another VM (this test stands in for it) wants the GPU, 200 ms of virtual time behind and never catching up.
    const other = table.joinVm(1);
    const proc = table.joinProcess(other);
    // Whatever fails, the other VM goes: the next test's posts are not held behind it.
    let left = false;
    const gone = (): void => {
      if (left) return;
      left = true;
      table.leaveProcess(proc);
      table.leaveVm(other);
    };
    t.teardown(gone);
    table.setWaiting(proc, true);
    table.addUsage(vm, 400 * MS + table.snapshot().reduce((m, v) => Math.max(m, v.usage), 0));
    await pastAdmission();
    const held = await post();
    t.true(
      held >= (DEFAULT_POLICY.maxWaitNs / MS) * 0.8 && held < 3000,
      `held ${held} ms (the bound: ${DEFAULT_POLICY.maxWaitNs / MS} ms)`,
    );
    // The other VM is gone: at once again.
    gone();
    t.true((await post()) < 80, 'at once once the other VM is gone');
  },
);

test.serial("with shares on, a session's answers are the same with the ring server on and off", async (t) => {
  // Each story on a session of its own (each loads its module).
  const on = [await setup(t, true), await setup(t, true)];
  const withServer = [await story(on[0].c), await batchStory(on[1].c)];
  const off = [await setup(t, false), await setup(t, false)];
  const without = [await story(off[0].c), await batchStory(off[1].c)];
  t.deepEqual(withServer, without);
  t.true(on[0].inC() >= 10 && on[1].inC() >= 10, `answered in C: ${on[0].inC()}, ${on[1].inC()}`);
});
