// guest-driver/libcuda/gen-libcuda.mjs run on CUDA 13's real headers: the
// exported names, the NOT_SUPPORTED stubs and the cuGetProcAddress table it
// derives, and that the C it writes compiles warning-free.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const GEN = path.join(ROOT, 'guest-driver/libcuda/gen-libcuda.mjs');
const REQUESTS = path.join(ROOT, 'guest-driver/libcuda/gpa-requests.txt');
const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';
const FORWARDS = path.join(ROOT, 'guest-driver/libcuda/forwards.def');
const CFLAGS = [
  '-std=gnu11',
  '-Wall',
  '-Wextra',
  '-Werror',
  '-D__CUDA_API_VERSION_INTERNAL',
  `-I${CUDA}/include`,
  `-I${ROOT}/guest-driver/include`,
  `-I${ROOT}/guest-driver/libcuda`,
];

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-libcuda-gen-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

function gen(out: string, ...extra: string[]) {
  return spawnSync(process.execPath, [GEN, `--cuda=${CUDA}`, `--out=${out}`, ...extra], { encoding: 'utf8' });
}

interface Gen {
  status: number | null;
  stderr: string;
  exports: string[];
  procs: string;
  stubs: string;
  map: string;
  out: string;
  fwdStatus: number | null;
  fwdStderr: string;
  forwards: string;
  twins: string;
}
let generated: Gen;
test.before(() => {
  const out = path.join(work, 'out');
  const defined = path.join(work, 'defined.txt');
  fs.writeFileSync(defined, 'cuInit\ncu_result\n');
  const r = gen(out, `--defined=${defined}`, `--requests=${REQUESTS}`);
  const f = gen(out, `--forwards=${FORWARDS}`);
  const read = (f: string) => (fs.existsSync(path.join(out, f)) ? fs.readFileSync(path.join(out, f), 'utf8') : '');
  generated = {
    status: r.status,
    stderr: r.stderr,
    out,
    exports: read('exports.txt').split('\n').filter(Boolean),
    procs: read('procs.c'),
    stubs: read('stubs.c'),
    map: read('libcuda.map'),
    fwdStatus: f.status,
    fwdStderr: f.stderr,
    forwards: read('forwards.c'),
    twins: read('cu_twins.h'),
  };
});

test('it succeeds and reports its counts', (t) => {
  t.is(generated.status, 0, generated.stderr);
  t.regex(generated.stderr, /\b6[0-9][0-9] exports\b/);
  t.regex(generated.stderr, /\b\d+ cuGetProcAddress rows\b/);
  t.regex(generated.stderr, /cuGraphInstantiate 12000 -> cuGraphInstantiateWithFlags/);
  // Requested but without any typedef: the interop functions, not in cuda.h.
  t.regex(generated.stderr, /not found\): .*\bcuGLInit\b/);
});

test('exports.txt: every cuda.h entry point under every ABI, nothing else', (t) => {
  const names = generated.exports;
  t.true(names.length > 600, `${names.length} names`);
  t.deepEqual(names, [...new Set(names)].sort());
  for (const n of [
    'cuInit',
    'cuMemAlloc',
    'cuMemAlloc_v2',
    'cuCtxCreate',
    'cuCtxCreate_v2',
    'cuCtxCreate_v3',
    'cuCtxCreate_v4',
    'cuMemcpyHtoDAsync_v2_ptsz',
    'cuMemcpy_ptds',
    'cuGetProcAddress',
    'cuGetProcAddress_v2',
    'cuLaunchKernelEx',
    'cuLaunchKernelEx_ptsz',
    'cuLibraryLoadData',
    'cuCtxSynchronize_v2',
    'cuProfilerStart',
    'cuProfilerStop',
  ]) {
    t.true(names.includes(n), n);
  }
  t.false(names.includes('cuGetProcAddress_v2_ptsz'));
  t.deepEqual(
    names.filter((n) => !/^cu[A-Z]/.test(n) || n.startsWith('cuda')),
    [],
  );
  // The version script lists exactly them.
  const listed = [...generated.map.matchAll(/^\s+(cu\w+);$/gm)].map((m) => m[1]);
  t.deepEqual(listed, names);
  t.regex(generated.map, /^\{\s+global:[\s\S]*local: \*;\s*\};\s*$/);
});

test('procs.c: the rows, sorted, mapped to the right ABI', (t) => {
  const rows = [...generated.procs.matchAll(/^\t\{ "(\w+)", (\d+), ([01]), \(void \*\)qc_fn_(\w+) \},$/gm)].map((m) => ({
    name: m[1],
    version: Number(m[2]),
    ptds: Number(m[3]),
    fn: m[4],
  }));
  t.true(rows.length > 600, `${rows.length} rows`);
  const key = (r: { name: string; version: number; ptds: number }) => `${r.name} ${r.version} ${r.ptds}`;
  const byKey = new Map(rows.map((r) => [key(r), r.fn]));
  t.is(byKey.size, rows.length);
  for (let i = 1; i < rows.length; i++) {
    const a = rows[i - 1];
    const b = rows[i];
    const order = a.name < b.name ? -1 : a.name > b.name ? 1 : a.ptds - b.ptds || a.version - b.version;
    t.true(order < 0, `${key(a)} before ${key(b)}`);
  }
  const want: Array<[string, number, number, string]> = [
    ['cuMemAlloc', 2000, 0, 'cuMemAlloc'],
    ['cuMemAlloc', 3020, 0, 'cuMemAlloc_v2'],
    ['cuCtxCreate', 2000, 0, 'cuCtxCreate'],
    ['cuCtxCreate', 3020, 0, 'cuCtxCreate_v2'],
    ['cuCtxCreate', 11040, 0, 'cuCtxCreate_v3'],
    ['cuCtxCreate', 12050, 0, 'cuCtxCreate_v4'],
    ['cuCtxSynchronize', 2000, 0, 'cuCtxSynchronize'],
    ['cuCtxSynchronize', 13000, 0, 'cuCtxSynchronize_v2'],
    ['cuMemcpyHtoDAsync', 7000, 1, 'cuMemcpyHtoDAsync_v2_ptsz'],
    ['cuMemcpy', 7000, 1, 'cuMemcpy_ptds'],
    ['cuStreamGetCaptureInfo', 10010, 0, 'cuStreamGetCaptureInfo'],
    ['cuStreamGetCaptureInfo', 12030, 0, 'cuStreamGetCaptureInfo_v3'],
    ['cuStreamGetCaptureInfo', 12030, 1, 'cuStreamGetCaptureInfo_v3_ptsz'],
    ['cuGraphInstantiate', 10000, 0, 'cuGraphInstantiate'],
    ['cuGraphInstantiate', 11000, 0, 'cuGraphInstantiate_v2'],
    ['cuGraphInstantiate', 12000, 0, 'cuGraphInstantiateWithFlags'],
    ['cuGetProcAddress', 12000, 0, 'cuGetProcAddress_v2'],
    ['cuLaunchKernel', 7000, 1, 'cuLaunchKernel_ptsz'],
    ['cuProfilerStart', 4000, 0, 'cuProfilerStart'],
  ];
  for (const [name, version, ptds, fn] of want) t.is(byKey.get(`${name} ${version} ${ptds}`), fn, `${name} ${version} ${ptds}`);
  // Every function a row names is exported, and declared once.
  for (const r of rows) t.true(generated.exports.includes(r.fn), r.fn);
  const decls = [...generated.procs.matchAll(/^extern void qc_fn_(\w+)\(void\) __asm__\("(\w+)"\);$/gm)];
  t.deepEqual(
    decls.map((m) => m[1]),
    decls.map((m) => m[2]),
  );
  t.deepEqual(
    decls.map((m) => m[1]),
    [...new Set(rows.map((r) => r.fn))].sort(),
  );
  t.regex(generated.procs, /const unsigned int cu_nprocs = /);
});

test('stubs.c: everything not defined elsewhere', (t) => {
  const stubs = [...generated.stubs.matchAll(/^STUB\((\w+)\)$/gm)].map((m) => m[1]);
  t.false(stubs.includes('cuInit'));
  t.true(stubs.includes('cuMemAlloc_v2'));
  t.deepEqual(
    stubs,
    generated.exports.filter((n) => n !== 'cuInit'),
  );
  t.regex(generated.stubs, /do not edit/);
  t.regex(generated.stubs, /#include "cu\.h"/);
});

test('forwards.c: a definition per name of forwards.def and its twin; cu_twins.h: every _ptsz/_ptds export', (t) => {
  t.is(generated.fwdStatus, 0, generated.fwdStderr);
  const defs = [...generated.forwards.matchAll(/^CUresult (\w+)\(.*\)$/gm)].map((m) => m[1]);
  t.true(defs.includes('cuStreamSynchronize') && defs.includes('cuStreamSynchronize_ptsz'));
  t.regex(
    generated.forwards,
    /^CUresult cuStreamSynchronize_ptsz\(CUstream hStream\)\n\{\n\tCU_RUN\(cudaStreamSynchronize_ptsz\(\(cudaStream_t\)hStream\)\);\n\}$/m,
  );
  t.regex(generated.forwards, /^extern __typeof__\(cudaStreamSynchronize\) cudaStreamSynchronize_ptsz;$/m);
  t.regex(generated.forwards, /^#undef cuEventElapsedTime$/m);
  const twins = [...generated.twins.matchAll(/^CUresult (\w+)\(/gm)].map((m) => m[1]);
  t.deepEqual(
    twins,
    generated.exports.filter((n) => /_pt(sz|ds)$/.test(n)),
  );
});

test('a forwards.def line that names no entry point of cuda.h: exit 1 with the line', (t) => {
  const def = path.join(work, 'bad.def');
  fs.writeFileSync(
    def,
    '# one bad line\ncuStreamSynchronize  ptsz  cudaStreamSynchronize((cudaStream_t)hStream)\ncuNoSuchCall  -  cudaFree(0)\n',
  );
  const r = gen(path.join(work, 'badfwd'), `--forwards=${def}`);
  t.is(r.status, 1);
  t.regex(r.stderr, /error: bad\.def:3: cuNoSuchCall is not an entry point of cuda\.h/);
});

test('stubs.c, procs.c and forwards.c compile with cuda.h in scope, without warnings', (t) => {
  for (const f of ['stubs.c', 'procs.c', 'forwards.c']) {
    const r = spawnSync('gcc', [...CFLAGS, `-I${generated.out}`, '-fsyntax-only', path.join(generated.out, f)], { encoding: 'utf8' });
    t.is(r.status, 0, `${f}: ${r.stderr}`);
    t.is(r.stderr, '', f);
  }
});

test('the same input gives the same output', (t) => {
  const out = path.join(work, 'again');
  const defined = path.join(work, 'defined.txt');
  t.is(gen(out, `--defined=${defined}`).status, 0);
  for (const f of ['exports.txt', 'libcuda.map', 'nvcuda.def', 'stubs.c', 'procs.c'])
    t.is(fs.readFileSync(path.join(out, f), 'utf8'), fs.readFileSync(path.join(generated.out, f), 'utf8'), f);
});

test('a typedef it cannot map, a bad argument: exit 1 with the reason', (t) => {
  // The real headers, plus a third cuMemAlloc ABI that no exported name is.
  const inc = path.join(work, 'cuda', 'include');
  fs.mkdirSync(inc, { recursive: true });
  for (const f of ['cuda.h', 'cudaProfiler.h', 'cudaProfilerTypedefs.h']) fs.copyFileSync(path.join(CUDA, 'include', f), path.join(inc, f));
  const td = fs.readFileSync(path.join(CUDA, 'include', 'cudaTypedefs.h'), 'utf8');
  const extra = 'typedef CUresult (CUDAAPI *PFN_cuMemAlloc_v13000)(CUdeviceptr *dptr, size_t bytesize, int flags);\n';
  fs.writeFileSync(path.join(inc, 'cudaTypedefs.h'), td.replace(/(typedef CUresult \(CUDAAPI \*PFN_cuMemAlloc_v3020\))/, `${extra}$1`));
  const bad = gen(path.join(work, 'bad'), `--cuda=${path.join(work, 'cuda')}`);
  t.is(bad.status, 1);
  t.regex(bad.stderr, /error: cuMemAlloc: 3 typedef versions/);
  const usage = gen(path.join(work, 'bad2'), '--bogus=1');
  t.is(usage.status, 1);
  t.regex(usage.stderr, /bad argument '--bogus=1'/);
});
