// A session's calls over its own queue on real cuda workers and the fake
// driver (fixtures/fakecuda.c), as ring-server.test.ts and
// ring-server-share.test.ts tell them: a device set up with the ring
// server on or off, and the stories whose answers must not depend on it.
import type { ExecutionContext } from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, QCUDA_BATCH_ENDS_QUERY, QCUDA_BATCH_ENDS_SYNC, QCUDA_ST_OUTPUT } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { frameBatch, QcudaClient } from './client';

// Workers inherit the environment: they load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

export async function setup(t: ExecutionContext, ringServer: boolean) {
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0, inlineWaitUs: 50, pollUs: 50, ringServer } });
  const lines: string[] = [];
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues: true, log: (l) => lines.push(l) });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  const c = new QcudaClient(fe, 1, 16);
  await c.openOwn(1);
  const inC = (): number => dev.status().sessions.find((s) => s.id === c.session.toString(16))?.callsInC ?? -1;
  const owner = (): number | undefined => {
    const m = lines
      .map((l) => /queue 1 served by its worker, pid (\d+)/.exec(l))
      .filter(Boolean)
      .pop();
    return m ? Number(m[1]) : undefined;
  };
  return { dev, c, inC, owner, fe };
}

/** Loads a module (any image loads on the fake driver) and returns the handles of the kernels named. */
export async function kernels(c: QcudaClient, names: string[]): Promise<bigint[]> {
  const image = new Uint8Array(Buffer.from('// a PTX comment\0'));
  const gpa = c.fe.mem.alloc(image.length, 64);
  c.fe.mem.bytes(gpa, image.length).set(image);
  const up = await c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: 1n, size: BigInt(image.length) }],
    to: [{ gpa, len: image.length }],
  });
  if (up.status !== 0) throw new Error(`upload: ${up.status}`);
  const m = await c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: 1n }] });
  if (m.status !== 0) throw new Error(`module load: ${m.status}`);
  const out: bigint[] = [];
  for (const name of names) {
    const bytes = new Uint8Array(256);
    bytes.set(Buffer.from(name));
    const f = await c.call(Cmd.FUNC_GET, { args: ['qcuda_args_symbol', { module: m.value, name: bytes }], out: 'qcuda_out_func_info' });
    if (f.status !== 0) throw new Error(`${name}: ${f.status}`);
    out.push(f.value);
  }
  return out;
}

export const one = Uint32Array.from([1, 1, 1]);
export function launchArgs(
  func: bigint,
  params: Uint8Array,
  o: { grid?: Uint32Array; block?: Uint32Array; stream?: bigint; paramBytes?: number } = {},
): Uint8Array {
  const a = encode('qcuda_args_launch', {
    func,
    stream: o.stream ?? 0n,
    grid: o.grid ?? one,
    block: o.block ?? one,
    shared_mem: 0,
    param_bytes: o.paramBytes ?? params.length,
  });
  const out = new Uint8Array(a.length + params.length);
  out.set(a);
  out.set(params, a.length);
  return out;
}
/** LAUNCH_EX's bytes: a launch's, then its cluster and flags, then the parameters. */
export function launchExArgs(
  func: bigint,
  params: Uint8Array,
  cluster: number[],
  o: { grid?: Uint32Array; flags?: number } = {},
): Uint8Array {
  const a = encode('qcuda_args_launch_ex', {
    func,
    stream: 0n,
    grid: o.grid ?? one,
    block: one,
    shared_mem: 0,
    param_bytes: params.length,
    cluster: Uint32Array.from(cluster),
    flags: o.flags ?? 0,
  });
  const out = new Uint8Array(a.length + params.length);
  out.set(a);
  out.set(params, a.length);
  return out;
}
export const launchEx = (func: bigint, params: Uint8Array, cluster: number[], o?: Parameters<typeof launchExArgs>[3]): Entry => [
  Cmd.LAUNCH_EX,
  launchExArgs(func, params, cluster, o),
];
export const i32 = (x: number): Uint8Array => new Uint8Array(Int32Array.from([x]).buffer);

export type Entry = readonly [cmd: number, args: Uint8Array];
export const launch = (func: bigint, params: Uint8Array, o?: Parameters<typeof launchArgs>[2]): Entry => [
  Cmd.LAUNCH,
  launchArgs(func, params, o),
];
export const DEVICE_SYNC: Entry = [Cmd.DEVICE_SYNC, new Uint8Array(0)];
export const handle = (h: bigint): Uint8Array => encode('qcuda_args_handle', { handle: h });

/** Sends entries as one BATCH (ending with a synchronizing call if endsSync, a query if endsQuery); count may lie. */
export async function batch(
  c: QcudaClient,
  entries: readonly Entry[],
  o: { endsSync?: boolean; endsQuery?: boolean; count?: number } = {},
): Promise<{ status: number; value: bigint }> {
  const flags = (o.endsSync ? QCUDA_BATCH_ENDS_SYNC : 0) | (o.endsQuery ? QCUDA_BATCH_ENDS_QUERY : 0);
  const bytes = frameBatch(entries);
  const at = c.fe.mem.mark();
  const gpa = c.fe.mem.alloc(Math.max(bytes.length, 8), 64);
  c.fe.mem.bytes(gpa, bytes.length).set(bytes);
  const r = await c.call(Cmd.BATCH, {
    args: ['qcuda_args_batch', { count: o.count ?? entries.length, flags, bytes: BigInt(bytes.length) }],
    to: bytes.length ? [{ gpa, len: bytes.length }] : [],
  });
  c.fe.mem.rewind(at);
  return { status: r.status, value: r.value };
}

/** Reads what the session's kernels printed, if the reply said any waits. */
export async function output(c: QcudaClient, status: number): Promise<string> {
  if ((status & QCUDA_ST_OUTPUT) === 0) return '';
  const out = c.fe.mem.alloc(256, 64);
  const r = await c.call(Cmd.OUTPUT_READ, { out: 'qcuda_out_output_read', from: [{ gpa: out, len: 256 }], dataLen: 256n });
  return Buffer.from(c.fe.mem.bytes(out, Number(r.value))).toString('latin1');
}

/**
 * One session's batches, good and bad, as the guest sees them: each reply's
 * status and value, what the kernels printed, and how long a synchronize
 * behind a kernel took.
 */
export async function batchStory(c: QcudaClient): Promise<unknown[]> {
  const seen: unknown[] = [];
  const [nop, say, hold, boom] = await kernels(c, ['nop', 'say', 'hold', 'boom']);
  const wide = Uint32Array.from([2048, 1, 1]);
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const sync = async (): Promise<number> => (await c.call(Cmd.DEVICE_SYNC)).status;
  // Launches alone; then ending with a synchronize, printf output with it; on a stream of the session.
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), launch(nop, new Uint8Array(0)), launch(nop, new Uint8Array(0))]));
  let r = await batch(c, [launch(say, i32(5)), launch(nop, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true });
  seen.push(r, await output(c, r.status));
  seen.push(await batch(c, [launch(nop, new Uint8Array(0), { stream: s }), [Cmd.STREAM_SYNC, handle(s)]], { endsSync: true }));
  // Behind a kernel of 200 ms: the synchronize waits for it, and the launches ran once (one line of output).
  const t0 = Date.now();
  r = await batch(c, [launch(hold, i32(200)), launch(say, i32(9)), DEVICE_SYNC], { endsSync: true });
  seen.push(r, Date.now() - t0 >= 150, await output(c, r.status));
  // A launch that fails (a block of 2048 threads): the others run; posted work's error comes at the synchronize.
  seen.push(await batch(c, [launch(nop, new Uint8Array(0), { block: wide }), launch(nop, new Uint8Array(0))]), await sync(), await sync());
  seen.push(await batch(c, [launch(nop, new Uint8Array(0), { block: wide }), DEVICE_SYNC], { endsSync: true }), await sync());
  // Left to the device whole: an unknown function, an entry other than a launch, an ending other than these two, bad framing.
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), launch(0x777n, i32(1)), DEVICE_SYNC], { endsSync: true }));
  seen.push(
    await batch(c, [launch(nop, new Uint8Array(0)), [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: ev, stream: 0n })]]),
  );
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), [Cmd.EVENT_SYNC, handle(ev)]], { endsSync: true }));
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), [Cmd.STREAM_SYNC, handle(0x4242n)]], { endsSync: true }));
  seen.push(await batch(c, [launch(nop, new Uint8Array(0))], { count: 2 }), await batch(c, [], { endsSync: true }), await batch(c, []));
  // Events: recorded in a batch, queried, waited for, alone and ending a batch; streams waited for alone.
  const record: Entry = [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: ev, stream: 0n })];
  const query = async (h = ev): Promise<number> => (await c.call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: h }] })).status;
  const waitFor = async (cmd: number, h: bigint): Promise<number> =>
    (await c.call(cmd, { args: ['qcuda_args_handle', { handle: h }] })).status;
  seen.push(await batch(c, [record]), await query());
  seen.push(await batch(c, [launch(hold, i32(200)), record]), await query(), await waitFor(Cmd.EVENT_SYNC, ev), await query());
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), record, [Cmd.EVENT_SYNC, handle(ev)]], { endsSync: true }));
  seen.push(
    await waitFor(Cmd.STREAM_SYNC, s),
    await waitFor(Cmd.STREAM_SYNC, 0x4242n),
    await query(0x4343n),
    await waitFor(Cmd.EVENT_SYNC, 0x4343n),
  );
  // A failed assert: sticky, so later launches and event records fail too (once its output is read, the session is quiet again).
  r = await batch(c, [launch(boom, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true });
  seen.push(r, (await output(c, r.status)).length > 0);
  seen.push(await batch(c, [record, launch(nop, new Uint8Array(0))]), await sync());
  seen.push(await batch(c, [launch(nop, new Uint8Array(0)), record, DEVICE_SYNC], { endsSync: true }), await sync(), await query());
  return seen;
}

/**
 * Batches of cluster launches (LAUNCH_EX, posted: every cuBLASLt kernel on
 * Hopper is one), good and bad, as the guest sees them: each reply's status
 * and value, and what the kernels printed.
 */
export async function clusterStory(c: QcudaClient): Promise<unknown[]> {
  const seen: unknown[] = [];
  const [nop, say] = await kernels(c, ['nop', 'say']);
  const none = new Uint8Array(0);
  const grid = Uint32Array.from([4, 2, 1]);
  const sync = async (): Promise<number> => (await c.call(Cmd.DEVICE_SYNC)).status;
  seen.push(await batch(c, [launchEx(nop, none, [2, 2, 1], { grid }), launchEx(nop, none, [1, 1, 1]), launch(nop, none)]));
  const r = await batch(c, [launchEx(say, i32(11), [4, 1, 1], { grid }), DEVICE_SYNC], { endsSync: true });
  seen.push(r, await output(c, r.status));
  seen.push(await batch(c, [launchEx(nop, none, [2, 1, 1], { grid, flags: 1 }), DEVICE_SYNC], { endsSync: true }));
  // The driver's refusal: a cluster that does not divide the grid (at the synchronize, as posted work's).
  seen.push(await batch(c, [launchEx(nop, none, [3, 1, 1], { grid })]), await sync(), await sync());
  // Refused by the checks: a 0 dimension, 17 blocks, an unknown flag, parameters the kernel does not take.
  for (const bad of [
    launchEx(nop, none, [0, 1, 1]),
    launchEx(nop, none, [17, 1, 1], { grid: Uint32Array.from([17, 1, 1]) }),
    launchEx(nop, none, [1, 1, 1], { flags: 2 }),
    launchEx(say, none, [1, 1, 1]),
  ])
    seen.push(await batch(c, [launch(nop, none), bad, DEVICE_SYNC], { endsSync: true }), await sync());
  return seen;
}

/**
 * One session's story, good calls and bad, as the guest sees it: each
 * reply's status, the bytes that came back and the output read.
 */
export async function story(c: QcudaClient): Promise<(string | number)[]> {
  const mem = c.fe.mem;
  const seen: (string | number)[] = [];
  const m = await c.malloc(4096);
  const ptr = m.value;
  const [nop, say, boom] = await kernels(c, ['nop', 'say', 'boom']);
  const src = mem.alloc(64, 64);
  const dst = mem.alloc(64, 64);
  mem.bytes(src, 64).set(Uint8Array.from({ length: 64 }, (_, i) => (i * 7 + 3) & 0xff));
  // Round trips.
  seen.push(await c.htod(ptr + 8n, src, 4), await c.dtoh(dst, ptr + 8n, 4), Buffer.from(mem.bytes(dst, 4)).toString('hex'));
  seen.push((await c.call(Cmd.DEVICE_SYNC)).status);
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(nop, new Uint8Array(0)) })).status, (await c.call(Cmd.DEVICE_SYNC)).status);
  // A stream of the session, then gone.
  const s = await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] });
  seen.push(
    s.status,
    await c.htod(ptr, src, 64, s.value),
    await c.dtoh(dst, ptr, 64, s.value),
    Buffer.compare(mem.bytes(src, 64), mem.bytes(dst, 64)),
  );
  seen.push((await c.call(Cmd.STREAM_DESTROY, { args: ['qcuda_args_handle', { handle: s.value }] })).status);
  seen.push(await c.htod(ptr, src, 4, s.value));
  // Bad calls: outside the allocation, an unknown stream, a chunk outside its transfer, a freed allocation.
  seen.push(await c.htod(ptr + 4093n, src, 4), await c.dtoh(dst, ptr - 1n, 4), await c.htod(ptr, src, 4, 0x1234n));
  seen.push(
    (
      await c.call(Cmd.MEMCPY_HTOD, {
        args: ['qcuda_args_memcpy', { dst: ptr, src: 0n, size: 4n, stream: 0n, async: 0 }],
        to: [{ gpa: src, len: 4 }],
        dataOffset: 2n,
        dataLen: 4n,
      })
    ).status,
  );
  seen.push((await c.call(Cmd.DEVICE_SYNC, { rawArgs: new Uint8Array(8) })).status);
  // Bad launches: parameters the kernel does not take, a 0 dimension, an unknown function, param_bytes that lie.
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(say, new Uint8Array(0)) })).status);
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(say, i32(1), { grid: Uint32Array.from([1, 0, 1]) }) })).status);
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(0x777n, i32(1)) })).status);
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(say, i32(1), { paramBytes: 8 }) })).status);
  // printf: the reply that flushed it says output waits, and the guest reads it.
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(say, i32(7)) })).status);
  const sync = await c.call(Cmd.DEVICE_SYNC);
  seen.push(sync.status);
  if ((sync.status & QCUDA_ST_OUTPUT) !== 0) {
    const out = mem.alloc(256, 64);
    const r = await c.call(Cmd.OUTPUT_READ, { out: 'qcuda_out_output_read', from: [{ gpa: out, len: 256 }], dataLen: 256n });
    seen.push(r.status, Buffer.from(mem.bytes(out, Number(r.value))).toString('latin1'));
  }
  seen.push((await c.free(ptr)).status, await c.htod(ptr, src, 4));
  // A failed assert: the synchronize after it reports it (sticky, as CUDA's).
  seen.push((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(boom, new Uint8Array(0)) })).status);
  seen.push((await c.call(Cmd.DEVICE_SYNC)).status & ~QCUDA_ST_OUTPUT);
  return seen;
}
