// The cuda provider's arrays, 2D/3D copies, 2D memsets, texture and surface
// objects through the addon (addon/src/cuda_ctx_arrays.cc) on the fake
// driver (test/qcuda/fixtures/fakecuda.c): the blocks the dispatcher makes
// of chunks (data in scattered segments, staged), array <-> linear copies on
// the device, and the addon's own refusal of a host box outside its staging
// buffer. The GPU run repeats the real thing (test/guest/arrays.cu).
import test from 'ava';
import { hostBlocks } from '../../backend/src/qcuda/commands/array';
import { CudaError } from '../../backend/src/qcuda/cuda-error';
import type { GuestSeg, Place } from '../../backend/src/qcuda/provider';
import { native } from '../../backend/src/sys/native';
import { prng, randomBytes } from '../helpers';
import { fakeCuda } from './fake-driver';

fakeCuda();

const SIZE = 1 << 20;
const fd = native.memfdCreate('qcuda-arrays-test', SIZE);
const map = new native.Mapping(fd, SIZE, 0);
const view = new Uint8Array(map.window(0, SIZE));

/** [off, off + len) of the mapping as segments of at most `piece` bytes (scattered guest pages, as the driver sends them). */
function segs(off: number, len: number, piece = 1 << 30): GuestSeg[] {
  const out: GuestSeg[] = [];
  for (let p = 0; p < len; p += piece) {
    const n = Math.min(piece, len - p);
    out.push({ addr: map.address + BigInt(off + p), len: n, view: view.subarray(off + p, off + p + n) });
  }
  return out;
}

test('arrays through the addon: chunked and scattered copies in and out, device copies, memsets, objects', async (t) => {
  const { createCudaProvider } = await import('../../backend/src/qcuda/providers/cuda/cuda');
  const p = await createCudaProvider(0);
  t.teardown(() => p.close());
  const x = await p.openContext(0);
  const [W, H, D] = [16n, 6n, 3n]; // float elements
  const arr = await x.arrayCreate({ width: W, height: H, depth: D, format: 0x20, channels: 1, flags: 0x2 });
  const place: Place = { array: arr };
  const ext = { width: W * 4n, height: H, depth: D };
  const [pitch, rows] = [80n, 8n];
  const size = Number((D - 1n) * pitch * rows + (H - 1n) * pitch + ext.width);
  const src = 0;
  const back = 65536;
  view.set(randomBytes(prng(5), size), src);
  const origin = { x: 0n, y: 0n, z: 0n };
  // Chunks cut rows at whole elements (the guest library sends an array copy in whole rows; a cut element is the driver's to refuse).
  for (const chunk of [size, 1000, 332]) {
    view.fill(0, back, back + size);
    for (let at = 0; at < size; at += chunk) {
      const len = Math.min(chunk, size - at);
      const blocks = hostBlocks(pitch, rows, ext, origin, BigInt(at), BigInt(at + len));
      await x.copy3DToDevice(place, segs(src + at, len, 97), blocks, undefined);
    }
    for (let at = 0; at < size; at += chunk) {
      const len = Math.min(chunk, size - at);
      const blocks = hostBlocks(pitch, rows, ext, origin, BigInt(at), BigInt(at + len));
      await x.copy3DFromDevice(segs(back + at, len, 61), place, blocks, undefined);
    }
    let bad = 0;
    for (let z = 0; z < Number(D); z++)
      for (let y = 0; y < Number(H); y++)
        for (let i = 0; i < Number(ext.width); i++) {
          const o = z * Number(pitch * rows) + y * Number(pitch) + i;
          if (view[back + o] !== view[src + o]) bad++;
        }
    t.is(bad, 0, `every byte, chunks of ${chunk}`);
  }
  // Array -> linear on the device, a memset of a box there, then out with a plain copy.
  const lin = await x.malloc(64n * 6n * 3n);
  await x.copy3DOnDevice({ ptr: lin, pitch: 64n, rows: 6n }, origin, place, origin, ext, undefined, false);
  await x.memset2D(lin + 64n, 64n, 0x3c, 8n, 2n, undefined, false);
  const out = 131072;
  await x.copyFromDevice(segs(out, 64 * 6 * 3), lin, undefined);
  let bad = 0;
  for (let z = 0; z < 3; z++)
    for (let y = 0; y < 6; y++)
      for (let i = 0; i < 64; i++) {
        const set = z === 0 && (y === 1 || y === 2) && i < 8;
        const want = set ? 0x3c : view[src + z * Number(pitch * rows) + y * Number(pitch) + i];
        if (view[out + (z * 6 + y) * 64 + i] !== want) bad++;
      }
  t.is(bad, 0, 'array -> linear on the device, memset2D of a box');
  // Objects.
  const tex = await x.texCreate(
    { kind: 'array', array: arr },
    {
      addressMode: [1, 1, 1],
      filterMode: 1,
      flags: 2,
      maxAnisotropy: 0,
      mipmapFilterMode: 0,
      mipmapLevelBias: 0,
      minLod: 0,
      maxLod: 0,
      borderColor: [0, 0, 0, 0],
    },
  );
  const surf = await x.surfCreate(arr);
  t.true(tex > 0n && surf > 0n && tex !== surf);
  await x.texDestroy(tex);
  await x.surfDestroy(surf);
  // The driver's refusal of a box past the array reaches the caller.
  await t.throwsAsync(x.copy3DOnDevice({ ptr: lin, pitch: 64n, rows: 6n }, origin, place, { x: 4n, y: 0n, z: 0n }, ext, undefined, false), {
    instanceOf: CudaError,
  });
  // The addon refuses a host box outside its staging buffer on its own.
  const native_ = (
    x as unknown as { native: { copy3D: (r: BigUint64Array, s: unknown, d: boolean, st: number, w: boolean) => Promise<void> } }
  ).native;
  const rec = BigUint64Array.from([2n, 10n, 64n, 1n, 0n, 0n, 0n, 0n, lin, 64n, 6n, 0n, 0n, 0n, 64n, 1n, 1n]);
  await t.throwsAsync(native_.copy3D(rec, segs(src, 70), true, 0, true), { message: /staging buffer/ });
  await t.throwsAsync(
    native_.copy3D(
      BigUint64Array.from([2n, (1n << 64n) - 8n, 64n, 1n, 0n, 0n, 0n, 0n, lin, 64n, 6n, 0n, 0n, 0n, 64n, 1n, 1n]),
      segs(src, 70),
      true,
      0,
      true,
    ),
    { message: /staging buffer/ },
  );
  await t.throwsAsync(
    native_.copy3D(BigUint64Array.from([1n, 999n, 0n, 0n, 0n, 0n, 0n, 0n, lin, 64n, 6n, 0n, 0n, 0n, 64n, 1n, 1n]), null, false, 0, true),
    { message: /no such array/ },
  );
  await x.arrayDestroy(arr);
  await t.throwsAsync(x.arrayDestroy(arr), { instanceOf: CudaError });
  // Mipmapped arrays: a level is an array (the same id each time), copies reach it, it goes with its mipmapped array.
  const mip = await x.mipmapCreate({ width: 8n, height: 8n, depth: 0n, format: 0x20, channels: 1, flags: 0 }, 4);
  const l1 = await x.mipmapLevel(mip, 1);
  t.is(await x.mipmapLevel(mip, 1), l1);
  const lvl: Place = { array: l1 };
  const box = { width: 16n, height: 4n, depth: 1n };
  await x.copy3DToDevice(lvl, segs(src, 64, 10), hostBlocks(16n, 4n, box, origin, 0n, 64n), undefined);
  view.fill(0, back, back + 64);
  await x.copy3DFromDevice(segs(back, 64), lvl, hostBlocks(16n, 4n, box, origin, 0n, 64n), undefined);
  t.is(Buffer.compare(view.subarray(back, back + 64), view.subarray(src, src + 64)), 0, 'a level round trip');
  await t.throwsAsync(
    x.copy3DOnDevice({ ptr: lin, pitch: 64n, rows: 6n }, origin, lvl, origin, { width: 16n, height: 5n, depth: 1n }, undefined, false),
    { instanceOf: CudaError },
  );
  const mt = await x.texCreate(
    { kind: 'mipmap', mipmap: mip },
    {
      addressMode: [0, 0, 0],
      filterMode: 1,
      flags: 2,
      maxAnisotropy: 0,
      mipmapFilterMode: 1,
      mipmapLevelBias: 0,
      minLod: 0,
      maxLod: 0x40400000,
      borderColor: [0, 0, 0, 0],
    },
  );
  await x.texDestroy(mt);
  await x.mipmapDestroy(mip);
  await t.throwsAsync(x.copy3DToDevice(lvl, segs(src, 64), hostBlocks(16n, 4n, box, origin, 0n, 64n), undefined), {
    message: /no such array/,
  });
  await x.free(lin);
  await x.destroy();
});
