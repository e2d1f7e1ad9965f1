// The calls of a round trip answer at once (addon: Context::SubmitNow;
// native-cuda.ts: Now): a synchronize, a query, an event record, a small
// copy or a launch that finishes on the JS thread returns its value, or
// throws its error, with no promise; one that must wait (a kernel still
// running, the context thread busy) returns a promise as before, and keeps
// its place in the context's order.
import test, { type ExecutionContext } from 'ava';
import type { CudaContextNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { native } from '../../backend/src/sys/native';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';
import { fakeCuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();
const NONE = new Uint8Array(0);

/** A context as a session's worker has it: ordered calls and short waits on the JS thread. */
async function context(t: ExecutionContext) {
  n.setInlineCalls(true);
  // Long enough that a loaded CI machine's preemption does not outlast an
  // idle wait's poll (50 us did once); far below the 300 ms hold below.
  n.setInlineWait(2000);
  t.teardown(() => {
    n.setInlineCalls(false);
    n.setInlineWait(0);
  });
  const ctx = await n.openContext(0, 0, false);
  const m = await ctx.moduleLoad(text('// hold(ms) and nop()'));
  return { ctx, hold: (await ctx.functionGet(m.id, 'hold', 256)).id, nop: (await ctx.functionGet(m.id, 'nop', 256)).id };
}

/** A page of host memory the driver may copy to and from at once (registered: pinned), its first `bytes` as a segment. */
async function pinned(t: ExecutionContext, ctx: CudaContextNative, bytes: number) {
  const page = new GuestMemory([{ gpa: 0n, size: 4096 }]);
  const m = new native.Mapping(page.fd.value, 4096, 0);
  await ctx.hostRegister(m.address, 4096n, 0);
  t.teardown(async () => {
    await ctx.hostUnregister(m.address);
    m.unmap();
    page.close();
  });
  return { seg: [{ addr: m.address, len: bytes }], view: new Uint8Array(m.window(0, bytes)) };
}

test.serial('finished on the JS thread: the value itself, no promise', async (t) => {
  const { ctx, nop } = await context(t);
  t.teardown(() => ctx.destroy());
  const ev = await ctx.eventCreate(0);
  t.is(ctx.synchronize(), undefined, 'an idle synchronize');
  t.is(ctx.streamQuery(0), true, 'a query of an idle stream');
  t.is(ctx.eventRecord(ev, 0), undefined, 'an event record');
  t.is(ctx.eventQuery(ev), true, 'a query of a passed event');
  t.is(ctx.eventSynchronize(ev), undefined);
  t.is(ctx.streamSynchronize(0), undefined);
  t.is(ctx.launch(nop, ONE, ONE, 0, 0, NONE), undefined, 'a launch');
  t.is(ctx.synchronize(), undefined, 'a synchronize after a kernel that has ended');
  const host = await pinned(t, ctx, 64);
  const dev = await ctx.malloc(64n);
  host.view.set([1, 2, 3, 4]);
  t.is(ctx.copyHtoD(dev, host.seg, 0), undefined, 'a copy from pinned memory');
  host.view.fill(0);
  t.is(ctx.copyDtoH(host.seg, dev, 0), undefined);
  t.deepEqual([...host.view.subarray(0, 4)], [1, 2, 3, 4], 'the bytes made the round trip before the calls returned');
});

test.serial('failed on the JS thread: thrown at once, the error a promise would have rejected with', async (t) => {
  const { ctx } = await context(t);
  t.teardown(() => ctx.destroy());
  const now = t.throws(() => ctx.streamSynchronize(999)) as Error & { code: number; cuResult: number };
  const destroy = ctx.streamDestroy(999); // a call of the context thread: always a promise
  t.true(destroy instanceof Promise);
  const queued = (await t.throwsAsync(destroy as Promise<void>)) as Error & { code: number; cuResult: number };
  t.regex(now.message, /no stream 999/);
  t.is(now.constructor, queued.constructor);
  t.is(now.code, queued.code);
  t.is(now.cuResult, queued.cuResult);
  t.throws(() => ctx.eventQuery(4242), { message: /no event 4242/ });
});

test.serial('a call that must wait returns a promise, settled once it is done and in order', async (t) => {
  const { ctx, hold, nop } = await context(t);
  t.teardown(() => ctx.destroy());
  t.is(ctx.launch(hold, ONE, ONE, 0, 0, i32(300)), undefined, 'the launch itself is enqueued at once');
  t.is(ctx.streamQuery(0), false, 'not done yet, said at once');
  const t0 = Date.now();
  const sync = ctx.synchronize();
  t.true(sync instanceof Promise, 'the synchronize waits: a promise');
  await sync;
  t.true(Date.now() - t0 >= 250, 'it settled once the kernel had ended');
  // Behind a context thread that is busy (launches past the fake driver's
  // queue depth, FAKE_QUEUE_DEPTH 512, wait there for the hold to end), a
  // call is queued there: a promise, settled in its place.
  const host = await pinned(t, ctx, 16);
  const dst = await ctx.malloc(16n);
  n.setInlineCalls(false); // launches go to the context thread
  const order: string[] = [];
  const launches = [ctx.launch(hold, ONE, ONE, 0, 0, i32(300))];
  for (let i = 0; i < 600; i++) launches.push(ctx.launch(nop, ONE, ONE, 0, 0, NONE));
  const copy = ctx.copyHtoD(dst, host.seg, 0);
  t.true(copy instanceof Promise, 'queued behind the context thread: a promise');
  await Promise.all([
    (launches[600] as Promise<void>).then(() => order.push('launches')),
    (copy as Promise<void>).then(() => order.push('copy')),
  ]);
  t.deepEqual(order, ['launches', 'copy']);
  n.setInlineCalls(true);
  await ctx.synchronize(); // the launches are known done: room under INLINE_LAUNCH_BOUND again
  t.is(ctx.launch(nop, ONE, ONE, 0, 0, NONE), undefined, 'once the context thread is idle, at once again');
});
