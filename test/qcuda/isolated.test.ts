// The provider with a worker process per session (isolated.ts), here with
// emu-provider workers so it runs without a GPU: real child processes, guest
// RAM shared through memfds passed over a socket, calls over the IPC channel.
// (The GPU run repeats the fault-isolation case with the cuda provider:
// test/qcuda/cuda-provider.test.ts.)
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import test from 'ava';
import { native } from '../../backend/src/sys/native';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import type { GuestSeg, ProviderContext } from '../../backend/src/qcuda/provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { alive, promised, tmpDir, until } from '../helpers';

const MIB = 1 << 20;

/** A memfd region mapped here, as the backend maps guest RAM. */
function guestRam(size: number, gpa: bigint) {
  const fd = native.memfdCreate('qcuda-test-ram', size);
  const m = new native.Mapping(fd, size, 0);
  const view = new Uint8Array(m.window(0, size));
  const seg = (off: number, len: number): GuestSeg => ({ addr: m.address + BigInt(off), len, view: view.subarray(off, off + len) });
  const source = { fd, region: { gpa, size: BigInt(size), userAddr: gpa, mmapOffset: 0n } };
  return {
    fd,
    m,
    view,
    seg,
    source,
    close: () => {
      m.unmap();
      native.close(fd);
    },
  };
}

const gone = (pid: number, ms = 5000): Promise<boolean> => until(() => !alive(pid), ms);

function isolated(log?: (line: string) => void): IsolatedProvider {
  return new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 }, log });
}

/** stream: undefined goes in a raw frame (worker-messages.ts); an emu provider's stream object, V8-serialized. */
async function roundTrip(
  ctx: ProviderContext,
  ram: ReturnType<typeof guestRam>,
  off: number,
  len: number,
  seed: number,
  stream?: unknown,
): Promise<boolean> {
  for (let i = 0; i < len; i++) ram.view[off + i] = (i * 7 + seed) & 0xff;
  const dev = await ctx.malloc(BigInt(len));
  await ctx.copyToDevice(dev, [ram.seg(off, len >> 1), ram.seg(off + (len >> 1), len - (len >> 1))], stream);
  ram.view.fill(0, off + len, off + 2 * len);
  await ctx.copyFromDevice([ram.seg(off + len, len)], dev, stream);
  await ctx.free(dev);
  return Buffer.compare(ram.view.subarray(off, off + len), ram.view.subarray(off + len, off + 2 * len)) === 0;
}

test('each context runs in a worker process of its own; bytes cross guest RAM both ways; destroy ends the process', async (t) => {
  const logged: string[] = [];
  const p = isolated((l) => logged.push(l));
  const ram = guestRam(8 * MIB, 0n);
  await p.registerGuestMemory(ram.m.address, BigInt(8 * MIB), ram.source);
  const a = await p.openContext(0);
  const b = await p.openContext(0);
  const [pa, pb] = p.workerPids;
  t.true(pa !== pb && alive(pa) && alive(pb) && pa !== process.pid, 'two live worker processes');
  t.true(await roundTrip(a, ram, 0, MIB + 3, 1), 'a: H2D then D2H, bytes identical');
  t.true(await roundTrip(b, ram, 4 * MIB, 65536, 2), 'b: the same through its own worker');
  t.true(await roundTrip(b, ram, 4 * MIB, 65536, 3, await b.streamCreate(0, 0)), 'b: the same on a stream of its own');
  const e = await a.free(0x1234n).then(
    () => undefined,
    (x: unknown) => x,
  );
  t.true(
    (e instanceof CudaError && e.code === CudaErr.InvalidDevicePointer) || (e instanceof CudaError && e.code === CudaErr.InvalidValue),
    `a bad pointer comes back as the worker provider's CudaError (${(e as Error)?.message})`,
  );
  await a.destroy();
  t.true(await gone(pa), "a's worker exited after destroy");
  t.true(alive(pb), "b's worker is still there");
  await p.close();
  t.true(await gone(pb), 'close() ends the remaining workers');
  t.true(await until(() => logged.length === 4, 5000), logged.join('\n'));
  t.deepEqual(
    logged.filter((l) => l.endsWith('started')),
    [`qcuda: GPU worker pid ${pa} started`, `qcuda: GPU worker pid ${pb} started`],
    "each worker's start is logged",
  );
  t.deepEqual(
    logged
      .filter((l) => l.includes('exited'))
      .map((l) => +/pid (\d+)/.exec(l)![1])
      .sort(),
    [pa, pb].sort(),
    'and its exit',
  );
  ram.close();
});

test('a worker that dies fails only its own session: every pending and later call says so', async (t) => {
  const p = isolated();
  const ram = guestRam(4 * MIB, 0n);
  await p.registerGuestMemory(ram.m.address, BigInt(4 * MIB), ram.source);
  const victim = await p.openContext(0);
  const other = await p.openContext(0);
  const [pv, po] = p.workerPids;
  const dev = await victim.malloc(4096n);
  process.kill(pv, 'SIGKILL');
  t.true(await gone(pv), 'killed');
  const err = await promised(() => victim.copyFromDevice([ram.seg(0, 4096)], dev, undefined)).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.true(
    err instanceof CudaError && err.code === CudaErr.Unknown && /worker .*exited .*SIGKILL/.test(err.message),
    `the dead session's call fails: ${(err as Error)?.message}`,
  );
  const again = await victim.malloc(16n).then(
    () => undefined,
    (e: unknown) => e,
  );
  t.true(again instanceof CudaError && again.code === CudaErr.Unknown, 'and so does every later one');
  t.true(await roundTrip(other, ram, 0, 100_000, 3), 'the other session works on');
  await victim.destroy(); // of a dead worker: resolves
  await p.close();
  t.true(await gone(po));
  ram.close();
});

test('regions added and removed while workers run reach them; unknown memory is refused', async (t) => {
  const p = isolated();
  const first = guestRam(MIB, 0n);
  await p.registerGuestMemory(first.m.address, BigInt(MIB), first.source);
  const ctx = await p.openContext(0);
  const later = guestRam(2 * MIB, 1n << 32n);
  await p.registerGuestMemory(later.m.address, BigInt(2 * MIB), later.source);
  t.true(await roundTrip(ctx, later, 0, MIB - 5, 4), 'a region registered after the worker started is mapped there');
  const stray = guestRam(MIB, 2n << 32n); // never registered
  const dev = await ctx.malloc(64n);
  const e = await promised(() => ctx.copyToDevice(dev, [stray.seg(0, 64)], undefined)).then(
    () => undefined,
    (x: unknown) => x,
  );
  t.true(
    e instanceof CudaError && e.code === CudaErr.InvalidValue && /no guest RAM region/.test(e.message),
    'memory the worker does not map is refused',
  );
  p.unregisterGuestMemory(later.m.address);
  const e2 = await promised(() => ctx.copyToDevice(dev, [later.seg(0, 64)], undefined)).then(
    () => undefined,
    (x: unknown) => x,
  );
  t.true(e2 instanceof CudaError && e2.code === CudaErr.InvalidValue, 'an unregistered region is gone from the worker too');
  t.true(await roundTrip(ctx, first, 0, 1000, 5), 'the first region still works');
  await p.close();
  for (const r of [first, later, stray]) r.close();
});

test('a memory table replaced while workers run (the same guest-physical range mapped anew, then the old mapping dropped): the worker follows', async (t) => {
  const p = isolated();
  const old = guestRam(MIB, 0n);
  await p.registerGuestMemory(old.m.address, BigInt(MIB), old.source);
  const ctx = await p.openContext(0);
  t.true(await roundTrip(ctx, old, 0, 4096, 6));
  // As MemoryTable.replace() tells the provider: the new table's regions first, then the old ones go.
  const fresh = guestRam(MIB, 0n);
  await p.registerGuestMemory(fresh.m.address, BigInt(MIB), fresh.source);
  p.unregisterGuestMemory(old.m.address);
  t.true(await roundTrip(ctx, fresh, 0, MIB / 2 - 3, 7), 'copies go through the new mapping');
  t.true(
    p.workerPids.every((pid) => alive(pid)),
    'the worker lives on',
  );
  await p.close();
  for (const r of [old, fresh]) r.close();
});

/** Fields of /proc/PID[/task/TID]/status, by name. */
function procStatus(at: string): Record<string, string> {
  return Object.fromEntries(
    fs
      .readFileSync(`${at}/status`, 'utf8')
      .split('\n')
      .filter(Boolean)
      .map((l) => l.split(/:\s*/, 2) as [string, string]),
  );
}

/**
 * Opens a context whose worker loads a preload (NODE_OPTIONS, set only while
 * openContext spawns it, synchronously) that, on SIGUSR2, runs /bin/true and
 * writes what came of it to out: how a worker's exec is tried from inside,
 * with no test hook in the worker's code.
 */
async function contextTryingExec(
  p: IsolatedProvider,
  dir: string,
): Promise<{ ctx: ProviderContext; tryExec: () => Promise<{ error: string | null; status: number | null }> }> {
  const hook = path.join(dir, 'exec-hook.js');
  const out = path.join(dir, 'exec-result.json');
  fs.writeFileSync(
    hook,
    `process.on('SIGUSR2', () => {
    const r = require('child_process').spawnSync('/bin/true');
    // Written aside, then renamed: the test sees the file only once it is whole.
    require('fs').writeFileSync(${JSON.stringify(out + '.part')}, JSON.stringify({ error: r.error ? r.error.code : null, status: r.status }));
    require('fs').renameSync(${JSON.stringify(out + '.part')}, ${JSON.stringify(out)});
  });\n`,
  );
  const before = process.env.NODE_OPTIONS;
  process.env.NODE_OPTIONS = `--require ${hook}`;
  let opened: Promise<ProviderContext>;
  try {
    opened = p.openContext(0);
  } finally {
    if (before === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = before;
  }
  const ctx = await opened;
  const pid = p.workerPids[p.workerPids.length - 1];
  const tryExec = async () => {
    fs.rmSync(out, { force: true });
    process.kill(pid, 'SIGUSR2');
    if (!(await until(() => fs.existsSync(out), 5000))) throw new Error('the worker did not try');
    return JSON.parse(fs.readFileSync(out, 'utf8')) as { error: string | null; status: number | null };
  };
  return { ctx, tryExec };
}

test('a worker sandboxes itself before it serves: no new privileges and a seccomp filter on every thread; its exec fails with EPERM; copies go on', async (t) => {
  const mine = procStatus('/proc/self');
  for (const sandbox of ['seccomp', 'none'] as const) {
    const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0, sandbox } });
    const ram = guestRam(4 * MIB, 0n);
    t.teardown(async () => {
      await p.close(); // also where an assertion failed
      ram.close();
    });
    await p.registerGuestMemory(ram.m.address, BigInt(4 * MIB), ram.source);
    const { ctx, tryExec } = await contextTryingExec(p, tmpDir(t));
    const pid = p.workerPids[0];
    const threads = fs.readdirSync(`/proc/${pid}/task`).map((tid) => procStatus(`/proc/${pid}/task/${tid}`));
    const exec = await tryExec();
    if (sandbox === 'seccomp') {
      t.true(
        threads.length > 1 && threads.every((s) => s.NoNewPrivs === '1' && s.Seccomp === '2'),
        `every one of the worker's ${threads.length} threads: NoNewPrivs 1, Seccomp 2 (${threads.map((s) => `${s.NoNewPrivs}/${s.Seccomp}`)})`,
      );
      if (mine.Seccomp_filters !== undefined)
        t.is(+procStatus(`/proc/${pid}`).Seccomp_filters, +mine.Seccomp_filters + 1, 'one filter more than its parent');
      t.deepEqual(exec, { error: 'EPERM', status: null }, 'exec from inside the worker is refused');
      t.true(await roundTrip(ctx, ram, 0, MIB + 5, 9), 'copies both ways go through the sandboxed worker');
    } else {
      const w = procStatus(`/proc/${pid}`);
      t.deepEqual(
        [w.NoNewPrivs, w.Seccomp, w.Seccomp_filters],
        [mine.NoNewPrivs, mine.Seccomp, mine.Seccomp_filters],
        'none: as its parent',
      );
      t.deepEqual(exec, { error: null, status: 0 }, 'none: the same exec runs');
    }
  }
});

test('a sandboxed worker can still connect to a unix socket and talk over it (what an MPS client does with its daemon, --gpu-share-mps)', async (t) => {
  const dir = tmpDir(t);
  const sockPath = path.join(dir, 'control');
  const server = net.createServer((c) => c.once('data', (d) => c.end(`ack ${d.toString()}`)));
  await new Promise<void>((resolve) => server.listen(sockPath, resolve));
  t.teardown(() => server.close());
  const hook = path.join(dir, 'connect-hook.js');
  const out = path.join(dir, 'connect-result');
  // Tried after the sandbox is set (SIGUSR2 comes once the worker serves); written aside, then renamed.
  fs.writeFileSync(
    hook,
    `process.on('SIGUSR2', () => {
    const fs = require('fs');
    const done = (r) => { fs.writeFileSync(${JSON.stringify(out + '.part')}, r); fs.renameSync(${JSON.stringify(out + '.part')}, ${JSON.stringify(out)}); };
    const c = require('net').connect(${JSON.stringify(sockPath)}, () => c.write('hello'));
    let got = '';
    c.on('data', (d) => (got += d)).on('end', () => done(got)).on('error', (e) => done(e.code));
  });\n`,
  );
  const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0, sandbox: 'seccomp' } });
  t.teardown(() => p.close());
  const before = process.env.NODE_OPTIONS;
  process.env.NODE_OPTIONS = `--require ${hook}`;
  let opened: Promise<ProviderContext>;
  try {
    opened = p.openContext(0);
  } finally {
    if (before === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = before;
  }
  await opened;
  const pid = p.workerPids[0];
  t.is(procStatus(`/proc/${pid}`).Seccomp, '2', 'the worker is under its filter');
  process.kill(pid, 'SIGUSR2');
  t.true(await until(() => fs.existsSync(out), 5000), 'the worker tried');
  t.is(fs.readFileSync(out, 'utf8'), 'ack hello');
});

test('a worker that cannot start fails openContext with the reason, and leaves no process behind', async (t) => {
  const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 9999 } });
  const before = p.workerPids.length;
  const e = await p.openContext(0).then(
    () => undefined,
    (x: unknown) => x,
  );
  t.true(e instanceof CudaError, `openContext rejects with a CudaError: ${(e as Error)?.message}`);
  t.regex((e as Error).message, /GPU worker/);
  t.is(p.workerPids.length, before, 'the failed worker is forgotten');
  await p.close();
});

/** A worker's environment as the kernel has it (/proc/PID/environ). */
function environOf(pid: number): Map<string, string> {
  const raw = fs.readFileSync(`/proc/${pid}/environ`, 'latin1');
  return new Map(
    raw
      .split('\0')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
}

/** A backend stand-in with one worker: resolves with the worker's pid and environment; the process exits when its stdin closes. */
async function backendWithWorker(env: NodeJS.ProcessEnv) {
  const script = `
    const { EmuProvider } = require(${JSON.stringify(require.resolve('../../backend/src/qcuda/providers/emu'))});
    const { IsolatedProvider } = require(${JSON.stringify(require.resolve('../../backend/src/qcuda/workers/isolated'))});
    const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } });
    p.openContext(0).then(() => console.log(p.workerPids[0]));
    process.stdin.resume();
    process.stdin.on('end', () => p.close().then(() => process.exit(0)));`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'], env });
  const pid = Number(await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString()))));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  return {
    pid,
    worker: environOf(pid),
    end: () => {
      child.stdin.end();
      return exited;
    },
  };
}

test("workers load modules eagerly and JIT-cache in a 0700 directory of their backend's own, gone when it exits; the operator's settings win (review 2, M3, L7)", async (t) => {
  const base = { ...process.env };
  for (const k of ['CUDA_MODULE_LOADING', 'CUDA_CACHE_PATH', 'CUDA_CACHE_DISABLE']) delete base[k];
  const a = await backendWithWorker(base);
  t.is(a.worker.get('CUDA_MODULE_LOADING'), 'EAGER', 'code is loaded at cuModuleLoadData, where the load is measured');
  const dir = a.worker.get('CUDA_CACHE_PATH');
  t.truthy(dir, 'a JIT cache path of its own');
  const st = fs.statSync(dir!);
  t.true(st.isDirectory() && (st.mode & 0o777) === 0o700 && st.uid === process.getuid!(), `${dir}: mode ${(st.mode & 0o777).toString(8)}`);
  const b = await backendWithWorker(base);
  t.not(b.worker.get('CUDA_CACHE_PATH'), dir, 'another backend (VM) has another');
  t.is(await a.end(), 0);
  t.false(fs.existsSync(dir!), 'removed when its backend exits');
  t.is(await b.end(), 0);
  // What the operator set is left alone.
  const c = await backendWithWorker({ ...base, CUDA_MODULE_LOADING: 'LAZY', CUDA_CACHE_DISABLE: '1' });
  t.deepEqual(
    [c.worker.get('CUDA_MODULE_LOADING'), c.worker.get('CUDA_CACHE_DISABLE'), c.worker.get('CUDA_CACHE_PATH')],
    ['LAZY', '1', undefined],
  );
  t.is(await c.end(), 0);
  const d = await backendWithWorker({ ...base, CUDA_CACHE_PATH: '/var/cache/qcuda/vm1' });
  t.is(d.worker.get('CUDA_CACHE_PATH'), '/var/cache/qcuda/vm1');
  t.is(await d.end(), 0);
});

test('workers end when the backend process is killed (their channel closes)', async (t) => {
  const script = `
    const { EmuProvider } = require(${JSON.stringify(require.resolve('../../backend/src/qcuda/providers/emu'))});
    const { IsolatedProvider } = require(${JSON.stringify(require.resolve('../../backend/src/qcuda/workers/isolated'))});
    const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } });
    Promise.all([p.openContext(0), p.openContext(0)]).then(() => console.log(p.workerPids.join(' ')));
    setInterval(() => undefined, 1000);`;
  const child = spawn(process.execPath, ['-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve) => child.stdout.once('data', (d: Buffer) => resolve(d.toString())));
  const pids = line.trim().split(' ').map(Number);
  t.is(pids.length, 2);
  t.true(pids.every(alive), 'two workers run');
  child.kill('SIGKILL');
  for (const pid of pids) t.true(await gone(pid), `worker ${pid} exited after its backend was killed`);
});

test("through the device: worker processes are bounded per VM, and a closed session's worker is killed at once even when it hangs", async (t) => {
  const { QcudaDevice } = await import('../../backend/src/qcuda/virtio-device');
  const { QcudaClient } = await import('./client');
  const { started } = await import('../helpers');
  const { Cmd } = await import('../../backend/src/qcuda/proto');
  const p = isolated();
  const dev = new QcudaDevice({ queues: 2, provider: p, limits: { contexts: 3 } });
  const pair = await started(t, dev, { size: 64 });
  const clients = await Promise.all(
    Array.from({ length: 5 }, async () => {
      const c = new QcudaClient(pair.fe, 2, 8);
      await c.open();
      return c;
    }),
  );
  const status = await Promise.all(clients.map((c) => c.malloc(4096).then((r) => r.status)));
  t.is(status.filter((s) => s === 0).length, 3, `${status}`);
  t.is(status.filter((s) => s === CudaErr.DevicesUnavailable).length, 2);
  const pids = p.workerPids;
  t.is(pids.length, 3, 'three worker processes, no more');
  const rss = pids.map((pid) => Number(/VmRSS:\s+(\d+)/.exec(require('node:fs').readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? 0));
  t.log(
    `5 sessions asked for a context under --max-processes=3: ${pids.length} workers, RSS ${rss.map((k) => `${(k / 1024).toFixed(0)} MiB`).join(', ')}`,
  );
  // A worker that no longer answers (stopped, as one stuck in an endless kernel would be busy):
  const owner = clients[status.indexOf(0)];
  const hung = pids[0];
  process.kill(hung, 'SIGSTOP');
  const sync = owner.call(Cmd.DEVICE_SYNC);
  const t0 = Date.now();
  // Which session owns the stopped worker is not known here: close them all.
  await Promise.all(clients.map((c) => c.close()));
  t.true(await gone(hung, 3000), 'the stopped worker was killed');
  t.log(`sessions closed and every worker gone in ${Date.now() - t0} ms`);
  t.not((await sync).status, 0, 'the call it held failed');
  for (const pid of pids) t.false(alive(pid));
  t.is(dev.vm.contexts.used, 0n);
  await p.close();
});
