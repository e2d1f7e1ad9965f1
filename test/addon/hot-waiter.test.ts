// The hot waiter (addon/src/cuda_hot_waiter.cc; setHotWaiter, as a
// session's worker has it): while short waits keep coming, a thread kept
// awake runs each in the driver's synchronize while the JS thread spins for
// the inline wait; what finishes by then is answered at once, what does not
// goes on there and settles its promise later, with the JS thread free
// meanwhile. Errors come back as the waiter threads' do, a context destroyed
// while such a wait runs waits for it, and once waits stop the thread
// sleeps (no CPU for an idle process). On a loaded host the thread may not
// run when a wait is offered: that wait is polled on the JS thread, as
// without it, so the tests that need one on the hot waiter try again.
import test, { type ExecutionContext } from 'ava';
import type { CudaContextNative } from '../../backend/src/native-cuda';
import { promised } from '../helpers';
import { fakeCuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();
const NONE = new Uint8Array(0);

async function context(t: ExecutionContext) {
  n.setInlineCalls(true);
  n.setInlineWait(50);
  n.setHotWaiter(true);
  t.teardown(() => {
    n.setHotWaiter(false);
    n.setInlineCalls(false);
    n.setInlineWait(0);
  });
  const ctx = await n.openContext(0, 0, false);
  const m = await ctx.moduleLoad(text('// hold(ms), nop() and boom()'));
  const fn = async (name: string) => (await ctx.functionGet(m.id, name, 256)).id;
  return { ctx, hold: await fn('hold'), nop: await fn('nop'), boom: await fn('boom') };
}

const hot = () => {
  const s = n.stats();
  return { done: s.hotWaitsDone, on: s.hotWaitsHandedOn, missed: s.hotWaitsMissed };
};

/** Synchronizes until one runs on the hot waiter: it is awake (it sleeps between tests, and takes a while to wake). */
async function warm(t: ExecutionContext, ctx: CudaContextNative): Promise<void> {
  const done = hot().done;
  const t0 = Date.now();
  while (hot().done === done) {
    if (Date.now() - t0 > 10000) return t.fail('the hot waiter never took a wait');
    ctx.synchronize();
    await new Promise((r) => setImmediate(r));
  }
}

/**
 * attempt() makes one wait; tried until that wait went on on the hot waiter
 * (took: how its counts tell), at most 20 times. Returns what it returned,
 * or threw (as a rejected promise).
 */
async function onHotWaiter(t: ExecutionContext, ctx: CudaContextNative, attempt: () => unknown, took: (before: ReturnType<typeof hot>) => boolean): Promise<{ wait: Promise<unknown> }> {
  for (let i = 0; i < 20; i++) {
    await warm(t, ctx);
    const before = hot();
    const wait = promised(attempt);
    if (took(before)) return { wait }; // in an object: an async function's result would be awaited
    await wait.catch(() => undefined);
  }
  t.fail('no wait was taken by the hot waiter in 20 tries');
  return { wait: Promise.resolve() };
}

test.serial('every short wait is answered, on the hot waiter or polled here, and counted once', async (t) => {
  const { ctx, nop } = await context(t);
  t.teardown(() => ctx.destroy());
  await warm(t, ctx);
  const before = hot();
  let now = 0;
  for (let i = 0; i < 200; i++) {
    ctx.launch(nop, ONE, ONE, 0, 0, NONE);
    const r = ctx.synchronize();
    if (r === undefined) now++;
    else await r;
  }
  const after = hot();
  t.log(`200 synchronizes: ${after.done - before.done} on the hot waiter, ${after.missed - before.missed} polled here, ${now} answered at once`);
  t.is(after.done - before.done + (after.on - before.on) + (after.missed - before.missed), 200);
  t.true(now >= after.done - before.done, 'what ran on the hot waiter was answered at once');
});

test.serial('a wait that outlasts the inline wait goes on there; its promise settles once it ends, the JS thread free meanwhile', async (t) => {
  const { ctx, hold } = await context(t);
  t.teardown(() => ctx.destroy());
  let t0 = 0;
  const { wait: sync } = await onHotWaiter(t, ctx, () => {
    ctx.launch(hold, ONE, ONE, 0, 0, i32(300));
    t0 = Date.now();
    return ctx.synchronize();
  }, (b) => hot().on === b.on + 1);
  let ticks = 0;
  const iv = setInterval(() => ticks++, 10);
  await sync;
  clearInterval(iv);
  t.true(Date.now() - t0 >= 250, 'settled once the kernel had ended');
  t.true(ticks >= 10, `the event loop turned meanwhile (${ticks} ticks)`);
  t.is(n.pendingJobs(), 0);
});

test.serial('a failed wait on the hot waiter reports its error', async (t) => {
  const { ctx, boom } = await context(t);
  t.teardown(() => ctx.destroy());
  const { wait: failed } = await onHotWaiter(t, ctx, () => {
    ctx.launch(boom, ONE, ONE, 0, 0, NONE);
    return ctx.synchronize();
  }, (b) => hot().done + hot().on === b.done + b.on + 1);
  const e = (await t.throwsAsync(failed)) as Error & { code: number; call: string };
  t.is(e.call, 'cuCtxSynchronize');
  t.true(e.code > 0);
});

test.serial('destroying a context waits for a wait still running on the hot waiter', async (t) => {
  const { ctx, hold } = await context(t);
  const { wait: sync } = await onHotWaiter(t, ctx, () => {
    ctx.launch(hold, ONE, ONE, 0, 0, i32(200));
    return ctx.synchronize();
  }, (b) => hot().on === b.on + 1);
  const t0 = Date.now();
  await ctx.destroy();
  t.true(Date.now() - t0 >= 100, 'the teardown waited for the wait');
  await sync;
  t.is(n.pendingJobs(), 0);
});

test.serial('once waits stop, the hot waiter sleeps: an idle process uses no CPU', async (t) => {
  const { ctx, nop } = await context(t);
  t.teardown(() => ctx.destroy());
  for (let i = 0; i < 50; i++) {
    ctx.launch(nop, ONE, ONE, 0, 0, NONE);
    await ctx.synchronize();
  }
  await new Promise((r) => setTimeout(r, 20)); // the thread's window (200 us) passes
  const c0 = process.cpuUsage();
  await new Promise((r) => setTimeout(r, 500));
  const c = process.cpuUsage(c0);
  const ms = (c.user + c.system) / 1000;
  t.true(ms < 50, `${ms.toFixed(1)} ms of CPU in 500 ms idle`);
});
