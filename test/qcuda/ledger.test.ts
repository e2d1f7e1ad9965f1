// The VM's budgets in shared memory (qcuda/limits.ts Ledger,
// addon/src/ledger.cc): processes taking from one budget at once never pass
// its limit, what a killed holder held is given back, and a process that dies
// holding the ledger's lock leaves it repaired for the next one.
import test from 'ava';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { Budget, Ledger, Share } from '../../backend/src/qcuda/limits';
import { CudaError } from '../../backend/src/qcuda/cuda-error';

const MiB = 1n << 20n;

function child(ledger: Ledger, ...args: string[]): { done: Promise<{ code: number | null; out: string }>; pid: number; kill: () => void; started: Promise<void> } {
  const c = spawn(process.execPath, [path.join(__dirname, 'ledger-child.js'), ...args], { stdio: ['ignore', 'pipe', 'inherit', ledger.fd.value] });
  let out = '';
  let onStart!: () => void;
  const started = new Promise<void>((r) => (onStart = r));
  c.stdout!.on('data', (d) => {
    out += d;
    if (out.includes('holding')) onStart();
  });
  const done = new Promise<{ code: number | null; out: string }>((r) => c.once('exit', (code) => r({ code, out })));
  return { done, pid: c.pid!, kill: () => c.kill('SIGKILL'), started };
}

test('shares take and give within the limit, and say plainly when it would be passed', (t) => {
  const ledger = Ledger.create([100n * MiB, 0n], 4);
  t.teardown(() => ledger.close());
  const quota = new Budget(ledger, 0, 'the device memory quota');
  const a = new Share(quota, ledger.allocSlot());
  const b = new Share(quota, ledger.allocSlot());
  a.take(60n * MiB);
  b.take(40n * MiB);
  t.is(quota.used, 100n * MiB);
  t.is(quota.left, 0n);
  const e = t.throws(() => a.take(1n), { instanceOf: CudaError });
  t.regex(e!.message, /the device memory quota of 104857600 bytes would be exceeded \(104857600 in use, 1 more asked\)/);
  t.throws(() => b.give(41n * MiB), { instanceOf: RangeError });
  b.giveAll();
  t.is(quota.used, 60n * MiB);
  const unbounded = new Share(new Budget(ledger, 1, 'x'), 2);
  unbounded.take(1n << 60n);
  t.is(unbounded.held, 1n << 60n);
});

test('four processes taking from one budget at once never pass its limit, and each holds what it says', async (t) => {
  const ledger = Ledger.create([10n * MiB], 8);
  t.teardown(() => ledger.close());
  const runs = [1, 2, 3, 4].map((s) => child(ledger, 'hammer', String(s), String(MiB)));
  const results = await Promise.all(runs.map((r) => r.done));
  let held = 0n;
  let refused = 0;
  for (const [i, r] of results.entries()) {
    t.is(r.code, 0, r.out);
    const j = JSON.parse(r.out) as { held: string; refused: number };
    t.is(ledger.native.held(0, i + 1), BigInt(j.held), `process ${i + 1} holds what it counted`);
    held += BigInt(j.held);
    refused += j.refused;
  }
  t.is(ledger.native.total(0), held);
  t.true(refused > 0, 'the limit was reached and takes past it refused');
  t.log(`${refused} takes refused at the limit; ${held / MiB} MiB held at the end`);
});

test('a holder killed with its share taken: reclaiming its slot gives everything back', async (t) => {
  const ledger = Ledger.create([10n * MiB], 8);
  t.teardown(() => ledger.close());
  const slot = ledger.allocSlot();
  const c = child(ledger, 'hold', String(slot), String(7n * MiB));
  await c.started;
  t.is(ledger.native.total(0), 7n * MiB);
  c.kill();
  await c.done;
  ledger.freeSlot(slot);
  t.is(ledger.native.total(0), 0n);
  t.is(ledger.native.held(0, slot), 0n);
});

test('a process that dies holding the lock: the next locker repairs the totals from the slots and goes on', async (t) => {
  const ledger = Ledger.create([10n * MiB], 8);
  t.teardown(() => ledger.close());
  const r = await child(ledger, 'die-locked', '3', String(2n * MiB)).done;
  t.is(r.code, 0);
  // The lock is the dead process's: this take gets EOWNERDEAD, recomputes, and succeeds.
  t.true(ledger.native.take(0, 1, MiB));
  t.is(ledger.native.total(0), 3n * MiB);
  t.true(ledger.native.give(0, 1, MiB));
  ledger.freeSlot(3);
  t.is(ledger.native.total(0), 0n);
});
