#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// Writes the tracer's wrappers (README.md), at build time, from CUDA's
// headers as gen-libcuda.mjs reads them: every `CUresult name(...)` export of
// cuda.h and cudaProfiler.h under every ABI (today's names, _ptsz/_ptds, the
// old ones), each a typed wrapper that logs its inputs, calls the real
// library's entry point of that name and logs the result and outputs.
//
//   node gen-trace.mjs --cuda=/usr/local/cuda --out=DIR
//
// writes DIR/wrappers.c. Node 20, no dependencies.

import fs from 'node:fs';
import path from 'node:path';
import { GenError, readCudaHeaders, countParams, cmp, runMain } from '../libcuda/gen-libcuda.mjs';

const ME = 'gen-trace';
const die = (msg) => {
  throw new GenError(msg);
};

// Written by hand (procaddr.c, xtable.c): what they return is wrapped too.
const HAND_WRITTEN = ['cuGetProcAddress', 'cuGetProcAddress_v2', 'cuGetExportTable'];

// Integer typedefs that are handles (device addresses, object ids): logged
// as addresses, which the diff ignores.
const ADDRESS_INTS = new Set([
  'CUdeviceptr',
  'CUdeviceptr_v1',
  'CUdeviceptr_v2',
  'CUtexObject',
  'CUtexObject_v1',
  'CUsurfObject',
  'CUsurfObject_v1',
  'CUmemGenericAllocationHandle',
  'CUmemGenericAllocationHandle_v1',
  'CUgraphConditionalHandle',
]);

// Arrays whose length is another parameter: function -> parameter -> the C
// expression of its length (clamped to 16 elements at run time).
const ARRAYS = {
  cuTensorMapEncodeTiled: { globalDim: 'tensorRank', globalStrides: 'tensorRank - 1', boxDim: 'tensorRank', elementStrides: 'tensorRank' },
  cuTensorMapEncodeIm2col: {
    globalDim: 'tensorRank',
    globalStrides: 'tensorRank - 1',
    pixelBoxLowerCorner: 'tensorRank - 2',
    pixelBoxUpperCorner: 'tensorRank - 2',
    elementStrides: 'tensorRank',
  },
  cuTensorMapEncodeIm2colWide: { globalDim: 'tensorRank', globalStrides: 'tensorRank - 1', elementStrides: 'tensorRank' },
};

function parseArgs(argv) {
  const opts = { cuda: '/usr/local/cuda', out: null };
  for (const a of argv) {
    const m = /^--(cuda|out)=(.+)$/.exec(a);
    if (!m) die(`bad argument '${a}'\nusage: node gen-trace.mjs --cuda=CUDA_HOME --out=DIR`);
    opts[m[1]] = m[2];
  }
  if (!opts.out) die('--out=DIR is required');
  return opts;
}

// One parameter's text ("const CUDA_MEMCPY2D *pCopy"): its name, whether the
// pointee is const, its base type name and pointer depth.
function parseParam(fn, text) {
  const m = /^(const\s+)?([A-Za-z_][\w\s]*?)\s*((?:\*\s*)*)([A-Za-z_]\w*)$/.exec(text.trim());
  if (!m) die(`${fn}: cannot parse parameter '${text}'`);
  const base = m[2].trim();
  const name = m[4];
  if (/^(unsigned|signed|int|char|short|long|const)$/.test(name) || base === '') die(`${fn}: parameter '${text}' has no name`);
  return { name, isConst: Boolean(m[1]), base, depth: (m[3].match(/\*/g) ?? []).length };
}

function splitParams(fn, params) {
  if (countParams(params) === 0) return [];
  return params.split(',').map((p) => parseParam(fn, p));
}

// What a parameter logs before the call (in) and after a successful one (out).
function render(fn, p) {
  const n = p.name;
  const len = ARRAYS[fn]?.[n];
  if (len !== undefined) return { in: `TR_ARR(&r, ${n}, ${len});` };
  if (p.depth === 0) return { in: ADDRESS_INTS.has(p.base) ? `TR_ADDR(&r, ${n});` : `TR_VAL(&r, ${n});` };
  if (p.base === 'char' && p.depth === 1)
    return p.isConst ? { in: `TR_STR(&r, ${n});` } : { in: `TR_ADDR(&r, ${n});`, out: `TR_OUT_STR(&r, ${n});` };
  if (p.base === 'char' && p.depth === 2 && p.isConst) return { in: `TR_ADDR(&r, ${n});`, out: `TR_OUT_STRP(&r, ${n});` };
  if (p.base === 'CUlaunchConfig' && p.isConst && p.depth === 1) return { in: `TR_LAUNCH_CONFIG(&r, ${n});` };
  if (p.base === 'void' && p.depth === 1) return { in: `TR_ADDR(&r, ${n});` };
  if (p.depth >= 2)
    return p.isConst && p.base !== 'void' ? { in: `TR_ADDR(&r, ${n});` } : { in: `TR_ADDR(&r, ${n});`, out: `TR_OUT_ADDR(&r, ${n});` };
  if (p.isConst) return { in: `TR_IN_PTR(&r, ${n});` };
  return { in: `TR_ADDR(&r, ${n});`, out: ADDRESS_INTS.has(p.base) ? `TR_OUT_ADDR(&r, ${n});` : `TR_OUT(&r, ${n});` };
}

// Locals are tr_-prefixed: no parameter of cuda.h is named so.
function wrapper(fn, params) {
  const ps = splitParams(fn, params);
  for (const p of ps) if (p.name.startsWith('tr_')) die(`${fn}: parameter ${p.name} clashes with the wrappers' locals`);
  const args = ps.map((p) => p.name).join(', ');
  const rs = ps.map((p) => render(fn, p));
  const outs = rs.filter((x) => x.out).map((x) => `\t\t${x.out.replace('&r', '&tr_r')}`);
  return [
    `TR_EXPORT CUresult tw_${fn}(${params || 'void'}) __asm__("${fn}");`,
    `TR_EXPORT CUresult tw_${fn}(${params || 'void'})`,
    '{',
    `\tstatic struct tr_fn tr_f = { "${fn}" };`,
    `\t__typeof__(tw_${fn}) *tr_fp = tr_real(&tr_f);`,
    '\tstruct tr_rec tr_r;',
    '\tCUresult tr_res;',
    '',
    '\tif (!tr_fp)',
    '\t\treturn tr_missing(&tr_f);',
    '\tif (tr_nested())',
    `\t\treturn tr_fp(${args});`,
    '\ttr_begin(&tr_r, "c", tr_f.name);',
    ...rs.map((x) => `\t${x.in.replace('&r', '&tr_r')}`),
    '\ttr_enter(&tr_r);',
    `\ttr_res = tr_fp(${args});`,
    '\ttr_result(&tr_r, tr_res);',
    ...(outs.length ? ['\tif (tr_res == CUDA_SUCCESS) {', ...outs, '\t}'] : []),
    '\ttr_end(&tr_r);',
    '\treturn tr_res;',
    '}',
    '',
  ];
}

// CUresult's enumerators, from the preprocessed header's text.
function resultNames(inc) {
  const text = fs.readFileSync(path.join(inc, 'cuda.h'), 'utf8');
  const body = /typedef enum cudaError_enum \{([\s\S]*?)\} CUresult;/.exec(text);
  if (!body) die('cuda.h: no CUresult enum');
  const names = [...body[1].matchAll(/^\s*(CUDA_[A-Z0-9_]+)\s*=\s*(\d+)/gm)].map((m) => ({ name: m[1], code: Number(m[2]) }));
  if (names.length < 50) die(`cuda.h: only ${names.length} CUresult names`);
  return names;
}

function main() {
  const opts = parseArgs(process.argv.slice(2));
  const { inc, version, funcs } = readCudaHeaders(opts.cuda);
  const names = [...funcs.keys()].sort(cmp);
  for (const h of HAND_WRITTEN) if (!funcs.has(h)) die(`${h} is not in cuda.h any more`);
  const generated = names.filter((n) => !HAND_WRITTEN.includes(n));
  const lines = [
    '/* SPDX-License-Identifier: MIT */',
    `/* Generated by gen-trace.mjs from CUDA ${version}'s cuda.h and cudaProfiler.h: do not edit. */`,
    '#include "trace.h"',
    '',
  ];
  for (const n of generated) lines.push(...wrapper(n, funcs.get(n)));
  lines.push(...HAND_WRITTEN.map((n) => `extern void tw_${n}(void) __asm__("${n}");`), '');
  lines.push('/* Every wrapper by the name it wraps, in strcmp order (tr_wrapper searches it). */');
  lines.push('const struct tr_wrapper tr_wrappers[] = {', ...names.map((n) => `\t{ "${n}", (void *)tw_${n} },`), '};');
  lines.push('const unsigned int tr_nwrappers = sizeof(tr_wrappers) / sizeof(tr_wrappers[0]);', '');
  lines.push('const struct tr_errname tr_errnames[] = {', ...resultNames(inc).map((e) => `\t{ ${e.code}, "${e.name}" },`), '};');
  lines.push('const unsigned int tr_nerrnames = sizeof(tr_errnames) / sizeof(tr_errnames[0]);', '');
  fs.mkdirSync(opts.out, { recursive: true });
  fs.writeFileSync(path.join(opts.out, 'wrappers.c'), lines.join('\n'));
  process.stderr.write(`${ME}: CUDA ${version}: ${generated.length} wrappers, ${HAND_WRITTEN.length} written by hand\n`);
}

runMain(ME, main);
