// Benchmark (not a test): the harness -> backend -> harness round trip of a
// minimal request and 1 MiB request throughput, against a bare eventfd
// ping-pong between two Node processes measured in the same run.
//   node dist/test/bench/vhost-user.js [--iterations N]
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { native } from '../../backend/src/sys/native';
import { EventFd } from '../../backend/src/vhost-user';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { percentile, report } from './stats';

const ITER = Number(process.argv[process.argv.indexOf('--iterations') + 1]) || 20000;
const WARMUP = 2000;
const dist = path.resolve(__dirname, '..', '..');

function child(script: string, args: string[], fds: number[]): ChildProcess {
  return spawn(process.execPath, [path.join(dist, script), ...args], { stdio: ['ignore', 'inherit', 'inherit', ...fds] });
}

function stopChild(c: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (c.exitCode !== null) return resolve();
    c.once('exit', () => resolve());
    c.kill('SIGTERM');
  });
}

/** Microseconds per round trip of `once`, sequentially. */
async function measure(once: () => Promise<unknown>, n: number): Promise<number[]> {
  for (let i = 0; i < WARMUP; i++) await once();
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await once();
    out.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return out.sort((a, b) => a - b);
}

async function bare(): Promise<number[]> {
  const ping = EventFd.create();
  const pong = EventFd.create();
  const c = child('test/bench/pingpong-child.js', [], [ping.value, pong.value]);
  let wake: () => void = () => {};
  pong.watch(() => wake(), true);
  await new Promise((r) => setTimeout(r, 300));
  const lat = await measure(
    () =>
      new Promise<void>((r) => {
        wake = r;
        ping.signal();
      }),
    ITER,
  );
  await stopChild(c);
  ping.close();
  pong.close();
  return lat;
}

async function backend(): Promise<{ lat: number[]; mibps: number }> {
  const [mine, theirs] = native.socketPair();
  const c = child(
    'backend/src/cli/backend.js',
    ['--fd=3', '--device=echo', '--queues=1', ...(process.geteuid?.() === 0 ? ['--backend-user=root'] : [])],
    [theirs],
  );
  native.close(theirs);
  const fe = Frontend.fromFd(
    mine,
    new GuestMemory([
      { gpa: 0n, size: 64 << 20 },
      { gpa: 1n << 32n, size: 64 << 20 },
    ]),
  );
  await fe.negotiate();
  await fe.start({ size: 256 });
  const inp = fe.mem.alloc(1);
  const out = fe.mem.alloc(16);
  const lat = await measure(
    () =>
      fe.submit(0, [
        { gpa: inp, len: 1 },
        { gpa: out, len: 16, write: true },
      ]),
    ITER,
  );

  const MIB = 1 << 20;
  const slots = [0, 1, 2, 3].map(() => ({ inp: fe.mem.alloc(MIB, 4096, 1), out: fe.mem.alloc(MIB + 8, 4096, 1) }));
  const total = 2000;
  let next = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    slots.map(async (s) => {
      while (next++ < total)
        await fe.submit(0, [
          { gpa: s.inp, len: MIB },
          { gpa: s.out, len: MIB + 8, write: true },
        ]);
    }),
  );
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  fe.close();
  await stopChild(c);
  return { lat, mibps: total / secs };
}

async function main(): Promise<void> {
  const base = await bare();
  const be = await backend();
  const med = (a: number[]) => percentile(a, 50);
  const p99 = (a: number[]) => percentile(a, 99);
  report(
    'vhost-user round trip (harness -> backend process -> harness)',
    [
      { what: 'bare eventfd ping-pong, median', value: med(base), unit: 'us' },
      { what: 'bare eventfd ping-pong, p99', value: p99(base), unit: 'us' },
      { what: 'minimal request, median', value: med(be.lat), unit: 'us', baseline: med(base), ratio: med(be.lat) / med(base) },
      { what: 'minimal request, p99', value: p99(be.lat), unit: 'us', baseline: p99(base), ratio: p99(be.lat) / p99(base) },
      { what: '1 MiB echo requests, 4 in flight', value: be.mibps, unit: 'MiB/s' },
    ],
    { iterations: ITER, target: 'minimal-request median within 2.5x of the bare ping-pong' },
  );
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
