// A started virtqueue served in this process (the data path of vring.ts's
// Vring, which adds the vhost-user messages that set a ring up and stop it,
// and handing it to another process and back): chains taken from the avail
// ring and handed to the device's handler (or a RingFront first), answers
// put in the used ring, the driver interrupted and its kicks suppressed as
// it asked (EVENT_IDX or the flags), busy polling, and the requests in
// flight counted for those who wait for them. The ring's memory layout and
// order are split-ring.ts's.
import createDebug from 'debug';
import type { DescChain } from './chain';
import { FrontendFault } from './errors';
import type { BusyPoll } from './platform/busy-poll';
import type { EventFd } from './platform/fd';
import type { InflightRecord } from './inflight';
import type { MemoryTable } from './memory';
import { Request } from './request';
import type { Handler, RingFront } from './ring-front';
import type { SplitRing } from './split-ring';

const debug = createDebug('vhost-user:vring');

const RESOLVED = Promise.resolve();
/** How long GET_VRING_BASE waits for in-flight requests before giving up on them. */
export const STOP_TIMEOUT_MS = 5000;

export interface RingFeatures {
  indirect: boolean;
  eventIdx: boolean;
}

/** The device's bounds on what a driver may put in a ring. */
export interface RingLimits {
  /** Largest queue size (a power of two). */
  maxSize: number;
  /** Largest indirect table, in descriptors. */
  maxIndirect: number;
}

/** A ring's serving side; Vring (vring.ts) is the ring. */
export class ServedRing {
  readonly index: number;
  size = 0;
  lastAvail = 0;
  enabled = false;
  started = false;
  broken = false;
  /** Where the frontend is untrusted (VhostUserServer.listenEach): what drops it when it misbehaves. */
  onFault: ((e: FrontendFault) => void) | undefined;
  kick: EventFd | undefined;
  call: EventFd | undefined;
  err: EventFd | undefined;
  /** The ring's parts in guest memory, once its addresses are set. */
  protected views: SplitRing | undefined;
  protected usedIdx = 0;
  protected signalledUsed = 0;
  /** Another process serves the ring for now (Vring.detach); this one takes nothing from it. */
  protected handedOn = false;
  /** Where this process, serving a ring handed to it, records what it has in flight (inflight.ts). */
  protected record: InflightRecord | undefined;
  /** Serves requests ahead of the handler (Vring.serveFirst). */
  protected front: RingFront | undefined;
  #inflight = 0;
  #generation = 0; // bumped on stop: completions of an older generation are dropped
  #signalPending = false;
  #drained: (() => void) | undefined;
  /** This ring is checked every turn of the poller (its kicks stay suppressed meanwhile). */
  #polling = false;
  /** Takes nothing new while set (pause: a backend stopping, or one restoring its state); what is in flight finishes. */
  #paused = false;

  constructor(
    index: number,
    protected readonly limits: RingLimits,
    protected readonly features: RingFeatures,
    protected readonly handler: Handler,
    protected readonly memory: MemoryTable,
    /** Polls the ring for a while after each request instead of waiting for a kick (none: kicks only). */
    protected readonly poll?: BusyPoll,
  ) {
    this.index = index;
  }

  /** What is in flight is forgotten: its answers, when they come, are dropped (a stop, a close). */
  protected forgetInflight(): void {
    this.#generation++;
    this.#inflight = 0;
  }

  /** Resolves once nothing is in flight, or after STOP_TIMEOUT_MS. */
  protected async settle(): Promise<void> {
    if (this.#inflight === 0) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, STOP_TIMEOUT_MS);
      this.#drained = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.#drained = undefined;
  }

  /**
   * Takes nothing more from the ring until unpause(), the ring otherwise as
   * it is (started, enabled, its fds): what is in flight finishes and is
   * answered. A backend that stops for a restart pauses its rings, then
   * waits for idle(); one that restores a state holds its rings so until
   * the state is in.
   */
  pause(): void {
    this.#paused = true;
  }

  /** Takes requests again, looking at the ring at once (kicks that came meanwhile went unread). */
  unpause(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.process();
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** Requests taken and not yet answered. */
  get inflight(): number {
    return this.#inflight;
  }

  /** Resolves once nothing is in flight, or after ms: the requests still in flight. */
  async idle(ms: number): Promise<number> {
    if (this.#inflight === 0) return 0;
    const prev = this.#drained;
    const mine = await new Promise<() => void>((resolve) => {
      const timer = setTimeout(() => resolve(mine), ms);
      const mine = (): void => {
        clearTimeout(timer);
        prev?.();
        resolve(mine);
      };
      this.#drained = mine;
    });
    if (this.#drained === mine) this.#drained = prev;
    return this.#inflight;
  }

  /**
   * Takes every available chain and hands it to the device. With a poller,
   * a ring that had work is checked every loop turn for the poller's window
   * with the driver's kicks suppressed (a kick costs the guest an exit and
   * this process a wake-up); when the window passes, kicks are asked for
   * again and the ring checked once more, so nothing made available in
   * between is missed.
   */
  process(): void {
    const v = this.views;
    if (!v || !this.started || !this.enabled || this.broken || this.handedOn || this.#paused) return;
    const took = this.#drain(v);
    // Handed on meanwhile (detach): no polling or kicks here any more; what was answered is still signalled.
    if (!this.handedOn) {
      if (took > 0 && this.poll?.enabled) this.#keepPolling();
      if (!this.#polling) this.#askForKicks(v);
    }
    this.flushSignal();
  }

  /** Takes what is available until nothing is, kicks suppressed; returns how many were taken. */
  #drain(v: SplitRing): number {
    this.#suppressKicks(v, true);
    let took = 0;
    // The front may wait for a caller's next request; it does so for one chain of the poller's at most, so the event loop still turns.
    const end = this.front ? performance.now() + (this.poll?.chainUs ?? 0) / 1000 : 0;
    for (;;) {
      // A request's handler may have handed the ring on (detach): what follows in it is the new owner's.
      if (this.handedOn || this.#paused) return took;
      const avail = v.availIdx();
      const pending = (avail - this.lastAvail) & 0xffff;
      if (pending > this.size) {
        this.#fail(`avail index ${avail} is ${pending} entries ahead of ${this.lastAvail}`);
        return took;
      }
      if (pending === 0) return took;
      if (this.front) {
        // The front answers what it can while nothing is in flight (or only
        // what it may serve beside); the handler takes the request it
        // stopped at, one at a time, so the front may go on after it.
        if (this.#inflight === 0 || this.front.servesBeside?.(this.#inflight)) {
          const served = this.#serveFront(v, end);
          took += served;
          if (served > 0) continue;
        }
        this.#take(v);
        took++;
        if (this.broken) return took;
        continue;
      }
      for (let n = 0; n < pending && !this.handedOn && !this.#paused; n++, took++) this.#take(v);
      if (this.broken) return took;
    }
  }

  /**
   * The front's turn, until `end` (performance.now()): it waits for the
   * caller's next request only while the poller's window is open. Returns
   * the requests it took: those it answered, and one it left to finish here.
   */
  #serveFront(v: SplitRing, end: number): number {
    const f = this.front!;
    const c = f.cursor;
    c[0] = this.lastAvail;
    c[1] = this.usedIdx;
    c[2] = this.signalledUsed;
    const p = this.poll;
    const n = f.serve(p?.polling ? p.spinUs * 1000 : 0, Math.max(0, Math.round((end - performance.now()) * 1e6)));
    this.lastAvail = c[0] & 0xffff;
    this.usedIdx = c[1] & 0xffff;
    this.signalledUsed = c[2] & 0xffff;
    // A request the front took and left: walked again here (the driver may have changed its chain meanwhile).
    const left = f.takeLeft?.();
    if (!left) return n;
    this.#start(v, left.head, left.handle);
    return n + 1;
  }

  /** Kicks wanted again; what came before they were is taken now (the store is a full barrier). */
  #askForKicks(v: SplitRing): void {
    for (;;) {
      this.#suppressKicks(v, false);
      if (this.broken || this.handedOn || v.availIdx() === this.lastAvail) return;
      if (this.#drain(v) > 0 && this.poll?.enabled) return this.#keepPolling();
    }
  }

  #keepPolling(): void {
    this.poll!.touch();
    if (this.#polling) return;
    this.#polling = true;
    this.poll!.add(this.#pollTurn, this.#quiet);
  }

  /** Nothing to take and nothing in flight: a turn of the poller may spin on the avail index (busy-poll.ts). */
  readonly #quiet = (): boolean => {
    const v = this.views;
    return this.#inflight === 0 && (!v || v.availIdx() === this.lastAvail);
  };

  readonly #pollTurn = (expired: boolean): void => {
    if (expired) this.#polling = false;
    this.process();
  };

  protected stopPolling(): void {
    this.poll?.delete(this.#pollTurn);
    this.#polling = false;
  }

  #take(v: SplitRing): void {
    const head = v.availHead(this.lastAvail);
    this.lastAvail = (this.lastAvail + 1) & 0xffff;
    this.record?.took(head, this.lastAvail);
    this.#start(v, head, this.handler);
  }

  /** The chain at head, taken, walked and handed to handler; one that breaks the rules is answered at once, with nothing written. */
  #start(v: SplitRing, head: number, handler: Handler): void {
    let chain: DescChain;
    try {
      chain = this.walk(v, head);
    } catch (e) {
      debug('vring %d: bad chain at head %d: %s', this.index, head, (e as Error).message);
      if (head >= this.size) return this.#fail(`head index ${head} is past the ring`);
      return this.publish(v, head, 0);
    }
    this.#dispatch(new Request(this.index, chain, this.memory), handler);
  }

  /** The chain at head, walked as this ring's features and limits allow (throws what walkChain throws). */
  protected walk(v: SplitRing, head: number): DescChain {
    return v.walk(head, this.memory, this.features.indirect, this.limits.maxIndirect);
  }

  #dispatch(req: Request, handler: Handler): void {
    const gen = this.#generation;
    this.#inflight++;
    req.hold();
    const done = (len: number): void => {
      req.release();
      this.#complete(gen, req.chain.head, len);
    };
    const failed = (e: unknown): void => {
      debug('vring %d: request at head %d failed: %s', this.index, req.chain.head, (e as Error)?.message ?? e);
      done(0);
    };
    try {
      const r = handler(req);
      if (typeof r === 'number') done(r);
      else r.then(done, failed);
    } catch (e) {
      failed(e);
    }
  }

  #complete(gen: number, head: number, len: number): void {
    if (gen !== this.#generation) return;
    this.#inflight--;
    const v = this.views;
    if (v) {
      this.publish(v, head, len);
      // A caller's next request follows its answer: poll for it.
      if (this.poll?.enabled) this.#keepPolling();
      if (!this.#signalPending) {
        this.#signalPending = true;
        // A promise step, not queueMicrotask: Node wraps each of those in an async resource (microseconds a request on the GPU machine).
        void RESOLVED.then(this.#afterAnswers);
      }
    }
    if (this.#inflight === 0) this.#drained?.();
  }

  protected publish(v: SplitRing, head: number, len: number): void {
    this.usedIdx = v.putUsed(this.usedIdx, head, len);
    this.record?.published(head, this.usedIdx);
  }

  /**
   * Once this step's answers are out: the driver is interrupted if it asked
   * to be, and with nothing left in flight a polling ring waits here a
   * moment for the caller's next request (BusyPoll.spinAfterAnswer) and
   * takes it at once.
   */
  readonly #afterAnswers = (): void => {
    this.flushSignal();
    if (this.#polling && this.#inflight === 0 && this.poll!.spinAfterAnswer()) this.process();
  };

  /** Interrupts the driver if it asked for it (EVENT_IDX or NO_INTERRUPT). */
  protected flushSignal(): void {
    this.#signalPending = false;
    const v = this.views;
    if (!v || this.usedIdx === this.signalledUsed) return;
    const old = this.signalledUsed;
    const now = this.usedIdx;
    this.signalledUsed = now;
    if (v.needsInterrupt(this.features.eventIdx, old, now) && this.call?.signal() === 2)
      this.onFault?.(new FrontendFault(`vring ${this.index}: the frontend made its call eventfd blocking (O_NONBLOCK cleared)`));
  }

  /** While the ring is being drained the driver need not kick. */
  #suppressKicks(v: SplitRing, suppress: boolean): void {
    v.suppressKicks(this.features.eventIdx, suppress, this.lastAvail);
  }

  #fail(why: string): void {
    debug('vring %d: broken: %s', this.index, why);
    this.broken = true;
    this.err?.signal();
  }
}
