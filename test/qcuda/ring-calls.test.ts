// The ring server's calls come from one place, their declarations (`ring`,
// RingDecl in wire/protocol.ts): the table the addon was built with
// (addon/src/ring_calls.h, RingServer.CALLS) is the one the declarations
// give (wire/ring.ts), offsets included; the server (cuda_ring_server.cc,
// ring_plan.cc) lists no command of its own; a declaration the server cannot serve as declared is refused
// by the generator; and every way a call is declared served (alone, posted
// in a batch, ending a batch) has a case here that the server answers in C,
// on the fake driver (fixtures/fakecuda.c), with the answer the device gives
// with the server off. A call declared `ring` without a case fails the test
// that lists them.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { Cmd, encode, QCUDA_BATCH_ENDS_QUERY, QCUDA_BATCH_ENDS_SYNC } from '../../backend/src/qcuda/proto';
import { cudaNative } from '../../backend/src/qcuda/providers/cuda/native-cuda';
import { CALLS, type CallDecl } from '../../backend/src/qcuda/wire/protocol';
import { RING_DATA, RING_KINDS, RING_SERVES, ringCalls } from '../../backend/src/qcuda/wire/ring';
import { root } from '../addon/fake-driver';
import type { QcudaClient } from './client';
import { batch, DEVICE_SYNC, handle, kernels, launch, launchArgs, launchEx, setup, type Entry } from './ring-story';

/** The ways the declarations say the server answers a call: "NAME alone", "NAME posted" (in a batch), "NAME ending" (a batch). */
function declaredWays(): string[] {
  return ringCalls()
    .flatMap((r) => [r.alone ? `${r.name} alone` : '', r.posted ? `${r.name} posted` : '', r.ends ? `${r.name} ending` : ''])
    .filter(Boolean)
    .sort();
}

/** What a case has made: a function, a stream and an event of the session, an allocation, and guest memory. */
interface Fixture {
  c: QcudaClient;
  nop: bigint;
  stream: bigint;
  event: bigint;
  ptr: bigint;
  gpa: bigint;
}

const none = new Uint8Array(0);
const status = async (r: Promise<{ status: number }>): Promise<number> => (await r).status;
const record = (f: Fixture): Entry => [Cmd.EVENT_RECORD, encode('qcuda_args_event_record', { event: f.event, stream: f.stream })];

/** One case per way: it sends one request, which the server should answer, and returns what the guest sees of it. */
const CASES: Record<string, (f: Fixture) => Promise<unknown>> = {
  'DEVICE_SYNC alone': (f) => status(f.c.call(Cmd.DEVICE_SYNC)),
  'DEVICE_SYNC ending': (f) => batch(f.c, [launch(f.nop, none), DEVICE_SYNC], { endsSync: true }),
  'STREAM_SYNC alone': (f) => status(f.c.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle: f.stream }] })),
  'STREAM_SYNC ending': (f) =>
    batch(f.c, [launch(f.nop, none, { stream: f.stream }), [Cmd.STREAM_SYNC, handle(f.stream)]], { endsSync: true }),
  'EVENT_SYNC alone': (f) => status(f.c.call(Cmd.EVENT_SYNC, { args: ['qcuda_args_handle', { handle: f.event }] })),
  'EVENT_SYNC ending': (f) => batch(f.c, [record(f), [Cmd.EVENT_SYNC, handle(f.event)]], { endsSync: true }),
  'EVENT_QUERY alone': (f) => status(f.c.call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: f.event }] })),
  'EVENT_QUERY ending': (f) => batch(f.c, [record(f), [Cmd.EVENT_QUERY, handle(f.event)]], { endsQuery: true }),
  'EVENT_RECORD posted': (f) => batch(f.c, [record(f)]),
  'MEMCPY_HTOD alone': async (f) => {
    f.c.fe.mem.bytes(f.gpa, 16).set(Uint8Array.from({ length: 16 }, (_, i) => 0x40 + i));
    return f.c.htod(f.ptr + 16n, f.gpa, 16, f.stream);
  },
  'MEMCPY_DTOH alone': async (f) => {
    f.c.fe.mem.bytes(f.gpa, 16).fill(0);
    const st = await f.c.dtoh(f.gpa, f.ptr + 16n, 16, f.stream);
    return [st, Buffer.from(f.c.fe.mem.bytes(f.gpa, 16)).toString('hex')];
  },
  'LAUNCH alone': (f) => status(f.c.call(Cmd.LAUNCH, { rawArgs: launchArgs(f.nop, none, { stream: f.stream }) })),
  'LAUNCH posted': (f) => batch(f.c, [launch(f.nop, none), launch(f.nop, none, { stream: f.stream })]),
  'LAUNCH_EX posted': (f) => batch(f.c, [launchEx(f.nop, none, [2, 1, 1], { grid: Uint32Array.from([4, 1, 1]) })]),
  'BATCH alone': (f) => batch(f.c, [launch(f.nop, none), record(f), launch(f.nop, none)]),
};

test('the table the addon was built with is the declarations\u2019, offsets included', (t) => {
  const built = cudaNative().RingServer.CALLS;
  const ends = { sync: QCUDA_BATCH_ENDS_SYNC, query: QCUDA_BATCH_ENDS_QUERY };
  const declared = ringCalls().map((r) => ({
    cmd: r.cmd,
    serves: RING_SERVES.indexOf(r.serves),
    alone: r.alone,
    posted: r.posted,
    ends: r.ends ? ends[r.ends] : 0,
    args: r.argBytes,
    varArgs: r.varArgs,
    data: RING_DATA.indexOf(r.data ?? 'none'),
    posts: r.posts,
    syncs: r.syncs,
    handles: r.handles.map((h) => ({ offset: h.offset, kind: RING_KINDS.indexOf(h.kind) })),
    ...(r.range ? { range: { ptr: r.range.ptrOffset, size: r.range.sizeOffset } } : {}),
    maxData: r.maxData,
  }));
  t.deepEqual(built, declared);
  const names = ringCalls().map((r) => r.name);
  t.deepEqual(
    names,
    (Object.entries(CALLS) as [string, CallDecl][])
      .filter(([, d]) => d.ring)
      .map(([n]) => n)
      .sort((a, b) => CALLS[a as keyof typeof CALLS].cmd - CALLS[b as keyof typeof CALLS].cmd),
    'a row for each call declared with ring, and no other',
  );
  t.true(names.length >= 10, `${names.length} calls`);
});

test('the ring server names no command: which calls it serves, and how, is the table\u2019s', (t) => {
  for (const file of ['cuda_ring_server.cc', 'ring_plan.h', 'ring_plan.cc']) {
    const src = fs.readFileSync(path.join(root, 'addon', 'src', file), 'utf8');
    t.deepEqual([...new Set(src.match(/QCUDA_CMD_\w+/g) ?? [])], [], file);
  }
  t.regex(fs.readFileSync(path.join(root, 'addon', 'src', 'ring_plan.h'), 'utf8'), /#include "ring_calls.h"/);
});

test('a declaration the server cannot serve as declared is refused by the generator', (t) => {
  const with_ = (name: keyof typeof CALLS, d: Partial<CallDecl>) =>
    ({ ...CALLS, [name]: { ...CALLS[name], ...d } }) as Record<string, CallDecl>;
  t.notThrows(() => ringCalls(CALLS as Record<string, CallDecl>));
  const refusals: [Record<string, CallDecl>, RegExp][] = [
    // Alone, a cluster launch's own failure is its answer, which the server does not give.
    [with_('LAUNCH_EX', { ring: { serves: 'cluster-launch' } }), /LAUNCH_EX: ring cluster-launch: served only as a posted entry/],
    [with_('STREAM_QUERY', { ring: { serves: 'query' } }), /STREAM_QUERY: ring query: handles stream/],
    [with_('MEMCPY_HTOD', { ring: { serves: 'copy', maxData: 4096 } }), /a copy without a range/],
    [with_('MEMCPY_HTOD', { ring: { serves: 'copy', range: ['dst', 'async'], maxData: 4096 } }), /async is not a u64 field/],
    [with_('MALLOC', { ring: { serves: 'sync' } }), /MALLOC: ring sync: does not synchronize/],
    [with_('MODULE_UNLOAD', { ring: { serves: 'sync' } }), /handles module/],
    [with_('DEVICE_SYNC', { data: 'to' }), /DEVICE_SYNC: ring sync: moves data/],
    [with_('BATCH', { ring: undefined }), /served in a batch, but no call is served as a batch/],
  ];
  for (const [calls, why] of refusals) t.throws(() => ringCalls(calls), { message: why });
});

/** The fixture a session's cases share, made with the server on or off alike. */
async function fixture(c: QcudaClient): Promise<Fixture> {
  const [nop] = await kernels(c, ['nop']);
  const stream = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const event = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const ptr = (await c.malloc(4096)).value;
  return { c, nop, stream, event, ptr, gpa: c.fe.mem.alloc(64, 64) };
}

test.serial('every way a call is declared served is answered in C, as the device answers it', async (t) => {
  t.deepEqual(Object.keys(CASES).sort(), declaredWays(), 'a case for each way the declarations say the ring server serves a call');
  const answers: Record<'on' | 'off', unknown[]> = { on: [], off: [] };
  for (const mode of ['on', 'off'] as const) {
    const { c, inC } = await setup(t, mode === 'on');
    const f = await fixture(c);
    for (const [way, send] of Object.entries(CASES)) {
      // Quiet and idle before each: what came before is synchronized (a ready event, no posted error).
      t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
      const before = inC();
      answers[mode].push([way, await send(f)]);
      t.is(inC() - before, mode === 'on' ? 1 : 0, `${way}: answered in C with the server ${mode}`);
    }
  }
  t.deepEqual(answers.on, answers.off, 'the same answers with the server on and off');
  const hex = (answers.off.find((a) => (a as unknown[])[0] === 'MEMCPY_DTOH alone') as unknown[])[1];
  t.deepEqual(hex, [0, '404142434445464748494a4b4c4d4e4f'], 'the bytes copied in came back');
});
