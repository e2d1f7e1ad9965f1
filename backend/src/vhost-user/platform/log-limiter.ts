// Log lines caused by the other side (a frontend's or a guest's bad
// requests) are rate-limited: a guest that makes the backend log on every
// request must not fill the host's disk or journal.

/**
 * Bytes another side chose, as one line of a log: printable ASCII as it is,
 * every other byte (control characters, a newline that would start a forged
 * line, a backslash) as \xNN; at most max bytes of it, the rest as "...".
 * A trailing newline is dropped.
 */
export function printable(bytes: Uint8Array, max = 512): string {
  let n = bytes.length;
  if (n > 0 && bytes[n - 1] === 0x0a) n--;
  let out = '';
  for (let i = 0; i < n && i < max; i++) {
    const c = bytes[i];
    out += c >= 0x20 && c < 0x7f && c !== 0x5c ? String.fromCharCode(c) : `\\x${c.toString(16).padStart(2, '0')}`;
  }
  return n > max ? `${out}...` : out;
}

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
