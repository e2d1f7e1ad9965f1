// The GPU compute share between VMs (issue 36; qcuda/share/): the policy
// run against a model of a time-sliced GPU (weights, a VM of many processes,
// a tenant that never yields, one that comes back from idle), the shared
// table (dead processes drop out), the gate (a wait is bounded and keeps
// order), and qcuda-backend --gpu-share joining the table.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  DEFAULT_POLICY,
  backFromIdle,
  busyProcesses,
  catchUp,
  charge,
  mayPost,
  parseWeight,
  FRESH,
  wants,
  type VmView,
} from '../../backend/src/qcuda/share/policy';
import { ShareTable, TABLE_BYTES } from '../../backend/src/qcuda/share/table';
import { MPS_POLICY, ShareGate } from '../../backend/src/qcuda/share/gate';
import { UsageWindow } from '../../backend/src/qcuda/share/usage-window';
import { KEEP_ROOT } from '../helpers';

const MS = 1e6;

interface Proc {
  vm: number;
  /** GPU work left of its job (ns of the whole GPU), 0: idle; Infinity: a kernel that never ends. */
  left: number;
  /** Last charged (ns), while busy. */
  since: number;
  /** It tried to post and was held back. */
  waiting?: boolean;
  /** When its last job ended (0: none yet). */
  idleSince?: number;
}

/**
 * A GPU that time-slices the processes with work (each of P busy gets 1/P),
 * and processes that each post a job of `jobNs` as soon as the policy lets
 * them, then synchronize. What each VM got of the GPU over `durationNs`.
 */
function simulate(
  weights: number[],
  procsPerVm: number[],
  o: { jobNs?: number[]; durationNs?: number; stuck?: number; ungated?: boolean } = {},
): number[] {
  const step = 0.1 * MS;
  const duration = o.durationNs ?? 3_000 * MS;
  const usage = weights.map(() => 0);
  const got = weights.map(() => 0);
  const procs: Proc[] = procsPerVm.flatMap((n, vm) => Array.from({ length: n }, () => ({ vm, left: 0, since: 0 })));
  const view = (): VmView[] =>
    weights.map((w, vm) => ({
      slot: vm,
      weight: w,
      usage: usage[vm],
      busySince: procs.filter((p) => p.vm === vm && p.left > 0).map((p) => p.since),
      waiting: procs.filter((p) => p.vm === vm && p.waiting).length,
      lastSync: Math.max(0, ...procs.filter((p) => p.vm === vm).map((p) => p.idleSince ?? 0)),
    }));
  if (o.stuck !== undefined) procs.push({ vm: o.stuck, left: Infinity, since: 0 });
  for (let now = 0; now < duration; now += step) {
    for (const p of procs) {
      if (p.left > 0) continue;
      const vms = view();
      if (!wants(vms[p.vm], now) && backFromIdle(p.idleSince ?? 0, now)) usage[p.vm] = catchUp(p.vm, vms, now);
      p.waiting = !(o.ungated || mayPost(p.vm, view(), now));
      if (!p.waiting) {
        p.left = o.jobNs?.[p.vm] ?? 2 * MS;
        p.since = now;
      }
    }
    const busy = procs.filter((p) => p.left > 0);
    for (const p of busy) {
      got[p.vm] += step / busy.length;
      p.left -= step / busy.length;
      if (p.left <= 1e-6) {
        // It synchronizes: charged for its busy time, idle.
        usage[p.vm] += charge(now + step - p.since, busy.length);
        p.left = 0;
        p.idleSince = now + step;
      }
    }
  }
  const total = got.reduce((a, b) => a + b, 0);
  return got.map((g) => g / total);
}

function within(t: { true: (x: boolean, m?: string) => void }, got: number[], want: number[], tolerance = 0.1): void {
  got.forEach((g, i) =>
    t.true(
      Math.abs(g - want[i]) <= tolerance * want[i],
      `VM ${i}: ${g.toFixed(3)} of the GPU, its weight asks ${want[i].toFixed(3)} (all: ${got.map((x) => x.toFixed(3)).join(' ')})`,
    ),
  );
}

test('four equal VMs get a quarter each', (t) => {
  within(t, simulate([1, 1, 1, 1], [1, 1, 1, 1]), [0.25, 0.25, 0.25, 0.25]);
});

test('weights 1:1:2:4 give shares 1:1:2:4 of the GPU', (t) => {
  within(t, simulate([1, 1, 2, 4], [1, 1, 1, 1]), [1 / 8, 1 / 8, 2 / 8, 4 / 8]);
});

test('a VM of eight processes gets its weight, not eight times it', (t) => {
  within(t, simulate([1, 1, 1, 1], [8, 1, 1, 1]), [0.25, 0.25, 0.25, 0.25]);
});

test('long jobs beside short ones still share by weight', (t) => {
  within(t, simulate([1, 1, 1, 1], [1, 1, 1, 1], { jobNs: [50 * MS, 0.2 * MS, 2 * MS, 2 * MS] }), [0.25, 0.25, 0.25, 0.25]);
});

test('without the policy a VM of eight processes takes eight times the others (what the model shows the driver does)', (t) => {
  // The same model with every post let through: the check that the tests above can fail.
  const got = simulate([1, 1, 1, 1], [8, 1, 1, 1], { ungated: true });
  t.true(got[0] > 0.65, `the 8-process VM got ${got[0].toFixed(3)}`);
});

test('a tenant whose kernel never ends holds no one back: the others share the rest', (t) => {
  // VM 0's stuck process is busy for ever and never charged by itself: its pending time counts.
  const got = simulate([1, 1, 1, 1], [0, 1, 1, 1], { stuck: 0 });
  // The stuck kernel gets its time slice; the three others split the rest evenly and are never shut out.
  for (const g of got.slice(1)) t.true(g > 0.2, `a VM beside the stuck one got ${g.toFixed(3)}`);
  t.true(Math.max(...got.slice(1)) - Math.min(...got.slice(1)) < 0.03, got.join(' '));
});

test('a VM ahead waits, one behind goes; a VM that wants nothing is not waited for', (t) => {
  const vms: VmView[] = [
    { slot: 0, weight: 1, usage: 50 * MS, busySince: [], waiting: 1, lastSync: 0 },
    { slot: 1, weight: 1, usage: 10 * MS, busySince: [], waiting: 1, lastSync: 0 },
    { slot: 2, weight: 1, usage: 0, busySince: [], waiting: 0, lastSync: 0 },
  ];
  t.false(mayPost(0, vms, 0));
  t.true(mayPost(1, vms, 0));
  vms[1].waiting = 0;
  t.true(mayPost(0, vms, 0), 'VM 1 wants nothing now');
  // A weight of 5 makes VM 0's 50 ms count as 10.
  vms[1].waiting = 1;
  vms[0].weight = 5;
  t.true(mayPost(0, vms, 0));
  // Busy time not yet charged counts: VM 1 busy for 60 ms since its last charge, alone busy.
  vms[0].weight = 1;
  vms[1].busySince = [0];
  t.true(mayPost(0, vms, 60 * MS));
  t.is(busyProcesses(vms), 1);
});

test("a VM back from idle restarts at the others' level, not with banked credit", (t) => {
  const vms: VmView[] = [
    { slot: 0, weight: 1, usage: 0, busySince: [], waiting: 0, lastSync: 0 },
    { slot: 1, weight: 2, usage: 400 * MS, busySince: [], waiting: 1, lastSync: 0 },
  ];
  t.is(catchUp(0, vms, 0), 200 * MS - DEFAULT_POLICY.slackNs, 'behind by the slack at most');
  t.is(catchUp(1, vms, 0), 400 * MS, 'no one else wants the GPU: its own');
  vms[0].usage = 199 * MS;
  t.is(catchUp(0, vms, 0), 199 * MS, 'less than the slack behind: kept');
});

test("MPS mode: a VM's process waits while another of its VM is busy; one busy keeps posting; other VMs are never waited for", (t) => {
  const vms: VmView[] = [
    // VM 0: one process busy; far ahead of VM 1 in virtual time, which wants the GPU.
    { slot: 0, weight: 1, usage: 500 * MS, busySince: [1 * MS], waiting: 0, lastSync: 0 },
    { slot: 1, weight: 1, usage: 0, busySince: [], waiting: 1, firstWaiting: 2 * MS, lastSync: 0 },
  ];
  const now = 10 * MS;
  t.false(mayPost(0, vms, now, MPS_POLICY), "VM 0's second process waits while its first is busy");
  t.true(mayPost(0, vms, now, MPS_POLICY, { busy: true, waitingSince: 0 }), 'the busy one keeps posting');
  t.false(mayPost(0, vms, now, DEFAULT_POLICY, { busy: true, waitingSince: 0 }), 'without MPS mode: held back, VM 1 is behind');
  vms[0].busySince = [];
  t.true(mayPost(0, vms, now, MPS_POLICY), 'its first synchronized: it goes, though VM 1 is behind and waiting');
  t.false(mayPost(0, vms, now, DEFAULT_POLICY), 'without MPS mode it would wait for VM 1');
  // VM 1's processes: none busy, one waits since 2 ms. VM 0's busy processes never hold them.
  vms[0].busySince = [1 * MS, 1 * MS, 1 * MS];
  t.true(mayPost(1, vms, now, MPS_POLICY, { busy: false, waitingSince: 2 * MS }), "the first of VM 1's waiting goes");
  t.false(mayPost(1, vms, now, MPS_POLICY, FRESH), 'one that comes after it waits its turn');
  t.false(mayPost(1, vms, now, MPS_POLICY, { busy: false, waitingSince: 3 * MS }), 'as does one that began to wait later');
  t.true(mayPost(7, vms, now, MPS_POLICY), 'a VM not in the table: nothing to wait for');
});

test('MPS mode bounds a turn, not a wait: in line behind turns shorter than maxTurnNs a process waits; a turn held longer, or a first in line that lets a free turn pass, lets it go', (t) => {
  const T = MPS_POLICY.maxTurnNs;
  const at = 10 * T;
  // VM 0: one process holds the turn since `turn`; this one waits since 1 ms, another since 2 ms.
  const vm = (turn: number, busy = true, lastSync = 0): VmView[] => [
    {
      slot: 0,
      weight: 1,
      usage: 0,
      busySince: busy ? [at - MS] : [],
      turnSince: busy ? turn : undefined,
      waiting: 2,
      firstWaiting: 1 * MS,
      lastSync,
    },
  ];
  const first = { busy: false, waitingSince: 1 * MS };
  const second = { busy: false, waitingSince: 2 * MS };
  t.false(
    mayPost(0, vm(at - T / 2), at, MPS_POLICY, first),
    'a turn younger than maxTurnNs: the first in line waits, however long it has waited',
  );
  t.true(mayPost(0, vm(at - T), at, MPS_POLICY, first), 'a turn held maxTurnNs: the first in line goes beside it');
  t.false(mayPost(0, vm(at - T), at, MPS_POLICY, second), 'the second stays in line');
  t.true(mayPost(0, vm(0, false, at - MS), at, MPS_POLICY, first), 'the turn free: the first in line goes');
  t.false(mayPost(0, vm(0, false, at - MS), at, MPS_POLICY, second), 'and only the first');
  t.true(mayPost(0, vm(0, false, at - T), at, MPS_POLICY, second), 'a first in line that let the turn lie free for maxTurnNs is passed');
});

test('--gpu-share weights: integers from 1 to 1000', (t) => {
  t.is(parseWeight('4'), 4);
  for (const bad of ['0', '1001', '1.5', '-1', 'x', '']) t.throws(() => parseWeight(bad), { message: /from 1 to 1000/ });
});

function tableFile(): string {
  return path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-share-')), 'table');
}

/** A pid that no longer runs. */
function deadPid(): number {
  const c = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
  return +c.stdout;
}

test('the table: VMs and their processes as they say; a dead process is neither busy nor waiting, a dead VM is gone and its slot taken again', (t) => {
  const file = tableFile();
  const a = ShareTable.open(file);
  const b = ShareTable.open(file); // another process's mapping of the same file
  const vm = a.joinVm(3);
  const p = a.joinProcess(vm);
  b.setBusy(p, 1234);
  b.addUsage(vm, 5e6);
  t.deepEqual(b.snapshot(), [{ slot: vm, weight: 3, usage: 5e6, busySince: [1234], waiting: 0, lastSync: 0, turnSince: 1234 }]);
  const dead = deadPid();
  const q = a.joinProcess(vm, dead);
  a.setBusy(q, 99);
  a.setWaiting(q, true);
  t.deepEqual(b.snapshot()[0].busySince, [1234], 'the dead process counts neither busy nor waiting');
  t.is(b.snapshot()[0].waiting, 0);
  const gone = a.joinVm(1, dead);
  t.is(b.snapshot().length, 1, 'a VM whose backend is gone is not there');
  t.is(a.joinVm(2), gone, 'and its slot is taken again');
  t.is(b.weight(gone), 2);
  a.close();
  b.close();
});

test('a file that is not a table is refused', (t) => {
  const file = tableFile();
  fs.writeFileSync(file, Buffer.alloc(TABLE_BYTES, 0xff), { mode: 0o600 });
  t.throws(() => ShareTable.open(file), { message: /not a qcuda GPU share table/ });
});

/** A gate on a table of its own with a clock that moves only when it sleeps. */
function gated(policy = DEFAULT_POLICY): { gate: ShareGate; table: ShareTable; clock: { now: number } } {
  const table = ShareTable.open(tableFile());
  const clock = { now: 1 };
  const vm = table.joinVm(1);
  const gate = new ShareGate(
    table,
    vm,
    policy,
    () => clock.now,
    async (ms) => {
      clock.now += ms * MS;
      await new Promise((r) => setImmediate(r));
    },
  );
  return { gate, table, clock };
}

test('the gate: a VM alone posts at once; a VM ahead waits until the other catches up, and meanwhile its other commands wait behind', async (t) => {
  const { gate, table, clock } = gated();
  t.is(gate.before(true), undefined);
  gate.synced();
  // Another VM (this test process stands in for its backend and worker) wants the GPU and is 20 ms behind.
  const other = table.joinVm(1);
  const op = table.joinProcess(other);
  table.setWaiting(op, true);
  table.addUsage(gate.vm, 30 * MS);
  table.addUsage(other, 10 * MS);
  clock.now += 2 * MS; // past the last admission's recheck
  const w = gate.before(true);
  t.truthy(w, 'ahead: it waits');
  t.is(gate.before(false), w, 'a synchronize after it waits behind it');
  let done = false;
  void w!.then(() => (done = true));
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
  t.false(done, 'still behind after 5 ms');
  table.addUsage(other, 20 * MS); // it caught up
  await w;
  t.true(clock.now < 20 * MS, `let through once the other caught up (at ${clock.now / MS} ms)`);
});

test('the gate: a VM that says it wants the GPU and never takes it holds the others back no longer than maxWaitNs', async (t) => {
  const { gate, table, clock } = gated();
  const other = table.joinVm(1);
  table.setWaiting(table.joinProcess(other), true);
  table.addUsage(gate.vm, 500 * MS);
  const from = clock.now;
  await gate.before(true);
  t.true(
    clock.now - from >= DEFAULT_POLICY.maxWaitNs && clock.now - from < DEFAULT_POLICY.maxWaitNs + 5 * MS,
    `waited ${(clock.now - from) / MS} ms`,
  );
});

/** Lets the gate's waits poll (each sleep of the fake clock is 1 ms) `n` times. */
async function polls(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
}

test('the gate in MPS mode: a post waits while another process of its VM is busy, and goes once it synchronized; a busy process keeps posting', async (t) => {
  const { gate, table, clock } = gated(MPS_POLICY);
  // Another VM far behind and waiting: never waited for in MPS mode.
  const other = table.joinVm(1);
  table.setWaiting(table.joinProcess(other), true);
  table.addUsage(gate.vm, 500 * MS);
  t.is(gate.before(true), undefined, 'alone in its VM: at once, whatever the other VM');
  // Another process of the same VM (this test stands in for it) posts while the gate's process is busy...
  const sibling = table.joinProcess(gate.vm);
  table.setBusy(sibling, clock.now);
  t.is(gate.before(true), undefined, '...and the busy process keeps posting');
  gate.synced();
  table.setBusy(sibling, clock.now);
  const from = clock.now;
  const w = gate.before(true);
  t.truthy(w, 'idle, with its sibling busy: it waits');
  let done = false;
  void w!.then(() => (done = true));
  await polls(5);
  t.false(done, 'still waiting after 5 ms');
  t.is(table.snapshot().find((v) => v.slot === gate.vm)!.firstWaiting, from, 'its wait is in the table, since when');
  table.setSynced(sibling, clock.now);
  await w;
  t.true(clock.now < 20 * MS, `let through once its sibling synchronized (at ${clock.now / MS} ms)`);
  t.is(table.snapshot().find((v) => v.slot === gate.vm)!.firstWaiting, undefined, 'no longer waiting');
});

test('the gate in MPS mode: a post waits its turn behind siblings in line, past maxWaitNs; a sibling busy for ever holds it maxTurnNs', async (t) => {
  const { gate, table, clock } = gated(MPS_POLICY);
  const [holder, ahead] = [table.joinProcess(gate.vm), table.joinProcess(gate.vm)];
  // One sibling holds the turn; another waits before this post does.
  table.startTurn(holder, clock.now);
  table.setWaiting(ahead, true, clock.now);
  clock.now += MS;
  let from = clock.now;
  const w = gate.before(true);
  t.truthy(w, 'a sibling holds the turn: it waits');
  let done = false;
  void w!.then(() => (done = true));
  await polls(80);
  t.false(done);
  // The holder synchronizes; the sibling in line takes the turn, and holds it 80 ms too.
  table.setSynced(holder, clock.now);
  table.startTurn(ahead, clock.now);
  table.setWaiting(ahead, false);
  await polls(80);
  t.false(done, `still in line after ${(clock.now - from) / MS} ms, more than maxWaitNs: the turns ahead were each shorter than maxTurnNs`);
  table.setSynced(ahead, clock.now);
  await w;
  t.true(clock.now - from < 170 * MS, `went once the turn was free (after ${(clock.now - from) / MS} ms)`);
  gate.synced();
  // A sibling that never synchronizes holds a post maxTurnNs from the start of its turn.
  table.startTurn(holder, clock.now);
  from = clock.now;
  await gate.before(true);
  t.true(
    clock.now - from >= MPS_POLICY.maxTurnNs && clock.now - from < MPS_POLICY.maxTurnNs + 5 * MS,
    `waited ${(clock.now - from) / MS} ms`,
  );
});

test('qcuda-backend --gpu-share joins the table with its weight and leaves it at exit; a bad weight is a usage error', async (t) => {
  const backend = path.join(__dirname, '../../backend/src/cli/backend.js');
  const file = tableFile();
  const env = { ...process.env, QCUDA_GPU_SHARE_TABLE: file };
  const bad = spawnSync(process.execPath, [backend, '--socket-path=/tmp/x.sock', '--provider=emu', '--gpu-share=0'], {
    encoding: 'utf8',
    env,
  });
  t.is(bad.status, 2);
  t.regex(bad.stderr, /--gpu-share=0: a weight must be an integer from 1 to 1000/);
  const sock = path.join(path.dirname(file), 'b.sock');
  const b = spawn(process.execPath, [backend, `--socket-path=${sock}`, '--provider=emu', '--gpu-share=7', ...KEEP_ROOT], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env,
  });
  let err = '';
  await new Promise<void>((resolve, reject) => {
    b.stderr!.on('data', (d) => {
      err += d;
      if (err.includes('listening')) resolve();
    });
    b.once('exit', (c) => reject(new Error(`backend exited ${c}: ${err}`)));
  });
  const table = ShareTable.open(file);
  t.deepEqual(
    table.snapshot().map((v) => v.weight),
    [7],
  );
  t.regex(err, /GPU share: weight 7, slot 0 of /);
  b.kill('SIGTERM');
  await new Promise((r) => b.once('exit', r));
  t.deepEqual(table.snapshot(), [], 'gone with the backend');
});

test("qcuda status's GPU share: each VM's part of the GPU time used over the last 10 s, against its weight's", (t) => {
  const table = ShareTable.open(tableFile());
  const clock = { now: 1e9 };
  const a = table.joinVm(2);
  const b = table.joinVm(1);
  const w = new UsageWindow(table, a, () => clock.now);
  t.like(w.status(), { weight: 2, share: 0, target: 2 / 3, vms: 2, windowSeconds: 0, totalNs: 0 }, 'nothing used yet');
  clock.now += 4e9;
  table.addUsage(a, 3e6);
  table.addUsage(b, 1e6);
  t.like(w.status(), { share: 0.75, windowSeconds: 4, usedNs: 3e6, totalNs: 4e6 });
  // Measured from the newest sample at least 10 s old: what was used before it no longer counts.
  clock.now += 8e9;
  table.addUsage(b, 3e6);
  t.like(w.status(), { share: 3 / 7, windowSeconds: 12, usedNs: 3e6, totalNs: 7e6 }, 'from the first sample, 12 s back');
  clock.now += 3e9;
  t.like(w.status(), { share: 0, windowSeconds: 11, usedNs: 0, totalNs: 3e6 }, 'from the sample 4 s in, 11 s back');
  // A VM whose backend is gone leaves the table: the weights are those present.
  table.joinVm(5, deadPid());
  t.like(w.status(), { target: 2 / 3, vms: 2 });
  const c = table.joinVm(1);
  table.addUsage(c, 2e6);
  t.like(w.status(), { target: 0.5, vms: 3, totalNs: 5e6 }, 'a VM that joined within the window counts from 0');
  table.close();
});
