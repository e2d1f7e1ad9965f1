// The cuda addon on the fake libcuda (test/qcuda/fixtures/fakecuda.c), for
// the addon's own tests: no GPU needed. The library is built once per process.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cudaNative, type CudaNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';

export const root = path.resolve(__dirname, '..', '..', '..');
export const ADDON = path.join(root, 'addon', 'build', 'Release', 'qcuda_cuda.node');

/** The fake libcuda's sources (test/qcuda/fixtures): one library built from them all. */
export const FAKE_CUDA_SOURCES = ['fakecuda.c', 'fakecuda_arrays.c', 'fakecuda_vmm.c', 'fakecuda_ipc.c'].map((f) =>
  path.join(root, 'test', 'qcuda', 'fixtures', f),
);

let built: string | undefined;

/** Path of the fake libcuda.so.1 (built with gcc on first use). */
export function fakeLibcuda(): string {
  if (built === undefined) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-fakecuda-'));
    process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
    const lib = path.join(dir, 'libcuda.so.1');
    execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-Wall', '-o', lib, ...FAKE_CUDA_SOURCES, '-lpthread']);
    built = lib;
  }
  return built;
}

/** The addon, on the fake driver. Call it before anything else in the process probes for CUDA. */
export function fakeCuda(): CudaNative {
  const lib = fakeLibcuda();
  process.env.QCUDA_LIBCUDA = lib;
  const n = cudaNative();
  const p = n.probe();
  if (!p.ok || p.library !== lib) throw new Error(`the addon is not on the fake driver: ${JSON.stringify(p)}`);
  return n;
}

/** A kernel's int parameter block. */
export const i32 = (x: number): Uint8Array => new Uint8Array(new Int32Array([x]).buffer);
export const text = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'latin1'));
export const ONE = [1, 1, 1];
