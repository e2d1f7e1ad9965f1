#!/usr/bin/env node
// SPDX-License-Identifier: MIT
//
// Derives, from CUDA's headers, what qcuda's libcuda.so.1 exports and how
// cuGetProcAddress finds it. Run at build time (see README.md):
//
//   node gen-libcuda.mjs --cuda=/usr/local/cuda --out=DIR [--defined=NAMES]
//
// writes into DIR:
//   exports.txt   every entry point of cuda.h and cudaProfiler.h under every
//                 ABI (today's names, the _ptsz/_ptds ones, the old ones)
//   libcuda.map   a version script exporting exactly those names, and
//                 qcuda's own (QCUDA_EXPORTS)
//   nvcuda.def    the same names as nvcuda.dll's exports (Windows)
//   stubs.c       for each of them not named in NAMES (what the hand-written
//                 objects define), an entry point that returns
//                 CUDA_ERROR_NOT_SUPPORTED
//   procs.c       cu_procs[]: (name, version, ptds) -> entry point, one row
//                 per PFN_<name>_v<version>[_ptsz|_ptds] typedef of
//                 cudaTypedefs.h and cudaProfilerTypedefs.h
//
// Fails (exit 1) on anything it cannot map. Node 20, no dependencies.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ME = 'gen-libcuda';

class GenError extends Error {}
const die = (msg) => {
  throw new GenError(msg);
};
const note = (msg) => process.stderr.write(`${ME}: ${msg}\n`);

// ---------------------------------------------------------------- arguments

function parseArgs(argv) {
  const opts = { cuda: '/usr/local/cuda', out: null, defined: null, requests: null, forwards: null };
  for (const a of argv) {
    const m = /^--(cuda|out|defined|requests|forwards)=(.*)$/.exec(a);
    if (!m || m[2] === '')
      die(
        `bad argument '${a}'\nusage: node gen-libcuda.mjs --cuda=CUDA_HOME --out=DIR [--defined=NAMESFILE] [--requests=GPAFILE]\n` +
          '       node gen-libcuda.mjs --cuda=CUDA_HOME --out=DIR --forwards=DEFFILE',
      );
    opts[m[1]] = m[2];
  }
  if (!opts.out) die('--out=DIR is required');
  return opts;
}

// ------------------------------------------------------------ C text helpers

// Tokens of preprocessed or raw C: identifiers, numbers, string and character
// literals (kept whole), punctuation one character at a time. Comments and
// preprocessor lines must be gone already.
function tokenize(text) {
  const re = /\s+|([A-Za-z_][A-Za-z0-9_]*)|(\d[\w.]*)|("(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')|(\S)/gy;
  const toks = [];
  let m;
  while ((m = re.exec(text)) !== null) {
    const t = m[1] ?? m[2] ?? m[3] ?? m[4];
    if (t !== undefined) toks.push({ t, pos: m.index });
    if (re.lastIndex === text.length) break;
  }
  return toks;
}

function stripComments(text) {
  // Keeps string literals intact; replaces comments by a space.
  return text.replace(/("(?:[^"\\\n]|\\.)*")|\/\*[\s\S]*?\*\/|\/\/[^\n]*/g, (all, str) => str ?? ' ');
}

// Parameters of a parameter list's text (no outer parentheses): top-level
// commas + 1; "(void)" and "()" are 0.
function countParams(params) {
  const s = params.trim();
  if (s === '' || s === 'void') return 0;
  let depth = 0;
  let n = 1;
  for (const c of s) {
    if (c === '(' || c === '[' || c === '{') depth++;
    else if (c === ')' || c === ']' || c === '}') depth--;
    else if (c === ',' && depth === 0) n++;
  }
  return n;
}

// Index of the token closing the bracket opened at toks[i].
function closing(toks, i) {
  const open = toks[i].t;
  const close = { '(': ')', '[': ']', '{': '}' }[open];
  let depth = 0;
  for (let j = i; j < toks.length; j++) {
    if (toks[j].t === open) depth++;
    else if (toks[j].t === close && --depth === 0) return j;
  }
  die(`unbalanced '${open}' in preprocessed header`);
}

// ---------------------------------------------------------------- cuda.h

const MODES = [
  { key: 'plain', flags: [] },
  { key: 'ptds', flags: ['-DCUDA_API_PER_THREAD_DEFAULT_STREAM'] },
  { key: 'internal', flags: ['-D__CUDA_API_VERSION_INTERNAL'] },
];
const PROBE = '__qcuda_probe__';
// qcuda's own exports beside cuda.h's (not in exports.txt, which is CUDA's):
// qcuda_stats, the round trips so far (guest-driver/lib/batch.c).
const QCUDA_EXPORTS = ['qcuda_stats'];

function gccE(inc, flags, input) {
  try {
    return execFileSync('gcc', ['-E', '-P', ...flags, `-I${inc}`, '-x', 'c', '-'], {
      input,
      encoding: 'utf8',
      maxBuffer: 256 << 20,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
  } catch (e) {
    die(`gcc -E ${flags.join(' ')} failed: ${e.stderr || e.message}`);
  }
}

// Every `CUresult NAME(params)` declaration of preprocessed text, skipping
// typedefs and (static) inline definitions: Map name -> params text.
function declarations(text, mode) {
  const toks = tokenize(text);
  const out = new Map();
  let depth = 0; // brace depth
  let stmt = 0; // first token of the current top-level declaration
  for (let i = 0; i < toks.length; i++) {
    const t = toks[i].t;
    if (t === '{') {
      depth++;
      continue;
    }
    if (t === '}') {
      depth--;
      if (depth === 0) stmt = i + 1;
      continue;
    }
    if (depth > 0) continue;
    if (t === ';') {
      stmt = i + 1;
      continue;
    }
    if (t === '__attribute__' || t === '__asm__' || t === 'asm' || t === '__declspec') {
      if (toks[i + 1]?.t === '(') i = closing(toks, i + 1);
      continue;
    }
    if (t !== 'CUresult') continue;
    let j = i + 1;
    if (toks[j]?.t === 'CUDAAPI') j++;
    const name = toks[j]?.t;
    if (!name || !/^[A-Za-z_]\w*$/.test(name) || toks[j + 1]?.t !== '(') continue;
    const close = closing(toks, j + 1);
    const params = text
      .slice(toks[j + 1].pos + 1, toks[close].pos)
      .replace(/\s+/g, ' ')
      .trim();
    // What follows: attributes or asm labels, then ';' (a declaration) or '{'
    // (a definition).
    let k = close + 1;
    while (toks[k] && ['__attribute__', '__asm__', 'asm'].includes(toks[k].t) && toks[k + 1]?.t === '(') k = closing(toks, k + 1) + 1;
    const after = toks[k]?.t;
    const specs = toks.slice(stmt, i).map((x) => x.t);
    i = close;
    if (specs.includes('typedef')) continue;
    if (after === '{') {
      if (specs.includes('static') || specs.includes('inline') || specs.includes('__inline') || specs.includes('__inline__')) continue;
      die(`${mode}: ${name} is defined (not only declared) in the headers and is not static inline`);
    }
    if (after !== ';' && after !== ',') die(`${mode}: cannot parse the declaration of ${name} (followed by '${after}')`);
    if (after === ',') die(`${mode}: ${name} is declared in a declaration list: not supported`);
    const prev = out.get(name);
    if (prev !== undefined && countParams(prev) !== countParams(params))
      die(`${mode}: ${name} is declared twice with different parameter counts`);
    out.set(name, params);
  }
  return out;
}

// The cu* object-like macros of cuda.h's text, with what each expands to in
// the given mode (a probe line per macro appended to the preprocessor input).
function macroNames(cudaH) {
  const names = new Set();
  for (const m of stripComments(cudaH).matchAll(/^[ \t]*#[ \t]*define[ \t]+(cu[A-Za-z0-9_]*)(?=[ \t])/gm)) names.add(m[1]);
  return [...names].sort();
}

function readCudaHeaders(cuda) {
  const inc = path.join(cuda, 'include');
  const cudaHPath = path.join(inc, 'cuda.h');
  if (!fs.existsSync(cudaHPath)) die(`${cudaHPath} not found (give --cuda=CUDA_HOME)`);
  const cudaH = fs.readFileSync(cudaHPath, 'utf8');
  const ver = /^#define CUDA_VERSION (\d+)/m.exec(cudaH);
  if (!ver) die('cuda.h has no #define CUDA_VERSION');
  const macros = macroNames(cudaH);

  const funcs = new Map(); // name -> params text
  const defines = {}; // mode -> Map macro -> expansion
  const declared = {}; // mode -> Set of the names declared
  let probeText = '#define QC_STR_(x) #x\n#define QC_STR(x) QC_STR_(x)\n';
  for (const m of macros) probeText += `${PROBE} "${m}" QC_STR(${m})\n`;
  for (const mode of MODES) {
    const input = `#include <cuda.h>\n#include <cudaProfiler.h>\n${probeText}`;
    const pp = gccE(inc, mode.flags, input);
    const cut = pp.indexOf(PROBE);
    if (cut < 0) die(`${mode.key}: probe lines missing from gcc -E output`);
    const exp = new Map();
    for (const line of pp.slice(cut).split('\n')) {
      const pm = new RegExp(`^${PROBE} "(\\w+)" "(.*)"$`).exec(line.trim());
      if (pm) exp.set(pm[1], pm[2]);
    }
    if (exp.size !== macros.length) die(`${mode.key}: ${macros.length} macro probes, ${exp.size} answered`);
    defines[mode.key] = exp;
    const decls = declarations(pp.slice(0, cut), mode.key);
    declared[mode.key] = new Set(decls.keys());
    if (decls.size < 300) die(`${mode.key}: only ${decls.size} CUresult declarations found in cuda.h: parse error?`);
    for (const [name, params] of decls) {
      const prev = funcs.get(name);
      if (prev !== undefined && countParams(prev) !== countParams(params))
        die(`${name}: ${countParams(prev)} parameters in one preprocessing of cuda.h, ${countParams(params)} in another`);
      if (prev === undefined) funcs.set(name, params);
    }
  }
  for (const name of funcs.keys()) {
    if (!/^cu[A-Z]/.test(name) || name.startsWith('cuda')) die(`unexpected entry point name '${name}' in cuda.h`);
  }
  return { inc, version: Number(ver[1]), funcs, defines, declared };
}

// ---------------------------------------------------------- cudaTypedefs.h

const TYPEDEF_HEADERS = ['cudaTypedefs.h', 'cudaProfilerTypedefs.h'];

// Every PFN_<name>_v<version>[_ptsz|_ptds] typedef, read from the text (so
// that the sections under #if defined(__CUDA_API_VERSION_INTERNAL) count too).
function readTypedefs(inc) {
  const rows = [];
  for (const file of TYPEDEF_HEADERS) {
    const p = path.join(inc, file);
    if (!fs.existsSync(p)) die(`${p} not found`);
    const text = stripComments(fs.readFileSync(p, 'utf8'))
      .split('\n')
      .map((l) => (/^\s*#/.test(l) ? '' : l))
      .join('\n');
    const toks = tokenize(text);
    let found = 0;
    for (let i = 0; i < toks.length; i++) {
      if (toks[i].t !== 'typedef') continue;
      const seq = toks.slice(i + 1, i + 6).map((x) => x.t);
      if (seq[0] !== 'CUresult' || seq[1] !== '(' || seq[2] !== 'CUDAAPI' || seq[3] !== '*') continue;
      const pfn = seq[4];
      if (toks[i + 6]?.t !== ')' || toks[i + 7]?.t !== '(') die(`${file}: cannot parse typedef ${pfn}`);
      const close = closing(toks, i + 7);
      const params = text
        .slice(toks[i + 7].pos + 1, toks[close].pos)
        .replace(/\s+/g, ' ')
        .trim();
      const m = /^PFN_(\w+)_v(\d+)(?:_(ptsz|ptds))?$/.exec(pfn);
      if (!m) die(`${file}: typedef ${pfn} is not PFN_<name>_v<version>[_ptsz|_ptds]`);
      rows.push({ pfn, name: m[1], version: Number(m[2]), suffix: m[3] ?? null, params, nparams: countParams(params), file });
      found++;
      i = close;
    }
    const all = (text.match(/\btypedef\b[^;]*\bPFN_\w+/g) ?? []).length;
    if (found !== all) die(`${file}: ${all} PFN typedefs, ${found} parsed`);
    if (found === 0) die(`${file}: no PFN typedefs`);
  }
  return rows;
}

// ---------------------------------------------------------------- mapping

// The CUDA version from which cuGetProcAddress gives, for a base name that
// cuda.h #defines to a different function (not <base> or <base>_vN), that
// function: the rename is an ABI of its own, which no PFN_<base>_v typedef
// describes. Every such rename of cuda.h must be listed here (checked).
const RENAMES = {
  // CUDA 12.0: cuGraphInstantiate became cuGraphInstantiateWithFlags; 11.x's
  // cuGraphInstantiate (v10000) and cuGraphInstantiate_v2 (v11000) keep theirs.
  cuGraphInstantiate: { to: 'cuGraphInstantiateWithFlags', version: 12000 },
};

function versioned(base, n) {
  return n === 1 ? base : `${base}_v${n}`;
}

function buildProcs(funcs, defines, typedefs) {
  const exported = (n) => funcs.has(n);
  const fallbacks = [];
  const specials = [];
  const rows = [];
  const mismatch = (td, fn) => `${td.pfn} (${td.nparams} parameters) -> ${fn} (${countParams(funcs.get(fn))} parameters)`;

  const byBase = new Map();
  for (const td of typedefs) {
    if (!byBase.has(td.name)) byBase.set(td.name, []);
    byBase.get(td.name).push(td);
  }

  for (const [base, tds] of [...byBase].sort((a, b) => cmp(a[0], b[0]))) {
    // Candidates: base, base_v2, base_v3, ... that exist (non-PTDS names).
    const cands = [];
    for (let n = 1; n <= 16; n++) if (exported(versioned(base, n))) cands.push(versioned(base, n));
    const plain = tds.filter((t) => !t.suffix).sort((a, b) => a.version - b.version);
    const ptds = tds.filter((t) => t.suffix).sort((a, b) => a.version - b.version || cmp(a.suffix, b.suffix));
    for (let i = 1; i < plain.length; i++)
      if (plain[i].version === plain[i - 1].version) die(`${base}: two typedefs of version ${plain[i].version}`);

    // cuda.h's #define of the base name (plain preprocessing), if any.
    const def = defines.plain.get(base);
    const rename = def !== undefined && def !== base && !/^(.*)_v\d+$/.test(def) ? def : null;
    const defTarget = def !== undefined && def !== base && !rename ? def : null;

    // Non-PTDS rows: the i-th version -> the i-th existing candidate.
    const plainMap = new Map(); // version -> fn
    if (plain.length > cands.length) {
      die(
        `${base}: ${plain.length} typedef versions (${plain.map((t) => t.version).join(', ')}) but only ${cands.length} exported names (${cands.join(', ') || 'none'})`,
      );
    }
    plain.forEach((td, i) => {
      let fn = cands[i];
      let why = null;
      // The newest ABI is the one cuda.h's #define names.
      if (defTarget && i === plain.length - 1 && fn !== defTarget) {
        if (!exported(defTarget)) die(`${base}: cuda.h #defines it to ${defTarget}, which is not declared`);
        why = `cuda.h #defines ${base} to ${defTarget}, not ${fn}`;
        fn = defTarget;
      }
      if (countParams(funcs.get(fn)) !== td.nparams) {
        const others = cands.filter((c) => c !== fn && countParams(funcs.get(c)) === td.nparams);
        if (others.length !== 1)
          die(
            `cannot map ${td.pfn}: ${mismatch(td, fn)}; other candidates with ${td.nparams} parameters: ${others.join(', ') || 'none'} (of ${cands.join(', ')})`,
          );
        why = `${mismatch(td, fn)}: parameter count differs`;
        fn = others[0];
      }
      if (why) fallbacks.push(`${base} ${td.version} -> ${fn} (${why})`);
      plainMap.set(td.version, fn);
      rows.push({ name: base, version: td.version, ptds: 0, fn, td });
    });

    if (rename) {
      const r = RENAMES[base];
      if (!r || r.to !== rename)
        die(`cuda.h #defines ${base} to ${rename}: add it to RENAMES with the CUDA version the rename took effect`);
      const last = plain[plain.length - 1];
      if (last && last.version >= r.version) die(`${base}: RENAMES says ${r.version}, but a typedef has version ${last.version}`);
      if (!exported(rename)) die(`${base}: cuda.h #defines it to ${rename}, which is not declared`);
      // Checked against the target's own newest typedef.
      const own = (byBase.get(rename) ?? []).filter((t) => !t.suffix).sort((a, b) => b.version - a.version)[0];
      if (!own) die(`${base}: renamed to ${rename}, which has no typedef to check it against`);
      if (own.version > r.version) die(`${base}: renamed to ${rename} at ${r.version}, but ${own.pfn} is newer`);
      if (own.nparams !== countParams(funcs.get(rename))) die(`${base}: ${mismatch(own, rename)}`);
      rows.push({ name: base, version: r.version, ptds: 0, fn: rename, td: own });
      specials.push(`${base} ${r.version} -> ${rename} (cuda.h: #define ${base} ${rename}; checked against ${own.pfn})`);
    }

    // PTDS rows: the function the version maps to without the suffix (the
    // newest non-PTDS row at or below it), plus _ptsz or _ptds.
    for (const td of ptds) {
      const at = plain.filter((t) => t.version <= td.version).pop();
      if (!at) die(`${td.pfn}: no non-PTDS typedef of ${base} at or below version ${td.version}`);
      const stem = plainMap.get(at.version);
      const other = td.suffix === 'ptsz' ? 'ptds' : 'ptsz';
      let fn = [`${stem}_${td.suffix}`, `${stem}_${other}`].find(exported);
      if (!fn) die(`${td.pfn}: neither ${stem}_ptsz nor ${stem}_ptds is declared in cuda.h`);
      if (countParams(funcs.get(fn)) !== td.nparams) {
        const pool = [];
        for (const c of cands) for (const s of ['ptsz', 'ptds']) if (exported(`${c}_${s}`)) pool.push(`${c}_${s}`);
        const others = pool.filter((c) => c !== fn && countParams(funcs.get(c)) === td.nparams);
        if (others.length !== 1)
          die(`cannot map ${td.pfn}: ${mismatch(td, fn)}; other candidates with ${td.nparams} parameters: ${others.join(', ') || 'none'}`);
        fallbacks.push(`${base} ${td.version} ptds -> ${others[0]} (${mismatch(td, fn)}: parameter count differs)`);
        fn = others[0];
      }
      rows.push({ name: base, version: td.version, ptds: 1, fn, td });
    }
    // Where cuda.h #defines the base name to a newer ABI under
    // CUDA_API_PER_THREAD_DEFAULT_STREAM (cuMemcpyHtoDAsync ->
    // cuMemcpyHtoDAsync_v2_ptsz, not just cuStreamGetCtx -> cuStreamGetCtx_ptsz),
    // the newest PTDS row is that one.
    const pdef = defines.ptds.get(base);
    if (ptds.length && pdef !== undefined && /_pt(sz|ds)$/.test(pdef) && pdef.slice(0, -5) !== base) {
      const newest = rows
        .filter((r) => r.name === base && r.ptds)
        .sort((a, b) => a.version - b.version)
        .pop();
      if (newest.fn !== pdef)
        die(`${base}: the newest PTDS row maps to ${newest.fn}, but cuda.h #defines it to ${pdef} with CUDA_API_PER_THREAD_DEFAULT_STREAM`);
    }
  }

  // Renames of cuda.h that RENAMES lists but the headers no longer make.
  for (const [base, r] of Object.entries(RENAMES)) {
    if (defines.plain.get(base) !== r.to) die(`RENAMES lists ${base} -> ${r.to}, but cuda.h does not #define that: update RENAMES`);
  }

  rows.sort((a, b) => cmp(a.name, b.name) || a.ptds - b.ptds || a.version - b.version);
  for (let i = 1; i < rows.length; i++) {
    const a = rows[i - 1];
    const b = rows[i];
    if (a.name === b.name && a.ptds === b.ptds && a.version === b.version)
      die(`two rows for ${a.name} ${a.version}${a.ptds ? ' ptds' : ''}: ${a.fn} (${a.td.pfn}) and ${b.fn} (${b.td.pfn})`);
  }
  for (const r of rows) if (!exported(r.fn)) die(`row ${r.name} ${r.version} maps to ${r.fn}, which is not exported`);
  return { rows, fallbacks, specials };
}

function cmp(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

// The cuGetProcAddress requests (name ver=N flags=F) each must find a row.
function checkRequests(file, rows) {
  const lines = fs.readFileSync(file, 'utf8').split('\n');
  const byName = new Map();
  for (const r of rows) {
    if (!byName.has(r.name)) byName.set(r.name, []);
    byName.get(r.name).push(r);
  }
  const missing = new Set();
  const legacy = new Set(); // PTDS requests answered by the only (legacy-stream) rows
  let n = 0;
  for (const line of lines) {
    if (!line.trim()) continue;
    const m = /^(\S*)\s+ver=(\d+)\s+flags=(\d+)\s*$/.exec(line);
    if (!m) die(`${file}: cannot parse '${line}'`);
    const [, name, ver, flags] = [m[0], m[1], Number(m[2]), Number(m[3])];
    if (ver === 0) continue;
    n++;
    const cand = byName.get(name);
    if (!cand) {
      missing.add(name);
      continue;
    }
    const want = flags & 2 ? 1 : 0;
    let hit = cand.filter((r) => r.ptds === want && r.version <= ver).pop();
    if (!hit && want) {
      hit = cand.filter((r) => r.ptds === 0 && r.version <= ver).pop();
      if (hit) legacy.add(name);
    }
    if (!hit) die(`${file}: ${name} ${ver} flags ${flags} finds no row (versions: ${cand.map((r) => r.version).join(', ')})`);
  }
  return { n, missing: [...missing].sort(), legacy: [...legacy].sort() };
}

// ---------------------------------------------------------------- output

function header(what, version, also = '') {
  return [
    '/* SPDX-License-Identifier: MIT */',
    `/* Generated by gen-libcuda.mjs from ${also}CUDA ${Math.floor(version / 1000)}.${(version % 1000) / 10}'s ${what}: do not edit. */`,
  ];
}

function writeStubs(out, names, version) {
  const lines = [
    ...header('cuda.h and cudaProfiler.h', version),
    '/*',
    " * The entry points of NVIDIA's libcuda.so.1 that qcuda's does not implement,",
    ' * so that every program and library linked against it loads. Each returns',
    ' * CUDA_ERROR_NOT_SUPPORTED and names itself once on stderr. They take no',
    ' * arguments here: all of them return CUresult, in eax, so callers that pass',
    ' * arguments are unaffected. Each is defined under its exported name by an',
    " * asm label: cuda.h's prototype of that name is a different C identifier.",
    ' */',
    '#include "cu.h"',
    '',
    '#define STUB(name) \\',
    '	__attribute__((visibility("default"))) CUresult qc_stub_##name(void) __asm__(#name); \\',
    '	__attribute__((visibility("default"))) CUresult qc_stub_##name(void) \\',
    '	{ \\',
    '		static int warned; \\',
    '		return cu_unsupported(#name, &warned); \\',
    '	}',
    '',
    ...names.map((n) => `STUB(${n})`),
    '',
  ];
  fs.writeFileSync(path.join(out, 'stubs.c'), lines.join('\n'));
}

function writeProcs(out, rows, version) {
  const fns = [...new Set(rows.map((r) => r.fn))].sort(cmp);
  const lines = [
    ...header('cudaTypedefs.h, cudaProfilerTypedefs.h and cuda.h', version),
    '/*',
    ' * cuGetProcAddress: a row per PFN_<name>_v<version>[_ptsz|_ptds] typedef,',
    ' * sorted by (name, ptds, version). A request (name, version, stream kind)',
    ' * gets the newest row of that name and kind at or below its version. The',
    ' * entry points are referred to by their exported names through asm labels',
    " * (cuda.h's prototypes of those names are other C identifiers).",
    ' */',
    '#include "cu.h"',
    '',
    ...fns.map((f) => `extern void qc_fn_${f}(void) __asm__("${f}");`),
    '',
    'const struct cu_proc cu_procs[] = {',
    ...rows.map((r) => `	{ "${r.name}", ${r.version}, ${r.ptds}, (void *)qc_fn_${r.fn} },`),
    '};',
    '',
    'const unsigned int cu_nprocs = sizeof(cu_procs) / sizeof(cu_procs[0]);',
    '',
  ];
  fs.writeFileSync(path.join(out, 'procs.c'), lines.join('\n'));
}

// ---------------------------------------------------------------- forwards

const TWIN = /_pt(sz|ds)$/;

// forwards.def: one entry point per line, `name twin call`: name is an export
// of cuda.h, twin is - or the suffix (ptsz, ptds) of its per-thread-stream
// twin, call the runtime layer's call in cuda.h's parameter names. The twin
// calls the runtime function of the same suffix with the same arguments.
function readForwards(file, funcs) {
  if (!fs.existsSync(file)) die(`--forwards file ${file} not found`);
  const rows = [];
  const seen = new Set();
  fs.readFileSync(file, 'utf8')
    .split('\n')
    .forEach((line, i) => {
      const at = `${path.basename(file)}:${i + 1}`;
      if (/^\s*(#|$)/.test(line)) return;
      const m = /^(\w+)\s+(-|ptsz|ptds)\s+(([A-Za-z_]\w*)\(.*\))\s*$/.exec(line);
      if (!m) die(`${at}: not 'name twin call(...)': ${line}`);
      const [, name, twin, call, fn] = m;
      const names = twin === '-' ? [name] : [name, `${name}_${twin}`];
      for (const n of names) {
        if (!funcs.has(n)) die(`${at}: ${n} is not an entry point of cuda.h`);
        if (seen.has(n)) die(`${at}: ${n} is forwarded twice`);
        seen.add(n);
      }
      if (TWIN.test(name)) die(`${at}: ${name}: write the plain name, with its twin in the second column`);
      rows.push({ name, call, fn, twin: twin === '-' ? null : twin });
    });
  return rows;
}

function forwardDefinition(name, params, call) {
  return [`CUresult ${name}(${params || 'void'})`, '{', `\tCU_RUN(${call});`, '}', ''];
}

function writeForwards(out, rows, { funcs, defines, declared, version }, def) {
  const all = rows.flatMap((r) => [r.name, ...(r.twin ? [`${r.name}_${r.twin}`] : [])]);
  // Names cuda.h #defines to today's ABI (cuEventElapsedTime): defined here
  // under the old name, so the macro goes and a prototype stands in for it.
  const renamed = all.filter((n) => defines.plain.has(n) && defines.plain.get(n) !== n);
  const unprototyped = all.filter((n) => !declared.plain.has(n) && !TWIN.test(n));
  const runtimeTwins = [...new Set(rows.filter((r) => r.twin).map((r) => `${r.fn} ${r.twin}`))].sort(cmp);
  const lines = [
    ...header('cuda.h', version, `${path.basename(def)} and `),
    '/*',
    ' * The driver API entry points that are one runtime-layer call under the',
    " * thread's current context (CU_RUN), each with cuda.h's parameters. A",
    " * _ptsz/_ptds twin calls the runtime layer's twin of the same suffix.",
    ' */',
    '#include "cu.h"',
    '',
    "/* Old ABIs, under names cuda.h #defines to today's. */",
    ...renamed.map((n) => `#undef ${n}`),
    ...unprototyped.map((n) => `CUresult ${n}(${funcs.get(n) || 'void'});`),
    '',
    "/* The runtime layer's per-thread-stream twins: the plain function's type. */",
    ...runtimeTwins.map((t) => {
      const [fn, twin] = t.split(' ');
      return `extern __typeof__(${fn}) ${fn}_${twin};`;
    }),
    '',
  ];
  for (const r of rows) {
    lines.push(...forwardDefinition(r.name, funcs.get(r.name), r.call));
    if (r.twin)
      lines.push(...forwardDefinition(`${r.name}_${r.twin}`, funcs.get(`${r.name}_${r.twin}`), r.call.replace(r.fn, `${r.fn}_${r.twin}`)));
  }
  fs.writeFileSync(path.join(out, 'forwards.c'), lines.join('\n'));
}

// cu_twins.h: a prototype of every _ptsz/_ptds entry point of cuda.h (which
// declares them only for programs built with CUDA_API_PER_THREAD_DEFAULT_STREAM),
// so that the files defining them are checked against cuda.h.
function writeTwinPrototypes(out, { funcs, declared, version }) {
  const twins = [...funcs.keys()].filter((n) => TWIN.test(n) && !declared.plain.has(n)).sort(cmp);
  const lines = [
    ...header('cuda.h', version),
    "/* Prototypes of cuda.h's _ptsz/_ptds entry points (cuda.h declares them only under CUDA_API_PER_THREAD_DEFAULT_STREAM). */",
    '#ifndef QCUDA_CU_TWINS_H',
    '#define QCUDA_CU_TWINS_H',
    '',
    ...twins.map((n) => `CUresult ${n}(${funcs.get(n) || 'void'});`),
    '',
    '#endif',
    '',
  ];
  fs.writeFileSync(path.join(out, 'cu_twins.h'), lines.join('\n'));
}

// ---------------------------------------------------------------- main

function main() {
  const t0 = Date.now();
  const opts = parseArgs(process.argv.slice(2));
  const cuda = readCudaHeaders(opts.cuda);
  const { inc, version, funcs, defines } = cuda;
  if (opts.forwards) {
    const rows = readForwards(opts.forwards, funcs);
    fs.mkdirSync(opts.out, { recursive: true });
    writeForwards(opts.out, rows, cuda, opts.forwards);
    writeTwinPrototypes(opts.out, cuda);
    note(`${rows.length} forwards (${rows.filter((r) => r.twin).length} with a twin) in ${Date.now() - t0} ms`);
    return;
  }
  const names = [...funcs.keys()].sort(cmp);
  if (names.includes('cuGetProcAddress_v2_ptsz')) die('cuGetProcAddress_v2_ptsz (a static inline of cuda.h) was taken for an export');

  const typedefs = readTypedefs(inc);
  const { rows, fallbacks, specials } = buildProcs(funcs, defines, typedefs);

  let defined = new Set();
  if (opts.defined) {
    if (!fs.existsSync(opts.defined)) die(`--defined file ${opts.defined} not found`);
    defined = new Set(
      fs
        .readFileSync(opts.defined, 'utf8')
        .split('\n')
        .map((s) => s.trim())
        .filter(Boolean),
    );
  }
  const stubs = names.filter((n) => !defined.has(n));

  const requests = opts.requests ? checkRequests(opts.requests, rows) : null;

  fs.mkdirSync(opts.out, { recursive: true });
  fs.writeFileSync(path.join(opts.out, 'exports.txt'), names.join('\n') + '\n');
  fs.writeFileSync(
    path.join(opts.out, 'libcuda.map'),
    ['{', '	global:', ...[...names, ...QCUDA_EXPORTS].map((n) => `		${n};`), '	local: *;', '};', ''].join('\n'),
  );
  // nvcuda.dll's exports (mingw-w64's ld): the same names, nothing else.
  fs.writeFileSync(
    path.join(opts.out, 'nvcuda.def'),
    ['LIBRARY nvcuda.dll', 'EXPORTS', ...[...names, ...QCUDA_EXPORTS].map((n) => `	${n}`), ''].join('\n'),
  );
  writeStubs(opts.out, stubs, version);
  writeProcs(opts.out, rows, version);

  note(
    `CUDA ${version}: ${names.length} exports, ${stubs.length} stubs (${names.length - stubs.length} defined), ${rows.length} cuGetProcAddress rows (${rows.filter((r) => r.ptds).length} PTDS) from ${typedefs.length} typedefs`,
  );
  for (const s of specials) note(`special: ${s}`);
  for (const f of fallbacks) note(`fallback: ${f}`);
  if (requests) {
    note(`${requests.n} cuGetProcAddress requests of ${path.basename(opts.requests)} checked`);
    if (requests.legacy.length) note(`PTDS requests answered by non-PTDS rows (no _ptsz/_ptds typedef): ${requests.legacy.join(' ')}`);
    if (requests.missing.length) note(`requested names without a typedef (not found): ${requests.missing.join(' ')}`);
  }
  note(`done in ${Date.now() - t0} ms`);
}

// Runs main as the program named me: a GenError is a one-line message and
// exit status 1, anything else a bug's stack.
function runMain(me, main) {
  try {
    main();
  } catch (e) {
    if (e instanceof GenError) {
      process.stderr.write(`${me}: error: ${e.message}\n`);
      process.exit(1);
    }
    throw e;
  }
}

// What guest-driver/trace/gen-trace.mjs reuses: cuda.h's exports, each with
// its parameters, under every ABI, the C tokenizer and the runner.
export { GenError, readCudaHeaders, countParams, tokenize, closing, gccE, cmp, runMain };

// Run as a program, not when imported.
if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) runMain(ME, main);
