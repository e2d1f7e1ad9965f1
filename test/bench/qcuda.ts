// Benchmark (not a test): the qcuda backend path with no VM. A harness plays
// the guest driver against the real backend process; the baseline is the
// same provider driven directly in this process, with no transport. On a
// GPU machine (provider cuda) the ratios are the backend's own cost; the
// native CUDA program test/bench/native_bench.cu gives the driver-level
// figures next to them (test/gpu/run.sh runs both).
//   node dist/test/bench/qcuda.js [--provider cuda|host|auto] [--mib 256]
import { spawn } from 'node:child_process';
import path from 'node:path';
import { native } from '../../backend/src/native';
import { Cmd } from '../../backend/src/qcuda/proto';
import { createProvider, type ProviderKind } from '../../backend/src/qcuda/providers';
import type { GuestSeg } from '../../backend/src/qcuda/provider';
import { Frontend } from '../../backend/src/vhost-user/frontend/frontend';
import { GuestMemory } from '../../backend/src/vhost-user/frontend/guest-memory';
import { QcudaClient } from '../qcuda/client';
import { percentile, report, type Row } from './stats';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : dflt);
const PROVIDER = arg('--provider', 'auto') as ProviderKind;
const BIG = Number(arg('--mib', '256')) << 20;
const dist = path.resolve(__dirname, '..', '..');

async function lat(n: number, once: () => Promise<unknown>): Promise<number> {
  for (let i = 0; i < Math.min(200, n); i++) await once();
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await once();
    xs.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return percentile(xs.sort((a, b) => a - b), 50);
}

async function gbps(bytes: number, once: () => Promise<unknown>, reps = 5): Promise<number> {
  await once();
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    await once();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return bytes / best / 1e9;
}

function mustOk(what: string) {
  return (status: number) => {
    if (status !== 0) throw new Error(`${what} failed with status ${status}`);
  };
}

async function main(): Promise<void> {
  // Backend path: harness -> backend process -> provider.
  const [mine, theirs] = native.socketPair();
  const child = spawn(process.execPath, [path.join(dist, 'backend/src/cli/backend.js'), '--fd=3', '--device=qcuda', '--queues=4', `--provider=${PROVIDER}`],
    { stdio: ['ignore', 'inherit', 'inherit', theirs] });
  native.close(theirs);
  const mem = new GuestMemory([{ gpa: 0n, size: 64 << 20 }, { gpa: 1n << 32n, size: 2 * BIG + (64 << 20) }]);
  const fe = Frontend.fromFd(mine, mem);
  await fe.negotiate();
  await fe.start({ size: 256 });
  const c = new QcudaClient(fe);
  await c.open();
  const src = mem.alloc(BIG, 4096, 1);
  const dst = mem.alloc(BIG, 4096, 1);
  mem.bytes(src, BIG).fill(7);
  const dev = (await c.malloc(BIG)).value;
  const small = mem.alloc(65536, 4096);
  const be = {
    sync: await lat(3000, () => c.call(Cmd.DEVICE_SYNC)),
    h2d4: await lat(3000, () => c.htod(dev, small, 4).then(mustOk('htod'))),
    d2h4: await lat(3000, () => c.dtoh(small, dev, 4).then(mustOk('dtoh'))),
    h2d64k: await lat(1000, () => c.htod(dev, small, 65536).then(mustOk('htod'))),
    h2d: await gbps(BIG, () => c.htod(dev, src, BIG).then(mustOk('htod'))),
    d2h: await gbps(BIG, () => c.dtoh(dst, dev, BIG).then(mustOk('dtoh'))),
  };
  fe.close();
  await new Promise((r) => child.once('exit', r));

  // Baseline: the same provider in this process, the same guest RAM, no transport.
  const { provider, note } = await createProvider(PROVIDER, 0, { guestView: () => [] });
  const direct = new GuestMemory([{ gpa: 0n, size: 2 * BIG + (64 << 20) }]);
  const region = new native.Mapping(direct.fd.value, 2 * BIG + (64 << 20), 0);
  await provider.registerGuestMemory(region.address, BigInt(region.length));
  const view = new Uint8Array(region.window(0, 2 * BIG));
  const seg = (off: number, len: number): GuestSeg[] => [{ addr: region.address + BigInt(off), len, view: view.subarray(off, off + len) }];
  const ctx = await provider.openContext(0);
  const dptr = await ctx.malloc(BigInt(BIG));
  const base = {
    sync: await lat(3000, () => ctx.synchronize()),
    h2d4: await lat(3000, () => ctx.copyToDevice(dptr, seg(0, 4), undefined)),
    d2h4: await lat(3000, () => ctx.copyFromDevice(seg(0, 4), dptr, undefined)),
    h2d64k: await lat(1000, () => ctx.copyToDevice(dptr, seg(0, 65536), undefined)),
    h2d: await gbps(BIG, () => ctx.copyToDevice(dptr, seg(0, BIG), undefined)),
    d2h: await gbps(BIG, () => ctx.copyFromDevice(seg(BIG, BIG), dptr, undefined)),
  };
  await ctx.destroy();
  await provider.unregisterGuestMemory(region.address);
  region.unmap();
  direct.close();
  await provider.close();

  const r = (what: string, v: number, b: number, unit: string, higherIsBetter: boolean): Row =>
    ({ what, value: v, unit, baseline: b, ratio: higherIsBetter ? v / b : b / v });
  report(`qcuda backend path vs the provider called directly (${note})`, [
    r('cudaDeviceSynchronize round trip', be.sync, base.sync, 'us', false),
    r('4 B H2D copy', be.h2d4, base.h2d4, 'us', false),
    r('4 B D2H copy', be.d2h4, base.d2h4, 'us', false),
    r('64 KiB H2D copy', be.h2d64k, base.h2d64k, 'us', false),
    r(`${BIG >> 20} MiB H2D`, be.h2d, base.h2d, 'GB/s', true),
    r(`${BIG >> 20} MiB D2H`, be.d2h, base.d2h, 'GB/s', true),
  ], { provider: note, ratio: 'backend figure relative to the direct one (1.0 = no overhead)' });
}

main().then(() => process.exit(0), (e) => {
  console.error(e);
  process.exit(1);
});
