// The VM's budgets in shared memory (qcuda/quota/limits.ts Ledger,
// addon/src/ledger.cc): processes taking from one budget at once never pass
// its limit, what a killed holder held is given back, and a process that dies
// holding the ledger's lock leaves it repaired for the next one. A hostile
// worker (security review 2, L1), which can write the shared file, cannot
// lift a limit, freeze the backend by keeping the lock, or make a total wrap
// or go below 0.
import test from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { Budget, Ledger, Share } from '../../backend/src/qcuda/quota/limits';
import { CudaError } from '../../backend/src/qcuda/cuda-error';

const MiB = 1n << 20n;
const I64_MAX = (1n << 63n) - 1n;
const CHILD = path.join(__dirname, 'ledger-child.js');

/** The ledger's limits as the backend hands them to a worker with the ledger's fd (ledger-child.ts reads them). */
function env(ledger: Ledger): NodeJS.ProcessEnv {
  const limits = Array.from({ length: ledger.native.budgets }, (_, b) => ledger.native.limit(b).toString());
  return { ...process.env, LEDGER_LIMITS: limits.join(',') };
}

/** Runs the child to its end (killed after timeoutMs); its exit status and what it printed. */
function childSync(ledger: Ledger, timeoutMs: number, ...args: string[]): { code: number | null; out: string; err: string } {
  const c = spawnSync(process.execPath, [CHILD, ...args], {
    stdio: ['ignore', 'pipe', 'pipe', ledger.fd.value],
    encoding: 'utf8',
    timeout: timeoutMs,
    killSignal: 'SIGKILL',
    env: env(ledger),
  });
  return { code: c.status, out: c.stdout, err: c.stderr };
}

function child(
  ledger: Ledger,
  ...args: string[]
): { done: Promise<{ code: number | null; out: string }>; pid: number; kill: () => void; started: Promise<void> } {
  const c = spawn(process.execPath, [CHILD, ...args], { stdio: ['ignore', 'pipe', 'inherit', ledger.fd.value], env: env(ledger) });
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

test("a worker that writes zeros over the whole ledger file, or tries to cut it short, cannot lift a limit: the backend's next take past the quota still fails", (t) => {
  const ledger = Ledger.create([10n * MiB, 0n], 8);
  t.teardown(() => ledger.close());
  const quota = new Budget(ledger, 0, 'the device memory quota');
  const mine = new Share(quota, ledger.allocSlot());
  mine.take(10n * MiB);
  const r = childSync(ledger, 30_000, 'zero', '1');
  t.is(r.code, 0, r.err);
  t.deepEqual(JSON.parse(r.out), { shrink: 'EPERM' }, "the file cannot be cut short under this process's mapping");
  t.is(ledger.native.limit(0), 10n * MiB, "the limit is this process's own");
  t.throws(() => mine.take(10n * MiB + 1n), {
    instanceOf: CudaError,
    message: /the device memory quota of 10485760 bytes would be exceeded/,
  });
  t.false(ledger.native.take(0, 2, 11n * MiB), 'no slot may take more than the limit');
});

test("a process that keeps the ledger's lock: the backend's take fails within a second or so instead of hanging", async (t) => {
  const ledger = Ledger.create([10n * MiB, 0n], 8);
  t.teardown(() => ledger.close());
  const locker = child(ledger, 'hold-lock');
  t.teardown(locker.kill);
  await locker.started;
  // In another process, so that a take that never returns cannot hang this one.
  const r = childSync(ledger, 10_000, 'take', '1', String(MiB));
  t.is(r.code, 0, `the take returned (${r.code === null ? 'killed after 10 s' : r.err})`);
  if (r.code !== 0) return;
  const j = JSON.parse(r.out) as { result: string; ms: number };
  t.regex(j.result, /^threw: the VM's ledger stayed locked for over 1 s/);
  t.true(j.ms >= 900 && j.ms < 3000, `it waited ${j.ms} ms`);
  // Here, as the backend's sessions see it: a CUDA error of the budget, nothing counted.
  const share = new Share(new Budget(ledger, 0, 'the device memory quota'), ledger.allocSlot());
  t.throws(() => share.take(MiB), { instanceOf: CudaError, message: /^the device memory quota: the VM's ledger stayed locked/ });
  locker.kill();
  await locker.done;
  t.is(share.held, 0n, 'the lock is free again (its holder died): nothing was counted');
  share.take(MiB);
  t.is(share.held, MiB);
});

test('forged counts: totals rebuilt after a death in the lock never wrap, and a reclaim never takes a total below 0', (t) => {
  const ledger = Ledger.create([10n * MiB, 0n], 8);
  t.teardown(() => ledger.close());
  // Slots 2 and 3 say they hold 2^63-1 each; their writer dies holding the lock.
  let r = childSync(ledger, 30_000, 'forge-wrap', '2');
  t.is(r.code, 0, r.err);
  t.is(ledger.native.total(1), I64_MAX, 'the sum stops at the most a count can be');
  t.false(ledger.native.take(1, 1, 1n), 'and every take fails until those slots are reclaimed');
  ledger.freeSlot(2);
  ledger.freeSlot(3);
  t.is(ledger.native.total(1), 0n);
  t.true(ledger.native.take(1, 1, 1n));
  t.true(ledger.native.give(1, 1, 1n));
  // Slot 4 says it holds 1000 of a total of 5: reclaiming it leaves 0, not -995.
  r = childSync(ledger, 30_000, 'forge-held', '4');
  t.is(r.code, 0, r.err);
  ledger.native.reclaim(4);
  t.is(ledger.native.total(1), 0n);
  t.is(ledger.native.held(1, 4), 0n);
});

test("a process with the ledger's fd that writes its lock word and every other byte for 10 s while the backend takes and gives: the backend lives, and the ledger works once it is gone", async (t) => {
  // Security review 3, N7: the lock was a robust pthread mutex whose list pointers the backend's unlock wrote through.
  const ledger = Ledger.create([10n * MiB, 0n], 8);
  t.teardown(() => ledger.close());
  const run = (...args: string[]) => {
    const c = spawn(process.execPath, [CHILD, ...args], { stdio: ['ignore', 'pipe', 'pipe', ledger.fd.value], env: env(ledger) });
    let out = '';
    let err = '';
    c.stdout!.on('data', (d) => (out += d));
    c.stderr!.on('data', (d) => (err += d));
    const done = new Promise<{ code: number | null; signal: string | null; out: string; err: string }>((r) =>
      c.once('exit', (code, signal) => r({ code, signal, out, err })),
    );
    t.teardown(() => c.kill('SIGKILL'));
    return { pid: c.pid!, done };
  };
  const backend = run('busy', '1', String(MiB), '10000');
  const attacker = run('scribble', '10500', String(backend.pid));
  const [b, a] = await Promise.all([backend.done, attacker.done]);
  t.is(a.code, 0, `the attacker ran its 10 s (${a.signal ?? a.err})`);
  t.is(b.signal, null, `the backend was not killed (${b.signal})`);
  t.is(b.code, 0, `the backend's takes and gives answered or said the ledger stayed locked: ${b.err}`);
  if (b.code !== 0) return;
  const r = JSON.parse(b.out) as { pairs: number; refused: number; timeouts: number; limit: string };
  t.log(`backend: ${r.pairs} take/give pairs, ${r.refused} takes refused, ${r.timeouts} steps timed out; attacker: ${a.out}`);
  t.true(r.pairs > 0, 'the backend took and gave while it was attacked');
  t.is(r.limit, String(10n * MiB), "the limit is the backend's own");
  // The attacker is gone (whatever its last write left in the lock word, the word names no live thread):
  // every slot given back, the totals are 0 again, and the limit holds.
  for (let s = 0; s < ledger.native.slots; s++) ledger.native.reclaim(s);
  t.is(ledger.native.total(0), 0n);
  t.false(ledger.native.take(0, 1, 10n * MiB + 1n), 'a take past the limit fails');
  t.true(ledger.native.take(0, 1, 10n * MiB), 'a take up to it succeeds');
});
