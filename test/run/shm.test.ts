// The shared-memory transport (QCUDA_SHM, guest-driver/lib/transport_shm.c,
// backend/src/shm/) on the emu provider, through `qcuda run
// --transport=shm`: the run's programs print exactly what they print over
// the socket, the region is what carried them (the backend's log says it
// served the attach), and a second CUDA process of a program finds the
// region taken while the first holds it.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const BIN = path.resolve(dist, '..', 'build', 'guest', 'bin');

interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
  log: string;
}

/** qcuda run over a transport; its status, output and the backend's log. */
function run(dir: string, transport: string, args: string[], timeout = 120_000): Ran {
  const log = path.join(dir, `backend-${transport}-${Math.random().toString(36).slice(2)}.log`);
  const r = spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', `--transport=${transport}`, `--backend-log=${log}`, ...args], {
    encoding: 'utf8',
    timeout,
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr, log: fs.existsSync(log) ? fs.readFileSync(log, 'utf8') : '' };
}

/** Each program, both builds' runtimes: the runtime API over qcuda's libcudart, the driver API (vmm) over its libcuda. */
const PROGRAMS: [string, string[]][] = [
  ['device', ['--cudart=qcuda']],
  ['memcpy', ['--cudart=qcuda']],
  ['hostmem', ['--cudart=qcuda']],
  ['stream', ['--cudart=qcuda']],
  ['device_static', []],
  ['vmm', []],
];

for (const [prog, args] of PROGRAMS) {
  test(`${prog} prints the same over the shared-memory region as over the socket`, (t) => {
    const dir = tmpDir(t);
    const exe = path.join(BIN, prog);
    const shm = run(dir, 'shm', [...args, '--', exe]);
    t.is(
      shm.status,
      0,
      shm.stdout
        .split('\n')
        .filter((l) => l.startsWith('FAIL'))
        .join('\n') + shm.stderr,
    );
    t.regex(shm.stdout, new RegExp(`^PASS: ${prog.replace(/_static$/, '')}`, 'm'));
    // The region carried it: one attach served, then the session it opened ended with its detach.
    t.regex(shm.log, /shm \S+qcuda\.shm: attach 1 served/);
    t.regex(shm.log, /session \w+ opened/);
    t.regex(shm.log, /device reset: closing 1 sessions/);
    const sock = run(dir, 'vhost-user', [...args, '--', exe]);
    t.is(sock.status, 0, sock.stderr);
    t.is(shm.stdout, sock.stdout);
  });
}

test("over the region, a session's own queue is served by its worker process (own queues, as on a GPU)", (t) => {
  const dir = tmpDir(t);
  const r = run(dir, 'shm', ['--own-queues=yes', '--cudart=qcuda', '--', path.join(BIN, 'stream')]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^PASS: stream/m);
  t.regex(r.log, /attach 1 served/);
  t.regex(r.log, /session \w+: queue 1 served by its worker, pid \d+/);
});

test("a program's second CUDA process finds the region taken (one process a region), and the first still passes", (t) => {
  const dir = tmpDir(t);
  // forkquota's child opens a session of its own: over one region it cannot, and says so.
  const r = run(dir, 'shm', ['--', path.join(BIN, 'forkquota'), '48', '32']);
  t.not(r.status, 0);
  t.regex(r.stdout + r.stderr, /no CUDA device: cannot map the shared-memory region \S+qcuda\.shm: Device or resource busy/);
  t.regex(r.stdout, /^ok {3}a forked child without exec cannot use the parent's CUDA$/m);
  t.regex(r.stdout, /^ok {3}parent: its memory is intact after both children$/m);
  t.regex(r.log, /attach 1 served/);
  t.notRegex(r.log, /attach 2/);
});

test('--transport is checked', (t) => {
  const dir = tmpDir(t);
  const bad = run(dir, 'carrier-pigeon', ['--', 'true']);
  t.is(bad.status, 2);
  t.regex(bad.stderr, /--transport must be vhost-user or shm/);
});
