// Moving bytes between lists of views: what every copy of the emu provider
// comes down to (device memory, guest memory and arrays are all views).
import { CudaErr, CudaError } from '../../cuda-error';
import type { GuestSeg } from '../../provider';

/** Copies between lists of views of equal total length. */
export function copyViews(dst: Uint8Array[], src: Uint8Array[]): void {
  let si = 0;
  let so = 0;
  for (const d of dst) {
    let done = 0;
    while (done < d.length) {
      const s = src[si];
      const n = Math.min(d.length - done, s.length - so);
      d.set(s.subarray(so, so + n), done);
      done += n;
      so += n;
      if (so === s.length) {
        si++;
        so = 0;
      }
    }
  }
}

/** Views of [off, off + len) of a chunk's segments. */
export function segRange(segs: GuestSeg[], off: bigint, len: bigint): Uint8Array[] {
  const out: Uint8Array[] = [];
  let at = 0n;
  let want = len;
  for (const s of segs) {
    const n = BigInt(s.len);
    if (want > 0n && off < at + n) {
      const from = off > at ? off - at : 0n;
      const take = n - from < want ? n - from : want;
      out.push(s.view.subarray(Number(from), Number(from + take)));
      want -= take;
      off += take;
    }
    at += n;
    if (want === 0n) break;
  }
  if (want !== 0n) throw new CudaError(CudaErr.InvalidValue, 'a block runs past its chunk');
  return out;
}

/** count elements of elem bytes, each value's low elem bytes little-endian (a memset node's row). */
export function pattern(value: number, elem: number, count: number): Uint8Array {
  const out = new Uint8Array(count * elem);
  for (let b = 0; b < elem; b++) out[b] = (value >>> (8 * b)) & 0xff;
  for (let have = elem; have < out.length; have *= 2) out.copyWithin(have, 0, have); // doubling: few calls for any size
  return out;
}
