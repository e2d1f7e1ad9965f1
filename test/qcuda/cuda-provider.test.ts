// The `cuda` provider. Without a GPU: the addon still loads and says plainly
// why CUDA cannot be used. With one (detected, or QCUDA_GPU_TESTS=1, which
// makes its absence a failure): real allocations, copies from memfd-backed
// "guest RAM" registered like the backend registers it, streams, events,
// errors, and the event loop kept free during long waits.
// QCUDA_LIBCUDA=/path/to/libcuda.so.1 loads another driver library (a fake one, say).
import test, { type ExecutionContext } from 'ava';
import { native } from '../../backend/src/sys/native';
import { cudaNative } from '../../backend/src/qcuda/providers/native-cuda';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import type { GuestSeg, ProviderContext } from '../../backend/src/qcuda/provider';
import { cudaAvailable, createCudaProvider, type CudaProvider } from '../../backend/src/qcuda/providers/cuda';
import { IsolatedProvider } from '../../backend/src/qcuda/providers/isolated';
import { prng, promised } from '../helpers';
import { BusyPoll } from '../../backend/src/sys/busy-poll';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const MiB = 1 << 20;
const avail = cudaAvailable();
const wantGpu = process.env.QCUDA_GPU_TESTS === '1';
const realDriver = !process.env.QCUDA_LIBCUDA;

test('CUresult numbers map to the runtime API cudaError_t numbers', (t) => {
  const n = cudaNative();
  t.is(n.toCudaError(0), CudaErr.Success);
  t.is(n.toCudaError(1), CudaErr.InvalidValue);
  t.is(n.toCudaError(2), CudaErr.MemoryAllocation, 'CUDA_ERROR_OUT_OF_MEMORY -> cudaErrorMemoryAllocation');
  t.is(n.toCudaError(3), CudaErr.InitializationError, 'CUDA_ERROR_NOT_INITIALIZED -> cudaErrorInitializationError');
  t.is(n.toCudaError(100), CudaErr.NoDevice);
  t.is(n.toCudaError(101), CudaErr.InvalidDevice);
  t.is(n.toCudaError(400), CudaErr.InvalidResourceHandle, 'CUDA_ERROR_INVALID_HANDLE -> cudaErrorInvalidResourceHandle');
  t.is(n.toCudaError(600), CudaErr.NotReady);
  t.is(n.toCudaError(700), CudaErr.IllegalAddress);
  t.is(n.toCudaError(719), CudaErr.LaunchFailure);
  t.is(n.toCudaError(801), CudaErr.NotSupported);
  t.is(n.toCudaError(202), CudaErr.Unknown, 'CONTEXT_ALREADY_CURRENT has no runtime counterpart');
  t.is(n.toCudaError(916), CudaErr.Unknown, 'KEY_ROTATION has no runtime counterpart');
  t.is(n.toCudaError(12345), CudaErr.Unknown);
  t.is(n.NUM_ATTRS, 160);
});

if (!avail.ok) {
  test('without CUDA the provider says plainly why it is not available', async (t) => {
    if (wantGpu) {
      t.fail(`QCUDA_GPU_TESTS=1 but CUDA is not available: ${avail.reason}`);
      return;
    }
    const n = cudaNative();
    const p = n.probe();
    t.false(p.ok);
    t.is(p.reason, avail.reason);
    t.regex(avail.reason, /^(libcuda\.so\.1 not found|cannot load |no CUDA-capable device|cuInit failed: CUDA_ERROR_|.+ has no cu)/);
    if (realDriver && !(await libcudaPresent())) {
      t.is(avail.reason, 'libcuda.so.1 not found (no NVIDIA driver installed here)');
    }
    t.deepEqual(await n.probeAsync(), p, 'the async probe says the same');
    const e = await t.throwsAsync(createCudaProvider(0), { instanceOf: CudaError });
    t.is(e!.message, `CUDA is not available: ${avail.reason}`);
    t.true(e!.code === CudaErr.InitializationError || e!.code === CudaErr.NoDevice);
    t.throws(() => n.deviceProps(0), { message: `CUDA is not available: ${avail.reason}` });
    t.throws(() => n.openContext(0, 0, false), { message: `CUDA is not available: ${avail.reason}` });
  });
} else {
  gpuTests();
}

async function libcudaPresent(): Promise<boolean> {
  const { execFileSync } = await import('node:child_process');
  try {
    return execFileSync('/sbin/ldconfig', ['-p'], { encoding: 'utf8' }).includes('libcuda.so.1');
  } catch {
    return false;
  }
}

// ------------------------------------------------------------------ GPU tests

interface Ram {
  addr: bigint;
  view: Uint8Array;
  size: number;
  /** As the backend registers guest RAM: the file goes with it (mapped host memory gets a mapping of its own). */
  source: { fd: number; region: { gpa: bigint; size: bigint; userAddr: bigint; mmapOffset: bigint } };
}

function mapRam(size: number, teardown: (f: () => void) => void): Ram {
  const fd = native.memfdCreate('qcuda-cuda-test', size);
  const m = new native.Mapping(fd, size, 0);
  teardown(() => {
    m.unmap();
    native.close(fd);
  });
  return { addr: m.address, view: new Uint8Array(m.window(0, size)), size, source: { fd, region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n } } };
}

function seg(r: Ram, off: number, len: number): GuestSeg {
  return { addr: r.addr + BigInt(off), len, view: r.view.subarray(off, off + len) };
}

/** [off, off+len) of r as pieces of random sizes (a scatter-gather list). */
function scatter(r: Ram, off: number, len: number, rnd: () => number, pieces: number): GuestSeg[] {
  const out: GuestSeg[] = [];
  let left = len;
  let at = off;
  for (let i = 0; i < pieces - 1 && left > 1; i++) {
    const n = 1 + Math.floor(rnd() * Math.min(left - 1, (2 * len) / pieces));
    out.push(seg(r, at, n));
    at += n;
    left -= n;
  }
  if (left > 0) out.push(seg(r, at, left));
  return out;
}

function fill(v: Uint8Array, seed: number): void {
  if (v.byteOffset % 4 === 0 && v.length % 4 === 0) {
    const w = new Uint32Array(v.buffer, v.byteOffset, v.length / 4);
    let x = seed >>> 0;
    for (let i = 0; i < w.length; i++) {
      x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
      w[i] = x;
    }
    return;
  }
  const rnd = prng(seed);
  for (let i = 0; i < v.length; i++) v[i] = (rnd() * 256) | 0;
}

function same(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.length), Buffer.from(b.buffer, b.byteOffset, b.length)) === 0;
}

async function rejectsWith(t: ExecutionContext, f: () => unknown, code: number, msg?: RegExp): Promise<CudaError> {
  const e = await t.throwsAsync(async () => f(), { instanceOf: CudaError });
  t.is(e!.code, code, e!.message);
  if (msg) t.regex(e!.message, msg);
  return e!;
}

/** Runs f while a 5 ms interval ticks; reports the ticks and the longest gap between them. */
async function whileTicking<T>(f: () => T | Promise<T>): Promise<{ value: T; ms: number; ticks: number; maxGap: number }> {
  let last = performance.now();
  let ticks = 0;
  let maxGap = 0;
  const iv = setInterval(() => {
    const now = performance.now();
    maxGap = Math.max(maxGap, now - last);
    last = now;
    ticks++;
  }, 5);
  const t0 = performance.now();
  try {
    const value = await f();
    const ms = performance.now() - t0;
    maxGap = Math.max(maxGap, performance.now() - last);
    return { value, ms, ticks, maxGap };
  } finally {
    clearInterval(iv);
  }
}

function gpuTests(): void {
  const RAM = 640 * MiB;
  let provider: CudaProvider;
  let ram: Ram;
  let ctx: ProviderContext;
  const cleanups: (() => void)[] = [];

  test.before(async () => {
    provider = await createCudaProvider(0, { captureOutput: true });
    ram = mapRam(RAM, (f) => cleanups.push(f));
    await provider.registerGuestMemory(ram.addr, BigInt(RAM), ram.source);
    ctx = await provider.openContext(0);
  });

  test.after.always(async () => {
    if (provider) await provider.close();
    cleanups.reverse().forEach((f) => f());
  });

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
      t.log(`${p.name}: ${p.attrs[16]} SMs, cc ${p.attrs[75]}.${p.attrs[76]}, ${p.totalMem >> 20n} MiB, driver ${provider.driverVersion()}`);
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
    t.is((await ctx.memGetInfo()).total, during.total, 'a session\'s context sees the device\'s memory, as natively');
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
    t.deepEqual([...ram.view.subarray(2 * MiB, 2 * MiB + 12)], [0x77, 0x77, 0x77, 0x77, ...ram.view.subarray(0, 4), 0x77, 0x77, 0x77, 0x77]);
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
    t.true(hp < ram.addr || hp >= ram.addr + BigInt(RAM), 'mapped host memory reaches the GPU through an alias, not through the guest RAM mapping');
    await ctx.hostUnmap(hp);
    // Scattered pages (HOST_MAP_PAGES): one device range, the pieces in the order given.
    ram.view.fill(0x5a, 5 * 4096, 6 * 4096);
    ram.view.fill(0x2b, 2 * 4096, 4 * 4096);
    const sg = await ctx.hostDevicePointer([{ addr: ram.addr + 5n * 4096n, size: 4096n }, { addr: ram.addr + 2n * 4096n, size: 8192n }]);
    const back = seg(ram, 8 * 4096, 3 * 4096);
    await ctx.copyFromDevice([back], sg, undefined);
    t.true(back.view.subarray(0, 4096).every((b) => b === 0x5a) && back.view.subarray(4096).every((b) => b === 0x2b), 'the GPU reads the pieces in order');
    await ctx.memset(sg + 4096n, 0x77, 4096n, undefined, false);
    t.true(ram.view.subarray(2 * 4096, 3 * 4096).every((b) => b === 0x77) && ram.view[4 * 4096 - 1] === 0x2b, 'and writes the guest pages themselves');
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
      t.log(`${what}: ${count} x 1 GiB memset (${per.toFixed(2)} ms each, enqueued in ${enqueueMs.toFixed(1)} ms), waited ${r.ms.toFixed(0)} ms, ${r.ticks} ticks, longest gap ${r.maxGap.toFixed(1)} ms`);
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
    t.log(`1 GiB from unregistered memory: ${r.ms.toFixed(0)} ms (${(N / r.ms / 1e6).toFixed(1)} GB/s), ${r.ticks} ticks, longest gap ${r.maxGap.toFixed(1)} ms`);
    t.true(r.maxGap < 60, `the event loop stalled ${r.maxGap} ms`);
    await ctx.copyFromDevice([seg(ram, 0, 64 * MiB)], x, undefined);
    t.true(same(ram.view.subarray(0, 64 * MiB), cold.view.subarray(0, 64 * MiB)));
    t.true(cudaNative().stats().waiterThreads >= 1);
    await ctx.streamDestroy(s);
    await ctx.eventDestroy(a);
    await ctx.eventDestroy(b);
    await ctx.free(x);
  });

  test.serial('waits polled on the JS thread (pollWith): copies settle on the poll loop\'s turns, not on waiter threads; a longer wait is handed on at the window\'s end and still settles', async (t) => {
    const poll = new BusyPoll(50);
    provider.pollWith(poll);
    const n = cudaNative();
    const dev = await ctx.malloc(BigInt(16 * MiB));
    const before = n.stats();
    // 64 copies of 1 MiB in flight, both ways, each checked afterwards.
    for (let round = 0; round < 4; round++) {
      poll.touch();
      fill(ram.view.subarray(0, 16 * MiB), 100 + round);
      await Promise.all(Array.from({ length: 16 }, (_, i) => ctx.copyToDevice(dev + BigInt(i * MiB), [seg(ram, i * MiB, MiB)], undefined)));
      poll.touch();
      ram.view.fill(0, 32 * MiB, 48 * MiB);
      await Promise.all(Array.from({ length: 16 }, (_, i) => ctx.copyFromDevice([seg(ram, 32 * MiB + i * MiB, MiB)], dev + BigInt(i * MiB), undefined)));
      t.true(same(ram.view.subarray(0, 16 * MiB), ram.view.subarray(32 * MiB, 48 * MiB)), `round ${round}: the bytes came back`);
    }
    const mid = n.stats();
    const polled = mid.parkedWaitsDone - before.parkedWaitsDone;
    t.log(`128 copies: ${polled} waits settled by the poll loop, ${mid.parkedWaitsHandedOn - before.parkedWaitsHandedOn} handed on, ${mid.inlineWaitsDone - before.inlineWaitsDone} inline`);
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
  });

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

  // ---------------------------------------------------------------- modules and launches

  test.serial('modules: parameter layouts, vector add, by-value struct and small params, __device__ variables, ordering', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const m = (await ctx.moduleLoad(image)).ref;
    const vadd = await ctx.functionGet(m, 'vadd', 256);
    t.deepEqual(vadd.params, [{ offset: 0, size: 8 }, { offset: 8, size: 8 }, { offset: 16, size: 8 }, { offset: 24, size: 4 }]);
    t.is(vadd.paramBytes, 28);
    const mixed = await ctx.functionGet(m, 'mixed', 256);
    t.deepEqual(mixed.params, [{ offset: 0, size: 1 }, { offset: 8, size: 32 }, { offset: 40, size: 2 }, { offset: 48, size: 8 }, { offset: 56, size: 8 }]);
    t.is(mixed.paramBytes, 64);
    await rejectsWith(t, () => ctx.functionGet(m, 'no_such_kernel', 256), CudaErr.SymbolNotFound);
    await rejectsWith(t, () => ctx.functionGet(m, 'mixed', 3), CudaErr.NotSupported, /more than 3 parameters/);

    // vector add on a stream, after an async memset of the output on the same stream, byte-exact
    const N = (1 << 20) + 3;
    const bytes = 4 * N;
    const [da, db, dout] = await Promise.all([0, 1, 2].map(() => ctx.malloc(BigInt(bytes))));
    const a = new Float32Array(ram.view.buffer, ram.view.byteOffset, N);
    const b = new Float32Array(ram.view.buffer, ram.view.byteOffset + bytes, N);
    const rnd = prng(7);
    for (let i = 0; i < N; i++) {
      a[i] = (rnd() - 0.5) * 1e6;
      b[i] = rnd() * 1e-3;
    }
    const s = await ctx.streamCreate(1, 0);
    await ctx.copyToDevice(da, [seg(ram, 0, bytes)], s);
    await ctx.copyToDevice(db, [seg(ram, bytes, bytes)], s);
    await ctx.memset(dout, 0xff, BigInt(bytes), s, true);
    const p = new DataView(new ArrayBuffer(28));
    p.setBigUint64(0, dout, true);
    p.setBigUint64(8, da, true);
    p.setBigUint64(16, db, true);
    p.setInt32(24, N, true);
    const params = new Uint8Array(p.buffer);
    const l = await whileTicking(() => ctx.launch(vadd.ref, [Math.ceil(N / 256), 1, 1], [256, 1, 1], 0, s, params));
    t.log(`launch enqueued in ${l.ms.toFixed(3)} ms`);
    const OUTB = 64 * MiB;
    ram.view.fill(0, OUTB, OUTB + bytes);
    await ctx.copyFromDevice([seg(ram, OUTB, bytes)], dout, s);
    const got = new Float32Array(ram.view.buffer, ram.view.byteOffset + OUTB, N);
    let bad = -1;
    for (let i = 0; i < N && bad < 0; i++) if (got[i] !== Math.fround(a[i] + b[i]) && !(Number.isNaN(got[i]))) bad = i;
    t.is(bad, -1, bad >= 0 ? `element ${bad}: ${got[bad]} != ${Math.fround(a[bad] + b[bad])}` : '');
    t.false(got.some((x) => Number.isNaN(x)), 'every element written (the memset left NaNs)');
    await rejectsWith(t, () => ctx.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, s, params.subarray(0, 24)), CudaErr.InvalidValue, /parameter bytes/);

    // by-value struct, char, short, double: what the kernel saw, bit for bit
    const q = new DataView(new ArrayBuffer(64));
    q.setUint8(0, 0x7f);
    q.setUint8(8, 0xa5);
    q.setFloat64(16, Math.PI, true);
    q.setUint16(24, 0x1234, true);
    q.setUint16(26, 0xbeef, true);
    q.setUint16(28, 0x7fff, true);
    q.setInt32(32, -123456789, true);
    q.setUint16(40, 0xcafe, true);
    q.setFloat64(48, -1.5e300, true);
    const dres = await ctx.malloc(64n);
    q.setBigUint64(56, dres, true);
    await ctx.launch(mixed.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(q.buffer));
    await ctx.copyFromDevice([seg(ram, OUTB, 64)], dres, undefined);
    const r = new BigUint64Array(ram.view.buffer.slice(ram.view.byteOffset + OUTB, ram.view.byteOffset + OUTB + 64));
    const f64 = (x: number) => new BigUint64Array(new Float64Array([x]).buffer)[0];
    t.deepEqual([...r], [0x7fn, 0xa5n, f64(Math.PI), 0x7fff_beef_1234n, BigInt(-123456789 >>> 0), 0xcafen, f64(-1.5e300), 0x600dn]);

    // a __device__ variable: read, written by a kernel, written by a copy
    const v = await ctx.variableGet(m, 'counter');
    t.is(v.size, 16n);
    await rejectsWith(t, () => ctx.variableGet(m, 'nothing'), CudaErr.SymbolNotFound);
    const bump = await ctx.functionGet(m, 'bump', 256);
    t.is(bump.paramBytes, 4);
    const readCounter = async () => {
      await ctx.copyFromDevice([seg(ram, OUTB, 16)], v.dptr, undefined);
      return [...new Int32Array(ram.view.buffer.slice(ram.view.byteOffset + OUTB, ram.view.byteOffset + OUTB + 16))];
    };
    t.deepEqual(await readCounter(), [1, 2, 3, 4]);
    await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([10]).buffer));
    t.deepEqual(await readCounter(), [11, 12, 13, 14]);
    new Int32Array(ram.view.buffer, ram.view.byteOffset, 4).set([-1, -2, -3, -4]);
    await ctx.copyToDevice(v.dptr, [seg(ram, 0, 16)], undefined);
    await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([1]).buffer));
    t.deepEqual(await readCounter(), [0, -1, -2, -3]);

    // stale and foreign handles; a garbage image
    const other = await provider.openContext(0);
    await rejectsWith(t, () => other.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, undefined, params), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => other.functionGet(m, 'vadd', 256), CudaErr.InvalidResourceHandle);
    const e = await t.throwsAsync(other.moduleLoad(new Uint8Array(4096).fill(0x42)), { instanceOf: CudaError });
    t.log(`garbage image: ${e!.code} ${e!.message}`);
    await other.destroy();
    await ctx.moduleUnload(m);
    await rejectsWith(t, () => ctx.launch(vadd.ref, [1, 1, 1], [1, 1, 1], 0, undefined, params), CudaErr.InvalidResourceHandle);
    await rejectsWith(t, () => ctx.moduleUnload(m), CudaErr.InvalidResourceHandle);
    await ctx.synchronize();
    await ctx.streamDestroy(s);
    await Promise.all([da, db, dout, dres].map((x) => ctx.free(x)));
  });

  test.serial('device printf reaches the output sink of the context that printed, by its synchronize; not another context\'s', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const got = { a: [] as string[], b: [] as string[] };
    const sink = (who: 'a' | 'b') => (kind: number, bytes: Uint8Array) => got[who].push(`${kind}:${Buffer.from(bytes).toString('latin1')}`);
    const a = await provider.openContext(0, sink('a'));
    const b = await provider.openContext(0, sink('b'));
    const sayA = await a.functionGet((await a.moduleLoad(image)).ref, 'say', 256);
    await b.functionGet((await b.moduleLoad(image)).ref, 'say', 256); // b never launches
    const expect = (x: number, n: number) => Array.from({ length: n }, (_, i) => `say ${x} line ${String(i).padStart(5, '0')}: 0123456789abcdefghijklmnopqrstuvwxyz\n`).join('');
    const text = (l: string[]) => l.map((p) => p.slice(2)).join('');
    for (const [x, n] of [[42, 3], [7, 3000]]) { // 3000 lines: about 160 KiB through the capture's pipe
      got.a.length = 0;
      await a.launch(sayA.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(new Int32Array([x, n]).buffer));
      await b.synchronize(); // a flush point of a context that never launched: whatever it brings is a's
      await a.synchronize();
      t.true(got.a.every((p) => p.startsWith('1:')), 'printf output is stdout output');
      t.is(text(got.a), expect(x, n), `${n} lines, whole and in order, by the end of a's synchronize`);
    }
    t.deepEqual(got.b, [], 'nothing went to the other context');
    await a.destroy();
    await b.destroy();
  });

  // Before the known failure below, which poisons this process's CUDA.
  test.serial('isolated sessions: an illegal address ends only the faulting worker; the other session and new ones keep working', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const size = 8 * MiB;
    const fd = native.memfdCreate('qcuda-isolated-test', size);
    const m = new native.Mapping(fd, size, 0);
    const view = new Uint8Array(m.window(0, size));
    const local = await createCudaProvider(0);
    const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
    try {
      iso.registerGuestMemory(m.address, BigInt(size), { fd, region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n } });
      native.close(fd); // the provider keeps a dup for its workers
      const t0 = Date.now();
      const good = await iso.openContext(0);
      t.log(`a cuda worker starts in ${Date.now() - t0} ms (node, cuInit, contexts; guest RAM registration goes on after)`);
      const bad = await iso.openContext(0);
      const gm = (await good.moduleLoad(image)).ref;
      const bump = await good.functionGet(gm, 'bump', 256);
      const counter = await good.variableGet(gm, 'counter');
      const bm = (await bad.moduleLoad(image)).ref;
      const crash = await bad.functionGet(bm, 'crash', 256);
      const x = await bad.malloc(64n);
      const p = new DataView(new ArrayBuffer(8));
      p.setBigUint64(0, x, true);
      await bad.launch(crash.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer));
      await rejectsWith(t, () => bad.synchronize(), CudaErr.IllegalAddress);
      await rejectsWith(t, () => bad.malloc(64n), CudaErr.IllegalAddress, /illegal/i);
      // the other session: a launch, a synchronize and a copy of what the kernel wrote
      await good.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([5]).buffer));
      await good.synchronize();
      await good.copyFromDevice([{ addr: m.address, len: 16, view: view.subarray(0, 16) }], counter.dptr, undefined);
      t.deepEqual([...new Int32Array(view.buffer.slice(0, 16))], [6, 7, 8, 9], 'the other session\'s kernel ran and its result came back');
      await bad.destroy();
      const fresh = await iso.openContext(0);
      await fresh.moduleUnload((await fresh.moduleLoad(image)).ref);
      t.pass('a session opened after the fault loads a module');
      t.true((await local.primary.memGetInfo()).free > 0n, 'the backend\'s own context still answers memGetInfo');
      await fresh.destroy();
      await good.destroy();
    } finally {
      await iso.close();
      m.unmap();
    }
  });

  // ---- hardening (issue 11): the cases only a GPU can show

  test.serial('a session ended with a kernel that never ends: its worker is killed and its memory is back within seconds', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const local = await createCudaProvider(0);
    const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
    try {
      const f0 = (await local.primary.memGetInfo()).free;
      const x = await iso.openContext(0);
      await x.free(await x.malloc(1n));
      const f1 = (await local.primary.memGetInfo()).free;
      t.log(`one session's context (its worker's, before any module): ${(f0 - f1) >> 20n} MiB of device memory the quota does not count`);
      const spin = await x.functionGet((await x.moduleLoad(image)).ref, 'spin', 256);
      const before = (await local.primary.memGetInfo()).free;
      const GiB = 1n << 30n;
      await x.malloc(GiB);
      const flag = await x.malloc(4n);
      await x.memset(flag, 0, 4n, undefined, false);
      const p = new DataView(new ArrayBuffer(8));
      p.setBigUint64(0, flag, true);
      await x.launch(spin.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer));
      const sync = promised(() => x.synchronize()).then(() => 'returned', (e: Error) => e.message);
      const held = (await local.primary.memGetInfo()).free;
      t.true(before - held >= GiB, `the session holds its 1 GiB (${before - held} bytes)`);
      const t0 = Date.now();
      await x.destroy('exit'); // the guest process is gone (SESSION_CLOSE)
      let free = held;
      while (Date.now() - t0 < 20_000 && free < before - 64n * BigInt(MiB)) {
        await new Promise((r) => setTimeout(r, 50));
        free = (await local.primary.memGetInfo()).free;
      }
      const ms = Date.now() - t0;
      t.log(`killed with an endless kernel running: memory back in ${ms} ms (free ${before} -> ${held} -> ${free})`);
      t.true(free >= before - 64n * BigInt(MiB), 'the GiB and the context came back');
      t.true(ms < 10_000, `within seconds (${ms} ms)`);
      t.regex(String(await sync), /exited|worker/, 'the synchronize in flight failed');
    } finally {
      await iso.close();
    }
  });

  // Security review 2, H2: registered host memory is reachable by every kernel
  // of the process, so guest RAM registered whole in a worker let a guest
  // process's kernel read all of it. Unpinned (the backend's default), only
  // what a session mapped is registered; copies still come back right.
  test.serial('guest RAM not pinned: a kernel cannot reach it at its host address; copies and HOST_MAP still work', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-reach-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const fatbinFile = path.join(dir, 'kernels.fatbin');
    fs.writeFileSync(fatbinFile, image);
    const child = path.join(__dirname, 'reach-child.js');
    const runChild = (mode: string) => JSON.parse(execFileSync(process.execPath, [child, mode, fatbinFile], { encoding: 'utf8', timeout: 60_000 })) as Record<string, unknown>;
    const pinned = runChild('pin');
    const unpinned = runChild('nopin');
    t.log(`pinned: ${JSON.stringify(pinned)}`);
    t.log(`not pinned: ${JSON.stringify(unpinned)}`);
    t.deepEqual(pinned.kernelRead, [0x1234, 0x5678, 0x9abc, 0xdef0], 'pinned whole, guest RAM is there for any kernel of the process (why it is off by default)');
    t.false(unpinned.registered, 'guest RAM itself is not registered');
    t.true(typeof unpinned.kernelRead === 'string' && /illegal|700/i.test(unpinned.kernelRead), `not pinned, a kernel reading guest RAM faults (${String(unpinned.kernelRead)})`);
    for (const r of [pinned, unpinned]) {
      t.true(r.copyBack, `a 1 MiB copy from guest RAM and back is byte-exact (pin ${String(r.pin)})`);
      t.true(r.mappedCopyBack, `a copy from and to a HOST_MAP'd page is byte-exact (pin ${String(r.pin)})`);
      t.true(r.hostMapDevicePointer, `HOST_MAP gives a device pointer (pin ${String(r.pin)})`);
    }
  });

  test.serial('mapped host memory: the device pointer is an alias of just those pages; neighbouring guest RAM and an unmapped alias fault', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const size = 8 * MiB;
    const fd = native.memfdCreate('qcuda-alias-test', size);
    const m = new native.Mapping(fd, size, 0);
    const view = new Uint8Array(m.window(0, size));
    const local = await createCudaProvider(0);
    const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
    const peekFrom = async (x: ProviderContext, src: bigint): Promise<number[] | string> => {
      const peek = await x.functionGet((await x.moduleLoad(image)).ref, 'peek', 256);
      const out = await x.malloc(64n);
      const p = new DataView(new ArrayBuffer(20));
      p.setBigUint64(0, src, true);
      p.setBigUint64(8, out, true);
      p.setInt32(16, 4, true);
      try {
        await x.launch(peek.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(p.buffer));
        await x.synchronize();
      } catch (e) {
        return (e as Error).message;
      }
      await x.copyFromDevice([{ addr: m.address + 4096n * 100n, len: 16, view: view.subarray(4096 * 100, 4096 * 100 + 16) }], out, undefined);
      return [...new Int32Array(view.buffer.slice(4096 * 100, 4096 * 100 + 16))];
    };
    try {
      iso.registerGuestMemory(m.address, BigInt(size), { fd, region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n } });
      new Int32Array(view.buffer, 8192, 4).set([11, 22, 33, 44]);
      new Int32Array(view.buffer, 16384, 4).set([55, 66, 77, 88]); // another guest page, never mapped for the device
      const x = await iso.openContext(0);
      const hp = await x.hostDevicePointer([{ addr: m.address + 8192n, size: 4096n }]);
      t.deepEqual(await peekFrom(x, hp), [11, 22, 33, 44], 'a kernel reads mapped memory through its device pointer');
      const neighbour = await peekFrom(x, hp + 8192n);
      t.log(`a kernel reading 8 KiB past a mapped page's device pointer: ${typeof neighbour === 'string' ? neighbour : JSON.stringify(neighbour)}`);
      t.true(typeof neighbour === 'string' && /illegal|700/i.test(neighbour), 'the next guest page is not there: an illegal address, not guest RAM');
      await x.destroy();
      const y = await iso.openContext(0);
      const hp2 = await y.hostDevicePointer([{ addr: m.address + 8192n, size: 4096n }]);
      await y.hostUnmap(hp2);
      const after = await peekFrom(y, hp2);
      t.true(typeof after === 'string' && /illegal|700/i.test(after), `after HOST_UNMAP the pointer reaches nothing (${String(after)})`);
      await y.destroy();
    } finally {
      await iso.close();
      m.unmap();
      native.close(fd);
    }
  });

  test.serial('module loads: what a load takes is measured; a 100-byte PTX with an 8 GiB .global is refused before it reaches the driver', async (t) => {
    const ptx = Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.global .b8 big[8589934592];\n');
    const { checkImage } = await import('../../backend/src/qcuda/module-image');
    t.is(checkImage(new Uint8Array(ptx)).globalBytes, 8n << 30n, 'the estimate sees it');
    const x = await provider.openContext(0);
    try {
      const small = Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.global .b8 some[67108864];\n');
      const m = await x.moduleLoad(new Uint8Array(small));
      t.log(`a PTX declaring a 64 MiB .global: the load measured ${m.bytes} bytes`);
      t.true(m.bytes >= 64n * BigInt(MiB), `measured ${m.bytes}`);
      await x.moduleUnload(m.ref);
    } finally {
      await x.destroy();
    }
  });

  test.serial('a whole page of PTX without a NUL (the driver read past it: SIGSEGV) is loaded from a padded copy', async (t) => {
    const x = await provider.openContext(0);
    try {
      const page = native.pageSize;
      const fd = native.memfdCreate('qcuda-ptx-page', page);
      const m = new native.Mapping(fd, page, 0);
      const v = new Uint8Array(m.window(0, page));
      v.fill(0x20);
      v.set(Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n'));
      v[page - 1] = 0x0a;
      const r = await x.moduleLoad(v.subarray(0, page)).then(async (mm) => {
        await x.moduleUnload(mm.ref);
        return 'loaded';
      }, (err: CudaError) => `error ${err.code}`);
      t.log(`a page of unterminated PTX ending at the mapping's end: ${r}; the process lives`);
      t.is(r, 'loaded');
      m.unmap();
      native.close(fd);
    } finally {
      await x.destroy();
    }
  });

  test.serial('fuzzed fat binaries and PTX that pass the checks go to the driver in a worker: a driver crash ends only that worker', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    const { checkImage } = await import('../../backend/src/qcuda/module-image');
    const local = await createCudaProvider(0);
    const iso = new IsolatedProvider(local, { worker: { kind: 'cuda', gpu: 0 } });
    try {
      let x = await iso.openContext(0);
      const rnd = prng(77);
      const ptxSeed = new Uint8Array(Buffer.from('.version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(.param .u64 p) { ret; }\n.global .b32 g[64];\n'));
      const counts = new Map<string, number>();
      for (let i = 0; i < 300; i++) {
        const img = (i % 2 ? image : ptxSeed).slice();
        for (let k = 1 + Math.floor(rnd() * 6); k > 0; k--) img[Math.floor(rnd() * img.length)] ^= 1 << Math.floor(rnd() * 8);
        let key: string;
        try {
          checkImage(img);
          key = await x.moduleLoad(img).then(async (mm) => {
            await x.moduleUnload(mm.ref);
            return 'loaded';
          }, (err: CudaError) => (/exited/.test(err.message) ? 'worker crashed' : `driver error ${err.code}`));
        } catch (err) {
          key = `refused by the checks (${(err as CudaError).code})`;
        }
        counts.set(key, (counts.get(key) ?? 0) + 1);
        if (key === 'worker crashed') {
          await x.destroy('exit');
          x = await iso.openContext(0);
        }
      }
      t.log(`300 mutated images: ${JSON.stringify(Object.fromEntries(counts))}`);
      const m = await x.moduleLoad(image);
      t.true(m.bytes >= 0n, 'the backend and a fresh worker still load a good module');
      await x.destroy();
    } finally {
      await iso.close();
    }
  });

  test.serial('--isolation=none: contexts of one process read each other\'s memory, so a VM gets one CUDA process at a time', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    // The hazard, measured: a kernel in context a reads memory context b allocated.
    const a = await provider.openContext(0);
    const b = await provider.openContext(0);
    try {
      const secret = await b.malloc(64n);
      await b.memset(secret, 0x5a, 64n, undefined, false);
      const peek = await a.functionGet((await a.moduleLoad(image)).ref, 'peek', 256);
      const out = await a.malloc(64n);
      const p = new DataView(new ArrayBuffer(20));
      p.setBigUint64(0, secret, true);
      p.setBigUint64(8, out, true);
      p.setInt32(16, 16, true);
      const r = await promised(() => a.launch(peek.ref, [1, 1, 1], [32, 1, 1], 0, undefined, new Uint8Array(p.buffer.slice(0, peek.paramBytes)))).then(() => a.synchronize()).then(() => 'ran', (e: Error) => e.message);
      t.log(`a kernel in context a given context b's pointer: ${r}`);
    } finally {
      await a.destroy();
      await b.destroy();
    }
    // So the device refuses a second CUDA process with isolation none.
    const { DEVICES } = await import('../../backend/src/devices');
    const { started } = await import('../helpers');
    const { QcudaClient } = await import('./client');
    const { Cmd } = await import('../../backend/src/qcuda/proto');
    const dev = await DEVICES.qcuda.create({ provider: 'cuda', isolation: 'none', queues: 2 });
    const pair = await started(t, dev, { size: 64 });
    const one = new QcudaClient(pair.fe, 2, 8);
    const two = new QcudaClient(pair.fe, 2, 8);
    await one.open();
    await two.open();
    t.is((await one.malloc(64)).status, 0);
    t.is((await two.malloc(64)).status, CudaErr.DevicesUnavailable, 'a second CUDA process of the VM is refused');
    t.is((await one.call(Cmd.SESSION_CLOSE)).status, 0);
    t.is((await two.malloc(64)).status, 0, 'once the first is gone, the next one runs');
    await two.call(Cmd.SESSION_CLOSE);
    await (dev as unknown as { provider: { close(): Promise<void> } }).provider.close();
  });

  // KNOWN FAILURE (measured on the H100, driver 580): an illegal address poisons the whole
  // process, every context and even new ones (cuCtxCreate then returns 700). Contexts per
  // session therefore do not isolate a kernel fault in one process: that is why the backend
  // runs each session in a worker process (IsolatedProvider, the test above). This test
  // records the driver's behaviour for --isolation=none; ava flags it the day it passes.
  test.serial.failing('an illegal address in a kernel surfaces at synchronize as 700; other contexts keep working', async (t) => {
    const image = kernelsFatbin(t);
    if (!image) return;
    // the healthy session loads its module before the other one faults
    const gm = (await ctx.moduleLoad(image)).ref;
    const bump = await ctx.functionGet(gm, 'bump', 256);
    const v = await ctx.variableGet(gm, 'counter');
    const bad = await provider.openContext(0);
    const m = (await bad.moduleLoad(image)).ref;
    const crash = await bad.functionGet(m, 'crash', 256);
    const x = await bad.malloc(64n);
    const p = new DataView(new ArrayBuffer(8));
    p.setBigUint64(0, x, true);
    await bad.launch(crash.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(p.buffer)); // enqueued: no error yet
    await rejectsWith(t, () => bad.synchronize(), CudaErr.IllegalAddress);
    await rejectsWith(t, () => bad.malloc(64n), CudaErr.IllegalAddress, /illegal/i);
    // what still works in the other context (logged step by step: the driver decides)
    const step = async (name: string, f: () => unknown) => {
      try {
        await f();
        t.log(`after the fault, other context: ${name}: ok`);
        return true;
      } catch (e) {
        t.log(`after the fault, other context: ${name}: ${(e as CudaError).code} ${(e as Error).message}`);
        return false;
      }
    };
    const ok: boolean[] = [];
    ok.push(await step('malloc+free', async () => ctx.free(await ctx.malloc(4096n))));
    ok.push(await step('copy', () => ctx.copyFromDevice([seg(ram, 0, 16)], v.dptr, undefined)));
    ok.push(await step('launch+synchronize', async () => {
      await ctx.launch(bump.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(new Int32Array([5]).buffer));
      await ctx.synchronize();
    }));
    ok.push(await step('moduleLoad', async () => ctx.moduleUnload((await ctx.moduleLoad(image)).ref)));
    await bad.destroy().catch((e: Error) => t.log(`destroy of the faulted context: ${e.message}`));
    const fresh = await provider.openContext(0);
    ok.push(await step('fresh context after destroy: moduleLoad', async () => fresh.moduleUnload((await fresh.moduleLoad(image)).ref)));
    ok.push(await step('old context after destroy: moduleLoad', async () => ctx.moduleUnload((await ctx.moduleLoad(image)).ref)));
    await fresh.destroy().catch(() => undefined);
    await ctx.moduleUnload(gm).catch(() => undefined);
    t.deepEqual(ok, ok.map(() => true), 'every step in the healthy context works');
  });

}

/**
 * test/qcuda/fixtures/kernels.cu as a fat binary: $QCUDA_KERNELS_FATBIN, the
 * one test/gpu/bundle.sh puts next to this test (dist/test/qcuda/fixtures/),
 * or built here with nvcc. Without any, a GPU run fails (the tests need it).
 */
let fatbin: Uint8Array | undefined;
function kernelsFatbin(t: ExecutionContext): Uint8Array | undefined {
  if (fatbin) return fatbin;
  const candidates = [process.env.QCUDA_KERNELS_FATBIN, path.join(__dirname, 'fixtures', 'kernels.fatbin')].filter((x): x is string => !!x);
  for (const f of candidates) if (fs.existsSync(f)) return (fatbin = new Uint8Array(fs.readFileSync(f)));
  const src = path.resolve(__dirname, '..', '..', '..', 'test', 'qcuda', 'fixtures', 'kernels.cu');
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-fatbin-')), 'kernels.fatbin');
  try {
    execFileSync('nvcc', ['-fatbin', '-gencode', 'arch=compute_80,code=[sm_80,compute_80]', '-gencode', 'arch=compute_90,code=sm_90', '-o', out, src], { stdio: 'pipe' });
    return (fatbin = new Uint8Array(fs.readFileSync(out)));
  } catch (e) {
    t.fail(`no kernels.fatbin (looked at ${candidates.join(', ')}) and nvcc could not build one: ${(e as Error).message}`);
    return undefined;
  }
}
