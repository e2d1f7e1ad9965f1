// Polling while busy. A process that sleeps in epoll and is woken by an
// eventfd or a socket runs tens of microseconds later on a loaded or
// virtualized host (11-60 us measured on the H100 machine, itself a VM),
// which is most of a short call's round trip. So for a bounded window after
// its last activity a process keeps its event loop turning without sleeping:
// an immediate is always pending, so libuv polls its fds with a zero timeout,
// and the checks added here (a ring's avail index, say) run once a turn.
// When the window has passed with nothing to do the loop sleeps again, so an
// idle process costs no CPU.
//
// A process that serves one caller from memory it polls (a session's worker
// on its own queue, a driver waiting for its answer) may also spin: at the
// start of a turn, while every check says it is quiet (nothing to take,
// nothing in flight), it waits in a loop on those checks for up to spinUs
// instead of letting the loop turn. A turn of the event loop costs
// microseconds (timers, an epoll_wait, the immediates); the spin sees a new
// request within a fraction of one. It spins only while every check can say
// it is quiet, so nothing the loop must do for a check is held up; what
// comes on an fd (a control message) waits at most spinUs.
//
// Such a caller's next request follows its answer within microseconds, so
// the answerer may also spin right after answering (spinAfterAnswer), in the
// same turn, instead of going round the event loop first: an epoll_wait and
// the loop's phases, a microsecond or more, between each answer and the next
// request. A turn goes on that way for at most chainUs (default CHAIN_US);
// then the loop turns.

/** A check run once a loop turn while polling; `expired` on its last call (the window passed). */
export type PollCheck = (expired: boolean) => void;
/** True while a check has nothing to do: no work to take, nothing in flight that needs the event loop. */
export type Quiet = () => boolean;

/** How long one turn may go on serving requests that each came while spinning after an answer (spinAfterAnswer), by default. */
const CHAIN_US = 200;

export class BusyPoll {
  /** In milliseconds, as performance.now() counts (process.hrtime.bigint() allocates a bigint on every touch). */
  readonly #windowMs: number;
  readonly #spinMs: number;
  readonly #chainMs: number;
  readonly #checks = new Map<PollCheck, Quiet | undefined>();
  /** Checks that stay across windows (keep). */
  readonly #kept = new Map<PollCheck, Quiet | undefined>();
  #until = 0;
  /** Touched since the window's end was last worked out: it moves to a window from the next clock read (one read less on every request). */
  #touched = false;
  /** Every check's quiet, for #spin (null: not worked out since the checks changed; undefined: a check has none, so no spinning). */
  #quiet: Quiet[] | undefined | null = null;
  #running = false;
  /** When the current turn began (performance.now()). */
  #turnStart = 0;

  /** windowUs: how long to poll after the last touch (0: never poll); spinUs: how long a turn may spin while all is quiet (0: never); chainUs: how long a turn may go on answering (spinAfterAnswer). */
  constructor(windowUs: number, spinUs = 0, chainUs = CHAIN_US) {
    this.#chainMs = Math.max(0, chainUs) / 1000;
    this.#windowMs = Math.max(0, windowUs) / 1000;
    this.#spinMs = Math.max(0, spinUs) / 1000;
  }

  get enabled(): boolean {
    return this.#windowMs > 0;
  }

  /** How long a turn may spin while all is quiet, in microseconds (a ring's front spins as long after each answer). */
  get spinUs(): number {
    return this.#spinMs * 1000;
  }

  /** How long one turn may go on answering, in microseconds. */
  get chainUs(): number {
    return this.#chainMs * 1000;
  }

  /** A window is open: the checks run every turn (and once more, expired, at its end). */
  get polling(): boolean {
    return this.#running;
  }

  /** Something happened: poll for another window from now. */
  touch(): void {
    if (this.#windowMs === 0) return;
    if (this.#running) {
      this.#touched = true;
      return;
    }
    this.#until = performance.now() + this.#windowMs;
    this.#running = true;
    // Kept checks learn of the window as it opens: what they start from now on is polled by its turns.
    for (const check of [...this.#kept.keys()]) check(false);
    setImmediate(this.#turn);
  }

  /** Runs check every turn while polling, and once more with expired = true when the window ends. quiet lets turns spin (see above). */
  add(check: PollCheck, quiet?: Quiet): void {
    this.#checks.set(check, quiet);
    this.#quiet = null;
  }

  delete(check: PollCheck): void {
    if (this.#checks.delete(check)) this.#quiet = null;
  }

  /** Like add, for every window to come: check runs as each window opens (inside touch), each turn, and on its last turn with expired = true. */
  keep(check: PollCheck, quiet?: Quiet): void {
    this.#kept.set(check, quiet);
    this.#quiet = null;
  }

  /**
   * Right after an answer went out: spins as a turn's start would, while
   * every check is quiet, and says whether one stopped being quiet (a request
   * came: take it now). False at once outside a turn or once this turn has
   * gone on for chainUs, so the event loop still turns that often.
   */
  spinAfterAnswer(): boolean {
    if (!this.#running) return false;
    const now = performance.now();
    if (now - this.#turnStart > this.#chainMs) return false;
    return this.#spin(now);
  }

  /** The clock read now: a touch since the last read moves the window's end. */
  #at(now: number): number {
    if (this.#touched) {
      this.#touched = false;
      this.#until = now + this.#windowMs;
    }
    return now;
  }

  readonly #turn = (): void => {
    this.#turnStart = performance.now();
    this.#spin(this.#turnStart);
    const expired = this.#at(performance.now()) >= this.#until;
    if (expired) this.#running = false;
    // A check may add or delete checks as it runs: on the last turn each of
    // those now runs once (a copy); otherwise a check added meanwhile may
    // already run this turn, which is harmless.
    for (const check of expired ? [...this.#checks.keys()] : this.#checks.keys()) {
      if (expired) this.#checks.delete(check);
      check(expired);
    }
    for (const check of this.#kept.keys()) check(expired);
    // After the last turn a check that found work has touched, which started a new window.
    if (!expired) setImmediate(this.#turn);
  };

  /** Waits here, not in the event loop, while every check is quiet: up to spinUs, never past the window. True if a check stopped being quiet. */
  #spin(now: number): boolean {
    if (this.#spinMs === 0 || this.#checks.size === 0) return false;
    const quiet = this.#quietChecks();
    if (!quiet) return false;
    this.#at(now);
    const end = Math.min(now + this.#spinMs, this.#until);
    for (;;) {
      for (const q of quiet) if (!q()) return true;
      if (performance.now() >= end) return false;
    }
  }

  #quietChecks(): Quiet[] | undefined {
    if (this.#quiet !== null) return this.#quiet;
    const all = [...this.#checks.values(), ...this.#kept.values()];
    this.#quiet = all.every((q) => q !== undefined) ? (all as Quiet[]) : undefined;
    return this.#quiet;
  }
}
