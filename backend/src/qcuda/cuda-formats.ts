// CUDA's array formats and flags as qcuda serves them, and the flag of a
// conditional graph handle: what both the commands (which check a guest's
// values) and the emu provider (which emulates them) need to know.
import { CudaErr, CudaError } from './cuda-error';
import type { ArrayDesc } from './provider';

/** CUarray_format -> bytes per channel (the formats qcuda serves). */
const FORMAT_BYTES: ReadonlyMap<number, bigint> = new Map([
  [0x01, 1n],
  [0x02, 2n],
  [0x03, 4n], // unsigned int 8, 16, 32
  [0x08, 1n],
  [0x09, 2n],
  [0x0a, 4n], // signed int 8, 16, 32
  [0x10, 2n],
  [0x20, 4n], // half, float
]);

/** CUDA_ARRAY3D_* flags served: LAYERED, SURFACE_LDST, CUBEMAP, TEXTURE_GATHER. */
export const ARRAY_LAYERED = 0x1;
export const ARRAY_SURFACE_LDST = 0x2;
export const ARRAY_CUBEMAP = 0x4;
export const ARRAY_FLAGS = 0x1 | 0x2 | 0x4 | 0x8;

/** cudaGraphCondAssignDefault: the only flag of a conditional handle. */
export const COND_ASSIGN_DEFAULT = 1;

/** Bytes per element of a format and channel count. */
export function elementSize(format: number, channels: number): bigint {
  const b = FORMAT_BYTES.get(format);
  if (b === undefined) throw new CudaError(CudaErr.InvalidValue, `array format 0x${format.toString(16)} is not supported`);
  if (channels !== 1 && channels !== 2 && channels !== 4) throw new CudaError(CudaErr.InvalidValue, `${channels} channels (1, 2 or 4)`);
  return b * BigInt(channels);
}

/** The shape of level `l` of a mipmapped array whose level 0 is d (layers and cubemap faces stay). */
export function levelDesc(d: ArrayDesc, l: number): ArrayDesc {
  const half = (v: bigint) => (v === 0n ? 0n : v >> BigInt(l) || 1n);
  const keepDepth = (d.flags & (ARRAY_LAYERED | ARRAY_CUBEMAP)) !== 0;
  return { ...d, width: half(d.width), height: half(d.height), depth: keepDepth ? d.depth : half(d.depth) };
}
