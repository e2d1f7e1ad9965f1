// The guest library's graph topology (guest-driver/lib/graph.c) as a host
// program: test/guest-lib/graph_topology.c built with gcc against graph.c
// alone (address and undefined-behaviour sanitizers on) and run; it checks
// dependency order, refused cycles and edges, removal and cloning.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LIB = path.join(ROOT, 'guest-driver/lib');
const CUDA_INCLUDE = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'include');

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-graph-topology-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

test('graph topology: nodes walked after their dependencies, cycles and foreign edges refused, removal and clones exact', (t) => {
  if (!fs.existsSync(path.join(CUDA_INCLUDE, 'cuda_runtime_api.h'))) throw new Error(`no CUDA headers in ${CUDA_INCLUDE} (set CUDA_HOME)`);
  const exe = path.join(work, 'graph_topology');
  const cc = spawnSync(
    'gcc',
    [
      '-std=gnu11',
      '-Wall',
      '-Wextra',
      '-Werror',
      '-O1',
      '-g',
      '-fsanitize=address,undefined',
      '-fno-sanitize-recover=all',
      '-pthread',
      `-I${LIB}`,
      `-I${path.join(ROOT, 'guest-driver/include')}`,
      `-I${CUDA_INCLUDE}`,
      '-o',
      exe,
      path.join(ROOT, 'test/guest-lib/graph_topology.c'),
      path.join(LIB, 'graph.c'),
      path.join(LIB, 'handles.c'), // the handles known (qc_known_*)
    ],
    { encoding: 'utf8' },
  );
  t.is(cc.status, 0, cc.stderr);
  const r = spawnSync(exe, [], { encoding: 'utf8', timeout: 60_000 });
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^PASS: graph_topology: \d+ checks$/m);
  t.notRegex(r.stdout, /^FAIL/m);
});
