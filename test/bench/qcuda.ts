// Benchmark (not a test): the qcuda backend path with no VM. A harness plays
// the guest driver against the real backend process; the baseline is the
// same provider driven directly in this process, with no transport. On a
// GPU machine (provider cuda) the ratios are the backend's own cost; the
// native CUDA program test/bench/native_bench.cu gives the driver-level
// figures next to them (test/gpu/run.sh runs both).
// With a GPU it also measures the rate of asynchronous null-kernel launches
// posted in batches as the guest library posts them, against the same
// launches issued by the addon in one tight cuLaunchKernel loop (the
// driver's own rate). The kernel comes from test/qcuda/fixtures/kernels.cu
// ($QCUDA_KERNELS_FATBIN, dist/test/qcuda/fixtures/kernels.fatbin, or nvcc).
// --isolation (the backend's; default process: each session's context in a
// worker process, one IPC hop more per call) says which backend is measured.
// --inline-wait (the backend's, microseconds) sets how long a worker polls a
// short wait on its own thread (0: every wait goes to a waiter thread).
// --poll-us sets how long the backend polls its rings, each worker its
// channel, and the harness (as the guest driver's poll_us) its used rings
// after each request (default: the backend's, 50; 0: interrupts and kicks
// only); the harness spins on them meanwhile, as the driver's poll loop
// does. The CPU the backend and its workers use is measured over the
// synchronize loop (per call, and in cores) and with four sessions open and
// idle, which must cost nothing.
// --inline-calls (the backend's, yes|no) says whether a worker runs its
// ordered calls (allocations, launches) on its own thread when it can.
// The synchronize, the 4 B copy and launch + synchronize are also measured
// with the guest's side in C (the addon's ringLoop, as the guest driver
// posts and waits): the harness's JavaScript costs microseconds a call
// that the driver does not.
// --chunk-mib sets the size of a transfer's requests (default QCUDA_CHUNK, as
// the guest driver sends them), to see what the request size costs.
//   node dist/test/bench/qcuda.js [--provider cuda|emu|auto] [--isolation process|none] [--mib 256] [--chunk-mib 16] [--launches 100000] [--inline-wait US] [--poll-us US] [--guest-poll-us US] [--inline-calls yes|no] [--own-queues] [--ring-server yes|no]
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { native } from '../../backend/src/sys/native';
import { Cmd, encode, QCUDA_BATCH_ENDS_SYNC, QCUDA_CHUNK, QCUDA_PROTO_VERSION } from '../../backend/src/qcuda/proto';
import { createProvider, PROVIDER_KINDS, providerKind } from '../../backend/src/qcuda/choose-provider';
import type { GuestSeg, LaunchDesc, ProviderContext } from '../../backend/src/qcuda/provider';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { frameBatch, fullBatch, QcudaClient, type CallOptions } from '../qcuda/client';
import { treeCpuNs } from './cpu';
import { percentile, report, type Row } from './stats';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : dflt);
const PROVIDER =
  providerKind(arg('--provider', 'auto')) ??
  (() => {
    throw new Error(`--provider must be one of ${PROVIDER_KINDS.join(', ')} (or host, emu's old name)`);
  })();
const ISOLATION = arg('--isolation', 'process');
const BIG = Number(arg('--mib', '256')) << 20;
const LAUNCHES = Number(arg('--launches', '100000'));
const INLINE_WAIT = arg('--inline-wait', '');
const POLL_US = arg('--poll-us', '');
const INLINE_CALLS = arg('--inline-calls', '');
/** --ring-server yes|no: a worker serving its own queue answers the short calls in C (the backend's default: yes). */
const RING_SERVER = arg('--ring-server', '');
/** --own-queues: the sessions keep to queues of their own, which the backend hands to their workers (qcuda-backend --own-queues). */
const OWN_QUEUES = process.argv.includes('--own-queues');
/** The harness plays the guest driver: its poll_us (default 50, the driver's; else --poll-us where given). */
const GUEST_POLL_US = Number(arg('--guest-poll-us', POLL_US || '50'));
const CHUNK = Number(arg('--chunk-mib', String(QCUDA_CHUNK >> 20))) << 20;
const dist = path.resolve(__dirname, '..', '..');
/** cudaErrorNotReady: an EVENT_QUERY of work not done yet. */
const CUDA_ERROR_NOT_READY = 600;

/** A line on stderr per measurement, so a run that stalls says where. */
function progress(what: string): void {
  process.stderr.write(`bench: ${what}\n`);
}

async function lat(what: string, n: number, once: () => unknown): Promise<number> {
  progress(what);
  for (let i = 0; i < Math.min(200, n); i++) await once();
  const xs: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    await once();
    xs.push(Number(process.hrtime.bigint() - t0) / 1000);
  }
  return percentile(
    xs.sort((a, b) => a - b),
    50,
  );
}

async function gbps(what: string, bytes: number, once: () => unknown, reps = 5): Promise<number> {
  progress(what);
  await once();
  let best = Infinity;
  for (let i = 0; i < reps; i++) {
    const t0 = process.hrtime.bigint();
    await once();
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  return bytes / best / 1e9;
}

/** The fixture kernels' fat binary, or undefined where there is none and no nvcc. */
function fixtureFatbin(): Uint8Array | undefined {
  const known = [process.env.QCUDA_KERNELS_FATBIN, path.join(dist, 'test/qcuda/fixtures/kernels.fatbin')];
  for (const f of known) if (f && fs.existsSync(f)) return new Uint8Array(fs.readFileSync(f));
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-bench-')), 'kernels.fatbin');
  try {
    execFileSync(
      'nvcc',
      ['-fatbin', '-gencode', 'arch=compute_90,code=sm_90', '-o', out, path.join(dist, '..', 'test/qcuda/fixtures/kernels.cu')],
      { stdio: 'pipe' },
    );
    return new Uint8Array(fs.readFileSync(out));
  } catch {
    return undefined;
  }
}

/** Launches per second of `n` null launches posted in full batches, one batch in flight (as the guest library does). */
async function postedLaunchRate(c: QcudaClient, mem: GuestMemory, func: bigint, n: number): Promise<number> {
  progress('backend launch rate');
  const one = encode('qcuda_args_launch', { func, stream: 0n, grid: gridOf(1), block: gridOf(1), shared_mem: 0, param_bytes: 0 });
  const { bytes, count: per, entryBytes: size } = fullBatch(Cmd.LAUNCH, one);
  const gpa = mem.alloc(bytes.length, 4096);
  mem.bytes(gpa, bytes.length).set(bytes);
  const batch = (count: number) =>
    c.call(Cmd.BATCH, { args: ['qcuda_args_batch', { count, bytes: BigInt(count * size) }], to: [{ gpa, len: count * size }] });
  const run = async () => {
    const t0 = process.hrtime.bigint();
    for (let left = n; left > 0; left -= per) mustOk('batch')((await batch(Math.min(per, left))).status);
    mustOk('sync')((await c.call(Cmd.DEVICE_SYNC)).status);
    return Number(process.hrtime.bigint() - t0) / 1e9;
  };
  await run();
  return n / Math.min(await run(), await run(), await run());
}

/** The same null launches from the addon in one cuLaunchKernel loop: the driver's rate. */
async function directLaunchRate(ctx: ProviderContext, f: unknown, n: number): Promise<number> {
  progress('direct launch rate');
  const list: LaunchDesc[] = Array.from({ length: n }, () => ({
    f,
    grid: [1, 1, 1],
    block: [1, 1, 1],
    sharedMem: 0,
    stream: undefined,
    params: new Uint8Array(0),
  }));
  const run = async () => {
    const t0 = process.hrtime.bigint();
    await ctx.launchMany(list);
    await ctx.synchronize();
    return Number(process.hrtime.bigint() - t0) / 1e9;
  };
  await run();
  return n / Math.min(await run(), await run(), await run());
}

/** CPU the backend and its workers use per call, and in cores, over n calls one after another. */
/**
 * Measured for a second at least, after as long a warm-up: over a few tens
 * of milliseconds the processes' JIT and GC threads, busy after start-up,
 * counted as much as the calls (2.5-3.3 cores for an owned session whose
 * worker, seen with top on the H100, used one).
 */
async function cpuPerCall(pid: number, n: number, once: () => Promise<unknown>): Promise<{ perCallUs: number; cores: number }> {
  progress('backend CPU per synchronize');
  const forAtLeast = async (ms: number): Promise<number> => {
    const end = process.hrtime.bigint() + BigInt(ms * 1e6);
    let calls = 0;
    while (calls < n || process.hrtime.bigint() < end) {
      await once();
      calls++;
    }
    return calls;
  };
  await forAtLeast(1000);
  const cpu0 = treeCpuNs(pid);
  const t0 = process.hrtime.bigint();
  const calls = await forAtLeast(1000);
  const wall = Number(process.hrtime.bigint() - t0);
  const cpu = treeCpuNs(pid) - cpu0;
  return { perCallUs: cpu / calls / 1000, cores: cpu / wall };
}

/** Cores the backend and its workers use with four sessions open, each with a context (isolation process), and no calls (polling must have stopped). */
async function idleCores(pid: number, fe: Frontend): Promise<number> {
  progress('backend CPU, 4 sessions idle');
  const others = await Promise.all(
    [2, 3, 0].map(async (q) => {
      // With owned queues: two more owners, and one session on the shared queue 0.
      const c = new QcudaClient(fe, OWN_QUEUES ? 1 : undefined, 4);
      await (OWN_QUEUES && q !== 0 ? c.openOwn(q) : c.open());
      // With --isolation=none a VM has one CUDA process: the others stay sessions without a context.
      if (ISOLATION !== 'none') mustOk('malloc')((await c.malloc(1 << 20)).status);
      return c;
    }),
  );
  await new Promise((r) => setTimeout(r, 500));
  const cpu0 = treeCpuNs(pid);
  const t0 = process.hrtime.bigint();
  await new Promise((r) => setTimeout(r, 2000));
  const cores = (treeCpuNs(pid) - cpu0) / Number(process.hrtime.bigint() - t0);
  for (const c of others) await c.close();
  return cores;
}

/**
 * A BATCH of posted commands (their bytes in guest memory), as the guest
 * library sends what it flushes; flags QCUDA_BATCH_ENDS_SYNC: the last is the
 * synchronizing call that flushed them.
 */
function batchOf(mem: GuestMemory, entries: [cmd: number, args: Uint8Array][], flags = 0): CallOptions {
  const bytes = frameBatch(entries);
  const gpa = mem.alloc(bytes.length, 64);
  mem.bytes(gpa, bytes.length).set(bytes);
  return { args: ['qcuda_args_batch', { count: entries.length, flags, bytes: BigInt(bytes.length) }], to: [{ gpa, len: bytes.length }] };
}

function gridOf(x: number): Uint32Array {
  return new Uint32Array([x, 1, 1]);
}

/** Uploads and loads a module; resolves to the handle of its function `name`. */
async function loadFunction(c: QcudaClient, mem: GuestMemory, image: Uint8Array, name: string): Promise<bigint> {
  progress(`backend module load (${image.length} bytes)`);
  const gpa = mem.alloc(image.length, 4096);
  mem.bytes(gpa, image.length).set(image);
  const size = BigInt(image.length);
  mustOk('module upload')(
    (await c.call(Cmd.MODULE_UPLOAD, { args: ['qcuda_args_module_upload', { upload_id: 1n, size }], to: [{ gpa, len: image.length }] }))
      .status,
  );
  const m = await c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: 1n }] });
  mustOk('module load')(m.status);
  const nameBytes = new Uint8Array(256);
  nameBytes.set(Buffer.from(name));
  const f = await c.call(Cmd.FUNC_GET, { args: ['qcuda_args_symbol', { module: m.value, name: nameBytes }], out: 'qcuda_out_func_info' });
  mustOk('function get')(f.status);
  return f.value;
}

function mustOk(what: string) {
  return (status: number) => {
    if (status !== 0) throw new Error(`${what} failed with status ${status}`);
  };
}

async function main(): Promise<void> {
  // Backend path: harness -> backend process -> provider.
  const [mine, theirs] = native.socketPair();
  const child = spawn(
    process.execPath,
    [
      path.join(dist, 'backend/src/cli/backend.js'),
      '--fd=3',
      '--device=qcuda',
      ...(process.geteuid?.() === 0 ? ['--backend-user=root'] : []), // as before: started as root, it would drop
      '--queues=4',
      `--provider=${PROVIDER}`,
      `--isolation=${ISOLATION}`,
      ...(INLINE_WAIT ? [`--inline-wait=${INLINE_WAIT}`] : []),
      ...(POLL_US ? [`--poll-us=${POLL_US}`] : []),
      ...(INLINE_CALLS ? [`--inline-calls=${INLINE_CALLS}`] : []),
      ...(RING_SERVER ? [`--ring-server=${RING_SERVER}`] : []),
      `--own-queues=${OWN_QUEUES ? 'yes' : 'no'}`,
    ],
    { stdio: ['ignore', 'inherit', 'inherit', theirs] },
  );
  native.close(theirs);
  const mem = new GuestMemory([
    { gpa: 0n, size: 64 << 20 },
    { gpa: 1n << 32n, size: 2 * BIG + (64 << 20) },
  ]);
  const fe = Frontend.fromFd(mine, mem);
  await fe.negotiate();
  // The guest driver polls for its answer in a loop (qcuda_chunk_poll): the harness spins as it does.
  await fe.start({ size: 256, pollUs: GUEST_POLL_US, spinUs: GUEST_POLL_US });
  const c = new QcudaClient(fe, OWN_QUEUES ? 1 : undefined);
  await (OWN_QUEUES ? c.openOwn(1) : c.open());
  const src = mem.alloc(BIG, 4096, 1);
  const dst = mem.alloc(BIG, 4096, 1);
  mem.bytes(src, BIG).fill(7);
  const dev = (await c.malloc(BIG)).value;
  const small = mem.alloc(65536, 4096);
  const pid = child.pid!;
  const syncCpu = await cpuPerCall(pid, 3000, () => c.call(Cmd.DEVICE_SYNC));
  const be = {
    sync: await lat('backend sync', 3000, () => c.call(Cmd.DEVICE_SYNC)),
    h2d4: await lat('backend h2d4', 3000, () => c.htod(dev, small, 4).then(mustOk('htod'))),
    d2h4: await lat('backend d2h4', 3000, () => c.dtoh(small, dev, 4).then(mustOk('dtoh'))),
    h2d64k: await lat('backend h2d64k', 1000, () => c.htod(dev, small, 65536).then(mustOk('htod'))),
    h2d: await gbps('backend h2d', BIG, () => c.htod(dev, src, BIG, 0n, CHUNK).then(mustOk('htod'))),
    d2h: await gbps('backend d2h', BIG, () => c.dtoh(dst, dev, BIG, 0n, CHUNK).then(mustOk('dtoh'))),
  };
  // The same calls with the guest's side in C, as the guest driver makes them (no JavaScript between
  // the calls on this side): what the backend and its workers cost, without the harness's own.
  const cLoop = (what: string, n: number, calls: Parameters<QcudaClient['loop']>[0]) => {
    progress(what);
    c.loop(calls, 200);
    return percentile(
      [...c.loop(calls, n)].map((ns) => ns / 1000).sort((a, b) => a - b),
      50,
    );
  };
  const inC = {
    sync: cLoop('backend sync, guest side in C', 3000, [[Cmd.DEVICE_SYNC]]),
    h2d4: cLoop('backend h2d4, guest side in C', 3000, [
      [
        Cmd.MEMCPY_HTOD,
        {
          args: ['qcuda_args_memcpy', { dst: dev, src: 0n, size: 4n, stream: 0n, async: 0 }],
          to: [{ gpa: small, len: 4 }],
          dataLen: 4n,
        },
      ],
    ]),
  };
  const image = PROVIDER !== 'emu' ? fixtureFatbin() : undefined;
  const hello = await c.call(Cmd.HELLO, {
    args: ['qcuda_args_hello', { proto_version: QCUDA_PROTO_VERSION, cuda_version: 13000 }],
    out: 'qcuda_out_hello',
  });
  const gpu = hello.status === 0 && ((hello.out!.capabilities as bigint) & 1n) === 1n;
  const nop = gpu && image ? await loadFunction(c, mem, image, 'nop') : undefined;
  const launches = nop !== undefined ? await postedLaunchRate(c, mem, nop, LAUNCHES) : undefined;
  const launchArgs =
    nop !== undefined
      ? encode('qcuda_args_launch', { func: nop, stream: 0n, grid: gridOf(1), block: gridOf(1), shared_mem: 0, param_bytes: 0 })
      : undefined;
  const launchSync =
    launchArgs !== undefined
      ? await lat('backend launch+sync', 2000, async () => {
          mustOk('launch')((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs })).status);
          mustOk('sync')((await c.call(Cmd.DEVICE_SYNC)).status);
        })
      : undefined;
  const launchSyncInC =
    launchArgs !== undefined
      ? cLoop('backend launch+sync, guest side in C', 2000, [[Cmd.LAUNCH, { rawArgs: launchArgs }], [Cmd.DEVICE_SYNC]])
      : undefined;
  // As the guest library sends a launch and a synchronize: the launch posted, and the synchronize
  // that flushes it at the end of its batch (QCUDA_BATCH_ENDS_SYNC): one request.
  const postedLaunch =
    launchArgs !== undefined
      ? batchOf(
          mem,
          [
            [Cmd.LAUNCH, launchArgs],
            [Cmd.DEVICE_SYNC, new Uint8Array(0)],
          ],
          QCUDA_BATCH_ENDS_SYNC,
        )
      : undefined;
  const postedLaunchSync =
    postedLaunch !== undefined
      ? await lat('backend posted launch+sync', 2000, async () => {
          mustOk('batch ending in a synchronize')((await c.call(Cmd.BATCH, postedLaunch)).status);
        })
      : undefined;
  const postedLaunchSyncInC =
    postedLaunch !== undefined ? cLoop('backend posted launch+sync, guest side in C', 2000, [[Cmd.BATCH, postedLaunch]]) : undefined;
  // cudaEventRecord then cudaEventQuery until done, as the guest library sends them (the record is posted, the query flushes it).
  const ev = await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 2 }] }); // cudaEventDisableTiming
  mustOk('event create')(ev.status);
  const postedRecord = batchOf(mem, [[Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: ev.value, stream: 0n })]]);
  const eventRq = await lat('backend event record+query', 3000, async () => {
    mustOk('record')((await c.call(Cmd.BATCH, postedRecord)).status);
    for (;;) {
      const q = (await c.call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: ev.value }] })).status;
      if (q === 0) break;
      if (q !== CUDA_ERROR_NOT_READY) mustOk('query')(q);
    }
  });
  // The same record with cudaEventSynchronize, a step that always succeeds (a query may say not ready), from C.
  const eventRsInC = cLoop('backend event record+synchronize, guest side in C', 3000, [
    [Cmd.BATCH, postedRecord],
    [Cmd.EVENT_SYNC, { args: ['qcuda_args_handle', { handle: ev.value }] }],
  ]);
  const idle = await idleCores(pid, fe);
  fe.close();
  await new Promise((r) => child.once('exit', r));

  // Baseline: the same provider in this process, the same guest RAM, no
  // transport; its waits and calls inline on this thread as a worker's are
  // (inlineHere, with the backend's --inline-wait and --inline-calls), so
  // the ratio is the transport's alone.
  const { provider, note } = await createProvider(
    PROVIDER,
    0,
    { guestView: () => [] },
    { inlineHere: true, inlineWaitUs: INLINE_WAIT ? Number(INLINE_WAIT) : undefined, inlineCalls: INLINE_CALLS !== 'no' },
  );
  const direct = new GuestMemory([{ gpa: 0n, size: 2 * BIG + (64 << 20) }]);
  const region = new native.Mapping(direct.fd.value, 2 * BIG + (64 << 20), 0);
  await provider.registerGuestMemory(region.address, BigInt(region.length));
  const view = new Uint8Array(region.window(0, 2 * BIG));
  const seg = (off: number, len: number): GuestSeg[] => [{ addr: region.address + BigInt(off), len, view: view.subarray(off, off + len) }];
  const ctx = await provider.openContext(0);
  const dptr = await ctx.malloc(BigInt(BIG));
  const base = {
    sync: await lat('direct sync', 3000, () => ctx.synchronize()),
    h2d4: await lat('direct h2d4', 3000, () => ctx.copyToDevice(dptr, seg(0, 4), undefined)),
    d2h4: await lat('direct d2h4', 3000, () => ctx.copyFromDevice(seg(0, 4), dptr, undefined)),
    h2d64k: await lat('direct h2d64k', 1000, () => ctx.copyToDevice(dptr, seg(0, 65536), undefined)),
    h2d: await gbps('direct h2d', BIG, () => ctx.copyToDevice(dptr, seg(0, BIG), undefined)),
    d2h: await gbps('direct d2h', BIG, () => ctx.copyFromDevice(seg(BIG, BIG), dptr, undefined)),
  };
  const event = await ctx.eventCreate(2);
  const directEventRq = await lat('direct event record+query', 3000, async () => {
    await ctx.eventRecord(event, undefined);
    while (!(await ctx.eventQuery(event)));
  });
  const directEventRs = await lat('direct event record+synchronize', 3000, async () => {
    await ctx.eventRecord(event, undefined);
    await ctx.eventSynchronize(event);
  });
  await ctx.eventDestroy(event);
  let directLaunches: number | undefined;
  let directLaunchSync: number | undefined;
  if (launches !== undefined && image) {
    const mod = (await ctx.moduleLoad(image)).ref;
    const f = await ctx.functionGet(mod, 'nop', 256);
    directLaunches = await directLaunchRate(ctx, f.ref, LAUNCHES);
    directLaunchSync = await lat('direct launch+sync', 2000, async () => {
      await ctx.launch(f.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(0));
      await ctx.synchronize();
    });
  }
  await ctx.destroy();
  await provider.unregisterGuestMemory(region.address);
  region.unmap();
  direct.close();
  await provider.close();

  const r = (what: string, v: number, b: number, unit: string, higherIsBetter: boolean): Row => ({
    what,
    value: v,
    unit,
    baseline: b,
    ratio: higherIsBetter ? v / b : b / v,
  });
  report(
    `qcuda backend path (isolation ${ISOLATION}${INLINE_WAIT ? `, inline wait ${INLINE_WAIT} us` : ''}, transfers in ${CHUNK >> 20} MiB requests) vs the provider called directly (${note})`,
    [
      r('cudaDeviceSynchronize round trip', be.sync, base.sync, 'us', false),
      r('4 B H2D copy', be.h2d4, base.h2d4, 'us', false),
      r('4 B D2H copy', be.d2h4, base.d2h4, 'us', false),
      r('cudaDeviceSynchronize round trip, guest side in C', inC.sync, base.sync, 'us', false),
      r('4 B H2D copy, guest side in C', inC.h2d4, base.h2d4, 'us', false),
      r('64 KiB H2D copy', be.h2d64k, base.h2d64k, 'us', false),
      r('event record + query', eventRq, directEventRq, 'us', false),
      r('event record + synchronize, guest side in C', eventRsInC, directEventRs, 'us', false),
      r(`${BIG >> 20} MiB H2D`, be.h2d, base.h2d, 'GB/s', true),
      r(`${BIG >> 20} MiB D2H`, be.d2h, base.d2h, 'GB/s', true),
      ...(launchSync !== undefined && directLaunchSync !== undefined
        ? [r('null-kernel launch + synchronize', launchSync, directLaunchSync, 'us', false)]
        : []),
      ...(launchSyncInC !== undefined && directLaunchSync !== undefined
        ? [r('null-kernel launch + synchronize, guest side in C', launchSyncInC, directLaunchSync, 'us', false)]
        : []),
      ...(postedLaunchSync !== undefined && directLaunchSync !== undefined
        ? [
            r(
              'null-kernel launch + synchronize as the guest library sends them (one batch)',
              postedLaunchSync,
              directLaunchSync,
              'us',
              false,
            ),
          ]
        : []),
      ...(postedLaunchSyncInC !== undefined && directLaunchSync !== undefined
        ? [
            r(
              'null-kernel launch + synchronize as the guest library sends them, guest side in C',
              postedLaunchSyncInC,
              directLaunchSync,
              'us',
              false,
            ),
          ]
        : []),
      ...(launches !== undefined && directLaunches !== undefined
        ? [r('async null-kernel launches (batched)', launches, directLaunches, '/s', true)]
        : []),
      { what: 'backend + workers CPU per synchronize', value: syncCpu.perCallUs, unit: 'us' },
      { what: 'backend + workers CPU while synchronizing', value: syncCpu.cores, unit: 'cores' },
      { what: 'backend + workers CPU, 4 sessions idle', value: idle * 100, unit: '% core' },
    ],
    {
      provider: note,
      pollUs: POLL_US || 'default',
      inlineCalls: INLINE_CALLS || 'default',
      ringServer: RING_SERVER || 'default',
      isolation: ISOLATION,
      inlineWaitUs: INLINE_WAIT || 'default',
      chunkMiB: CHUNK >> 20,
      ratio: 'backend figure relative to the direct one (1.0 = no overhead)',
    },
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
