// One JIT or link job is bounded in time (--jit-time-max; security review
// 3, N10): a module load or JIT link that runs past the VM's bound ends
// that guest process's worker, found by the backend's worker watch
// (delegation.ts), and the guest's call fails as every ended worker's
// calls do; the backend and the next session go on. Here the workers run
// the cuda provider on the fake driver (fixtures/fakecuda.c), where an
// image containing "fakecuda:jit-ms=<n>" takes n ms to load or link, as
// PTX that keeps NVIDIA's JIT busy would.
import test, { type ExecutionContext } from 'ava';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, QCUDA_LINK_NAME, QCUDA_MAX_LINK_INPUTS } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { alive, KEEP_ROOT, started, tmpDir, until } from '../helpers';
import { QcudaClient, sessionAt } from './client';
import { ptx } from './images';

// Workers inherit the environment: they load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

/** The bound under test: 1 s (the watch looks every 500 ms). */
const BOUND_MS = 1000;
/** A job that would run far past it. */
const LONG_MS = 60_000;

async function setup(t: ExecutionContext, ownQueues: boolean) {
  const lines: string[] = [];
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues, limits: { jitTimeMs: BOUND_MS }, log: (l) => lines.push(l) });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 64 });
  /** The pid of the one worker serving a session now. */
  const worker = async (): Promise<number> => {
    let pids: number[] = [];
    await until(() => (pids = [...provider.workerPids, ...provider.ownerPids]).length === 1, 10_000);
    if (pids.length !== 1) throw new Error(`workers: ${pids.join(', ')}`);
    return pids[0];
  };
  /** A session: on a queue of its own (served by its worker) or on queue 0 (served here). */
  const session = async (q: number): Promise<QcudaClient> => {
    const c = new QcudaClient(fe, ownQueues ? 1 : 2, 8);
    await (ownQueues ? c.openOwn(q) : c.open());
    return c;
  };
  return { dev, provider, lines, worker, session };
}

async function upload(c: QcudaClient, id: bigint, image: Uint8Array): Promise<void> {
  const gpa = c.fe.mem.alloc(image.length, 64);
  c.fe.mem.bytes(gpa, image.length).set(image);
  const up = await c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: id, size: BigInt(image.length) }],
    to: [{ gpa, len: image.length }],
    dataOffset: 0n,
    dataLen: BigInt(image.length),
  });
  if (up.status !== 0) throw new Error(`upload: ${up.status}`);
}

/** Uploads and loads a PTX image whose JIT takes ms: the reply, and how long it took. */
async function load(c: QcudaClient, id: bigint, ms: number) {
  await upload(c, id, ptx(`.global .b8 g${id}[16];\n// fakecuda:jit-ms=${ms}`));
  const from = performance.now();
  const r = await c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: id }] });
  return { r, took: performance.now() - from };
}

/** JIT-links one PTX upload whose link takes ms: the reply, and how long it took. */
async function link(c: QcudaClient, id: bigint, ms: number) {
  await upload(c, id, Buffer.from(`.entry a\n// fakecuda:jit-ms=${ms}\n`, 'latin1'));
  const upload_id = new BigUint64Array(QCUDA_MAX_LINK_INPUTS);
  const type = new Uint32Array(QCUDA_MAX_LINK_INPUTS);
  const name = new Uint8Array(QCUDA_MAX_LINK_INPUTS * QCUDA_LINK_NAME);
  upload_id[0] = id;
  type[0] = 1; // PTX
  name.set(Buffer.from('slow.ptx', 'latin1'));
  const none = new Uint32Array(8);
  const from = performance.now();
  const r = await c.call(Cmd.LINK, {
    rawArgs: encode('qcuda_args_link', { num_inputs: 1, num_options: 0, upload_id, type, option: none, value: none, name }),
    out: 'qcuda_out_link',
  });
  return { r, took: performance.now() - from };
}

const killedLine = (lines: string[], pid: number) =>
  lines.some((l) => new RegExp(`GPU worker pid ${pid}: a JIT or link job ran [\\d.]+ s, past --jit-time-max=1: killed`).test(l));

for (const own of [false, true]) {
  const path = own ? 'on a queue its worker serves' : 'served by the backend';
  test.serial(`${path}: a load past --jit-time-max ends its worker, the call fails, the next session works`, async (t) => {
    const { worker, session, lines, dev } = await setup(t, own);
    const a = await session(1);
    // A load well inside the bound is left alone.
    const quick = await load(a, 1n, 200);
    t.is(quick.r.status, 0, 'a 200 ms JIT loads');
    const pid = await worker();
    const slow = await load(a, 2n, LONG_MS);
    t.true(slow.took < 5000, `the call was answered after ${Math.round(slow.took)} ms, not ${LONG_MS}`);
    t.true(slow.took >= BOUND_MS, 'and not before the bound');
    if (own)
      t.is(slow.r.used, 0, 'the backend answers what the dead worker left in flight as failed (used length 0), as for any ended worker');
    else t.is(slow.r.status, CudaErr.Unknown, "the call fails as any call to an ended worker does (its worker's exit)");
    t.true(await until(() => !alive(pid), 2000), `worker ${pid} exited`);
    t.true(killedLine(lines, pid), 'the VM event log says why');
    await a.close().catch(() => undefined);
    // The backend goes on: the next session gets a new worker and loads.
    const b = await session(2);
    const next = await load(b, 3n, 0);
    t.is(next.r.status, 0, 'the next session loads a module');
    const pid2 = await worker();
    t.not(pid2, pid);
    t.true(alive(pid2));
    t.is((await b.close()).status, 0);
    t.is(dev.status().sessions.length, 0);
  });
}

test.serial('a JIT link past --jit-time-max ends its worker too; one inside it links', async (t) => {
  const { worker, session, lines } = await setup(t, false);
  const a = await session(0);
  t.is((await link(a, 1n, 200)).r.status, 0, 'a 200 ms link completes');
  const pid = await worker();
  const slow = await link(a, 2n, LONG_MS);
  t.true(slow.took < 5000, `answered after ${Math.round(slow.took)} ms`);
  t.is(slow.r.status, CudaErr.Unknown);
  t.true(await until(() => !alive(pid), 2000), `worker ${pid} exited`);
  t.true(killedLine(lines, pid));
});

test.serial('--jit-time-max=0: no bound', async (t) => {
  const lines: string[] = [];
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } });
  const dev = new QcudaDevice({ provider, queues: 2, limits: { jitTimeMs: 0 }, log: (l) => lines.push(l) });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 2, size: 64 });
  const c = new QcudaClient(fe, 2, 8);
  await c.open();
  const r = await load(c, 1n, 1600);
  t.is(r.r.status, 0, 'a 1.6 s load completes');
  t.false(lines.some((l) => l.includes('jit-time-max')));
  await c.close();
});

test.serial('qcuda-backend --jit-time-max=1: the option bounds a load of a guest on its socket', async (t) => {
  const sock = path.join(tmpDir(t), 'b.sock');
  const backend = path.join(__dirname, '../../backend/src/cli/backend.js');
  const be = spawn(
    process.execPath,
    [backend, `--socket-path=${sock}`, '--status-socket=none', '--provider=cuda', '--jit-time-max=1', ...KEEP_ROOT],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  t.teardown(() => be.kill('SIGKILL'));
  let log = '';
  be.stderr.on('data', (b: Buffer) => (log += b.toString()));
  t.true(await until(() => /listening on/.test(log) || be.exitCode !== null, 20_000), log);
  const c = await sessionAt(t, sock);
  const slow = await load(c, 1n, LONG_MS);
  t.true(slow.took < 5000, `answered after ${Math.round(slow.took)} ms`);
  t.is(slow.r.status, CudaErr.Unknown, log);
  t.regex(log, /GPU worker pid \d+: a JIT or link job ran [\d.]+ s, past --jit-time-max=1: killed/);
  t.is(be.exitCode, null, 'the backend goes on');
  // The next guest process, on the same VM's connection.
  await c.close().catch(() => undefined);
  const next = new QcudaClient(c.fe, c.fe.queues.length, 8);
  await next.open();
  t.is((await load(next, 2n, 0)).r.status, 0, 'and serves the next session');
});
