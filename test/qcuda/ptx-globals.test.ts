// The device memory a PTX image's .global and .const variables take, read
// exactly or refused (ptx-globals.ts; security review 2, M3): the forms that
// evaded the old pattern, the forms ptxas (CUDA 13) was seen to accept that
// a looser reading would miss, what nvcc and Triton emit, and, where ptxas
// is here, a cross-check that the count is never below what ptxas lays out.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { checkImage } from '../../backend/src/qcuda/modules/module-image';
import { ptxGlobalBytes } from '../../backend/src/qcuda/modules/ptx-globals';

const HEAD = '//\n.version 8.0\n.target sm_90\n.address_size 64\n';
const GiB8 = 8n << 30n;

/** The count, or 'refused' with cudaErrorInvalidPtx. */
function count(text: string): bigint | 'refused' {
  try {
    return ptxGlobalBytes(text);
  } catch (e) {
    if (e instanceof CudaError && e.code === CudaErr.InvalidPtx) return 'refused';
    throw e;
  }
}

/** Declarations the old pattern read as 0 or 1 byte (ptx-estimate.js and ptxas runs). */
const EVASIONS: Record<string, string> = {
  "a #define'd size": `${HEAD}#define N 8589934592\n.global .b8 big[N];`,
  'an expression as the size': `${HEAD}.global .b8 big[8*1073741824];`,
  'a second declarator': `${HEAD}.global .b8 small[1], big[8589934592];`,
  'a comment between tokens': `${HEAD}.global /* x */ .b8 big[8589934592];`,
  'an unknown type token': `${HEAD}.global .b8x big[8589934592];`,
  // ptxas accepted each of these and laid out the variable (the driver's JIT took 256 MiB for the
  // first two, and for the second declarator and the comment above: H200, driver 580):
  "a declaration glued to .target's argument": '.version 8.0\n.target sm_90.global .b8 big[8589934592];',
  'a declaration after a function prototype named like an opcode': `${HEAD}.extern .func ld\n.global .b8 big[8589934592];`,
  'directives without spaces': `${HEAD}.visible.global.b8 big[8589934592];`,
  'a declaration after a label in a body': `${HEAD}.visible .entry k() { L1: .global .b8 big[8589934592]; ret; }`,
  'a declaration after .loc (no ;)': `${HEAD}.file 1 "a.cu"\n.visible .entry k() {\n.loc 1 2 3\n.global .b8 big[8589934592];\nret; }`,
  'a line comment ended by a carriage return': `${HEAD}// x\r.global .b8 big[8589934592];`,
  'a string that looks like a comment': `${HEAD}.pragma "/*"; .global .b8 big[8589934592]; .pragma "*/";`,
  'a hex size': `${HEAD}.global .b8 big[0x200000000];`,
  'a .const': `${HEAD}.const .b8 big[8589934592];`,
  // ptxas laid out three 1-byte variables aligned to 1 MiB in 2 MiB + 1 bytes:
  'alignment padding: 8192 variables of 1 byte, each aligned to 1 MiB': `${HEAD}.global .align 1048576 .b8 a<8192>;`,
};

test('PTX that evaded the pattern is counted in full or refused (review 2, M3)', (t) => {
  for (const [what, text] of Object.entries(EVASIONS)) {
    const n = count(text);
    t.true(n === 'refused' || n >= GiB8, `${what}: ${n}`);
    // The same through checkImage, as MODULE_LOAD sees it.
    const img = new Uint8Array(Buffer.from(`${text}\n\0`, 'latin1'));
    const got = (() => {
      try {
        return checkImage(img).globalBytes;
      } catch (e) {
        return (e as CudaError).code;
      }
    })();
    t.true(got === CudaErr.InvalidPtx || (typeof got === 'bigint' && got >= GiB8), `${what}: checkImage says ${got}`);
  }
  t.is(count(EVASIONS["a #define'd size"]), 'refused');
  t.is(count(EVASIONS['an expression as the size']), 'refused');
  t.is(count(EVASIONS['a second declarator']), GiB8 + 1n);
  t.is(count(EVASIONS['a comment between tokens']), GiB8);
  t.is(count(EVASIONS["a declaration glued to .target's argument"]), GiB8);
});

test('what could make the driver read other declarations than this parser is refused with cudaErrorInvalidPtx', (t) => {
  const refused: Record<string, string> = {
    '#include': `${HEAD}#include "x.h"`,
    '#if': `${HEAD}#if 0\n.global .b8 x[1];\n#endif`,
    'a line continuation': `${HEAD}.global .b8 \\\nbig[1024];`,
    'a /* comment that does not end': `${HEAD}/* .global .b8 big[1024];`,
    'a string that does not end on its line': `${HEAD}.pragma "x\n.global .b8 big[1024]; ";`,
    'a string with a backslash': `${HEAD}.pragma "\\"; .global .b8 big[1024]; ";`,
    'a string naming a state space': `${HEAD}.pragma ".global .b8 x[1]";`,
    'a control byte between tokens': `${HEAD}.global\x01.b8 big[1024];`,
    'a byte outside ASCII between tokens': `${HEAD}.global\xa0.b8 big[1024];`,
    'a size in parentheses': `${HEAD}.global .b8 big[(1024)];`,
    'a negative size': `${HEAD}.global .b8 big[-1];`,
    'a size with a suffix other than U': `${HEAD}.global .b8 big[1024ULL];`,
    'a size left out after the first dimension': `${HEAD}.global .b8 big[4][] = {1};`,
    'a state space in an initializer': `${HEAD}.global .u64 p = x .global .b8 big[1024];`,
    'a state space in .attribute': `${HEAD}.global .attribute(.global) .b8 x;`,
    'a state space in a debug section': `${HEAD}.section .debug_str { ld: .b8 0\n.global .b8 big[1024];\n}`,
    'a declaration cut off': `${HEAD}.global .b8 big[1024]`,
    "an instruction's operands read as a declaration (ld at module scope)": `${HEAD}x .global .u32 %r1, [a];`,
  };
  for (const [what, text] of Object.entries(refused)) {
    const e = t.throws(() => ptxGlobalBytes(text), { instanceOf: CudaError }, what);
    t.is(e?.code, CudaErr.InvalidPtx, what);
    t.regex(e?.message ?? '', /^module image: PTX whose device memory cannot be counted exactly: /, what);
  }
});

/** What nvcc 13, NVRTC and Triton emit (trimmed), with the bytes each declares. */
const COMPILED: [string, string, bigint][] = [
  [
    'nvcc: initialised arrays, linkage, strings',
    `${HEAD}.extern .func (.param .b32 func_retval0) vprintf\n(\n.param .b64 vprintf_param_0,\n.param .b64 vprintf_param_1\n)\n;\n` +
      '.global .align 4 .b8 counter[16] = {1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4};\n.global .align 1 .b8 $str[4] = {115, 97, 121, 0};\n' +
      '.visible .global .align 8 .u64 p = generic($str);\n.weak .global .align 4 .u32 w;\n.common .global .align 8 .b8 cm[24];\n',
    16n + 3n + 4n + 8n + 7n + 4n + 3n + 24n + 7n,
  ],
  [
    'nvcc: __constant__, __managed__, vectors, 2-D',
    `${HEAD}.const .align 4 .b8 coeffs[1024];\n.const .align 4 .u32 cscalar = 3;\n` +
      '.global .attribute(.managed) .align 4 .b8 managed_counter[40];\n.visible .global .align 16 .v4 .f32 a[2][3];\n',
    1024n + 3n + 4n + 3n + 40n + 3n + 96n + 15n,
  ],
  [
    'externs and shared memory take nothing',
    `${HEAD}.extern .global .align 4 .b32 x;\n.extern .global .b8 y[];\n.extern .shared .align 16 .b8 smem[];\n.shared .align 4 .b8 s[4096];\n.local .b8 l[64];\n`,
    0n,
  ],
  [
    'an array sized by its initializer',
    `${HEAD}.global .b32 u[] = {1, 2, 3};\n.global .v2 .b32 v[] = {{1, 2}, {3, 4}};\n`,
    12n + 3n + 16n + 7n,
  ],
  [
    "instructions' state spaces, kernel parameter pointees, .loc, guards (ptxas assembles it)",
    '//\n.version 8.0\n.target sm_90a\n.address_size 64\n.file 1 "k.cu"\n' +
      '.visible .entry k(\n\t.param .u64 .ptr .global .align 1 k_param_0,\n\t.param .u64 .ptr.const.align 4 k_param_1\n)\n.reqntid 128, 1, 1\n{\n' +
      '\t.reg .pred %p<3>;\n\t.reg .b32 %r<9>;\n\t.reg .b64 %rd<4>;\n\t.shared .align 16 .b8 sm[1024];\n\t.loc 1 10 5\n' +
      '\tld.param.u64 %rd1, [k_param_0];\n\tcvta.to.global.u64 %rd2, %rd1;\n\tsetp.eq.u64 %p1, %rd1, 0;\n' +
      '\t@%p1 ld.global.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd2 + 0 ];\n\t@!%p1 st.global.b32 [%rd2], %r1;\n' +
      '\tld.param.u64 %rd3, [k_param_1];\n\tld.const.u32 %r5, [%rd3];\n\tld .global .u32 %r6, [%rd2];\n\tatom.global.add.u32 %r7, [%rd2], 1;\n' +
      '\tmov.u32 %r8, sm;\n\tcp.async.cg.shared.global [ %r8 + 0 ], [ %rd2 + 0 ], 16;\n' +
      '\tcp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r8], [%rd2], 16, [%r8+512];\n' +
      '\tmbarrier.try_wait.parity.shared::cta.b64 %p2, [%r8+512], %r7;\n\tfence.proxy.async.shared::cta;\n$L__BB0_2:\n\tret;\n}\n',
    0n,
  ],
  [
    '.loc with the inlining clauses',
    `${HEAD}.visible .entry k() {\n.loc 1 12 7, function_name $L__info_string0+4, inlined_at 1 10 5\nret;\n}\n.global .b8 g[8];\n`,
    8n,
  ],
  [
    'Triton: its assert strings, shared memory, debug sections',
    `//\n// Generated by LLVM NVPTX Back-End\n//\n\n.version 8.4\n.target sm_90a\n.address_size 64\n\n` +
      '\t// .globl\tmatmul_kernel\n.extern .shared .align 16 .b8 global_smem[];\n.global .align 1 .b8 assertFunc_0[8] = {117, 110, 107, 110, 111, 119, 110, 0};\n' +
      '.visible .entry matmul_kernel(\n\t.param .u64 .ptr .global .align 1 matmul_kernel_param_0\n)\n.maxntid 128, 1, 1\n{\n\t.reg .b32 %r<2>;\n$L__func_begin0:\n\t.loc\t1 10 0\n\tret;\n$L__tmp0:\n}\n' +
      '\t.file\t1 "/tmp/x/kernel.py"\n\t.section\t.debug_abbrev\n\t{\n.b8 1\n.b8 17\n.b8 0\n\t}\n\t.section\t.debug_info\n\t{\n.b32 120\n.b32 .debug_abbrev\n.b64 $L__func_begin0\n\t}\n\t.section\t.debug_macinfo\t{\t}\n',
    8n,
  ],
];

test('what nvcc, NVRTC and Triton emit is counted exactly (bytes, and at most align - 1 of padding a variable)', (t) => {
  for (const [what, text, bytes] of COMPILED) t.is(count(text), bytes, what);
});

/**
 * PTX as compilers wrote it (fixtures/ptx), made on the H200 (CUDA 13, driver
 * 580): Triton 3.6 kernels (an elementwise add with a device assert, a
 * wgmma matmul, TMA tensor descriptors) and NVRTC's (globals, a __constant__
 * array, printf; -G and -lineinfo), with what each declares (the assert
 * strings, printf's format, the arrays, and their alignment's padding).
 */
const FIXTURES = path.resolve(__dirname, '..', '..', '..', 'test', 'qcuda', 'fixtures', 'ptx');
const WRITTEN: [string, bigint][] = [
  ['triton_add.ptx', 84n],
  ['triton_mm.ptx', 300n],
  ['triton_tma.ptx', 60n],
  ['nvrtc_compute_80-G.ptx', 1103n],
  ['nvrtc_compute_90-lineinfo.ptx', 1103n],
];
const fixture = (name: string) => fs.readFileSync(path.join(FIXTURES, name), 'latin1');

test('PTX that Triton and NVRTC wrote is counted exactly, and loads through checkImage', (t) => {
  for (const [name, bytes] of WRITTEN) {
    t.is(count(fixture(name)), bytes, name);
    t.is(checkImage(new Uint8Array(Buffer.from(fixture(name), 'latin1'))).globalBytes, bytes, `${name} through checkImage`);
  }
});

const HAVE_PTXAS = spawnSync('ptxas', ['--version']).status === 0;
const KERNELS_CU = path.resolve(__dirname, '..', '..', '..', 'test', 'qcuda', 'fixtures', 'kernels.cu');
const HAVE_NVCC = HAVE_PTXAS && fs.existsSync(KERNELS_CU) && spawnSync('nvcc', ['--version']).status === 0;

/** What ptxas lays out for the text's variables: the .nv.global* and .nv.constant3 sections of its cubin (undefined: it refused the text). */
function ptxasBytes(dir: string, text: string): bigint | undefined {
  const src = path.join(dir, 'x.ptx');
  const out = path.join(dir, 'x.cubin');
  fs.writeFileSync(src, text, 'latin1');
  fs.rmSync(out, { force: true });
  const arch = /\.target\s+(sm_\w+)/.exec(text)?.[1] ?? 'sm_90';
  if (spawnSync('ptxas', [`-arch=${arch}`, src, '-o', out]).status !== 0) return undefined;
  const names = spawnSync('readelf', ['-S', '-W', out], { encoding: 'utf8' }).stdout;
  let n = 0n;
  for (const m of names.matchAll(/\]\s+(\S+)\s+\S+\s+\S+\s+\S+\s+([0-9a-f]+)/g))
    if (m[1].startsWith('.nv.global') || m[1] === '.nv.constant3') n += BigInt(`0x${m[2]}`);
  return n;
}

(HAVE_PTXAS ? test : test.skip)(
  "never less than ptxas lays out: the forms above, the evasions it accepts, and nvcc's PTX of kernels.cu",
  (t) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-ptx-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const texts: [string, string][] = [
      ...COMPILED.map(([w, s]): [string, string] => [w, s]),
      ...Object.entries(EVASIONS),
      ...WRITTEN.map(([n]): [string, string] => [n, fixture(n)]),
    ];
    if (HAVE_NVCC) {
      for (const flags of [['-arch=sm_90'], ['-arch=sm_90', '-lineinfo'], ['-arch=sm_80', '-G'], ['-arch=sm_90', '-rdc=true']]) {
        execFileSync('nvcc', ['-ptx', ...flags, '-o', path.join(dir, 'k.ptx'), KERNELS_CU], { stdio: 'pipe' });
        texts.push([`nvcc ${flags.join(' ')}`, fs.readFileSync(path.join(dir, 'k.ptx'), 'latin1')]);
      }
    }
    let compared = 0;
    for (const [what, text] of texts) {
      const laid = ptxasBytes(dir, text);
      if (laid === undefined) {
        t.log(`ptxas refuses: ${what}`);
        continue;
      } // so does the driver's JIT
      const n = count(text);
      t.true(n !== 'refused' && n >= laid, `${what}: counted ${n}, ptxas laid out ${laid}`);
      compared++;
    }
    t.log(`${compared} of ${texts.length} texts assembled by ptxas; none counted below its layout`);
    t.true(compared >= COMPILED.length);
  },
);
