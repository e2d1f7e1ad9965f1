// The ring server (workers/ring-server.ts, addon/src/cuda_ring_server.cc):
// a session's worker, on the cuda provider, answers the short calls of a
// round trip in C before its device sees them. Here with real cuda workers
// on the fake driver (fixtures/fakecuda.c): the answers it gives are the
// ones the device gives with it off, bad requests included (it leaves those
// to the device), printf output still reaches the guest with the reply that
// flushed it, a synchronize behind a running kernel is left to the device's
// wait, the backend's status counts the calls answered in C, and a worker
// killed after such calls leaves a ring the backend serves on. Batches of
// launches and event records are answered in C too, or, where their ending
// synchronize would wait or an entry failed, finished by the device, their
// entries run once; event queries and stream and event synchronizes too,
// and batches that end with an event query (QCUDA_BATCH_ENDS_QUERY).
import test from 'ava';
import { Cmd, encode, LAYOUT, QCUDA_BATCH_ENDS_QUERY, QCUDA_BATCH_ENDS_SYNC, QCUDA_ST_OUTPUT, Status } from '../../backend/src/qcuda/proto';
import { alive, until } from '../helpers';
import { frameBatch, QcudaClient } from './client';
import {
  batch,
  batchStory,
  clusterStory,
  DEVICE_SYNC,
  handle,
  i32,
  kernels,
  launch,
  launchArgs,
  output,
  setup,
  story,
  type Entry,
} from './ring-story';

test.serial('the ring server answers as the device does, bad requests and printf output included', async (t) => {
  const on = await setup(t, true);
  const withServer = await story(on.c);
  const off = await setup(t, false);
  const without = await story(off.c);
  t.deepEqual(withServer, without, 'the same statuses, bytes and output either way');
  t.is(without[2], '030a1118', 'the 4 bytes came back');
  t.true(without.includes('say 7\n'), `printf output read after the synchronize that flushed it: ${JSON.stringify(without)}`);
  t.is(without.at(-1), 710, 'the failed assert (cudaErrorAssert) at the synchronize after it');
  t.true(on.inC() >= 10, `round trips answered in C (${on.inC()})`);
  t.is(off.inC(), 0, 'none with the server off');
});

test.serial(
  'batches of launches: the ring server answers as the device does, and what would wait it leaves to the device, its launches run once',
  async (t) => {
    const on = await setup(t, true);
    const before = on.inC();
    const withServer = await batchStory(on.c);
    const off = await setup(t, false);
    const without = await batchStory(off.c);
    t.deepEqual(withServer, without, 'the same statuses, values and output either way');
    const st = (i: number) => (without[i] as { status: number }).status;
    const val = (i: number) => (without[i] as { value: bigint }).value;
    t.deepEqual(without[0], { status: 0, value: 3n }, 'three launches');
    t.is(without[2], 'say 5\n', 'printf output with the synchronize that ended the batch');
    t.deepEqual([st(3) & ~QCUDA_ST_OUTPUT, val(3)], [0, 1n], 'a launch and a stream synchronize');
    t.deepEqual([without[5], without[6]], [true, 'say 9\n'], 'the synchronize waited for the 200 ms kernel; the launches ran once');
    t.deepEqual(
      [without[7], without[8], without[9]],
      [{ status: 0, value: 2n }, 1, 0],
      'a failed launch: cudaErrorInvalidValue at the next synchronize, once',
    );
    t.deepEqual([without[10], without[11]], [{ status: 1, value: 1n }, 0], 'reported by the synchronize that ends its batch');
    t.is(val(12), 1n, 'an unknown function fails its own entry');
    t.not(st(12), 0, 'and the synchronize ending its batch reports it');
    t.is(st(16), Status.BAD_REQUEST, 'a batch with fewer entries than it announces runs nothing');
    t.deepEqual(without.slice(19, 21), [{ status: 0, value: 1n }, 0], 'an event recorded in a batch, then passed');
    t.deepEqual(
      without.slice(21, 25),
      [{ status: 0, value: 2n }, 600, 0, 0],
      'behind a 200 ms kernel: not ready (cudaErrorNotReady), waited for, then passed',
    );
    t.deepEqual(without[25], { status: 0, value: 2n }, "a batch ending with the event's synchronize");
    t.deepEqual(
      without.slice(26, 30),
      [0, 400, 400, 400],
      'a stream waited for; an unknown stream and event refused (cudaErrorInvalidResourceHandle)',
    );
    t.deepEqual([st(30) & ~QCUDA_ST_OUTPUT, without[31]], [710, true], 'the failed assert, its line read');
    t.deepEqual(
      without.slice(32, 34),
      [{ status: 710, value: 0n }, 710],
      'sticky: the event record fails its entry, the launch after it the synchronize',
    );
    t.deepEqual(without.slice(34, 37), [{ status: 710, value: 1n }, 710, 710], 'and ending its batch; a query says so too');
    // In C (18): the batches of good launches and event records, ending or not with a device, stream
    // or event synchronize; the failed launch's batch (its error then went to the device's
    // synchronize) and the synchronize after that; the synchronize after the left batch; the empty
    // batch; the event queries, ready or not; the lone stream synchronize; boom's batch and the
    // sticky batch after it. Not: the 200 ms batch and the failed launch's ending (left to the
    // device), the batches left whole, the event synchronize behind the kernel, bad handles, and
    // whatever came while the session had an async error or output waiting.
    t.is(on.inC() - before, 18, 'answered in C');
  },
);

/**
 * Batches that end with a query (QCUDA_BATCH_ENDS_QUERY), as cudaEventRecord
 * + cudaEventQuery send them: ready or not, after a failed launch or
 * record, of an unknown event, a stream query, the wrong flag.
 */
async function queryStory(c: QcudaClient): Promise<unknown[]> {
  const seen: unknown[] = [];
  const [nop, hold] = await kernels(c, ['nop', 'hold']);
  const none = new Uint8Array(0);
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const recordOf = (event: bigint): Entry => [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event, stream: 0n })];
  const record = recordOf(ev);
  const query = (h = ev): Entry => [Cmd.EVENT_QUERY, handle(h)];
  const ends = { endsQuery: true };
  const sync = async (): Promise<number> => (await c.call(Cmd.DEVICE_SYNC)).status;
  for (let i = 0; i < 3; i++) seen.push(await batch(c, [record, query()], ends));
  seen.push(await batch(c, [launch(nop, none), launch(nop, none), record, query()], ends));
  // Behind a kernel of 400 ms: not ready, answered at once.
  const t0 = Date.now();
  seen.push(await batch(c, [launch(hold, i32(400)), record, query()], ends), Date.now() - t0 < 300);
  seen.push(await sync(), await batch(c, [record, query()], ends));
  // A failed launch (a block of 2048 threads): the query answers for itself; the launch's error comes at the synchronize, once.
  const wide = Uint32Array.from([2048, 1, 1]);
  seen.push(await batch(c, [launch(nop, none, { block: wide }), record, query()], ends), await sync(), await sync());
  // A failed record (an unknown event): its error is the reply's value, the backend keeps none.
  seen.push(await batch(c, [recordOf(0x4343n), query()], ends), await sync());
  // The query's own failure; a stream query; a query with the synchronize flag, a synchronize with the query flag.
  seen.push(await batch(c, [record, query(0x4343n)], ends));
  seen.push(await batch(c, [record, [Cmd.STREAM_QUERY, handle(0n)]], ends));
  seen.push(await batch(c, [record, query()], { endsSync: true }), await batch(c, [record, DEVICE_SYNC], ends));
  seen.push(await batch(c, [record, query()], ends));
  return seen;
}

test.serial('batches ending with an event query: answered in C as the device answers them, in one round trip', async (t) => {
  const on = await setup(t, true);
  const before = on.inC();
  const withServer = await queryStory(on.c);
  const inC = on.inC() - before;
  const off = await setup(t, false);
  const without = await queryStory(off.c);
  t.deepEqual(withServer, without, 'the same statuses and values either way');
  const ready = { status: 0, value: 0n };
  t.deepEqual(without.slice(0, 4), [ready, ready, ready, ready], 'recorded and ready; the value: no posted failure');
  t.deepEqual(without.slice(4, 8), [{ status: 600, value: 0n }, true, 0, ready], 'behind the kernel: not ready, at once');
  t.deepEqual(without.slice(8, 11), [ready, 1, 0], "a failed launch: not the query's; the next synchronize's, once");
  t.deepEqual(without.slice(11, 13), [{ status: 0, value: 400n }, 0], "a failed record: the reply's value (the guest keeps it)");
  t.deepEqual(without[13], { status: 400, value: 0n }, "the query's own failure (no such event)");
  t.deepEqual(without[14], ready, 'a stream query ends a batch too');
  t.deepEqual(
    [without[15], without[16]],
    [
      { status: Status.BAD_REQUEST, value: 0n },
      { status: Status.BAD_REQUEST, value: 0n },
    ],
  );
  t.deepEqual(without[17], ready);
  // In C (9): the four ready batches, the one behind the kernel, the one after the synchronize,
  // the second synchronize after the failed launch, the one after the failed record, and the
  // last batch. Not: the synchronize behind the kernel (it would wait), the failed launch's and
  // record's batches (left to the device, or whole), the first synchronize after the launch's
  // (the session's async error), the unknown event, the stream query (the device's) and the
  // wrong flags.
  t.is(inC, 9, `answered in C (${inC})`);
  t.is(off.inC(), 0, 'none with the server off');
});

/** A small deterministic generator (mulberry32): the same mutations for both sessions. */
function random(seed: number): (n: number) => number {
  let x = seed >>> 0;
  return (n) => {
    x = (x + 0x6d2b79f5) >>> 0;
    let z = x;
    z = Math.imul(z ^ (z >>> 15), z | 1);
    z ^= z + Math.imul(z ^ (z >>> 7), z | 61);
    return ((z ^ (z >>> 14)) >>> 0) % n;
  };
}

/**
 * Batches of launches and event records, each bent one way a hostile guest
 * might (counts, flags and sizes that lie, entries of other commands or
 * lengths, unknown handles, a failing launch, other endings, truncation);
 * the replies' status and value, then a synchronize's.
 */
async function mutatedBatches(c: QcudaClient, n: number): Promise<string[]> {
  const seen: string[] = [];
  const [nop] = await kernels(c, ['nop']);
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const ev = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const pick = random(0x51a7e);
  const handles = [0n, s, ev, nop, 0x4242n, 2n, 0xffffffffffffffffn];
  const endings = [Cmd.DEVICE_SYNC, Cmd.STREAM_SYNC, Cmd.EVENT_SYNC, Cmd.EVENT_QUERY, Cmd.STREAM_QUERY, Cmd.LAUNCH, Cmd.MALLOC, 9999];
  for (let i = 0; i < n; i++) {
    const entries: [number, Uint8Array][] = [];
    for (let k = 1 + pick(4); k > 0; k--)
      entries.push(
        pick(3) === 0
          ? [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: ev, stream: pick(2) ? s : 0n })]
          : [Cmd.LAUNCH, launchArgs(nop, new Uint8Array(0), { stream: pick(2) ? s : 0n })],
      );
    let endsSync = pick(2) === 1;
    const endsQuery = !endsSync && pick(2) === 1;
    if (endsSync)
      entries.push(
        pick(3) === 0 ? [Cmd.DEVICE_SYNC, new Uint8Array(0)] : [pick(2) ? Cmd.STREAM_SYNC : Cmd.EVENT_SYNC, handle(pick(2) ? s : ev)],
      );
    if (endsQuery) entries.push(pick(3) === 0 ? [Cmd.STREAM_QUERY, handle(s)] : [Cmd.EVENT_QUERY, handle(ev)]);
    let count = entries.length;
    let flags: number | undefined;
    let lieBytes = 0;
    const e = entries[pick(entries.length)];
    const v = new DataView(e[1].buffer, e[1].byteOffset, e[1].byteLength);
    switch (pick(14)) {
      case 0:
        count += pick(2) ? 1 : -1;
        break;
      case 1:
        flags = pick(4);
        break;
      case 2:
        lieBytes = pick(2) ? 8 : -8;
        break;
      case 3:
        e[1] = e[1].subarray(0, Math.max(0, e[1].length - 1 - pick(8)));
        break;
      case 4:
        e[0] = endings[pick(endings.length)];
        break;
      case 5:
        if (e[1].length >= 16) v.setBigUint64(pick(2) * 8, handles[pick(handles.length)], true);
        break;
      case 6:
        if (e[0] === Cmd.LAUNCH) v.setUint32(LAUNCH_BLOCK, 2048, true);
        break; // a block of 2048 threads: the launch fails
      case 7:
        endsSync = !endsSync;
        break;
      default:
        break; // as it is (6 in 14)
    }
    const bytes = frameBatch(entries);
    const body = lieBytes < 0 ? bytes.subarray(0, bytes.length + lieBytes) : bytes;
    const at = c.fe.mem.mark();
    const gpa = c.fe.mem.alloc(Math.max(bytes.length, 8), 64);
    c.fe.mem.bytes(gpa, body.length).set(body);
    const r = await c.call(Cmd.BATCH, {
      args: [
        'qcuda_args_batch',
        {
          count: count >>> 0,
          flags: flags ?? (endsSync ? QCUDA_BATCH_ENDS_SYNC : endsQuery ? QCUDA_BATCH_ENDS_QUERY : 0),
          bytes: BigInt(bytes.length + Math.max(0, lieBytes)),
        },
      ],
      to: body.length ? [{ gpa, len: body.length }] : [],
    });
    c.fe.mem.rewind(at);
    const sync = (await c.call(Cmd.DEVICE_SYNC)).status;
    seen.push(`${r.status & ~QCUDA_ST_OUTPUT}/${r.value} ${sync & ~QCUDA_ST_OUTPUT}`);
  }
  return seen;
}
const LAUNCH_BLOCK = LAYOUT.qcuda_args_launch.offsets.block;

test.serial('batches of cluster launches (LAUNCH_EX): answered in C as the device answers them, bad ones left to it', async (t) => {
  const on = await setup(t, true);
  const before = on.inC();
  const withServer = await clusterStory(on.c);
  const off = await setup(t, false);
  const without = await clusterStory(off.c);
  t.deepEqual(withServer, without, 'the same statuses, values and output either way');
  t.deepEqual(without[0], { status: 0, value: 3n }, 'two cluster launches and a launch');
  t.is(without[2], 'say 11\n', 'a cluster launch ran, its printf output with the synchronize');
  t.deepEqual(without[3], { status: 0, value: 1n }, 'a cooperative cluster launch');
  // The guest library keeps a flush's failure for the next synchronize (batch.c: note_deferred).
  t.deepEqual(
    without.slice(4, 7),
    [{ status: 912, value: 0n }, 0, 0],
    "the driver's refusal of a cluster that does not divide the grid: its entry's failure, once",
  );
  t.true(
    [7, 9, 11, 13].every((i) => (without[i] as { status: number }).status !== 0),
    `each bad cluster launch fails its batch: ${JSON.stringify(without.slice(7), (_, v: unknown) => (typeof v === 'bigint' ? Number(v) : v))}`,
  );
  t.true(on.inC() > before);
  // Before, a LAUNCH_EX sent every batch holding one to JavaScript.
  const [nop] = await kernels(on.c, ['nop']);
  const inC = on.inC();
  t.deepEqual(await batch(on.c, [launchEx(nop, new Uint8Array(0), 4, 2), launch(nop, new Uint8Array(0))]), {
    status: 0,
    value: 2n,
  });
  t.deepEqual(await batch(on.c, [launchEx(nop, new Uint8Array(0), 4, 4), DEVICE_SYNC], { endsSync: true }), {
    status: 0,
    value: 1n,
  });
  t.is(on.inC() - inC, 2, 'both batches of cluster launches answered in C');
});

test.serial('mutated batches: the same answers with the ring server on and off', async (t) => {
  const on = await setup(t, true);
  const before = on.inC();
  const withServer = await mutatedBatches(on.c, 300);
  const off = await setup(t, false);
  const without = await mutatedBatches(off.c, 300);
  t.deepEqual(withServer, without);
  const kinds = new Set(without.map((x) => x.split('/')[0]));
  t.true(kinds.size >= 4 && kinds.has('0'), `good batches and several refusals among them: ${[...kinds].join(', ')}`);
  t.true(
    without.some((x) => x.endsWith(' 1')),
    'a failed launch reported at the synchronize after it',
  );
  // 437 of the 600 requests when written: the good batches and most synchronizes after them.
  t.true(on.inC() - before >= 300, `the good ones, and the synchronizes, answered in C (${on.inC() - before})`);
});

test.serial('each short call of a quiet session is answered in C', async (t) => {
  const { c, inC } = await setup(t, true);
  const m = await c.malloc(64);
  const [nop] = await kernels(c, ['nop']);
  const src = c.fe.mem.alloc(64, 64);
  const before = inC();
  t.is(await c.htod(m.value, src, 4), 0);
  t.is(await c.dtoh(src, m.value, 4), 0);
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(nop, new Uint8Array(0)) })).status, 0);
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  t.is(inC() - before, 5, 'copy, copy, synchronize, launch, synchronize');
  // Not short: a copy larger than the server takes goes to the device.
  const big = c.fe.mem.alloc(128 * 1024, 64);
  const b = await c.malloc(128 * 1024);
  t.is(await c.htod(b.value, big, 128 * 1024), 0);
  t.is(inC() - before, 5, "the 128 KiB copy was the device's");
  // A batch of launches, and one ending with a synchronize.
  t.deepEqual(await batch(c, [launch(nop, new Uint8Array(0)), launch(nop, new Uint8Array(0))]), { status: 0, value: 2n });
  t.deepEqual(await batch(c, [launch(nop, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
  t.is(inC() - before, 7, 'both batches');
});

test.serial(
  "beside a parked CALLBACK_WAIT (a callback thread's), short calls are still answered in C, and the host function it waits for still comes to it",
  async (t) => {
    const { c, inC } = await setup(t, true);
    const m = await c.malloc(64);
    const [nop] = await kernels(c, ['nop']);
    const src = c.fe.mem.alloc(64, 64);
    const callbackWait = (done: bigint) =>
      c.call(Cmd.CALLBACK_WAIT, { args: ['qcuda_args_callback_wait', { done }], out: 'qcuda_out_callback' });
    const parked = callbackWait(0n);
    const before = inC();
    t.is(await c.htod(m.value, src, 4), 0);
    t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
    t.deepEqual(await batch(c, [launch(nop, new Uint8Array(0)), DEVICE_SYNC], { endsSync: true }), { status: 0, value: 1n });
    t.is(inC() - before, 3, 'all three in C, the wait parked beside them');
    // A host function on the NULL stream: the parked wait is answered with it; until the guest says it ran, work waits.
    const hostFunc: Entry = [Cmd.HOST_FUNC, encode('qcuda_args_host_func', { stream: 0n, id: 7n })];
    t.deepEqual(await batch(c, [hostFunc]), { status: 0, value: 1n });
    const r = await parked;
    t.deepEqual([r.status, r.out?.id], [0, 7n], 'the wait got the host function');
    let synced = false;
    const sync = c.call(Cmd.DEVICE_SYNC).then((x) => ((synced = true), x.status));
    await new Promise((res) => setTimeout(res, 100));
    t.false(synced, 'a synchronize waits while the host function has not run');
    const next = callbackWait(7n);
    t.is(await sync, 0, 'and returns once the guest says it ran');
    const during = inC();
    t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
    t.is(inC() - during, 1, 'with the next wait parked, answered in C again');
    next.catch(() => undefined); // still parked: the session ends with the test
  },
);

test.serial('a synchronize behind a running kernel is left to the device, which waits for it', async (t) => {
  const { c, inC } = await setup(t, true);
  const [hold] = await kernels(c, ['hold']);
  t.is((await c.call(Cmd.LAUNCH, { rawArgs: launchArgs(hold, i32(300)) })).status, 0);
  const before = inC();
  const t0 = Date.now();
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  t.true(Date.now() - t0 >= 250, `the synchronize waited for the kernel (${Date.now() - t0} ms)`);
  t.is(inC(), before, 'and was not answered in C');
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
  t.is(inC(), before + 1, 'the next one, on an idle GPU, was');
});

test.serial(
  'a worker killed after calls answered in C: what it held is given back, and the backend takes the ring on from its in-flight record',
  async (t) => {
    const { dev, c, inC, owner, fe } = await setup(t, true);
    const m = await c.malloc(4096);
    const src = c.fe.mem.alloc(64, 64);
    for (let i = 0; i < 20; i++) t.is(await c.htod(m.value, src, 4), 0);
    t.true(inC() >= 20, `answered in C (${inC()})`);
    const pid = owner()!;
    process.kill(pid, 'SIGKILL');
    t.true(await until(() => !alive(pid) && dev.vm.quota.used === 0n, 5000), 'the worker is gone and what it held is back');
    t.is((await c.malloc(64)).status, Status.NO_SESSION, 'its session is gone; the backend answers on queue 1');
    const b = new QcudaClient(fe, 1, 16);
    await b.openOwn(1);
    const n = await b.malloc(64);
    t.is(n.status, 0, 'a new session owns queue 1');
    t.is(await b.htod(n.value, src, 4), 0);
    t.is((await b.call(Cmd.DEVICE_SYNC)).status, 0);
  },
);

/** A LAUNCH_EX entry: launchArgs' fields, the cluster and flags, then the parameters. */
function launchEx(func: bigint, params: Uint8Array, grid: number, cluster: number, o: { short?: boolean } = {}): Entry {
  const a = encode('qcuda_args_launch_ex', {
    func,
    stream: 0n,
    grid: Uint32Array.from([grid, 1, 1]),
    block: Uint32Array.from([32, 1, 1]),
    cluster: Uint32Array.from([cluster, 1, 1]),
    param_bytes: params.length,
  });
  const out = new Uint8Array(a.length + params.length);
  out.set(a);
  out.set(params, a.length);
  return [Cmd.LAUNCH_EX, o.short ? out.subarray(0, 16) : out];
}

test.serial(
  'launches in clusters are posted like launches: they run in order, and a refused one is the next synchronize\u2019s error',
  async (t) => {
    for (const ringServer of [true, false]) {
      const { c } = await setup(t, ringServer);
      const [say] = await kernels(c, ['say']);
      const r = await batch(c, [launchEx(say, i32(11), 4, 2), launch(say, i32(12)), launchEx(say, i32(13), 2, 2), DEVICE_SYNC], {
        endsSync: true,
      });
      t.deepEqual([r.status & ~QCUDA_ST_OUTPUT, r.value], [0, 3n], `ring server ${ringServer}: three launches`);
      t.is(await output(c, r.status), 'say 11\nsay 12\nsay 13\n', 'in the order posted');
      // A grid that is not whole clusters: the driver refuses it, at the next synchronize.
      const bad = await batch(c, [launch(say, i32(14)), launchEx(say, i32(15), 3, 2), launch(say, i32(16)), DEVICE_SYNC], {
        endsSync: true,
      });
      t.is(bad.status & ~QCUDA_ST_OUTPUT, 912, 'cudaErrorInvalidClusterSize, reported by the synchronize ending the batch');
      t.is(await output(c, bad.status), 'say 14\nsay 16\n', 'the entries around it ran');
      t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0, 'reported once');
      t.is(
        (await batch(c, [launchEx(say, i32(15), 4, 2, { short: true })])).status,
        Status.BAD_REQUEST,
        'an entry shorter than its struct',
      );
    }
  },
);
