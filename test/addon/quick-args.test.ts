// The addon's quick argument forms (native-cuda.ts: packSegs, packDim3), on
// the fake driver, whose device memory is host memory and whose copies are
// memcpy: a copy's segments as [addr, len] pairs in a Float64Array move the
// same bytes as the {addr, len} objects; a launch's grid and block as
// Uint32Arrays of 3 launch as arrays do; values that are not whole numbers
// in range, or of the wrong shape, are refused before any driver call.
import test from 'ava';
import { packDim3, packSegs } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { native } from '../../backend/src/sys/native';
import { fakeCuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();

function hostBuffer(t: { teardown(f: () => void): void }, len: number): { addr: bigint; bytes: Uint8Array } {
  const fd = native.memfdCreate('qcuda-quick-args', len);
  const m = new native.Mapping(fd, len, 0);
  native.close(fd);
  t.teardown(() => m.unmap());
  return { addr: m.address, bytes: new Uint8Array(m.window(0, len)) };
}

test('a copy given [addr, len] pairs moves the same bytes as one given objects, pieces in order', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const src = hostBuffer(t, 8192);
  const back = hostBuffer(t, 8192);
  src.bytes.forEach((_, i) => (src.bytes[i] = (i * 7 + 3) & 0xff));
  const dev = await ctx.malloc(8192n);
  // Three pieces of the source, out of their order in memory: the device gets them one after another.
  const segs = [
    { addr: src.addr + 4096n, len: 100 },
    { addr: src.addr, len: 0 }, // empty: left out
    { addr: src.addr + 10n, len: 50 },
  ];
  const packed = packSegs(segs);
  t.true(packed instanceof Float64Array);
  t.deepEqual([...(packed as Float64Array)], [Number(src.addr + 4096n), 100, Number(src.addr), 0, Number(src.addr + 10n), 50]);
  await ctx.copyHtoD(dev, packed, 0);
  await ctx.copyDtoH([{ addr: back.addr, len: 150 }], dev, 0);
  t.deepEqual([...back.bytes.subarray(0, 100)], [...src.bytes.subarray(4096, 4196)]);
  t.deepEqual([...back.bytes.subarray(100, 150)], [...src.bytes.subarray(10, 60)]);
  // And back through the quick form too.
  back.bytes.fill(0);
  await ctx.copyDtoH(packSegs([{ addr: back.addr + 1000n, len: 150 }]), dev, 0);
  t.deepEqual([...back.bytes.subarray(1000, 1150)], [...src.bytes.subarray(4096, 4196), ...src.bytes.subarray(10, 60)]);
});

test('[addr, len] pairs that are not whole numbers below 2^53, or not pairs, are refused', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const dev = await ctx.malloc(64n);
  const buf = hostBuffer(t, 4096);
  const a = Number(buf.addr);
  for (const [bad, why] of [
    [[a, 4, 0], /pairs/],
    [[a + 0.5, 4], /non-negative integer/],
    [[-4096, 4], /non-negative integer/],
    [[a, NaN], /non-negative integer/],
    [[2 ** 53, 4], /non-negative integer/],
    [[a, Infinity], /non-negative integer/],
  ] as const) {
    t.throws(() => ctx.copyHtoD(dev, new Float64Array(bad), 0), { message: why }, JSON.stringify(bad));
  }
  // An address no double holds exactly stays an object, which the addon checks as before.
  const far = [{ addr: 1n << 60n, len: 4 }];
  t.is(packSegs(far), far);
  t.is(packSegs([{ addr: BigInt(Number.MAX_SAFE_INTEGER) + 1n, len: 4 }]).constructor, Array);
});

test('a launch given Uint32Arrays of 3 runs as one given arrays; other shapes and values are refused', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const m = await ctx.moduleLoad(text('// hold(ms)'));
  const hold = (await ctx.functionGet(m.id, 'hold', 256)).id;
  const grid = packDim3(0, [2, 3, 4]);
  const block = packDim3(1, [5, 6, 7]);
  t.true(grid instanceof Uint32Array && block instanceof Uint32Array);
  t.deepEqual([...grid], [2, 3, 4]);
  t.deepEqual([...block], [5, 6, 7]);
  // hold(150) keeps the context busy: the launch reached the driver with its parameters.
  const t0 = Date.now();
  await ctx.launch(hold, grid, block, 0, 0, i32(150));
  await ctx.synchronize();
  t.true(Date.now() - t0 >= 120);
  await ctx.launch(hold, ONE, ONE, 0, 0, i32(0));
  t.throws(() => ctx.launch(hold, new Uint32Array(2), ONE, 0, 0, i32(0)), { message: /grid must be 3 values/ });
  t.throws(() => ctx.launch(hold, ONE, new Uint32Array(4), 0, 0, i32(0)), { message: /block must be 3 values/ });
  // Not u32s: handed on as given, and refused there.
  const neg = [1, -1, 1];
  t.is(packDim3(0, neg), neg);
  t.throws(() => ctx.launch(hold, packDim3(0, neg), ONE, 0, 0, i32(0)), { message: /grid/ });
  t.is(packDim3(1, [1, 2 ** 32, 1]).constructor, Array);
});
