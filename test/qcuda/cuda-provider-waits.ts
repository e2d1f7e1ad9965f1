// The cuda provider on a GPU: long waits leave the event loop free, waits
// polled on the JS thread, several contexts at once.
import test from 'ava';
import { BusyPoll } from '../../backend/src/vhost-user';
import { cudaNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { promised } from '../helpers';
import { ctx, fill, mapRam, MiB, provider, ram, same, seg, whileTicking } from './cuda-provider-fixtures';

/** Registered in order by cuda-provider.test.ts. */
export function waitTests(): void {
  test.serial('long waits never block the event loop', async (t) => {
    const big = 1024 * MiB;
    const x = await ctx.malloc(BigInt(big));
    const s = await ctx.streamCreate(1, 0);
    const a = await ctx.eventCreate(0);
    const b = await ctx.eventCreate(0);
    await ctx.memset(x, 1, BigInt(big), s, false); // first touch
    await ctx.eventRecord(a, s);
    await ctx.memset(x, 1, BigInt(big), s, true);
    await ctx.eventRecord(b, s);
    await ctx.eventSynchronize(b);
    const per = Math.max(0.05, await ctx.eventElapsed(a, b));
    const count = Math.min(4000, Math.ceil(300 / per));
    for (const [what, run] of [
      ['streamSynchronize', () => ctx.streamSynchronize(s)],
      ['eventSynchronize', () => ctx.eventSynchronize(b)],
      ['synchronize', () => ctx.synchronize()],
      ['synchronous memset', () => ctx.memset(x, 3, BigInt(big), s, false)],
    ] as const) {
      const enqueueStart = performance.now();
      for (let i = 0; i < count; i++) void ctx.memset(x, i & 0xff, BigInt(big), s, true);
      await ctx.eventRecord(b, s);
      const enqueueMs = performance.now() - enqueueStart;
      const r = await whileTicking(run);
      t.log(
        `${what}: ${count} x 1 GiB memset (${per.toFixed(2)} ms each, enqueued in ${enqueueMs.toFixed(1)} ms), waited ${r.ms.toFixed(0)} ms, ${r.ticks} ticks, longest gap ${r.maxGap.toFixed(1)} ms`,
      );
      if (what !== 'synchronous memset') {
        t.true(r.ms >= 150, `${what} waited only ${r.ms} ms`);
        t.true(r.ticks >= r.ms / 5 / 3, `${what}: ${r.ticks} ticks in ${r.ms} ms`);
        t.true(r.maxGap < 60, `${what}: the event loop stalled ${r.maxGap} ms`);
      }
      await ctx.synchronize();
    }
    // a big copy from memory that is not registered (the driver stages it)
    const N = 1024 * MiB;
    const cold = mapRam(N, (f) => t.teardown(f));
    cold.view.fill(3); // populate the pages first: page faults are not what is measured here
    fill(cold.view.subarray(0, 64 * MiB), 3);
    const r = await whileTicking(() => ctx.copyToDevice(x, [seg(cold, 0, N)], undefined));
    t.log(
      `1 GiB from unregistered memory: ${r.ms.toFixed(0)} ms (${(N / r.ms / 1e6).toFixed(1)} GB/s), ${r.ticks} ticks, longest gap ${r.maxGap.toFixed(1)} ms`,
    );
    t.true(r.maxGap < 60, `the event loop stalled ${r.maxGap} ms`);
    await ctx.copyFromDevice([seg(ram, 0, 64 * MiB)], x, undefined);
    t.true(same(ram.view.subarray(0, 64 * MiB), cold.view.subarray(0, 64 * MiB)));
    t.true(cudaNative().stats().waiterThreads >= 1);
    await ctx.streamDestroy(s);
    await ctx.eventDestroy(a);
    await ctx.eventDestroy(b);
    await ctx.free(x);
  });

  test.serial(
    "waits polled on the JS thread (pollWith): copies settle on the poll loop's turns, not on waiter threads; a longer wait is handed on at the window's end and still settles",
    async (t) => {
      const poll = new BusyPoll(50);
      provider.pollWith(poll);
      const n = cudaNative();
      const dev = await ctx.malloc(BigInt(16 * MiB));
      const before = n.stats();
      // 64 copies of 1 MiB in flight, both ways, each checked afterwards.
      for (let round = 0; round < 4; round++) {
        poll.touch();
        fill(ram.view.subarray(0, 16 * MiB), 100 + round);
        await Promise.all(
          Array.from({ length: 16 }, (_, i) => ctx.copyToDevice(dev + BigInt(i * MiB), [seg(ram, i * MiB, MiB)], undefined)),
        );
        poll.touch();
        ram.view.fill(0, 32 * MiB, 48 * MiB);
        await Promise.all(
          Array.from({ length: 16 }, (_, i) => ctx.copyFromDevice([seg(ram, 32 * MiB + i * MiB, MiB)], dev + BigInt(i * MiB), undefined)),
        );
        t.true(same(ram.view.subarray(0, 16 * MiB), ram.view.subarray(32 * MiB, 48 * MiB)), `round ${round}: the bytes came back`);
      }
      const mid = n.stats();
      const polled = mid.parkedWaitsDone - before.parkedWaitsDone;
      t.log(
        `128 copies: ${polled} waits settled by the poll loop, ${mid.parkedWaitsHandedOn - before.parkedWaitsHandedOn} handed on, ${mid.inlineWaitsDone - before.inlineWaitsDone} inline`,
      );
      t.true(polled >= 96, `only ${polled} of 128 waits were settled by the poll loop`);
      // A wait of tens of ms (200 memsets of 1 GiB, about 0.3 ms each on an H100): the 50 us window ends
      // long before it, hands it on, and it settles all the same. (A stream's wait: a context's
      // synchronize is never left to the poll loop, since it queries streams a later call may destroy.)
      const big = 1024 * MiB;
      const x = await ctx.malloc(BigInt(big));
      await ctx.memset(x, 1, BigInt(big), undefined, false);
      for (let i = 0; i < 200; i++) void ctx.memset(x, i, BigInt(big), undefined, true);
      poll.touch();
      const r = await whileTicking(() => ctx.streamSynchronize(undefined));
      const after = n.stats();
      t.log(`a stream synchronize of ${r.ms.toFixed(1)} ms`);
      t.true(r.ms >= 5, `the synchronize took ${r.ms} ms`);
      t.true(after.parkedWaitsHandedOn > mid.parkedWaitsHandedOn, 'the long wait went to a waiter thread when the window ended');
      t.is(n.stats().pending, 0, 'nothing is left unsettled');
      await ctx.free(x);
      await ctx.free(dev);
      // The loop stops polling (no kept check keeps it turning) once the window passes idle.
      await new Promise((res) => setTimeout(res, 20));
      const idle = n.stats();
      await new Promise((res) => setTimeout(res, 50));
      t.is(n.stats().parkedWaitsDone, idle.parkedWaitsDone);
    },
  );

  test.serial('contexts: several at once, each with its own memory; destroy waits for running waits', async (t) => {
    const info0 = await provider.primary.memGetInfo();
    const cs = await Promise.all([0, 1, 2].map(() => provider.openContext(0)));
    const ptrs = await Promise.all(cs.map((c) => c.malloc(64n * BigInt(MiB))));
    await Promise.all(cs.map((c, i) => c.memset(ptrs[i], i + 1, 64n * BigInt(MiB), undefined, false)));
    for (let i = 0; i < 3; i++) {
      await cs[i].copyFromDevice([seg(ram, i * 4096, 4096)], ptrs[i], undefined);
      t.true(ram.view.subarray(i * 4096, (i + 1) * 4096).every((v) => v === i + 1));
    }
    // a wait in flight when destroy() comes: both settle, the wait first
    const big = 1024n * BigInt(MiB);
    const x = await cs[0].malloc(big);
    for (let i = 0; i < 20; i++) void cs[0].memset(x, i, big, undefined, true);
    const order: string[] = [];
    const w = promised(() => cs[0].synchronize()).then(() => order.push('wait'));
    const d = cs[0].destroy().then(() => order.push('destroy'));
    await Promise.all([w, d]);
    t.deepEqual(order, ['wait', 'destroy']);
    // contexts not freed by hand: destroying frees their memory (no free() calls)
    await cs[1].destroy();
    await cs[2].destroy();
    const info1 = await provider.primary.memGetInfo();
    const diff = Number(info0.free - info1.free) / MiB;
    t.true(Math.abs(diff) < 64, `free memory changed by ${diff} MiB`);
  });
}
