// The qcuda device with the emu provider, driven through the test frontend
// the way the guest driver drives it: sessions, memory, copies of many sizes
// in chunks over all queues, streams and events, quotas, isolation between
// sessions, and refusal of malformed requests.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { VmLimits } from '../../backend/src/qcuda/quota/limits';
import type { ModuleCache } from '../../backend/src/qcuda/modules/module-cache';
import { emuProvider, type EmuProvider } from '../../backend/src/qcuda/providers/emu';
import {
  Cmd,
  decode,
  encode,
  LAYOUT,
  QCUDA_CONFIG_SIZE,
  QCUDA_MAGIC,
  QCUDA_MAX_ARGS,
  QCUDA_MAX_EXTENTS,
  QCUDA_MAX_MODULE,
  QCUDA_MAX_NAME,
  QCUDA_PROTO_VERSION,
  Status,
  type StructName,
} from '../../backend/src/qcuda/proto';
import { MAX_PENDING_UPLOADS } from '../../backend/src/qcuda/session/session-modules';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';
import { prng, randomBytes, started, until } from '../helpers';
import { QcudaClient } from './client';

const MIB = 1 << 20;

async function setup(t: ExecutionContext, o: { memoryLimit?: bigint; mem?: GuestMemory; limits?: Partial<VmLimits> } = {}) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 4, memoryLimit: o.memoryLimit, limits: o.limits });
  const pair = await started(t, dev, { size: 256 }, o.mem);
  const c = new QcudaClient(pair.fe);
  await c.open();
  return { dev, c, fe: pair.fe, provider: dev.provider as EmuProvider };
}

test('config space carries magic, version and queue count', async (t) => {
  const { fe } = await setup(t);
  const cfg = decode('virtio_qcuda_config', (await fe.getConfig(0, QCUDA_CONFIG_SIZE)).slice());
  t.is(cfg.magic, QCUDA_MAGIC);
  t.is(cfg.proto_version, QCUDA_PROTO_VERSION);
  t.is(cfg.num_queues, 4);
  t.is(cfg.capabilities, 0n, 'the emu provider has no GPU');
});

test('NOP echoes its payload and names the queue, on every queue, without a session', async (t) => {
  const { dev, c } = await setup(t);
  for (let q = 0; q < 4; q++) {
    const r = await c.call(Cmd.NOP, { rawArgs: new Uint8Array([q, 9, 8, 7]), session: 0n, queue: q, outLen: 4 });
    t.is(r.status, 0);
    t.is(r.value, BigInt(q));
    t.is(r.len, 4);
  }
  t.true(dev.served.every((n) => n >= 1));
});

test('HELLO checks the protocol version; device properties and memory info', async (t) => {
  const { c } = await setup(t);
  const bad = await c.call(Cmd.HELLO, { args: ['qcuda_args_hello', { proto_version: 1, cuda_version: 13000 }], out: 'qcuda_out_hello' });
  t.is(bad.status, Status.VERSION);
  t.is(bad.value, BigInt(QCUDA_PROTO_VERSION), 'the backend names its own version');
  const ok = await c.call(Cmd.HELLO, {
    args: ['qcuda_args_hello', { proto_version: QCUDA_PROTO_VERSION, cuda_version: 13000 }],
    out: 'qcuda_out_hello',
  });
  t.is(ok.status, 0);
  t.is(ok.out!.device_count, 1);
  const p = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 0 }], out: 'qcuda_out_device_props' });
  t.is(p.status, 0);
  t.regex(Buffer.from(p.out!.name as Uint8Array).toString('latin1'), /^qcuda host-memory device \(no GPU\)\0/);
  t.is((p.out!.attrs as Uint32Array).length, 160);
  t.is(
    (await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 1 }], out: 'qcuda_out_device_props' })).status,
    CudaErr.InvalidDevice,
  );
  t.is((await c.call(Cmd.SET_DEVICE, { args: ['qcuda_args_device', { device: 3 }] })).status, CudaErr.InvalidDevice);
  const info = await c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' });
  t.is(info.out!.total, 4n << 30n);
});

test('copies of many sizes and alignments round-trip byte for byte, chunked over all queues', async (t) => {
  const mem = new GuestMemory([
    { gpa: 0n, size: 96 * MIB },
    { gpa: 1n << 32n, size: 160 * MIB },
  ]);
  const { c, fe } = await setup(t, { mem });
  const rnd = prng(42);
  const scratch = fe.mem.mark();
  for (const [size, misalign] of [
    [1, 0],
    [1, 3],
    [4095, 1],
    [4097, 7],
    [3 * 4096, 100],
    [MIB + 13, 5],
    [17 * MIB + 1, 3],
    [70 * MIB, 1],
  ]) {
    fe.mem.rewind(scratch);
    const src = fe.mem.alloc(size + misalign, 4096, 1) + BigInt(misalign);
    const dst = fe.mem.alloc(size + misalign, 4096, 1) + BigInt(misalign);
    const data = size > 4 * MIB ? fe.mem.bytes(src, size) : randomBytes(rnd, size);
    if (size > 4 * MIB) for (let i = 0; i < size; i += 4093) data[i] = (i * 7) & 0xff;
    else fe.mem.bytes(src, size).set(data);
    const m = await c.malloc(size);
    t.is(m.status, 0);
    t.is(await c.htod(m.value, src, size), 0, `htod ${size}`);
    t.is(await c.dtoh(dst, m.value, size), 0, `dtoh ${size}`);
    t.true(Buffer.compare(fe.mem.bytes(dst, size), fe.mem.bytes(src, size)) === 0, `bytes of ${size}+${misalign}`);
    t.is((await c.free(m.value)).status, 0);
  }
});

test('memset, device-to-device copies (overlapping too) and a copy at an offset inside an allocation', async (t) => {
  const { c, fe } = await setup(t);
  const a = (await c.malloc(8192)).value;
  const set = await c.call(Cmd.MEMSET, { args: ['qcuda_args_memset', { dst: a + 100n, size: 50n, stream: 0n, value: 0x1ab, async: 0 }] });
  t.is(set.status, 0);
  const out = fe.mem.alloc(8192);
  t.is(await c.dtoh(out, a, 8192), 0);
  const got = fe.mem.bytes(out, 8192);
  t.is(got[99], 0);
  t.is(got[100], 0xab, 'only the low byte of the value');
  t.is(got[149], 0xab);
  t.is(got[150], 0);
  const src = fe.mem.alloc(16);
  fe.mem.bytes(src, 16).set([...Array(16).keys()]);
  t.is(await c.htod(a + 4000n, src, 16), 0);
  const d2d = await c.call(Cmd.MEMCPY_DTOD, {
    args: ['qcuda_args_memcpy', { dst: a + 4004n, src: a + 4000n, size: 8n, stream: 0n, async: 0 }],
  });
  t.is(d2d.status, 0);
  t.is(await c.dtoh(out, a + 4000n, 16), 0);
  t.deepEqual(Array.from(fe.mem.bytes(out, 16)), [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 12, 13, 14, 15]);
});

test('every pointer is checked: outside allocations, past their end, freed, double free, zero sizes', async (t) => {
  const { c, fe } = await setup(t);
  const a = (await c.malloc(4096)).value;
  const g = fe.mem.alloc(8192);
  t.is(await c.htod(a, g, 4097), CudaErr.InvalidValue, 'one byte past the end');
  t.is(await c.htod(a + 1n, g, 4096), CudaErr.InvalidValue, 'shifted past the end');
  t.is(await c.dtoh(g, a - 1n, 1), CudaErr.InvalidValue, 'one byte before');
  t.is(await c.dtoh(g, 0x1234n, 16), CudaErr.InvalidValue, 'a random address');
  t.is((await c.free(a + 8n)).status, CudaErr.InvalidValue, 'free of an interior pointer');
  t.is((await c.free(a)).status, 0);
  t.is((await c.free(a)).status, CudaErr.InvalidValue, 'double free');
  t.is(await c.dtoh(g, a, 16), CudaErr.InvalidValue, 'use after free');
  t.is((await c.free(0n)).status, 0, 'cudaFree(NULL)');
  const z = await c.malloc(0);
  t.is(z.status, 0);
  t.is(z.value, 0n, 'cudaMalloc(0) gives NULL');
  const huge = await c.malloc(1n << 60n);
  t.is(huge.status, CudaErr.MemoryAllocation);
});

test("sessions are isolated: another process's pointers and handles are unknown to it", async (t) => {
  const { c, fe, dev } = await setup(t);
  const other = new QcudaClient(fe);
  await other.open();
  t.not(other.session, c.session);
  const a = (await c.malloc(4096)).value;
  const s = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const e = (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags: 0 }] })).value;
  const g = fe.mem.alloc(4096);
  t.is(await other.dtoh(g, a, 16), CudaErr.InvalidValue, "read another session's memory");
  t.is(await other.htod(a, g, 16), CudaErr.InvalidValue, 'write it');
  t.is((await other.free(a)).status, CudaErr.InvalidValue, 'free it');
  t.is((await other.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle: s }] })).status, CudaErr.InvalidResourceHandle);
  t.is(
    (await other.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: e, stream: 0n }] })).status,
    CudaErr.InvalidResourceHandle,
  );
  t.is(
    (await c.call(Cmd.MALLOC, { args: ['qcuda_args_malloc', { size: 1n }], session: 12345n })).status,
    Status.NO_SESSION,
    'a forged session id',
  );
  t.is(await c.dtoh(g, a, 16), 0, 'the owner still reads it');
  t.is((await other.close()).status, 0);
  t.is(dev.sessions.size, 1);
});

test('streams and events: create, query, record, elapsed time, wait, destroy; bad handles and flags', async (t) => {
  const { c } = await setup(t);
  const s = await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 1, priority: -1 }] });
  t.is(s.status, 0);
  t.is((await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 8, priority: 0 }] })).status, CudaErr.InvalidValue);
  const ev = async (flags: number) => (await c.call(Cmd.EVENT_CREATE, { args: ['qcuda_args_event_create', { flags }] })).value;
  const [e1, e2, nt] = [await ev(0), await ev(0), await ev(2)];
  const elapsed = (a: bigint, b: bigint) =>
    c.call(Cmd.EVENT_ELAPSED, { args: ['qcuda_args_event_elapsed', { start: a, end: b }], out: 'qcuda_out_event_elapsed' });
  t.is((await elapsed(e1, e2)).status, CudaErr.InvalidResourceHandle, 'never recorded');
  t.is((await c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: e1, stream: s.value }] })).status, 0);
  await new Promise((r) => setTimeout(r, 30));
  t.is((await c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: e2, stream: 0n }] })).status, 0);
  const el = await elapsed(e1, e2);
  t.is(el.status, 0);
  const ms = new DataView(new Uint32Array([el.out!.ms_bits as number]).buffer).getFloat32(0, true);
  t.true(ms >= 25 && ms < 5000, `elapsed ${ms} ms`);
  t.is((await c.call(Cmd.EVENT_RECORD, { args: ['qcuda_args_event_record', { event: nt, stream: 0n }] })).status, 0);
  t.is((await elapsed(e1, nt)).status, CudaErr.InvalidResourceHandle, 'timing disabled');
  t.is((await c.call(Cmd.EVENT_QUERY, { args: ['qcuda_args_handle', { handle: e1 }] })).status, 0);
  t.is((await c.call(Cmd.STREAM_QUERY, { args: ['qcuda_args_handle', { handle: s.value }] })).status, 0);
  t.is(
    (await c.call(Cmd.STREAM_WAIT_EVENT, { args: ['qcuda_args_stream_wait_event', { stream: s.value, event: e2, flags: 0 }] })).status,
    0,
  );
  t.is((await c.call(Cmd.STREAM_DESTROY, { args: ['qcuda_args_handle', { handle: s.value }] })).status, 0);
  t.is(
    (await c.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle: s.value }] })).status,
    CudaErr.InvalidResourceHandle,
    'destroyed',
  );
  t.is(
    (await c.call(Cmd.STREAM_DESTROY, { args: ['qcuda_args_handle', { handle: 0n }] })).status,
    CudaErr.InvalidResourceHandle,
    'the NULL stream',
  );
  t.is((await c.call(Cmd.STREAM_SYNC, { args: ['qcuda_args_handle', { handle: 2n }] })).status, 0, 'cudaStreamPerThread');
  t.is((await c.call(Cmd.EVENT_DESTROY, { args: ['qcuda_args_handle', { handle: e1 }] })).status, 0);
  t.is((await c.call(Cmd.EVENT_SYNC, { args: ['qcuda_args_handle', { handle: e1 }] })).status, CudaErr.InvalidResourceHandle);
  t.is((await c.call(Cmd.DEVICE_SYNC)).status, 0);
});

test('the per-VM quota: allocations past it fail, memory info reports it', async (t) => {
  const { c } = await setup(t, { memoryLimit: 3n * BigInt(MIB) });
  const a = await c.malloc(2 * MIB);
  t.is(a.status, 0);
  t.is((await c.malloc(2 * MIB)).status, CudaErr.MemoryAllocation);
  const info = await c.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' });
  t.is(info.out!.total, 3n * BigInt(MIB));
  t.is(info.out!.free, BigInt(MIB));
  const p = await c.call(Cmd.DEVICE_PROPS, { args: ['qcuda_args_device', { device: 0 }], out: 'qcuda_out_device_props' });
  t.is(p.out!.total_mem, 3n * BigInt(MIB));
  t.is((await c.free(a.value)).status, 0);
  t.is((await c.malloc(3 * MIB)).status, 0);
});

test('closing a session, resetting the device or losing the VM frees everything it held', async (t) => {
  const { c, fe, provider, dev } = await setup(t);
  await c.malloc(MIB);
  await c.malloc(2 * MIB);
  t.is(provider.used, 3n * BigInt(MIB));
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(provider.used, 0n);
  await c.malloc(MIB);
  t.is((await c.close()).status, 0);
  t.is(provider.used, 0n);
  t.is((await c.malloc(1)).status, Status.NO_SESSION);
  const again = new QcudaClient(fe);
  await again.open();
  await again.malloc(5 * MIB);
  t.is(provider.used, 5n * BigInt(MIB));
  fe.close();
  t.true(await until(() => provider.used === 0n && dev.sessions.size === 0), 'disconnect frees every session');
});

test('mapped guest memory: the device pointer reads and writes guest RAM; ranges outside guest RAM are refused', async (t) => {
  const { c, fe } = await setup(t);
  const host = fe.mem.alloc(8192, 4096);
  fe.mem.bytes(host, 8).set([1, 2, 3, 4, 5, 6, 7, 8]);
  const m = await c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: host, size: 8192n }] });
  t.is(m.status, 0);
  const out = fe.mem.alloc(8);
  t.is(await c.dtoh(out, m.value, 8), 0);
  t.deepEqual(Array.from(fe.mem.bytes(out, 8)), [1, 2, 3, 4, 5, 6, 7, 8]);
  t.is((await c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: 1n << 40n, size: 4096n }] })).status, CudaErr.InvalidValue);
  t.is((await c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: host, size: 1n << 40n }] })).status, CudaErr.InvalidValue);
  t.is((await c.call(Cmd.HOST_UNMAP, { args: ['qcuda_args_ptr', { ptr: m.value }] })).status, 0);
  t.is(await c.dtoh(out, m.value, 8), CudaErr.InvalidValue, 'unmapped');
});

/** HOST_MAP_PAGES' arguments: the struct, then the extents. */
function mapPages(size: bigint, extents: [bigint, bigint][], count = extents.length): Uint8Array {
  const head = encode('qcuda_args_host_map_pages', { key: 0n, size, count, reserved: 0 });
  const out = new Uint8Array(head.length + extents.length * 16);
  out.set(head);
  extents.forEach(([gpa, len], i) => out.set(encode('qcuda_extent', { gpa, len }), head.length + i * 16));
  return out;
}

test('scattered guest pages (HOST_MAP_PAGES): one device range, the pieces in order; malformed extents are refused', async (t) => {
  const { c, fe } = await setup(t);
  const a = fe.mem.alloc(8192, 4096);
  const b = fe.mem.alloc(4096, 4096);
  fe.mem.bytes(a, 8192).fill(0xa1);
  fe.mem.bytes(b, 4096).fill(0xb2);
  // b first, then a: 12 KiB as one range.
  const m = await c.call(Cmd.HOST_MAP_PAGES, {
    rawArgs: mapPages(12288n, [
      [b, 4096n],
      [a, 8192n],
    ]),
  });
  t.is(m.status, 0);
  const out = fe.mem.alloc(12288);
  t.is(await c.dtoh(out, m.value, 12288), 0);
  const got = fe.mem.bytes(out, 12288);
  t.true(got.subarray(0, 4096).every((x) => x === 0xb2) && got.subarray(4096).every((x) => x === 0xa1), 'the pieces in the order given');
  // A copy that straddles the two pieces, into the device range: lands in both pages.
  const src = fe.mem.alloc(16);
  fe.mem.bytes(src, 16).fill(0x3c);
  t.is(await c.htod(m.value + 4088n, src, 16), 0);
  t.true(
    fe.mem.bytes(b + 4088n, 8).every((x) => x === 0x3c) &&
      fe.mem.bytes(a, 8).every((x) => x === 0x3c) &&
      fe.mem.bytes(a + 8n, 1)[0] === 0xa1,
  );
  t.is(await c.dtoh(out, m.value + 12280n, 16), CudaErr.InvalidValue, 'past the end of the range');
  t.is((await c.call(Cmd.HOST_UNMAP, { args: ['qcuda_args_ptr', { ptr: m.value }] })).status, 0);
  t.is(await c.dtoh(out, m.value, 8), CudaErr.InvalidValue, 'unmapped');

  const bad = async (args: Uint8Array, want: number, why: string) =>
    t.is((await c.call(Cmd.HOST_MAP_PAGES, { rawArgs: args })).status, want, why);
  await bad(mapPages(4096n, [[b, 4096n]], 2), Status.BAD_REQUEST, 'count says 2, 1 came');
  await bad(mapPages(0n, [], 0), Status.BAD_REQUEST, 'no extents');
  await bad(mapPages(8192n, [[b, 4096n]]), CudaErr.InvalidValue, 'extents of 4096 bytes for 8192');
  await bad(mapPages(4096n, [[b + 8n, 4096n]]), CudaErr.InvalidValue, 'not page aligned');
  await bad(mapPages(4096n, [[b, 4000n]]), CudaErr.InvalidValue, 'not whole pages');
  await bad(mapPages(4096n, [[1n << 40n, 4096n]]), CudaErr.InvalidValue, 'outside guest RAM');
  await bad(mapPages(0n, [[b, 0n]]), CudaErr.InvalidValue, 'an empty extent');
  await bad(
    mapPages(
      BigInt(QCUDA_MAX_EXTENTS + 1) * 4096n,
      Array.from({ length: QCUDA_MAX_EXTENTS + 1 }, () => [b, 4096n] as [bigint, bigint]),
    ),
    Status.BAD_REQUEST,
    'more extents than QCUDA_MAX_EXTENTS',
  );
});

test('mapped pieces of guest memory are bounded per VM (--host-map-pieces): past it a mapping fails; an unmap or a closed session gives them back', async (t) => {
  const { c, fe } = await setup(t, { limits: { hostMapPieces: 3 } });
  // Pages a session has not mapped (it may not map the same pages twice).
  const p = [fe.mem.alloc(4096, 4096), fe.mem.alloc(4096, 4096), fe.mem.alloc(4096, 4096), fe.mem.alloc(4096, 4096)];
  const two = await c.call(Cmd.HOST_MAP_PAGES, {
    rawArgs: mapPages(8192n, [
      [p[0], 4096n],
      [p[1], 4096n],
    ]),
  });
  t.is(two.status, 0);
  t.is(
    (
      await c.call(Cmd.HOST_MAP_PAGES, {
        rawArgs: mapPages(8192n, [
          [p[2], 4096n],
          [p[3], 4096n],
        ]),
      })
    ).status,
    CudaErr.MemoryAllocation,
    '2 + 2 pieces > 3',
  );
  const one = await c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: p[2], size: 4096n }] });
  t.is(one.status, 0, '2 + 1 pieces');
  t.is(
    (await c.call(Cmd.HOST_MAP, { args: ['qcuda_args_host_map', { gpa: p[3], size: 4096n }] })).status,
    CudaErr.MemoryAllocation,
    'a fourth piece',
  );
  t.is((await c.call(Cmd.HOST_UNMAP, { args: ['qcuda_args_ptr', { ptr: two.value }] })).status, 0);
  t.is(
    (
      await c.call(Cmd.HOST_MAP_PAGES, {
        rawArgs: mapPages(8192n, [
          [p[1], 4096n],
          [p[0], 4096n],
        ]),
      })
    ).status,
    0,
    'given back by the unmap',
  );
  t.is((await c.close()).status, 0);
  const again = new QcudaClient(fe);
  await again.open();
  t.is(
    (
      await again.call(Cmd.HOST_MAP_PAGES, {
        rawArgs: mapPages(12288n, [
          [p[0], 4096n],
          [p[1], 4096n],
          [p[2], 4096n],
        ]),
      })
    ).status,
    0,
    'all three again once the session closed',
  );
});

test('malformed requests get error statuses and change nothing', async (t) => {
  const { c, fe, provider } = await setup(t);
  const g = fe.mem.alloc(64);
  t.is((await c.call(999)).status, Status.UNKNOWN_CMD);
  t.is((await c.call(Cmd.MALLOC, { rawArgs: new Uint8Array(4) })).status, Status.BAD_REQUEST, 'short arguments');
  t.is(
    (await c.call(Cmd.MALLOC, { rawArgs: new Uint8Array(QCUDA_MAX_ARGS + 1) })).status,
    Status.TOO_LARGE,
    'arguments over QCUDA_MAX_ARGS',
  );
  t.is(
    (await c.call(Cmd.MALLOC, { args: ['qcuda_args_malloc', { size: 8n }], to: [{ gpa: g, len: 8 }] })).status,
    Status.BAD_REQUEST,
    'data on a command without data',
  );
  t.is(
    (
      await c.call(Cmd.MEMCPY_HTOD, {
        args: ['qcuda_args_memcpy', { dst: 0n, src: 0n, size: 8n, stream: 0n }],
        to: [{ gpa: g, len: 8 }],
        dataLen: 16n,
      })
    ).status,
    Status.BAD_REQUEST,
    'data_len lies',
  );
  t.is((await c.call(Cmd.MEM_GET_INFO, { out: undefined })).status, Status.BAD_REQUEST, 'no room for the output');
  const a = (await c.malloc(64)).value;
  const chunk = await c.call(Cmd.MEMCPY_HTOD, {
    args: ['qcuda_args_memcpy', { dst: a, src: 0n, size: 64n, stream: 0n }],
    to: [{ gpa: g, len: 32 }],
    dataOffset: 48n,
  });
  t.is(chunk.status, CudaErr.InvalidValue, 'a chunk past the end of its transfer');
  t.is(provider.used, 64n);
});

test('random and mutated commands never crash the backend or disturb another session', async (t) => {
  const { c, fe } = await setup(t);
  const victim = new QcudaClient(fe);
  await victim.open();
  const secret = (await victim.malloc(4096)).value;
  const g = fe.mem.alloc(4096);
  fe.mem.bytes(g, 16).set(Buffer.from('victim-data-0123'));
  t.is(await victim.htod(secret, g, 16), 0);
  const rnd = prng(2024);
  const cmds: number[] = [...Object.values(Cmd), 3, 99, 0xffffffff];
  const scratch = fe.mem.alloc(64 * 1024);
  for (let i = 0; i < 1500; i++) {
    const cmd = cmds[(rnd() * cmds.length) | 0];
    if (cmd === Cmd.SESSION_CLOSE || cmd === Cmd.DEVICE_RESET) continue; // our own session would end; covered above
    const argLen = rnd() < 0.7 ? 8 * ((rnd() * 6) | 0) : (rnd() * 100) | 0;
    const raw = randomBytes(rnd, argLen);
    if (rnd() < 0.5 && argLen >= 8) new DataView(raw.buffer).setBigUint64(0, secret + BigInt((rnd() * 64) | 0), true); // aim at the victim
    const dataLen = rnd() < 0.3 ? (rnd() * 8192) | 0 : 0;
    const bufs = dataLen ? [{ gpa: scratch, len: Math.min(dataLen, 65536) }] : [];
    const r = await c.call(cmd, {
      rawArgs: raw,
      to: rnd() < 0.5 ? bufs : undefined,
      from: rnd() < 0.5 ? bufs : undefined,
      dataLen: BigInt(dataLen),
      dataOffset: rnd() < 0.2 ? BigInt((rnd() * 2 ** 40) | 0) : 0n,
      queue: i % 4,
    });
    t.not(r.status, CudaErr.Unknown, `command ${cmd} hit an internal error`);
  }
  const out = fe.mem.alloc(16);
  t.is(await victim.dtoh(out, secret, 16), 0);
  t.is(Buffer.from(fe.mem.bytes(out, 16)).toString(), 'victim-data-0123', "the other session's data is intact");
  t.is(LAYOUT.qcuda_req_hdr.size, 32);
});

// ---- modules and launches (the emu provider runs no kernels: the protocol checks)

function upload(c: QcudaClient, id: bigint, size: bigint, gpa: bigint, at: number, len: number) {
  return c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: id, size }],
    to: len ? [{ gpa: gpa + BigInt(at), len }] : [],
    dataOffset: BigInt(at),
    dataLen: BigInt(len),
  });
}
const load = (c: QcudaClient, id: bigint) => c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: id }] });

const find = (c: QcudaClient, id: bigint, size: bigint, sha256: Uint8Array) =>
  c.call(Cmd.MODULE_FIND, { args: ['qcuda_args_module_find', { upload_id: id, size, sha256 }] });

test('module images cross once per VM: MODULE_FIND stages an image loaded before by any process, by its content only, within the cache bound', async (t) => {
  const { createHash } = await import('node:crypto');
  const { c, fe, dev } = await setup(t);
  const g = fe.mem.alloc(4096);
  const ptx = Buffer.from('//\n.version 8.0\n.target sm_90\n.address_size 64\n// one\n');
  fe.mem.bytes(g, ptx.length).set(ptx);
  const sha = createHash('sha256').update(ptx).digest();
  const size = BigInt(ptx.length);
  let r = await find(c, 1n, size, sha);
  t.is(r.status, 0);
  t.is(r.value, 0n, 'nothing cached yet: upload it');
  t.is(dev.sessions.get(c.session)!.modules.pendingUploads, 0, 'a miss stages nothing');
  t.is((await upload(c, 1n, size, g, 0, ptx.length)).status, 0);
  t.is((await load(c, 1n)).status, CudaErr.NoKernelImageForDevice, 'emu provider: checked, then 209');
  t.is((dev.vm.modules as ModuleCache).count, 1, 'the checked image is kept');
  // Another process of the VM finds it by content and loads it without sending it.
  const other = new QcudaClient(fe);
  await other.open();
  r = await find(other, 7n, size, sha);
  t.is(r.value, 1n, 'found: staged as upload 7');
  t.is(dev.sessions.get(other.session)!.modules.pendingUploads, 1);
  t.is(
    (await upload(other, 7n, size, g, 0, 8)).status,
    CudaErr.InvalidValue,
    'a staged cached image takes no chunks (the cache is never written)',
  );
  t.is((await find(other, 7n, size, sha)).status, CudaErr.InvalidValue, 'the upload id is taken');
  t.is((await load(other, 7n)).status, CudaErr.NoKernelImageForDevice, 'loads as the uploaded image did');
  t.is(dev.sessions.get(other.session)!.modules.pendingUploads, 0, 'staging given back');
  // Only content that was uploaded is found: another hash or another size is a miss.
  const wrong = Buffer.from(sha);
  wrong[0] ^= 1;
  t.is((await find(other, 8n, size, wrong)).value, 0n, 'another hash');
  t.is((await find(other, 8n, size + 1n, sha)).value, 0n, 'another size');
  t.is((await find(other, 8n, 0n, sha)).status, CudaErr.InvalidValue, 'size 0');
  // Junk is not kept (refused before the cache).
  const junk = Buffer.alloc(100, 0x5a);
  fe.mem.bytes(g, 100).set(junk);
  t.is((await upload(other, 9n, 100n, g, 0, 100)).status, 0);
  t.is((await load(other, 9n)).status, CudaErr.InvalidKernelImage);
  t.is((await find(other, 10n, 100n, createHash('sha256').update(junk).digest())).value, 0n, 'an image the checks refused is not cached');
});

test('the module cache keeps at most its bound in bytes, the least recently used going first', async (t) => {
  const { ModuleCache } = await import('../../backend/src/qcuda/modules/module-cache');
  const { createHash } = await import('node:crypto');
  const m = new ModuleCache(1000n);
  const img = (b: number, n: number) => new Uint8Array(n).fill(b);
  const has = (i: Uint8Array) => m.find(createHash('sha256').update(i).digest(), BigInt(i.length)) !== undefined;
  const a = img(1, 400),
    b = img(2, 400),
    c = img(3, 400);
  m.add(a);
  m.add(b);
  t.true(has(a), 'a used: b is now the oldest');
  m.add(c);
  t.is(m.bytes, 800n);
  t.false(has(b), 'b went first');
  t.true(has(a) && has(c));
  m.add(img(4, 1001));
  t.is(m.count, 2, 'an image above the bound is not kept');
  const found = m.find(createHash('sha256').update(a).digest(), 400n)!;
  a[0] = 9;
  t.is(found[0], 1, 'the cache holds its own copy');
  t.is(new ModuleCache(0n).count, 0);
});

test('module uploads: sizes, chunks out of range, unknown, incomplete and too many uploads; load on the emu provider says 209', async (t) => {
  const { c, fe, dev, provider } = await setup(t);
  const g = fe.mem.alloc(64 * 1024);
  fe.mem.bytes(g, 64 * 1024).fill(0x5a);
  const session = dev.sessions.get(c.session)!;
  t.is((await upload(c, 1n, 0n, g, 0, 0)).status, CudaErr.InvalidValue, 'size 0');
  t.is((await upload(c, 1n, BigInt(QCUDA_MAX_MODULE) + 1n, g, 0, 16)).status, Status.TOO_LARGE, 'over QCUDA_MAX_MODULE');
  t.is((await upload(c, 1n, 100n, g, 96, 8)).status, CudaErr.InvalidValue, 'a chunk past the end');
  t.is((await upload(c, 1n, 100n, g, 0, 101)).status, CudaErr.InvalidValue, 'a chunk longer than the image');
  t.is(session.modules.pendingUploads, 0, 'refused chunks leave nothing behind');
  t.is((await load(c, 77n)).status, CudaErr.InvalidValue, 'unknown upload id');
  // Incomplete: the middle never arrives; the load fails and forgets the upload.
  t.is((await upload(c, 2n, 1000n, g, 0, 400)).status, 0);
  t.is((await upload(c, 2n, 1000n, g, 600, 400)).status, 0);
  t.is((await upload(c, 2n, 999n, g, 400, 10)).status, CudaErr.InvalidValue, 'another size for the same upload');
  t.is((await load(c, 2n)).status, CudaErr.InvalidValue, 'incomplete upload');
  t.is((await load(c, 2n)).status, CudaErr.InvalidValue, 'the staging buffer is gone');
  // Overlapping chunks in any order complete an upload; junk is refused before any provider sees it.
  for (const [at, len] of [
    [500, 500],
    [0, 300],
    [200, 400],
  ])
    t.is((await upload(c, 3n, 1000n, g, at, len)).status, 0);
  const junk = await load(c, 3n);
  t.is(junk.status, CudaErr.InvalidKernelImage, 'neither a fat binary, ELF nor PTX: cudaErrorInvalidKernelImage');
  t.is(junk.value, 0n);
  // A well-formed image reaches the provider, and the emu provider runs no kernels.
  const ptx = Buffer.from('//\n.version 8.0\n.target sm_90\n.address_size 64\n');
  fe.mem.bytes(g, ptx.length).set(ptx);
  t.is((await upload(c, 4n, BigInt(ptx.length), g, 0, ptx.length)).status, 0);
  const l = await load(c, 4n);
  t.is(l.status, CudaErr.NoKernelImageForDevice, 'emu provider: cudaErrorNoKernelImageForDevice');
  t.is(l.value, 0n);
  t.is(session.modules.pendingUploads, 0, 'staging freed');
  t.is(session.modules.moduleCount, 0, 'no module kept');
  // At most MAX_PENDING_UPLOADS at once.
  for (let i = 0n; i < BigInt(MAX_PENDING_UPLOADS); i++) t.is((await upload(c, 10n + i, 64n, g, 0, 8)).status, 0);
  t.is((await upload(c, 99n, 64n, g, 0, 8)).status, Status.TOO_LARGE, 'one upload too many');
  t.is((await upload(c, 10n, 64n, g, 8, 8)).status, 0, 'pending uploads still take chunks');
  t.is(session.modules.pendingUploads, MAX_PENDING_UPLOADS);
  // Another session cannot load this one's upload.
  const other = new QcudaClient(fe);
  await other.open();
  t.is((await load(other, 10n)).status, CudaErr.InvalidValue);
  // Reset frees the staging buffers.
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(session.modules.pendingUploads, 0);
  t.is(provider.used, 0n);
});

test('module, function, variable and launch requests with bad lengths or handles are refused', async (t) => {
  const { c, fe } = await setup(t);
  const stream = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  const sym = (module: bigint, name: string | Uint8Array) => ({
    args: ['qcuda_args_symbol', { module, name }] as [StructName, Record<string, bigint | string | Uint8Array>],
  });
  t.is(
    (await c.call(Cmd.FUNC_GET, { ...sym(stream, 'k'), out: 'qcuda_out_func_info' })).status,
    CudaErr.InvalidResourceHandle,
    'a stream is no module',
  );
  t.is((await c.call(Cmd.FUNC_GET, { ...sym(0x1234n, 'k'), out: 'qcuda_out_func_info' })).status, CudaErr.InvalidResourceHandle);
  t.is((await c.call(Cmd.FUNC_GET, { ...sym(0x1234n, 'k') })).status, Status.BAD_REQUEST, 'no room for func_info');
  t.is((await c.call(Cmd.VAR_GET, { ...sym(0x1234n, 'v'), out: 'qcuda_out_var_info' })).status, CudaErr.InvalidResourceHandle);
  t.is(
    (await c.call(Cmd.FUNC_GET, { ...sym(0x1234n, new Uint8Array(QCUDA_MAX_NAME).fill(0x41)), out: 'qcuda_out_func_info' })).status,
    CudaErr.InvalidValue,
    'name without NUL',
  );
  t.is((await c.call(Cmd.MODULE_UNLOAD, { args: ['qcuda_args_handle', { handle: stream }] })).status, CudaErr.InvalidResourceHandle);
  const L = LAYOUT.qcuda_args_launch.size;
  t.is(L, 48);
  const launch = (o: { func?: bigint; stream?: bigint; grid?: number[]; block?: number[]; paramBytes?: number; extra?: number }) => {
    const a = encode('qcuda_args_launch', {
      func: o.func ?? stream,
      stream: o.stream ?? 0n,
      grid: new Uint32Array(o.grid ?? [1, 1, 1]),
      block: new Uint32Array(o.block ?? [1, 1, 1]),
      shared_mem: 0,
      param_bytes: o.paramBytes ?? 0,
    });
    const raw = new Uint8Array(L + (o.extra ?? o.paramBytes ?? 0));
    raw.set(a);
    return c.call(Cmd.LAUNCH, { rawArgs: raw });
  };
  t.is((await c.call(Cmd.LAUNCH, { rawArgs: new Uint8Array(40) })).status, Status.BAD_REQUEST, 'shorter than struct launch');
  t.is((await launch({ paramBytes: 16, extra: 8 })).status, Status.BAD_REQUEST, 'param_bytes says 16, 8 came');
  t.is((await launch({ paramBytes: 8, extra: 16 })).status, Status.BAD_REQUEST, 'param_bytes says 8, 16 came');
  t.is((await launch({ paramBytes: QCUDA_MAX_ARGS, extra: QCUDA_MAX_ARGS })).status, Status.TOO_LARGE, 'over QCUDA_MAX_ARGS');
  t.is((await launch({ paramBytes: 8 })).status, CudaErr.InvalidResourceHandle, 'a stream handle is no function');
  t.is((await launch({ func: 0n })).status, CudaErr.InvalidResourceHandle, 'function 0');
  const g = fe.mem.alloc(8);
  t.is(
    (await c.call(Cmd.LAUNCH, { rawArgs: new Uint8Array(L), to: [{ gpa: g, len: 8 }] })).status,
    Status.BAD_REQUEST,
    'launch carries no data',
  );
});

// The three calls added by declaration alone (wire/protocol.ts) plus each
// provider's method: answered in process and through a session's worker.
for (const where of ['in process', 'in a worker'] as const) {
  test(`stream priority range, a stream's priority (clamped), L2 persistence reset: ${where}`, async (t) => {
    const { IsolatedProvider } = await import('../../backend/src/qcuda/workers/isolated');
    const { EmuProvider } = await import('../../backend/src/qcuda/providers/emu');
    const provider = where === 'in a worker' ? new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } }) : emuProvider;
    const dev = new QcudaDevice({ queues: 2, provider });
    t.teardown(() => (typeof provider === 'function' ? undefined : provider.close()));
    const c = new QcudaClient((await started(t, dev, { size: 256 })).fe);
    await c.open();
    const range = await c.call(Cmd.STREAM_PRIORITY_RANGE, { out: 'qcuda_out_priority_range' });
    t.is(range.status, 0);
    t.deepEqual({ least: range.out!.least, greatest: range.out!.greatest }, { least: 0, greatest: -5 });
    const created = await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 1, priority: -9 }] });
    t.is(created.status, 0);
    const prio = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: created.value }] });
    t.is(prio.status, 0);
    t.is(BigInt.asIntN(64, prio.value), -5n, 'clamped to the greatest priority, as the driver does');
    const legacy = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: 0n }] });
    t.deepEqual([legacy.status, legacy.value], [0, 0n]);
    const bogus = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: 12345n }] });
    t.is(bogus.status, CudaErr.InvalidResourceHandle);
    t.is((await c.call(Cmd.CTX_RESET_PERSISTING_L2, {})).status, 0);
    t.is(
      (await c.call(Cmd.CTX_RESET_PERSISTING_L2, { args: ['qcuda_args_handle', { handle: 1n }] })).status,
      Status.BAD_REQUEST,
      'it takes no arguments',
    );
  });
}

test('LAUNCH_EX: a cluster with a 0 dimension, one past 16 blocks, or unknown flags is refused before the kernel is looked up', async (t) => {
  const { c } = await setup(t);
  const launch = (cluster: number[], flags = 0) =>
    c.call(Cmd.LAUNCH_EX, {
      rawArgs: encode('qcuda_args_launch_ex', {
        func: 12345n,
        stream: 0n,
        grid: new Uint32Array([4, 1, 1]),
        block: new Uint32Array([32, 1, 1]),
        shared_mem: 0,
        param_bytes: 0,
        cluster: new Uint32Array(cluster),
        flags,
      }),
    });
  t.is((await launch([0, 1, 1])).status, CudaErr.InvalidConfiguration);
  t.is((await launch([4, 4, 2])).status, CudaErr.InvalidValue, '32 blocks in a cluster');
  t.is((await launch([2, 1, 1], 2)).status, Status.BAD_REQUEST, 'flags other than QCUDA_LAUNCH_COOPERATIVE');
  t.is(
    (await launch([2, 1, 1], 1)).status,
    CudaErr.InvalidResourceHandle,
    "a good cluster: then the function is looked up (not the session's)",
  );
});
