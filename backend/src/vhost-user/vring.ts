// A virtqueue as the vhost-user backend runs it: the ring states of the
// vhost-user spec, started/stopped (kick fd set, GET_VRING_BASE) and
// enabled/disabled (SET_VRING_ENABLE), independent of each other; its fds;
// taking requests and answering them; polling; and handing the ring to
// another process and back (detach/adopt/recover, serveFirst). The ring's
// memory layout and order are split-ring.ts's.
import createDebug from 'debug';
import type { DescChain } from './chain';
import { FrontendFault, ProtocolError, RingError } from './errors';
import type { BusyPoll } from './platform/busy-poll';
import { EventFd } from './platform/fd';
import { leftover, type InflightRecord } from './inflight';
import type { MemoryTable } from './memory';
import type { VringAddr } from './message';
import { Request } from './request';
import type { Handler, RingFront } from './ring-front';
import { SplitRing } from './split-ring';

const debug = createDebug('vhost-user:vring');

export const MAX_QUEUE_SIZE = 32768;
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

/**
 * Where a started ring stands, for handing it to another process (detach,
 * adopt) and back (resume). Its kick and call fds travel beside it.
 */
export interface RingState {
  index: number;
  size: number;
  lastAvail: number;
  usedIdx: number;
  signalledUsed: number;
  addr: VringAddr;
  features: RingFeatures;
  limits: RingLimits;
  enabled: boolean;
}

export class Vring {
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
  #addr: VringAddr | undefined;
  #views: SplitRing | undefined;
  #usedIdx = 0;
  #signalledUsed = 0;
  #inflight = 0;
  #generation = 0; // bumped on stop: completions of an older generation are dropped
  #signalPending = false;
  #drained: (() => void) | undefined;
  /** This ring is checked every turn of the poller (its kicks stay suppressed meanwhile). */
  #polling = false;
  /** Another process serves the ring for now (detach); this one takes nothing from it. */
  #delegated = false;
  /** Where this process, serving a ring handed to it, records what it has in flight (inflight.ts). */
  #record: InflightRecord | undefined;
  /** Serves requests ahead of the handler (serveFirst). */
  #front: RingFront | undefined;
  /** Takes nothing new while set (pause: a backend stopping, or one restoring its state); what is in flight finishes. */
  #paused = false;

  constructor(
    index: number,
    private readonly limits: RingLimits,
    private readonly features: RingFeatures,
    private readonly handler: Handler,
    private readonly memory: MemoryTable,
    /** Polls the ring for a while after each request instead of waiting for a kick (none: kicks only). */
    private readonly poll?: BusyPoll,
  ) {
    this.index = index;
  }

  setNum(num: number): void {
    if (this.started) throw new RingError(`vring ${this.index}: SET_VRING_NUM on a started ring`);
    const max = this.limits.maxSize;
    if (num === 0 || num > max || (num & (num - 1)) !== 0)
      throw new ProtocolError(`vring ${this.index}: size ${num} is not a power of two in 1..${max}`);
    this.size = num;
  }

  setBase(base: number): void {
    if (this.started) throw new RingError(`vring ${this.index}: SET_VRING_BASE on a started ring`);
    if (base > 0xffff) throw new ProtocolError(`vring ${this.index}: base ${base} is not a 16-bit index`);
    this.lastAvail = base;
  }

  setAddr(addr: VringAddr): void {
    if (this.size === 0) throw new RingError(`vring ${this.index}: SET_VRING_ADDR before SET_VRING_NUM`);
    this.#views = new SplitRing(`vring ${this.index}`, addr, this.size, this.memory);
    this.#addr = addr;
    this.#usedIdx = this.#signalledUsed = this.#views.usedIdx();
    this.#attachFront();
  }

  /** After a new memory table the ring addresses resolve to new mappings. */
  remap(): void {
    this.#views = this.#addr ? new SplitRing(`vring ${this.index}`, this.#addr, this.size, this.memory) : undefined;
    this.#attachFront();
  }

  /** Lets front answer the requests it can before the handler sees them (undefined: the handler takes every one). */
  serveFirst(front: RingFront | undefined): void {
    this.#front = front;
    this.#attachFront();
  }

  #attachFront(): void {
    const v = this.#views;
    if (!this.#front || !v || !this.call) return;
    this.#front.attach({
      desc: v.descBytes,
      avail: v.avail,
      used: v.used16,
      eventIdx: this.features.eventIdx,
      indirect: this.features.indirect,
      maxIndirect: this.limits.maxIndirect,
      call: this.call,
      record: this.#record,
      memory: this.memory,
    });
  }

  setKick(fd: EventFd | undefined): void {
    this.kick?.close();
    this.kick = fd;
    if (!fd) throw new ProtocolError(`vring ${this.index}: polling mode (no kick fd) is not supported`);
    // A ring another process serves is that process's to watch (both draining one eventfd would lose kicks).
    if (!this.#delegated) fd.watch(() => this.process(), true);
    this.started = true;
    this.process();
  }

  setCall(fd: EventFd | undefined): void {
    this.call?.close();
    this.call = fd;
    this.#attachFront();
  }

  setErr(fd: EventFd | undefined): void {
    this.err?.close();
    this.err = fd;
  }

  /** Enabling scans the ring: kicks that came while disabled must not be lost. */
  setEnabled(on: boolean): void {
    this.enabled = on;
    if (on) this.process();
  }

  /** GET_VRING_BASE: stop, let in-flight requests finish (bounded), return the next avail index. */
  async stop(): Promise<number> {
    this.started = false;
    this.kick?.unwatch();
    this.#stopPolling();
    await this.#settle();
    if (this.#inflight > 0)
      debug('vring %d: stopped with %d requests still in flight; their replies are dropped', this.index, this.#inflight);
    this.#generation++;
    this.#inflight = 0;
    this.#addr = undefined; // a rebooted guest moves its rings: wait for the next SET_VRING_ADDR
    this.#views = undefined;
    this.broken = false;
    return this.lastAvail;
  }

  /** Resolves once nothing is in flight, or after STOP_TIMEOUT_MS. */
  async #settle(): Promise<void> {
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

  /** Where the ring stands now (see RingState). */
  state(): RingState {
    if (!this.#addr) throw new RingError(`vring ${this.index}: no ring addresses`);
    return {
      index: this.index,
      size: this.size,
      lastAvail: this.lastAvail,
      usedIdx: this.#usedIdx,
      signalledUsed: this.#signalledUsed,
      addr: this.#addr,
      features: { ...this.features },
      limits: { ...this.limits },
      enabled: this.enabled,
    };
  }

  get delegated(): boolean {
    return this.#delegated;
  }

  /** Takes nothing from the ring until resume(): it is about to go (back) to another process. */
  holdForOwner(): void {
    this.#delegated = true;
    this.kick?.unwatch();
    this.#stopPolling();
  }

  /**
   * Hands the ring to another process (which adopts it with dups of the kick
   * and call fds): takes nothing more from it, lets what is in flight
   * finish, and returns where it stands. Throws (and goes on serving the
   * ring) if the ring is not started, or what is in flight does not finish
   * within STOP_TIMEOUT_MS.
   */
  async detach(): Promise<RingState> {
    if (!this.started || !this.#addr || this.#delegated || this.broken)
      throw new RingError(`vring ${this.index}: only a started, working ring can be handed over`);
    this.#delegated = true;
    this.kick?.unwatch();
    this.#stopPolling();
    await this.#settle();
    if (this.#inflight > 0) {
      this.resume();
      throw new RingError(`vring ${this.index}: ${this.#inflight} requests still in flight after ${STOP_TIMEOUT_MS} ms`);
    }
    return this.state();
  }

  /**
   * Serves the ring here again: from `at` (the state the other process
   * handed back), or from where it was when detached.
   */
  resume(at?: Pick<RingState, 'lastAvail' | 'usedIdx' | 'signalledUsed'>): void {
    if (!this.#delegated) return;
    if (at) {
      this.lastAvail = at.lastAvail & 0xffff;
      this.#usedIdx = at.usedIdx & 0xffff;
      this.#signalledUsed = at.signalledUsed & 0xffff;
    }
    this.#delegated = false;
    if (this.started) this.kick?.watch(() => this.process(), true);
    this.process();
  }

  /**
   * The process the ring was handed to died: answers what it took and never
   * answered, then serves the ring here again from where that process
   * stopped taking (its in-flight record). Each such request is answered
   * by answer (its chain walked again here: the used length it gives), or
   * with used length 0, a failed request. Returns the heads answered so.
   */
  recover(record: InflightRecord, answer?: (req: Request) => number): number[] {
    const v = this.#views;
    if (!this.#delegated || !v) return [];
    const usedIdx = v.usedIdx();
    const left = leftover(record, {
      usedIdx,
      availIdx: v.availIdx(),
      usedHead: (i) => v.usedHead(i),
      availHead: (i) => v.availHead(i),
    });
    this.#usedIdx = usedIdx;
    for (const head of left.heads) this.#publish(v, head, answer ? this.#answerLeft(v, head, answer) : 0);
    this.resume({ lastAvail: left.lastAvail, usedIdx: this.#usedIdx, signalledUsed: this.#signalledUsed });
    this.#flushSignal();
    return left.heads;
  }

  /**
   * Whether any request the process this ring was handed to has not taken
   * yet (from its record's lastAvail up to avail->idx, at most a ring's
   * worth) is one `match` picks. Reads only: nothing is taken or answered,
   * and a chain that does not walk is passed over. The backend looks so at
   * what waits for an owner that takes nothing (qcuda: its session's close).
   */
  waiting(record: InflightRecord, match: (req: Request) => boolean): boolean {
    const v = this.#views;
    if (!this.#delegated || !v) return false;
    const from = record.lastAvail;
    const count = Math.min((v.availIdx() - from) & 0xffff, this.size);
    for (let i = 0; i < count; i++) {
      const head = v.availHead(from + i);
      try {
        if (match(new Request(this.index, this.#walk(v, head), this.memory))) return true;
      } catch (e) {
        debug('vring %d: a waiting request at head %d does not walk: %s', this.index, head, (e as Error).message);
      }
    }
    return false;
  }

  /** A dead process's request, answered here: 0 (failed) if its chain or answer fails. */
  #answerLeft(v: SplitRing, head: number, answer: (req: Request) => number): number {
    try {
      const chain = this.#walk(v, head);
      return answer(new Request(this.index, chain, this.memory));
    } catch (e) {
      debug('vring %d: request at head %d left by a dead process: %s', this.index, head, (e as Error).message);
      return 0;
    }
  }

  /**
   * This process serves a ring handed to it (state from detach, the kick
   * and call fds it came with, guest memory mapped here): what it takes and
   * answers goes into record, for the backend to finish should this
   * process die.
   */
  static adopt(
    state: RingState,
    fds: { kick: EventFd; call: EventFd },
    handler: Handler,
    memory: MemoryTable,
    o: { poll?: BusyPoll; record?: InflightRecord; front?: RingFront } = {},
  ): Vring {
    const r = new Vring(state.index, state.limits, state.features, handler, memory, o.poll);
    r.#record = o.record;
    r.#front = o.front;
    r.setNum(state.size);
    r.setBase(state.lastAvail);
    r.setAddr(state.addr);
    r.#usedIdx = state.usedIdx & 0xffff;
    r.#signalledUsed = state.signalledUsed & 0xffff;
    r.enabled = state.enabled;
    r.setCall(fds.call);
    r.setKick(fds.kick);
    return r;
  }

  /** Back to the state of a new connection, fds closed. */
  close(): void {
    this.#stopPolling();
    this.#generation++;
    this.started = this.enabled = this.broken = this.#delegated = false;
    this.size = this.lastAvail = this.#inflight = 0;
    this.#addr = this.#views = undefined;
    for (const fd of [this.kick, this.call, this.err]) fd?.close();
    this.kick = this.call = this.err = undefined;
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
    const v = this.#views;
    if (!v || !this.started || !this.enabled || this.broken || this.#delegated || this.#paused) return;
    const took = this.#drain(v);
    // Handed on meanwhile (detach): no polling or kicks here any more; what was answered is still signalled.
    if (!this.#delegated) {
      if (took > 0 && this.poll?.enabled) this.#keepPolling();
      if (!this.#polling) this.#askForKicks(v);
    }
    this.#flushSignal();
  }

  /** Takes what is available until nothing is, kicks suppressed; returns how many were taken. */
  #drain(v: SplitRing): number {
    this.#suppressKicks(v, true);
    let took = 0;
    // The front may wait for a caller's next request; it does so for one chain of the poller's at most, so the event loop still turns.
    const end = this.#front ? performance.now() + (this.poll?.chainUs ?? 0) / 1000 : 0;
    for (;;) {
      // A request's handler may have handed the ring on (detach): what follows in it is the new owner's.
      if (this.#delegated || this.#paused) return took;
      const avail = v.availIdx();
      const pending = (avail - this.lastAvail) & 0xffff;
      if (pending > this.size) {
        this.#fail(`avail index ${avail} is ${pending} entries ahead of ${this.lastAvail}`);
        return took;
      }
      if (pending === 0) return took;
      if (this.#front) {
        // The front answers what it can while nothing is in flight (or only
        // what it may serve beside); the handler takes the request it
        // stopped at, one at a time, so the front may go on after it.
        if (this.#inflight === 0 || this.#front.servesBeside?.(this.#inflight)) {
          const served = this.#serveFront(v, end);
          took += served;
          if (served > 0) continue;
        }
        this.#take(v);
        took++;
        if (this.broken) return took;
        continue;
      }
      for (let n = 0; n < pending && !this.#delegated && !this.#paused; n++, took++) this.#take(v);
      if (this.broken) return took;
    }
  }

  /**
   * The front's turn, until `end` (performance.now()): it waits for the
   * caller's next request only while the poller's window is open. Returns
   * the requests it took: those it answered, and one it left to finish here.
   */
  #serveFront(v: SplitRing, end: number): number {
    const f = this.#front!;
    const c = f.cursor;
    c[0] = this.lastAvail;
    c[1] = this.#usedIdx;
    c[2] = this.#signalledUsed;
    const p = this.poll;
    const n = f.serve(p?.polling ? p.spinUs * 1000 : 0, Math.max(0, Math.round((end - performance.now()) * 1e6)));
    this.lastAvail = c[0] & 0xffff;
    this.#usedIdx = c[1] & 0xffff;
    this.#signalledUsed = c[2] & 0xffff;
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
      if (this.broken || this.#delegated || v.availIdx() === this.lastAvail) return;
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
    const v = this.#views;
    return this.#inflight === 0 && (!v || v.availIdx() === this.lastAvail);
  };

  readonly #pollTurn = (expired: boolean): void => {
    if (expired) this.#polling = false;
    this.process();
  };

  #stopPolling(): void {
    this.poll?.delete(this.#pollTurn);
    this.#polling = false;
  }

  #take(v: SplitRing): void {
    const head = v.availHead(this.lastAvail);
    this.lastAvail = (this.lastAvail + 1) & 0xffff;
    this.#record?.took(head, this.lastAvail);
    this.#start(v, head, this.handler);
  }

  /** The chain at head, taken, walked and handed to handler; one that breaks the rules is answered at once, with nothing written. */
  #start(v: SplitRing, head: number, handler: Handler): void {
    let chain: DescChain;
    try {
      chain = this.#walk(v, head);
    } catch (e) {
      debug('vring %d: bad chain at head %d: %s', this.index, head, (e as Error).message);
      if (head >= this.size) return this.#fail(`head index ${head} is past the ring`);
      return this.#publish(v, head, 0);
    }
    this.#dispatch(new Request(this.index, chain, this.memory), handler);
  }

  /** The chain at head, walked as this ring's features and limits allow (throws what walkChain throws). */
  #walk(v: SplitRing, head: number): DescChain {
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
    const v = this.#views;
    if (v) {
      this.#publish(v, head, len);
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

  #publish(v: SplitRing, head: number, len: number): void {
    this.#usedIdx = v.putUsed(this.#usedIdx, head, len);
    this.#record?.published(head, this.#usedIdx);
  }

  /**
   * Once this step's answers are out: the driver is interrupted if it asked
   * to be, and with nothing left in flight a polling ring waits here a
   * moment for the caller's next request (BusyPoll.spinAfterAnswer) and
   * takes it at once.
   */
  readonly #afterAnswers = (): void => {
    this.#flushSignal();
    if (this.#polling && this.#inflight === 0 && this.poll!.spinAfterAnswer()) this.process();
  };

  /** Interrupts the driver if it asked for it (EVENT_IDX or NO_INTERRUPT). */
  #flushSignal(): void {
    this.#signalPending = false;
    const v = this.#views;
    if (!v || this.#usedIdx === this.#signalledUsed) return;
    const old = this.#signalledUsed;
    const now = this.#usedIdx;
    this.#signalledUsed = now;
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
