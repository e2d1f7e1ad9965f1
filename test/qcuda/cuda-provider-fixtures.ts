// Shared by the cuda provider's GPU tests (cuda-provider.test.ts registers
// them from cuda-provider-*.ts): one provider with 640 MiB of memfd-backed
// "guest RAM" registered as the backend registers it, a session's context,
// and helpers to fill, scatter, compare and time copies.
import test, { type ExecutionContext } from 'ava';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../../backend/src/sys/native';
import { CudaError } from '../../backend/src/qcuda/cuda-error';
import type { GuestSeg, ProviderContext } from '../../backend/src/qcuda/provider';
import { createCudaProvider, type CudaProvider } from '../../backend/src/qcuda/providers/cuda/cuda';
import { prng } from '../helpers';

export const MiB = 1 << 20;
export const realDriver = !process.env.QCUDA_LIBCUDA;

export const RAM = 640 * MiB;
export let provider: CudaProvider;
export let ram: Ram;
export let ctx: ProviderContext;

/** Opens provider, ram and ctx before the first test and closes them after the last. */
export function openGpu(): void {
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
}

export interface Ram {
  addr: bigint;
  view: Uint8Array;
  size: number;
  /** As the backend registers guest RAM: the file goes with it (mapped host memory gets a mapping of its own). */
  source: { fd: number; region: { gpa: bigint; size: bigint; userAddr: bigint; mmapOffset: bigint } };
}

export function mapRam(size: number, teardown: (f: () => void) => void): Ram {
  const fd = native.memfdCreate('qcuda-cuda-test', size);
  const m = new native.Mapping(fd, size, 0);
  teardown(() => {
    m.unmap();
    native.close(fd);
  });
  return {
    addr: m.address,
    view: new Uint8Array(m.window(0, size)),
    size,
    source: { fd, region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n } },
  };
}

export function seg(r: Ram, off: number, len: number): GuestSeg {
  return { addr: r.addr + BigInt(off), len, view: r.view.subarray(off, off + len) };
}

/** [off, off+len) of r as pieces of random sizes (a scatter-gather list). */
export function scatter(r: Ram, off: number, len: number, rnd: () => number, pieces: number): GuestSeg[] {
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

export function fill(v: Uint8Array, seed: number): void {
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

export function same(a: Uint8Array, b: Uint8Array): boolean {
  return Buffer.compare(Buffer.from(a.buffer, a.byteOffset, a.length), Buffer.from(b.buffer, b.byteOffset, b.length)) === 0;
}

export async function rejectsWith(t: ExecutionContext, f: () => unknown, code: number, msg?: RegExp): Promise<CudaError> {
  const e = await t.throwsAsync(async () => f(), { instanceOf: CudaError });
  t.is(e!.code, code, e!.message);
  if (msg) t.regex(e!.message, msg);
  return e!;
}

/** Runs f while a 5 ms interval ticks; reports the ticks and the longest gap between them. */
export async function whileTicking<T>(f: () => T | Promise<T>): Promise<{ value: T; ms: number; ticks: number; maxGap: number }> {
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

/**
 * test/qcuda/fixtures/kernels.cu as a fat binary: $QCUDA_KERNELS_FATBIN, the
 * one test/gpu/bundle.sh puts next to this test (dist/test/qcuda/fixtures/),
 * or built here with nvcc. Without any, a GPU run fails (the tests need it).
 */
let fatbin: Uint8Array | undefined;
export function kernelsFatbin(t: ExecutionContext): Uint8Array | undefined {
  if (fatbin) return fatbin;
  const candidates = [process.env.QCUDA_KERNELS_FATBIN, path.join(__dirname, 'fixtures', 'kernels.fatbin')].filter((x): x is string => !!x);
  for (const f of candidates) if (fs.existsSync(f)) return (fatbin = new Uint8Array(fs.readFileSync(f)));
  const src = path.resolve(__dirname, '..', '..', '..', 'test', 'qcuda', 'fixtures', 'kernels.cu');
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-fatbin-')), 'kernels.fatbin');
  try {
    execFileSync(
      'nvcc',
      ['-fatbin', '-gencode', 'arch=compute_80,code=[sm_80,compute_80]', '-gencode', 'arch=compute_90,code=sm_90', '-o', out, src],
      { stdio: 'pipe' },
    );
    return (fatbin = new Uint8Array(fs.readFileSync(out)));
  } catch (e) {
    t.fail(`no kernels.fatbin (looked at ${candidates.join(', ')}) and nvcc could not build one: ${(e as Error).message}`);
    return undefined;
  }
}
