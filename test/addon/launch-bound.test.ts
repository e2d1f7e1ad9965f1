// Launches on the JS thread stay bounded (addon/src/cuda_exec.h,
// kInlineLaunchBound): with inline calls on (a session's worker), a launch
// runs on the JS thread only while fewer than INLINE_LAUNCH_BOUND launches
// are not yet known done, so a full launch queue behind a kernel that runs
// on (the fake driver's: FAKE_QUEUE_DEPTH, 512, behind hold()) blocks the
// context thread, never the JS thread, which must stay free to take the
// session's close. A finished context synchronize gives the room back (so
// does a wait for the NULL stream where the context has no other); short posted batches (INLINE_BATCH_LAUNCHES) run inline, longer
// ones on the context thread.
import test from 'ava';
import type { LaunchDesc } from '../../backend/src/qcuda/provider';
import { packLaunches, type LaunchIds } from '../../backend/src/qcuda/providers/cuda/launch-record';
import { fakeCuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();
const IDS: LaunchIds = { func: (f) => f as number, stream: () => 0 };
const HOLD_MS = 1500;
/** More launches than the fake driver's queue holds behind a running kernel (FAKE_QUEUE_DEPTH). */
const LAUNCHES = 700;

async function kernels() {
  const ctx = await n.openContext(0, 0, false);
  const m = await ctx.moduleLoad(text('// hold(ms) and nop()'));
  return { ctx, hold: (await ctx.functionGet(m.id, 'hold', 256)).id, nop: (await ctx.functionGet(m.id, 'nop', 256)).id };
}

const inlineRuns = () => n.stats().inlineRuns;

test.serial('launches beyond the bound go to the context thread: a full launch queue never blocks the JS thread', async (t) => {
  t.is(n.INLINE_LAUNCH_BOUND, 256);
  n.setInlineCalls(true);
  const { ctx, hold, nop } = await kernels();
  t.teardown(async () => {
    n.setInlineCalls(false);
    await ctx.destroy();
  });
  await ctx.synchronize(); // nothing outstanding from the set-up
  const r0 = inlineRuns();
  const t0 = Date.now();
  const launches = [ctx.launch(hold, ONE, ONE, 0, 0, i32(HOLD_MS))];
  for (let i = 1; i < LAUNCHES; i++) launches.push(ctx.launch(nop, ONE, ONE, 0, 0, new Uint8Array(0)));
  const issued = Date.now() - t0;
  t.is(inlineRuns() - r0, n.INLINE_LAUNCH_BOUND, 'the first INLINE_LAUNCH_BOUND launches ran on the JS thread, no more');
  t.true(
    issued < HOLD_MS / 3,
    `${LAUNCHES} launches issued in ${issued} ms, while the queue behind hold(${HOLD_MS}) filled (the JS thread did not wait for it)`,
  );
  const settled = await Promise.allSettled(launches);
  t.deepEqual(
    settled.filter((s) => s.status !== 'fulfilled'),
    [],
    'every launch was enqueued',
  );
  t.true(Date.now() - t0 >= HOLD_MS - 50, "the launches past the queue's depth waited for the kernel, on the context thread");

  // A finished wait for the NULL stream of a context with no other stream gives the room back.
  await ctx.streamSynchronize(0);
  const r1 = inlineRuns();
  await ctx.launch(nop, ONE, ONE, 0, 0, new Uint8Array(0));
  t.is(inlineRuns() - r1, 1, 'after the wait, a launch runs on the JS thread again');
});

test.serial('with streams of its own, only a context synchronize gives the room back', async (t) => {
  n.setInlineCalls(true);
  const { ctx, nop } = await kernels();
  t.teardown(async () => {
    n.setInlineCalls(false);
    await ctx.destroy();
  });
  await ctx.streamCreate(0, 0);
  await ctx.synchronize();
  const launch = () => ctx.launch(nop, ONE, ONE, 0, 0, new Uint8Array(0));
  for (let i = 0; i < n.INLINE_LAUNCH_BOUND; i++) await launch();
  await ctx.streamSynchronize(0); // another stream may still have work: proves nothing of the whole
  let r = inlineRuns();
  await launch();
  t.is(inlineRuns() - r, 0, 'past the bound after a wait for the NULL stream: on the context thread');
  await ctx.synchronize();
  r = inlineRuns();
  await launch();
  t.is(inlineRuns() - r, 1, 'after a context synchronize: on the JS thread');
});

test.serial(
  'posted batches: up to INLINE_BATCH_LAUNCHES launches run on the JS thread, longer batches on the context thread',
  async (t) => {
    t.is(n.INLINE_BATCH_LAUNCHES, 8);
    n.setInlineCalls(true);
    const { ctx, nop } = await kernels();
    t.teardown(async () => {
      n.setInlineCalls(false);
      await ctx.destroy();
    });
    const one: LaunchDesc = { f: nop, stream: undefined, grid: [1, 1, 1], block: [1, 1, 1], sharedMem: 0, params: new Uint8Array(0) };
    const batch = (count: number) =>
      packLaunches(
        Array.from({ length: count }, () => one),
        IDS,
      );
    await ctx.synchronize();
    let r = inlineRuns();
    await ctx.launchMany(batch(n.INLINE_BATCH_LAUNCHES), n.INLINE_BATCH_LAUNCHES);
    t.is(inlineRuns() - r, 1, 'a short batch ran on the JS thread');
    r = inlineRuns();
    await ctx.launchMany(batch(n.INLINE_BATCH_LAUNCHES + 1), n.INLINE_BATCH_LAUNCHES + 1);
    t.is(inlineRuns() - r, 0, 'a longer one on the context thread');
    n.setInlineCalls(false);
    r = inlineRuns();
    await ctx.launchMany(batch(1), 1);
    t.is(inlineRuns() - r, 0, 'with inline calls off, none on the JS thread');
  },
);
