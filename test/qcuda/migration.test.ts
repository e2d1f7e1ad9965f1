// The qcuda device's state saved and restored (migration/, issue 47) on the
// emu provider: a guest process's allocations, streams, events, a graph,
// VMM memory, an array and mapped guest memory are saved into a buffer,
// loaded into a fresh device over a fresh guest memory of the same contents
// (mapped by "QEMU" elsewhere), and the process goes on there with the same
// handles, getting the same bytes and answers as on the unmigrated device.
// Then bad states: truncated, corrupted, of another version, too large for
// the destination's bounds or quota: each refused, nothing left held.
import test, { type ExecutionContext } from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { VmLimits } from '../../backend/src/qcuda/quota/limits';
import { StateWriter } from '../../backend/src/qcuda/migration/format';
import { emuState } from '../../backend/src/qcuda/migration';
import { EmuProvider, emuProvider, type EmuContext, type EmuProviderOptions } from '../../backend/src/qcuda/providers/emu';
import {
  Cmd,
  encode,
  QCUDA_GNODE_MEMCPY,
  QCUDA_GNODE_MEMSET,
  QCUDA_GRAPH_TOP,
  QCUDA_VMM_ACCESS_RW,
  QCUDA_VMM_GRANULARITY,
} from '../../backend/src/qcuda/proto';
import type { StateSink, StateSource } from '../../backend/src/vhost-user';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';
import { started } from '../helpers';
import { QcudaClient, type Reply } from './client';

const G = BigInt(QCUDA_VMM_GRANULARITY);
/** Where the destination's "QEMU" maps guest RAM: elsewhere than the source's (guest-memory.ts FAKE_VA_BASE). */
const OTHER_VA = 0x7e00_0000_0000n;

class BufferSink implements StateSink {
  readonly chunks: Uint8Array[] = [];
  async write(c: Uint8Array): Promise<void> {
    this.chunks.push(c.slice());
  }
  get bytes(): Uint8Array {
    return new Uint8Array(Buffer.concat(this.chunks));
  }
}

function source(bytes: Uint8Array): StateSource {
  let at = 0;
  return {
    async read(n) {
      if (at + n > bytes.length) throw new RangeError(`read of ${n} bytes at ${at} of ${bytes.length}`);
      at += n;
      return bytes.slice(at - n, at);
    },
    async atEnd() {
      return at === bytes.length;
    },
  };
}

interface Machine {
  dev: QcudaDevice;
  c: QcudaClient;
  mem: GuestMemory;
  provider: EmuProvider;
}

async function machine(t: ExecutionContext, o: { mem?: GuestMemory; limits?: Partial<VmLimits>; devices?: number } = {}): Promise<Machine> {
  const mem = o.mem ?? new GuestMemory();
  const provider = o.devices
    ? (guestView: EmuProviderOptions['guestView']) => new EmuProvider({ guestView, devices: o.devices })
    : emuProvider;
  const dev = new QcudaDevice({ provider, queues: 2, limits: o.limits, state: emuState });
  const pair = await started(t, dev, { size: 64 }, mem);
  return { dev, c: new QcudaClient(pair.fe, 2, 16), mem, provider: dev.provider as EmuProvider };
}

/** A fresh guest memory with mem's contents (and allocator), mapped elsewhere by its "QEMU". */
function copyMemory(mem: GuestMemory): GuestMemory {
  const out = new GuestMemory(
    mem.regions.map((r) => ({ gpa: r.gpa, size: Number(r.size) })),
    OTHER_VA,
  );
  for (const r of mem.regions) out.bytes(r.gpa, Number(r.size)).set(mem.bytes(r.gpa, Number(r.size)));
  out.rewind(mem.mark());
  return out;
}

async function ok(t: ExecutionContext, p: Promise<Reply>, what: string): Promise<bigint> {
  const r = await p;
  t.is(r.status, 0, what);
  return r.value;
}

const pattern = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * seed + 11) & 0xff);

async function write(m: Machine, ptr: bigint, bytes: Uint8Array): Promise<void> {
  const gpa = m.mem.alloc(bytes.length, 16);
  m.mem.bytes(gpa, bytes.length).set(bytes);
  if ((await m.c.htod(ptr, gpa, bytes.length)) !== 0) throw new Error('MEMCPY_HTOD failed');
}

async function readBytes(m: Machine, ptr: bigint, size: number): Promise<{ status: number; bytes: number[] }> {
  const gpa = m.mem.alloc(size, 16);
  const status = await m.c.dtoh(gpa, ptr, size);
  return { status, bytes: [...m.mem.bytes(gpa, size)] };
}

/** What the process made before the migration, by handle and address. */
interface Made {
  a: bigint;
  b: bigint;
  stream: bigint;
  e1: bigint;
  e2: bigint;
  exec: bigint;
  va: bigint;
  vmm: bigint;
  array: bigint;
  mapped: bigint;
  mappedGpa: bigint;
}

const MAPPED = 8192;

/** The guest process's first half: everything it makes, filled. */
async function before(t: ExecutionContext, m: Machine): Promise<Made> {
  const { c } = m;
  await c.open();
  const a = await ok(t, c.malloc(1 << 16), 'malloc a');
  const b = await ok(t, c.malloc(4096), 'malloc b');
  await write(m, a, pattern(1 << 16, 7));
  await write(m, b, pattern(4096, 3));
  const stream = await ok(t, c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 1, priority: -3 }] }), 'stream');
  const e1 = await ok(t, c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] }), 'event');
  const e2 = await ok(t, c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] }), 'event');
  await ok(t, c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: e1, stream }] }), 'record');
  await ok(t, c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: e2, stream }] }), 'record');
  // A graph: a memset of b's first 256 bytes, then a copy of a's 512..1024 after them.
  const graph = await ok(t, c.call(Cmd.GRAPH_CREATE), 'graph');
  const node = (o: Record<string, number | bigint>) => encode('qcuda_graph_node', { parent: QCUDA_GRAPH_TOP, ...o });
  const nodes = Buffer.concat([
    node({ type: QCUDA_GNODE_MEMSET, dst: b, value: 0x5c, width: 256n, height: 1n, pitch: 256n, elem: 1 }),
    node({
      type: QCUDA_GNODE_MEMCPY,
      dst: b + 256n,
      src: a + 512n,
      width: 512n,
      height: 1n,
      depth: 1n,
      pitch: 512n,
      rows: 1n,
      src_pitch: 512n,
      src_rows: 1n,
    }),
    encode('qcuda_graph_edge', { from: 0, to: 1 }),
  ]);
  const gpa = m.mem.alloc(nodes.length, 16);
  m.mem.bytes(gpa, nodes.length).set(nodes);
  await ok(
    t,
    c.call(Cmd.MODULE_UPLOAD, {
      args: ['qcuda_args_module_upload', { upload_id: 77n, size: BigInt(nodes.length) }],
      to: [{ gpa, len: nodes.length }],
      dataOffset: 0n,
      dataLen: BigInt(nodes.length),
    }),
    'upload',
  );
  const exec = await ok(
    t,
    c.call(Cmd.GRAPH_INSTANTIATE, {
      args: ['qcuda_args_graph_instantiate', { graph, upload_id: 77n, size: BigInt(nodes.length), nodes: 2, edges: 1 }],
    }),
    'instantiate',
  );
  // VMM: 4 granules reserved, 2 mapped with access, filled.
  const va = await ok(
    t,
    c.call(Cmd.VMM_RESERVE, { args: ['qcuda_args_vmm_reserve', { size: 4n * G, alignment: 0n, addr: 0n, flags: 0n }] }),
    'reserve',
  );
  const vmm = await ok(t, c.call(Cmd.VMM_CREATE, { args: ['qcuda_args_vmm_create', { size: 2n * G, flags: 0n }] }), 'create');
  await ok(
    t,
    c.call(Cmd.VMM_MAP, { args: ['qcuda_args_vmm_map', { ptr: va + G, size: 2n * G, offset: 0n, handle: vmm, flags: 0n }] }),
    'map',
  );
  await ok(
    t,
    c.call(Cmd.VMM_SET_ACCESS, { args: ['qcuda_args_vmm_access', { ptr: va + G, size: 2n * G, device: 0, prot: QCUDA_VMM_ACCESS_RW }] }),
    'access',
  );
  await write(m, va + G + 1000n, pattern(5000, 13));
  // An array (2D, 64 x 8 of 4-byte floats), its bytes set as a kernel would.
  const array = await ok(
    t,
    c.call(Cmd.ARRAY_CREATE, {
      args: ['qcuda_args_array_create', { width: 64n, height: 8n, depth: 0n, format: 0x20, channels: 1, flags: 0 }],
    }),
    'array',
  );
  arrayBytes(m, array).set(pattern(64 * 8 * 4, 5));
  // Guest memory mapped for the device: its device pointer is where this "QEMU" maps it.
  const mappedGpa = m.mem.alloc(MAPPED, 4096);
  m.mem.bytes(mappedGpa, MAPPED).set(pattern(MAPPED, 17));
  const mapped = await ok(t, c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: mappedGpa, size: BigInt(MAPPED) }] }), 'host map');
  return { a, b, stream, e1, e2, exec, va, vmm, array, mapped, mappedGpa };
}

/** The array's bytes in the provider (no copy command needed to look). */
function arrayBytes(m: Machine, h: bigint): Uint8Array {
  const s = [...m.dev.sessions.values()][0];
  const x = s.openedContext as EmuContext;
  return x.parts.arrays.bytesOf(s.objects.array(h).ref);
}

/** A mipmap level's bytes in the provider (the session's level handle h, of its context on device 1). */
function levelBytes(m: Machine, h: bigint): Uint8Array {
  const s = [...m.dev.sessions.values()].find((x) => x.contextCount === 2)!;
  const x = s.openedContext as EmuContext;
  return x.parts.arrays.bytesOf(s.objects.array(h).ref);
}

/** The process's second half: every answer and byte it gets, to compare. */
async function after(t: ExecutionContext, m: Machine, x: Made): Promise<unknown[]> {
  const { c } = m;
  const out: unknown[] = [];
  const read = async (ptr: bigint, size: number) => {
    const r = await readBytes(m, ptr, size);
    t.is(r.status, 0, `read of 0x${ptr.toString(16)}`);
    return r;
  };
  const call = async (cmd: number, o: Parameters<QcudaClient['call']>[1]) => {
    const r = await c.call(cmd, o);
    t.is(r.status, 0, `command ${cmd}`);
    out.push([cmd, r.status, r.value]);
    return r;
  };
  out.push(await read(x.a, 1 << 16));
  await call(Cmd.GRAPH_LAUNCH, { args: ['qcuda_args_graph_launch', { exec: x.exec, stream: x.stream }] });
  out.push(await read(x.b, 4096));
  await call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: x.stream }] });
  await call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: x.e1 }] });
  const el = await call(Cmd.EVENT_ELAPSED, {
    args: ['qcuda_args_event_elapsed', { start: x.e1, end: x.e2 }],
    out: 'qcuda_out_event_elapsed',
  });
  t.is(el.status, 0, 'elapsed time between events recorded before the migration');
  out.push(await read(x.va + G, 8192));
  out.push((await readBytes(m, x.va, 16)).status); // reserved, unmapped: not memory of the process
  await call(Cmd.VMM_SIZE, { args: ['qcuda_args_handle', { handle: x.vmm }] });
  out.push([...arrayBytes(m, x.array)]);
  // Mapped guest memory, through its old device pointer: the destination's guest RAM at the same gpa.
  out.push(await read(x.mapped, MAPPED));
  await call(Cmd.MEMCPY_DTOD, { args: ['qcuda_args_memcpy', { dst: x.mapped + 100n, src: x.a, size: 300n, stream: 0n, async: 0 }] });
  out.push([...m.mem.bytes(x.mappedGpa, MAPPED)]);
  await call(Cmd.HOST_UNMAP, { args: ['qcuda_args_ptr', { ptr: x.mapped }] });
  // New objects get the handles the unmigrated process would.
  await call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] });
  await call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] });
  await call(Cmd.FREE, { args: ['qcuda_args_ptr', { ptr: x.a }] });
  await call(Cmd.VMM_UNMAP, { args: ['qcuda_args_vmm_range', { ptr: x.va + G, size: 2n * G }] });
  await call(Cmd.VMM_RELEASE, { args: ['qcuda_args_handle', { handle: x.vmm }] });
  await call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: x.array }] });
  out.push(m.dev.vm.quota.used, m.provider.used);
  await call(Cmd.SESSION_CLOSE, {});
  out.push(m.dev.vm.quota.used, m.provider.used);
  return out;
}

async function saved(t: ExecutionContext, limits?: Partial<VmLimits>): Promise<{ src: Machine; made: Made; state: Uint8Array }> {
  const src = await machine(t, { limits });
  const made = await before(t, src);
  const sink = new BufferSink();
  await src.dev.saveState!(sink);
  return { src, made, state: sink.bytes };
}

test('a process migrated to a fresh device and guest memory goes on with the same handles, bytes and answers as unmigrated', async (t) => {
  const { src, made, state } = await saved(t, { deviceMemory: 256n << 20n });
  const dst = await machine(t, { mem: copyMemory(src.mem), limits: { deviceMemory: 256n << 20n } });
  await dst.dev.loadState!(source(state));
  dst.c.session = src.c.session;
  t.is(dst.dev.vm.quota.used, src.dev.vm.quota.used, 'the quota counts what the source counted');
  t.is(dst.provider.used, src.provider.used, 'the same device memory in use');
  const there = await after(t, dst, made);
  const here = await after(t, src, made);
  t.deepEqual(there, here);
  t.is(dst.dev.vm.quota.used, 0n, 'everything given back at the close');
  t.is(dst.provider.used, 0n);
});

test("a state saved when emu was called host loads, and the process goes on; another provider's is refused", async (t) => {
  const { src, made, state } = await saved(t);
  const { desc, blobs } = parse(state);
  t.is(desc.provider, 'emu', 'saved under the name it has now');
  const load = async (provider: string) => {
    const dst = await machine(t, { mem: copyMemory(src.mem) });
    await dst.dev.loadState!(source(await forge({ ...desc, provider }, blobs)));
    dst.c.session = src.c.session;
    return dst;
  };
  const there = await after(t, await load('host'), made);
  t.deepEqual(there, await after(t, src, made));
  t.regex(
    await refused(t, src, await forge({ ...desc, provider: 'cuda' }, blobs)),
    /made by the cuda provider: this backend runs the emu provider/,
  );
});

test('the save changes nothing: the source goes on after it', async (t) => {
  const { src, made } = await saved(t);
  t.is(src.dev.sessions.size, 1);
  const again = await after(t, src, made);
  t.true(again.length > 0, 'the source goes on after its save');
});

/** A second device's objects of the first session, and a second session with IPC and VMM sharing: made, then every answer after. */
async function twoDevices(
  t: ExecutionContext,
  m: Machine,
  other: QcudaClient,
  x?: {
    p: bigint;
    q: bigint;
    array: bigint;
    surf: bigint;
    stream: bigint;
    mip: bigint;
    level: bigint;
    tex: bigint;
    handle: object;
    at: bigint;
    evHandle: object;
    opened: bigint;
    shared: bigint;
    token: object;
    imported: bigint;
    va: bigint;
  },
) {
  const { c } = m;
  const out: unknown[] = [];
  const call = async (cl: QcudaClient, cmd: number, o: Parameters<QcudaClient['call']>[1]) => {
    const r = await cl.call(cmd, o);
    t.is(r.status, 0, `command ${cmd}`);
    out.push([cmd, r.value]);
    return r.value;
  };
  if (!x) {
    await call(c, Cmd.SET_DEVICE, { args: ['qcuda_args_device', { device: 1 }] });
    const p = (await c.malloc(4096)).value;
    await write(m, p, pattern(4096, 23));
    const stream = await call(c, Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: -1 }] });
    const array = await call(c, Cmd.ARRAY_CREATE, {
      args: ['qcuda_args_array_create', { width: 16n, height: 4n, depth: 0n, format: 0x01, channels: 4, flags: 2 }],
    });
    const surf = await call(c, Cmd.SURF_CREATE, { args: ['qcuda_args_handle', { handle: array }] });
    // A mipmapped array of 3 levels, level 1 asked for, a texture of it; its bytes set as a kernel would.
    const mip = await call(c, Cmd.MIPMAP_CREATE, {
      args: ['qcuda_args_mipmap_create', { width: 32n, height: 8n, depth: 0n, format: 0x01, channels: 1, flags: 0, levels: 3 }],
    });
    const level = await call(c, Cmd.MIPMAP_LEVEL, { args: ['qcuda_args_mipmap_level', { handle: mip, level: 1 }] });
    levelBytes(m, level).set(pattern(16 * 4, 31));
    const tex = await call(c, Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', { res_type: 1, res: mip }] });
    await other.open();
    const q = (await other.malloc(1024)).value;
    const m2 = { ...m, c: other };
    await write(m2, q, pattern(1024, 29));
    // IPC: the second session opens the first's allocation p and its interprocess event.
    const handle = (await c.call(Cmd.IPC_GET, { args: ['qcuda_args_ptr', { ptr: p }], out: 'qcuda_ipc_handle' })).out!;
    const at = await call(other, Cmd.IPC_OPEN, { args: ['qcuda_ipc_handle', handle as never] });
    const ev = await call(c, Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0x6 }] });
    const evHandle = (await c.call(Cmd.IPC_EVENT_GET, { args: ['qcuda_args_handle', { handle: ev }], out: 'qcuda_ipc_handle' })).out!;
    const opened = await call(other, Cmd.IPC_EVENT_OPEN, { args: ['qcuda_ipc_handle', evHandle as never] });
    // VMM sharing: the first session exports memory, the second imports and maps it.
    const shared = await call(c, Cmd.VMM_CREATE, { args: ['qcuda_args_vmm_create', { size: G, flags: 0n }] });
    const token = (await c.call(Cmd.VMM_EXPORT, { args: ['qcuda_args_handle', { handle: shared }], out: 'qcuda_ipc_handle' })).out!;
    const imported = await call(other, Cmd.VMM_IMPORT, { args: ['qcuda_ipc_handle', token as never] });
    const va = await call(other, Cmd.VMM_RESERVE, { args: ['qcuda_args_vmm_reserve', { size: G, alignment: 0n, addr: 0n, flags: 0n }] });
    await call(other, Cmd.VMM_MAP, { args: ['qcuda_args_vmm_map', { ptr: va, size: G, offset: 0n, handle: imported, flags: 0n }] });
    await call(other, Cmd.VMM_SET_ACCESS, { args: ['qcuda_args_vmm_access', { ptr: va, size: G, device: 0, prot: QCUDA_VMM_ACCESS_RW }] });
    await write(m2, va + 10n, pattern(100, 41));
    return { p, q, array, surf, stream, mip, level, tex, handle, at, evHandle, opened, shared, token, imported, va };
  }
  out.push(await readBytes(m, x.p, 4096), await readBytes({ ...m, c: other }, x.q, 1024));
  // The opening reaches p's bytes; writes through it are p's; closed and opened again by its handle.
  out.push(await readBytes({ ...m, c: other }, x.at + 100n, 200));
  await write({ ...m, c: other }, x.at, pattern(64, 37));
  out.push(await readBytes(m, x.p, 128));
  await call(other, Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: x.opened }] });
  await call(other, Cmd.IPC_CLOSE, { args: ['qcuda_args_ptr', { ptr: x.at }] });
  await call(other, Cmd.IPC_OPEN, { args: ['qcuda_ipc_handle', x.handle as never] });
  await call(other, Cmd.IPC_EVENT_OPEN, { args: ['qcuda_ipc_handle', x.evHandle as never] });
  // The import still maps the exporter's memory; imported again by its token, then the owner's release unmaps it.
  out.push(await readBytes({ ...m, c: other }, x.va, 128));
  await call(other, Cmd.VMM_SIZE, { args: ['qcuda_args_handle', { handle: x.imported }] });
  await call(other, Cmd.VMM_IMPORT, { args: ['qcuda_ipc_handle', x.token as never] });
  await call(c, Cmd.VMM_RELEASE, { args: ['qcuda_args_handle', { handle: x.shared }] });
  out.push((await readBytes({ ...m, c: other }, x.va, 16)).status);
  await call(c, Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: x.stream }] });
  await call(c, Cmd.SURF_DESTROY, { args: ['qcuda_args_handle', { handle: x.surf }] });
  out.push([...levelBytes(m, x.level)]);
  await call(c, Cmd.MIPMAP_LEVEL, { args: ['qcuda_args_mipmap_level', { handle: x.mip, level: 1 }] });
  await call(c, Cmd.MIPMAP_LEVEL, { args: ['qcuda_args_mipmap_level', { handle: x.mip, level: 2 }] });
  await call(c, Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: x.tex }] });
  await call(c, Cmd.MIPMAP_DESTROY, { args: ['qcuda_args_handle', { handle: x.mip }] });
  await call(c, Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: x.array }] });
  await call(c, Cmd.FREE, { args: ['qcuda_args_ptr', { ptr: x.p }] });
  await call(other, Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] });
  await call(other, Cmd.SESSION_CLOSE, {});
  await call(c, Cmd.SESSION_CLOSE, {});
  out.push(m.dev.vm.quota.used, m.provider.used);
  return out;
}

test('two sessions, one of them on two devices, migrate together', async (t) => {
  const src = await machine(t, { devices: 2 });
  await before(t, src);
  const other = new QcudaClient(src.c.fe, 2, 8);
  const made = (await twoDevices(t, src, other)) as Exclude<Awaited<ReturnType<typeof twoDevices>>, unknown[]>;
  const sink = new BufferSink();
  await src.dev.saveState!(sink);
  const dst = await machine(t, { mem: copyMemory(src.mem), devices: 2 });
  await dst.dev.loadState!(source(sink.bytes));
  t.is(dst.dev.sessions.size, 2);
  dst.c.session = src.c.session;
  const dstOther = new QcudaClient(dst.c.fe, 2, 8);
  dstOther.session = other.session;
  t.is(dst.dev.vm.quota.used, src.dev.vm.quota.used);
  const there = await twoDevices(t, dst, dstOther, made);
  const here = await twoDevices(t, src, other, made);
  t.deepEqual(there, here);
  t.is(dst.dev.vm.quota.used, 0n);
  t.is(dst.provider.used, 0n);
});

/** Loads state into a fresh device: the error; the destination holds nothing after. */
async function refused(t: ExecutionContext, src: Machine, state: Uint8Array, limits?: Partial<VmLimits>): Promise<string> {
  const dst = await machine(t, { mem: copyMemory(src.mem), limits });
  const e = await t.throwsAsync(dst.dev.loadState!(source(state)));
  t.is(dst.dev.sessions.size, 0, 'no session made');
  t.is(dst.dev.vm.quota.used, 0n, 'no quota held');
  t.is(dst.provider.used, 0n, 'no device memory held');
  t.is(dst.dev.vm.contexts.used, 0n, 'no context held');
  return e?.message ?? '';
}

test('a truncated state is refused, wherever it ends, and nothing is left held', async (t) => {
  const { src, state } = await saved(t);
  for (const n of [0, 7, 15, 200, state.length - 40000, state.length - 33, state.length - 1])
    t.regex(await refused(t, src, state.subarray(0, n)), /truncated|corrupted/, `cut at ${n}`);
});

test('a corrupted state is refused: flipped bytes, bytes after its end, a huge description length', async (t) => {
  const { src, state } = await saved(t);
  for (const at of [20, 200, state.length - 5000, state.length - 10]) {
    const bad = state.slice();
    bad[at] ^= 0x40;
    t.regex(await refused(t, src, bad), /corrupted/, `byte ${at} flipped`);
  }
  t.regex(await refused(t, src, Buffer.concat([state, new Uint8Array(1)])), /after the end/);
  const huge = state.slice();
  new DataView(huge.buffer).setUint32(12, 0xffffffff, true);
  t.regex(await refused(t, src, huge), /description of 4294967295 bytes/);
  const magic = state.slice();
  magic[0] = 0;
  t.regex(await refused(t, src, magic), /bad magic/);
});

test('a state of another version is refused', async (t) => {
  const { src, state } = await saved(t);
  const other = state.slice();
  new DataView(other.buffer).setUint32(8, 2, true);
  t.regex(await refused(t, src, other), /version 2: this backend reads version 1 only/);
});

test('a destination whose quota is below what the state uses refuses it', async (t) => {
  const { src, state } = await saved(t);
  t.regex(await refused(t, src, state, { deviceMemory: 64n << 10n }), /quota has \d+ left/);
});

/** The stream's description and blobs, to forge states that pass the hash. */
function parse(state: Uint8Array): { desc: Record<string, unknown>; blobs: Uint8Array[] } {
  const v = new DataView(state.buffer, state.byteOffset);
  const len = v.getUint32(12, true);
  const desc = JSON.parse(Buffer.from(state.subarray(16, 16 + len)).toString()) as Record<string, unknown>;
  const blobs: Uint8Array[] = [];
  for (let at = 16 + len; at < state.length - 32;) {
    const n = Number(v.getBigUint64(at, true));
    blobs.push(state.slice(at + 8, at + 8 + n));
    at += 8 + n;
  }
  return { desc, blobs };
}

async function forge(desc: unknown, blobs: Uint8Array[]): Promise<Uint8Array> {
  const sink = new BufferSink();
  const w = new StateWriter(sink);
  await w.header(desc);
  for (const b of blobs) await w.blob([b]);
  await w.end();
  return sink.bytes;
}

test('forged states with a valid hash: counts past the bounds, huge sizes, a taken handle, are refused with nothing held', async (t) => {
  const { src, state } = await saved(t);
  const { desc, blobs } = parse(state);
  const session = () => (desc.sessions as Record<string, unknown>[])[0];
  const edit = async (f: (s: Record<string, unknown>) => void): Promise<string> => {
    const copy = JSON.parse(JSON.stringify(desc)) as typeof desc;
    f((copy.sessions as Record<string, unknown>[])[0]);
    return refused(t, src, await forge(copy, blobs), { processStreams: 4 });
  };
  t.regex(await edit((s) => (s.streams = Array(5).fill((s.streams as unknown[])[0]))), /5 streams, more than the 4/);
  t.regex(await edit((s) => ((s.allocs as Record<string, unknown>[])[0].size = '0xffffffffffff')), /outside/);
  t.regex(await edit((s) => ((s.events as Record<string, unknown>[])[1].h = (s.events as Record<string, unknown>[])[0].h)), /twice/);
  t.regex(await edit((s) => (s.id = 'zz')), /not a 64-bit number/);
  // The last step's check, after every object was made: all of it is given back.
  t.regex(await edit((s) => (s.allocated = '0x1')), /held 1/);
  t.truthy(session());
});

test('what cannot be carried fails the save and leaves the source as it was: the provider, an upload in progress', async (t) => {
  const src = await machine(t);
  const made = await before(t, src);
  const gpa = src.mem.alloc(64, 16);
  await ok(
    t,
    src.c.call(Cmd.MODULE_UPLOAD, {
      args: ['qcuda_args_module_upload', { upload_id: 5n, size: 128n }],
      to: [{ gpa, len: 64 }],
      dataOffset: 0n,
      dataLen: 64n,
    }),
    'half an upload',
  );
  await t.throwsAsync(src.dev.saveState!(new BufferSink()), { message: /not yet carried: a module upload/ });
  Object.defineProperty(src.provider, 'name', { value: 'cuda' });
  await t.throwsAsync(src.dev.saveState!(new BufferSink()), { message: /not yet carried: the cuda provider/ });
  Object.defineProperty(src.provider, 'name', { value: 'emu' });
  const out = await after(t, src, made);
  t.is(out.at(-2), 0n, 'the source goes on and gives everything back');
});
