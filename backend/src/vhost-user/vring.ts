// A virtqueue as the vhost-user backend runs it: the ring states of the
// vhost-user spec, started/stopped (kick fd set, GET_VRING_BASE) and
// enabled/disabled (SET_VRING_ENABLE), independent of each other, as the
// messages set them; its fds; and handing the ring to another process and
// back (detach/adopt/recover, serveFirst). Taking requests, answering them
// and polling are its serving side's (vring-serve.ts).
import createDebug from 'debug';
import { ProtocolError, RingError } from './errors';
import type { BusyPoll } from './platform/busy-poll';
import type { EventFd } from './platform/fd';
import { leftover, type InflightRecord } from './inflight';
import type { MemoryTable } from './memory';
import type { VringAddr } from './message';
import { Request } from './request';
import type { Handler, RingFront } from './ring-front';
import { SplitRing } from './split-ring';
import { ServedRing, STOP_TIMEOUT_MS, type RingFeatures, type RingLimits } from './vring-serve';

export { STOP_TIMEOUT_MS, type RingFeatures, type RingLimits } from './vring-serve';

const debug = createDebug('vhost-user:vring');

export const MAX_QUEUE_SIZE = 32768;

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

/** A virtqueue: set up and stopped by the frontend's messages, served by ServedRing, handed over and back. */
export class Vring extends ServedRing {
  #addr: VringAddr | undefined;

  setNum(num: number): void {
    if (this.started) throw new RingError(`vring ${this.index}: SET_VRING_NUM on a started ring`);
    const max = this.limits.maxSize;
    if (num === 0 || num > max || (num & (num - 1)) !== 0)
      throw new ProtocolError('bad-value', `vring ${this.index}: size ${num} is not a power of two in 1..${max}`);
    this.size = num;
  }

  setBase(base: number): void {
    if (this.started) throw new RingError(`vring ${this.index}: SET_VRING_BASE on a started ring`);
    if (base > 0xffff) throw new ProtocolError('bad-value', `vring ${this.index}: base ${base} is not a 16-bit index`);
    this.lastAvail = base;
  }

  setAddr(addr: VringAddr): void {
    if (this.size === 0) throw new RingError(`vring ${this.index}: SET_VRING_ADDR before SET_VRING_NUM`);
    this.views = new SplitRing(`vring ${this.index}`, addr, this.size, this.memory);
    this.#addr = addr;
    this.usedIdx = this.signalledUsed = this.views.usedIdx();
    this.#attachFront();
  }

  /** After a new memory table the ring addresses resolve to new mappings. */
  remap(): void {
    this.views = this.#addr ? new SplitRing(`vring ${this.index}`, this.#addr, this.size, this.memory) : undefined;
    this.#attachFront();
  }

  /** Lets front answer the requests it can before the handler sees them (undefined: the handler takes every one). */
  serveFirst(front: RingFront | undefined): void {
    this.front = front;
    this.#attachFront();
  }

  #attachFront(): void {
    const v = this.views;
    if (!this.front || !v || !this.call) return;
    this.front.attach({
      desc: v.descBytes,
      avail: v.avail,
      used: v.used16,
      eventIdx: this.features.eventIdx,
      indirect: this.features.indirect,
      maxIndirect: this.limits.maxIndirect,
      call: this.call,
      record: this.record,
      memory: this.memory,
    });
  }

  setKick(fd: EventFd | undefined): void {
    this.kick?.close();
    this.kick = fd;
    if (!fd) throw new ProtocolError('unsupported-request', `vring ${this.index}: polling mode (no kick fd) is not supported`);
    // A ring another process serves is that process's to watch (both draining one eventfd would lose kicks).
    if (!this.handedOn) fd.watch(() => this.process(), true);
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
    this.stopPolling();
    await this.settle();
    if (this.inflight > 0)
      debug('vring %d: stopped with %d requests still in flight; their replies are dropped', this.index, this.inflight);
    this.forgetInflight();
    this.#addr = undefined; // a rebooted guest moves its rings: wait for the next SET_VRING_ADDR
    this.views = undefined;
    this.broken = false;
    return this.lastAvail;
  }

  /** Where the ring stands now (see RingState). */
  state(): RingState {
    if (!this.#addr) throw new RingError(`vring ${this.index}: no ring addresses`);
    return {
      index: this.index,
      size: this.size,
      lastAvail: this.lastAvail,
      usedIdx: this.usedIdx,
      signalledUsed: this.signalledUsed,
      addr: this.#addr,
      features: { ...this.features },
      limits: { ...this.limits },
      enabled: this.enabled,
    };
  }

  get delegated(): boolean {
    return this.handedOn;
  }

  /** Takes nothing from the ring until resume(): it is about to go (back) to another process. */
  holdForOwner(): void {
    this.handedOn = true;
    this.kick?.unwatch();
    this.stopPolling();
  }

  /**
   * Hands the ring to another process (which adopts it with dups of the kick
   * and call fds): takes nothing more from it, lets what is in flight
   * finish, and returns where it stands. Throws (and goes on serving the
   * ring) if the ring is not started, or what is in flight does not finish
   * within STOP_TIMEOUT_MS.
   */
  async detach(): Promise<RingState> {
    if (!this.started || !this.#addr || this.handedOn || this.broken)
      throw new RingError(`vring ${this.index}: only a started, working ring can be handed over`);
    this.handedOn = true;
    this.kick?.unwatch();
    this.stopPolling();
    await this.settle();
    if (this.inflight > 0) {
      this.resume();
      throw new RingError(`vring ${this.index}: ${this.inflight} requests still in flight after ${STOP_TIMEOUT_MS} ms`);
    }
    return this.state();
  }

  /**
   * Serves the ring here again: from `at` (the state the other process
   * handed back), or from where it was when detached.
   */
  resume(at?: Pick<RingState, 'lastAvail' | 'usedIdx' | 'signalledUsed'>): void {
    if (!this.handedOn) return;
    if (at) {
      this.lastAvail = at.lastAvail & 0xffff;
      this.usedIdx = at.usedIdx & 0xffff;
      this.signalledUsed = at.signalledUsed & 0xffff;
    }
    this.handedOn = false;
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
    const v = this.views;
    if (!this.handedOn || !v) return [];
    const usedIdx = v.usedIdx();
    const left = leftover(record, {
      usedIdx,
      availIdx: v.availIdx(),
      usedHead: (i) => v.usedHead(i),
      availHead: (i) => v.availHead(i),
    });
    this.usedIdx = usedIdx;
    for (const head of left.heads) this.publish(v, head, answer ? this.#answerLeft(v, head, answer) : 0);
    this.resume({ lastAvail: left.lastAvail, usedIdx: this.usedIdx, signalledUsed: this.signalledUsed });
    this.flushSignal();
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
    const v = this.views;
    if (!this.handedOn || !v) return false;
    const from = record.lastAvail;
    const count = Math.min((v.availIdx() - from) & 0xffff, this.size);
    for (let i = 0; i < count; i++) {
      const head = v.availHead(from + i);
      try {
        if (match(new Request(this.index, this.walk(v, head), this.memory))) return true;
      } catch (e) {
        debug('vring %d: a waiting request at head %d does not walk: %s', this.index, head, (e as Error).message);
      }
    }
    return false;
  }

  /** A dead process's request, answered here: 0 (failed) if its chain or answer fails. */
  #answerLeft(v: SplitRing, head: number, answer: (req: Request) => number): number {
    try {
      const chain = this.walk(v, head);
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
    r.record = o.record;
    r.front = o.front;
    r.setNum(state.size);
    r.setBase(state.lastAvail);
    r.setAddr(state.addr);
    r.usedIdx = state.usedIdx & 0xffff;
    r.signalledUsed = state.signalledUsed & 0xffff;
    r.enabled = state.enabled;
    r.setCall(fds.call);
    r.setKick(fds.kick);
    return r;
  }

  /** Back to the state of a new connection, fds closed. */
  close(): void {
    this.stopPolling();
    this.forgetInflight();
    this.started = this.enabled = this.broken = this.handedOn = false;
    this.size = this.lastAvail = 0;
    this.#addr = this.views = undefined;
    for (const fd of [this.kick, this.call, this.err]) fd?.close();
    this.kick = this.call = this.err = undefined;
  }
}
