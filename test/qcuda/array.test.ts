// Arrays, 2D/3D copies, pitched memsets, texture and surface objects on the
// emu provider, driven as the guest driver drives the device: round trips
// checked byte for byte (chunks cutting rows anywhere, data in scattered
// pieces), then hostile arguments (overflowing sizes, boxes past an array or
// an allocation, data that does not match its box, foreign handles), each
// refused with a clear status and nothing left held.
import test, { type ExecutionContext } from 'ava';
import { hostBlocks } from '../../backend/src/qcuda/commands/array';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { emuProvider, type EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { Cmd, QCUDA_MEM_ARRAY, QCUDA_MEM_HOST, QCUDA_MEM_LINEAR, Status } from '../../backend/src/qcuda/proto';
import { prng, randomBytes, started } from '../helpers';
import { QcudaClient, type Reply } from './client';

async function setup(t: ExecutionContext, o: { memoryLimit?: bigint } = {}) {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 4, memoryLimit: o.memoryLimit });
  const pair = await started(t, dev, { size: 256 });
  const c = new QcudaClient(pair.fe);
  await c.open();
  return { dev, c, fe: pair.fe, provider: dev.provider as EmuProvider };
}

type Args3D = Partial<
  Record<
    | 'dst'
    | 'src'
    | 'dst_pitch'
    | 'src_pitch'
    | 'dst_rows'
    | 'src_rows'
    | 'dst_x'
    | 'dst_y'
    | 'dst_z'
    | 'src_x'
    | 'src_y'
    | 'src_z'
    | 'width'
    | 'height'
    | 'depth'
    | 'size'
    | 'stream',
    bigint
  >
> & { dst_kind: number; src_kind: number; async?: number };

const big = (o: Record<string, bigint | number | undefined>) =>
  Object.fromEntries(Object.entries(o).map(([k, v]) => [k, typeof v === 'number' && !k.endsWith('kind') && k !== 'async' ? BigInt(v) : v]));

/**
 * A MEMCPY_3D_HTOD / DTOH of the guest bytes [gpa, gpa + size) in chunks of
 * `chunk` bytes, each chunk's data in pieces of at most `piece` bytes
 * (scattered descriptors); the first non-zero status.
 */
async function copy3d(
  c: QcudaClient,
  cmd: number,
  a: Args3D,
  gpa: bigint,
  size: number,
  chunk = 1 << 24,
  piece = 1 << 30,
): Promise<number> {
  const dir = cmd === Cmd.MEMCPY_3D_HTOD ? 'to' : 'from';
  const jobs: Promise<Reply>[] = [];
  for (let at = 0; at < size; at += chunk) {
    const len = Math.min(chunk, size - at);
    const bufs = [];
    for (let p = 0; p < len; p += piece) bufs.push({ gpa: gpa + BigInt(at + p), len: Math.min(piece, len - p) });
    jobs.push(
      c.call(cmd, {
        args: ['qcuda_args_memcpy_3d', big({ size: BigInt(size), ...a })],
        [dir]: bufs,
        dataOffset: BigInt(at),
        dataLen: BigInt(len),
      }),
    );
  }
  const r = await Promise.all(jobs);
  return r.find((x) => x.status !== 0)?.status ?? 0;
}

function dtod(c: QcudaClient, a: Args3D): Promise<Reply> {
  return c.call(Cmd.MEMCPY_3D_DTOD, { args: ['qcuda_args_memcpy_3d', big({ ...a })] });
}

async function arrayCreate(
  c: QcudaClient,
  width: number,
  height: number,
  depth: number,
  format = 0x20,
  channels = 1,
  flags = 0,
): Promise<Reply> {
  return c.call(Cmd.ARRAY_CREATE, {
    args: ['qcuda_args_array_create', { width: BigInt(width), height: BigInt(height), depth: BigInt(depth), format, channels, flags }],
  });
}

test('hostBlocks: a chunk becomes at most five blocks, covering exactly its bytes of the box', (t) => {
  const e = { width: 7n, height: 5n, depth: 4n };
  const pitch = 10n;
  const rows = 6n;
  const size = (e.depth - 1n) * pitch * rows + (e.height - 1n) * pitch + e.width;
  // Which box byte each span offset is (or -1 in the gaps).
  const inBox = (o: bigint) => {
    const z = o / (pitch * rows);
    const r = o % (pitch * rows);
    return r / pitch < e.height && r % pitch < e.width && z < e.depth;
  };
  for (let a = 0n; a < size; a += 3n)
    for (const b of [a + 1n, a + 17n, a + 61n, size]) {
      if (b > size || b <= a) continue;
      const blocks = hostBlocks(pitch, rows, e, { x: 0n, y: 0n, z: 0n }, a, b);
      t.true(blocks.length <= 5);
      const seen = new Set<bigint>();
      for (const k of blocks)
        for (let z = 0n; z < k.extent.depth; z++)
          for (let y = 0n; y < k.extent.height; y++)
            for (let x = 0n; x < k.extent.width; x++) {
              const o = a + k.off + z * pitch * rows + y * pitch + x;
              t.true(o >= a && o < b, 'inside the chunk');
              // The device position agrees with the span offset.
              const dz = k.pos.z + z;
              const dy = k.pos.y + y;
              t.is(dz * pitch * rows + dy * pitch + k.pos.x + x, o);
              seen.add(o);
            }
      let want = 0;
      for (let o = a; o < b; o++) if (inBox(o)) want++;
      t.is(seen.size, want, `chunk ${a}..${b}`);
    }
});

test('2D copies to and from pitched memory round-trip, chunks cutting rows, data in scattered pieces', async (t) => {
  const { c, fe, provider } = await setup(t);
  const rnd = prng(7);
  const [w, h, spitch, dpitch] = [300, 70, 333, 512];
  const size = (h - 1) * spitch + w;
  const src = fe.mem.alloc(size, 16);
  const back = fe.mem.alloc(size, 16);
  fe.mem.bytes(src, size).set(randomBytes(rnd, size));
  const m = await c.malloc(dpitch * h);
  t.is(m.status, 0);
  for (const [chunk, piece] of [
    [1 << 24, 1 << 30],
    [1000, 97],
    [spitch, 50],
    [1, 1 << 30],
  ]) {
    fe.mem.bytes(back, size).fill(0);
    const to = {
      dst: m.value,
      dst_pitch: BigInt(dpitch),
      dst_rows: BigInt(h),
      src_pitch: BigInt(spitch),
      src_rows: BigInt(h),
      width: BigInt(w),
      height: BigInt(h),
      depth: 1n,
      dst_kind: QCUDA_MEM_LINEAR,
      src_kind: QCUDA_MEM_HOST,
    };
    t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, to, src, size, chunk, piece), 0, `htod chunk ${chunk}`);
    const from = {
      src: m.value,
      src_pitch: BigInt(dpitch),
      src_rows: BigInt(h),
      dst_pitch: BigInt(spitch),
      dst_rows: BigInt(h),
      width: BigInt(w),
      height: BigInt(h),
      depth: 1n,
      dst_kind: QCUDA_MEM_HOST,
      src_kind: QCUDA_MEM_LINEAR,
    };
    t.is(await copy3d(c, Cmd.MEMCPY_3D_DTOH, from, back, size, chunk, piece), 0, `dtoh chunk ${chunk}`);
    const a = fe.mem.bytes(src, size);
    const b = fe.mem.bytes(back, size);
    let bad = 0;
    for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) if (a[y * spitch + x] !== b[y * spitch + x]) bad++;
    t.is(bad, 0, `every byte, chunk ${chunk}`);
    // The gaps between rows were not written.
    t.is(b[w], 0);
  }
  // Memset2D of a sub-box, then a device-to-device 2D copy to another pitched buffer.
  t.is(
    (
      await c.call(Cmd.MEMSET_2D, {
        args: [
          'qcuda_args_memset_2d',
          { dst: m.value + 8n, pitch: BigInt(dpitch), width: 16n, height: 3n, stream: 0n, value: 0x1a5, async: 0 },
        ],
      })
    ).status,
    0,
  );
  const m2 = await c.malloc(64 * 4);
  t.is(
    (
      await dtod(c, {
        dst: m2.value,
        dst_pitch: 64n,
        dst_rows: 4n,
        src: m.value,
        src_pitch: BigInt(dpitch),
        src_rows: BigInt(h),
        src_x: 4n,
        width: 32n,
        height: 4n,
        depth: 1n,
        dst_kind: QCUDA_MEM_LINEAR,
        src_kind: QCUDA_MEM_LINEAR,
      })
    ).status,
    0,
  );
  const out = fe.mem.alloc(256, 16);
  t.is(await c.dtoh(out, m2.value, 256), 0);
  const o = fe.mem.bytes(out, 256);
  const a = fe.mem.bytes(src, size);
  for (let y = 0; y < 4; y++)
    for (let x = 0; x < 32; x++) {
      const sx = 4 + x;
      const want = y < 3 && sx >= 8 && sx < 24 ? 0xa5 : a[y * spitch + sx];
      if (o[y * 64 + x] !== want) t.fail(`memset/dtod byte ${x},${y}`);
    }
  t.is((await c.free(m.value)).status, 0);
  t.is((await c.free(m2.value)).status, 0);
  t.is(provider.used, 0n);
});

test('arrays: 3D and layered, copies in and out of sub-boxes, array to array, counted and released', async (t) => {
  const { c, fe, provider, dev } = await setup(t, { memoryLimit: 64n << 20n });
  const rnd = prng(11);
  const [W, H, D] = [33, 17, 5]; // float2 elements
  const elem = 8;
  const arr = await arrayCreate(c, W, H, D, 0x20, 2, 0x1 /* layered */ | 0x2);
  t.is(arr.status, 0);
  const session = [...dev.sessions.values()][0];
  t.true(session.allocated >= BigInt(W * H * D * elem));
  // The whole array from a host box with gaps (pitch, rows per slice larger than the box).
  const hp = W * elem + 24;
  const hr = H + 3;
  const size = (D - 1) * hp * hr + (H - 1) * hp + W * elem;
  const src = fe.mem.alloc(size, 16);
  fe.mem.bytes(src, size).set(randomBytes(rnd, size));
  const box = { width: BigInt(W * elem), height: BigInt(H), depth: BigInt(D) };
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_HTOD,
      { dst: arr.value, src_pitch: BigInt(hp), src_rows: BigInt(hr), ...box, dst_kind: QCUDA_MEM_ARRAY, src_kind: QCUDA_MEM_HOST },
      src,
      size,
      4099,
      1000,
    ),
    0,
  );
  // A sub-box back out: x 3 elements in, y 2, z 1, 10x7x3 elements, into a dense host buffer.
  const sub = { width: 10n * BigInt(elem), height: 7n, depth: 3n };
  const subSize = Number(sub.width * sub.height * sub.depth);
  const dst = fe.mem.alloc(subSize, 16);
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_DTOH,
      {
        src: arr.value,
        src_x: BigInt(3 * elem),
        src_y: 2n,
        src_z: 1n,
        dst_pitch: sub.width,
        dst_rows: 7n,
        ...sub,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      },
      dst,
      subSize,
      333,
    ),
    0,
  );
  const s = fe.mem.bytes(src, size);
  const d = fe.mem.bytes(dst, subSize);
  let bad = 0;
  for (let z = 0; z < 3; z++)
    for (let y = 0; y < 7; y++)
      for (let x = 0; x < 10 * elem; x++) if (d[(z * 7 + y) * 10 * elem + x] !== s[(z + 1) * hp * hr + (y + 2) * hp + 3 * elem + x]) bad++;
  t.is(bad, 0, 'every byte of the sub-box');
  // Array to array, then array to linear, then out.
  const arr2 = await arrayCreate(c, 12, 8, 2, 0x20, 2);
  t.is(arr2.status, 0);
  t.is(
    (
      await dtod(c, {
        dst: arr2.value,
        src: arr.value,
        src_x: BigInt(3 * elem),
        src_y: 2n,
        src_z: 1n,
        ...sub,
        depth: 2n,
        dst_kind: QCUDA_MEM_ARRAY,
        src_kind: QCUDA_MEM_ARRAY,
      })
    ).status,
    0,
  );
  const lin = await c.malloc(Number(sub.width * 7n * 2n));
  t.is(
    (
      await dtod(c, {
        dst: lin.value,
        dst_pitch: sub.width,
        dst_rows: 7n,
        src: arr2.value,
        ...sub,
        depth: 2n,
        dst_kind: QCUDA_MEM_LINEAR,
        src_kind: QCUDA_MEM_ARRAY,
      })
    ).status,
    0,
  );
  const out = fe.mem.alloc(subSize, 16);
  t.is(await c.dtoh(out, lin.value, Number(sub.width * 7n * 2n)), 0);
  t.is(Buffer.compare(fe.mem.bytes(out, Number(sub.width * 7n * 2n)), d.subarray(0, Number(sub.width * 7n * 2n))), 0);
  // Texture and surface objects of the array.
  const tex = await c.call(Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', { res_type: 0, res: arr.value, filter_mode: 1, flags: 2 }] });
  t.is(tex.status, 0);
  const surf = await c.call(Cmd.SURF_CREATE, { args: ['qcuda_args_handle', { handle: arr.value }] });
  t.is(surf.status, 0);
  const plain = await c.call(Cmd.SURF_CREATE, { args: ['qcuda_args_handle', { handle: arr2.value }] });
  t.is(plain.status, 0, 'a surface of an array without SURFACE_LDST too, as CUDA 13 makes one');
  t.is((await c.call(Cmd.SURF_DESTROY, { args: ['qcuda_args_handle', { handle: plain.value }] })).status, 0);
  t.is(
    (await c.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: surf.value }] })).status,
    CudaErr.InvalidValue,
    'a surface is not a texture',
  );
  t.is((await c.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: tex.value }] })).status, 0);
  t.is(
    (await c.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: tex.value }] })).status,
    CudaErr.InvalidValue,
    'destroyed twice',
  );
  t.is((await c.call(Cmd.SURF_DESTROY, { args: ['qcuda_args_handle', { handle: surf.value }] })).status, 0);
  // Freed: the quota and the provider's memory come back.
  t.is((await c.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, 0);
  t.is((await c.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, CudaErr.InvalidResourceHandle);
  t.is((await c.free(lin.value)).status, 0);
  t.true(session.allocated > 0n, 'arr2 still counted');
  // The session's end releases what is left.
  await c.close();
  t.is(provider.used, 0n);
});

test('hostile: array shapes, boxes past arrays and allocations, data that does not match its box, foreign handles', async (t) => {
  const { c, fe, provider, dev } = await setup(t, { memoryLimit: 16n << 20n });
  const session = () => [...dev.sessions.values()].find((s) => s.id === c.session)!;
  // Shapes.
  for (const [w, h, d, fmt, ch, fl] of [
    [0, 4, 0, 0x20, 1, 0],
    [1 << 20, 1, 0, 0x20, 1, 0],
    [16, 1 << 20, 0, 0x20, 1, 0],
    [16, 16, 1 << 20, 0x20, 1, 0],
    [16, 16, 0, 0x77, 1, 0],
    [16, 16, 0, 0x20, 3, 0],
    [16, 16, 0, 0x20, 1, 0x100],
    [16, 8, 6, 0x20, 1, 0x4],
    [16, 16, 5, 0x20, 1, 0x4],
    [16, 0, 4, 0x20, 1, 0],
    [16, 16, 0, 0x20, 1, 0x1],
  ] as const)
    t.is((await arrayCreate(c, w, h, d, fmt, ch, fl)).status, CudaErr.InvalidValue, `array ${w}x${h}x${d} f${fmt} c${ch} fl${fl}`);
  // Past the quota: refused before anything is made.
  t.is((await arrayCreate(c, 4096, 4096, 0, 0x20, 4)).status, CudaErr.MemoryAllocation);
  t.is(session().allocated, 0n);
  t.is(provider.used, 0n);

  const arr = await arrayCreate(c, 16, 8, 0, 0x01, 4); // uchar4, 64 bytes a row
  t.is(arr.status, 0);
  const m = await c.malloc(4096);
  const g = fe.mem.alloc(8192, 16);
  const toArr = (o: Partial<Args3D>) => ({
    dst: arr.value,
    src_pitch: 64n,
    src_rows: 8n,
    width: 64n,
    height: 8n,
    depth: 1n,
    dst_kind: QCUDA_MEM_ARRAY,
    src_kind: QCUDA_MEM_HOST,
    ...o,
  });
  const span = 7 * 64 + 64;
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, toArr({}), g, span), 0, 'the good copy');
  const cases: [string, Partial<Args3D>, number, number?][] = [
    ['x past the row', { dst_x: 4n }, CudaErr.InvalidValue],
    ['x not a whole element', { dst_x: 2n, width: 60n }, CudaErr.InvalidValue],
    ['width not whole elements', { width: 62n, src_pitch: 64n }, CudaErr.InvalidValue, 7 * 64 + 62],
    ['rows past the array', { dst_y: 1n }, CudaErr.InvalidValue],
    ['slices past a 2D array', { depth: 2n, src_rows: 8n }, CudaErr.InvalidValue, 15 * 64 + 64],
    ['a huge z', { dst_z: 1n << 62n }, CudaErr.InvalidValue],
    ['a huge width', { width: 1n << 60n }, CudaErr.InvalidValue],
    ['a huge pitch', { src_pitch: (1n << 64n) - 1n }, CudaErr.InvalidValue],
    ['host pitch below the width', { src_pitch: 32n }, CudaErr.InvalidPitchValue, 7 * 32 + 64],
    ['host side not at its start', { src_x: 1n }, CudaErr.InvalidValue],
    ['size not the box', { size: BigInt(span - 1) }, CudaErr.InvalidValue, span - 1],
    ['a foreign array', { dst: m.value }, CudaErr.InvalidResourceHandle],
    ['an unknown kind', { dst_kind: 7 }, CudaErr.InvalidValue],
    ['no data side', { src_kind: QCUDA_MEM_LINEAR, src: m.value }, CudaErr.InvalidValue],
  ];
  for (const [what, o, status, len] of cases) t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, toArr(o), g, len ?? span), status, what);
  // A chunk past the box's bytes.
  t.is(
    (
      await c.call(Cmd.MEMCPY_3D_HTOD, {
        args: ['qcuda_args_memcpy_3d', big(toArr({ size: BigInt(span) }))],
        to: [{ gpa: g, len: 64 }],
        dataOffset: BigInt(span - 32),
        dataLen: 64n,
      })
    ).status,
    CudaErr.InvalidValue,
  );
  // Linear sides reaching past their allocation, from any field.
  const lin = (o: Partial<Args3D>) => ({
    dst: m.value,
    dst_pitch: 512n,
    dst_rows: 8n,
    src_pitch: 64n,
    src_rows: 8n,
    width: 64n,
    height: 8n,
    depth: 1n,
    dst_kind: QCUDA_MEM_LINEAR,
    src_kind: QCUDA_MEM_HOST,
    ...o,
  });
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, lin({}), g, span), 0);
  for (const [what, o, status] of [
    ['rows past the allocation', { dst_pitch: 585n }, CudaErr.InvalidValue],
    ['y past the allocation', { dst_y: 1n }, CudaErr.InvalidValue],
    ['x past the pitch', { dst_x: 500n }, CudaErr.InvalidPitchValue],
    ['z without rows for it', { dst_z: 1n, dst_rows: 0n }, CudaErr.InvalidValue],
    ['pointer before the allocation', { dst: m.value - 64n }, CudaErr.InvalidValue],
    ['pointer far away', { dst: (1n << 64n) - 64n }, CudaErr.InvalidValue],
  ] as const)
    t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, lin(o), g, span), status, what);
  t.is(
    (
      await dtod(c, {
        dst: m.value,
        dst_pitch: 512n,
        dst_rows: 8n,
        src: arr.value,
        width: 64n,
        height: 9n,
        depth: 1n,
        dst_kind: QCUDA_MEM_LINEAR,
        src_kind: QCUDA_MEM_ARRAY,
      })
    ).status,
    CudaErr.InvalidValue,
    'dtod past the array',
  );
  t.is(
    (
      await dtod(c, {
        dst: m.value,
        dst_pitch: 512n,
        dst_rows: 8n,
        src: arr.value,
        width: 64n,
        height: 8n,
        depth: 1n,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      })
    ).status,
    CudaErr.InvalidValue,
    'dtod with a data side',
  );
  // Memsets past the allocation.
  for (const [p, w, h] of [
    [512n, 64n, 9n],
    [1n << 63n, 64n, 2n],
    [512n, 1n << 60n, 1n],
    [8n, 64n, 2n],
  ] as const) {
    const r = await c.call(Cmd.MEMSET_2D, {
      args: ['qcuda_args_memset_2d', { dst: m.value, pitch: p, width: w, height: h, stream: 0n, value: 1, async: 0 }],
    });
    t.not(r.status, 0, `memset2D ${p} ${w}x${h}`);
  }
  // Textures of memory that is not the session's, or malformed.
  const texArgs = (o: Record<string, unknown>) => ({ res_type: 2, res: m.value, format: 0x20, channels: 1, size: 4096n, ...o }) as never;
  t.is((await c.call(Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', texArgs({})] })).status, 0);
  for (const [what, o, status] of [
    ['linear past the allocation', { size: 4100n }, CudaErr.InvalidValue],
    ['linear at a foreign pointer', { res: 0x1000n }, CudaErr.InvalidValue],
    ['pitch2D past the allocation', { res_type: 3, width: 64n, height: 9n, pitch: 512n }, CudaErr.InvalidValue],
    ['pitch2D pitch below a row', { res_type: 3, width: 64n, height: 2n, pitch: 128n }, CudaErr.InvalidPitchValue],
    ['a foreign array', { res_type: 0, res: m.value }, CudaErr.InvalidResourceHandle],
    ['a mipmapped array that is not one', { res_type: 1 }, CudaErr.InvalidResourceHandle],
    ['a bad format', { format: 0x55 }, CudaErr.InvalidValue],
    ['bad flags', { flags: 0x80 }, CudaErr.InvalidValue],
  ] as const)
    t.is((await c.call(Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', texArgs(o)] })).status, status, what);
  t.is(
    (await c.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: 0x12345n }] })).status,
    CudaErr.InvalidValue,
    'an object never made',
  );

  // Another session cannot use or free this one's array or objects.
  const c2 = new QcudaClient(c.fe);
  await c2.open();
  const tex = await c.call(Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', { res_type: 0, res: arr.value }] });
  t.is(tex.status, 0);
  t.is((await c2.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, CudaErr.InvalidResourceHandle);
  t.is((await c2.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: tex.value }] })).status, CudaErr.InvalidValue);
  t.is((await c2.call(Cmd.SURF_CREATE, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, CudaErr.InvalidResourceHandle);
  const g2 = fe.mem.alloc(span, 16);
  t.is(
    await copy3d(
      c2,
      Cmd.MEMCPY_3D_DTOH,
      {
        src: arr.value,
        dst_pitch: 64n,
        dst_rows: 8n,
        width: 64n,
        height: 8n,
        depth: 1n,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      },
      g2,
      span,
    ),
    CudaErr.InvalidResourceHandle,
  );
  t.is((await c2.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: tex.value }] })).status, CudaErr.InvalidValue);
  // The owner's copy still works, and a reset drops everything.
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_DTOH,
      {
        src: arr.value,
        dst_pitch: 64n,
        dst_rows: 8n,
        width: 64n,
        height: 8n,
        depth: 1n,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      },
      g2,
      span,
    ),
    0,
  );
  t.is(Buffer.compare(fe.mem.bytes(g2, span), fe.mem.bytes(g, span)), 0);
  t.is((await c.call(Cmd.DEVICE_RESET)).status, 0);
  t.is(session().allocated, 0n);
  t.is(session().objects.arrayCount, 0);
  t.is(session().objects.objectCount, 0);
  t.is((await c.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, CudaErr.InvalidResourceHandle);
  t.is(provider.used, 0n);
  t.is((await c.close()).status, 0);
  t.is((await c2.close()).status, Status.OK);
});

test('through a session worker process (isolation): 2D copies with scattered data, arrays, objects', async (t) => {
  const { IsolatedProvider } = await import('../../backend/src/qcuda/workers/isolated');
  const { EmuProvider } = await import('../../backend/src/qcuda/providers/emu');
  const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } });
  t.teardown(() => p.close());
  const dev = new QcudaDevice({ queues: 2, provider: p });
  const pair = await started(t, dev, { size: 64 });
  const c = new QcudaClient(pair.fe, 2, 8);
  await c.open();
  const fe = pair.fe;
  const [w, h, hp] = [64, 20, 100];
  const size = (h - 1) * hp + w;
  const src = fe.mem.alloc(size, 16);
  const back = fe.mem.alloc(size, 16);
  fe.mem.bytes(src, size).set(randomBytes(prng(3), size));
  const arr = await arrayCreate(c, 16, h, 0, 0x20, 1, 0x2);
  t.is(arr.status, 0);
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_HTOD,
      {
        dst: arr.value,
        src_pitch: BigInt(hp),
        src_rows: BigInt(h),
        width: BigInt(w),
        height: BigInt(h),
        depth: 1n,
        dst_kind: QCUDA_MEM_ARRAY,
        src_kind: QCUDA_MEM_HOST,
      },
      src,
      size,
      700,
      90,
    ),
    0,
  );
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_DTOH,
      {
        src: arr.value,
        dst_pitch: BigInt(hp),
        dst_rows: BigInt(h),
        width: BigInt(w),
        height: BigInt(h),
        depth: 1n,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      },
      back,
      size,
      500,
      33,
    ),
    0,
  );
  let bad = 0;
  const a = fe.mem.bytes(src, size);
  const b = fe.mem.bytes(back, size);
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) if (a[y * hp + x] !== b[y * hp + x]) bad++;
  t.is(bad, 0, 'every byte through the worker');
  const s = await c.call(Cmd.SURF_CREATE, { args: ['qcuda_args_handle', { handle: arr.value }] });
  t.is(s.status, 0);
  t.is((await c.call(Cmd.SURF_DESTROY, { args: ['qcuda_args_handle', { handle: s.value }] })).status, 0);
  t.is((await c.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: arr.value }] })).status, 0);
  await c.close();
});

test('mipmapped arrays: levels as arrays of their own shape, copies per level, textures, freed together', async (t) => {
  const { c, fe, dev } = await setup(t, { memoryLimit: 64n << 20n });
  const session = () => [...dev.sessions.values()].find((s) => s.id === c.session)!;
  const mk = (o: Record<string, number | bigint>) =>
    c.call(Cmd.MIPMAP_CREATE, {
      args: ['qcuda_args_mipmap_create', big({ width: 32n, height: 8n, depth: 0n, format: 0x20, channels: 1, flags: 0, levels: 6, ...o })],
    });
  // 32x8: levels 32x8, 16x4, 8x2, 4x1, 2x1, 1x1 (6 at most).
  t.is((await mk({ levels: 7 })).status, CudaErr.InvalidValue, 'one level too many');
  t.is((await mk({ levels: 0 })).status, CudaErr.InvalidValue);
  t.is((await mk({ flags: 0x2 })).status, CudaErr.InvalidValue, 'no surface load/store');
  t.is(session().allocated, 0n);
  const m = await mk({});
  t.is(m.status, 0);
  t.true(session().allocated > 0n);
  const level = (h: bigint, l: number) => c.call(Cmd.MIPMAP_LEVEL, { args: ['qcuda_args_mipmap_level', { handle: h, level: l }] });
  t.is((await level(m.value, 6)).status, CudaErr.InvalidValue);
  const l2 = await level(m.value, 2);
  t.is(l2.status, 0);
  t.is((await level(m.value, 2)).value, l2.value, 'the same level, the same handle');
  // Level 2 is 8x2 floats: a 32-byte, 2-row box fits, a 3rd row does not.
  const g = fe.mem.alloc(256, 16);
  fe.mem.bytes(g, 64).set(randomBytes(prng(9), 64));
  const box = {
    dst: l2.value,
    src_pitch: 32n,
    src_rows: 2n,
    width: 32n,
    height: 2n,
    depth: 1n,
    dst_kind: QCUDA_MEM_ARRAY,
    src_kind: QCUDA_MEM_HOST,
  };
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, box, g, 64), 0);
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, { ...box, height: 3n, src_rows: 3n }, g, 96), CudaErr.InvalidValue);
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, { ...box, width: 36n, src_pitch: 36n }, g, 72), CudaErr.InvalidValue);
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_DTOH,
      {
        src: l2.value,
        dst_pitch: 32n,
        dst_rows: 2n,
        width: 32n,
        height: 2n,
        depth: 1n,
        dst_kind: QCUDA_MEM_HOST,
        src_kind: QCUDA_MEM_ARRAY,
      },
      g + 128n,
      64,
    ),
    0,
  );
  t.is(Buffer.compare(fe.mem.bytes(g, 64), fe.mem.bytes(g + 128n, 64)), 0);
  // A level is not freed by itself; a texture of the mipmapped array; another session cannot use it.
  t.is((await c.call(Cmd.ARRAY_DESTROY, { args: ['qcuda_args_handle', { handle: l2.value }] })).status, CudaErr.InvalidValue);
  const tex = await c.call(Cmd.TEX_CREATE, {
    args: ['qcuda_args_tex_create', { res_type: 1, res: m.value, filter_mode: 1, mipmap_filter_mode: 1 }],
  });
  t.is(tex.status, 0);
  const c2 = new QcudaClient(c.fe);
  await c2.open();
  t.is(
    (
      await level
        .call(null, m.value, 0)
        .then(() => c2.call(Cmd.MIPMAP_LEVEL, { args: ['qcuda_args_mipmap_level', { handle: m.value, level: 0 }] }))
    ).status,
    CudaErr.InvalidResourceHandle,
  );
  t.is((await c2.call(Cmd.MIPMAP_DESTROY, { args: ['qcuda_args_handle', { handle: m.value }] })).status, CudaErr.InvalidResourceHandle);
  t.is(
    (await c2.call(Cmd.TEX_CREATE, { args: ['qcuda_args_tex_create', { res_type: 1, res: m.value }] })).status,
    CudaErr.InvalidResourceHandle,
  );
  await c2.close();
  // Freed with its levels: the level's handle is gone, the quota back.
  t.is((await c.call(Cmd.TEX_DESTROY, { args: ['qcuda_args_handle', { handle: tex.value }] })).status, 0);
  t.is((await c.call(Cmd.MIPMAP_DESTROY, { args: ['qcuda_args_handle', { handle: m.value }] })).status, 0);
  t.is(await copy3d(c, Cmd.MEMCPY_3D_HTOD, box, g, 64), CudaErr.InvalidResourceHandle);
  t.is(session().allocated, 0n);
  t.is(session().objects.arrayCount, 0);
  // Layered: levels keep the layer count.
  const ml = await mk({ width: 16n, height: 16n, depth: 3n, flags: 0x1, levels: 5 });
  t.is(ml.status, 0);
  const l4 = await level(ml.value, 4);
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_HTOD,
      { dst: l4.value, src_pitch: 4n, src_rows: 1n, width: 4n, height: 1n, depth: 3n, dst_kind: QCUDA_MEM_ARRAY, src_kind: QCUDA_MEM_HOST },
      g,
      12,
    ),
    0,
  );
  t.is(
    await copy3d(
      c,
      Cmd.MEMCPY_3D_HTOD,
      { dst: l4.value, src_pitch: 4n, src_rows: 1n, width: 4n, height: 1n, depth: 4n, dst_kind: QCUDA_MEM_ARRAY, src_kind: QCUDA_MEM_HOST },
      g,
      16,
    ),
    CudaErr.InvalidValue,
  );
  await c.close();
  t.is((dev.provider as EmuProvider).used, 0n);
});
