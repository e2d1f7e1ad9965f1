// The cuda addon's stream priority calls and the persisting-L2 reset on the
// fake driver (test/qcuda/fixtures/fakecuda.c: priorities 0 down to -5, a
// stream keeps the one it was created with, clamped; the legacy NULL stream
// has 0): streamPriorityRange, streamGetPriority (ids as the other stream
// calls take them) and resetPersistingL2Cache.
import test from 'ava';
import { fakeCuda } from './fake-driver';
import { promised } from '../helpers';

const n = fakeCuda();

test("streamPriorityRange is the context's: least 0, greatest -5", async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  t.deepEqual(await ctx.streamPriorityRange(), { least: 0, greatest: -5 });
});

test("streamGetPriority: a stream's own priority (clamped by the driver), 0 for the NULL stream, a stale id refused", async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const high = await ctx.streamCreate(0, -3);
  const low = await ctx.streamCreate(1, 7);
  const highest = await ctx.streamCreate(0, -100);
  t.is(await ctx.streamGetPriority(high), -3);
  t.is(await ctx.streamGetPriority(low), 0);
  t.is(await ctx.streamGetPriority(highest), -5);
  t.is(await ctx.streamGetPriority(0), 0, 'the legacy NULL stream');
  await ctx.streamDestroy(high);
  const e = await t.throwsAsync(async () => ctx.streamGetPriority(high));
  t.like(e as Error & { code: number; cuResult: number }, { code: 400, cuResult: 400 });
  t.regex(e!.message, /no stream \d+ in this context/);
  t.throws(() => ctx.streamGetPriority(-1), { instanceOf: RangeError }, 'arguments are checked before a job is made');
});

test('resetPersistingL2Cache resolves on the context thread, in order with the work queued there', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  const order: string[] = [];
  const a = ctx.malloc(16n).then(() => order.push('malloc'));
  const b = promised(() => ctx.resetPersistingL2Cache()).then((v) => order.push(`reset ${String(v)}`));
  await Promise.all([a, b]);
  t.deepEqual(order, ['malloc', 'reset undefined']);
  await ctx.destroy();
  const e = await t.throwsAsync(async () => ctx.resetPersistingL2Cache());
  t.like(e as Error & { cuResult: number }, { cuResult: 709 });
  await t.throwsAsync(async () => ctx.streamPriorityRange(), { message: /context destroyed/ });
});
