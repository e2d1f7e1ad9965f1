// BATCH (posted work) through the frontend harness, on the emu provider:
// entries run in order, a failing entry is reported by index and does not
// stop the rest, a malformed batch runs nothing, a batch may end with the
// synchronizing call that waits for it (QCUDA_BATCH_ENDS_SYNC) or with a
// query that does not wait (QCUDA_BATCH_ENDS_QUERY), and mutated
// batches never crash the backend or touch another session.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import {
  Cmd,
  encode,
  QCUDA_BATCH_ENDS_QUERY,
  QCUDA_BATCH_ENDS_SYNC,
  QCUDA_MAX_BATCH,
  Status,
  type StructName,
} from '../../backend/src/qcuda/proto';
import { prng, randomBytes, started } from '../helpers';
import { frameBatch as frame, QcudaClient } from './client';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';

type Entry = [cmd: number, args: Uint8Array];

const entry = (cmd: number, struct: StructName, f: Record<string, number | bigint>): Entry => [cmd, encode(struct, f)];
const memset = (dst: bigint, size: bigint, value: number, async = 1) =>
  entry(Cmd.MEMSET, 'qcuda_args_memset', { dst, size, stream: 0n, value, async });
const d2d = (dst: bigint, src: bigint, size: bigint) =>
  entry(Cmd.MEMCPY_DTOD, 'qcuda_args_memcpy', { dst, src, size, stream: 0n, async: 1 });

async function setup(t: ExecutionContext) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 2 });
  const pair = await started(t, dev, { size: 64 });
  const c = new QcudaClient(pair.fe);
  await c.open();
  const scratch = pair.fe.mem.alloc(QCUDA_MAX_BATCH + 4096);
  /** Sends a batch: `count` and `bytes` may lie (hostile tests). */
  const send = (bytes: Uint8Array, count: number, o: { argBytes?: number; session?: QcudaClient; flags?: number } = {}) => {
    pair.fe.mem.bytes(scratch, bytes.length).set(bytes);
    return (o.session ?? c).call(Cmd.BATCH, {
      args: ['qcuda_args_batch', { count, flags: o.flags ?? 0, bytes: BigInt(o.argBytes ?? bytes.length) }],
      to: bytes.length ? [{ gpa: scratch, len: bytes.length }] : [],
    });
  };
  const read = async (ptr: bigint, n: number) => {
    const g = pair.fe.mem.alloc(n);
    t.is(await c.dtoh(g, ptr, n), 0);
    return Array.from(pair.fe.mem.bytes(g, n));
  };
  return { c, fe: pair.fe, send, read };
}

test('posted entries run in order; the reply counts them', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(64)).value;
  const b = (await c.malloc(64)).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const list = [
    memset(a, 64n, 1),
    d2d(b, a, 32n),
    memset(a, 16n, 2),
    entry(Cmd.EVENT_RECORD, 'qcuda_args_event_record', { event: ev, stream: 0n }),
    entry(Cmd.STREAM_WAIT_EVENT, 'qcuda_args_stream_wait_event', { stream: 0n, event: ev, flags: 0 }),
  ];
  const r = await send(frame(list), list.length);
  t.is(r.status, 0);
  t.is(r.value, 5n);
  t.deepEqual(await read(a, 20), [...Array(16).fill(2), 1, 1, 1, 1]);
  t.deepEqual(await read(b, 34), [...Array(32).fill(1), 0, 0], 'the copy ran between the two memsets');
  t.is((await c.call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: ev }] })).status, 0, 'the event was recorded');
});

test('a failing entry is reported by its index and the others still run', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(16)).value;
  const list = [
    memset(a, 4n, 7),
    memset(a, 17n, 9), // past the allocation
    entry(Cmd.LAUNCH, 'qcuda_args_launch', { func: 0x4242n, stream: 0n, param_bytes: 0 }), // unknown function
    memset(a, 8n, 3, 0), // synchronous: cannot be posted
    memset(a + 8n, 8n, 5),
  ];
  const r = await send(frame(list), list.length);
  t.is(r.status, CudaErr.InvalidValue);
  t.is(r.value, 1n, 'the first failure');
  t.deepEqual(await read(a, 16), [7, 7, 7, 7, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5]);
  const launch = await send(frame([list[2], list[4]]), 2);
  t.is(launch.status, CudaErr.InvalidResourceHandle);
  t.is(launch.value, 0n);
});

test('a malformed batch runs nothing', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(8)).value;
  const good = frame([memset(a, 8n, 1)]);
  const malloc: Entry = [Cmd.MALLOC, encode('qcuda_args_malloc', { size: 8n })];
  const cases: [string, () => ReturnType<typeof send>, number][] = [
    ['more entries than announced', () => send(frame([memset(a, 8n, 1), memset(a, 8n, 1)]), 1), Status.BAD_REQUEST],
    ['fewer entries than announced', () => send(good, 2), Status.BAD_REQUEST],
    ['a command that cannot be posted', () => send(frame([memset(a, 8n, 1), malloc]), 2), Status.BAD_REQUEST],
    [
      "an argument length that is not the struct's",
      () =>
        send(frame([[Cmd.MEMSET, encode('qcuda_args_memset', { dst: a, size: 8n, stream: 0n, value: 1, async: 1 }).subarray(0, 24)]]), 1),
      Status.BAD_REQUEST,
    ],
    ['an entry running past the end', () => send(good.subarray(0, good.length - 8), 1), Status.BAD_REQUEST],
    ['a truncated entry header', () => send(new Uint8Array([...good, 1, 0, 0, 0]), 2), Status.BAD_REQUEST],
    ['bytes that are not the data length', () => send(good, 1, { argBytes: good.length + 8 }), Status.BAD_REQUEST],
    ['more than QCUDA_MAX_BATCH bytes', () => send(new Uint8Array(QCUDA_MAX_BATCH + 8), 1), Status.TOO_LARGE],
  ];
  for (const [what, run, status] of cases) t.is((await run()).status, status, what);
  t.deepEqual(await read(a, 8), Array(8).fill(0), 'no entry of a malformed batch ran');
  t.is((await send(new Uint8Array(0), 0)).status, 0, 'an empty batch is fine');
});

const ENDS = { flags: QCUDA_BATCH_ENDS_SYNC };
const deviceSync: Entry = [Cmd.DEVICE_SYNC, new Uint8Array(0)];
const handle = (cmd: number, h: bigint): Entry => [cmd, encode('qcuda_args_handle', { handle: h })];

test('a batch that ends with a synchronizing call runs it after the others, in one round trip, and answers as that call', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(32)).value;
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  for (const end of [deviceSync, handle(Cmd.STREAM_SYNC, s), handle(Cmd.EVENT_SYNC, ev)]) {
    const list = [
      memset(a, 32n, end[0] & 0xff),
      d2d(a + 16n, a, 8n),
      entry(Cmd.EVENT_RECORD, 'qcuda_args_event_record', { event: ev, stream: 0n }),
      end,
    ];
    const r = await send(frame(list), list.length, ENDS);
    t.is(r.status, 0);
    t.is(r.value, 3n, 'the posted entries are counted, not the call');
    t.deepEqual(await read(a, 32), Array(32).fill(end[0] & 0xff), `the work before ${end[0]} ran`);
  }
  const none = await send(frame([deviceSync]), 1, ENDS);
  t.deepEqual([none.status, none.value], [0, 0n], 'a batch of the call alone');
});

test("a batch that ends with a synchronizing call: the call reports the others' first failure, once, and its own", async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(16)).value;
  const list = [memset(a, 4n, 7), memset(a, 17n, 9) /* past the allocation */, memset(a + 8n, 8n, 5), deviceSync];
  const r = await send(frame(list), list.length, ENDS);
  t.is(r.status, CudaErr.InvalidValue, "the synchronize reports the posted memset's failure");
  t.is(r.value, 1n, 'the failed entry');
  t.deepEqual(await read(a, 16), [7, 7, 7, 7, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5], 'the entries after it ran');
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0, 'and only once: the next synchronize succeeds');
  const bad = await send(frame([memset(a, 4n, 1), handle(Cmd.STREAM_SYNC, 0x777n)]), 2, ENDS);
  t.is(bad.status, CudaErr.InvalidResourceHandle, "the call's own failure (no such stream)");
  t.deepEqual(await read(a, 4), [1, 1, 1, 1], 'the posted work before it ran');
});

test('only a synchronizing call may end a batch, only last, only with the flag', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(8)).value;
  const query: Entry = handle(Cmd.STREAM_QUERY, 0n);
  const malloc: Entry = [Cmd.MALLOC, encode('qcuda_args_malloc', { size: 8n })];
  const cases: [string, () => ReturnType<typeof send>][] = [
    ['a synchronizing call without the flag', () => send(frame([memset(a, 8n, 1), deviceSync]), 2)],
    ['a synchronizing call not last', () => send(frame([deviceSync, memset(a, 8n, 1)]), 2, ENDS)],
    ['a call that does not synchronize', () => send(frame([memset(a, 8n, 1), query]), 2, ENDS)],
    ['a call that is not postable either', () => send(frame([memset(a, 8n, 1), malloc]), 2, ENDS)],
    ['the flag and a postable last entry', () => send(frame([memset(a, 8n, 1), memset(a, 8n, 1)]), 2, ENDS)],
    ['arguments of the wrong size', () => send(frame([memset(a, 8n, 1), [Cmd.STREAM_SYNC, new Uint8Array(16)]]), 2, ENDS)],
    ['an unknown flag', () => send(frame([memset(a, 8n, 1)]), 1, { flags: 4 })],
    ['both ending flags', () => send(frame([memset(a, 8n, 1), deviceSync]), 2, { flags: QCUDA_BATCH_ENDS_SYNC | QCUDA_BATCH_ENDS_QUERY })],
    ['a query with the synchronize flag', () => send(frame([memset(a, 8n, 1), handle(Cmd.EVENT_QUERY, 1n)]), 2, ENDS)],
    ['a synchronize with the query flag', () => send(frame([memset(a, 8n, 1), deviceSync]), 2, QUERY)],
    ['the query flag and a postable last entry', () => send(frame([memset(a, 8n, 1), memset(a, 8n, 1)]), 2, QUERY)],
    ['the query flag on an empty batch', () => send(new Uint8Array(0), 0, QUERY)],
    ['the flag on an empty batch', () => send(new Uint8Array(0), 0, ENDS)],
  ];
  for (const [what, run] of cases) t.is((await run()).status, Status.BAD_REQUEST, what);
  t.deepEqual(await read(a, 8), Array(8).fill(0), 'none of them ran anything');
});

const QUERY = { flags: QCUDA_BATCH_ENDS_QUERY };

test('a batch that ends with a query runs it after the others, in one round trip, and answers as the query', async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(32)).value;
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  for (const end of [handle(Cmd.EVENT_QUERY, ev), handle(Cmd.STREAM_QUERY, s), handle(Cmd.STREAM_QUERY, 0n)]) {
    const list = [memset(a, 32n, end[0] & 0xff), entry(Cmd.EVENT_RECORD, 'qcuda_args_event_record', { event: ev, stream: 0n }), end];
    const r = await send(frame(list), list.length, QUERY);
    t.deepEqual([r.status, r.value], [0, 0n], 'ready, and no posted failure (the value)');
    t.deepEqual(await read(a, 32), Array(32).fill(end[0] & 0xff), `the work before ${end[0]} ran`);
  }
  // Not ready: the record waits behind a host function the guest has not run.
  const held = (id: bigint) => [
    entry(Cmd.HOST_FUNC, 'qcuda_args_host_func', { stream: s, id }),
    entry(Cmd.EVENT_RECORD, 'qcuda_args_event_record', { event: ev, stream: s }),
  ];
  const ev2 = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  for (const [id, end] of [handle(Cmd.EVENT_QUERY, ev), handle(Cmd.STREAM_QUERY, s)].entries()) {
    const r = await send(frame([...held(BigInt(id + 1)), end]), 3, QUERY);
    t.deepEqual([r.status, r.value], [CudaErr.NotReady, 0n], `${end[0]}: not ready, as it would answer on its own`);
  }
  const other = await send(frame([handle(Cmd.EVENT_QUERY, ev2)]), 1, QUERY);
  t.deepEqual([other.status, other.value], [0, 0n], 'a batch of the query alone');
});

test("a batch that ends with a query: the others' first failure is the reply's value, the query's status its own", async (t) => {
  const { c, send, read } = await setup(t);
  const a = (await c.malloc(16)).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const list = [memset(a, 4n, 7), memset(a, 17n, 9) /* past the allocation */, memset(a + 8n, 8n, 5), handle(Cmd.EVENT_QUERY, ev)];
  const r = await send(frame(list), list.length, QUERY);
  t.is(r.status, 0, 'the query answers for itself: ready');
  t.is(r.value, BigInt(CudaErr.InvalidValue), "the posted memset's failure, for the guest to keep");
  t.deepEqual(await read(a, 16), [7, 7, 7, 7, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5, 5, 5], 'the entries after it ran');
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0, 'the backend keeps no copy of it: the guest reports it, once');
  const bad = await send(frame([memset(a, 4n, 1), handle(Cmd.EVENT_QUERY, 0x777n)]), 2, QUERY);
  t.deepEqual([bad.status, bad.value], [CudaErr.InvalidResourceHandle, 0n], "the query's own failure (no such event)");
  t.deepEqual(await read(a, 4), [1, 1, 1, 1], 'the posted work before it ran');
  const both = await send(frame([memset(a, 17n, 9), handle(Cmd.STREAM_QUERY, 0x777n)]), 2, QUERY);
  t.deepEqual([both.status, both.value], [CudaErr.InvalidResourceHandle, BigInt(CudaErr.InvalidValue)], 'both, each in its place');
});

test('mutated batches never crash the backend or touch another session', async (t) => {
  const { c, fe, send, read } = await setup(t);
  const victim = new QcudaClient(fe);
  await victim.open();
  const secret = (await victim.malloc(64)).value;
  const g = fe.mem.alloc(64);
  fe.mem.bytes(g, 64).fill(0x5a);
  t.is(await victim.htod(secret, g, 64), 0);
  const mine = (await c.malloc(64)).value;
  const rnd = prng(54);
  const base = frame([
    memset(mine, 64n, 1),
    d2d(mine, mine + 32n, 16n),
    memset(secret, 8n, 0),
    entry(Cmd.LAUNCH, 'qcuda_args_launch', { func: 0x101n, stream: 0n, param_bytes: 0 }),
    handle(Cmd.STREAM_SYNC, 0n),
  ]);
  const seen = new Set<number>();
  for (let i = 0; i < 600; i++) {
    const b = base.slice();
    for (let k = 1 + ((rnd() * 4) | 0); k > 0; k--) {
      const at = (rnd() * b.length) | 0;
      if (rnd() < 0.5) b[at] = (rnd() * 256) | 0;
      else b.set(randomBytes(rnd, 8).subarray(0, Math.min(8, b.length - at)), at);
    }
    if (rnd() < 0.3) new DataView(b.buffer).setBigUint64(8 + ((rnd() * 3) | 0) * 8, secret + BigInt((rnd() * 64) | 0), true);
    // A third of them claim to end with a synchronizing call (QCUDA_BATCH_ENDS_SYNC), a sixth with a query, whatever their last entry is.
    const pick = rnd();
    const r = await send(b, rnd() < 0.9 ? 5 : (rnd() * 8) | 0, pick < 0.33 ? ENDS : pick < 0.5 ? QUERY : {});
    t.not(r.status, CudaErr.Unknown, `mutation ${i} hit an internal error`);
    seen.add(r.status);
  }
  t.true(seen.has(Status.BAD_REQUEST) && seen.size > 2, `statuses seen: ${[...seen].join(', ')}`);
  const out = fe.mem.alloc(64);
  t.is(await victim.dtoh(out, secret, 64), 0);
  t.deepEqual(Array.from(fe.mem.bytes(out, 64)), Array(64).fill(0x5a), "the other session's memory is intact");
  t.is((await read(mine, 1)).length, 1, 'the session still works');
});
