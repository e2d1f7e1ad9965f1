// The guest library's pure parts, compiled with gcc and run on this machine
// (no guest, no device): rmap.c, the range maps that tell device pointers
// from host pointers, and fatbin.c, what of a fat binary crosses to the
// device. Each C test (test/guest-lib/*_test.c) prints a FAIL line per check
// that does not hold and ends with "<N> checks, <K> failed"; they run under
// AddressSanitizer and UBSan, so a read past a truncated fat binary fails too.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LIB = path.join(ROOT, 'guest-driver/lib');
const CUDA = process.env.CUDA_HOME ?? '/usr/local/cuda';
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-guest-lib-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

// The library's own warnings, as errors; the headers need CUDA's (types only).
function build(name: string, sources: string[]): string {
  const exe = path.join(work, name);
  const r = spawnSync(
    'gcc',
    [
      '-std=gnu11',
      '-Wall',
      '-Wextra',
      '-Werror',
      '-Wno-unused-parameter',
      '-g',
      '-O1',
      '-fsanitize=address,undefined',
      '-fno-sanitize-recover=all',
      '-pthread',
      `-I${LIB}`,
      `-I${ROOT}/guest-driver/include`,
      `-I${CUDA}/include`,
      '-o',
      exe,
      path.join(ROOT, 'test/guest-lib', `${name}.c`),
      ...sources.map((s) => path.join(LIB, s)),
    ],
    { encoding: 'utf8' },
  );
  if (r.status !== 0) throw new Error(`gcc ${name}: ${r.stderr}`);
  return exe;
}

function run(exe: string) {
  return spawnSync(exe, [], { encoding: 'utf8', timeout: 60_000, env: { ...process.env, ASAN_OPTIONS: 'detect_leaks=1' } });
}

test('rmap: edges found, overlapping and wrapping ranges refused, two-sided regions all or nothing, 1000 regions in any order, the device kept', (t) => {
  const r = run(build('rmap_test', ['rmap.c', 'log.c', 'os_posix_rt.c', 'os_pthread.c']));
  t.is(r.status, 0, r.stdout + r.stderr);
  t.deepEqual(
    r.stdout.split('\n').filter((l) => l.startsWith('FAIL')),
    [],
  );
  t.regex(r.stdout, /^41 checks, 0 failed$/m);
  // qc_region_add_device's note on the backend's overlapping answer.
  t.regex(r.stderr, /qcuda: VMM_RESERVE returned 0x500000001000\+100, which overlaps a live allocation/);
});

test('fatbin: each SM keeps its SASS or the newest PTX, byte for byte; truncated and corrupt fat binaries go whole', (t) => {
  const r = run(build('fatbin_test', ['fatbin.c']));
  t.is(r.status, 0, r.stdout + r.stderr);
  t.deepEqual(
    r.stdout.split('\n').filter((l) => l.startsWith('FAIL')),
    [],
  );
  t.regex(r.stdout, /^187 checks, 0 failed$/m);
  t.is(r.stderr, '');
});
