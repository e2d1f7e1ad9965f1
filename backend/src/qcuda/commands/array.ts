// Arrays, 2D/3D copies and pitched memsets, texture and surface objects.
//
// A 2D/3D copy is one request whatever its row count: the arguments describe
// both sides (linear memory with its pitch, an array of the session, or the
// request's data, which holds the guest side's box from its first byte to its
// last), and the backend walks the rows itself. Every size, pitch and
// position is checked here before the provider sees it: a linear side's whole
// reach must lie in one allocation of the session, an array side's box inside
// the array's extent, the data side's length must be exactly what the box
// spans, and each chunk of the data lies inside it (all in bigint: nothing
// overflows). A chunk of the data becomes at most five blocks (a cut first
// row, rows of its first slice, whole slices, rows of its last slice, a cut
// last row), each one copy for the provider.
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { ARRAY_CUBEMAP, ARRAY_FLAGS, ARRAY_LAYERED, ARRAY_SURFACE_LDST, elementSize, levelDesc } from '../cuda-formats';
import { QCUDA_MEM_ARRAY, QCUDA_MEM_HOST, QCUDA_MEM_LINEAR } from '../proto';
import type { ArrayDesc, Extent, HostBlock, Place, Pos, TexDesc, TexResource } from '../provider';
import type { Session } from '../session/session';
import type { SessionArray } from '../session/session-objects';

/** Sizes and positions past this are refused (no real copy comes near; bigint math stays exact anyway). */
const BIG = 1n << 48n;

/** Largest extents (an H100's: 1D and 2D widths 131072, 2D heights 65536, 3D 16384, 2048 layers); the driver checks the finer rules. */
const MAX_WIDTH = 131072n;
const MAX_HEIGHT = 65536n;
const MAX_DEPTH = 16384n;
const MAX_LAYERS = 2048n;

/** CU_TRSF_*: READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB, DISABLE_TRILINEAR_OPTIMIZATION, SEAMLESS_CUBEMAP. */
const TEX_FLAGS = 0x1 | 0x2 | 0x10 | 0x20 | 0x40;

const inval = (msg: string) => new CudaError(CudaErr.InvalidValue, msg);

/**
 * What an array holds against the quota: rows rounded to 512 bytes (the
 * pitch alignment arrays get) and the whole to 64 KiB (an estimate of the
 * driver's granularity; never less than the bytes themselves).
 */
export function arrayBytes(d: ArrayDesc, elem: bigint): bigint {
  const h = d.height === 0n ? 1n : d.height;
  const z = d.depth === 0n ? 1n : d.depth;
  const row = d.height === 0n && d.depth === 0n ? d.width * elem : ((d.width * elem + 511n) / 512n) * 512n;
  return ((row * h * z + 65535n) / 65536n) * 65536n;
}

/** Levels a mipmapped array of level-0 shape d may have: 1 + log2 of its largest extent. */
function maxLevels(d: ArrayDesc): number {
  let m = d.width > d.height ? d.width : d.height;
  if (!(d.flags & (ARRAY_LAYERED | ARRAY_CUBEMAP)) && d.depth > m) m = d.depth;
  return m.toString(2).length;
}

function checkArrayDesc(d: ArrayDesc): bigint {
  const elem = elementSize(d.format, d.channels);
  if (d.flags & ~ARRAY_FLAGS) throw inval(`array flags 0x${d.flags.toString(16)}`);
  const layered = (d.flags & ARRAY_LAYERED) !== 0;
  if (d.width === 0n || d.width > MAX_WIDTH) throw inval(`array width ${d.width}`);
  if (d.height > MAX_HEIGHT) throw inval(`array height ${d.height}`);
  if (d.depth > (layered ? MAX_LAYERS * 6n : MAX_DEPTH)) throw inval(`array depth ${d.depth}`);
  if (d.depth !== 0n && d.height === 0n && !layered) throw inval('a 3D array needs a height');
  if (layered && d.depth === 0n) throw inval('a layered array needs its layer count as depth');
  if (d.flags & ARRAY_CUBEMAP) {
    if (d.width !== d.height) throw inval('a cubemap is square');
    if (layered ? d.depth % 6n !== 0n : d.depth !== 6n) throw inval('a cubemap has 6 faces (per layer)');
  }
  return elem;
}

/** One side of a 2D/3D copy, checked: where it is and how the box lies in it. */
type Side = { kind: 'host'; pitch: bigint; rows: bigint } | { kind: 'device'; place: Place; pos: Pos };

function sideOf(c: Call<'MEMCPY_3D_HTOD' | 'MEMCPY_3D_DTOH' | 'MEMCPY_3D_DTOD'>, which: 'dst' | 'src', ext: Extent, what: string): Side {
  const a = c.args;
  const kind = which === 'dst' ? a.dst_kind : a.src_kind;
  const h = which === 'dst' ? a.dst : a.src;
  const pitch = which === 'dst' ? a.dst_pitch : a.src_pitch;
  const rows = which === 'dst' ? a.dst_rows : a.src_rows;
  const pos: Pos = which === 'dst' ? { x: a.dst_x, y: a.dst_y, z: a.dst_z } : { x: a.src_x, y: a.src_y, z: a.src_z };
  for (const [n, v] of [
    ['pitch', pitch],
    ['rows', rows],
    ['x', pos.x],
    ['y', pos.y],
    ['z', pos.z],
  ] as const)
    if (v >= BIG) throw inval(`${what}: ${n} ${v}`);
  const multiRow = ext.height > 1n || ext.depth > 1n;
  switch (kind) {
    case QCUDA_MEM_HOST: {
      if (pos.x !== 0n || pos.y !== 0n || pos.z !== 0n) throw inval(`${what}: the data side starts at its box`);
      if (multiRow && pitch < ext.width) throw new CudaError(CudaErr.InvalidPitchValue, `${what}: pitch ${pitch} < width ${ext.width}`);
      if (ext.depth > 1n && rows < ext.height) throw inval(`${what}: ${rows} rows per slice < height ${ext.height}`);
      return { kind: 'host', pitch, rows: rows < ext.height ? ext.height : rows };
    }
    case QCUDA_MEM_LINEAR: {
      if (multiRow && pitch < pos.x + ext.width)
        throw new CudaError(CudaErr.InvalidPitchValue, `${what}: pitch ${pitch} < x + width ${pos.x + ext.width}`);
      if ((ext.depth > 1n || pos.z > 0n) && rows < pos.y + ext.height) throw inval(`${what}: ${rows} rows per slice < y + height`);
      const first = h + pos.z * pitch * rows + pos.y * pitch + pos.x;
      c.session.checkRange(first, span(pitch, rows, ext), what);
      // Rows per slice matter only across slices; the driver still wants them to cover the box.
      const used = pos.y + ext.height;
      return { kind: 'device', place: { ptr: h, pitch, rows: rows < used ? used : rows }, pos };
    }
    case QCUDA_MEM_ARRAY: {
      const arr = c.session.objects.array(h);
      checkInArray(arr, pos, ext, what);
      return { kind: 'device', place: { array: arr.ref }, pos };
    }
    default:
      throw inval(`${what}: memory kind ${kind}`);
  }
}

/** Bytes from a box's first byte to its last, rows pitch apart and slices pitch * rows apart. */
function span(pitch: bigint, rows: bigint, e: Extent): bigint {
  return (e.depth - 1n) * pitch * rows + (e.height - 1n) * pitch + e.width;
}

function checkInArray(a: SessionArray, pos: Pos, e: Extent, what: string): void {
  const w = a.desc.width * a.elemSize;
  const h = a.desc.height === 0n ? 1n : a.desc.height;
  const d = a.desc.depth === 0n ? 1n : a.desc.depth;
  if (pos.x % a.elemSize !== 0n || e.width % a.elemSize !== 0n)
    throw inval(`${what}: x ${pos.x} and width ${e.width} must be multiples of the element size ${a.elemSize}`);
  if (pos.x + e.width > w || pos.y + e.height > h || pos.z + e.depth > d)
    throw inval(
      `${what}: box at (${pos.x}, ${pos.y}, ${pos.z}) of ${e.width}x${e.height}x${e.depth} runs past the array (${w} bytes x ${h} x ${d})`,
    );
}

function extentOf(c: Call<'MEMCPY_3D_HTOD' | 'MEMCPY_3D_DTOH' | 'MEMCPY_3D_DTOD'>): Extent | undefined {
  const { width, height, depth } = c.args;
  if (width >= BIG || height >= BIG || depth >= BIG) throw inval(`copy extent ${width}x${height}x${depth}`);
  if (width === 0n || height === 0n || depth === 0n) return undefined; // nothing to copy, as natively
  return { width, height, depth };
}

/**
 * The blocks of the box that the data bytes [a, b) hold, for a host side of
 * pitch and rows, the device side starting at pos; offsets relative to a.
 */
export function hostBlocks(pitch: bigint, rows: bigint, e: Extent, pos: Pos, a: bigint, b: bigint): HostBlock[] {
  const H = e.height;
  const total = H * e.depth;
  const ho = (r: bigint) => (r / H) * pitch * rows + (r % H) * pitch;
  // ho is strictly increasing (pitch >= width, rows >= height where it matters): binary searches.
  const first = (pred: (r: bigint) => boolean): bigint => {
    let lo = 0n;
    let hi = total;
    while (lo < hi) {
      const mid = (lo + hi) / 2n;
      if (pred(mid)) hi = mid;
      else lo = mid + 1n;
    }
    return lo;
  };
  let r = first((x) => ho(x) + e.width > a);
  let end = first((x) => ho(x) >= b);
  const out: HostBlock[] = [];
  const row = (x: bigint, from: bigint, to: bigint) =>
    out.push({
      off: ho(x) + from - a,
      pitch,
      rows,
      pos: { x: pos.x + from, y: pos.y + (x % H), z: pos.z + x / H },
      extent: { width: to - from, height: 1n, depth: 1n },
    });
  if (r >= end) return out;
  if (ho(r) < a || ho(r) + e.width > b) {
    row(r, a > ho(r) ? a - ho(r) : 0n, (ho(r) + e.width < b ? ho(r) + e.width : b) - ho(r));
    r++;
  }
  if (r < end && ho(end - 1n) + e.width > b) {
    row(end - 1n, 0n, b - ho(end - 1n));
    end--;
  }
  while (r < end) {
    const y = r % H;
    const z = r / H;
    let h: bigint;
    let d = 1n;
    if (y === 0n && end - r >= H) {
      h = H;
      d = (end - r) / H;
    } else {
      h = H - y < end - r ? H - y : end - r;
    }
    out.push({
      off: ho(r) - a,
      pitch,
      rows,
      pos: { x: pos.x, y: pos.y + y, z: pos.z + z },
      extent: { width: e.width, height: h, depth: d },
    });
    r += h * d;
  }
  return out;
}

/** The data side and the device side of a host copy, and the blocks of this chunk. */
function hostCopy(c: Call<'MEMCPY_3D_HTOD' | 'MEMCPY_3D_DTOH'>, toDevice: boolean) {
  const what = toDevice ? 'cudaMemcpy3D to the device' : 'cudaMemcpy3D from the device';
  const ext = extentOf(c);
  const stream = c.session.stream(c.args.stream);
  const hostKind = toDevice ? c.args.src_kind : c.args.dst_kind;
  if (hostKind !== QCUDA_MEM_HOST) throw inval(`${what}: the guest side must be the data`);
  if (ext === undefined) {
    if (c.args.size !== 0n || c.dataLen !== 0n) throw inval(`${what}: data for an empty box`);
    return undefined;
  }
  const host = sideOf(c, toDevice ? 'src' : 'dst', ext, `${what} (guest side)`);
  const dev = sideOf(c, toDevice ? 'dst' : 'src', ext, `${what} (device side)`);
  if (host.kind !== 'host' || dev.kind !== 'device') throw inval(`${what}: one side is guest memory, the other the device's`);
  const size = span(host.pitch, host.rows, ext);
  if (c.args.size !== size) throw inval(`${what}: ${c.args.size} data bytes for a box spanning ${size}`);
  if (c.dataOffset + c.dataLen > size) throw inval(`${what}: chunk ${c.dataOffset}+${c.dataLen} outside a transfer of ${size}`);
  const blocks = hostBlocks(host.pitch, host.rows, ext, dev.pos, c.dataOffset, c.dataOffset + c.dataLen);
  return { place: dev.place, blocks, stream };
}

/** The session's array whose handle a call names. */
function texResource(s: Session, a: Call<'TEX_CREATE'>['args']): TexResource {
  switch (a.res_type) {
    case 0:
      return { kind: 'array', array: s.objects.array(a.res).ref };
    case 1:
      return { kind: 'mipmap', mipmap: s.objects.mipmap(a.res).ref };
    case 2: {
      const elem = elementSize(a.format, a.channels);
      if (a.size === 0n || a.size >= BIG || a.size % elem !== 0n) throw inval(`linear texture of ${a.size} bytes`);
      s.checkRange(a.res, a.size, 'cudaCreateTextureObject (linear)');
      return { kind: 'linear', ptr: a.res, format: a.format, channels: a.channels, size: a.size };
    }
    case 3: {
      const elem = elementSize(a.format, a.channels);
      if (a.width === 0n || a.height === 0n || a.width >= BIG || a.height >= BIG || a.pitch >= BIG)
        throw inval(`pitch2D texture ${a.width}x${a.height}`);
      if (a.pitch < a.width * elem) throw new CudaError(CudaErr.InvalidPitchValue, `pitch ${a.pitch} < a row of ${a.width * elem} bytes`);
      s.checkRange(a.res, (a.height - 1n) * a.pitch + a.width * elem, 'cudaCreateTextureObject (pitch2D)');
      return { kind: 'pitch2d', ptr: a.res, format: a.format, channels: a.channels, width: a.width, height: a.height, pitch: a.pitch };
    }
    default:
      throw inval(`resource type ${a.res_type}`);
  }
}

function texDesc(a: Call<'TEX_CREATE'>['args']): TexDesc {
  for (const m of a.address_mode) if (m > 3) throw inval(`address mode ${m}`);
  if (a.filter_mode > 1 || a.mipmap_filter_mode > 1) throw inval('filter mode');
  if (a.flags & ~TEX_FLAGS) throw inval(`texture flags 0x${a.flags.toString(16)}`);
  if (a.max_anisotropy > 16) throw inval(`max anisotropy ${a.max_anisotropy}`);
  const am = a.address_mode;
  const bc = a.border_color;
  return {
    addressMode: [am[0], am[1], am[2]],
    filterMode: a.filter_mode,
    flags: a.flags,
    maxAnisotropy: a.max_anisotropy,
    mipmapFilterMode: a.mipmap_filter_mode,
    mipmapLevelBias: a.mipmap_level_bias,
    minLod: a.min_lod,
    maxLod: a.max_lod,
    borderColor: [bc[0], bc[1], bc[2], bc[3]],
  };
}

export const RUNS: Runs<
  | 'MEMCPY_3D_HTOD'
  | 'MEMCPY_3D_DTOH'
  | 'MEMCPY_3D_DTOD'
  | 'MEMSET_2D'
  | 'ARRAY_CREATE'
  | 'ARRAY_DESTROY'
  | 'MIPMAP_CREATE'
  | 'MIPMAP_LEVEL'
  | 'MIPMAP_DESTROY'
  | 'TEX_CREATE'
  | 'TEX_DESTROY'
  | 'SURF_CREATE'
  | 'SURF_DESTROY'
> = {
  async MEMCPY_3D_HTOD(c) {
    const k = hostCopy(c, true);
    if (k && k.blocks.length > 0) await c.session.withContext((x) => x.copy3DToDevice(k.place, c.data, k.blocks, k.stream));
  },

  async MEMCPY_3D_DTOH(c) {
    const k = hostCopy(c, false);
    if (k && k.blocks.length > 0) await c.session.withContext((x) => x.copy3DFromDevice(c.data, k.place, k.blocks, k.stream));
  },

  async MEMCPY_3D_DTOD(c) {
    const what = 'cudaMemcpy3D on the device';
    const ext = extentOf(c);
    const stream = c.session.stream(c.args.stream);
    if (c.args.dst_kind === QCUDA_MEM_HOST || c.args.src_kind === QCUDA_MEM_HOST) throw inval(`${what}: no guest side here`);
    if (ext === undefined) return;
    const dst = sideOf(c, 'dst', ext, `${what} (destination)`);
    const src = sideOf(c, 'src', ext, `${what} (source)`);
    if (dst.kind !== 'device' || src.kind !== 'device') throw inval(what);
    await (await c.session.context()).copy3DOnDevice(dst.place, dst.pos, src.place, src.pos, ext, stream, c.args.async !== 0);
  },

  async MEMSET_2D(c) {
    const { dst, pitch, width, height } = c.args;
    if (pitch >= BIG || width >= BIG || height >= BIG) throw inval(`cudaMemset2D of ${width}x${height}, pitch ${pitch}`);
    const stream = c.session.stream(c.args.stream);
    if (width === 0n || height === 0n) return;
    if (height > 1n && pitch < width) throw new CudaError(CudaErr.InvalidPitchValue, `cudaMemset2D: pitch ${pitch} < width ${width}`);
    c.session.checkRange(dst, (height - 1n) * pitch + width, 'cudaMemset2D destination');
    await (await c.session.context()).memset2D(dst, pitch, c.args.value & 0xff, width, height, stream, c.args.async !== 0);
  },

  async ARRAY_CREATE(c) {
    const a = c.args;
    const desc: ArrayDesc = { width: a.width, height: a.height, depth: a.depth, format: a.format, channels: a.channels, flags: a.flags };
    const elem = checkArrayDesc(desc);
    // Reserved before the first await: concurrent creations cannot all pass the quota.
    const r = c.session.reserve(arrayBytes(desc, elem));
    try {
      const x = await c.session.context();
      const ref = await x.arrayCreate(desc);
      try {
        return { value: c.session.objects.addArray(x, ref, desc, elem, r) };
      } catch (e) {
        await x.arrayDestroy(ref).catch(() => undefined); // a reset meanwhile: the context's destruction takes it anyway
        throw e;
      }
    } catch (e) {
      c.session.unreserve(r);
      throw e;
    }
  },

  async ARRAY_DESTROY(c) {
    const a = c.session.objects.takeArray(c.args.handle);
    await (await c.session.context()).arrayDestroy(a.ref);
  },

  async MIPMAP_CREATE(c) {
    const a = c.args;
    const desc: ArrayDesc = { width: a.width, height: a.height, depth: a.depth, format: a.format, channels: a.channels, flags: a.flags };
    const elem = checkArrayDesc(desc);
    if (desc.flags & ARRAY_SURFACE_LDST) throw inval('a mipmapped array has no surface load/store');
    if (a.levels < 1 || a.levels > maxLevels(desc))
      throw inval(`${a.levels} levels for a ${desc.width}x${desc.height}x${desc.depth} array`);
    let bytes = 0n;
    for (let l = 0; l < a.levels; l++) bytes += arrayBytes(levelDesc(desc, l), elem);
    const r = c.session.reserve(bytes);
    try {
      const x = await c.session.context();
      const ref = await x.mipmapCreate(desc, a.levels);
      try {
        return { value: c.session.objects.addMipmap(x, ref, desc, a.levels, elem, r) };
      } catch (e) {
        await x.mipmapDestroy(ref).catch(() => undefined);
        throw e;
      }
    } catch (e) {
      c.session.unreserve(r);
      throw e;
    }
  },

  async MIPMAP_LEVEL(c) {
    const m = c.session.objects.mipmap(c.args.handle);
    if (c.args.level >= m.levels) throw inval(`level ${c.args.level} of ${m.levels}`);
    const x = await c.session.context();
    const ref = await x.mipmapLevel(m.ref, c.args.level);
    return { value: c.session.objects.addLevel(x, c.args.handle, c.args.level, ref, levelDesc(m.desc, c.args.level)) };
  },

  async MIPMAP_DESTROY(c) {
    const m = c.session.objects.takeMipmap(c.args.handle);
    await (await c.session.context()).mipmapDestroy(m.ref);
  },

  async TEX_CREATE(c) {
    c.session.checkRoom('object');
    const res = texResource(c.session, c.args);
    const desc = texDesc(c.args);
    const x = await c.session.context();
    const t = await x.texCreate(res, desc);
    c.session.objects.addObject(x, 'texture', t);
    return { value: t };
  },

  async TEX_DESTROY(c) {
    c.session.objects.takeObject('texture', c.args.handle);
    await (await c.session.context()).texDestroy(c.args.handle);
  },

  async SURF_CREATE(c) {
    c.session.checkRoom('object');
    const a = c.session.objects.array(c.args.handle);
    // An array made without cudaArraySurfaceLoadStore is accepted too: CUDA 13 makes
    // the object (measured on the H100), what a kernel does with it is the kernel's.
    const x = await c.session.context();
    const s = await x.surfCreate(a.ref);
    c.session.objects.addObject(x, 'surface', s);
    return { value: s };
  },

  async SURF_DESTROY(c) {
    c.session.objects.takeObject('surface', c.args.handle);
    await (await c.session.context()).surfDestroy(c.args.handle);
  },
};
