// Security review 3's attacks on one VM from another VM's processes of the
// same user (N1) and from a worker in its starter's terminal (N2), each
// with its outcome reversed: a real
// qcuda-backend and its real GPU worker (on the fake driver) as the victim,
// and as attackers a process of the same user (another VM's backend) and
// one under the worker's own filter (a compromised worker), calling the
// system calls themselves (fixtures/escape_probe.c, an N-API module: a
// sandboxed process cannot exec). Run as root, every process here runs as
// nobody, as qcuda vm's backends do.
import test, { type ExecutionContext } from 'ava';
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { FAKE_CUDA_SOURCES } from '../addon/fake-driver';
import { alive, tmpDir, until } from '../helpers';
import { QcudaClient } from './client';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
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
  const fe = Frontend.connect(sock, new GuestMemory());
  t.teardown(() => fe.close());
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe, fe.queues.length, 8);
  await c.open();
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
