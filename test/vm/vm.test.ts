// Real QEMU, a real guest kernel and the real backend: the guest driver
// probes the device and NOPs round-trip on every queue from many threads;
// failures of either side are reported by name and leave nothing behind.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runVm, VmConfigError, VmError, type StartedInfo, type VmOptions } from '../../backend/src/vm/runner';
import { defaultVirtiofsd } from '../../backend/src/vm/shares';
import { chooseBackendUser } from '../../backend/src/vm/backend-user';
import { readStatus } from '../../backend/src/sys/status-socket';
import type { BackendStatus } from '../../backend/src/cli/status';
import type { QcudaStatus } from '../../backend/src/qcuda/status';
import { alive, tmpDir } from '../helpers';

const env = { qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD };
const missing = Object.entries(env).filter(([, v]) => !v || !fs.existsSync(v)).map(([k]) => k);
if (missing.length > 0) {
  // Run through `make test`, which builds QEMU and the image and sets these.
  throw new Error(`VM tests need QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (missing: ${missing.join(', ')}); run them with 'make test'`);
}
const base = { qemu: env.qemu!, kernel: env.kernel!, initrd: env.initrd!, timeoutMs: 180_000 };

test.serial('the driver probes the device and NOPs round-trip on every queue from 16 threads', async (t) => {
  const r = await runVm({ ...base, queues: 4, command: 'nop_test -t 16 -n 250' });
  t.log(`boot to /init: ${r.bootMs} ms; whole run: ${r.wallMs} ms`);
  t.is(r.module?.state, 'OK', r.log);
  t.regex(r.module!.detail, /\/dev\/qcuda0/);
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  // nop_test checks each reply's queue and cookie and prints per-queue counts.
  const counts = [...r.stdout.matchAll(/queue (\d+): sent (\d+) ok (\d+)/g)].map((m) => m.slice(1).map(Number));
  t.deepEqual(counts.map(([q]) => q), [0, 1, 2, 3], r.stdout);
  for (const [q, sent, ok] of counts) {
    t.is(ok, sent, `queue ${q}`);
    t.true(sent > 0, `queue ${q} was used`);
  }
  t.is(counts.reduce((n, [, , ok]) => n + ok, 0), 16 * 250);
});

test.serial('exit status, stdout, stderr and host files come back exactly', async (t) => {
  const f = path.join(tmpDir(t), 'hello.txt');
  fs.writeFileSync(f, 'from the host\n@@QCUDA END\n');
  const r = await runVm({ ...base, files: [f], command: 'cat hello.txt; echo "to stderr" >&2; exit 7' });
  t.is(r.exit, 7);
  t.is(r.stdout, 'from the host\n@@QCUDA END\n', 'a marker in program output is just output');
  t.is(r.stderr, 'to stderr\n');
});

// Issue 34: OpenMP programs failed in the initramfs guest (libgomp.so.1 not
// found). One built here with the host's gcc, handed in with --file, as a
// user runs theirs.
test.serial('a gcc -fopenmp program runs in the initramfs guest (libgomp.so.1 is in the image)', async (t) => {
  const dir = tmpDir(t);
  const src = path.join(dir, 'omp_hello.c');
  fs.writeFileSync(src, [
    '#include <omp.h>',
    '#include <stdio.h>',
    'int main(void) {',
    '  int n = 0;',
    '#pragma omp parallel reduction(+ : n)',
    '  n += 1;',
    '  printf("omp: %d threads of %d\\n", n, omp_get_max_threads());',
    '  return n == omp_get_max_threads() ? 0 : 1;',
    '}',
  ].join('\n'));
  const cc = spawnSync('gcc', ['-fopenmp', '-O2', '-o', path.join(dir, 'omp_hello'), src], { encoding: 'utf8' });
  t.is(cc.status, 0, cc.stderr);
  const r = await runVm({ ...base, cpus: 2, files: [path.join(dir, 'omp_hello')], command: 'OMP_NUM_THREADS=3 omp_hello' });
  t.is(r.stderr, '');
  t.is(r.stdout, 'omp: 3 threads of 3\n');
  t.is(r.exit, 0);
});

async function killMidRun(t: import('ava').ExecutionContext, victim: 'backend' | 'qemu'): Promise<void> {
  let info: { backendPid: number; qemuPid: number; dir: string } | undefined;
  let seen = '';
  let killed = false;
  const o: VmOptions = {
    ...base,
    command: 'nop_test -t 2 -n 200000',
    onStarted: (i) => (info = i),
    onConsole: (s) => {
      seen += s;
      if (killed || !info || !seen.includes('qcuda-init: qcuda.ko loaded')) return;
      killed = true; // NOPs are flowing by now: kill in the middle of them
      setTimeout(() => process.kill(victim === 'backend' ? info!.backendPid : info!.qemuPid, 'SIGKILL'), 500);
    },
  };
  const e = await t.throwsAsync(runVm(o), { instanceOf: VmError });
  t.is(e!.side, victim);
  t.regex(e!.message, victim === 'backend' ? /backend died/ : /QEMU killed by SIGKILL/);
  t.false(alive(info!.backendPid), 'backend is gone');
  t.false(alive(info!.qemuPid), 'QEMU is gone');
  t.false(fs.existsSync(info!.dir), 'socket and temporary files are gone');
}

test.serial('killing the backend mid-run fails with "backend" and leaves nothing behind', (t) => killMidRun(t, 'backend'));
test.serial('killing QEMU mid-run fails with "qemu" and leaves nothing behind', (t) => killMidRun(t, 'qemu'));

test.serial('a guest that runs too long is stopped at the timeout', async (t) => {
  let info: { backendPid: number; qemuPid: number; dir: string } | undefined;
  const e = await t.throwsAsync(runVm({ ...base, command: 'sleep 600', timeoutMs: 15_000, onStarted: (i) => (info = i) }), { instanceOf: VmError });
  t.is(e!.side, 'timeout');
  t.false(alive(info!.qemuPid));
  t.false(alive(info!.backendPid));
  t.false(fs.existsSync(info!.dir));
});

test.serial('`qcuda vm` runs a command in a guest and exits with its status; --backend-log keeps the backend\'s log lines, timed', (t) => {
  const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-log-')), 'backend.log');
  t.teardown(() => fs.rmSync(path.dirname(log), { recursive: true, force: true }));
  const r = spawnSync(process.execPath, [cli, 'vm', '--quiet', '--qemu', base.qemu, '--kernel', base.kernel, '--initrd', base.initrd, `--backend-log=${log}`, '--',
    'nop_test -t 4 -n 50 && echo guest-ok && exit 3'], { encoding: 'utf8', timeout: 180_000 });
  t.is(r.status, 3, r.stderr);
  t.regex(r.stdout, /nop_test: PASS 200 NOPs\nguest-ok\n$/);
  t.regex(r.stderr, /guest command exited with status 3/);
  const lines = fs.readFileSync(log, 'utf8').split('\n').filter(Boolean);
  t.true(lines.every((l) => /^\[\d+\.\d{3}\] qcuda-backend: /.test(l)), lines.join('\n'));
  t.true(lines.some((l) => l.includes('frontend connected')), lines.join('\n'));
  const ms = lines.map((l) => Number(/^\[([\d.]+)\]/.exec(l)![1]));
  t.deepEqual(ms, [...ms].sort((a, b) => a - b), 'in the order they came');
  t.true(ms[ms.length - 1] > 0, 'the times go on from the first line');
});

/** The real, effective, saved and filesystem uids of a process. */
function uids(pid: number): number[] {
  return /^Uid:\s+(.*)$/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1].split(/\s+/).map(Number);
}

// qcuda vm as root (security review 2, H1): the backend, and so its GPU
// workers, run as an unprivileged user; QEMU (root) reaches its socket in a
// directory of that user's own, a CUDA program runs through a worker (own
// queues on the host provider), which sandboxes itself, and a disk's backend
// runs as that user too.
(process.getuid?.() === 0 ? test.serial : test.serial.skip)('as root, the backends of `qcuda vm` (chooseBackendUser, runVm) and their workers run as an unprivileged user, and the guest is served', async (t) => {
  const choice = chooseBackendUser(undefined);
  t.truthy(choice.user, `the default user can run the backend here: ${choice.note}`);
  const user = choice.user!;
  let info: StartedInfo | undefined;
  let socketDir: fs.Stats | undefined;
  let status: Promise<unknown> | undefined;
  let backend: number[] | undefined;
  const workers: number[][] = [];
  const r = await runVm({
    ...base, command: 'memcpy && test -b /dev/vda && echo disk-ok', backendUser: user, backendArgs: ['--provider=host', '--own-queues=yes'],
    disks: [{ size: 16n << 20n, store: 'host' }],
    onStarted: (i) => {
      info = i;
      backend = [...uids(i.backendPid), ...i.diskPids.flatMap(uids)];
      socketDir = fs.statSync(path.dirname(i.socket));
      status = readStatus(`${i.socket}.status`);
    },
    // A worker's uid is set before it runs: read it as soon as the backend says it started.
    onBackendLog: (text) => {
      for (const m of text.matchAll(/GPU worker pid (\d+) started/g)) {
        try {
          workers.push(uids(+m[1]));
        } catch {
          // gone already: the check below needs one worker seen
        }
      }
    },
  });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.regex(r.stdout, /PASS: memcpy: \d+ checks/);
  t.not(user.uid, 0);
  t.regex(r.stdout, /disk-ok/, 'the disk\'s backend served its disk');
  t.deepEqual(backend, Array(8).fill(user.uid), `the backend and the disk's ran as ${user.name}`);
  t.true(workers.length > 0 && workers.every((u) => u.every((id) => id === user.uid)), `the workers ran as ${user.name} (${user.uid}): ${JSON.stringify(workers)}`);
  t.true(socketDir!.uid === user.uid && (socketDir!.mode & 0o777) === 0o700, 'the socket directory is the backend user\'s, closed to others');
  t.not(path.dirname(info!.socket), info!.dir, 'and not the run\'s own directory');
  t.truthy(await status, 'root reads the status socket');
  t.false(fs.existsSync(path.dirname(info!.socket)), 'the socket directory is gone after the run');
});

test.serial('the driver\'s zero-copy calls: sessions, chunked copies up to 100 MiB, pinned host memory, bad ioctls (call_test)', async (t) => {
  const r = await runVm({ ...base, command: 'call_test' });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  const m = /call_test: PASS (\d+) checks/.exec(r.stdout);
  t.truthy(m, r.stdout);
  t.true(Number(m![1]) > 300);
});

// Every guest CUDA program (test/guest/*.cu, built with nvcc -cudart=shared and
// loading qcuda's libcudart.so.13) in one guest on the host provider, with a
// quota so the quota program meets it; each must end in PASS.
test.serial('the guest CUDA programs pass against the host provider', async (t) => {
  const dir = path.resolve(__dirname, '..', '..', '..', 'test', 'guest');
  const programs = fs.readdirSync(dir).filter((f) => f.endsWith('.cu')).map((f) => f.slice(0, -3));
  programs.push('memcpy_ptds', 'stream_ptds', 'memadvise_ptds');
  const script = programs.map((p) => `echo "=== ${p}"; ${p}; echo "=== ${p} exit $?"`).join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=host', '--device-memory-limit=1G'], timeoutMs: 600_000 });
  const skipped: string[] = [];
  for (const p of programs) {
    const section = r.stdout.split(`=== ${p}\n`)[1]?.split(`=== ${p} exit`)[0] ?? '';
    const exit = new RegExp(`=== ${p} exit (\\d+)`).exec(r.stdout)?.[1];
    if (exit === '77') {
      // A kernel program: the host provider must refuse its kernels with the documented error.
      t.regex(section, new RegExp(`SKIP: ${p.replace('_ptds', '')}: no kernel support on this device \\(cuda\\w+\\)`), p);
      // The checks it ran before its first kernel (memadvise runs most of its own there) must pass.
      t.notRegex(section, /^FAIL /m, `${p}:\n${section.split('\n').filter((l) => /FAIL/.test(l)).join('\n')}`);
      skipped.push(p);
      continue;
    }
    t.is(exit, '0', `${p}:\n${section.split('\n').filter((l) => /FAIL/.test(l)).join('\n')}`);
    t.regex(section, new RegExp(`PASS: ${p.replace('_ptds', '')}: \\d+ checks`), p);
  }
  if (skipped.length) t.log(`kernel programs refused by the host provider (they run on the GPU): ${skipped.join(', ')}`);
  t.log(programs.map((p) => new RegExp(`PASS: ${p.replace('_ptds', '')}: (\\d+) checks`).exec(r.stdout.split(`=== ${p}\n`)[1] ?? '')?.[0] ?? `${p}: ?`).join('; '));
});

// The same programs built with nvcc's defaults (static cudart: NVIDIA's
// runtime inside the program, which loads libcuda.so.1, here qcuda's) must
// print exactly what their -cudart=shared builds print and exit the same way:
// NVIDIA's runtime accepts qcuda's export tables and integrity check, and
// every runtime call it makes through the driver API answers as qcuda's own
// runtime does. Kernel programs stop at their first kernel on this provider
// (the same SKIP line from both builds); the GPU run (test/gpu) runs them.
test.serial('default-built programs (static cudart over qcuda\'s libcuda.so.1) print what their -cudart=shared builds print', async (t) => {
  const script = [
    'cd /tmp',
    'for s in /usr/local/bin/*_static; do p=$(basename $s _static)',
    '  echo "=== $p shared"; $p 2>/dev/null; echo "=== $p shared exit $?"',
    '  echo "=== $p static"; ${p}_static 2>/dev/null; echo "=== $p static exit $?"',
    'done',
    'echo "=== drvapi"; drvapi; echo "=== drvapi exit $?"',
  ].join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=host', '--device-memory-limit=1G'], timeoutMs: 600_000 });
  t.is(r.exit, 0, r.stderr);
  const programs = [...r.stdout.matchAll(/^=== (\w+) static$/gm)].map((m) => m[1]);
  t.true(programs.length >= 20, `only ${programs.length} programs: ${programs.join(', ')}`);
  const passed: string[] = [];
  for (const p of programs) {
    const shared = r.stdout.split(`=== ${p} shared\n`)[1].split(`=== ${p} shared exit`)[0];
    const stat = r.stdout.split(`=== ${p} static\n`)[1].split(`=== ${p} static exit`)[0];
    t.is(stat, shared, p);
    t.is(new RegExp(`=== ${p} static exit (\\d+)`).exec(r.stdout)?.[1], new RegExp(`=== ${p} shared exit (\\d+)`).exec(r.stdout)?.[1], `${p}: exit status`);
    if (new RegExp(`^PASS: ${p}: \\d+ checks`, 'm').test(stat)) passed.push(p);
  }
  // The programs without kernels run all their checks here: they must pass, not skip.
  for (const p of ['callbacks', 'device', 'errors', 'hostmem', 'memcpy', 'mempool', 'priorities', 'queries', 'quota', 'stream', 'threads']) t.true(passed.includes(p), `${p} passed`);
  // The driver-API program runs every check up to its first module here.
  const drv = r.stdout.split('=== drvapi\n')[1]?.split('=== drvapi exit')[0] ?? '';
  t.is(/=== drvapi exit (\d+)/.exec(r.stdout)?.[1], '77', drv);
  t.regex(drv, /^SKIP: drvapi: no kernel support on this device \(CUDA_ERROR_NO_BINARY_FOR_GPU\)$/m);
  t.notRegex(drv, /^FAIL /m, drv);
  t.true((drv.match(/^ok /gm) ?? []).length >= 45, drv);
  t.log(`${programs.length} default-built programs, identical output; passing (no kernels): ${passed.join(', ')}; drvapi: ${(drv.match(/^ok /gm) ?? []).length} checks before its first module`);
});

// NVIDIA's own libcudart.so.13 (the CUDA toolkit's, first on the library
// path through /qcuda/files) runs the -cudart=shared programs over qcuda's
// libcuda.so.1 and prints what they print over qcuda's runtime library.
test.serial('NVIDIA\'s libcudart.so.13 over qcuda\'s libcuda.so.1 runs the -cudart=shared programs as qcuda\'s runtime does', async (t) => {
  const cudart = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'lib64', 'libcudart.so.13');
  if (!fs.existsSync(cudart)) throw new Error(`${cudart} is missing: the CUDA toolkit is part of the build machine`);
  const programs = ['device', 'memcpy', 'stream', 'priorities', 'errors', 'hostmem', 'quota', 'threads', 'callbacks'];
  const script = ['echo "=== loaded"; LD_TRACE_LOADED_OBJECTS=1 LD_LIBRARY_PATH=/qcuda/files:/usr/local/lib /usr/local/bin/device | grep libcudart; echo "=== loaded end"',
    ...programs.map((p) => `echo "=== ${p} qcuda"; LD_LIBRARY_PATH=/usr/local/lib ${p} 2>/dev/null; echo "=== ${p} nvidia"; LD_LIBRARY_PATH=/qcuda/files:/usr/local/lib ${p} 2>/dev/null; echo "=== ${p} end"`)].join('\n');
  const r = await runVm({ ...base, files: [cudart], command: script, backendArgs: ['--provider=host', '--device-memory-limit=1G'], timeoutMs: 300_000 });
  t.is(r.exit, 0, r.stderr);
  // The second pass really runs NVIDIA's library (of the toolkit's size), not qcuda's.
  t.regex(r.stdout.split('=== loaded\n')[1] ?? '', /libcudart\.so\.13 => \/qcuda\/files\/libcudart\.so\.13/);
  for (const p of programs) {
    const ours = r.stdout.split(`=== ${p} qcuda\n`)[1]?.split(`=== ${p} nvidia`)[0] ?? '';
    const theirs = r.stdout.split(`=== ${p} nvidia\n`)[1]?.split(`=== ${p} end`)[0] ?? '';
    t.regex(theirs, new RegExp(`^PASS: ${p}: \\d+ checks$`, 'm'), `${p} over NVIDIA's runtime:\n${theirs.split('\n').filter((l) => /FAIL/.test(l)).join('\n')}`);
    t.is(theirs, ours, p);
  }
});

// QCUDA_STATS: a process says at exit what crossed to the host (round trips:
// synchronous calls and batches of posted work), through either library.
test.serial('QCUDA_STATS counts the round trips to the host: synchronous calls, and batches of posted requests', async (t) => {
  const r = await runVm({ ...base, command: 'QCUDA_STATS=1 stream >/dev/null; QCUDA_STATS=1 stream_static >/dev/null', backendArgs: ['--provider=host'] });
  t.is(r.exit, 0, r.stderr);
  const rows = [...r.stderr.matchAll(/qcuda: (\d+) round trips to the host: (\d+) calls and (\d+) batches carrying (\d+) posted requests/g)].map((m) => m.slice(1).map(Number));
  t.is(rows.length, 2, r.stderr);
  for (const [trips, calls, batches, posted] of rows) {
    t.is(trips, calls + batches);
    t.true(batches > 0 && posted > batches, 'posted requests travel several to a batch');
  }
  t.is(rows[1][3], rows[0][3], 'the driver API posts the same work as qcuda\'s runtime');
  t.true(Math.abs(rows[1][1] - rows[0][1]) <= 2, `synchronous calls: ${rows[0][1]} and ${rows[1][1]}`);
  t.log(`stream: ${rows[0][0]} round trips (${rows[0][3]} requests posted in ${rows[0][2]} batches); stream_static: ${rows[1][0]}`);
});

// A module image crosses once per VM: the first process sends it, the next
// ones (either library: the static cudart's cuLibraryLoadData and qcuda's
// runtime name the same fat binary) find it on the host by its SHA-256.
test.serial('module images cross once per VM: later processes find them on the host by content', async (t) => {
  const r = await runVm({
    ...base,
    command: 'for p in vectorAdd vectorAdd_static vectorAdd; do QCUDA_DEBUG=1 $p 2>&1 | grep "qcuda\\[debug\\]: module of"; done',
    backendArgs: ['--provider=host'],
  });
  t.is(r.exit, 0, r.stderr);
  const lines = r.stdout.split('\n').filter(Boolean);
  t.is(lines.length, 3, r.stdout);
  t.regex(lines[0], /module of (\d+) bytes: \1 of them for this device, sent: cudaErrorNoKernelImageForDevice/);
  for (const l of lines.slice(1)) t.regex(l, /, cached on the host: cudaErrorNoKernelImageForDevice/);
});

// A section of a guest script's stdout: what follows "=== name\n" up to the next "=== ".
function section(stdout: string, name: string): string {
  return stdout.split(`=== ${name}\n`)[1]?.split('\n=== ')[0] ?? '';
}

// Security review finding 2: the callback thread of a process that used a
// host function keeps a CALLBACK_WAIT parked in the backend, so the driver
// must close the session at release with that request still in flight, or
// the process's device memory stays counted against the quota. sessionend
// also resets the device, after which the parked wait is answered with id 0
// ("park again") and a host function launched after the reset still runs.
test.serial('a process that ran a host function frees its memory at exit: 48 MiB three times under a 64 MiB quota (sessionend)', async (t) => {
  const script = [1, 2, 3].map((i) => `echo "=== run ${i}"; sessionend; echo "=== run ${i} exit $?"`).join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=host', '--device-memory-limit=64M'] });
  for (const i of [1, 2, 3]) {
    t.regex(r.stdout, new RegExp(`=== run ${i} exit 0`), `run ${i}:\n${section(r.stdout, `run ${i}`)}`);
    t.regex(section(r.stdout, `run ${i}`), /PASS: sessionend: \d+ checks/, `run ${i}`);
  }
  t.notRegex(r.stderr, /^qcuda: /m, 'no complaint from the library (e.g. about host function 0)');
});

// Finding 8: one process's requests parked in the device (syncs behind a host
// function that never returns, from more threads than the VM has ring slots:
// 4 queues x 256) must not block another process; killed, its session
// closes at once (the driver does not wait for the parked requests), so a
// third process gets its memory back under the same quota.
test.serial('a process with more blocked calls than ring slots leaves room for others, and its memory comes back when it is killed (ringfill)', async (t) => {
  t.timeout(560_000);
  const script = [
    'ringfill hold 1100 48 > hold.out 2>&1 &',
    'pid=$!',
    'i=0; until grep -q "ringfill: holding" hold.out || [ $i -ge 120 ]; do sleep 1; i=$((i+1)); done',
    'echo "=== hold ready after $i s"',
    'echo "=== probe"; timeout -s KILL 120 ringfill probe 1; echo "=== probe exit $?"',
    'kill -9 $pid; wait $pid; echo "=== hold killed $?"',
    'echo "=== after"; timeout -s KILL 120 ringfill probe 48; echo "=== after exit $?"',
    'echo "=== hold output"; cat hold.out',
  ].join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=host', '--device-memory-limit=64M'], timeoutMs: 540_000 });
  t.log(/=== hold ready after \d+ s/.exec(r.stdout)?.[0] ?? 'no hold line');
  t.regex(section(r.stdout, 'hold output'), /ringfill: holding/, r.stdout);
  t.regex(r.stdout, /=== probe exit 0/, `probe:\n${section(r.stdout, 'probe')}`);
  t.regex(section(r.stdout, 'probe'), /PASS: ringfill_probe: \d+ checks/);
  t.regex(r.stdout, /=== hold killed 137/);
  t.regex(r.stdout, /=== after exit 0/, `after:\n${section(r.stdout, 'after')}`);
  t.regex(section(r.stdout, 'after'), /PASS: ringfill_probe: \d+ checks/);
});

// Issue 15: each session sends every request on a queue of its own (its
// SESSION_OPEN says QCUDA_SESSION_OWN_QUEUE), which the backend may hand to
// the session's worker. Read from the backend's per-queue counts at points
// the guest marks (it waits a little at each): three processes held in
// their calls (ringfill hold) own queues 1, 2 and 3, each queue's count is
// its session's calls and its SESSION_OPEN, nothing of theirs on queue 0; a
// fourth process meanwhile finds none free and keeps to queue 0; the three,
// killed, close on their own queues; then a process alone, copying 40 MiB
// (three chunks each way), uses queue 1 and only that.
/**
 * The backend's status, read as the guest prints "=== snapshot LABEL" (the
 * label may be empty), by label: pass onStarted and onConsole to runVm.
 */
function statusAtMarks(): { snaps: Map<string, Promise<QcudaStatus>>; onStarted: (i: { dir: string }) => void; onConsole: (s: string) => void } {
  let dir: string | undefined;
  let seen = '';
  const snaps = new Map<string, Promise<QcudaStatus>>();
  return {
    snaps,
    onStarted: (i) => (dir = i.dir),
    onConsole: (s) => {
      seen += s;
      if (!dir) return;
      // Whole lines only: a mark may come in two pieces of console output.
      for (const m of seen.matchAll(/^=== snapshot ?(\S*)\r?\n/gm)) {
        if (snaps.has(m[1])) continue;
        snaps.set(m[1], readStatus(path.join(dir, 'vhost.sock.status')).then((d) => (d as BackendStatus).status as QcudaStatus));
      }
    },
  };
}

test.serial('each session keeps to a queue of its own while one is free, the others to queue 0 (issue 15)', async (t) => {
  t.timeout(400_000);
  const script = [
    'snap() { echo "=== snapshot $1"; sleep 3; }',
    'snap 0',
    'for i in 1 2 3; do ringfill hold 4 1 > hold$i.out 2>&1 & echo $! >> pids; done',
    'i=0; until [ "$(cat hold1.out hold2.out hold3.out | grep -c "ringfill: holding")" = 3 ] || [ $i -ge 150 ]; do sleep 1; i=$((i+1)); done',
    'echo "=== holding after $i s"',
    'snap 1',
    'echo "=== probe"; timeout -s KILL 120 ringfill probe 1; echo "=== probe exit $?"',
    'snap 2',
    'kill -9 $(cat pids); wait',
    'snap 3',
    'echo "=== alone"; timeout -s KILL 120 ringfill probe 40; echo "=== alone exit $?"',
    'snap 4',
    'echo "=== hold output"; cat hold1.out hold2.out hold3.out',
  ].join('\n');
  const { snaps, onStarted, onConsole } = statusAtMarks();
  const r = await runVm({ ...base, queues: 4, command: script, backendArgs: ['--provider=host'], timeoutMs: 360_000, onStarted, onConsole });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.is(section(r.stdout, 'hold output').match(/^ringfill: holding$/gm)?.length, 3, r.stdout);
  t.regex(r.stdout, /=== probe exit 0/, `probe:\n${section(r.stdout, 'probe')}`);
  t.regex(r.stdout, /=== alone exit 0/, `alone:\n${section(r.stdout, 'alone')}`);
  t.deepEqual([...snaps.keys()], ['0', '1', '2', '3', '4'], 'a snapshot at each mark');
  const [s0, s1, s2, s3, s4] = await Promise.all(['0', '1', '2', '3', '4'].map((n) => snaps.get(n)!));
  const delta = (a: QcudaStatus, b: QcudaStatus) => b.served.map((n, q) => n - a.served[q]);
  t.log(`served per queue: ${[s0, s1, s2, s3, s4].map((s) => `[${s.served}]`).join(' ')}`);

  // Three live sessions: queues 1-3, one each, each count that session's
  // calls and its SESSION_OPEN (the calls it has parked are not answered).
  const held = delta(s0, s1);
  t.is(s1.sessions.length, 3, JSON.stringify(s1.sessions));
  t.is(held[0], 0, `nothing of the three on queue 0: ${held}`);
  t.deepEqual(held.slice(1).sort((a, b) => a - b), s1.sessions.map((s) => s.calls + 1).sort((a, b) => a - b),
    `queues 1-3 served ${held.slice(1)}, sessions made ${s1.sessions.map((s) => s.calls)} calls`);
  // A fourth session, with no queue free: queue 0 only.
  const probe = delta(s1, s2);
  t.true(probe[0] > 2, `the probe's session on queue 0: ${probe}`);
  t.deepEqual(probe.slice(1), [0, 0, 0], `nothing on the owned queues: ${probe}`);
  // Killed, the three close on their own queues (their parked calls are answered there).
  const closed = delta(s2, s3);
  t.deepEqual(s3.sessions, [], 'every session closed');
  t.is(closed[0], 0, `no close on queue 0: ${closed}`);
  for (const q of [1, 2, 3]) t.true(closed[q] >= 1, `queue ${q} closed its session: ${closed}`);
  // The queues are free again; a session alone takes queue 1 and keeps to it.
  const alone = delta(s3, s4);
  t.true(alone[1] > 2, `the session alone on queue 1: ${alone}`);
  t.deepEqual([alone[0], alone[2], alone[3]], [0, 0, 0], `and on no other: ${alone}`);
});

// Security review 2, M2 and M5: what one process can hold is bounded per
// process, however many files of the device it opens (raw ioctls:
// ringhog). In one guest:
// 1. A process with 4 files (ringhog hold 4 1) owns one queue (queue 1),
//    not three: a probe process then gets queue 2 of its own.
// 2. Two processes (ringfill hold) own queues 1 and 2, so the first
//    process's queue came back when it was killed; a process with 4 files
//    and 100 blocked calls on each (ringhog hold 4 100) owns queue 3 and
//    fills queue 0 as far as it may; a probe process, on queue 0, still opens
//    its session and completes its calls (queue 0's reserve). Killed, the
//    hog's parked requests are answered at its close: no more than one
//    process's bound (a quarter of the ring slots) were in the device.
// 3. With transfer_pin_mib at 64, a process with 2 files copying 16 MiB
//    from pageable memory on 8 threads behind a host function has at most
//    64 MiB pinned; once the function "runs" every copy succeeds.
test.serial('one process with several files is bounded as one: one own queue, a quarter of the slots, queue 0 kept for others, transfer pins bounded (review 2, M2 and M5)', async (t) => {
  t.timeout(620_000);
  const script = [
    'snap() { echo "=== snapshot $1"; sleep 3; }',
    'holding() { i=0; until [ "$(cat "$@" | grep -c "holding")" = $# ] || [ $i -ge 200 ]; do sleep 1; i=$((i+1)); done; echo "=== holding $* after $i s"; }',
    'echo "=== bound"; dmesg | grep -o "[0-9]* requests per process"',
    'ringhog hold 4 1 > h1.out 2>&1 & h1=$!',
    'holding h1.out',
    'snap a',
    'echo "=== probe1"; timeout -s KILL 120 ringfill probe 1; echo "=== probe1 exit $?"',
    'snap b',
    'kill -9 $h1; wait $h1',
    'snap c',
    'ringfill hold 4 1 > a.out 2>&1 & a=$!',
    'holding a.out',
    'ringfill hold 4 1 > b.out 2>&1 & b=$!',
    'holding b.out',
    'ringhog hold 4 100 > h2.out 2>&1 & h2=$!',
    'holding h2.out',
    'snap d',
    'echo "=== probe2"; timeout -s KILL 120 ringfill probe 1; echo "=== probe2 exit $?"',
    'snap e',
    'kill -9 $h2; wait $h2; sleep 2',
    'snap f',
    'kill -9 $a $b; wait',
    'echo 64 > /sys/module/qcuda/parameters/transfer_pin_mib',
    'echo "=== pins"; timeout -s KILL 200 ringhog pins 2 4; echo "=== pins exit $?"',
    'echo "=== outputs"; cat h1.out a.out b.out h2.out',
  ].join('\n');
  const { snaps, onStarted, onConsole } = statusAtMarks();
  const r = await runVm({ ...base, queues: 4, command: script, backendArgs: ['--provider=host'], timeoutMs: 600_000, onStarted, onConsole });
  t.log(r.stdout.split('\n').filter((l) => l.startsWith('=== holding')).join('; '));
  t.is(section(r.stdout, 'outputs').match(/^(ringhog|ringfill): holding$/gm)?.length, 4, r.stdout);
  t.deepEqual([...snaps.keys()], ['a', 'b', 'c', 'd', 'e', 'f'], r.stdout);
  const [sa, sb, sc, sd, se, sf] = await Promise.all(['a', 'b', 'c', 'd', 'e', 'f'].map((n) => snaps.get(n)!));
  const delta = (x: QcudaStatus, y: QcudaStatus) => y.served.map((n, q) => n - x.served[q]);
  t.log(`served per queue: ${[sa, sb, sc, sd, se, sf].map((s) => `[${s.served}]`).join(' ')}`);
  const bound = Number(/(\d+) requests per process/.exec(section(r.stdout, 'bound'))?.[1]);
  t.is(bound, 256, `4 queues of 256: ${section(r.stdout, 'bound')}`);

  // 1. The 4-file process owns one queue: the probe gets one of its own.
  t.regex(r.stdout, /=== probe1 exit 0/, `probe1:\n${section(r.stdout, 'probe1')}`);
  const p1 = delta(sa, sb);
  t.is(p1[0], 0, `the probe not on queue 0: ${p1}`);
  t.true(p1[2] > 2, `the probe on queue 2 of its own: ${p1}`);

  // 2. The queue the first hog owned came back; the probe finds room on queue 0.
  const ab = delta(sc, sd);
  t.true(ab[1] > 2 && ab[2] > 2 && ab[3] > 2, `two processes and the hog on queues 1, 2, 3: ${ab}`);
  t.regex(r.stdout, /=== probe2 exit 0/, `probe2:\n${section(r.stdout, 'probe2')}`);
  t.regex(section(r.stdout, 'probe2'), /PASS: ringfill_probe: \d+ checks/);
  const p2 = delta(sd, se);
  t.true(p2[0] > 2, `the probe on queue 0: ${p2}`);
  // Its parked requests and its 4 closes are answered as it is killed: at
  // most its bound in all, and on queue 0 at most the ring less its reserve
  // (an eighth) and the process's share of it (QCUDA_RESERVE_SHARE, 4).
  const closed = delta(se, sf);
  const inDevice = closed.reduce((n, x) => n + x, 0) - 4;
  t.true(inDevice <= bound, `the hog had ${inDevice} requests in the device (${closed}), its bound is ${bound}`);
  t.true(closed[0] - 3 <= 256 - 32 + 4, `${closed[0] - 3} of them on queue 0`);
  t.true(closed[0] - 3 >= 200, `the hog filled queue 0 (${closed[0] - 3})`);

  // 3. Transfer pins.
  t.log(section(r.stdout, 'pins').split('\n')[0]);
  t.regex(r.stdout, /=== pins exit 0/, `pins:\n${section(r.stdout, 'pins')}`);
  // (KiB; other pins in the guest come and go: a few pages.)
  const pinned = Number(/8 copies of 16 MiB waiting: (-?\d+) KiB pinned/.exec(section(r.stdout, 'pins'))?.[1]);
  t.true(pinned <= 65 * 1024, `${pinned} KiB pinned, the bound is 64 MiB`);
  t.true(pinned >= 63 * 1024, `${pinned} KiB pinned: four copies were in the device`);
  t.regex(section(r.stdout, 'pins'), /8 copies succeeded, 0 failed/);
});

// Finding 12: pinned host memory (cudaHostRegister, cudaHostAlloc,
// cudaMallocManaged) counts against RLIMIT_MEMLOCK of an unprivileged
// process, and is given back when freed.
test.serial('pinned host memory counts against RLIMIT_MEMLOCK of an unprivileged process (memlock)', async (t) => {
  const r = await runVm({ ...base, command: 'memlock', backendArgs: ['--provider=host'] });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.regex(r.stdout, /PASS: memlock: \d+ checks/);
});

// Finding 10: a DEVICE_RESET that completes while a HOST_MAP is in flight
// must not drop that map's hold on its pages (else HOST_FREE lets the guest
// reuse pages the device may map). A race: three runs of 6000 rounds each
// (one run caught the old driver 5 times in 6).
test.serial('a DEVICE_RESET racing HOST_MAP keeps the hold of the map in flight (mapreset)', async (t) => {
  const script = [1, 2, 3].map((i) => `echo "=== run ${i}"; mapreset; echo "=== run ${i} exit $?"`).join('\n');
  const r = await runVm({ ...base, command: script, backendArgs: ['--provider=host'] });
  for (const i of [1, 2, 3]) {
    t.regex(r.stdout, new RegExp(`=== run ${i} exit 0`), `run ${i}:\n${section(r.stdout, `run ${i}`)}`);
    t.regex(section(r.stdout, `run ${i}`), /PASS: mapreset: \d+ checks/, `run ${i}`);
  }
});

test.serial('QEMU reconnects to a restarted backend and the guest carries on (qemu-patches/0002)', async (t) => {
  let info: { backendPid: number; qemuPid: number; dir: string } | undefined;
  const restarted: number[] = [];
  let seen = '';
  let killed = false;
  const r = await runVm({
    ...base,
    command: 'nop_test -t 2 -n 20000',
    restartBackend: 1,
    onStarted: (i) => (info = i),
    onBackendRestarted: (pid) => restarted.push(pid),
    onConsole: (s) => {
      seen += s;
      if (killed || !info || !seen.includes('qcuda-init: qcuda.ko loaded')) return;
      killed = true;
      setTimeout(() => process.kill(info!.backendPid, 'SIGKILL'), 300); // NOPs are in flight by then
    },
  });
  t.is(restarted.length, 1, 'a second backend was started');
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.regex(r.stdout, /nop_test: PASS 40000 NOPs/);
  t.false(alive(info!.backendPid));
  t.false(alive(restarted[0]));
  t.false(alive(info!.qemuPid));
});

// --- Host directories in the guest (qcuda vm --share, virtiofs) -------------

// The processes whose command line names the run's temp dir: the virtiofsd
// (its socket and source are there) and its sandboxed child, QEMU, the backend.
function processesOf(dir: string): number[] {
  const pids: number[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e) || +e === process.pid) continue;
    try {
      if (fs.readFileSync(`/proc/${e}/cmdline`, 'utf8').includes(dir)) pids.push(+e);
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

function nothingLeft(t: import('ava').ExecutionContext, info: StartedInfo | undefined): void {
  t.truthy(info, 'the run started');
  for (const pid of info!.virtiofsdPids) t.false(alive(pid), `virtiofsd ${pid} is gone`);
  t.false(alive(info!.qemuPid), 'QEMU is gone');
  t.false(alive(info!.backendPid), 'the backend is gone');
  t.deepEqual(processesOf(info!.dir), [], 'no process of the run is left (virtiofsd children included)');
  t.false(fs.existsSync(info!.dir), 'the temp dir is gone');
}

// QCUDA_VIRTIOFSD (make sets it) or build/vm/virtiofsd (`make virtiofsd`).
const virtiofsd = defaultVirtiofsd();
const shareBase = { ...base, virtiofsd, timeoutMs: 90_000 };

function treeOf(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of fs.readdirSync(dir, { recursive: true }) as string[]) {
    const p = path.join(dir, e);
    const st = fs.lstatSync(p);
    out[e] = st.isFile() ? `${st.mode.toString(8)} ${st.mtimeMs} ${crypto.createHash('sha256').update(fs.readFileSync(p)).digest('hex')}` : st.mode.toString(8);
  }
  return out;
}

test.serial('share: the guest reads a host directory byte for byte, and cannot write to it, even after remounting it rw', async (t) => {
  const d = tmpDir(t);
  const blob = crypto.randomBytes(1 << 20);
  fs.writeFileSync(path.join(d, 'blob'), blob);
  fs.writeFileSync(path.join(d, 'bytes'), Buffer.from(Array.from({ length: 256 }, (_, i) => i)));
  fs.mkdirSync(path.join(d, 'sub'));
  fs.writeFileSync(path.join(d, 'sub', 'name with spaces.txt'), 'deep\n');
  const before = treeOf(d);
  const tryWrites = (tag: string) => [
    `echo x > ${d}/new && echo "${tag} create: ok" || echo "${tag} create: refused"`,
    `echo y >> ${d}/blob && echo "${tag} append: ok" || echo "${tag} append: refused"`,
    `rm ${d}/bytes 2>&1 && echo "${tag} rm: ok" || echo "${tag} rm: refused"`,
    `mkdir ${d}/dir 2>&1 && echo "${tag} mkdir: ok" || echo "${tag} mkdir: refused"`,
    `chmod 4777 ${d}/blob 2>&1 && echo "${tag} chmod: ok" || echo "${tag} chmod: refused"`,
    `touch ${d}/sub 2>&1 && echo "${tag} touch: ok" || echo "${tag} touch: refused"`,
  ];
  let info: StartedInfo | undefined;
  const r = await runVm({
    ...shareBase, shares: [{ hostDir: d }], onStarted: (i) => (info = i),
    command: [
      `grep " ${d} " /proc/mounts`,
      `sha256sum ${d}/blob | cut -d' ' -f1; stat -c %s ${d}/blob`,
      `od -An -tx1 -v ${d}/bytes | tr -d ' \\n'; echo`,
      `cat "${d}/sub/name with spaces.txt"`,
      ...tryWrites('ro'),
      `mount -o remount,rw ${d} && echo "remounted: $(grep " ${d} " /proc/mounts | cut -d' ' -f4)"`,
      ...tryWrites('rw'),
    ].join('\n'),
  });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  const lines = r.stdout.split('\n');
  t.regex(lines[0], new RegExp(`^qcudashare0 ${d} virtiofs ro[, ]`), 'mounted read-only at the same path');
  t.is(lines[1], crypto.createHash('sha256').update(blob).digest('hex'));
  t.is(lines[2], String(blob.length));
  t.is(lines[3], Buffer.from(Array.from({ length: 256 }, (_, i) => i)).toString('hex'));
  t.is(lines[4], 'deep');
  t.regex(r.stdout, /^remounted: rw/m, 'guest root can remount its side read-write...');
  for (const tag of ['ro', 'rw'])
    for (const op of ['create', 'append', 'rm', 'mkdir', 'chmod', 'touch']) t.regex(r.stdout, new RegExp(`^${tag} ${op}: refused$`, 'm'), `${tag} ${op}`);
  t.regex(r.stderr, /Read-only file system/, '...but the host refuses every write (EROFS)');
  t.deepEqual(treeOf(d), before, 'the host directory is unchanged: same files, modes, times and contents, nothing new');
  nothingLeft(t, info);
});

test.serial('share: two shares at once through `qcuda vm --share`, and a guest write to the :rw one appears on the host', (t) => {
  const ro = tmpDir(t);
  const rw = tmpDir(t);
  fs.writeFileSync(path.join(ro, 'in.txt'), 'input from the host\n');
  fs.writeFileSync(path.join(rw, 'old.txt'), 'old\n');
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const r = spawnSync(process.execPath, [cli, 'vm', '--quiet', '--qemu', base.qemu, '--kernel', base.kernel, '--initrd', base.initrd,
    `--virtiofsd=${virtiofsd}`, `--share=${ro}:/mnt/in`, `--share=${rw}:/mnt/out:rw`, '--',
    'cat /mnt/in/in.txt; tr a-z A-Z < /mnt/in/in.txt > /mnt/out/result.txt; mkdir /mnt/out/sub; echo made > /mnt/out/sub/f;',
    'rm /mnt/out/old.txt; echo no > /mnt/in/x || echo in-refused; grep -o "/mnt/[a-z]* virtiofs r[ow]" /proc/mounts'], { encoding: 'utf8', timeout: 120_000 });
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, 'input from the host\nin-refused\n/mnt/in virtiofs ro\n/mnt/out virtiofs rw\n');
  t.is(fs.readFileSync(path.join(rw, 'result.txt'), 'utf8'), 'INPUT FROM THE HOST\n');
  t.is(fs.readFileSync(path.join(rw, 'sub', 'f'), 'utf8'), 'made\n');
  t.false(fs.existsSync(path.join(rw, 'old.txt')), 'a guest rm reaches the host');
  t.deepEqual(fs.readdirSync(ro), ['in.txt']);
  t.deepEqual(processesOf(ro), []);
  t.deepEqual(processesOf(rw), []);
});

test.serial('share: a bad share is refused with a clear error before anything starts', async (t) => {
  const d = tmpDir(t);
  fs.writeFileSync(path.join(d, 'file'), '');
  const tmpBefore = fs.readdirSync(os.tmpdir()).filter((e) => e.startsWith('qcuda-vm-')).sort();
  const bad: [VmOptions['shares'], RegExp][] = [
    [[{ hostDir: path.join(d, 'nope') }], /share .*\/nope: no such directory on the host/],
    [[{ hostDir: path.join(d, 'file') }], /share .*\/file: not a directory/],
    [[{ hostDir: d, guestDir: 'relative/dir' }], /guest directory 'relative\/dir' is not absolute/],
    [[{ hostDir: d, guestDir: '/proc/x' }], /cannot mount it at \/proc\/x in the guest/],
    [[{ hostDir: d, guestDir: '/a' }, { hostDir: d, guestDir: '/a/' }], /both at \/a in the guest/],
    [Array.from({ length: 9 }, (_, i) => ({ hostDir: d, guestDir: `/s${i}` })), /at most 8 shares, not 9/],
  ];
  for (const [shares, msg] of bad) {
    let started = false;
    const e = await t.throwsAsync(runVm({ ...shareBase, shares, command: 'true', onStarted: () => (started = true) }), { instanceOf: VmConfigError });
    t.regex(e!.message, msg);
    t.false(started);
  }
  const noFsd = await t.throwsAsync(runVm({ ...shareBase, virtiofsd: path.join(d, 'no-virtiofsd'), shares: [{ hostDir: d }], command: 'true' }), { instanceOf: VmConfigError });
  t.regex(noFsd!.message, /no-virtiofsd is not there or not executable/);
  t.deepEqual(fs.readdirSync(os.tmpdir()).filter((e) => e.startsWith('qcuda-vm-')).sort(), tmpBefore, 'no temp dir was made');
  // The CLI says the same and exits 2 (usage).
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const cases: [string[], RegExp][] = [
    [[`--share=${d}/nope`], /no such directory on the host/],
    [[`--share=${d}/file:/x`], /not a directory/],
    [[`--share=${d}:rel`], /'rel' is neither an absolute guest directory nor rw\/ro/],
    [[`--share=${d}:/x:rw:more`], /expected HOSTDIR\[:GUESTDIR\[:rw\]\]/],
    [Array.from({ length: 9 }, (_, i) => `--share=${d}:/s${i}`), /at most 8 shares/],
  ];
  for (const [args, msg] of cases) {
    const r = spawnSync(process.execPath, [cli, 'vm', '--qemu', base.qemu, '--kernel', base.kernel, '--initrd', base.initrd, ...args, '--', 'true'], { encoding: 'utf8' });
    t.is(r.status, 2, args.join(' '));
    t.regex(r.stderr, msg);
  }
  const help = spawnSync(process.execPath, [cli, 'help'], { encoding: 'utf8' });
  for (const s of ['--share=HOSTDIR[:GUESTDIR[:rw]]', '--host-root', '--host-root-writable', '--virtiofsd=PATH']) t.true(help.stdout.includes(s), s);
});

// The namespace virtiofsd runs in, without a VM: a host tree with a tmpfs
// and a proc mounted below it (made in a mount namespace of the test's own),
// served by a stand-in for virtiofsd that reports what it sees.
test.serial('share: every mount below a read-only share is read-only for virtiofsd, kernel filesystems are left out (no VM)', (t) => {
  const d = tmpDir(t);
  fs.mkdirSync(path.join(d, 'src', 'sub'), { recursive: true });
  fs.mkdirSync(path.join(d, 'src', 'proc'));
  fs.mkdirSync(path.join(d, 'mnt'));
  fs.writeFileSync(path.join(d, 'src', 'f'), 'top\n');
  const fake = path.join(d, 'fake-virtiofsd');
  fs.writeFileSync(fake, [
    '#!/bin/sh',
    'for a; do case $a in source=*) src=${a#source=} ;; esac; done',
    'findmnt -R -n -r -o VFS-OPTIONS,FSTYPE "$src"',
    'echo "f: $(cat "$src/f") sub/g: $(cat "$src/sub/g") proc: $(ls -A "$src/proc" | wc -l)"',
    'for f in f sub/g sub/new new; do (echo x >> "$src/$f") 2>/dev/null && echo "write $f: ok" || echo "write $f: refused"; done',
  ].join('\n'), { mode: 0o755 });
  const shares = path.resolve(__dirname, '..', '..', 'backend/src/vm/shares.js');
  const js = `const s = require(${JSON.stringify(shares)}); const [sh] = s.resolveShares([{ hostDir: ${JSON.stringify(path.join(d, 'src'))}, guestDir: '/x', writable: process.argv[1] === 'rw' }]);
    const c = s.virtiofsdCommand(${JSON.stringify(fake)}, sh, ${JSON.stringify(path.join(d, 'mnt'))}, '/nonexistent.sock');
    const r = require('node:child_process').spawnSync(c.cmd, c.args, { encoding: 'utf8' }); process.stdout.write(r.stdout + r.stderr); process.exit(r.status);`;
  const run = (mode: string) => spawnSync('unshare', ['--mount', '--propagation', 'private', '--', 'sh', '-c',
    'mount -t tmpfs t "$1/src/sub" && echo g > "$1/src/sub/g" && mount -t proc proc "$1/src/proc" && exec "$2" -e "$3" "$4"',
    'x', d, process.execPath, js, mode], { encoding: 'utf8' });
  const ro = run('ro');
  t.is(ro.status, 0, ro.stdout + ro.stderr);
  const mounts = ro.stdout.split('\n').filter((l) => !/^(f:|write )/.test(l) && l);
  t.is(mounts.length, 2, `the share and the tmpfs below it, not the proc:\n${ro.stdout}`);
  t.regex(mounts[1], / tmpfs$/);
  for (const l of mounts) t.regex(l, /^ro,nosuid,nodev[, ]/, 'ro,nosuid,nodev');
  t.regex(ro.stdout, /^f: top sub\/g: g proc: 0$/m, 'the files are there, the proc mount is not');
  for (const f of ['f', 'sub/g', 'sub/new', 'new']) t.regex(ro.stdout, new RegExp(`^write ${f}: refused$`, 'm'));
  t.is(fs.readFileSync(path.join(d, 'src', 'f'), 'utf8'), 'top\n');
  t.deepEqual(fs.readdirSync(path.join(d, 'mnt')), [], 'nothing was mounted outside the namespaces');
  const rw = run('rw');
  t.is(rw.status, 0, rw.stdout + rw.stderr);
  for (const l of rw.stdout.split('\n').filter((l) => !/^(f:|write )/.test(l) && l)) t.regex(l, /^rw,nosuid,nodev[, ]/, ':rw: nosuid,nodev only');
  for (const f of ['f', 'sub/g', 'sub/new', 'new']) t.regex(rw.stdout, new RegExp(`^write ${f}: ok$`, 'm'));
  t.is(fs.readFileSync(path.join(d, 'src', 'f'), 'utf8'), 'top\nx\n');
});

// Nested below a read-only share, a guest directory that does not exist on
// the host cannot be made: the guest reports it and the run fails by name.
test.serial('share: a share the guest cannot mount fails the run as "guest", naming it', async (t) => {
  const outer = tmpDir(t);
  const inner = tmpDir(t);
  let info: StartedInfo | undefined;
  const e = await t.throwsAsync(runVm({
    ...shareBase, shares: [{ hostDir: outer, guestDir: '/mnt/a' }, { hostDir: inner, guestDir: '/mnt/a/new' }], command: 'echo ran',
    onStarted: (i) => (info = i),
  }), { instanceOf: VmError });
  t.is(e!.side, 'guest');
  t.regex(e!.message, new RegExp(`the guest could not mount share ${inner} at /mnt/a/new:\n.*Read-only file system`));
  t.notRegex(e!.consoleText, /^ran/m, 'the command did not run');
  t.deepEqual(fs.readdirSync(outer), []);
  nothingLeft(t, info);
});

test.serial('share: a virtiofsd that dies mid-run fails the run as "virtiofsd" and leaves nothing behind', async (t) => {
  const d = tmpDir(t);
  fs.writeFileSync(path.join(d, 'f'), 'x');
  let info: StartedInfo | undefined;
  let seen = '';
  let killed = false;
  const e = await t.throwsAsync(runVm({
    ...shareBase, shares: [{ hostDir: d }], command: `while :; do cat ${d}/f >/dev/null; done`,
    onStarted: (i) => (info = i),
    onConsole: (s) => {
      seen += s;
      if (killed || !info || !seen.includes('qcuda-init: share qcudashare0')) return;
      killed = true;
      setTimeout(() => process.kill(info!.virtiofsdPids[0], 'SIGKILL'), 300);
    },
  }), { instanceOf: VmError });
  t.is(e!.side, 'virtiofsd', e!.message);
  t.regex(e!.message, new RegExp(`the virtiofsd of share ${d} died during the run \\(killed by SIGKILL\\)`));
  nothingLeft(t, info);
});

// The host's root filesystem in the guest (virtme-ng style): / read-only at
// /host, without the host's kernel filesystems.
test.serial('share: the host\'s root filesystem at /host, read-only, without its /proc, /sys and /dev/pts', async (t) => {
  let info: StartedInfo | undefined;
  const r = await runVm({
    ...shareBase, shares: [{ hostDir: '/' }], onStarted: (i) => (info = i),
    command: [
      'echo "=== proc $(ls -A /host/proc | wc -l) sys $(ls -A /host/sys | wc -l) devpts $(test -e /host/dev/pts/ptmx && echo yes || echo no)"',
      'echo "=== os $(grep -c . /host/etc/os-release)"',
      'touch /host/etc/qcuda-was-here 2>/dev/null && echo "=== write ok" || echo "=== write refused"',
    ].join('\n'),
  });
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.regex(r.stdout, /^=== proc 0 sys 0 devpts no$/m, 'the host\'s /proc, /sys and /dev/pts are left out');
  t.is(r.stdout.match(/^=== os (\d+)$/m)?.[1], String(fs.readFileSync('/etc/os-release', 'utf8').split('\n').filter(Boolean).length), 'the host\'s files are there');
  t.regex(r.stdout, /^=== write refused$/m);
  t.false(fs.existsSync('/etc/qcuda-was-here'));
  nothingLeft(t, info);
});

// `qcuda vm --host-root`: the command runs chrooted in the host's root
// filesystem (qcuda-chroot), in the current directory, and a host CUDA
// program keeps the host's runtime (NVIDIA's libcudart.so.13, from the
// host's library paths) over qcuda's libcuda.so.1.
test.serial('share: `qcuda vm --host-root` runs host programs on the host\'s root filesystem, over qcuda\'s libcuda.so.1', (t) => {
  const bin = path.resolve(__dirname, '..', '..', '..', 'build', 'guest', 'bin');
  if (!fs.existsSync(path.join(bin, 'memcpy'))) throw new Error(`${bin}/memcpy is not built: run this through make test`);
  const cwd = fs.realpathSync(bin);
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const script = [
    'echo "=== chroot $(pwd) $(ls /proc/self/ | grep -cx maps) $(test -c /dev/qcuda0 && echo dev)"',
    'python3 -c "print(\'=== python\', 6 * 7)"',
    'touch /etc/qcuda-was-here 2>/dev/null && echo "=== write ok" || echo "=== write refused"',
    'echo tmp > /tmp/t && echo "=== tmp $(cat /tmp/t)"',
    'echo "=== libcuda $(LD_TRACE_LOADED_OBJECTS=1 ./drvapi | grep -o "/run/qcuda/lib/libcuda.so.1")"',
    'echo "=== libcudart $(LD_TRACE_LOADED_OBJECTS=1 ./memcpy | grep -c "/run/qcuda")"',
    './memcpy | tail -1',
  ].join('; ');
  // (Absolute paths: the command runs in another directory.)
  const r = spawnSync(process.execPath, [cli, 'vm', '--quiet', '--host-root', '--provider=host', '--device-memory-limit=1G', '--qemu', path.resolve(base.qemu),
    '--kernel', path.resolve(base.kernel), '--initrd', path.resolve(base.initrd), `--virtiofsd=${path.resolve(virtiofsd)}`, '--', script],
  { encoding: 'utf8', timeout: 120_000, cwd });
  t.is(r.status, 0, r.stderr);
  t.regex(r.stdout, new RegExp(`^=== chroot ${cwd} 1 dev$`, 'm'), 'chrooted in the current directory, with the guest\'s /proc and /dev/qcuda0');
  t.regex(r.stdout, /^=== python 42$/m, 'the host\'s python3 runs');
  t.regex(r.stdout, /^=== write refused$/m);
  t.regex(r.stdout, /^=== tmp tmp$/m, 'a writable /tmp');
  t.false(fs.existsSync('/etc/qcuda-was-here'));
  t.regex(r.stdout, /^=== libcuda \/run\/qcuda\/lib\/libcuda.so.1$/m, 'a driver-API program loads qcuda\'s libcuda.so.1');
  t.regex(r.stdout, /^=== libcudart 0$/m, 'a -cudart=shared program keeps the host\'s runtime (NVIDIA\'s)');
  t.regex(r.stdout, /^PASS: memcpy: \d+ checks$/m, 'NVIDIA\'s runtime over qcuda\'s libcuda.so.1');
});

// Issue 34: `import transformers` under --host-root failed with EMFILE: the
// guest's /init ran commands at the kernel's 1024 open files (this test
// fails there, after 1020). virtiofsd needs an fd per inode the guest has
// looked up plus one per file it holds open; `qcuda vm` runs under a login's
// soft limit (prlimit --nofile=1024:HARD) and the runner lifts it. A program
// built here holds every file of a shared directory open at once, reads
// each, and prints how many it opened and the sum of their numbers. 20,000
// files where the hard limit lets virtiofsd hold 2 fds each; fewer under a
// lower one (a container's root cannot raise it: 20000 on the build
// machine, 9,500 files).
test.serial('share: a guest process holds thousands of shared files open at once (open-file limits of guest and virtiofsd)', (t) => {
  const hard = Number(/^Max open files\s+\S+\s+(\S+)/m.exec(fs.readFileSync('/proc/self/limits', 'utf8'))?.[1] ?? 0) || 1 << 20;
  const n = Math.min(20_000, Math.floor((hard - 1000) / 2));
  t.true(n > 4096, `the hard limit (${hard}) leaves room for more than 4096 files`);
  const dir = tmpDir(t);
  const tree = path.join(dir, 'tree');
  fs.mkdirSync(tree);
  for (let i = 0; i < n; i++) fs.writeFileSync(path.join(tree, `f${i}`), `${i}\n`);
  const src = path.join(dir, 'hold_open.c');
  fs.writeFileSync(src, [
    '#include <dirent.h>',
    '#include <errno.h>',
    '#include <fcntl.h>',
    '#include <stdio.h>',
    '#include <stdlib.h>',
    '#include <string.h>',
    '#include <unistd.h>',
    'int main(int argc, char **argv) {',
    '  DIR *d = opendir(argv[1]);',
    '  if (!d || chdir(argv[1]) != 0) { perror(argv[1]); return 2; }',
    '  int *fds = NULL, n = 0, cap = 0;',
    '  struct dirent *e;',
    '  while ((e = readdir(d))) {',
    '    if (e->d_name[0] == \'.\') continue;',
    '    if (n == cap) fds = realloc(fds, (cap = cap ? 2 * cap : 1024) * sizeof *fds);',
    '    int fd = open(e->d_name, O_RDONLY);',
    '    if (fd < 0) { printf("open %s after %d open: %s\\n", e->d_name, n, strerror(errno)); return 1; }',
    '    fds[n++] = fd;',
    '  }',
    '  long sum = 0;',
    '  for (int i = 0; i < n; i++) {',
    '    char b[32] = {0};',
    '    if (read(fds[i], b, sizeof b - 1) <= 0) { printf("read %d: %s\\n", i, strerror(errno)); return 1; }',
    '    sum += atol(b);',
    '  }',
    '  printf("opened %d sum %ld\\n", n, sum);',
    '  return 0;',
    '}',
  ].join('\n'));
  const cc = spawnSync('gcc', ['-O2', '-o', path.join(dir, 'hold_open'), src], { encoding: 'utf8' });
  t.is(cc.status, 0, cc.stderr);
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const r = spawnSync('prlimit', ['--nofile=1024:', '--', process.execPath, cli, 'vm', '--quiet', '--timeout=360', '--qemu', base.qemu, '--kernel', base.kernel,
    '--initrd', base.initrd, `--virtiofsd=${virtiofsd}`, `--share=${tree}:/mnt/tree`, `--file=${path.join(dir, 'hold_open')}`, '--',
    'echo "limits $(ulimit -Sn) $(ulimit -Hn)"; hold_open /mnt/tree'], { encoding: 'utf8', timeout: 400_000 });
  t.is(r.status, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.is(r.stdout, `limits 1048576 1048576\nopened ${n} sum ${(n * (n - 1)) / 2}\n`);
  t.deepEqual(processesOf(tree), [], 'no virtiofsd is left');
});

// --host-root-writable: the host's root as the lower layer of an overlay
// on guest RAM. A command writes beside a host file and changes it, reads
// both back; the host directory and /etc are unchanged afterwards.
test.serial('share: `qcuda vm --host-root-writable` lets the command write anywhere, and the host\'s files stay unchanged', (t) => {
  const cwd = fs.realpathSync(tmpDir(t));
  fs.writeFileSync(path.join(cwd, 'old.txt'), 'old\n');
  const before = treeOf(cwd);
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const script = [
    'echo new > new.txt && cat new.txt',
    'echo more >> old.txt && cat old.txt',
    'echo x > /etc/qcuda-was-here && echo "=== etc $(cat /etc/qcuda-was-here)"',
    'python3 -c "open(\'py.txt\', \'w\').write(\'py\')" && echo "=== python $(cat py.txt)"',
    'echo "=== limits $(ulimit -Sn) $(ulimit -Hn)"',
  ].join('; ');
  const r = spawnSync(process.execPath, [cli, 'vm', '--quiet', '--host-root-writable', '--provider=host', '--device-memory-limit=1G', '--qemu', path.resolve(base.qemu),
    '--kernel', path.resolve(base.kernel), '--initrd', path.resolve(base.initrd), `--virtiofsd=${path.resolve(virtiofsd)}`, '--', script],
  { encoding: 'utf8', timeout: 120_000, cwd });
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, 'new\nold\nmore\n=== etc x\n=== python py\n=== limits 1048576 1048576\n');
  t.deepEqual(treeOf(cwd), before, 'the host directory is unchanged');
  t.false(fs.existsSync('/etc/qcuda-was-here'));
});

// The other half of issue 15's own queues: the backend hands each owned
// queue to its session's worker (--own-queues=yes; with the host provider,
// host-memory workers), so the backend itself answers only each SESSION_OPEN
// there. Programs one after another (each takes queue 1 in turn, the queue
// going back to the backend between them), then two at once (queues 1 and
// 2), one with host functions (callbacks: parked waits in its worker).
test.serial('own queues in a guest: each process\'s queue is served by its worker; the backend answers only the SESSION_OPENs there', async (t) => {
  t.timeout(400_000);
  const programs = ['memcpy', 'device', 'stream', 'callbacks'];
  const script = [
    ...programs.map((p) => `${p} > ${p}.out 2>&1; echo "=== ${p} exit $?"; tail -1 ${p}.out`),
    'memcpy > m2.out 2>&1 & a=$!; callbacks > c2.out 2>&1 & b=$!; wait $a; echo "=== pair memcpy exit $?"; wait $b; echo "=== pair callbacks exit $?"; tail -1 m2.out c2.out',
    // A worker ends a little after its session's close is answered: the backend then ends the session.
    'sleep 3; echo "=== snapshot"; sleep 3',
  ].join('\n');
  const { snaps, onStarted, onConsole } = statusAtMarks();
  const r = await runVm({ ...base, queues: 4, command: script, backendArgs: ['--provider=host', '--own-queues=yes'], timeoutMs: 360_000, onStarted, onConsole });
  const snap = snaps.get('');
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  for (const p of programs) t.regex(r.stdout, new RegExp(`=== ${p} exit 0\\n(PASS: ${p}: \\d+ checks)`), r.stdout);
  t.regex(r.stdout, /=== pair memcpy exit 0/, r.stdout);
  t.regex(r.stdout, /=== pair callbacks exit 0/, r.stdout);
  t.is(r.stdout.match(/^PASS: /gm)?.length, programs.length + 2, r.stdout);
  t.truthy(snap, 'the status was read');
  const s = await snap!;
  t.log(`served per queue: [${s.served}]`);
  // Queue 1: the four programs' and the pair's first SESSION_OPEN; queue 2: the pair's second.
  t.is(s.served[1], programs.length + 1, `the backend answered only SESSION_OPENs on queue 1: [${s.served}]`);
  t.is(s.served[2], 1, `and on queue 2: [${s.served}]`);
  t.deepEqual(s.sessions, [], 'every session closed');
  t.is(s.deviceMemory.used, 0, 'and gave its memory back');
});
