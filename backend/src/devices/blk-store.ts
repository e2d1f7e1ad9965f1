// Where a GPU disk (blk.ts) keeps its bytes: device memory of a provider
// context (the cuda provider: GPU memory; the host provider: host RAM, for
// machines without a GPU), allocated once, in pieces of at most PIECE bytes
// so that a disk larger than one allocation the driver grants still fits.
// Requests copy straight between guest RAM (the request's segments) and the
// store.
import type { DevPtr, GuestSeg, Provider, ProviderContext } from '../qcuda/provider';

/** The largest single allocation: large enough to be few, small enough to be granted. */
export const PIECE = 1n << 30n;

export interface BlkStore {
  readonly size: bigint;
  /** Copies [off, off + total length) of the disk into the segments. */
  read(off: bigint, dst: GuestSeg[]): Promise<void>;
  /** Copies the segments into the disk at off. */
  write(off: bigint, src: GuestSeg[]): Promise<void>;
  /** Zeroes [off, off + len). */
  zero(off: bigint, len: bigint): Promise<void>;
  /** Everything written is in the store (the copies are synchronous: nothing to do but wait for them). */
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** The parts of [off, off + len) in each piece: its pointer, and the offset into the request. */
function* spans(pieces: readonly DevPtr[], off: bigint, len: bigint): Generator<{ ptr: DevPtr; at: bigint; n: bigint }> {
  let at = 0n;
  while (at < len) {
    const p = (off + at) / PIECE;
    const inPiece = (off + at) % PIECE;
    const n = len - at < PIECE - inPiece ? len - at : PIECE - inPiece;
    yield { ptr: pieces[Number(p)] + inPiece, at, n };
    at += n;
  }
}

/** Segments [at, at + n) of a list of segments. */
function slice(segs: GuestSeg[], at: bigint, n: bigint): GuestSeg[] {
  const out: GuestSeg[] = [];
  let skip = Number(at);
  let want = Number(n);
  for (const s of segs) {
    if (want === 0) break;
    if (skip >= s.len) {
      skip -= s.len;
      continue;
    }
    const take = Math.min(s.len - skip, want);
    out.push({ addr: s.addr + BigInt(skip), len: take, view: s.view.subarray(skip, skip + take) });
    want -= take;
    skip = 0;
  }
  return out;
}

const length = (segs: GuestSeg[]): bigint => segs.reduce((n, s) => n + BigInt(s.len), 0n);

/** A store in a provider context's device memory. */
export class ProviderStore implements BlkStore {
  private constructor(
    readonly size: bigint,
    private readonly ctx: ProviderContext,
    private readonly pieces: DevPtr[],
  ) {}

  /** size bytes of zeroes; fails (freeing what it took) if the device has no room for them. */
  static async open(provider: Provider, size: bigint): Promise<ProviderStore> {
    const ctx = await provider.openContext(0);
    const pieces: DevPtr[] = [];
    try {
      const { free } = await ctx.memGetInfo();
      if (size > free) throw new Error(`${free} bytes free`);
      for (let left = size; left > 0n; left -= PIECE) {
        const n = left < PIECE ? left : PIECE;
        const p = await ctx.malloc(n);
        pieces.push(p);
        await ctx.memset(p, 0, n, undefined, false);
      }
    } catch (e) {
      await ctx.destroy('exit').catch(() => undefined);
      throw new Error(`a disk of ${size} bytes does not fit in the ${provider.name} provider's memory: ${(e as Error).message}`);
    }
    return new ProviderStore(size, ctx, pieces);
  }

  async read(off: bigint, dst: GuestSeg[]): Promise<void> {
    for (const s of spans(this.pieces, off, length(dst))) await this.ctx.copyFromDevice(slice(dst, s.at, s.n), s.ptr, undefined);
  }

  async write(off: bigint, src: GuestSeg[]): Promise<void> {
    for (const s of spans(this.pieces, off, length(src))) await this.ctx.copyToDevice(s.ptr, slice(src, s.at, s.n), undefined);
  }

  async zero(off: bigint, len: bigint): Promise<void> {
    for (const s of spans(this.pieces, off, len)) await this.ctx.memset(s.ptr, 0, s.n, undefined, false);
  }

  async flush(): Promise<void> {
    await this.ctx.synchronize();
  }

  async close(): Promise<void> {
    await this.ctx.destroy('exit');
  }
}
