// qcuda's guest libcuda.so.1 as built (make guest-libcuda), on this machine
// (no qcuda device here): its exports and soname, what cuGetProcAddress
// answers for every request CUDA 13's runtime makes, what it answers with no
// device, and the runtime's integrity check (MD2 against RFC 1319's vectors).
// In a guest the same library runs default-built programs (test/vm).
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LIB = path.join(ROOT, 'build/guest/lib/libcuda.so.1');
const EXPORTS = path.join(ROOT, 'build/guest/libcuda-gen/exports.txt');
const REQUESTS = path.join(ROOT, 'guest-driver/libcuda/gpa-requests.txt');
if (!fs.existsSync(LIB) || !fs.existsSync(EXPORTS))
  throw new Error(`${LIB} is not built: run 'make guest-libcuda' (make test and make test-unit do)`);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-libcuda-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

function cc(out: string, ...args: string[]): string {
  const exe = path.join(work, out);
  const r = spawnSync('gcc', ['-std=gnu11', '-Wall', '-Wextra', '-Werror', '-O2', '-o', exe, ...args], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`gcc ${out}: ${r.stderr}`);
  return exe;
}
function run(exe: string, args: string[], input?: string) {
  // No qcuda device on this machine: QCUDA_DEVICE points nowhere to be sure.
  return spawnSync(exe, args, { encoding: 'utf8', input, env: { ...process.env, QCUDA_DEVICE: '/nonexistent' } });
}

test('it exports exactly the cu* names of cuda.h and qcuda_stats (no cuda*, no qc_*), under the soname libcuda.so.1', (t) => {
  const nm = spawnSync('nm', ['-D', '--defined-only', LIB], { encoding: 'utf8' });
  const names = nm.stdout
    .split('\n')
    .filter(Boolean)
    .map((l) => l.split(' ').pop()!)
    .sort();
  const want = [...fs.readFileSync(EXPORTS, 'utf8').split('\n').filter(Boolean), 'qcuda_stats'].sort();
  t.deepEqual(names, want);
  t.true(names.length > 600);
  const dyn = spawnSync('objdump', ['-p', LIB], { encoding: 'utf8' }).stdout;
  t.regex(dyn, /SONAME\s+libcuda\.so\.1\b/);
});

test("cuGetProcAddress_v2 maps each of the runtime's 440 requests to the function of that ABI", (t) => {
  const exe = cc('gpa_dump', path.join(ROOT, 'test/libcuda/gpa_dump.c'), '-ldl');
  const r = run(exe, [LIB], fs.readFileSync(REQUESTS, 'utf8'));
  t.is(r.status, 0, r.stderr);
  const rows = r.stdout.split('\n').filter(Boolean);
  t.is(rows.length, 439); // every request but the empty name
  const answers = new Map(
    rows.map((l) => {
      const [k, v] = l.split(' -> ');
      return [k, v];
    }),
  );
  // ABI versions (cudaTypedefs.h) and the per-thread default stream (flags 2).
  t.is(answers.get('cuMemAlloc 3020 0'), 'cuMemAlloc_v2');
  t.is(answers.get('cuCtxSynchronize 2000 0'), 'cuCtxSynchronize');
  t.is(answers.get('cuCtxSynchronize 13000 0'), 'cuCtxSynchronize_v2');
  t.is(answers.get('cuCtxGetDevice 13000 0'), 'cuCtxGetDevice_v2');
  t.is(answers.get('cuLaunchKernel 7000 2'), 'cuLaunchKernel_ptsz');
  t.is(answers.get('cuMemcpyHtoDAsync 7000 2'), 'cuMemcpyHtoDAsync_v2_ptsz');
  t.is(answers.get('cuStreamGetCaptureInfo 12030 0'), 'cuStreamGetCaptureInfo_v3');
  t.is(answers.get('cuGetExportTable 3000 0'), 'cuGetExportTable');
  for (const [k, v] of answers) {
    const name = k.split(' ')[0];
    if (/GL|EGL|Egl|VDPAU/.test(name)) {
      t.is(v, 'NOT_FOUND 1 (result 0)', `${k}: graphics interop is not in cuda.h (found nowhere is an answer with a status to read)`); // CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND
      continue;
    }
    t.true(
      v === name || v.startsWith(`${name}_`) || (name === 'cuGraphInstantiate' && v === 'cuGraphInstantiateWithFlags'),
      `${k} -> ${v}`,
    );
  }
});

test('with no qcuda device: cuInit says CUDA_ERROR_NO_DEVICE, calls before it NOT_INITIALIZED, and the export tables are served', (t) => {
  const src = path.join(work, 'nodev.c');
  fs.writeFileSync(
    src,
    `
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
typedef int (*f_int)(int *);
typedef int (*f_init)(unsigned int);
typedef int (*f_et)(const void **, const unsigned char *);
typedef int (*f_ptr)(unsigned long long *, size_t);
int main(int argc, char **argv) {
  (void)argc;
  void *l = dlopen(argv[1], RTLD_NOW);
  if (!l) { printf("dlopen %s\\n", dlerror()); return 1; }
  int v = 0, n = -1, r;
  const void *tab = 0;
  unsigned long long p = 0;
  static const unsigned char integrity[16] = {0xd4,0x08,0x20,0x55,0xbd,0xe6,0x70,0x4b,0x8d,0x34,0xba,0x12,0x3c,0x66,0xe1,0xf2};
  static const unsigned char unknown[16] = {1,2,3};
  printf("count before init %d\\n", ((f_int)dlsym(l, "cuDeviceGetCount"))(&n));
  printf("alloc before init %d\\n", ((f_ptr)dlsym(l, "cuMemAlloc_v2"))(&p, 16));
  printf("init %d\\n", ((f_init)dlsym(l, "cuInit"))(0));
  printf("init flags %d\\n", ((f_init)dlsym(l, "cuInit"))(1));
  r = ((f_int)dlsym(l, "cuDriverGetVersion"))(&v);
  printf("version %d %d\\n", r, v);
  r = ((f_et)dlsym(l, "cuGetExportTable"))(&tab, integrity);
  printf("integrity table %d %zu\\n", r, tab ? *(const size_t *)tab : 0);
  r = ((f_et)dlsym(l, "cuGetExportTable"))(&tab, unknown);
  printf("unknown table %d %p\\n", r, tab);
  printf("stub %d\\n", ((f_init)dlsym(l, "cuGraphAddBatchMemOpNode"))(0));
  void *fn = (void *)1;
  r = ((int (*)(const char *, void **, int, unsigned long long))dlsym(l, "cuGetProcAddress"))("cuNoSuchThing", &fn, 13000, 0);
  printf("v1 unknown %d %p\\n", r, fn);
  return 0;
}`,
  );
  const exe = cc('nodev', src, '-ldl');
  const r = run(exe, [LIB]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.is(
    r.stdout,
    [
      'count before init 3', // CUDA_ERROR_NOT_INITIALIZED
      'alloc before init 3',
      'init 100', // CUDA_ERROR_NO_DEVICE
      'init flags 1', // CUDA_ERROR_INVALID_VALUE
      'version 0 13000', // before a device answers: CUDA 13.0, what this library implements
      'integrity table 0 24', // three slots
      'unknown table 1 (nil)',
      'stub 801', // CUDA_ERROR_NOT_SUPPORTED
      'v1 unknown 500 (nil)', // CUDA_ERROR_NOT_FOUND: the CUDA 11.3 ABI has no status to say it with
      '',
    ].join('\n'),
  );
  t.regex(r.stderr, /qcuda: cuGraphAddBatchMemOpNode is not supported/);
});

test("the integrity check's MD2 matches RFC 1319, and versions ending in 0 and 1 get their fixed answers", (t) => {
  const dir = path.join(ROOT, 'guest-driver/libcuda');
  const exe = cc('md2', `-I${dir}`, path.join(ROOT, 'test/libcuda/md2_vectors.c'), path.join(dir, 'integrity.c'));
  const r = run(exe, [
    '',
    'a',
    'abc',
    'message digest',
    'abcdefghijklmnopqrstuvwxyz',
    '12345678901234567890123456789012345678901234567890123456789012345678901234567890',
  ]);
  t.is(r.status, 0, r.stderr);
  const lines = r.stdout.split('\n');
  t.deepEqual(lines.slice(0, 8), [
    '8350e5a3e24c153df2275c9f80692773 ',
    '32ec01ec4a6dac72c0ab96fb34c0b5d1 a',
    'da853b0d3f88d99b30283a69e6ded6bb abc',
    'ab4f496bfb2a530b219ff33031fe06b0 message digest',
    '4e8ddff3650292ab5a4108c3aa47940b abcdefghijklmnopqrstuvwxyz',
    'd5976f79d83d3a0dc9806c3c66f3efd8 12345678901234567890123456789012345678901234567890123456789012345678901234567890',
    '13000 3341181c03cb675c 8ed383aa1f4cd1e8',
    '13001 1841181c03cb675c 8ed383aa1f4cd1e8',
  ]);
  // 13002: an HMAC over the (here all-zero) inputs; the guest run checks it
  // against the real runtime, which refuses a wrong one.
  t.regex(lines[8], /^13002 [0-9a-f]{16} [0-9a-f]{16}$/);
  t.notRegex(lines[8], /^13002 0{16} 0{16}$/);
});

test('a fat binary crosses with only the entries the device runs: its SASS of that major version, else its newest PTX, else all of it', (t) => {
  const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';
  const src = path.join(work, 'k.cu');
  const fatbin = path.join(work, 'k.fatbin');
  fs.writeFileSync(src, '__global__ void k(int *p) { *p = 1; }\n');
  const nv = spawnSync(
    `${CUDA}/bin/nvcc`,
    [
      '-fatbin',
      '-gencode',
      'arch=compute_80,code=sm_80',
      '-gencode',
      'arch=compute_90,code=[sm_90,compute_90]',
      '-gencode',
      'arch=compute_90a,code=sm_90a',
      '-o',
      fatbin,
      src,
    ],
    { encoding: 'utf8' },
  );
  t.is(nv.status, 0, nv.stderr);
  const lib = path.join(ROOT, 'guest-driver/lib');
  const exe = cc(
    'fatbin_select',
    `-I${lib}`,
    `-I${ROOT}/guest-driver/include`,
    `-I${CUDA}/include`,
    path.join(ROOT, 'test/libcuda/fatbin_select.c'),
    path.join(lib, 'fatbin.c'),
    path.join(lib, 'sha256.c'),
  );
  const r = run(exe, [fatbin, '90', '86', '80', '75', '100', '0']);
  t.is(r.status, 0, r.stderr);
  const { createHash } = require('node:crypto') as typeof import('node:crypto');
  t.deepEqual(r.stdout.split('\n'), [
    `sha256 ${createHash('sha256').update(fs.readFileSync(fatbin)).digest('hex')}`, // the library names images as node does
    'sm 90: sass90 sass90', // sm_90 and sm_90a
    'sm 86: sass80', // 8.x runs 8.0 code
    'sm 80: sass80',
    'sm 75: whole', // nothing it runs: the driver says so, as natively
    'sm 100: ptx90', // no SASS of its generation: PTX, JIT-compiled by the driver
    'sm 0: whole', // no compute capability (the emu provider)
    '',
  ]);
});
