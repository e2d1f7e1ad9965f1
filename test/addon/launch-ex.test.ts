// launchEx (cuLaunchKernelEx with a thread-block cluster and the cooperative
// attribute), on the fake driver, which refuses a cluster that does not
// divide the grid as NVIDIA's does (CUDA_ERROR_INVALID_CLUSTER_SIZE): the
// attribute reaches the driver, and the driver's answer comes back.
import test from 'ava';
import { fakeCuda, i32, text } from './fake-driver';

const n = fakeCuda();

test("a launch in clusters reaches cuLaunchKernelEx with its cluster; one that does not divide the grid is the driver's error", async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const m = await ctx.moduleLoad(text('// say(x)'));
  const say = (await ctx.functionGet(m.id, 'say', 256)).id;
  await ctx.launchEx(say, [4, 2, 1], [32, 1, 1], 0, 0, i32(7), [2, 2, 1], false);
  await ctx.launchEx(say, [4, 1, 1], [32, 1, 1], 0, 0, i32(8), [1, 1, 1], true);
  await ctx.synchronize();
  const e = await t.throwsAsync(ctx.launchEx(say, [3, 1, 1], [32, 1, 1], 0, 0, i32(9), [2, 1, 1], false));
  t.regex(e!.message, /cuLaunchKernelEx/);
  t.is((e as Error & { cuResult?: number }).cuResult, 912, 'CUDA_ERROR_INVALID_CLUSTER_SIZE');
});
