// Polling while busy. A process that sleeps in epoll and is woken by an
// eventfd or a socket runs tens of microseconds later on a loaded or
// virtualized host (11-60 us measured on the H100 machine, itself a VM),
// which is most of a short call's round trip. So for a bounded window after
// its last activity a process keeps its event loop turning without sleeping:
// an immediate is always pending, so libuv polls its fds with a zero timeout,
// and the checks added here (a ring's avail index, say) run once a turn.
// When the window has passed with nothing to do the loop sleeps again, so an
// idle process costs no CPU.

/** A check run once a loop turn while polling; `expired` on its last call (the window passed). */
export type PollCheck = (expired: boolean) => void;

export class BusyPoll {
  readonly #windowNs: bigint;
  readonly #checks = new Set<PollCheck>();
  /** Checks that stay across windows (keep). */
  readonly #kept = new Set<PollCheck>();
  #until = 0n;
  #running = false;

  /** windowUs: how long to poll after the last touch (0: never poll). */
  constructor(windowUs: number) {
    this.#windowNs = BigInt(Math.max(0, Math.round(windowUs * 1000)));
  }

  get enabled(): boolean {
    return this.#windowNs > 0n;
  }

  /** Something happened: poll for another window from now. */
  touch(): void {
    if (this.#windowNs === 0n) return;
    this.#until = process.hrtime.bigint() + this.#windowNs;
    if (this.#running) return;
    this.#running = true;
    // Kept checks learn of the window as it opens: what they start from now on is polled by its turns.
    for (const check of [...this.#kept]) check(false);
    setImmediate(this.#turn);
  }

  /** Runs check every turn while polling, and once more with expired = true when the window ends. */
  add(check: PollCheck): void {
    this.#checks.add(check);
  }

  delete(check: PollCheck): void {
    this.#checks.delete(check);
  }

  /** Like add, for every window to come: check runs as each window opens (inside touch), each turn, and on its last turn with expired = true. */
  keep(check: PollCheck): void {
    this.#kept.add(check);
  }

  readonly #turn = (): void => {
    const expired = process.hrtime.bigint() >= this.#until;
    if (expired) this.#running = false;
    for (const check of [...this.#checks]) {
      if (expired) this.#checks.delete(check);
      check(expired);
    }
    for (const check of [...this.#kept]) check(expired);
    // After the last turn a check that found work has touched, which started a new window.
    if (!expired) setImmediate(this.#turn);
  };
}
