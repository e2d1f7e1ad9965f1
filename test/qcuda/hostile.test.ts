// A hostile guest against the device on the emu provider (what CI runs; the
// GPU run repeats the kernel-side cases with the cuda provider): requests in
// flight at once (races), resource exhaustion, sessions ended with requests
// outstanding, memory-table changes mid-request, and fuzzed module images.
// Each case checks the outcome the guest sees, what the backend still holds
// afterwards (sessions, quota, staging, deferred work) and that another
// session keeps working. The suite prints its figures at the end.
import test, { type ExecutionContext } from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { VmLimits } from '../../backend/src/qcuda/quota/limits';
import { checkImage } from '../../backend/src/qcuda/modules/module-image';
import type { Provider, ProviderContext } from '../../backend/src/qcuda/provider';
import { EmuProvider, emuProvider } from '../../backend/src/qcuda/providers/emu';
import { Cmd, encode, QCUDA_MAX_BATCH, QCUDA_STREAM_LEGACY, Status } from '../../backend/src/qcuda/proto';
import type { Frontend } from '../../backend/src/vhost-user/frontend';
import { encodeSingleRegion, Req } from '../../backend/src/vhost-user';
import { LogLimiter } from '../../backend/src/vhost-user';
import { prng, randomBytes, started, tick, until } from '../helpers';
import { fullBatch, QcudaClient } from './client';
import { elf, fatbin, ptx } from './images';

const MIB = 1n << 20n;
/** QCUDA_HOSTILE_PROVIDER=cuda (the GPU run): the cases that need no emu-provider internals run on the GPU, a worker per session. */
const ON_GPU = process.env.QCUDA_HOSTILE_PROVIDER === 'cuda';
/** On the GPU the cases run one at a time (each starts workers). */
const it = ON_GPU ? test.serial : test;

async function gpuProvider(t: ExecutionContext): Promise<Provider | undefined> {
  if (!ON_GPU) return undefined;
  const { createCudaProvider } = await import('../../backend/src/qcuda/providers/cuda/cuda');
  const { IsolatedProvider } = await import('../../backend/src/qcuda/workers/isolated');
  const p = new IsolatedProvider(await createCudaProvider(0), { worker: { kind: 'cuda', gpu: 0 } });
  t.teardown(() => p.close());
  return p;
}

/** The suite's figures (printed at the end). */
const figures = { requests: 0, faults: 0, sessionsLeft: 0, bytesLeft: 0n, cases: 0, answeredAfter: 0, mappedPeak: 0n, mappedBound: 0n };

test.after.always(() => {
  console.log(
    `hostile suite: ${figures.requests} requests tried, ${figures.faults} faults injected, ` +
      `${figures.sessionsLeft} sessions left behind, ${figures.bytesLeft} bytes left allocated, ` +
      `the device answered a new session after ${figures.answeredAfter} of ${figures.cases} cases, ` +
      `host-mapped bytes at peak ${figures.mappedPeak} against a bound of ${figures.mappedBound}`,
  );
});

/**
 * An emu provider whose contexts hold chosen calls until released: a test
 * makes a call "in flight" for as long as it likes.
 */
class HeldProvider extends EmuProvider {
  readonly held = new Map<string, (() => void)[]>();
  readonly holding = new Set<string>();

  override async openContext(device: number): Promise<ProviderContext> {
    const x = await super.openContext(device);
    for (const m of ['malloc', 'streamCreate', 'eventCreate', 'hostDevicePointer'] as const) {
      const f = (x[m] as (...a: unknown[]) => Promise<unknown>).bind(x);
      // The call is done on the context at once; its answer is held (as a reply on its way back would be).
      (x as unknown as Record<string, unknown>)[m] = async (...a: unknown[]) => {
        const v = await f(...a);
        if (this.holding.has(m)) await new Promise<void>((r) => this.held.set(m, [...(this.held.get(m) ?? []), r]));
        return v;
      };
    }
    return x;
  }

  letGo(m: string): void {
    for (const r of this.held.get(m) ?? []) r();
    this.held.delete(m);
  }
}

async function setup(
  t: ExecutionContext,
  o: { limits?: Partial<VmLimits>; provider?: Provider; addMemReg?: boolean; log?: (l: string) => void } = {},
) {
  // Quotas here are MiBs: a GPU context's overhead (1049 MiB by default) counts only where a case asks.
  const limits = { contextOverhead: 0n, ...o.limits };
  const dev = new QcudaDevice({ queues: 4, limits, provider: o.provider ?? (await gpuProvider(t)) ?? emuProvider, log: o.log });
  const pair = await started(t, dev, { size: 256, addMemReg: o.addMemReg });
  const client = async () => {
    const c = new QcudaClient(pair.fe);
    await c.open();
    return c;
  };
  return { dev, fe: pair.fe, c: await client(), client };
}

/** Counts a request the suite sent, and a fault when it was meant to fail. */
function count<T>(p: Promise<T>, fault = false): Promise<T> {
  figures.requests++;
  if (fault) figures.faults++;
  return p;
}

const hostFunc = (c: QcudaClient, stream: bigint, id: bigint) =>
  count(c.call(Cmd.HOST_FUNC, { args: ['qcuda_args_host_func', { stream, id }] }));
const callbackWait = (c: QcudaClient, done = 0n) =>
  count(c.call(Cmd.CALLBACK_WAIT, { args: ['qcuda_args_callback_wait', { done }], out: 'qcuda_out_callback' }));
const streamSync = (c: QcudaClient, handle: bigint) => count(c.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle }] }));
const newStream = async (c: QcudaClient) =>
  (await count(c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] }))).value;

/** CALLBACK_WAIT requests parked in the device's sessions now: what a test waits for before it acts on a parked wait. */
function parkedWaits(dev: QcudaDevice): number {
  return [...dev.sessions.values()].reduce((n, s) => n + s.callbacks.parked, 0);
}

/** Everything a VM's sessions hold once they are all gone. */
function leftovers(dev: QcudaDevice): { sessions: number; quota: bigint; staging: bigint; contexts: bigint } {
  return { sessions: dev.sessions.size, quota: dev.vm.quota.used, staging: dev.vm.staging.used, contexts: dev.vm.contexts.used };
}

/** At the end of a case: what is left behind, and whether the device still serves a new process. */
async function noteLeft(dev: QcudaDevice, fe: Frontend): Promise<void> {
  figures.cases++;
  figures.sessionsLeft += dev.sessions.size;
  figures.bytesLeft += dev.vm.quota.used;
  const c = new QcudaClient(fe, fe.queues.length, 2);
  await c.open();
  if ((await c.malloc(16)).status === 0 && (await c.close()).status === 0) figures.answeredAfter++;
}

// ---- sessions always end

it('a session closed with a parked callback wait and a held command is freed at once: the wait and the command fail, the quota comes back', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { deviceMemory: 64n * MIB } });
  t.is((await count(c.malloc(48n * MIB))).status, 0);
  const s = await newStream(c);
  t.is((await hostFunc(c, s, 1n)).status, 0);
  const parked = callbackWait(c); // answered with function 1 at once (the stream is idle)
  t.is((await parked).out!.id, 1n);
  const parked2 = callbackWait(c, 0n); // parks: nothing more to run
  const held = streamSync(c, s); // behind function 1, which the guest never reports as run
  t.true(await until(() => parkedWaits(dev) === 1), 'the wait is parked in the session');
  t.is((await count(c.close(), true)).status, 0, 'SESSION_CLOSE with requests in flight');
  t.is((await parked2).status, Status.NO_SESSION, 'the parked wait is answered');
  t.is((await held).status, Status.NO_SESSION, 'the held command fails');
  t.deepEqual(leftovers(dev), { sessions: 0, quota: 0n, staging: 0n, contexts: 0n });
  const next = await client();
  t.is((await count(next.malloc(48n * MIB))).status, 0, 'the next process gets the memory');
  t.is((await next.close()).status, 0);
  await noteLeft(dev, fe);
});

it('DEVICE_RESET answers a parked callback wait with id 0 (wait again); host functions marked before never run', async (t) => {
  const { dev, c, fe } = await setup(t);
  const s = await newStream(c);
  const parked = callbackWait(c);
  t.true(await until(() => parkedWaits(dev) === 1), 'the wait is parked in the session');
  t.is((await count(c.call(Cmd.DEVICE_RESET))).status, 0);
  const r = await parked;
  t.is(r.status, 0);
  t.is(r.out!.id, 0n, 'nothing to run');
  // The stream died with the context; a function on a new one runs as usual.
  const s2 = await newStream(c);
  t.not(s2, 0n);
  t.is((await hostFunc(c, s, 5n)).status, CudaErr.InvalidResourceHandle, 'the old stream is gone');
  t.is((await hostFunc(c, s2, 6n)).status, 0);
  t.is((await callbackWait(c)).out!.id, 6n);
  t.is((await c.close()).status, 0);
  await noteLeft(dev, fe);
});

// ---- the quota under concurrency

it('16 concurrent 2 MiB mallocs under a 3 MiB quota: exactly one succeeds', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { deviceMemory: 3n * MIB } });
  const other = await client();
  const all = await Promise.all(Array.from({ length: 16 }, (_, i) => count((i % 2 ? other : c).malloc(2n * MIB), true)));
  t.is(all.filter((r) => r.status === 0).length, 1);
  t.true(all.filter((r) => r.status !== 0).every((r) => r.status === CudaErr.MemoryAllocation));
  t.is(dev.vm.quota.used, 2n * MIB);
  await c.close();
  await other.close();
  t.is(dev.vm.quota.used, 0n);
  await noteLeft(dev, fe);
});

it('a malloc, stream, event or host mapping that completes after a DEVICE_RESET is not recorded', async (t) => {
  const provider = new HeldProvider({});
  const { dev, c, fe } = await setup(t, { limits: { deviceMemory: 8n * MIB }, provider });
  t.is((await c.malloc(1)).status, 0); // the context exists
  for (const m of ['malloc', 'streamCreate', 'eventCreate', 'hostDevicePointer']) provider.holding.add(m);
  const gpa = fe.mem.alloc(4096, 4096);
  const inFlight = [
    count(c.malloc(4n * MIB), true),
    count(c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] }), true),
    count(c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] }), true),
    count(c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa, size: 4096n }] }), true),
  ];
  t.true(await until(() => provider.held.size === 4), 'all four are in the provider');
  provider.holding.clear();
  t.is((await count(c.call(Cmd.DEVICE_RESET))).status, 0);
  for (const m of ['malloc', 'streamCreate', 'eventCreate', 'hostDevicePointer']) provider.letGo(m);
  const results = await Promise.all(inFlight);
  for (const r of results) t.is(r.status, CudaErr.ContextIsDestroyed, 'the result is refused, not recorded');
  t.is(dev.vm.quota.used, 0n, 'the reserved bytes went back with the reset');
  t.is(provider.used, 0n, 'the old context took its allocation with it');
  t.is((await c.malloc(8n * MIB)).status, 0, 'the whole quota is there');
  await c.close();
  await noteLeft(dev, fe);
});

// ---- bounds

/** HOST_MAP_PAGES' arguments: the struct, then the extents. */
function mapPages(size: bigint, extents: [bigint, bigint][]): Uint8Array {
  const head = encode('qcuda_args_host_map_pages', { key: 0n, size, count: extents.length, reserved: 0 });
  const out = new Uint8Array(head.length + extents.length * 16);
  out.set(head);
  extents.forEach(([gpa, len], i) => out.set(encode('qcuda_extent', { gpa, len }), head.length + i * 16));
  return out;
}

it('streams and events per process are bounded (--process-handles; review 2, M4): past it cudaErrorMemoryAllocation, a destroyed one frees its place, another process has its own', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { processStreams: 64, processEvents: 64 } });
  const make = (s: QcudaClient, kind: 'stream' | 'event', fault = false) =>
    count(
      kind === 'stream'
        ? s.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })
        : s.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] }),
      fault,
    );
  for (const kind of ['stream', 'event'] as const) {
    const made: bigint[] = [];
    for (let i = 0; i < 64; i++) {
      const r = await make(c, kind);
      t.is(r.status, 0);
      made.push(r.value);
    }
    for (let i = 0; i < 100; i++) t.is((await make(c, kind, true)).status, CudaErr.MemoryAllocation, `${kind} ${65 + i}`);
    const destroy = kind === 'stream' ? Cmd.STREAM_DESTROY : Cmd.EVENT_DESTROY;
    t.is((await count(c.call(destroy, { args: ['qcuda_args_handle', { handle: made[0] }] }))).status, 0);
    t.is((await make(c, kind)).status, 0, 'a destroyed one frees its place');
  }
  const other = await client();
  t.is((await make(other, 'stream')).status, 0, 'another process has its own bound');
  await other.close();
  await c.close();
  await noteLeft(dev, fe);
});

it('host mappings are bounded in bytes: no pages twice in one mapping or one session, at most 8 GiB each, 4 x guest RAM per VM (review 2, H3)', async (t) => {
  const { dev, c, fe, client } = await setup(t);
  const [r0, r1] = fe.mem.regions;
  const ram = dev.guestRamBytes();
  t.is(ram, r0.size + r1.size);
  const map = (s: QcudaClient, gpa: bigint, size: bigint, fault = false) =>
    count(s.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa, size }] }), fault);
  t.is((await map(c, r0.gpa, r0.size)).status, 0, 'a whole region, once');
  t.is((await map(c, r0.gpa, r0.size, true)).status, CudaErr.InvalidValue, 'the same pages again');
  t.is((await map(c, r0.gpa + 4096n, 4096n, true)).status, CudaErr.InvalidValue, 'a page of them');
  const pages = await count(
    c.call(Cmd.HOST_MAP_PAGES, {
      rawArgs: mapPages(8192n, [
        [r1.gpa, 4096n],
        [r1.gpa, 4096n],
      ]),
    }),
    true,
  );
  t.is(pages.status, CudaErr.InvalidValue, 'one page twice in one mapping');
  // The review's amplification: 2048 extents naming the same 32 MiB (64 GiB of mappings of one region).
  const amp = await count(
    c.call(Cmd.HOST_MAP_PAGES, {
      rawArgs: mapPages(
        2048n * r1.size,
        Array.from({ length: 2048 }, () => [r1.gpa, r1.size] as [bigint, bigint]),
      ),
    }),
    true,
  );
  t.is(amp.status, CudaErr.InvalidValue, 'past 8 GiB in one mapping, and the same pages 2048 times');
  // Other processes each map all of RAM, until the VM's mapped bytes would pass 4 x RAM.
  const others: QcudaClient[] = [];
  let refused = 0;
  for (let i = 0; i < 5; i++) {
    const s = await client();
    others.push(s);
    const a = await map(s, r0.gpa, r0.size, i >= 4);
    const b = await map(s, r1.gpa, r1.size, i >= 3);
    refused += Number(a.status === CudaErr.MemoryAllocation) + Number(b.status === CudaErr.MemoryAllocation);
    t.true(dev.vm.hostMapBytes.used <= 4n * ram, `mapped ${dev.vm.hostMapBytes.used} of at most ${4n * ram}`);
    if (dev.vm.hostMapBytes.used > figures.mappedPeak) figures.mappedPeak = dev.vm.hostMapBytes.used;
  }
  figures.mappedBound = 4n * ram;
  t.is(dev.vm.hostMapBytes.used, 4n * ram, 'the bound, reached exactly');
  t.true(refused >= 3, `${refused} mappings refused past the bound`);
  for (const s of [c, ...others]) await s.close();
  t.is(dev.vm.hostMapBytes.used, 0n, 'closed sessions give their mapped bytes back');
  await noteLeft(dev, fe);
});

it('deferred posted work is bounded per session: past the bound entries fail, the heap stays bounded, another session works', async (t) => {
  const limit = 1n * MIB;
  const { dev, c, fe, client } = await setup(t, { limits: { deferredBytes: limit } });
  const a = (await c.malloc(64)).value;
  const s = await newStream(c);
  t.is((await hostFunc(c, s, 1n)).status, 0); // never reported as run
  const scratch = fe.mem.alloc(QCUDA_MAX_BATCH);
  const { bytes: frame, count: n } = fullBatch(
    Cmd.MEMSET,
    encode('qcuda_args_memset', { dst: a, size: 64n, stream: s, value: 1, async: 1 }),
  );
  fe.mem.bytes(scratch, frame.length).set(frame);
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  let refused = 0;
  for (let b = 0; b < 200; b++) {
    const r = await count(
      c.call(Cmd.BATCH, {
        args: ['qcuda_args_batch', { count: n, bytes: BigInt(frame.length) }],
        to: [{ gpa: scratch, len: frame.length }],
      }),
      true,
    );
    if (r.status === CudaErr.MemoryAllocation) refused++;
  }
  const session = [...dev.sessions.values()][0];
  t.true(session.callbacks.deferredBytes <= limit, `${session.callbacks.deferredBytes} deferred bytes`);
  t.true(refused >= 190, `${refused} of 200 batches met the bound`);
  const grew = process.memoryUsage().heapUsed - heapBefore;
  t.log(
    `200 batches of ${n} entries behind a host function that never runs: heap +${(grew / 2 ** 20).toFixed(1)} MiB, ${session.callbacks.deferredBytes} bytes deferred (bound ${limit})`,
  );
  t.true(grew < 64 * 2 ** 20, `heap grew by ${grew} bytes`);
  const other = await client();
  t.is((await other.malloc(16)).status, 0, 'another session keeps working');
  await c.close();
  t.is(session.callbacks.deferredBytes, 0n, 'the close let the deferred work go');
  await other.close();
  await noteLeft(dev, fe);
});

function upload(c: QcudaClient, id: bigint, size: bigint, gpa: bigint, len: number) {
  return count(
    c.call(Cmd.MODULE_UPLOAD, {
      args: ['qcuda_args_module_upload', { upload_id: id, size }],
      to: [{ gpa, len }],
      dataOffset: 0n,
      dataLen: BigInt(len),
    }),
  );
}

it('module images staged at once are bounded per VM, not per session', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { moduleStaging: 1n * MIB } });
  const g = fe.mem.alloc(4096);
  const sessions = [c, await client(), await client()];
  t.is((await upload(sessions[0], 1n, 600n * 1024n, g, 4096)).status, 0);
  t.is((await upload(sessions[1], 1n, 600n * 1024n, g, 4096)).status, CudaErr.MemoryAllocation, 'the VM-wide bound, from another session');
  t.is((await upload(sessions[2], 1n, 400n * 1024n, g, 4096)).status, 0, 'what fits still goes');
  t.is(dev.vm.staging.used, 1000n * 1024n);
  await sessions[0].close();
  t.is((await upload(sessions[1], 1n, 600n * 1024n, g, 4096)).status, 0, 'a closed session gave its staging back');
  await sessions[1].close();
  await sessions[2].close();
  t.deepEqual(leftovers(dev), { sessions: 0, quota: 0n, staging: 0n, contexts: 0n });
  await noteLeft(dev, fe);
});

it('CUDA processes per VM are bounded: past it the first call fails with cudaErrorDevicesUnavailable; a closed one frees its place', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { contexts: 2 } });
  const b = await client();
  const d = await client();
  t.is((await c.malloc(16)).status, 0);
  t.is((await b.malloc(16)).status, 0);
  t.is((await count(d.malloc(16), true)).status, CudaErr.DevicesUnavailable);
  t.is((await d.call(Cmd.NOP, { rawArgs: new Uint8Array(8), outLen: 8 })).status, 0, 'a session without a context still answers');
  await c.close();
  t.is((await d.malloc(16)).status, 0, 'the freed place is taken');
  await b.close();
  await d.close();
  t.deepEqual(leftovers(dev), { sessions: 0, quota: 0n, staging: 0n, contexts: 0n });
  await noteLeft(dev, fe);
});

it('stack, heap and printf limits count against the VM quota, all sessions together', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { deviceMemory: 64n * MIB } });
  const b = await client();
  const heap = (x: QcudaClient, v: bigint) => count(x.call(Cmd.LIMIT_SET, { args: ['qcuda_args_limit', { limit: 2, value: v }] }));
  t.is((await heap(c, 44n * MIB)).status, 0);
  t.is((await heap(b, 44n * MIB)).status, CudaErr.MemoryAllocation, 'two 44 MiB heaps do not fit 64 MiB');
  t.is(dev.vm.quota.used, 36n * MIB, 'counted: what the heap reserves beyond the default 8 MiB');
  t.is((await heap(c, 8n * MIB)).status, 0, 'set back to the default');
  t.is((await heap(b, 44n * MIB)).status, 0);
  t.is((await count(c.malloc(40n * MIB), true)).status, CudaErr.MemoryAllocation, 'allocations and reservations share the quota');
  await c.close();
  await b.close();
  t.is(dev.vm.quota.used, 0n);
  await noteLeft(dev, fe);
});

/** A call that needs the session's context and allocates nothing. */
const deviceSync = (c: QcudaClient) => count(c.call(Cmd.DEVICE_SYNC));

it("each process's context counts --context-overhead against the quota: Q/O contexts open, the next fails, a closed or reset one gives it back (review 2, M3)", async (t) => {
  const O = 16n * MIB;
  const { dev, c, fe, client } = await setup(t, { limits: { deviceMemory: 64n * MIB + 4096n, contextOverhead: O } });
  const sessions = [c, await client(), await client(), await client(), await client()];
  const first = await Promise.all(sessions.slice(0, 4).map((x) => deviceSync(x)));
  t.deepEqual(
    first.map((r) => r.status),
    [0, 0, 0, 0],
    'floor(Q / O) = 4 contexts',
  );
  t.is(dev.vm.quota.used, 4n * O);
  t.is((await deviceSync(sessions[4])).status, CudaErr.MemoryAllocation, 'the fifth context would pass the quota');
  t.is(dev.vm.quota.used, 4n * O, 'the refused context holds nothing');
  t.is((await count(sessions[0].malloc(8192), true)).status, CudaErr.MemoryAllocation, 'allocations share the quota with contexts');
  t.is((await sessions[0].malloc(4096)).status, 0);
  await sessions[1].close();
  t.is(dev.vm.quota.used, 3n * O + 4096n, "a closed process's context is given back");
  t.is((await deviceSync(sessions[4])).status, 0, 'and another process opens one');
  t.is((await count(sessions[2].call(Cmd.DEVICE_RESET))).status, 0);
  t.is(dev.vm.quota.used, 3n * O + 4096n, 'cudaDeviceReset: the context is gone, and its overhead with it');
  t.is((await deviceSync(sessions[2])).status, 0, 'the next call opens a new one');
  t.is(dev.vm.quota.used, 4n * O + 4096n);
  for (const x of sessions) await x.close();
  t.deepEqual(leftovers(dev), { sessions: 0, quota: 0n, staging: 0n, contexts: 0n });
  t.log(`quota 64 MiB + 4 KiB, ${O >> 20n} MiB a context: 4 contexts, the fifth refused`);
  await noteLeft(dev, fe);
});

/** An emu provider whose device has a persisting L2 set-aside, as the H100's (attribute 108: 50 MiB there). */
class PersistingL2Provider extends EmuProvider {
  override deviceProps(device: number) {
    const p = super.deviceProps(device);
    const attrs = p.attrs.slice();
    attrs[108] = 50 << 20;
    return { ...p, attrs };
  }
}

it("device-wide L2 state is not the guest's: the persisting set-aside is a hint the guest reads back and no other session sees, persisting access windows become Normal (review 2, L7; issue 43)", async (t) => {
  const { dev, c, fe } = await setup(t, { provider: ON_GPU ? undefined : new PersistingL2Provider() });
  const props = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 0 }], out: 'qcuda_out_device_props' });
  const most = BigInt((props.out!.attrs as Uint32Array)[108]);
  if (!ON_GPU) t.is(most, 50n << 20n, "cudaDevAttrMaxPersistingL2CacheSize: the GPU's");
  const limit = (value: bigint) => count(c.call(Cmd.LIMIT_SET, { args: ['qcuda_args_limit', { limit: 6, value }] }), true);
  const read = async (x: QcudaClient) => (await x.call(Cmd.LIMIT_GET, { args: ['qcuda_args_limit', { limit: 6 }] })).value;
  const other = new QcudaClient(fe);
  await other.open();
  t.is((await limit(1n << 20n)).status, 0, 'cudaLimitPersistingL2CacheSize = 1 MiB is taken');
  t.is(await read(c), 1n << 20n, 'and read back');
  t.is(await read(other), 0n, "another session's set-aside is its own: the GPU's was not changed");
  t.is((await limit(1n << 40n)).status, 0, 'more than the device has');
  t.is(await read(c), most, "reads back as the device's maximum");
  t.is((await limit(0n)).status, 0);
  t.is(await read(c), 0n, 'unchanged');
  await other.close();
  const a = (await c.malloc(1 << 20)).value;
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const window = new Uint8Array(64);
  const w = new DataView(window.buffer);
  w.setBigUint64(0, a, true);
  w.setBigUint64(8, 1n << 20n, true);
  w.setFloat32(16, 0.5, true);
  w.setUint32(20, 2, true); // cudaAccessPropertyPersisting
  w.setUint32(24, 1, true); // cudaAccessPropertyStreaming
  t.is(
    (await count(c.call(Cmd.STREAM_SET_ATTR, { args: ['qcuda_args_stream_attr', { stream: s, attr: 1, value: window }] }))).status,
    0,
    'the window is taken',
  );
  const got = await c.call(Cmd.STREAM_GET_ATTR, {
    args: ['qcuda_args_stream_attr', { stream: s, attr: 1 }],
    out: 'qcuda_out_stream_attr_value',
  });
  const g = new DataView((got.out!.value as Uint8Array).buffer, (got.out!.value as Uint8Array).byteOffset, 64);
  t.deepEqual(
    [g.getBigUint64(0, true), g.getBigUint64(8, true), g.getFloat32(16, true)],
    [a, 1n << 20n, 0.5],
    'its range and hit ratio as set',
  );
  t.deepEqual([g.getUint32(20, true), g.getUint32(24, true)], [0, 1], 'hits Normal (not Persisting), misses Streaming');
  await c.close();
  await noteLeft(dev, fe);
});

it('log lines are rate-limited and the dropped ones counted', (t) => {
  const out: string[] = [];
  let now = 0;
  const l = new LogLimiter(
    5,
    (s) => out.push(s),
    () => now,
  );
  for (let i = 0; i < 1000; i++) l.log(`line ${i}`);
  t.is(out.length, 5);
  now = 1500;
  l.log('later');
  t.deepEqual(out.slice(5), ['(995 log lines dropped: more than 5 a second)', 'later']);
});

// ---- guest memory changing under a request

it('a request held behind a host function resolves its data after the wait: a region removed meanwhile fails it cleanly, and stays mapped until it completes', async (t) => {
  const provider = new EmuProvider({});
  const unregistered: number[] = [];
  provider.unregisterGuestMemory = () => void unregistered.push(Date.now());
  const { dev, c, fe } = await setup(t, { provider, addMemReg: true });
  const ptr = (await c.malloc(4096)).value;
  const s = await newStream(c);
  t.is((await hostFunc(c, s, 1n)).status, 0);
  t.is((await callbackWait(c)).out!.id, 1n);
  const high = fe.mem.alloc(4096, 16, 1); // region 1, at 4 GiB
  const copy = count(
    c.call(Cmd.MEMCPY_HTOD, {
      args: ['qcuda_args_memcpy', { dst: ptr, src: 0n, size: 4096n, stream: s, async: 0 }],
      to: [{ gpa: high, len: 4096 }],
    }),
    true,
  );
  await tick(30);
  // The frontend takes region 1 away while the copy waits for the host function.
  const r1 = fe.mem.regions[1];
  t.is(await fe.acked(Req.REM_MEM_REG, encodeSingleRegion(r1), [fe.mem.fd.value]), 0n, 'the frontend is answered at once');
  t.is(unregistered.length, 0, 'still mapped and registered: a request in flight holds it');
  const waiter = callbackWait(c, 1n); // the host function ran: the copy may go
  const r = await copy;
  t.is(r.status, Status.BAD_REQUEST, 'its data is no longer guest memory');
  t.true(await until(() => unregistered.length === 1), 'unmapped once the request completed');
  await c.close();
  await waiter;
  await noteLeft(dev, fe);
});

/** An emu provider whose copies to the device wait until the test lets them go (a GPU copy in flight), noting what happens meanwhile. */
class SlowCopyProvider extends EmuProvider {
  readonly events: string[] = [];
  #go: (() => void) | undefined;

  override async openContext(device: number): Promise<ProviderContext> {
    const x = await super.openContext(device);
    const copy = x.copyToDevice.bind(x);
    x.copyToDevice = async (dst, src, s) => {
      this.events.push('copy starts');
      await new Promise<void>((r) => (this.#go = r));
      this.events.push('copy ends');
      return copy(dst, src, s);
    };
    return x;
  }

  override unregisterGuestMemory(...a: unknown[]): void {
    this.events.push(`unregistered 0x${(a[0] as bigint).toString(16)}`);
  }

  letGo(): void {
    this.#go?.();
  }
}

it('a region the data was resolved in after a memory-table change stays mapped until the copy completes, when the table changes again', async (t) => {
  const provider = new SlowCopyProvider({});
  const { dev, c, fe } = await setup(t, { provider, addMemReg: true });
  const ptr = (await c.malloc(4096)).value;
  const s = await newStream(c);
  t.is((await hostFunc(c, s, 1n)).status, 0);
  t.is((await callbackWait(c)).out!.id, 1n);
  // A second function, reached at once: the wait that opens the gate is answered with it, not parked (a parked one would hold the new table).
  t.is((await hostFunc(c, await newStream(c), 2n)).status, 0);
  const high = fe.mem.alloc(4096, 16, 1); // region 1, at 4 GiB
  const pattern = randomBytes(prng(7), 4096);
  fe.mem.bytes(high, 4096).set(pattern);
  const copy = count(
    c.call(Cmd.MEMCPY_HTOD, {
      args: ['qcuda_args_memcpy', { dst: ptr, src: 0n, size: 4096n, stream: s, async: 0 }],
      to: [{ gpa: high, len: 4096 }],
    }),
    true,
  );
  await tick(30);
  // During the gate region 1 leaves the table and comes back (a new mapping): the copy's data is resolved in the new one.
  const r1 = fe.mem.regions[1];
  t.is(await fe.acked(Req.REM_MEM_REG, encodeSingleRegion(r1), [fe.mem.fd.value]), 0n);
  t.is(await fe.acked(Req.ADD_MEM_REG, encodeSingleRegion(r1), [fe.mem.fd.value]), 0n);
  t.is((await callbackWait(c, 1n)).out!.id, 2n, 'the gate opens');
  t.true(await until(() => provider.events.includes('copy starts')));
  // Region 1 leaves again while the copy runs.
  t.is(await fe.acked(Req.REM_MEM_REG, encodeSingleRegion(r1), [fe.mem.fd.value]), 0n, 'the frontend is answered at once');
  await tick(50);
  t.deepEqual(provider.events, ['copy starts'], 'neither mapping of region 1 is unregistered while the copy runs');
  provider.letGo();
  t.is((await copy).status, 0);
  t.true(await until(() => provider.events.length === 4), 'both mappings go once the copy completed');
  t.is(provider.events[1], 'copy ends');
  t.true(provider.events.slice(2).every((e) => e.startsWith('unregistered')));
  const back = fe.mem.alloc(4096);
  t.is(await c.dtoh(back, ptr, 4096, s), 0); // on s: the legacy stream would wait for function 2
  t.deepEqual(fe.mem.bytes(back, 4096), pattern, "the bytes copied are the guest's");
  await c.close();
  await noteLeft(dev, fe);
});

// ---- module images

it('module images: structure checked against the length, globals estimated from ELF, fat binaries and PTX', (t) => {
  t.is(checkImage(elf(4096n)).globalBytes, 4096n);
  // What a load puts in device memory besides globals, which no measurement after it may cancel (review 2, M3).
  const cubin = elf(4096n, [
    { name: '.nv.constant3', bytes: 1024 },
    { name: '.nv.constant0.k', bytes: 544 },
    { name: '.text.k', bytes: 2048 },
    { name: '.nv.info.k', bytes: 64 },
    { name: '.debug_frame', bytes: 96 },
  ]);
  t.is(
    checkImage(cubin).globalBytes,
    4096n + 1024n + 544n + 2048n,
    'globals, constant banks and code; not the tables the driver only reads',
  );
  t.is(
    checkImage(
      fatbin([
        { kind: 2, payload: elf(1n << 20n) },
        { kind: 1, payload: ptx('.global .align 4 .b32 x[16];') },
      ]),
    ).globalBytes,
    1n << 20n,
  );
  t.is(checkImage(ptx('.global .b8 big[8589934592];')).globalBytes, 8n << 30n);
  t.is(
    checkImage(ptx('.visible .global .align 16 .v4 .f32 a[2][3];\n.extern .global .b8 e[1000];')).globalBytes,
    16n * 6n + 15n,
    'and the padding its alignment may put before it',
  );
  const bad = (img: Uint8Array, what: string) => t.throws(() => checkImage(img), { message: /module image/ }, what);
  const e = elf(16n);
  const cut = e.slice(0, e.length - 1);
  bad(cut, 'section headers past the end');
  const f = fatbin([{ kind: 2, payload: elf(16n) }]);
  const lying = f.slice();
  new DataView(lying.buffer).setBigUint64(8, 1n << 40n, true);
  bad(lying, 'fat_size past the end');
  const entryLie = f.slice();
  new DataView(entryLie.buffer).setUint32(16 + 8, 1 << 30, true);
  bad(entryLie, 'an entry past the end');
  bad(new Uint8Array(4096).fill(0x5a), 'junk');
  bad(new Uint8Array(0), 'empty');
});

const KERNELS_CU = path.resolve(__dirname, '..', '..', '..', 'test', 'qcuda', 'fixtures', 'kernels.cu');
/** nvcc and the sources (a GPU machine's bundle has neither the sources nor, always, nvcc). */
const HAVE_NVCC = fs.existsSync(KERNELS_CU) && spawnSync('nvcc', ['--version']).status === 0;

// What nvcc 13 makes must pass the checks: fat binaries (their entries compressed or not), cubins, PTX.
(HAVE_NVCC ? it : test.skip)('module images as nvcc makes them pass the checks; truncated ones do not', (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-images-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const src = KERNELS_CU;
  const build = (name: string, ...args: string[]) => {
    execFileSync('nvcc', [...args, '-o', path.join(dir, name), src], { stdio: 'pipe' });
    return new Uint8Array(fs.readFileSync(path.join(dir, name)));
  };
  const images = {
    fatbin: build('k.fatbin', '-fatbin', '-gencode', 'arch=compute_80,code=[sm_80,compute_80]', '-gencode', 'arch=compute_90,code=sm_90'),
    compressed: build('kc.fatbin', '-fatbin', '-Xfatbin=-compress-all', '-gencode', 'arch=compute_80,code=[sm_80,compute_80]'),
    cubin: build('k.cubin', '-cubin', '-arch=sm_90'),
    ptx: build('k.ptx', '-ptx', '-arch=sm_90'),
  };
  for (const [name, img] of Object.entries(images)) {
    const info = checkImage(img);
    t.log(`${name}: ${img.length} bytes, ${info.kind}, globals estimated at ${info.globalBytes} bytes`);
    // kernels.cu has __device__ int counter[4]: 16 bytes, seen where the code is not compressed.
    if (name !== 'compressed') t.true(info.globalBytes >= 16n, name);
    if (name !== 'ptx') t.throws(() => checkImage(img.subarray(0, img.length - 64)), { message: /module image/ }, `${name} truncated`);
  }
});

it('fuzzed module images: only cudaErrorInvalidKernelImage or a load answer, never a crash, staging always freed', async (t) => {
  const { dev, c, fe } = await setup(t, { limits: { deviceMemory: 64n * MIB } });
  const rnd = prng(1234);
  const seeds = [
    elf(4096n),
    fatbin([
      { kind: 2, payload: elf(64n) },
      { kind: 1, payload: ptx('.global .b32 g[4];') },
    ]),
    ptx('.global .b8 x[100];'),
  ];
  const g = fe.mem.alloc(16384);
  const seen = new Map<number, number>();
  let direct = 0;
  for (let i = 0; i < 600; i++) {
    const img = seeds[i % seeds.length].slice();
    const flips = 1 + Math.floor(rnd() * 8);
    for (let k = 0; k < flips; k++) {
      const at = Math.floor(rnd() * img.length);
      img[at] = rnd() < 0.5 ? Math.floor(rnd() * 256) : img[at] ^ (1 << Math.floor(rnd() * 8));
    }
    // The checks alone: a CudaError (200) or an answer, nothing else.
    try {
      checkImage(img);
    } catch (e) {
      t.true(
        [CudaErr.InvalidKernelImage, CudaErr.InvalidPtx].includes((e as { code: number }).code),
        `image ${i}: ${(e as Error).message}`,
      );
      direct++;
    }
    if (i % 4 !== 0) continue;
    fe.mem.bytes(g, img.length).set(img);
    t.is((await upload(c, BigInt(i + 1), BigInt(img.length), g, img.length)).status, 0);
    const r = await count(c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: BigInt(i + 1) }] }), true);
    seen.set(r.status, (seen.get(r.status) ?? 0) + 1);
    // On the GPU the driver has the last word on what passed the checks (a load may succeed); the worker must live on.
    t.true(
      ON_GPU ||
        [CudaErr.InvalidKernelImage, CudaErr.InvalidPtx, CudaErr.NoKernelImageForDevice, CudaErr.MemoryAllocation].includes(r.status),
      `load ${i}: status ${r.status}`,
    );
  }
  t.log(`600 mutated images: ${direct} refused by the checks; 150 loads answered ${JSON.stringify(Object.fromEntries(seen))}`);
  t.is(dev.vm.staging.used, 0n, 'no staging left');
  // Emu provider: nothing loads, nothing is counted. GPU: what loaded is counted (and freed at close).
  const held = dev.vm.quota.used;
  if (!ON_GPU) t.is(held, 0n);
  // An 8 GiB .global is refused before any load: the quota is 64 MiB.
  const big = ptx('.global .b8 big[8589934592];');
  fe.mem.bytes(g, big.length).set(big);
  t.is((await upload(c, 9999n, BigInt(big.length), g, big.length)).status, 0);
  t.is(
    (await count(c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: 9999n }] }), true)).status,
    CudaErr.MemoryAllocation,
  );
  t.is(dev.vm.quota.used, held, 'the refused load counted nothing');
  t.is((await c.malloc(16)).status, 0, 'the session (its worker, on the GPU) still works');
  await c.close();
  await noteLeft(dev, fe);
});

// ---- everything at once

it('random requests from 8 sessions at once, with sessions closing mid-flight: nothing left behind', async (t) => {
  const { dev, c, fe, client } = await setup(t, { limits: { deviceMemory: 32n * MIB, contexts: 6 } });
  const rnd = prng(99);
  const buf = fe.mem.alloc(2 * Number(MIB));
  const one = async (x: QcudaClient) => {
    const ptrs: bigint[] = [];
    const streams: bigint[] = [QCUDA_STREAM_LEGACY];
    for (let i = 0; i < 60; i++) {
      const k = Math.floor(rnd() * 8);
      const st = streams[Math.floor(rnd() * streams.length)];
      let r;
      if (k === 0) r = await count(x.malloc(BigInt(1 + Math.floor(rnd() * 3 * Number(MIB)))), true);
      else if (k === 1 && ptrs.length) r = await count(x.free(ptrs.splice(Math.floor(rnd() * ptrs.length), 1)[0]));
      else if (k === 2) r = await count(x.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] }));
      else if (k === 3 && ptrs.length) r = { status: await count(x.htod(ptrs[0], buf, 4096)), value: 0n };
      else if (k === 4) r = await count(x.call(Cmd.DEVICE_RESET), true);
      else if (k === 5) r = await count(x.call(Cmd.HOST_FUNC, { args: ['qcuda_args_host_func', { stream: st, id: BigInt(i + 1) }] }), true);
      else if (k === 6)
        r = await count(
          x.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle: st }] }).then((v) => v),
          true,
        );
      else r = await count(x.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' }));
      if (k === 0 && r.status === 0) ptrs.push(r.value);
      if (k === 2 && r.status === 0) streams.push(r.value);
      if (k === 4) ptrs.length = streams.length = 1;
      if (k === 6 && rnd() < 0.3) break; // the "process" exits with this sync possibly held
    }
  };
  const sessions = [c, ...(await Promise.all(Array.from({ length: 7 }, () => client())))];
  // Each session's stream syncs may be held by host functions that never run: closing ends them.
  const runs = sessions.map((x) => Promise.race([one(x), tick(3000)]));
  await Promise.all(runs);
  await Promise.all(sessions.map((x) => count(x.close())));
  t.true(await until(() => dev.sessions.size === 0));
  t.deepEqual(leftovers(dev), { sessions: 0, quota: 0n, staging: 0n, contexts: 0n });
  const fresh = await client();
  t.is((await fresh.malloc(32n * MIB)).status, 0, 'the whole quota is free again');
  await fresh.close();
  await noteLeft(dev, fe);
});
