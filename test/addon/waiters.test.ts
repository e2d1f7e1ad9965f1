// The cuda addon's waiter threads (addon/src/cuda_exec.h, security review
// finding 11) on the fake driver: blocking waits run on a pool of at most
// setWaiterLimit() threads per process; more waits than that queue and all
// complete; lowering the limit ends idle threads above it; and where no
// thread can be created (here: an address-space limit set on a running
// process), waits go on with the threads there are, or fail with
// cudaErrorOperatingSystem where there are none, instead of the process
// ending in std::terminate.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import { ADDON, fakeCuda, fakeLibcuda, i32, ONE, text } from './fake-driver';

const n = fakeCuda();
const HOLD_MS = 800;

async function holdingContext() {
  const ctx = await n.openContext(0, 0, false);
  const m = await ctx.moduleLoad(text('// a module with hold()'));
  const hold = await ctx.functionGet(m.id, 'hold', 256);
  return { ctx, hold };
}

test.serial('many blocking waits at once never make more waiter threads than the limit, and all of them complete', async (t) => {
  t.is(n.DEFAULT_WAITER_LIMIT, 64);
  t.is(n.stats().waiterLimit, 64, 'the default');
  n.setWaiterLimit(8);
  t.is(n.stats().waiterLimit, 8);
  const { ctx, hold } = await holdingContext();
  const a = await holdingContext(); // a second context shares the process's pool
  try {
    const streams = await Promise.all([0, 1, 2].map(() => ctx.streamCreate(0, 0)));
    const events = await Promise.all([0, 1, 2].map(() => ctx.eventCreate(0)));
    const t0 = Date.now();
    await ctx.launch(hold.id, ONE, ONE, 0, 0, i32(HOLD_MS)); // every wait of ctx blocks until it ends
    await a.ctx.launch(a.hold.id, ONE, ONE, 0, 0, i32(HOLD_MS));
    for (const e of events) await ctx.eventRecord(e, 0);
    let most = 0;
    let queued = 0;
    const poll = setInterval(() => {
      const s = n.stats();
      most = Math.max(most, s.waiterThreads);
      queued = Math.max(queued, s.waiterQueued);
    }, 2);
    const waits: (void | Promise<void>)[] = [];
    for (let i = 0; i < 300; i++) {
      const x = i % 2 ? ctx : a.ctx;
      switch (i % 5) {
        case 0:
          waits.push(x.synchronize());
          break;
        case 1:
          waits.push(ctx.streamSynchronize(streams[i % 3]));
          break;
        case 2:
          waits.push(ctx.eventSynchronize(events[i % 3]));
          break;
        case 3:
          waits.push(x.streamSynchronize(0));
          break;
        default:
          waits.push(a.ctx.synchronize());
      }
    }
    const settled = await Promise.allSettled(waits);
    clearInterval(poll);
    const took = Date.now() - t0;
    t.deepEqual(
      settled.filter((r) => r.status !== 'fulfilled'),
      [],
      'every wait resolved',
    );
    t.true(took >= HOLD_MS - 50, `the waits waited for the kernel (${took} ms)`);
    const s = n.stats();
    t.log(`300 waits: at most ${most} threads seen, peak ${s.waiterPeak}, up to ${queued} waits queued, ${took} ms`);
    t.true(s.waiterPeak <= 8, `peak ${s.waiterPeak}`);
    t.is(s.waiterPeak, 8, 'the pool did grow to the limit');
    t.true(queued > 0, 'waits queued beyond the limit');
    t.is(s.waiterQueued, 0);
    t.is(s.waiterSpawnFailures, 0);
    t.is(s.pending, 0);
  } finally {
    await ctx.destroy();
    await a.ctx.destroy();
  }
});

test.serial('lowering the limit ends idle threads above it; waits still complete under the new one', async (t) => {
  n.setWaiterLimit(8);
  const { ctx, hold } = await holdingContext();
  try {
    await ctx.launch(hold.id, ONE, ONE, 0, 0, i32(300));
    await Promise.all(Array.from({ length: 16 }, () => ctx.synchronize()));
    t.true(n.stats().waiterThreads > 2, `${n.stats().waiterThreads} threads`);
    n.setWaiterLimit(2);
    const t0 = Date.now();
    while (n.stats().waiterThreads > 2 && Date.now() - t0 < 5000) await new Promise((r) => setTimeout(r, 10));
    t.is(n.stats().waiterThreads, 2, 'idle threads above the new limit ended');
    await ctx.launch(hold.id, ONE, ONE, 0, 0, i32(100));
    let most = 0;
    const poll = setInterval(() => {
      most = Math.max(most, n.stats().waiterThreads);
    }, 2);
    await Promise.all(Array.from({ length: 20 }, () => ctx.synchronize()));
    clearInterval(poll);
    t.true(most <= 2, `at most ${most} threads`);
  } finally {
    n.setWaiterLimit(n.DEFAULT_WAITER_LIMIT);
    await ctx.destroy();
  }
});

test('setWaiterLimit takes integers from 1 to 4096', (t) => {
  for (const bad of [0, -1, 1.5, 4097, Number.NaN]) t.throws(() => n.setWaiterLimit(bad), { instanceOf: RangeError }, String(bad));
  t.throws(() => (n.setWaiterLimit as (x: unknown) => void)('8'), { instanceOf: RangeError });
});

// In a child: once it has two waiter threads, its address space is limited to
// what it uses plus 256 KiB (less than a thread's stack: 8 MiB by default), so
// no thread can be created any more. Then: waits beyond those two queue and complete, a new
// context (which needs a thread of its own) is refused with 304. A second
// child is limited before it has any waiter thread: its waits fail with 304.
const CHILD = `
const { execFileSync } = require('child_process');
const fs = require('fs');
const n = require(process.env.ADDON);
const one = [1, 1, 1];
const i32 = (x) => new Uint8Array(new Int32Array([x]).buffer);
const code = (p) => p.then(() => 'ok', (e) => e.code + ' ' + e.message);
function limitAddressSpace() {
  const vm = Number(/VmSize:\\s+(\\d+) kB/.exec(fs.readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
  execFileSync('prlimit', ['--pid', String(process.pid), '--as=' + (vm + (256 << 10))]); // a stack takes more
}
(async () => {
  const r = {};
  const ctx = await n.openContext(0, 0, false);
  const m = await ctx.moduleLoad(new Uint8Array(Buffer.from('// hold')));
  const hold = await ctx.functionGet(m.id, 'hold', 256);
  if (process.env.WARM === '1') {
    await ctx.launch(hold.id, one, one, 0, 0, i32(300));
    await Promise.all([ctx.synchronize(), ctx.synchronize()]);
    r.before = n.stats().waiterThreads;
  }
  limitAddressSpace();
  await ctx.launch(hold.id, one, one, 0, 0, i32(200));
  const waits = [];
  for (let i = 0; i < 40; i++) waits.push(code(ctx.synchronize()));
  r.waits = [...new Set(await Promise.all(waits))];
  r.openContext = await code(n.openContext(0, 0, false));
  r.probeAsync = await code(n.probeAsync());
  const s = n.stats();
  r.threads = s.waiterThreads;
  r.failures = s.waiterSpawnFailures > 0;
  r.pending = s.pending;
  process.stdout.write(JSON.stringify(r) + '\\n');
})().catch((e) => { console.error(e); process.exit(1); });
`;

function child(warm: boolean) {
  const c = spawnSync(process.execPath, ['-e', CHILD], {
    // Without NODE_V8_COVERAGE (make test's coverage run): V8 writing its
    // coverage needs threads and memory this child is made to lack.
    env: { ...process.env, NODE_V8_COVERAGE: undefined, ADDON, QCUDA_LIBCUDA: fakeLibcuda(), WARM: warm ? '1' : '0' },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return c;
}

let prlimit = true;
try {
  execFileSync('prlimit', ['--version'], { stdio: 'ignore' });
} catch {
  prlimit = false;
}

(prlimit ? test : test.skip)(
  'where no thread can be created: waits go on with the threads there are, and fail with cudaErrorOperatingSystem where there are none',
  (t) => {
    const warm = child(true);
    t.is(warm.status, 0, warm.stderr);
    const r = JSON.parse(warm.stdout);
    t.log('with 2 threads:', r);
    t.is(r.before, 2);
    t.deepEqual(r.waits, ['ok'], 'all 40 waits completed on the 2 threads there were');
    t.is(r.threads, 2);
    t.true(r.failures, 'thread creation did fail');
    t.regex(r.openContext, /^304 qcuda: no thread could be created for the context/);
    t.is(r.probeAsync, 'ok', 'a wait without a context runs on the threads there are too');
    t.is(r.pending, 0);

    const cold = child(false);
    t.is(cold.status, 0, cold.stderr);
    const c = JSON.parse(cold.stdout);
    t.log('with no thread:', c);
    t.is(c.waits.length, 1);
    t.regex(c.waits[0], /^304 qcuda: no thread could be created to wait for the GPU/);
    t.regex(c.probeAsync, /^304 /);
    t.is(c.threads, 0);
    t.is(c.pending, 0);
  },
);

// A session's worker polls a short wait on its own thread (setInlineWait):
// a wait whose work is done ends there, with no waiter thread; one still
// running after the poll goes to the pool as before and still completes.
test.serial('with an inline wait, a wait that is over ends on the JS thread; a longer one is handed to the pool', async (t) => {
  const { ctx, hold } = await holdingContext();
  try {
    t.throws(() => n.setInlineWait(-1), { instanceOf: RangeError });
    n.setInlineWait(200);
    // A call runs on this thread only while the context thread is idle, and
    // that thread hands a result back before it counts itself idle: a call
    // made as soon as the previous one answered may still find it busy.
    const quiet = async () => {
      while (ctx.busy !== 0) await new Promise((r) => setImmediate(r));
    };
    const ev = await ctx.eventCreate(0);
    await ctx.eventRecord(ev, 0);
    await quiet();
    const before = n.stats();
    await ctx.synchronize();
    await quiet();
    await ctx.streamSynchronize(0);
    await quiet();
    await ctx.eventSynchronize(ev);
    const idle = n.stats();
    t.is(idle.inlineWaitsDone - before.inlineWaitsDone, 3, 'three waits on idle work ended inline');
    t.is(idle.inlineWaitsHandedOn, before.inlineWaitsHandedOn);
    t.true(idle.inlinePollNs >= before.inlinePollNs);
    await ctx.launch(hold.id, ONE, ONE, 0, 0, i32(300));
    const t0 = Date.now();
    await ctx.synchronize();
    t.true(Date.now() - t0 >= 250, 'the synchronize still waited for the kernel');
    t.is(n.stats().inlineWaitsHandedOn - idle.inlineWaitsHandedOn, 1, 'the long wait went to the pool after its poll');
  } finally {
    n.setInlineWait(0);
    await ctx.destroy();
  }
});

// A context's synchronize knows its work is done from cuStreamQuery on each
// of its streams, queried right after the call: a later call may destroy one
// of them, so such a wait is never parked for the poll loop's later turns
// (where a stream wait, which waits on an event of its own, is).
test.serial(
  'a synchronize still running after its inline poll goes to the pool, not to the poll loop; a stream destroyed meanwhile changes nothing',
  async (t) => {
    const { ctx, hold } = await holdingContext();
    try {
      n.setInlineWait(50);
      n.pollWaits(false); // a poll loop's first turn: waits begun on this thread are kept for its turns from now on
      const s = await ctx.streamCreate(0, 0);
      // 500 ms: long enough that both waits begin while it runs on a loaded machine (150 ms was not, once, with every suite at once).
      await ctx.launch(hold.id, ONE, ONE, 0, s, i32(500));
      // The waits go inline only while the context thread is idle, which it
      // counts itself only after handing the launch's result back.
      while (ctx.busy !== 0) await new Promise((r) => setImmediate(r));
      const before = n.stats();
      const sync = ctx.synchronize();
      const streamWait = ctx.streamSynchronize(s);
      t.is(n.stats().pending - before.pending, 2, 'both waits are in flight');
      t.is(n.pendingJobs(), before.pending + 2);
      await ctx.streamDestroy(s);
      let settled = 0;
      const t0 = Date.now();
      while (Date.now() - t0 < 2000 && settled === 0) {
        settled += n.pollWaits(false);
        await new Promise((r) => setTimeout(r, 5));
      }
      await sync;
      await streamWait;
      const after = n.stats();
      t.is(after.inlineWaitsHandedOn - before.inlineWaitsHandedOn, 2, 'both outlasted their inline poll');
      t.is(settled, 1, 'the poll loop settled the stream wait, and only it: the synchronize went to a waiter thread');
      t.is(after.parkedWaitsDone - before.parkedWaitsDone, 1);
      t.is(n.pendingJobs(), 0);
    } finally {
      n.pollWaits(true);
      n.setInlineWait(0);
      await ctx.destroy();
    }
  },
);
