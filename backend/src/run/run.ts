// `qcuda run`: a command on this host, its CUDA calls through qcuda's
// guest libraries and a qcuda backend, no VM. The libraries find the
// backend's socket in QCUDA_DEVICE and become its vhost-user frontends (the
// userspace transport, guest-driver/lib/transport_user.c), one per process,
// so every check, the quota, the workers and own queues are the VM's.
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { childEnv } from '../sys/harden';
import type { BackendUser } from '../vm/backend-user';
import type { HostCgroup } from '../vm/host-bounds';

/** What a run needs; runCuda() starts what is missing and stops what it started. */
export interface RunOptions {
  /** The program and its arguments (run directly, no shell). */
  argv: string[];
  /** A backend to join (its --socket-path); default: one started for the run. */
  socket?: string;
  /** Arguments for the backend started for the run. */
  backendArgs: string[];
  /** Where qcuda's libcuda.so.1 and libcudart.so.13 are. */
  libDir: string;
  /** Put qcuda's libcudart.so.13 first too, not only its libcuda.so.1. */
  qcudaRuntime: boolean;
  /** Frontends (CUDA processes) the started backend serves at once. */
  frontends: number;
  /** How long to wait for the started backend's socket. */
  startTimeoutMs: number;
  /** Where the started backend's log goes (default: dropped, but shown if it fails to start). */
  backendLog?: (text: string) => void;
  /** Run as root: who the started backend runs as (vm/backend-user.ts chooses); undefined: as this process. */
  backendUser?: BackendUser;
  /** The control group the started backend (and so its workers) runs in (vm/host-bounds.ts); default none. */
  hostCgroup?: HostCgroup;
  /** The program's first CUDA process reaches the started backend through a shared-memory region (QCUDA_SHM), not its socket. */
  shm?: boolean;
}

export class RunError extends Error {}

const BACKEND_JS = path.resolve(__dirname, '..', 'cli', 'backend.js');

/** A backend for the run: started, its socket waited for; stop() ends it. */
interface Backend {
  socket: string;
  /** Its shared-memory region (RunOptions.shm). */
  shm?: string;
  pid: number;
  stop(): Promise<void>;
}

function waitExit(p: ChildProcess): Promise<void> {
  return p.exitCode !== null || p.signalCode !== null ? Promise.resolve() : new Promise((resolve) => p.once('exit', () => resolve()));
}

async function startBackend(o: RunOptions, dir: string): Promise<Backend> {
  const as = o.backendUser;
  // Dropped (security review 3, N8): its socket in a directory of its user's own, which root (the command) reaches too.
  const sockDir = as ? path.join(dir, 'backend') : dir;
  if (as) {
    fs.chmodSync(dir, 0o711);
    fs.mkdirSync(sockDir, { mode: 0o700 });
    fs.chownSync(sockDir, as.uid, as.gid);
  }
  const socket = path.join(sockDir, 'qcuda.sock');
  const shm = o.shm ? path.join(sockDir, 'qcuda.shm') : undefined;
  // As root and not dropped, it is told to keep root (it would drop by itself).
  const keepRoot = !as && process.geteuid?.() === 0 ? ['--backend-user=root'] : [];
  const p = spawn(
    process.execPath,
    [
      BACKEND_JS,
      `--socket-path=${socket}`,
      '--status-socket=none',
      `--frontends=${o.frontends}`,
      ...(shm ? [`--shm=${shm}`] : []),
      ...o.backendArgs,
      ...keepRoot,
    ],
    {
      ...(as ? { uid: as.uid, gid: as.gid, cwd: '/' } : {}),
      stdio: ['ignore', 'ignore', 'pipe'],
      // A session of its own, without the terminal the command runs in (its workers run code the command chose:
      // security review 3, N2); ended by the kernel if this process is killed (sys/harden.ts).
      detached: true,
      env: childEnv(),
    },
  );
  // Before it can start a worker: they inherit its group.
  if (p.pid !== undefined) o.hostCgroup?.add(p.pid);
  let log = '';
  p.stderr!.on('data', (b: Buffer) => {
    log += b.toString();
    o.backendLog?.(b.toString());
  });
  const stop = async (): Promise<void> => {
    if (p.exitCode !== null || p.signalCode !== null) return;
    p.kill('SIGTERM');
    const killer = setTimeout(() => p.kill('SIGKILL'), 5000);
    await waitExit(p);
    clearTimeout(killer);
  };
  // Ready once it says it listens (the socket exists by then), and with a
  // region once it says it serves it: it says it listens before it makes
  // the region, and a program started between the two finds none, or one
  // not laid out yet.
  const ready = shm ? /serving the shared-memory region/ : /listening on/;
  const deadline = Date.now() + o.startTimeoutMs;
  while (!ready.test(log)) {
    if (p.exitCode !== null || p.signalCode !== null)
      throw new RunError(`the backend exited before it served (${p.signalCode ?? `status ${p.exitCode}`}):\n${log.trimEnd()}`);
    if (Date.now() > deadline) {
      await stop();
      throw new RunError(`the backend did not listen within ${o.startTimeoutMs / 1000} s:\n${log.trimEnd()}`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return { socket, shm, pid: p.pid!, stop };
}

/** The directory put first on LD_LIBRARY_PATH: qcuda's libcuda.so.1, and its libcudart.so.13 if asked. */
function libraryDir(o: RunOptions, dir: string): string {
  const names = ['libcuda.so.1', ...(o.qcudaRuntime ? ['libcudart.so.13'] : [])];
  const first = path.join(dir, 'lib');
  fs.mkdirSync(first);
  for (const n of names) {
    const lib = path.join(o.libDir, n);
    if (!fs.existsSync(lib))
      throw new RunError(`${lib} is missing (make guest-lib guest-libcuda builds it; --lib-dir=DIR names another place)`);
    fs.symlinkSync(lib, path.join(first, n));
  }
  return first;
}

const SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'];

/** Runs the command; resolves with its exit status (128 + the signal's number if a signal ended it). */
export async function runCuda(o: RunOptions): Promise<number> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-run-'));
  let backend: Backend | undefined;
  try {
    const lib = libraryDir(o, dir);
    if (o.socket !== undefined) {
      if (!fs.statSync(o.socket, { throwIfNoEntry: false })?.isSocket()) throw new RunError(`--socket=${o.socket}: not a socket`);
    } else backend = await startBackend(o, dir);
    const env = {
      ...process.env,
      QCUDA_DEVICE: path.resolve(o.socket ?? backend!.socket),
      ...(backend?.shm ? { QCUDA_SHM: backend.shm } : {}),
      // Where the backend's CPU time can be read (/proc), for benchmarks.
      ...(backend ? { QCUDA_BACKEND_PID: String(backend.pid) } : {}),
      LD_LIBRARY_PATH: [lib, process.env.LD_LIBRARY_PATH].filter(Boolean).join(':'),
    };
    const child = spawn(o.argv[0], o.argv.slice(1), { stdio: 'inherit', env });
    // Signals meant for the run go to the command; its end ends the run.
    const forward = (s: NodeJS.Signals) => child.kill(s);
    for (const s of SIGNALS) process.on(s, forward);
    const status = await new Promise<number>((resolve, reject) => {
      child.once('error', (e) => reject(new RunError(`cannot run ${o.argv[0]}: ${e.message}`)));
      child.once('exit', (code, signal) => resolve(code ?? 128 + (os.constants.signals[signal!] ?? 0)));
    });
    for (const s of SIGNALS) process.off(s, forward);
    return status;
  } finally {
    await backend?.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
