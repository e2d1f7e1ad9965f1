// launchMany's record layout, declared once (backend/src/qcuda/providers/
// launch-record.ts; test/qcuda/proto.test.ts checks the generated
// addon/src/launch_record.h is current): packLaunches writes the fields where it says,
// and the addon (on the fake driver) reads them there: the function and
// stream ids, the parameter block (hold(ms) keeps the context busy for ms), paramBytes (checked
// against the kernel's), the padding, and the index of the first failure.
import test from 'ava';
import {
  LAUNCH_PARAM_ALIGN,
  LAUNCH_RECORD_BYTES,
  LAUNCH_RECORD_FIELDS,
  packLaunches,
  type LaunchIds,
} from '../../backend/src/qcuda/providers/cuda/launch-record';
import type { LaunchDesc } from '../../backend/src/qcuda/provider';
import { fakeCuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();
const IDS: LaunchIds = { func: (f) => f as number, stream: (s) => (s === undefined ? 0 : (s as number)) };

test('packLaunches: the header fields in declared order, little-endian u32, then the parameters padded', (t) => {
  t.is(LAUNCH_RECORD_BYTES, 40);
  t.is(LAUNCH_PARAM_ALIGN, 8);
  const list: LaunchDesc[] = [
    { f: 7, stream: 3, grid: [1, 2, 3], block: [4, 5, 6], sharedMem: 99, params: new Uint8Array([1, 2, 3, 4, 5]) },
    { f: 8, stream: undefined, grid: [9, 10, 11], block: [12, 13, 14], sharedMem: 0, params: new Uint8Array(0) },
  ];
  const buf = packLaunches(list, IDS);
  t.is(buf.length, 40 + 8 + 40);
  const v = new DataView(buf.buffer);
  const head = (at: number) => Object.fromEntries(LAUNCH_RECORD_FIELDS.map((f, i) => [f, v.getUint32(at + 4 * i, true)]));
  t.deepEqual(head(0), { func: 7, stream: 3, gridX: 1, gridY: 2, gridZ: 3, blockX: 4, blockY: 5, blockZ: 6, sharedMem: 99, paramBytes: 5 });
  t.deepEqual([...buf.subarray(40, 48)], [1, 2, 3, 4, 5, 0, 0, 0]);
  t.deepEqual(head(48), {
    func: 8,
    stream: 0,
    gridX: 9,
    gridY: 10,
    gridZ: 11,
    blockX: 12,
    blockY: 13,
    blockZ: 14,
    sharedMem: 0,
    paramBytes: 0,
  });
});

test('launchMany reads the records where packLaunches writes them', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const m = await ctx.moduleLoad(text('// hold(ms)'));
  const hold = (await ctx.functionGet(m.id, 'hold', 256)).id;
  const quick = hold; // hold(0): returns at once
  const s = await ctx.streamCreate(0, 0);
  const launch = (f: number, params: Uint8Array, stream?: number): LaunchDesc => ({
    f,
    stream,
    grid: ONE as [number, number, number],
    block: ONE as [number, number, number],
    sharedMem: 0,
    params,
  });

  // The parameter block reaches the kernel: hold(300) keeps the context busy for 300 ms.
  const t0 = Date.now();
  await ctx.launchMany(packLaunches([launch(quick, i32(0), s), launch(hold, i32(300), s)], IDS), 2);
  t.false(await ctx.streamQuery(s), 'hold(300) is running');
  await ctx.synchronize();
  t.true(Date.now() - t0 >= 250, 'hold ran for its parameter');

  // Every launch is tried; the first failure rejects, with its index and what was wrong.
  const bad = [launch(quick, i32(0)), launch(12345, i32(3)), launch(quick, new Uint8Array(8)), launch(quick, i32(0), 999)];
  const e = (await t.throwsAsync(async () => ctx.launchMany(packLaunches(bad, IDS), bad.length))) as Error & {
    index: number;
    cuResult: number;
  };
  t.is(e.index, 1);
  t.is(e.cuResult, 400);
  t.regex(e.message, /no function 12345/);
  const size = (await t.throwsAsync(async () =>
    ctx.launchMany(packLaunches([launch(quick, i32(0)), launch(quick, new Uint8Array(8))], IDS), 2),
  )) as Error & { index: number };
  t.is(size.index, 1);
  t.regex(size.message, /8 parameter bytes for a kernel taking 4/);
  const stream = (await t.throwsAsync(async () => ctx.launchMany(packLaunches([launch(quick, i32(0), 999)], IDS), 1))) as Error & {
    index: number;
  };
  t.is(stream.index, 0);
  t.regex(stream.message, /no stream 999/);

  // Records shorter than the count says.
  const two = packLaunches([launch(quick, i32(0)), launch(quick, i32(0))], IDS);
  const cut = (await t.throwsAsync(async () => ctx.launchMany(two, 3))) as Error & { index: number };
  t.is(cut.index, 2);
  t.regex(cut.message, /launch records truncated/);
  const short = (await t.throwsAsync(async () => ctx.launchMany(two.subarray(0, two.length - 1), 2))) as Error & { index: number };
  t.is(short.index, 1);
  t.regex(short.message, /launch record parameters truncated/);
  await ctx.synchronize();
});
