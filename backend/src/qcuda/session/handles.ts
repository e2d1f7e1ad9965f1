// The handles a session gives the guest for what it makes (streams, events,
// arrays, graphs, modules, functions, ...): one table per kind, all numbered
// from one counter per session, so no two objects of a session share a
// handle whatever their kinds. A handle the table does not hold (another
// session's, a freed one, a guess) is refused with the kind's error code.
import { CudaError } from '../cuda-error';

/** Where a session's handles come from: one counter for all its tables. */
export class HandleCounter {
  #next = 0x100n;
  /** The handle the next next() gives (reuse), once. */
  #again: bigint | undefined;

  next(): bigint {
    if (this.#again !== undefined) {
      const h = this.#again;
      this.#again = undefined;
      return h;
    }
    const h = this.#next;
    this.#next += 1n;
    return h;
  }

  /** The handle next() would give now (a migrated session continues from it). */
  get upcoming(): bigint {
    return this.#next;
  }

  /** A restored session's: the next next() gives h again, a handle its source gave out (migration/). */
  reuse(h: bigint): void {
    if (h < 0x100n || h >= this.#next) throw new RangeError(`handle 0x${h.toString(16)} was never given out`);
    this.#again = h;
  }

  /** A restored session's: handles go on from next, as at its source. */
  resume(next: bigint): void {
    if (next > this.#next) this.#next = next;
  }
}

export class HandleTable<T> {
  readonly #items = new Map<bigint, T>();

  /**
   * kind names the objects in errors; errorCode is what a handle not held
   * here is answered with; onChange hears of each object added (v) and
   * removed (undefined), one by one (not of clear()).
   */
  constructor(
    readonly kind: string,
    private readonly counter: HandleCounter,
    private readonly errorCode: number,
    private readonly onChange?: (h: bigint, v: T | undefined) => void,
  ) {}

  /** Records v under a new handle. */
  add(v: T): bigint {
    const h = this.counter.next();
    this.#items.set(h, v);
    this.onChange?.(h, v);
    return h;
  }

  /** The object behind h; throws the kind's error if this table does not hold it. */
  get(h: bigint): T {
    const v = this.#items.get(h);
    if (v === undefined) throw new CudaError(this.errorCode, `${this.kind} 0x${h.toString(16)} is not one of this process`);
    return v;
  }

  /** The object behind h, if held. */
  find(h: bigint): T | undefined {
    return this.#items.get(h);
  }

  /** Forgets h: its object, for the caller to free. */
  take(h: bigint): T {
    const v = this.get(h);
    this.remove(h);
    return v;
  }

  /** Forgets h if held. */
  remove(h: bigint): void {
    if (this.#items.delete(h)) this.onChange?.(h, undefined);
  }

  values(): IterableIterator<T> {
    return this.#items.values();
  }

  entries(): IterableIterator<[bigint, T]> {
    return this.#items.entries();
  }

  get size(): number {
    return this.#items.size;
  }

  /** Forgets everything, telling no one (the session's reset or close clears what listens too). */
  clear(): void {
    this.#items.clear();
  }
}
