// Log lines caused by the other side (a frontend's or a guest's bad
// requests) are rate-limited: a guest that makes the backend log on every
// request must not fill the host's disk or journal.

/**
 * At most `perSecond` lines a second go to `out`; the rest are counted, and
 * the count is written with the next line let through (a guest that makes
 * the backend log on every request cannot fill the host's disk or journal).
 */
export class LogLimiter {
  #windowStart = 0;
  #inWindow = 0;
  #dropped = 0;

  constructor(
    readonly perSecond: number,
    readonly out: (line: string) => void,
    readonly now: () => number = Date.now,
  ) {}

  log(line: string): void {
    const t = this.now();
    if (t - this.#windowStart >= 1000) {
      this.#windowStart = t;
      this.#inWindow = 0;
    }
    if (this.#inWindow >= this.perSecond) {
      this.#dropped++;
      return;
    }
    this.#inWindow++;
    if (this.#dropped > 0) {
      this.out(`(${this.#dropped} log lines dropped: more than ${this.perSecond} a second)`);
      this.#dropped = 0;
    }
    this.out(line);
  }

  get dropped(): number {
    return this.#dropped;
  }
}
