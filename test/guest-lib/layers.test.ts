// The guest library's layers point one way (review 3, §3.3 and §5 step 4).
// Every guest-driver/lib/*.c is compiled on its own and nm says what each
// object defines and what it needs: file A uses file B when A needs a
// symbol (a function or a variable) that B defines. From the bottom:
//   base       the log, the error table, the OS files, threads, hashing
//   transport  transport*.c, vhu_*.c, shm_attach.c: bytes to the device
//   call       call.c (the call path), batch.c (posted work), output.c
//   state      init.c (the session, the thread's device), handles.c, rmap.c
//   concepts   every other file: the CUDA concepts and their entry points
// No file uses a file of a layer above its own; call.c uses nothing of its
// own layer (batch.c's flush and output.c's device output reach it through
// hooks init.c sets); no file uses another's public entry point (cuda*:
// the library's own callers use the qc_* cores); and no group of files
// that reach each other (a call circle) is larger than MAX_CIRCLE.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { stronglyConnected } from '../sccs';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LIB = path.join(ROOT, 'guest-driver/lib');
const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';

/** The layers from the bottom up; a file named in none is a concept file (the top). */
const LAYERS: [string, string[]][] = [
  ['base', ['log', 'errtab', 'os_posix', 'os_posix_rt', 'os_pthread', 'thread', 'sha256', 'fatbin']],
  [
    'transport',
    ['transport', 'transport_ioctl', 'transport_shm', 'transport_user', 'vhu_conn', 'vhu_mem', 'vhu_ring', 'vhu_ring_events', 'shm_attach'],
  ],
  ['call', ['call', 'batch', 'output']],
  ['state', ['init', 'handles', 'rmap']],
];
/** Files that use nothing of their own layer either. */
const ALONE = ['call'];
/** The largest call circle allowed (review 3 found one of 24 files): now
 * graph.c, graph_op.c and graph_mem.c (a graph frees its nodes' ops, a
 * child graph node's op frees its graph; a memory node's op asks the graph
 * of its ancestors). Never raise it. */
const MAX_CIRCLE = 3;

type Uses = Map<string, Map<string, string[]>>;

function layerOf(file: string): number {
  const i = LAYERS.findIndex(([, files]) => files.includes(file));
  return i < 0 ? LAYERS.length : i;
}
const layerName = (i: number) => (i < LAYERS.length ? LAYERS[i][0] : 'concepts');

/** Groups of more than one file that reach each other, largest first. */
function circles(uses: Uses): string[][] {
  return stronglyConnected(uses.keys(), (v) => uses.get(v)?.keys() ?? [])
    .filter((g) => g.length > 1)
    .map((g) => g.sort())
    .sort((a, b) => b.length - a.length);
}

/** What breaks the rules, one line each (empty: none). */
function problems(uses: Uses, maxCircle = MAX_CIRCLE): string[] {
  const out: string[] = [];
  for (const [a, targets] of uses) {
    for (const [b, syms] of targets) {
      const la = layerOf(a);
      const lb = layerOf(b);
      if (lb > la) out.push(`${a}.c (${layerName(la)}) calls up into ${b}.c (${layerName(lb)}): ${syms.join(', ')}`);
      else if (lb === la && ALONE.includes(a)) out.push(`${a}.c uses ${b}.c of its own layer: ${syms.join(', ')}`);
      const pub = syms.filter((s) => /^cuda[A-Z]/.test(s));
      if (pub.length) out.push(`${a}.c calls ${b}.c's public entry points: ${pub.join(', ')}`);
    }
  }
  for (const c of circles(uses))
    if (c.length > maxCircle) out.push(`a call circle of ${c.length} files (at most ${maxCircle}): ${c.join(' ')}`);
  return out;
}

/** Compiles every lib/*.c with the library's flags and reads nm: who uses whom, through which symbols. */
function libUses(): Uses {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-layers-'));
  try {
    const sources = fs.readdirSync(LIB).filter((f) => f.endsWith('.c'));
    const cc = spawnSync(
      'gcc',
      [
        '-std=gnu11',
        '-O0',
        '-fPIC',
        '-Wall',
        '-Wextra',
        '-Wno-unused-parameter',
        '-Werror',
        '-pthread',
        `-I${ROOT}/guest-driver/include`,
        `-I${CUDA}/include`,
        '-c',
        ...sources.map((s) => path.join(LIB, s)),
      ],
      { cwd: work, encoding: 'utf8' },
    );
    if (cc.status !== 0) throw new Error(`gcc: ${cc.stderr}`);
    const objs = sources.map((s) => s.replace(/\.c$/, '.o'));
    const nm = spawnSync('nm', objs, { cwd: work, encoding: 'utf8', maxBuffer: 64 << 20 });
    if (nm.status !== 0) throw new Error(`nm: ${nm.stderr}`);
    const defs = new Map<string, string>();
    const needs = new Map<string, string[]>();
    let file = '';
    for (const line of nm.stdout.split('\n')) {
      const head = /^(\S+)\.o:$/.exec(line);
      if (head) {
        file = head[1];
        needs.set(file, []);
        continue;
      }
      const f = line.trim().split(/\s+/);
      if (f.length === 3 && /^[TDBRVWC]$/.test(f[1])) defs.set(f[2], file);
      else if (f.length === 2 && f[0] === 'U') needs.get(file)!.push(f[1]);
    }
    const uses: Uses = new Map();
    for (const [a, syms] of needs) {
      const m = new Map<string, string[]>();
      for (const s of syms.sort()) {
        const b = defs.get(s);
        if (b && b !== a) m.set(b, [...(m.get(b) ?? []), s]);
      }
      uses.set(a, m);
    }
    return uses;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

const uses = libUses();

test('guest-driver/lib: no call up a layer, none to a public entry point, no call circle over the cap', (t) => {
  t.true(uses.size > 50, `${uses.size} objects read`);
  t.deepEqual(problems(uses), []);
  const biggest = circles(uses)[0] ?? [];
  t.log(`largest call circle: ${biggest.length} files`);
});

test('the check fails on an arrow up, a public call, a use beside call.c and a circle over the cap', (t) => {
  const bad: Uses = new Map(uses);
  const add = (a: string, b: string, s: string) => bad.set(a, new Map(bad.get(a)).set(b, [s]));
  add('call', 'stream', 'qc_stream');
  add('memory', 'call', 'cudaGetErrorName');
  add('call', 'batch', 'qc_flush');
  add('rmap', 'memory', 'qc_region_release');
  const found = problems(bad);
  t.true(found.some((p) => p.startsWith('call.c (call) calls up into stream.c (concepts)')));
  t.true(found.some((p) => p.startsWith("memory.c calls call.c's public entry points: cudaGetErrorName")));
  t.true(found.some((p) => p.startsWith('call.c uses batch.c of its own layer')));
  t.true(found.some((p) => p.startsWith('rmap.c (state) calls up into memory.c (concepts)')));
  const ring: Uses = new Map([
    ['a', new Map([['b', ['x']]])],
    ['b', new Map([['c', ['x']]])],
    ['c', new Map([['d', ['x']]])],
    ['d', new Map([['a', ['x']]])],
  ]);
  t.deepEqual(problems(ring, 3), ['a call circle of 4 files (at most 3): a b c d']);
  t.deepEqual(problems(ring, 4), []);
});
