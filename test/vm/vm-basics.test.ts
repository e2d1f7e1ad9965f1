// Real QEMU, a real guest kernel and the real backend: the guest driver
// probes the device and NOPs round-trip on every queue from many threads;
// a command's output and status come back; failures of either side are
// reported by name and leave nothing behind; `qcuda vm` as a command and as
// root.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { runVm, VmError, type StartedInfo, type VmOptions } from '../../backend/src/vm/runner';
import { chooseBackendUser, leaseVmUser, VM_UIDS } from '../../backend/src/vm/backend-user';
import { readStatus } from '../../backend/src/sys/status-socket';
import { alive, tmpDir } from '../helpers';
import { base } from './helpers';

test.serial('the driver probes the device and NOPs round-trip on every queue from 16 threads', async (t) => {
  const r = await runVm({ ...base, queues: 4, command: 'nop_test -t 16 -n 250' });
  t.log(`boot to /init: ${r.bootMs} ms; whole run: ${r.wallMs} ms`);
  t.is(r.module?.state, 'OK', r.log);
  t.regex(r.module!.detail, /\/dev\/qcuda0/);
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  // nop_test checks each reply's queue and cookie and prints per-queue counts.
  const counts = [...r.stdout.matchAll(/queue (\d+): sent (\d+) ok (\d+)/g)].map((m) => m.slice(1).map(Number));
  t.deepEqual(
    counts.map(([q]) => q),
    [0, 1, 2, 3],
    r.stdout,
  );
  for (const [q, sent, ok] of counts) {
    t.is(ok, sent, `queue ${q}`);
    t.true(sent > 0, `queue ${q} was used`);
  }
  t.is(
    counts.reduce((n, [, , ok]) => n + ok, 0),
    16 * 250,
  );
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
  fs.writeFileSync(
    src,
    [
      '#include <omp.h>',
      '#include <stdio.h>',
      'int main(void) {',
      '  int n = 0;',
      '#pragma omp parallel reduction(+ : n)',
      '  n += 1;',
      '  printf("omp: %d threads of %d\\n", n, omp_get_max_threads());',
      '  return n == omp_get_max_threads() ? 0 : 1;',
      '}',
    ].join('\n'),
  );
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
  const e = await t.throwsAsync(runVm({ ...base, command: 'sleep 600', timeoutMs: 15_000, onStarted: (i) => (info = i) }), {
    instanceOf: VmError,
  });
  t.is(e!.side, 'timeout');
  t.false(alive(info!.qemuPid));
  t.false(alive(info!.backendPid));
  t.false(fs.existsSync(info!.dir));
});

test.serial(
  "`qcuda vm` runs a command in a guest and exits with its status; --backend-log keeps the backend's log lines, timed; a --disk without a store",
  (t) => {
    const { spawnSync } = require('node:child_process') as typeof import('node:child_process');
    const cli = path.resolve(__dirname, '..', '..', 'backend/src/cli/qcuda.js');
    const log = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-log-')), 'backend.log');
    t.teardown(() => fs.rmSync(path.dirname(log), { recursive: true, force: true }));
    const r = spawnSync(
      process.execPath,
      [
        cli,
        'vm',
        '--quiet',
        '--qemu',
        base.qemu,
        '--kernel',
        base.kernel,
        '--initrd',
        base.initrd,
        `--backend-log=${log}`,
        // No store named: GPU memory where a GPU answers, else host memory (said on stderr), not a failed disk backend.
        '--disk=1M',
        '--',
        'nop_test -t 4 -n 50 && test -b /dev/vda && echo guest-ok && exit 3',
      ],
      { encoding: 'utf8', timeout: 180_000 },
    );
    t.is(r.status, 3, r.stderr);
    t.regex(r.stdout, /nop_test: PASS 200 NOPs\nguest-ok\n$/);
    t.regex(r.stderr, /guest command exited with status 3/);
    t.regex(r.stderr, /^qcuda: disk 0: in (GPU memory|host memory: no GPU \(.+\))$/m);
    const lines = fs.readFileSync(log, 'utf8').split('\n').filter(Boolean);
    t.true(
      lines.every((l) => /^\[\d+\.\d{3}\] qcuda-backend: /.test(l)),
      lines.join('\n'),
    );
    t.true(
      lines.some((l) => l.includes('frontend connected')),
      lines.join('\n'),
    );
    const ms = lines.map((l) => Number(/^\[([\d.]+)\]/.exec(l)![1]));
    t.deepEqual(
      ms,
      [...ms].sort((a, b) => a - b),
      'in the order they came',
    );
    t.true(ms[ms.length - 1] > 0, 'the times go on from the first line');
  },
);

/** The real, effective, saved and filesystem uids of a process. */
function uids(pid: number): number[] {
  return /^Uid:\s+(.*)$/m
    .exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]
    .split(/\s+/)
    .map(Number);
}

// qcuda vm and qcuda run as root (security review 3, N1): each VM's backends
// get a uid of their own, so that a compromised worker of one VM shares no
// user with another VM's processes (/proc, signals, files).
(process.getuid?.() === 0 ? test.serial : test.serial.skip)(
  'as root, two VMs get two uids of their own, leased until released; a lease whose holder is gone is taken over',
  (t) => {
    const a = chooseBackendUser(undefined, [], true).user as ReturnType<typeof leaseVmUser> | undefined;
    const b = chooseBackendUser(undefined, [], true).user as ReturnType<typeof leaseVmUser> | undefined;
    t.teardown(() => [a, b].forEach((u) => u?.release()));
    t.truthy(a && b, 'both have a user');
    const inRange = (uid: number) => uid >= VM_UIDS.base && uid < VM_UIDS.base + VM_UIDS.count;
    t.true(inRange(a!.uid) && inRange(b!.uid), `both in the VM range: ${a?.uid} ${b?.uid}`);
    t.not(a!.uid, b!.uid, 'not the same user');
    t.is(a!.gid, a!.uid, 'a group of its own too');
    // A holder that is gone (a qcuda vm killed outright): its uid is taken again.
    const dead = spawnSync('true').pid!;
    const leases = path.join(os.tmpdir(), `qcuda-test-leases-${process.pid}`);
    t.teardown(() => fs.rmSync(leases, { recursive: true, force: true }));
    fs.mkdirSync(leases, { mode: 0o700 });
    fs.writeFileSync(path.join(leases, String(VM_UIDS.base)), `${dead} 1`);
    const c = leaseVmUser(leases);
    t.is(c.uid, VM_UIDS.base, "a dead holder's uid is taken over");
    const d = leaseVmUser(leases);
    t.is(d.uid, VM_UIDS.base + 1, 'a held one is not');
    c.release();
    t.false(fs.existsSync(path.join(leases, String(VM_UIDS.base))), 'released: its lease is gone');
    const e = leaseVmUser(leases);
    t.is(e.uid, VM_UIDS.base, 'and its uid is free again');
    d.release();
    e.release();
  },
);

// qcuda vm as root (security review 2, H1): the backend, and so its GPU
// workers, run as an unprivileged user; QEMU (root) reaches its socket in a
// directory of that user's own, a CUDA program runs through a worker (own
// queues on the emu provider), which sandboxes itself, and a disk's backend
// runs as that user too.
(process.getuid?.() === 0 ? test.serial : test.serial.skip)(
  'as root, the backends of `qcuda vm` (chooseBackendUser, runVm) and their workers run as an unprivileged user, and the guest is served',
  async (t) => {
    const choice = chooseBackendUser(undefined, [], true);
    t.truthy(choice.user, `the default user can run the backend here: ${choice.note}`);
    const user = choice.user!;
    t.teardown(() => (user as { release?: () => void }).release?.());
    t.true(user.uid >= VM_UIDS.base && user.uid < VM_UIDS.base + VM_UIDS.count, `a uid of the VM's own: ${user.uid}`);
    let info: StartedInfo | undefined;
    let socketDir: fs.Stats | undefined;
    let status: Promise<unknown> | undefined;
    let backend: number[] | undefined;
    const workers: number[][] = [];
    const r = await runVm({
      ...base,
      command: 'memcpy && test -b /dev/vda && echo disk-ok',
      backendUser: user,
      backendArgs: ['--provider=emu', '--own-queues=yes'],
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
    t.regex(r.stdout, /disk-ok/, "the disk's backend served its disk");
    t.deepEqual(backend, Array(8).fill(user.uid), `the backend and the disk's ran as ${user.name}`);
    t.true(
      workers.length > 0 && workers.every((u) => u.every((id) => id === user.uid)),
      `the workers ran as ${user.name} (${user.uid}): ${JSON.stringify(workers)}`,
    );
    t.true(
      socketDir!.uid === user.uid && (socketDir!.mode & 0o777) === 0o700,
      "the socket directory is the backend user's, closed to others",
    );
    t.not(path.dirname(info!.socket), info!.dir, "and not the run's own directory");
    t.truthy(await status, 'root reads the status socket');
    t.false(fs.existsSync(path.dirname(info!.socket)), 'the socket directory is gone after the run');
  },
);

test.serial(
  "the driver's zero-copy calls: sessions, chunked copies up to 100 MiB, pinned host memory, bad ioctls (call_test)",
  async (t) => {
    const r = await runVm({ ...base, command: 'call_test' });
    t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
    const m = /call_test: PASS (\d+) checks/.exec(r.stdout);
    t.truthy(m, r.stdout);
    t.true(Number(m![1]) > 300);
  },
);

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
