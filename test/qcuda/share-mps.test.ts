// MPS mode of the GPU share (--gpu-share-mps, issue 36; qcuda/share/mps.ts):
// the environment a worker is started with, read from /proc/PID/environ of
// the real workers of real backends (emu provider with --own-queues=yes:
// a worker per guest process, spawned as on a GPU), each VM's thread
// percentage from the weights in a shared table; and the refusals at start.
// No GPU and no MPS daemon here: a pid file naming a live process stands
// for the daemon (what the backend checks); the GPU run measures MPS itself
// (test/gpu/share/run.sh, variant share-mps).
import test from 'ava';
import { spawn, spawnSync, type ChildProcessWithoutNullStreams } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { mpsPercentage } from '../../backend/src/qcuda/share/mps';
import { tmpDir, until, KEEP_ROOT } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');

test("a VM's part of the GPU's threads: 100 x its weight over all weights, to the nearest, at least 1", (t) => {
  const weights = [1, 1, 2, 4];
  t.deepEqual(
    weights.map((w, i) =>
      mpsPercentage(
        w,
        weights.filter((_, j) => j !== i),
      ),
    ),
    [13, 13, 25, 50],
  );
  t.is(mpsPercentage(1, []), 100, 'alone: the whole GPU');
  t.is(mpsPercentage(7, []), 100);
  t.is(mpsPercentage(1, [1000, 1000]), 1, 'never 0 (MPS would refuse it)');
});

/** A directory standing for a running MPS control daemon's: its pid file names a live process (this one). */
function fakeDaemon(t: Parameters<typeof tmpDir>[0]): string {
  const dir = path.join(tmpDir(t), 'mps-pipe');
  fs.mkdirSync(dir);
  fs.writeFileSync(path.join(dir, 'nvidia-cuda-mps-control.pid'), `${process.pid}\n`);
  return dir;
}

/** A program that makes a CUDA context (through qcuda's libcuda.so.1), says "ready" and holds it until its stdin closes. */
function contextHolder(dir: string): string {
  const file = path.join(dir, 'hold.py');
  fs.writeFileSync(
    file,
    `import ctypes, sys
cu = ctypes.CDLL('libcuda.so.1')
dev, ctx, p = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
assert cu.cuInit(0) == 0 and cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0 and cu.cuMemAlloc_v2(ctypes.byref(p), 4096) == 0
print('ready', flush=True)
sys.stdin.read()
`,
  );
  return file;
}

/** A worker's environment as the kernel has it. */
function environOf(pid: number): Map<string, string> {
  const raw = fs.readFileSync(`/proc/${pid}/environ`, 'latin1');
  return new Map(
    raw
      .split('\0')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
}

const MPS_VARS = ['CUDA_MPS_PIPE_DIRECTORY', 'CUDA_MPS_ACTIVE_THREAD_PERCENTAGE', 'CUDA_MPS_PINNED_DEVICE_MEM_LIMIT'];

/** Output collected as it comes. */
function collect(c: ChildProcessWithoutNullStreams): { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  c.stdout.on('data', (b: Buffer) => (out += b.toString()));
  c.stderr.on('data', (b: Buffer) => (err += b.toString()));
  return { out: () => out, err: () => err };
}

/**
 * Runs the context holder under `qcuda run` (args), and while it holds its
 * context, reads its worker's MPS variables; the worker's pid comes from the
 * backend's log (`log()`), the run ends once they are read.
 */
async function workerMpsEnv(
  t: Parameters<typeof tmpDir>[0],
  args: string[],
  env: NodeJS.ProcessEnv,
  log: () => string,
): Promise<Record<string, string | undefined>> {
  const before = new Set([...log().matchAll(/GPU worker pid (\d+) started/g)].map((m) => m[1]));
  const prog = spawn(
    process.execPath,
    [QCUDA, 'run', ...args, ...(args.some((a) => a.startsWith('--socket=')) ? [] : KEEP_ROOT), '--', 'python3', contextHolder(tmpDir(t))],
    { env },
  );
  t.teardown(() => prog.kill('SIGKILL'));
  const o = collect(prog);
  const exited = new Promise<number | null>((resolve) => prog.once('exit', resolve));
  let pid: string | undefined;
  const found = await until(() => {
    pid = [...log().matchAll(/GPU worker pid (\d+) started/g)].map((m) => m[1]).find((p) => !before.has(p));
    return pid !== undefined && o.out().includes('ready');
  }, 60_000);
  t.true(found, `${o.err()}\n${log()}`);
  const w = environOf(Number(pid));
  prog.stdin.end();
  t.is(await exited, 0, o.err());
  return Object.fromEntries(MPS_VARS.map((k) => [k, w.get(k)]));
}

/** A backend of `weight` for qcuda run --socket, in MPS mode on `pipe`; its log. */
async function backend(
  t: Parameters<typeof tmpDir>[0],
  weight: number,
  pipe: string,
  env: NodeJS.ProcessEnv,
): Promise<{ sock: string; log: () => string }> {
  const sock = path.join(tmpDir(t), 'b.sock');
  const b = spawn(
    process.execPath,
    [
      BACKEND,
      `--socket-path=${sock}`,
      ...KEEP_ROOT,
      '--provider=emu',
      '--own-queues=yes',
      '--frontends=2',
      '--status-socket=none',
      `--gpu-share=${weight}`,
      `--gpu-share-mps=${pipe}`,
      '--device-memory-limit=3G',
    ],
    { env },
  );
  t.teardown(() => b.kill('SIGKILL'));
  const o = collect(b);
  t.true(await until(() => /listening on/.test(o.err()), 30_000), o.err());
  return { sock, log: o.err };
}

test("under --gpu-share-mps each worker is an MPS client of PIPE_DIR with its VM's part by weight (1:1:2:4 -> 13/13/25/50%) and the quota as its pinned memory limit", async (t) => {
  const pipe = fakeDaemon(t);
  const env: NodeJS.ProcessEnv = { ...process.env, QCUDA_GPU_SHARE_TABLE: path.join(tmpDir(t), 'table') };
  for (const k of MPS_VARS) delete env[k];
  const vms = [];
  for (const w of [1, 1, 2, 4]) vms.push(await backend(t, w, pipe, env));
  const got = [];
  for (const vm of vms) got.push(await workerMpsEnv(t, [`--socket=${vm.sock}`], env, vm.log));
  t.deepEqual(
    got.map((g) => g.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE),
    ['13', '13', '25', '50'],
  );
  t.true(
    got.every((g) => g.CUDA_MPS_PIPE_DIRECTORY === pipe && g.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT === '0=3072M'),
    JSON.stringify(got),
  );
  t.regex(
    vms[3].log(),
    /GPU worker pid \d+ started \(MPS client: 50% of the GPU's threads\)/,
    "the part is logged with the worker's start",
  );
});

test('qcuda run --gpu-share-mps: a VM alone (weight 1 without --gpu-share) gets 100%; without the option no MPS variable is set', async (t) => {
  const pipe = fakeDaemon(t);
  const env: NodeJS.ProcessEnv = { ...process.env, QCUDA_GPU_SHARE_TABLE: path.join(tmpDir(t), 'table') };
  for (const k of MPS_VARS) delete env[k];
  const logFile = path.join(tmpDir(t), 'backend.log');
  const log = () => (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '');
  const alone = await workerMpsEnv(
    t,
    ['--provider=emu', '--own-queues=yes', `--gpu-share-mps=${pipe}`, `--backend-log=${logFile}`],
    env,
    log,
  );
  t.deepEqual(alone, {
    CUDA_MPS_PIPE_DIRECTORY: pipe,
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: '100',
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: undefined,
  });
  t.regex(log(), /GPU share: weight 1, slot \d+ of /, 'the VM joined the table with weight 1');
  fs.rmSync(logFile);
  const plain = await workerMpsEnv(t, ['--provider=emu', '--own-queues=yes', `--backend-log=${logFile}`], env, log);
  t.deepEqual(plain, {
    CUDA_MPS_PIPE_DIRECTORY: undefined,
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: undefined,
    CUDA_MPS_PINNED_DEVICE_MEM_LIMIT: undefined,
  });
});

test('--gpu-share-mps: a missing PIPE_DIR, or one with no running daemon, is refused at start with one line', (t) => {
  const dir = tmpDir(t);
  const env = { ...process.env, QCUDA_GPU_SHARE_TABLE: path.join(dir, 'table') };
  const start = (pipe: string) =>
    spawnSync(
      process.execPath,
      [BACKEND, `--socket-path=${path.join(dir, 'b.sock')}`, '--provider=emu', `--gpu-share-mps=${pipe}`, ...KEEP_ROOT],
      {
        encoding: 'utf8',
        env,
        timeout: 30_000,
      },
    );
  const missing = start(path.join(dir, 'nowhere'));
  t.is(missing.status, 2);
  t.regex(missing.stderr, /^qcuda-backend: --gpu-share-mps=\S+nowhere: no directory \S+nowhere \(try 'qcuda-backend --help'\)\n$/);
  const empty = path.join(dir, 'empty');
  fs.mkdirSync(empty);
  const none = start(empty);
  t.is(none.status, 1);
  t.regex(
    none.stderr,
    /^qcuda-backend: --gpu-share-mps: no MPS control daemon in \S+empty \(no nvidia-cuda-mps-control.pid there\); start it first: CUDA_MPS_PIPE_DIRECTORY=\S+ nvidia-cuda-mps-control -d\n$/,
  );
  const stale = path.join(dir, 'stale');
  fs.mkdirSync(stale);
  const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' }).stdout;
  fs.writeFileSync(path.join(stale, 'nvidia-cuda-mps-control.pid'), dead);
  const gone = start(stale);
  t.is(gone.status, 1);
  t.regex(gone.stderr, /--gpu-share-mps: the MPS control daemon of \S+stale \(nvidia-cuda-mps-control.pid\) is not running/);
  const run = spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', `--gpu-share-mps=${path.join(dir, 'nowhere')}`, '--', 'true'], {
    encoding: 'utf8',
    env,
  });
  t.is(run.status, 2);
  t.regex(run.stderr, /--gpu-share-mps=\S+nowhere: no directory/);
  t.is(run.stderr.trim().split('\n').length, 1);
});
