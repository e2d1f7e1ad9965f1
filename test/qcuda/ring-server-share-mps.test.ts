// The ring server under --gpu-share-mps (issue 36): in MPS mode a worker's
// posts answered in C take their turn among their VM's processes (another
// process of the VM busy: the post is left to JavaScript, whose gate waits,
// bounded) and never wait for another VM, however far behind it is. Real
// cuda workers on the fake driver (fixtures/fakecuda.c).
import test from 'ava';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Cmd } from '../../backend/src/qcuda/proto';
import { MPS_POLICY, SHARE_ENV } from '../../backend/src/qcuda/share/gate';
import { ShareTable, clockNs } from '../../backend/src/qcuda/share/table';
import { kernels, launchArgs, setup } from './ring-story';

const MS = 1e6;
// This process's VM, in MPS mode, and its workers' (they inherit the environment), on a table of the test's own.
const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-share-mps-ring-')), 'table');
const table = ShareTable.open(file);
const vm = table.joinVm(1);
process.env[SHARE_ENV] = `${vm},mps:${file}`;

test.serial('in MPS mode a post answered in C waits while another process of its VM is busy (bounded), never for another VM', async (t) => {
  const { c, inC } = await setup(t, true);
  const [nop] = await kernels(c, ['nop']);
  const post = async (): Promise<number> => {
    const t0 = clockNs();
    t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(nop, new Uint8Array(0)) })).status, 0);
    t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
    return (clockNs() - t0) / MS;
  };
  await post();
  // Another VM (this test stands in for it) waits, 1 s of virtual time behind: not waited for.
  const other = table.joinVm(1);
  const otherProc = table.joinProcess(other);
  // Another process of this VM (this test stands in for it too).
  const sibling = table.joinProcess(vm);
  t.teardown(() => {
    table.leaveProcess(sibling);
    table.leaveProcess(otherProc);
    table.leaveVm(other);
  });
  table.setWaiting(otherProc, true);
  table.addUsage(vm, 1000 * MS);
  const n = inC();
  t.true((await post()) < 80, 'another VM far behind: at once');
  t.true(inC() >= n + 2, 'and in C');
  table.startTurn(sibling, clockNs());
  const held = await post();
  t.true(
    held >= (MPS_POLICY.maxTurnNs / MS) * 0.8 && held < 3000,
    `held ${held} ms while its sibling held the turn (the bound: ${MPS_POLICY.maxTurnNs / MS} ms)`,
  );
  table.setSynced(sibling, clockNs());
  const m = inC();
  t.true((await post()) < 80, 'its sibling synchronized: at once');
  t.true(inC() >= m + 2, 'and in C');
});
