// Where a GPU disk (blk.ts) keeps its bytes: device memory of a provider
// context (the cuda provider: GPU memory; the emu provider: host RAM, for
// machines without a GPU), in pieces of PIECE bytes. A disk of its own
// (a backend started alone) has them all allocated at start; a disk that
// takes from a VM's device memory quota (`qcuda vm`: vm-ledger.ts) gets
// each piece at the first write into it, its bytes taken from the quota
// then, so that the disk and the VM's CUDA processes share one budget as
// they use it; a piece never written reads as zeroes. Requests copy
// straight between guest RAM (the request's segments) and the store.
import type { DevPtr, GuestSeg, Provider, ProviderContext } from '../qcuda/provider';
import type { Share } from '../qcuda/quota/limits';

/** A piece: few for a large disk, small enough to be granted and to take a quota in steps a guest's writes make. */
export const PIECE = 64n << 20n;

/** A write needed a piece the VM's quota (or the device) has no room for: the request fails, the disk serves on. */
export class StoreFullError extends Error {}

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

/** The parts of [off, off + len) in each piece: the piece's index, the offset in it, and the offset into the request. */
function* spans(off: bigint, len: bigint): Generator<{ piece: number; inPiece: bigint; at: bigint; n: bigint }> {
  let at = 0n;
  while (at < len) {
    const p = (off + at) / PIECE;
    const inPiece = (off + at) % PIECE;
    const n = len - at < PIECE - inPiece ? len - at : PIECE - inPiece;
    yield { piece: Number(p), inPiece, at, n };
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
  /** Each piece's memory, once allocated. */
  readonly #pieces: (DevPtr | undefined)[];
  /** Pieces being allocated (two writes into a new piece wait for one allocation). */
  readonly #allocating = new Map<number, Promise<DevPtr>>();

  private constructor(
    readonly size: bigint,
    private readonly ctx: ProviderContext,
    /** The VM's quota the pieces are taken from as they are written (none: all allocated at open). */
    private readonly quota: Share | undefined,
  ) {
    this.#pieces = new Array<DevPtr | undefined>(Number((size + PIECE - 1n) / PIECE)).fill(undefined);
  }

  /**
   * size bytes of zeroes. Without a quota, allocated now: fails (freeing
   * what it took) if the device has no room for them. With one, allocated
   * as written.
   */
  static async open(provider: Provider, size: bigint, quota?: Share): Promise<ProviderStore> {
    const ctx = await provider.openContext(0);
    const store = new ProviderStore(size, ctx, quota);
    try {
      // Allocated as written, it must still fit the device whole.
      const { free, total } = await ctx.memGetInfo();
      if (quota && size > total) throw new Error(`${total} bytes in all`);
      if (quota) return store;
      if (size > free) throw new Error(`${free} bytes free`);
      for (let p = 0; p < store.#pieces.length; p++) await store.#piece(p);
    } catch (e) {
      await ctx.destroy('exit').catch(() => undefined);
      throw new Error(`a disk of ${size} bytes does not fit in the ${provider.name} provider's memory: ${(e as Error).message}`);
    }
    return store;
  }

  /** Bytes of the disk allocated (with a quota: what it holds of it). */
  get allocated(): bigint {
    let n = 0n;
    this.#pieces.forEach((p, i) => (n += p === undefined ? 0n : this.#pieceSize(i)));
    return n;
  }

  #pieceSize(p: number): bigint {
    const left = this.size - BigInt(p) * PIECE;
    return left < PIECE ? left : PIECE;
  }

  /** Piece p's memory, allocated (and zeroed) on first use. */
  #piece(p: number): Promise<DevPtr> {
    const have = this.#pieces[p];
    if (have !== undefined) return Promise.resolve(have);
    let pending = this.#allocating.get(p);
    if (!pending) {
      pending = this.#allocate(p).finally(() => this.#allocating.delete(p));
      this.#allocating.set(p, pending);
    }
    return pending;
  }

  async #allocate(p: number): Promise<DevPtr> {
    const n = this.#pieceSize(p);
    try {
      this.quota?.take(n);
    } catch (e) {
      throw new StoreFullError((e as Error).message);
    }
    let ptr: DevPtr | undefined;
    try {
      ptr = await this.ctx.malloc(n);
      await this.ctx.memset(ptr, 0, n, undefined, false);
    } catch (e) {
      if (ptr !== undefined) await this.ctx.free(ptr).catch(() => undefined);
      this.quota?.give(n);
      throw new StoreFullError(`${n} bytes of device memory: ${(e as Error).message}`);
    }
    this.#pieces[p] = ptr;
    return ptr;
  }

  async read(off: bigint, dst: GuestSeg[]): Promise<void> {
    for (const s of spans(off, length(dst))) {
      const ptr = this.#pieces[s.piece];
      const to = slice(dst, s.at, s.n);
      if (ptr === undefined) for (const seg of to) seg.view.fill(0);
      else await this.ctx.copyFromDevice(to, ptr + s.inPiece, undefined);
    }
  }

  async write(off: bigint, src: GuestSeg[]): Promise<void> {
    for (const s of spans(off, length(src)))
      await this.ctx.copyToDevice((await this.#piece(s.piece)) + s.inPiece, slice(src, s.at, s.n), undefined);
  }

  /** A piece never written is zeroes already: it stays unallocated. */
  async zero(off: bigint, len: bigint): Promise<void> {
    for (const s of spans(off, len)) {
      const ptr = this.#pieces[s.piece] ?? (await this.#allocating.get(s.piece)?.catch(() => undefined));
      if (ptr !== undefined) await this.ctx.memset(ptr + s.inPiece, 0, s.n, undefined, false);
    }
  }

  async flush(): Promise<void> {
    await this.ctx.synchronize();
  }

  /** The memory goes with the context; the quota's part is given back with it. */
  async close(): Promise<void> {
    await Promise.allSettled(this.#allocating.values());
    await this.ctx.destroy('exit');
    this.quota?.give(this.allocated);
  }
}
