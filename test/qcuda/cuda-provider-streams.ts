// The cuda provider on a GPU: work kept in order, streams and events,
// and errors as CudaError naming the driver call.
import test from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { ctx, fill, MiB, provider, RAM, ram, realDriver, rejectsWith, same, seg } from './cuda-provider-fixtures';

/** Registered in order by cuda-provider.test.ts. */
export function streamTests(): void {
  test.serial('work submitted without awaiting keeps its order (queued and inline paths)', async (t) => {
    const n = MiB;
    fill(ram.view.subarray(0, n), 5);
    const s = await ctx.streamCreate(0, 0);
    const buf = await ctx.malloc(BigInt(n));
    // malloc keeps the context thread busy: what follows queues behind it, in order
    const ps: unknown[] = [ctx.malloc(BigInt(n))];
    ps.push(ctx.copyToDevice(buf, [seg(ram, 0, n)], s));
    ps.push(ctx.memset(buf + 10n, 0x55, 10n, s, true));
    const [other] = (await Promise.all(ps)) as [bigint];
    await ctx.copyFromDevice([seg(ram, 2 * MiB, n)], buf, s);
    const expect = ram.view.slice(0, n);
    expect.fill(0x55, 10, 20);
    t.true(same(ram.view.subarray(2 * MiB, 3 * MiB), expect), 'copy, then memset');
    // and the other way round, both inline (the context thread is idle now)
    const q1 = ctx.memset(buf, 0x77, BigInt(n), s, true);
    const q2 = ctx.copyToDevice(buf + 4n, [seg(ram, 0, 4)], s);
    const q3 = ctx.copyFromDevice([seg(ram, 2 * MiB, 16)], buf, s);
    await Promise.all([q1, q2, q3]);
    t.deepEqual(
      [...ram.view.subarray(2 * MiB, 2 * MiB + 12)],
      [0x77, 0x77, 0x77, 0x77, ...ram.view.subarray(0, 4), 0x77, 0x77, 0x77, 0x77],
    );
    // 200 interleaved chunks, some queued behind a free, some inline
    const chunk = 4096;
    fill(ram.view.subarray(0, 200 * chunk), 11);
    const all: unknown[] = [];
    for (let i = 0; i < 200; i++) {
      if (i === 50) all.push(ctx.free(other));
      all.push(ctx.copyToDevice(buf + BigInt(i * chunk), [seg(ram, i * chunk, chunk)], i % 2 ? s : undefined));
    }
    await Promise.all(all);
    await ctx.copyFromDevice([seg(ram, 2 * MiB, 200 * chunk)], buf, undefined);
    t.true(same(ram.view.subarray(0, 200 * chunk), ram.view.subarray(2 * MiB, 2 * MiB + 200 * chunk)));
    await ctx.streamDestroy(s);
    await ctx.free(buf);
  });

  test.serial('streams and events: order across streams, queries, elapsed time', async (t) => {
    const big = 1024 * MiB;
    const x = await ctx.malloc(BigInt(big));
    const s1 = await ctx.streamCreate(1, -1);
    const s2 = await ctx.streamCreate(1, 0);
    const e0 = await ctx.eventCreate(0);
    const e1 = await ctx.eventCreate(0);
    await ctx.eventRecord(e0, s1);
    const reps = realDriver ? 32 : 4;
    for (let i = 0; i < reps; i++) await ctx.memset(x, i + 1, BigInt(big), s1, true);
    await ctx.eventRecord(e1, s1);
    t.false(await ctx.eventQuery(e1), `${reps} GiB of memsets are not done at once`);
    t.false(await ctx.streamQuery(s1));
    // s2 waits for s1's event: its copy must see the last memset
    await ctx.streamWaitEvent(s2, e1, 0);
    await ctx.copyFromDevice([seg(ram, 0, 4096)], x + BigInt(big - 4096), s2);
    t.true(await ctx.eventQuery(e1));
    t.true(ram.view.subarray(0, 4096).every((v) => v === reps));
    await ctx.eventSynchronize(e1);
    t.true(await ctx.streamQuery(s1));
    t.true(await ctx.streamQuery(undefined));
    const ms = await ctx.eventElapsed(e0, e1);
    t.true(ms > 0 && ms < 10000, `${ms} ms`);
    t.log(`${reps} x 1 GiB memset: ${ms.toFixed(2)} ms (${((reps * big) / ms / 1e6).toFixed(0)} GB/s)`);
    const nt = await ctx.eventCreate(2); // DisableTiming
    await ctx.eventRecord(nt, s1);
    await ctx.eventSynchronize(nt);
    await rejectsWith(t, () => ctx.eventElapsed(e0, nt), CudaErr.InvalidResourceHandle, /cuEventElapsedTime/);
    // an event never recorded: query says done, sync returns
    const fresh = await ctx.eventCreate(0);
    t.true(await ctx.eventQuery(fresh));
    await ctx.eventSynchronize(fresh);
    // destroying an event that is being waited on
    await ctx.memset(x, 9, BigInt(big), s1, true);
    await ctx.eventRecord(e1, s1);
    const w = ctx.eventSynchronize(e1);
    await ctx.eventDestroy(e1);
    await w;
    await rejectsWith(t, () => ctx.eventQuery(e1), CudaErr.InvalidResourceHandle, /no event/);
    for (const e of [e0, nt, fresh]) await ctx.eventDestroy(e);
    await ctx.streamDestroy(s1);
    await ctx.streamDestroy(s2);
    await ctx.free(x);
  });

  test.serial('errors become CudaError with the cudaError_t number and the driver call', async (t) => {
    await rejectsWith(t, () => ctx.free(0xdead0000n), CudaErr.InvalidValue, /^cuMemFree_v2: CUDA_ERROR_INVALID_VALUE/);
    await rejectsWith(t, () => ctx.malloc(1n << 50n), CudaErr.MemoryAllocation, /^cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY/);
    await rejectsWith(t, () => ctx.streamSynchronize(12345), CudaErr.InvalidResourceHandle, /no stream 12345/);
    await rejectsWith(t, () => ctx.streamDestroy(12345), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => ctx.eventRecord(777, undefined), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => ctx.eventSynchronize(777), CudaErr.InvalidResourceHandle);
    const other = await provider.openContext(0);
    const s = (await other.streamCreate(0, 0)) as number;
    // ids belong to their context (ctx has no live stream now)
    await rejectsWith(t, () => ctx.streamQuery(s), CudaErr.InvalidResourceHandle, /no stream/);
    t.true(await other.streamQuery(s));
    // bad device pointers, in a context of their own in case the driver only notices on the device
    await rejectsWith(t, () => other.copyToDevice(0x1000n, [seg(ram, 0, 16)], undefined), CudaErr.InvalidValue, /cuMemcpyHtoDAsync_v2/);
    await rejectsWith(t, () => other.copyFromDevice([seg(ram, 0, 16)], 0x1000n, undefined), CudaErr.InvalidValue, /cuMemcpyDtoHAsync_v2/);
    const e = await rejectsWith(t, () => ctx.hostDevicePointer([{ addr: 0x1000n, size: 16n }]), CudaErr.InvalidValue);
    t.regex(e.message, /not guest memory/);
    const hp = await ctx.hostDevicePointer([{ addr: ram.addr + 4096n + 100n, size: 4096n }]);
    t.true(hp !== 0n);
    t.is(hp % 4096n, 100n, 'the offset in the page is kept');
    t.true(
      hp < ram.addr || hp >= ram.addr + BigInt(RAM),
      'mapped host memory reaches the GPU through an alias, not through the guest RAM mapping',
    );
    await ctx.hostUnmap(hp);
    // Scattered pages (HOST_MAP_PAGES): one device range, the pieces in the order given.
    ram.view.fill(0x5a, 5 * 4096, 6 * 4096);
    ram.view.fill(0x2b, 2 * 4096, 4 * 4096);
    const sg = await ctx.hostDevicePointer([
      { addr: ram.addr + 5n * 4096n, size: 4096n },
      { addr: ram.addr + 2n * 4096n, size: 8192n },
    ]);
    const back = seg(ram, 8 * 4096, 3 * 4096);
    await ctx.copyFromDevice([back], sg, undefined);
    t.true(
      back.view.subarray(0, 4096).every((b) => b === 0x5a) && back.view.subarray(4096).every((b) => b === 0x2b),
      'the GPU reads the pieces in order',
    );
    await ctx.memset(sg + 4096n, 0x77, 4096n, undefined, false);
    t.true(
      ram.view.subarray(2 * 4096, 3 * 4096).every((b) => b === 0x77) && ram.view[4 * 4096 - 1] === 0x2b,
      'and writes the guest pages themselves',
    );
    await ctx.hostUnmap(sg);
    // a destroyed context refuses work
    await other.destroy();
    await rejectsWith(t, () => other.malloc(16n), 709 /* cudaErrorContextIsDestroyed */, /context destroyed/);
    await other.destroy(); // twice is fine
    // the context that saw all those errors still works
    const p = await ctx.malloc(4096n);
    await ctx.memset(p, 1, 4096n, undefined, false);
    await ctx.free(p);
    t.pass();
  });
}
