// Real QEMU, a real guest kernel and the real backend: the guest driver
// probes the device and NOPs round-trip on every queue from many threads;
// failures of either side are reported by name and leave nothing behind.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { runVm, VmError, type VmOptions } from '../../backend/src/vm/runner';
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

test.serial('`qcuda vm` runs a command in a guest and exits with its status', (t) => {
  const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
  const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
  const r = spawnSync(process.execPath, [cli, 'vm', '--quiet', '--qemu', base.qemu, '--kernel', base.kernel, '--initrd', base.initrd, '--',
    'nop_test -t 4 -n 50 && echo guest-ok && exit 3'], { encoding: 'utf8', timeout: 180_000 });
  t.is(r.status, 3, r.stderr);
  t.regex(r.stdout, /nop_test: PASS 200 NOPs\nguest-ok\n$/);
  t.regex(r.stderr, /guest command exited with status 3/);
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
  for (const p of ['callbacks', 'device', 'errors', 'hostmem', 'memcpy', 'priorities', 'quota', 'stream', 'threads']) t.true(passed.includes(p), `${p} passed`);
  // The driver-API program runs every check up to its first module here.
  const drv = r.stdout.split('=== drvapi\n')[1]?.split('=== drvapi exit')[0] ?? '';
  t.is(/=== drvapi exit (\d+)/.exec(r.stdout)?.[1], '77', drv);
  t.regex(drv, /^SKIP: drvapi: no kernel support on this device \(CUDA_ERROR_NO_BINARY_FOR_GPU\)$/m);
  t.notRegex(drv, /^FAIL /m, drv);
  t.true((drv.match(/^ok /gm) ?? []).length >= 45, drv);
  t.log(`${programs.length} default-built programs, identical output; passing (no kernels): ${passed.join(', ')}; drvapi: ${(drv.match(/^ok /gm) ?? []).length} checks before its first module`);
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
