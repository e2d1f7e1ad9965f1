// Address ranges kept sorted by base, for "which allocation holds this
// pointer" lookups in O(log n).
export interface Range {
  base: bigint;
  size: bigint;
}

export class RangeSet<T extends Range> {
  readonly #items: T[] = [];

  get size(): number {
    return this.#items.length;
  }

  values(): readonly T[] {
    return this.#items;
  }

  /**
   * An empty range goes before the others at its base: find() steps past an
   * empty range towards higher bases, so one placed after a non-empty range
   * at the same base would hide it.
   */
  add(r: T): void {
    const i = this.#items.findIndex((x) => (r.size === 0n ? x.base >= r.base : x.base > r.base));
    this.#items.splice(i < 0 ? this.#items.length : i, 0, r);
  }

  /** Removes the first range starting exactly at base that matches. */
  removeAt(base: bigint, match: (r: T) => boolean = () => true): T | undefined {
    const i = this.#items.findIndex((r) => r.base === base && match(r));
    return i < 0 ? undefined : this.#items.splice(i, 1)[0];
  }

  removeWhere(match: (r: T) => boolean): T[] {
    const gone = this.#items.filter(match);
    for (let i = this.#items.length - 1; i >= 0; i--) if (match(this.#items[i])) this.#items.splice(i, 1);
    return gone;
  }

  /** The range holding ptr, if any. */
  find(ptr: bigint): T | undefined {
    let lo = 0;
    let hi = this.#items.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const r = this.#items[mid];
      if (ptr < r.base) hi = mid - 1;
      else if (ptr >= r.base + r.size) lo = mid + 1;
      else return r;
    }
    return undefined;
  }

  /** A range sharing a byte with [ptr, ptr+size), if any (size > 0). */
  overlapping(ptr: bigint, size: bigint): T | undefined {
    let lo = 0;
    let hi = this.#items.length;
    // The first range ending after ptr (ranges are disjoint, so sorted by end too).
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      const r = this.#items[mid];
      if (r.base + r.size <= ptr) lo = mid + 1;
      else hi = mid;
    }
    const r = this.#items[lo];
    return r && r.size > 0n && r.base < ptr + size ? r : undefined;
  }

  /** The range holding all of [ptr, ptr+size), if any. */
  holding(ptr: bigint, size: bigint): T | undefined {
    const r = this.find(ptr);
    return r && ptr + size <= r.base + r.size ? r : undefined;
  }

  clear(): void {
    this.#items.length = 0;
  }
}
