// The kernels of a driver-API module by name (guest-driver/libcuda/kernels.c,
// what the tools-module export table hands cuFFT): a host program built with
// gcc and sanitizers against kernels.c (and fatbin.c, whose entry walk it uses), run over images nvcc makes here (a
// cubin, PTX, fat binaries with LZ4- and zstd-compressed entries) and over
// truncated and corrupted copies of each.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';
const SRC = path.join(ROOT, 'test/guest-lib/kernel_names_kernels.cu');

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-kernel-names-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

function run(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 120_000 });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(' ')}: ${r.stderr}${r.stdout}`);
  return r.stdout;
}

test('kernels listed from a cubin, PTX and LZ4-compressed fat binaries; zstd ones refused; corrupt images read in bounds', (t) => {
  const nvcc = path.join(CUDA, 'bin/nvcc');
  const image = (name: string, args: string[]) => {
    const out = path.join(work, name);
    run(nvcc, [...args, '-rdc=true', '-o', out, SRC]);
    return out;
  };
  const sass = ['-gencode', 'arch=compute_90,code=sm_90'];
  const ptx80 = ['-gencode', 'arch=compute_80,code=compute_80'];
  const files = [
    image('k.cubin', ['-cubin', '-arch=sm_90']),
    image('k.ptx', ['-ptx', '-arch=sm_90']),
    image('lz4.fatbin', ['-fatbin', ...sass, ...ptx80, '-Xfatbin=-compress-all', '--compress-mode=speed']),
    image('lz4-ptx.fatbin', ['-fatbin', ...ptx80, '-Xfatbin=-compress-all', '--compress-mode=speed']),
    image('plain.fatbin', ['-fatbin', ...sass, '--compress-mode=none']),
    image('zstd.fatbin', ['-fatbin', ...sass, ...ptx80, '-Xfatbin=-compress-all', '--compress-mode=size']),
  ];
  const exe = path.join(work, 'kernel_names');
  run('gcc', [
    '-std=gnu11',
    '-Wall',
    '-Werror',
    '-O1',
    '-g',
    '-fsanitize=address,undefined',
    '-fno-sanitize-recover=all',
    `-I${path.join(CUDA, 'include')}`,
    `-I${path.join(ROOT, 'guest-driver/include')}`,
    `-I${path.join(ROOT, 'guest-driver/lib')}`,
    '-pthread',
    '-o',
    exe,
    path.join(ROOT, 'test/guest-lib/kernel_names.c'),
    path.join(ROOT, 'guest-driver/libcuda/kernels.c'),
    // The entries a device runs: the library's own rule.
    path.join(ROOT, 'guest-driver/lib/fatbin.c'),
  ]);
  const lines = run(exe, files).trim().split('\n');
  const found = Object.fromEntries(
    lines.map((l) => {
      const [file, rest] = l.split(':');
      return [file, rest.trim()];
    }),
  );
  const both = '_Z6kern_bPi kern_a = 2';
  t.is(found['k.cubin'], both);
  t.is(found['k.ptx'], 'kern_a _Z6kern_bPi = 2');
  t.is(found['lz4.fatbin'], both);
  t.is(found['lz4-ptx.fatbin'], 'kern_a _Z6kern_bPi = 2');
  t.is(found['plain.fatbin'], both);
  t.is(found['zstd.fatbin'], '= -1', 'zstd entries cannot be listed: the table answers NOT_SUPPORTED');
});
