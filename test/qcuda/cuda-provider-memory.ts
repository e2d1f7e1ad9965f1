// The cuda provider on a GPU: the device, its memory, copies between guest
// RAM and the device (any size, alignment or scatter), memsets.
import test from 'ava';
import { CudaError } from '../../backend/src/qcuda/cuda-error';
import type { GuestSeg } from '../../backend/src/qcuda/provider';
import { prng } from '../helpers';
import { ctx, fill, MiB, provider, RAM, ram, realDriver, same, scatter, seg } from './cuda-provider-fixtures';

/** Registered in order by cuda-provider.test.ts. */
export function memoryTests(): void {
  test.serial('device properties, driver version and memory info', async (t) => {
    t.is(provider.deviceCount(), 1);
    t.true(provider.hasGpu);
    t.is(provider.name, 'cuda');
    t.true(provider.driverVersion() >= 12000, String(provider.driverVersion()));
    const p = provider.deviceProps(0);
    t.true(p.name.length > 0);
    t.is(p.uuid.length, 16);
    t.true(p.uuid.some((b) => b !== 0));
    t.true(p.totalMem > 0n);
    t.is(p.attrs.length, 160);
    t.is(p.attrs[0], 0);
    t.true(p.attrs[1] > 0, 'MAX_THREADS_PER_BLOCK');
    if (realDriver) {
      t.is(p.attrs[1], 1024, 'CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK');
      t.is(p.attrs[10], 32, 'CU_DEVICE_ATTRIBUTE_WARP_SIZE');
      t.true(p.attrs[16] > 0, 'CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT');
      t.true(p.attrs[75] >= 7, 'CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR');
      t.is(p.attrs[41], 1, 'CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING');
      t.is(p.attrs[19], 1, 'CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY');
      t.log(
        `${p.name}: ${p.attrs[16]} SMs, cc ${p.attrs[75]}.${p.attrs[76]}, ${p.totalMem >> 20n} MiB, driver ${provider.driverVersion()}`,
      );
    }
    t.throws(() => provider.deviceProps(1), { instanceOf: CudaError, message: /no device 1/ });
    t.true(await provider.isRegistered(ram.addr, BigInt(RAM)), 'cuMemHostRegister(PORTABLE | DEVICEMAP) of the memfd mapping succeeded');
    const info = await provider.primary.memGetInfo();
    t.true(info.total > 0n && info.free > 0n && info.free <= info.total);
    t.true(info.total <= p.totalMem + (1n << 30n));
    const before = info.free;
    const big = await ctx.malloc(512n * BigInt(MiB));
    const during = await provider.primary.memGetInfo();
    t.true(before - during.free >= 500n * BigInt(MiB), `free went ${before} -> ${during.free}`);
    t.is((await ctx.memGetInfo()).total, during.total, "a session's context sees the device's memory, as natively");
    await ctx.free(big);
  });

  test.serial('host <-> device round trips: many sizes and alignments, scattered segments, 256 MiB', async (t) => {
    const rnd = prng(42);
    const sizes = [1, 3, 8, 255, 4096, 4097, 65543, MiB + 1, 16 * MiB];
    const offsets = [0, 1, 7, 4095, 12345];
    const dev = await ctx.malloc(BigInt(32 * MiB));
    const OUT = 320 * MiB;
    for (const size of sizes) {
      for (const off of offsets) {
        const devOff = BigInt(Math.floor(rnd() * 1000));
        fill(ram.view.subarray(off, off + size), size * 31 + off);
        const pieces = size > 4096 ? 1 + Math.floor(rnd() * 40) : 1 + Math.floor(rnd() * 3);
        await ctx.copyToDevice(dev + devOff, scatter(ram, off, size, rnd, pieces), undefined);
        ram.view.fill(0xee, OUT + off, OUT + off + size);
        await ctx.copyFromDevice(scatter(ram, OUT + off, size, rnd, pieces), dev + devOff, undefined);
        if (!same(ram.view.subarray(off, off + size), ram.view.subarray(OUT + off, OUT + off + size))) {
          t.fail(`size ${size} offset ${off} devOff ${devOff}: data differs`);
          return;
        }
      }
    }
    await ctx.free(dev);

    const N = 256 * MiB;
    const big = await ctx.malloc(BigInt(N));
    fill(ram.view.subarray(0, N), 7);
    const t0 = performance.now();
    await ctx.copyToDevice(big, [seg(ram, 0, N)], undefined);
    const t1 = performance.now();
    ram.view.fill(0, OUT, OUT + N);
    const t1b = performance.now(); // the fill is not part of the copy
    await ctx.copyFromDevice([seg(ram, OUT, N)], big, undefined);
    const t2 = performance.now();
    t.true(same(ram.view.subarray(0, N), ram.view.subarray(OUT, OUT + N)), '256 MiB round trip');
    const h2d = (N / (t1 - t0)) * 1e-6;
    const d2h = (N / (t2 - t1b)) * 1e-6;
    t.log(`256 MiB from registered memfd: H2D ${h2d.toFixed(1)} GB/s, D2H ${d2h.toFixed(1)} GB/s`);
    // pinned speed (~50 GB/s native) in a session context proves PORTABLE registration reaches it (pageable: 7-10)
    if (realDriver) t.true(h2d > 20 && d2h > 20, `not pinned speed: ${h2d.toFixed(1)} / ${d2h.toFixed(1)} GB/s`);
    // on a stream, in 4 KiB pages (as a guest's pinned pages arrive)
    const s = await ctx.streamCreate(0, 0);
    const pages: GuestSeg[] = [];
    for (let o = 0; o < 8 * MiB; o += 4096) pages.push(seg(ram, o, 4096));
    fill(ram.view.subarray(0, 8 * MiB), 99);
    await ctx.copyToDevice(big, pages, s);
    ram.view.fill(0, OUT, OUT + 8 * MiB);
    await ctx.copyFromDevice([seg(ram, OUT, 8 * MiB)], big, s);
    t.true(same(ram.view.subarray(0, 8 * MiB), ram.view.subarray(OUT, OUT + 8 * MiB)), '2048 page segments');
    await ctx.streamDestroy(s);
    await ctx.free(big);
  });

  test.serial('memset and device-to-device copies, synchronous and on streams', async (t) => {
    const n = 3 * MiB + 17;
    const a = await ctx.malloc(BigInt(n));
    const b = await ctx.malloc(BigInt(n));
    await ctx.memset(a, 0xab, BigInt(n), undefined, false);
    await ctx.copyFromDevice([seg(ram, 0, n)], a, undefined);
    t.true(ram.view.subarray(0, n).every((x) => x === 0xab));
    const s = await ctx.streamCreate(1, 0);
    await ctx.memset(a + 100n, 0x1cd, 1000n, s, true); // value is a byte: 0xcd
    await ctx.copyOnDevice(b, a, BigInt(n), s, true);
    await ctx.streamSynchronize(s);
    await ctx.copyFromDevice([seg(ram, 0, n)], b, undefined);
    const v = ram.view;
    t.true(v[99] === 0xab && v[100] === 0xcd && v[1099] === 0xcd && v[1100] === 0xab);
    await ctx.copyOnDevice(b + 1n, a + 1000n, 5n, undefined, false);
    await ctx.copyFromDevice([seg(ram, 0, 8)], b, undefined);
    t.deepEqual([...v.subarray(0, 8)], [0xab, 0xcd, 0xcd, 0xcd, 0xcd, 0xcd, 0xab, 0xab]);
    await ctx.memset(a, 0, 0n, undefined, false); // zero bytes: nothing to do
    await ctx.streamDestroy(s);
    await ctx.free(a);
    await ctx.free(b);
  });
}
