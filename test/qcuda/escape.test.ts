// Security review 3's attacks on one VM from another VM's processes of the
// same user (N1), from a worker in its starter's terminal (N2), and on a
// backend started as root (N8), each with its outcome reversed: a real
// qcuda-backend and its real GPU worker (on the fake driver) as the victim,
// and as attackers a process of the same user (another VM's backend) and
// one under the worker's own filter (a compromised worker), calling the
// system calls themselves (fixtures/escape_probe.c, an N-API module: a
// sandboxed process cannot exec). Run as root, every process here but the
// root-started backends runs as nobody, as qcuda vm's backends do.
import test, { type ExecutionContext } from 'ava';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { FAKE_CUDA_SOURCES } from '../addon/fake-driver';
import { alive, tmpDir, until } from '../helpers';
import { sessionAt, type QcudaClient } from './client';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const CHILD = path.join(__dirname, 'escape-child.js');
const ROOT = process.geteuid!() === 0;
const NOBODY = 65534;
const asUser = ROOT ? { uid: NOBODY, gid: NOBODY } : {};
const { EACCES, EPERM } = os.constants.errno;

/** A directory the processes of the test (nobody, when root) can use: the fake driver, the probe, the sockets. */
function sharedDir(t: ExecutionContext): string {
  const dir = tmpDir(t);
  fs.chmodSync(dir, 0o755);
  if (ROOT) fs.chownSync(dir, NOBODY, NOBODY);
  return dir;
}

function build(dir: string): { probe: string; libcuda: string } {
  const probe = path.join(dir, 'escape_probe.node');
  const include = path.join(path.dirname(path.dirname(process.execPath)), 'include', 'node');
  const src = path.resolve(dist, '..', 'test', 'qcuda', 'fixtures', 'escape_probe.c');
  execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-Wall', `-I${include}`, '-o', probe, src]);
  const libcuda = path.join(dir, 'libcuda.so.1');
  execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-o', libcuda, ...FAKE_CUDA_SOURCES, '-lpthread']);
  return { probe, libcuda };
}

interface Started {
  p: ChildProcess;
  log: () => string;
}

/** A qcuda-backend (killed at the test's end), once it listens. */
async function backend(
  t: ExecutionContext,
  args: string[],
  o: { env?: NodeJS.ProcessEnv; uid?: number; gid?: number } = {},
): Promise<Started> {
  const p = spawn(process.execPath, [BACKEND, '--status-socket=none', ...args], { stdio: ['ignore', 'ignore', 'pipe'], cwd: '/', ...o });
  t.teardown(() => void p.kill('SIGKILL'));
  let log = '';
  p.stderr!.on('data', (b: Buffer) => (log += b.toString()));
  if (!(await until(() => /listening on/.test(log) || p.exitCode !== null, 30_000))) throw new Error(`the backend did not listen:\n${log}`);
  if (p.exitCode !== null) throw new Error(`the backend exited (${p.exitCode}):\n${log}`);
  return { p, log: () => log };
}

/** A frontend with a session whose first allocation starts its GPU worker; its pid. */
async function withWorker(t: ExecutionContext, sock: string, be: Started): Promise<{ worker: number; c: QcudaClient }> {
  const c = await sessionAt(t, sock);
  t.is((await c.malloc(4096)).status, 0, 'the session allocates');
  const m = /GPU worker pid (\d+) started/.exec(be.log());
  if (!m) throw new Error(`no worker started:\n${be.log()}`);
  return { worker: +m[1], c };
}

function uidOf(pid: number): number {
  return +/^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1];
}

interface Attack {
  uid: number;
  victims: { pid: number; openMem: number; getfd: number[]; pidfdOpen: number; kcmp: number; kill?: number; tgkill?: number }[];
  ioUring: number;
  processMadvise: number;
  killSelf0: number;
}

function attack(probe: string, sandboxed: boolean, pids: number[]): Attack {
  const r = spawnSync(process.execPath, [CHILD, 'attack', probe, sandboxed ? '1' : '0', ...pids.map(String)], {
    encoding: 'utf8',
    cwd: '/',
    timeout: 30_000,
    ...asUser,
  });
  if (r.status !== 0) throw new Error(`the attacker failed (${r.status}): ${r.stderr}`);
  return JSON.parse(r.stdout) as Attack;
}

test.serial("another VM's backend or worker of the same user cannot reach a backend's or its worker's memory, fds or life", async (t) => {
  const dir = sharedDir(t);
  const { probe, libcuda } = build(dir);
  const sock = path.join(dir, 'vm-b.sock');
  // VM B: its backend and, for its session, a GPU worker, as the same user as the attackers.
  const be = await backend(t, [`--socket-path=${sock}`, '--provider=cuda'], { env: { ...process.env, QCUDA_LIBCUDA: libcuda }, ...asUser });
  const { worker, c } = await withWorker(t, sock, be);
  const victims = [be.p.pid!, worker];
  t.true(
    victims.every((pid) => uidOf(pid) === (ROOT ? NOBODY : process.getuid!())),
    'the victims run as the attackers do',
  );

  // Another VM's backend (no filter): the same uid is all the kernel asked, before PR_SET_DUMPABLE 0.
  const plain = attack(probe, false, victims);
  t.is(plain.uid, ROOT ? NOBODY : process.getuid!());
  for (const v of plain.victims) {
    t.is(v.openMem, -EACCES, `/proc/${v.pid}/mem cannot be opened for writing (EACCES)`);
    t.deepEqual(v.getfd, [-EPERM], `pidfd_getfd takes none of ${v.pid}'s fds (EPERM)`);
    t.is(v.kcmp, -EPERM, `kcmp of ${v.pid}: EPERM`);
  }
  // A compromised worker (the worker's own filter) of another VM.
  const worker2 = attack(probe, true, victims);
  t.is(worker2.ioUring, -EPERM, 'io_uring_setup: EPERM');
  t.is(worker2.processMadvise, -EPERM, 'process_madvise: EPERM');
  t.is(worker2.killSelf0, 0, 'a worker may still signal itself');
  for (const v of worker2.victims) {
    t.is(v.openMem, -EACCES, `/proc/${v.pid}/mem: EACCES`);
    t.is(v.pidfdOpen, -EPERM, `pidfd_open(${v.pid}): EPERM`);
    t.deepEqual(v.getfd, [-EPERM], `pidfd_getfd of ${v.pid}: EPERM`);
    t.is(v.kill, -EPERM, `kill(${v.pid}, SIGTERM): EPERM`);
    t.is(v.tgkill, -EPERM, `tgkill(${v.pid}, SIGTERM): EPERM`);
  }
  t.true(victims.every(alive), "VM B's backend and worker live");
  t.is((await c.malloc(4096)).status, 0, 'VM B still allocates');
});

/** argv run in a new terminal (python's pty), its output (the terminal's, \r\n) once it exits. */
function inPty(argv: string[], env: NodeJS.ProcessEnv = process.env): string {
  const r = spawnSync('python3', ['-c', 'import pty, sys; pty.spawn(sys.argv[1:])', ...argv], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 60_000,
    env,
  });
  if (r.status !== 0) throw new Error(`python3 pty: ${r.status} ${r.stderr}`);
  return r.stdout;
}

/** The JSON line of a terminal's output (after what was echoed before it: a byte pushed into its input, say). */
function jsonLine(out: string): Record<string, unknown> {
  const line = out.split(/\r?\n/).find((l) => l.includes('{'));
  if (!line) throw new Error(`no result in:\n${out}`);
  return JSON.parse(line.slice(line.indexOf('{'))) as Record<string, unknown>;
}

test.serial(
  "a worker started from a terminal is in a session of its own, without it; the worker's filter refuses TIOCSTI and TIOCLINUX",
  (t) => {
    const dir = sharedDir(t);
    const { probe } = build(dir);
    const s = jsonLine(inPty([process.execPath, CHILD, 'isolated'])) as {
      self: { session: number; tty: number };
      worker: { pid: number; session: number; tty: number };
    };
    t.not(s.self.tty, 0, 'the backend side runs in the terminal');
    t.is(s.worker.tty, 0, 'its worker has no controlling terminal (/dev/tty: ENXIO)');
    t.is(s.worker.session, s.worker.pid, 'its worker leads a session of its own');
    // A process under the worker's filter that still has the terminal (before setsid, or a fork that got one).
    const tty = jsonLine(inPty([process.execPath, CHILD, 'tty', probe]));
    t.deepEqual(tty, { tiocsti: -EPERM, tioclinux: -EPERM }, 'the terminal input cannot be written');
  },
);

test.serial(
  'qcuda run: the backend it starts has no terminal, runs as another user when root, and ends when qcuda run is killed',
  async (t) => {
    const dir = sharedDir(t);
    const lib = path.join(dir, 'lib');
    fs.mkdirSync(lib);
    fs.writeFileSync(path.join(lib, 'libcuda.so.1'), ''); // sh loads no CUDA
    const out = path.join(dir, 'out');
    const script = `{ echo "run $PPID"; cat /proc/$QCUDA_BACKEND_PID/stat; grep ^Uid: /proc/$QCUDA_BACKEND_PID/status; } > ${out}.part; mv ${out}.part ${out}; exec sleep 60`;
    const py = spawn(
      'python3',
      [
        '-c',
        'import pty, sys; pty.spawn(sys.argv[1:])',
        process.execPath,
        QCUDA,
        'run',
        '--provider=emu',
        `--lib-dir=${lib}`,
        '--',
        'sh',
        '-c',
        script,
      ],
      { stdio: ['ignore', 'ignore', 'ignore'] },
    );
    t.teardown(() => void py.kill('SIGKILL'));
    t.true(await until(() => fs.existsSync(out), 60_000), 'the command ran');
    const [runLine, stat, uidLine] = fs.readFileSync(out, 'utf8').split('\n');
    const run = +runLine.split(' ')[1];
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const backendPid = +stat.split(' ')[0];
    const sleeper = (() => {
      for (const e of fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
        try {
          const s = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
          if (+s.slice(s.lastIndexOf(')') + 2).split(' ')[1] === run && +e !== backendPid) return +e;
        } catch {
          // gone
        }
      }
      return undefined;
    })();
    t.teardown(() => {
      for (const pid of [sleeper, backendPid]) if (pid !== undefined && alive(pid)) process.kill(pid, 'SIGKILL');
    });
    t.is(+f[4], 0, "the backend has no controlling terminal (stat's tty_nr)");
    t.is(+f[3], backendPid, 'it leads a session of its own');
    if (ROOT) t.not(+/^Uid:\s+(\d+)/.exec(uidLine)![1], 0, 'run as root, the backend is not root');
    // qcuda run killed outright (no cleanup of its own runs): the kernel ends the backend (PR_SET_PDEATHSIG).
    process.kill(run, 'SIGKILL');
    t.true(await until(() => !alive(backendPid), 10_000), 'the backend ended with qcuda run');
  },
);

(ROOT ? test.serial : test.skip)('qcuda-backend started as root runs, and its workers run, as an unprivileged user', async (t) => {
  const dir = sharedDir(t);
  const { libcuda } = build(dir);
  const sock = path.join(dir, 'root.sock');
  const env = { ...process.env, QCUDA_LIBCUDA: libcuda };
  const be = await backend(t, [`--socket-path=${sock}`, '--provider=cuda'], { env });
  t.regex(be.log(), /started as root: runs as (qcuda|nobody) \(--backend-user=root keeps root\)/, 'it says so, in one line');
  const { worker } = await withWorker(t, sock, be);
  t.not(uidOf(be.p.pid!), 0, 'the backend is not root');
  t.not(uidOf(worker), 0, 'its worker is not root');
  t.regex(fs.readFileSync(`/proc/${worker}/status`, 'utf8'), /^CapEff:\s+0+$/m, 'its worker has no capability');
  // Where the user it would run as cannot make its socket: it does not start (rather than keep root).
  const closed = tmpDir(t); // root's, mode 0700
  const r = spawnSync(process.execPath, [BACKEND, `--socket-path=${path.join(closed, 'b.sock')}`, '--provider=emu'], {
    encoding: 'utf8',
    timeout: 30_000,
  });
  t.is(r.status, 2, r.stderr);
  t.regex(r.stderr, /started as root, it runs as an unprivileged user, but .*--backend-user=USER, or root to keep root/);
  // Root only when asked.
  const kept = await backend(t, [`--socket-path=${path.join(closed, 'b.sock')}`, '--provider=emu', '--backend-user=root']);
  t.is(uidOf(kept.p.pid!), 0, '--backend-user=root keeps root');
});
