// The call checklist (review 3 §5 step 1.7): for every declared call
// (backend/src/qcuda/wire/protocol.ts), each place CONTRIBUTING.md's recipe
// says a call needs is there, and a missing one is named:
//   - every CUDA entry point the call's doc names is defined: a runtime
//     function (cuda*) in guest-driver/lib (not one of stubs.c's stubs), a
//     driver function (cu*) in guest-driver/libcuda (a forwards.def line or
//     a definition in a file of its concept);
//   - a runtime function's driver API twin is defined too: cuX for cudaX
//     where cuda.h has it, else the doc names the twin (cu*);
//   - a call answered by a context method (a `context` entry) names its
//     entry point, the emu provider's context has the method, and the
//     addon has it: written by hand (QCUDA_CONTEXT_METHOD in a
//     cuda_ctx_<concept>.cc) or, for a `driver` entry, generated, whose entry
//     point cuda_api.h declares.
// What the guest library and the backend derive (request builders, decoders,
// runs of one-to-one calls, worker forwarding) is the compiler's and
// generated.test.ts's to check. CUDA's headers (CUDA_HOME) say which names
// are entry points.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { CALLS, type CallDecl } from '../../backend/src/qcuda/wire/protocol';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';

/** The files the checklist reads, by path from the repository's root (a test gives it one with a place taken out). */
type Tree = Map<string, string>;

function readTree(): Tree {
  const tree: Tree = new Map();
  const add = (rel: string) => tree.set(rel, fs.readFileSync(path.join(ROOT, rel), 'utf8'));
  for (const dir of ['guest-driver/lib', 'guest-driver/libcuda', 'addon/src'])
    for (const f of fs.readdirSync(path.join(ROOT, dir)).sort()) if (/\.(c|cc|h|def)$/.test(f)) add(`${dir}/${f}`);
  return tree;
}

/** The names of functions a CUDA header declares (name followed by its parameter list). */
function declared(header: string, prefix: RegExp): Set<string> {
  const text = fs.readFileSync(path.join(CUDA, 'include', header), 'utf8');
  return new Set([...text.matchAll(new RegExp(`\\b(${prefix.source}\\w*)\\s*\\(`, 'g'))].map((m) => m[1]));
}
const RUNTIME = declared('cuda_runtime_api.h', /cuda[A-Z]/);
const DRIVER = declared('cuda.h', /cu[A-Z]/);

const files = (tree: Tree, dir: string, ext: RegExp) => [...tree].filter(([f]) => f.startsWith(`${dir}/`) && ext.test(f));
const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/** Whether guest-driver/lib defines runtime function r: a file names it, and the generated stubs.c does not stub it. */
function runtimeDefined(tree: Tree, r: string): boolean {
  const stubs = tree.get('guest-driver/lib/stubs.c') ?? '';
  if (new RegExp(`\\bSTUB\\(${escape(r)}\\)`).test(stubs)) return false;
  const name = new RegExp(`\\b${escape(r)}\\b`);
  return files(tree, 'guest-driver/lib', /\.c$/).some(([f, s]) => !/\/(stubs|errtab)\.c$/.test(f) && name.test(s));
}

/**
 * Whether guest-driver/libcuda defines driver function d (or an ABI version
 * of it, d_v2, or its per-thread twin): a forwards.def line, or a line of a
 * file of its concept that defines it (`CUresult d(`) or hands it to a macro
 * that does (`DIRECTED(d, ...`, `CU_COPY_ENTRIES(..., d, ...`).
 */
function driverDefined(tree: Tree, d: string): boolean {
  const name = `${escape(d)}(?:_v\\d+)?(?:_pt[sd]z)?`;
  const forwards = tree.get('guest-driver/libcuda/forwards.def') ?? '';
  if (new RegExp(`^${name}\\s`, 'm').test(forwards)) return true;
  const def = new RegExp(`^(?:CUresult\\s+(?:CUDAAPI\\s+)?${name}\\s*\\(|[A-Z][A-Z0-9_]*\\((?:[^;]*[,(\\s])?${name}[,)\\s])`, 'm');
  return files(tree, 'guest-driver/libcuda', /\.c$/).some(([, s]) => def.test(s));
}

/** The addon's context methods written by hand, and the driver entry points cuda_api.h declares. */
function addon(tree: Tree): { methods: Set<string>; entries: Set<string> } {
  const methods = new Set<string>();
  for (const [, s] of files(tree, 'addon/src', /\.cc$/)) for (const m of s.matchAll(/^QCUDA_CONTEXT_METHOD\((\w+),/gm)) methods.add(m[1]);
  const api = tree.get('addon/src/cuda_api.h') ?? '';
  const entries = new Set([...api.matchAll(/^\s*X\((\w+),/gm)].map((m) => m[1]));
  return { methods, entries };
}

/** Every place a call needs that is not there, one line each, naming the call and the place. */
function missing(tree: Tree, hostMethods: ReadonlySet<string>): string[] {
  const out: string[] = [];
  const { methods, entries } = addon(tree);
  for (const [name, d] of Object.entries(CALLS as Record<string, CallDecl>)) {
    if (d.side === 'device') continue;
    const words = [...new Set(d.doc.match(/\bcu(?:da)?[A-Z]\w*/g) ?? [])];
    const runtime = words.filter((w) => RUNTIME.has(w));
    const driver = words.filter((w) => DRIVER.has(w));
    for (const r of runtime) {
      if (!runtimeDefined(tree, r)) out.push(`${name}: the runtime entry point ${r} (guest-driver/lib/<concept>.c; stubs.c stubs it)`);
      const twin = `cu${r.slice(4)}`;
      if (DRIVER.has(twin)) {
        if (!driverDefined(tree, twin))
          out.push(`${name}: the driver API's ${twin} (a line of guest-driver/libcuda/forwards.def, or guest-driver/libcuda/<concept>.c)`);
      } else if (driver.length === 0) out.push(`${name}: cuda.h has no ${twin}: the doc names ${r}'s driver API twin (cu*)`);
    }
    for (const x of driver)
      if (!driverDefined(tree, x))
        out.push(`${name}: the driver API's ${x} (a line of guest-driver/libcuda/forwards.def, or guest-driver/libcuda/<concept>.c)`);
    const c = d.context;
    if (!c) continue;
    if (runtime.length + driver.length === 0) out.push(`${name}: its doc names no CUDA entry point (the runtime function it serves)`);
    if (!hostMethods.has(c.method)) out.push(`${name}: the emu provider's context method ${c.method} (backend/src/qcuda/providers/emu/)`);
    if (c.driver) {
      if (!entries.has(c.driver)) out.push(`${name}: the driver entry point ${c.driver} (an X line of addon/src/cuda_api.h)`);
    } else if (!methods.has(c.method))
      out.push(`${name}: the addon's context method ${c.method} (QCUDA_CONTEXT_METHOD in addon/src/cuda_ctx_<concept>.cc)`);
  }
  return out;
}

/** The methods of the emu provider's context (its class and what it inherits). */
async function hostContextMethods(): Promise<Set<string>> {
  const p = new EmuProvider({});
  try {
    const ctx = await p.openContext(0);
    const names = new Set<string>();
    for (let o: object | null = ctx; o && o !== Object.prototype; o = Object.getPrototypeOf(o) as object | null)
      for (const k of Object.getOwnPropertyNames(o)) if (typeof (ctx as unknown as Record<string, unknown>)[k] === 'function') names.add(k);
    await ctx.destroy();
    return names;
  } finally {
    await p.close();
  }
}

test('every declared call has each place the recipe names', async (t) => {
  const tree = readTree();
  const host = await hostContextMethods();
  t.deepEqual(missing(tree, host), []);
  const calls = Object.values(CALLS as Record<string, CallDecl>).filter((d) => d.side !== 'device');
  const named = calls.filter((d) => /\bcu(?:da)?[A-Z]/.test(d.doc)).length;
  t.log(`${calls.length} calls a session sends; ${named} name their CUDA entry points in their doc and are checked through them`);
});

test('the checklist names each place taken out', async (t) => {
  const host = await hostContextMethods();
  const without = (file: string, cut: RegExp): Tree => {
    const tree = readTree();
    const text = tree.get(file)!;
    t.regex(text, cut, `${file} has what is taken out`);
    tree.set(file, text.replace(cut, ''));
    return tree;
  };
  t.deepEqual(missing(without('guest-driver/libcuda/forwards.def', /^cuStreamGetPriority\s.*\n/m), host), [
    "STREAM_GET_PRIORITY: the driver API's cuStreamGetPriority (a line of guest-driver/libcuda/forwards.def, or guest-driver/libcuda/<concept>.c)",
  ]);
  const stubbed = readTree();
  stubbed.set('guest-driver/lib/stubs.c', `${stubbed.get('guest-driver/lib/stubs.c')}STUB(cudaIpcGetEventHandle)\n`);
  t.deepEqual(missing(stubbed, host), [
    'IPC_EVENT_GET: the runtime entry point cudaIpcGetEventHandle (guest-driver/lib/<concept>.c; stubs.c stubs it)',
  ]);
  t.deepEqual(missing(without('addon/src/cuda_api.h', /^\s*X\(StreamGetPriority,.*\n/m), host), [
    'STREAM_GET_PRIORITY: the driver entry point StreamGetPriority (an X line of addon/src/cuda_api.h)',
  ]);
  t.deepEqual(missing(without('addon/src/cuda_ctx_streams.cc', /^QCUDA_CONTEXT_METHOD\(streamQuery,/m), host), [
    "STREAM_QUERY: the addon's context method streamQuery (QCUDA_CONTEXT_METHOD in addon/src/cuda_ctx_<concept>.cc)",
  ]);
  const noHost = new Set([...host].filter((m) => m !== 'occupancyClusters'));
  t.deepEqual(missing(readTree(), noHost), [
    "OCCUPANCY_CLUSTERS: the emu provider's context method occupancyClusters (backend/src/qcuda/providers/emu/)",
  ]);
});
