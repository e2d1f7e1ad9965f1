// Graphs with conditional nodes on the emu provider, driven as the guest
// library drives them: GRAPH_CREATE, GRAPH_COND_HANDLE, the node description
// staged with MODULE_UPLOAD and instantiated, GRAPH_LAUNCH, then the device
// bytes read back. Then hostile descriptions and handles, each refused with
// a clear status, leaving nothing staged or held and the session usable.
import test, { type ExecutionContext } from 'ava';
import { CudaErr, type CudaError } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { GraphNodeSpec } from '../../backend/src/qcuda/provider';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import {
  Cmd,
  encode,
  QCUDA_GNODE_COND,
  QCUDA_GNODE_EMPTY,
  QCUDA_GNODE_EVENT_RECORD,
  QCUDA_GNODE_KERNEL,
  QCUDA_GNODE_MEMCPY,
  QCUDA_GNODE_MEMSET,
  QCUDA_GRAPH_TOP,
  type STRUCTS,
} from '../../backend/src/qcuda/proto';
import type { FieldInput } from '../../backend/src/qcuda/wire/layout';
import { started } from '../helpers';
import { QcudaClient, type Reply } from './client';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';

/** cudaGraphCondAssignDefault */
const ASSIGN_DEFAULT = 1;
const IF = 0;
const WHILE = 1;
const SWITCH = 2;

type NodeIn = FieldInput<(typeof STRUCTS)['qcuda_graph_node']>;

async function setup(t: ExecutionContext) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 4 });
  const pair = await started(t, dev, { size: 256 });
  const c = new QcudaClient(pair.fe);
  await c.open();
  return { dev, c, fe: pair.fe, provider: dev.provider as EmuProvider, session: () => [...dev.sessions.values()][0] };
}
type Setup = Awaited<ReturnType<typeof setup>>;

/** A node of the graph itself unless parent says otherwise. */
const node = (o: NodeIn): Uint8Array => encode('qcuda_graph_node', { parent: QCUDA_GRAPH_TOP, ...o });
const edge = (from: number, to: number): Uint8Array => encode('qcuda_graph_edge', { from, to });
/** A memset node: width bytes (elem 1) x height rows unless told. */
const memset = (dst: bigint, value: number, width: bigint, o: NodeIn = {}): Uint8Array =>
  node({ type: QCUDA_GNODE_MEMSET, dst, value, width, height: 1n, pitch: width * BigInt(o.elem ?? 1), elem: 1, ...o });
const cond = (handle: bigint, condType: number, size: number, o: NodeIn = {}): Uint8Array =>
  node({ type: QCUDA_GNODE_COND, handle, cond_type: condType, size, ...o });

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

let nextUpload = 1n;

interface Staging {
  edges?: Uint8Array[];
  params?: Uint8Array;
  /** Counts and size the command claims, when not the staged ones. */
  nodeCount?: number;
  edgeCount?: number;
  size?: bigint;
}

/** Stages nodes, edges and parameters with MODULE_UPLOAD and instantiates them on graph: the reply (value: the exec). */
async function instantiate(x: Setup, graph: bigint, nodes: Uint8Array[], o: Staging = {}): Promise<Reply> {
  const edges = o.edges ?? [];
  const bytes = concat([...nodes, ...edges, o.params ?? new Uint8Array(0)]);
  const gpa = x.fe.mem.alloc(bytes.length, 16);
  x.fe.mem.bytes(gpa, bytes.length).set(bytes);
  const id = nextUpload++;
  const up = await x.c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: id, size: BigInt(bytes.length) }],
    to: [{ gpa, len: bytes.length }],
    dataOffset: 0n,
    dataLen: BigInt(bytes.length),
  });
  if (up.status !== 0) throw new Error(`MODULE_UPLOAD: ${up.status}`);
  return x.c.call(Cmd.GRAPH_INSTANTIATE, {
    args: [
      'qcuda_args_graph_instantiate',
      {
        graph,
        upload_id: id,
        size: o.size ?? BigInt(bytes.length),
        nodes: o.nodeCount ?? nodes.length,
        edges: o.edgeCount ?? edges.length,
      },
    ],
  });
}

async function graphCreate(x: Setup): Promise<bigint> {
  const r = await x.c.call(Cmd.GRAPH_CREATE);
  if (r.status !== 0) throw new Error(`GRAPH_CREATE: ${r.status}`);
  return r.value;
}

const condHandle = (x: Setup, graph: bigint, defaultValue: number, flags = ASSIGN_DEFAULT): Promise<Reply> =>
  x.c.call(Cmd.GRAPH_COND_HANDLE, { args: ['qcuda_args_graph_cond', { graph, default_value: defaultValue, flags }] });
const launch = (x: Setup, exec: bigint, stream = 0n): Promise<Reply> =>
  x.c.call(Cmd.GRAPH_LAUNCH, { args: ['qcuda_args_graph_launch', { exec, stream }] });
const handleCall = (x: Setup, cmd: number, handle: bigint): Promise<Reply> => x.c.call(cmd, { args: ['qcuda_args_handle', { handle }] });

async function malloc(x: Setup, size: number): Promise<bigint> {
  const r = await x.c.malloc(size);
  if (r.status !== 0) throw new Error(`MALLOC: ${r.status}`);
  return r.value;
}

/** Device bytes, through MEMCPY_DTOH. */
async function read(x: Setup, ptr: bigint, size: number): Promise<Uint8Array> {
  const gpa = x.fe.mem.alloc(size, 16);
  if ((await x.c.dtoh(gpa, ptr, size)) !== 0) throw new Error('MEMCPY_DTOH failed');
  return x.fe.mem.bytes(gpa, size).slice();
}

/** Device bytes set through MEMCPY_HTOD. */
async function write(x: Setup, ptr: bigint, bytes: Uint8Array): Promise<void> {
  const gpa = x.fe.mem.alloc(bytes.length, 16);
  x.fe.mem.bytes(gpa, bytes.length).set(bytes);
  if ((await x.c.htod(ptr, gpa, bytes.length)) !== 0) throw new Error('MEMCPY_HTOD failed');
}

/** Instantiates, launches on the NULL stream and destroys the exec: the launch's status. */
async function runOnce(t: ExecutionContext, x: Setup, graph: bigint, nodes: Uint8Array[], o: Staging = {}): Promise<number> {
  const e = await instantiate(x, graph, nodes, o);
  t.is(e.status, 0, 'instantiated');
  const r = await launch(x, e.value);
  t.is((await handleCall(x, Cmd.GRAPH_EXEC_DESTROY, e.value)).status, 0);
  return r.status;
}

test('IF, IF/else, SWITCH and nested conditionals run the bodies their values pick', async (t) => {
  const x = await setup(t);
  const buf = await malloc(x, 64);
  const g = await graphCreate(x);
  const one = await condHandle(x, g, 1);
  t.is(one.status, 0);
  t.not(one.value, 0n, 'a handle is never 0');
  const zero = (await condHandle(x, g, 0)).value;
  const two = (await condHandle(x, g, 2)).value;
  t.is(new Set([one.value, zero, two]).size, 3, 'every handle is its own');

  // IF, value 1: body 0 (a memset of 16 bytes) runs.
  t.is(await runOnce(t, x, g, [cond(one.value, IF, 1), memset(buf, 0xab, 16n, { parent: 0 })]), 0);
  let b = await read(x, buf, 64);
  t.deepEqual([...b.subarray(0, 16)], Array(16).fill(0xab));
  t.deepEqual([...b.subarray(16)], Array(48).fill(0), 'nothing past the memset');

  // IF, value 0, two bodies: the else body (1) runs, body 0 does not.
  await write(x, buf, new Uint8Array(64));
  t.is(
    await runOnce(t, x, g, [
      cond(zero, IF, 2),
      memset(buf, 0x11, 8n, { parent: 0, body: 0 }),
      memset(buf + 8n, 0x22, 8n, { parent: 0, body: 1 }),
    ]),
    0,
  );
  b = await read(x, buf, 16);
  t.deepEqual([...b], [...Array(8).fill(0), ...Array(8).fill(0x22)]);

  // IF, value 0, one body: nothing runs.
  await write(x, buf, new Uint8Array(64));
  t.is(await runOnce(t, x, g, [cond(zero, IF, 1), memset(buf, 0x33, 8n, { parent: 0 })]), 0);
  t.deepEqual([...(await read(x, buf, 8))], Array(8).fill(0));

  // SWITCH, value 2 of 3 bodies: body 2 only.
  t.is(
    await runOnce(t, x, g, [
      cond(two, SWITCH, 3),
      memset(buf, 0x40, 4n, { parent: 0, body: 0 }),
      memset(buf + 4n, 0x41, 4n, { parent: 0, body: 1 }),
      memset(buf + 8n, 0x42, 4n, { parent: 0, body: 2 }),
    ]),
    0,
  );
  t.deepEqual([...(await read(x, buf, 12))], [...Array(8).fill(0), ...Array(4).fill(0x42)]);

  // SWITCH, value 2 of 2 bodies: none.
  await write(x, buf, new Uint8Array(64));
  t.is(
    await runOnce(t, x, g, [
      cond(two, SWITCH, 2),
      memset(buf, 0x50, 4n, { parent: 0, body: 0 }),
      memset(buf, 0x51, 4n, { parent: 0, body: 1 }),
    ]),
    0,
  );
  t.deepEqual([...(await read(x, buf, 4))], Array(4).fill(0));

  // Nested: SWITCH body 2 holds an IF (value 1) whose body holds a 16-bit memset; WHILE with value 0 never runs its body.
  t.is(
    await runOnce(t, x, g, [
      cond(two, SWITCH, 3),
      cond(one.value, IF, 1, { parent: 0, body: 2 }),
      memset(buf, 0xbeef, 3n, { parent: 1, elem: 2 }),
      cond(zero, WHILE, 1),
      memset(buf + 32n, 0x99, 8n, { parent: 3 }),
    ]),
    0,
  );
  b = await read(x, buf, 40);
  t.deepEqual([...b.subarray(0, 8)], [0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0, 0], 'elements little-endian');
  t.deepEqual([...b.subarray(32, 40)], Array(8).fill(0), 'the WHILE body never ran');

  // A 32-bit memset of 2 rows, pitch apart.
  await write(x, buf, new Uint8Array(64));
  t.is(await runOnce(t, x, g, [memset(buf, 0x04030201, 2n, { elem: 4, height: 2n, pitch: 16n })]), 0);
  b = await read(x, buf, 32);
  t.deepEqual([...b.subarray(0, 8)], [1, 2, 3, 4, 1, 2, 3, 4]);
  t.deepEqual([...b.subarray(8, 16)], Array(8).fill(0), 'the row gap');
  t.deepEqual([...b.subarray(16, 24)], [1, 2, 3, 4, 1, 2, 3, 4]);
  t.is(b[24], 0);
  t.is((await handleCall(x, Cmd.GRAPH_DESTROY, g)).status, 0);
  t.is(x.session().objects.graphCount, 0);
});

test('the default value is assigned at each launch only with cudaGraphCondAssignDefault', async (t) => {
  const x = await setup(t);
  const buf = await malloc(x, 8);
  const g = await graphCreate(x);
  const plain = await condHandle(x, g, 1, 0);
  t.is(plain.status, 0);
  const e = await instantiate(x, g, [cond(plain.value, IF, 1), memset(buf, 0x77, 8n, { parent: 0 })]);
  t.is(e.status, 0);
  // No kernel here sets a value: it stays the default, launch after launch.
  for (let i = 0; i < 3; i++) {
    await write(x, buf, new Uint8Array(8));
    t.is((await launch(x, e.value)).status, 0);
    t.deepEqual([...(await read(x, buf, 8))], Array(8).fill(0x77));
  }
});

test('a pitched memcpy node copies 3 rows and leaves the row gaps alone; edges order a memset before the copy of its bytes', async (t) => {
  const x = await setup(t);
  const src = await malloc(x, 256);
  const dst = await malloc(x, 256);
  const pattern = Uint8Array.from({ length: 256 }, (_, i) => (i * 7 + 3) & 0xff);
  await write(x, src, pattern);
  await write(x, dst, new Uint8Array(256).fill(0xee));
  const g = await graphCreate(x);
  // 10 bytes x 3 rows, source rows 32 apart (from byte 5), destination rows 16 apart.
  const copy = node({
    type: QCUDA_GNODE_MEMCPY,
    dst,
    src: src + 5n,
    width: 10n,
    height: 3n,
    depth: 1n,
    pitch: 16n,
    rows: 3n,
    src_pitch: 32n,
    src_rows: 3n,
  });
  t.is(await runOnce(t, x, g, [copy]), 0);
  const b = await read(x, dst, 64);
  for (let y = 0; y < 3; y++) {
    t.deepEqual([...b.subarray(y * 16, y * 16 + 10)], [...pattern.subarray(5 + y * 32, 15 + y * 32)], `row ${y}`);
    t.deepEqual([...b.subarray(y * 16 + 10, y * 16 + 16)], Array(6).fill(0xee), `the gap after row ${y}`);
  }
  t.deepEqual([...b.subarray(48)], Array(16).fill(0xee), 'nothing past the last row');

  // Two slices: slices pitch * rows apart on each side.
  await write(x, dst, new Uint8Array(256));
  const box = node({
    type: QCUDA_GNODE_MEMCPY,
    dst,
    src,
    width: 4n,
    height: 2n,
    depth: 2n,
    pitch: 8n,
    rows: 3n,
    src_pitch: 4n,
    src_rows: 2n,
  });
  t.is(await runOnce(t, x, g, [box]), 0);
  const c = await read(x, dst, 48);
  t.deepEqual([...c.subarray(0, 4)], [...pattern.subarray(0, 4)]);
  t.deepEqual([...c.subarray(8, 12)], [...pattern.subarray(4, 8)]);
  t.deepEqual([...c.subarray(24, 28)], [...pattern.subarray(8, 12)], 'slice 1 starts 8 * 3 bytes in');
  t.deepEqual([...c.subarray(32, 36)], [...pattern.subarray(12, 16)]);
  t.deepEqual([...c.subarray(16, 24)], Array(8).fill(0), 'the unused third row of slice 0');

  // memset (node 0) -> empty (node 1) -> memcpy (node 2) of what it set.
  await write(x, dst, new Uint8Array(256));
  const chain = [
    memset(src, 0x5a, 24n),
    node({ type: QCUDA_GNODE_EMPTY }),
    node({ type: QCUDA_GNODE_MEMCPY, dst, src, width: 24n, height: 1n, depth: 1n, pitch: 24n, rows: 1n, src_pitch: 24n, src_rows: 1n }),
  ];
  t.is(await runOnce(t, x, g, chain, { edges: [edge(0, 1), edge(1, 2)] }), 0);
  const d = await read(x, dst, 32);
  t.deepEqual([...d.subarray(0, 24)], Array(24).fill(0x5a));
  t.deepEqual([...d.subarray(24)], Array(8).fill(0));
});

test('an event record node records the event, on a stream of the session', async (t) => {
  const x = await setup(t);
  const ev = async () => (await x.c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const [a, b] = [await ev(), await ev()];
  const stream = await x.c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] });
  t.is(stream.status, 0);
  t.is((await x.c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: a, stream: stream.value }] })).status, 0);
  const elapsed = () =>
    x.c.call(Cmd.EVENT_ELAPSED, { args: ['qcuda_args_event_elapsed', { start: a, end: b }], out: 'qcuda_out_event_elapsed' });
  t.is((await elapsed()).status, CudaErr.InvalidResourceHandle, 'b was never recorded');
  const g = await graphCreate(x);
  const e = await instantiate(x, g, [node({ type: QCUDA_GNODE_EVENT_RECORD, handle: b })]);
  t.is(e.status, 0);
  t.is((await launch(x, e.value, stream.value)).status, 0);
  t.is((await elapsed()).status, 0, 'the graph recorded b');
});

test('a WHILE whose value never changes fails the launch after a bound, and the session goes on', async (t) => {
  const x = await setup(t);
  const g = await graphCreate(x);
  const h = (await condHandle(x, g, 1)).value;
  const e = await instantiate(x, g, [cond(h, WHILE, 1), node({ type: QCUDA_GNODE_EMPTY, parent: 0 })]);
  t.is(e.status, 0);
  t.is((await launch(x, e.value)).status, 702, 'cudaErrorLaunchTimeout');
  // A large body meets the bound on the work of loop bodies long before a million iterations.
  const big = await instantiate(x, g, [
    cond(h, WHILE, 1),
    ...Array.from({ length: 200 }, () => node({ type: QCUDA_GNODE_EMPTY, parent: 0 })),
  ]);
  t.is((await launch(x, big.value)).status, 702);
  t.is((await x.c.malloc(16)).status, 0);
});

test('emu provider: WHILE bodies are bounded in iterations and in work per launch', async (t) => {
  const x = await new EmuProvider().openContext(0);
  const g = await x.graphCreate();
  const h = await x.graphCondHandle(g, 1, 1);
  const loop = async (body: GraphNodeSpec[]) =>
    x.graphLaunch(
      await x.graphInstantiate(g, {
        nodes: [{ parent: -1, body: 0, type: 'cond', handle: h, condType: WHILE, size: 1 }, ...body],
        edges: new Uint32Array(0),
      }),
      undefined,
    );
  const empty: GraphNodeSpec = { parent: 0, body: 0, type: 'empty' };
  let err = await t.throwsAsync(loop([empty]));
  t.is((err as CudaError).code, 702);
  t.regex(err!.message, /while node 0 still true after 1000000 iterations/);
  err = await t.throwsAsync(loop(Array(200).fill(empty)));
  t.regex(err!.message, /while bodies did more than \d+ units of work/);
  const buf = await x.malloc(1n << 20n);
  err = await t.throwsAsync(
    loop([{ parent: 0, body: 0, type: 'memset', dst: buf, pitch: 1n << 20n, value: 1, elem: 1, width: 1n << 20n, height: 1n }]),
  );
  t.regex(err!.message, /units of work/, 'bytes count too');
  await x.destroy();
});

test('hostile descriptions and handles are refused with a clear status, nothing left staged or held', async (t) => {
  const x = await setup(t);
  const s = x.session();
  const buf = await malloc(x, 64);
  const g = await graphCreate(x);
  const other = await graphCreate(x);
  const h = (await condHandle(x, g, 1)).value;
  const foreign = (await condHandle(x, other, 1)).value;
  const ok = memset(buf, 1, 8n);
  const held = s.objects.graphCount;

  // One at a time: each stages a description (a session may stage only a few at once).
  const cases: [string, () => Promise<Reply>, number][] = [
    ['more nodes than staged bytes', () => instantiate(x, g, [ok], { nodeCount: 2 }), CudaErr.InvalidValue],
    ['more edges than staged bytes', () => instantiate(x, g, [ok, ok], { edges: [edge(0, 1)], edgeCount: 2 }), CudaErr.InvalidValue],
    ['an edge backwards', () => instantiate(x, g, [ok, ok], { edges: [edge(1, 0)] }), CudaErr.InvalidValue],
    ['an edge to itself', () => instantiate(x, g, [ok, ok], { edges: [edge(1, 1)] }), CudaErr.InvalidValue],
    ['an edge past the nodes', () => instantiate(x, g, [ok, ok], { edges: [edge(0, 2)] }), CudaErr.InvalidValue],
    [
      'an edge across bodies',
      () =>
        instantiate(x, g, [cond(h, IF, 2), memset(buf, 1, 8n, { parent: 0, body: 0 }), memset(buf, 1, 8n, { parent: 0, body: 1 })], {
          edges: [edge(1, 2)],
        }),
      CudaErr.InvalidValue,
    ],
    [
      'an edge into a body',
      () => instantiate(x, g, [cond(h, IF, 1), memset(buf, 1, 8n, { parent: 0 })], { edges: [edge(0, 1)] }),
      CudaErr.InvalidValue,
    ],
    ['a parent that is no conditional node', () => instantiate(x, g, [ok, memset(buf, 1, 8n, { parent: 0 })]), CudaErr.InvalidValue],
    ['a parent after its child', () => instantiate(x, g, [memset(buf, 1, 8n, { parent: 1 }), cond(h, IF, 1)]), CudaErr.InvalidValue],
    ['a node its own parent', () => instantiate(x, g, [cond(h, IF, 1, { parent: 0 })]), CudaErr.InvalidValue],
    [
      "a body past the conditional's",
      () => instantiate(x, g, [cond(h, IF, 1), memset(buf, 1, 8n, { parent: 0, body: 1 })]),
      CudaErr.InvalidValue,
    ],
    ['a body of the graph itself', () => instantiate(x, g, [memset(buf, 1, 8n, { body: 1 })]), CudaErr.InvalidValue],
    ['a handle made on another graph', () => instantiate(x, g, [cond(foreign, IF, 1)]), CudaErr.InvalidValue],
    ['a made-up handle', () => instantiate(x, g, [cond(0x1234n, IF, 1)]), CudaErr.InvalidValue],
    ['a WHILE of 2 bodies', () => instantiate(x, g, [cond(h, WHILE, 2)]), CudaErr.InvalidValue],
    ['an IF of 3 bodies', () => instantiate(x, g, [cond(h, IF, 3)]), CudaErr.InvalidValue],
    ['a SWITCH of 0 bodies', () => instantiate(x, g, [cond(h, SWITCH, 0)]), CudaErr.InvalidValue],
    ['conditional type 3', () => instantiate(x, g, [cond(h, 3, 1)]), CudaErr.InvalidValue],
    ['a memset past its allocation', () => instantiate(x, g, [memset(buf, 1, 65n)]), CudaErr.InvalidValue],
    [
      'a memset of rows past its allocation',
      () => instantiate(x, g, [memset(buf, 1, 8n, { height: 3n, pitch: 32n })]),
      CudaErr.InvalidValue,
    ],
    ['a memset outside any allocation', () => instantiate(x, g, [memset(0x1000n, 1, 8n)]), CudaErr.InvalidValue],
    ['a memset elem of 3', () => instantiate(x, g, [memset(buf, 1, 2n, { elem: 3, pitch: 6n })]), CudaErr.InvalidValue],
    [
      'a memset pitch below its row',
      () => instantiate(x, g, [memset(buf, 1, 4n, { elem: 4, height: 2n, pitch: 8n })]),
      CudaErr.InvalidPitchValue,
    ],
    [
      'a memcpy source past its allocation',
      () =>
        instantiate(x, g, [
          node({
            type: QCUDA_GNODE_MEMCPY,
            dst: buf,
            src: buf + 60n,
            width: 8n,
            height: 1n,
            depth: 1n,
            pitch: 8n,
            rows: 1n,
            src_pitch: 8n,
            src_rows: 1n,
          }),
        ]),
      CudaErr.InvalidValue,
    ],
    [
      'a memcpy destination box past its allocation',
      () =>
        instantiate(x, g, [
          node({
            type: QCUDA_GNODE_MEMCPY,
            dst: buf,
            src: buf,
            width: 8n,
            height: 3n,
            depth: 1n,
            pitch: 32n,
            rows: 3n,
            src_pitch: 8n,
            src_rows: 3n,
          }),
        ]),
      CudaErr.InvalidValue,
    ],
    [
      'a memcpy with pitch below width',
      () =>
        instantiate(x, g, [
          node({
            type: QCUDA_GNODE_MEMCPY,
            dst: buf,
            src: buf + 32n,
            width: 8n,
            height: 2n,
            depth: 1n,
            pitch: 4n,
            rows: 2n,
            src_pitch: 8n,
            src_rows: 2n,
          }),
        ]),
      CudaErr.InvalidValue,
    ],
    [
      'a memcpy of 0 bytes',
      () =>
        instantiate(x, g, [
          node({
            type: QCUDA_GNODE_MEMCPY,
            dst: buf,
            src: buf,
            width: 0n,
            height: 1n,
            depth: 1n,
            pitch: 8n,
            rows: 1n,
            src_pitch: 8n,
            src_rows: 1n,
          }),
        ]),
      CudaErr.InvalidValue,
    ],
    [
      'a kernel of no function',
      () => instantiate(x, g, [node({ type: QCUDA_GNODE_KERNEL, handle: 0x4242n })], { params: new Uint8Array(8) }),
      CudaErr.InvalidResourceHandle,
    ],
    [
      'an event of no event',
      () => instantiate(x, g, [node({ type: QCUDA_GNODE_EVENT_RECORD, handle: 0x4242n })]),
      CudaErr.InvalidResourceHandle,
    ],
    ['unknown node type', () => instantiate(x, g, [node({ type: 99 })]), CudaErr.InvalidValue],
    ['node type 0', () => instantiate(x, g, [node({ type: 0 })]), CudaErr.InvalidValue],
    ['a staged size the command does not claim', () => instantiate(x, g, [ok], { size: BigInt(ok.length + 8) }), CudaErr.InvalidValue],
    ['a graph that does not exist', () => instantiate(x, 0x9999n, [ok]), CudaErr.InvalidValue],
    ['too many nodes', () => instantiate(x, g, [ok], { nodeCount: 0x7fffffff }), CudaErr.InvalidValue],
    [
      'an upload that was never staged',
      () =>
        x.c.call(Cmd.GRAPH_INSTANTIATE, {
          args: ['qcuda_args_graph_instantiate', { graph: g, upload_id: 0x777n, size: 8n, nodes: 0, edges: 0 }],
        }),
      CudaErr.InvalidValue,
    ],
    ['GRAPH_COND_HANDLE with flags 2', () => condHandle(x, g, 1, 2), CudaErr.InvalidValue],
    ['GRAPH_COND_HANDLE of no graph', () => condHandle(x, 0x9999n, 1), CudaErr.InvalidValue],
    ['GRAPH_LAUNCH of no exec', () => launch(x, 0x9999n), CudaErr.InvalidValue],
    ['GRAPH_DESTROY of no graph', () => handleCall(x, Cmd.GRAPH_DESTROY, 0x9999n), CudaErr.InvalidValue],
    ['GRAPH_EXEC_DESTROY of no exec', () => handleCall(x, Cmd.GRAPH_EXEC_DESTROY, 0x9999n), CudaErr.InvalidValue],
  ];
  for (const [what, call, want] of cases) t.is((await call()).status, want, what);
  t.is(s.modules.pendingUploads, 0, 'every staged description was taken');
  t.is(s.objects.graphCount, held, 'nothing new held');

  // A launch of a destroyed exec, on a stream that is not one, and a graph handle passed as an exec.
  const e = await instantiate(x, g, [ok]);
  t.is(e.status, 0);
  t.is((await launch(x, e.value, 0x5555n)).status, CudaErr.InvalidResourceHandle, 'a stream of no one');
  t.is((await launch(x, g)).status, CudaErr.InvalidValue, 'a graph is no exec');
  t.is((await handleCall(x, Cmd.GRAPH_EXEC_DESTROY, e.value)).status, 0);
  t.is((await launch(x, e.value)).status, CudaErr.InvalidValue, 'destroyed');
  t.is((await handleCall(x, Cmd.GRAPH_EXEC_DESTROY, e.value)).status, CudaErr.InvalidValue, 'destroyed twice');

  // A launch whose memory was freed meanwhile fails, and nothing else.
  const tmp = await malloc(x, 16);
  const e2 = await instantiate(x, g, [memset(tmp, 1, 16n)]);
  t.is((await x.c.free(tmp)).status, 0);
  t.is((await launch(x, e2.value)).status, CudaErr.InvalidValue, 'freed memory');

  // The session still works: a valid graph with a conditional runs.
  t.is(await runOnce(t, x, g, [cond(h, IF, 1), memset(buf, 0xcd, 8n, { parent: 0 })]), 0);
  t.deepEqual([...(await read(x, buf, 8))], Array(8).fill(0xcd));
  t.is(s.modules.pendingUploads, 0);
});

test('an executable graph outlives its graph: GRAPH_DESTROY, then it still launches', async (t) => {
  const x = await setup(t);
  const buf = await malloc(x, 16);
  const g = await graphCreate(x);
  const h = (await condHandle(x, g, 0)).value;
  const e = await instantiate(x, g, [
    cond(h, IF, 2),
    memset(buf, 0x10, 8n, { parent: 0, body: 0 }),
    memset(buf, 0x20, 8n, { parent: 0, body: 1 }),
  ]);
  t.is(e.status, 0);
  t.is((await handleCall(x, Cmd.GRAPH_DESTROY, g)).status, 0);
  t.is((await handleCall(x, Cmd.GRAPH_DESTROY, g)).status, CudaErr.InvalidValue, 'gone');
  t.is((await condHandle(x, g, 1)).status, CudaErr.InvalidValue, 'no handles on a destroyed graph');
  t.is((await launch(x, e.value)).status, 0);
  t.deepEqual([...(await read(x, buf, 8))], Array(8).fill(0x20), 'the else body');
  t.is(x.session().objects.graphCount, 1, 'the exec alone');
  t.is((await handleCall(x, Cmd.GRAPH_EXEC_DESTROY, e.value)).status, 0);
  t.is(x.session().objects.graphCount, 0);
  await x.c.close();
  t.is(x.provider.used, 0n);
});

test('emu provider: a graph holding a kernel fails its launch as launch() does, before any node runs', async (t) => {
  const x = await new EmuProvider().openContext(0);
  const buf = await x.malloc(8n);
  const g = await x.graphCreate();
  const spec = {
    nodes: [
      { parent: -1, body: 0, type: 'memset' as const, dst: buf, pitch: 8n, value: 0x61, elem: 1, width: 8n, height: 1n },
      {
        parent: -1,
        body: 0,
        type: 'kernel' as const,
        f: {},
        grid: [1, 1, 1] as const,
        block: [1, 1, 1] as const,
        sharedMem: 0,
        params: new Uint8Array(0),
        cluster: [1, 1, 1] as const,
      },
    ],
    edges: Uint32Array.of(0, 1),
  };
  const e = await x.graphInstantiate(g, spec);
  const want = await t.throwsAsync(async () => x.launch({}, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(0)));
  const got = await t.throwsAsync(x.graphLaunch(e, undefined));
  t.deepEqual([(got as CudaError).code, got?.message], [(want as CudaError).code, want?.message]);
  const back = new Uint8Array(8);
  await x.copyFromDevice([{ addr: 0n, len: 8, view: back }], buf, undefined);
  t.deepEqual([...back], Array(8).fill(0), 'the memset before it did not run');
  await x.destroy();
});
