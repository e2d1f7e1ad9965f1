// Own queues (issue 15): a session that keeps to a queue of its own has that
// ring served by its worker process (workers/owned-queue.ts), not by the
// backend. This is the backend's side of the hand-over: the ring is
// detached and given to a worker the provider starts, taken back and given
// again across a VM stop (park), watched while the session's close waits,
// and served here again once the worker is gone, from where it left the
// ring or past what a dead one left in flight.
import { IpcService } from '../ipc/ipc-remote';
import { InflightRecord, type Request, type RingState, type Vring } from '../../vhost-user';
import type { LogLimiter } from '../../vhost-user';
import type { Provider, QueueOwner } from '../provider';
import { Cmd, decode, encode, LAYOUT } from '../proto';
import type { Session, VmShared } from '../session/session';
import { describeCalls } from '../status';

const REQ = LAYOUT.qcuda_req_hdr.size;
const RESP = LAYOUT.qcuda_resp_hdr.size;

/**
 * How often the backend looks at its workers (the worker watch): at what
 * waits on the owned queues, while there are any (#checkOwner), and at the
 * JIT and link jobs running in workers, while any does (Provider.jobs).
 * One timer for them all, so an idle VM costs two wake-ups a second. A
 * worker that has taken nothing for two such looks while its session's
 * SESSION_CLOSE waits is killed, and so is one whose job has run past
 * VmLimits.jitTimeMs (--jit-time-max).
 */
const OWNER_CHECK_MS = 500;

/** A session served by its worker on the queue it owns. */
export interface Delegation {
  session: Session;
  queue: number;
  /** The worker, once it serves the queue. */
  owner?: QueueOwner;
  /** Settles once the first hand-over is over (owner set, or it failed). */
  started: Promise<void>;
  /** The in-flight record of the current hand-over (none while parked). */
  record?: InflightRecord;
  /** Requests the worker answered in earlier hand-overs (before a park). */
  servedBefore: number;
  /** Of those, the ones its ring server answered in C. */
  servedInCBefore: number;
  /** The VM stopped the ring: the worker keeps the session, and gets the ring again when it starts. */
  parked: boolean;
  /** Ends it early: the worker gives the ring back (handback) or is killed; asked before the worker serves, it happens as soon as it does. */
  end: (how: 'handback' | 'kill') => void;
  ending?: 'handback' | 'kill';
  /** Settles once the ring is served here again and the session is gone. */
  done: Promise<void>;
  /** The owner's lastAvail at the last check (#checkOwner), and checks in a row it has not moved while the session's close waited. */
  seen?: number;
  stuck: number;
}

/** What the hand-over uses of the device. */
export interface DelegationHost {
  readonly provider: Provider;
  /** The VM's bounds, which a worker counts against too. */
  readonly vm: VmShared;
  readonly log: LogLimiter;
  /** The device's open sessions: a delegated one leaves them when its worker is gone. */
  readonly sessions: Map<bigint, Session>;
  /** Session events (the device's event log). */
  event(line: string): void;
}

/** The requests a session's worker answered on its own queue, all told (earlier hand-overs and now), and those of them in C. */
export function servedBy(d: Delegation): { calls: number; callsInC: number } {
  return { calls: d.servedBefore + (d.record?.served ?? 0), callsInC: d.servedInCBefore + (d.record?.servedInC ?? 0) };
}

/** Whether req is s's SESSION_CLOSE. */
function isCloseOf(req: Request, s: Session): boolean {
  if (req.readableBytes < REQ || req.writableBytes < RESP) return false;
  const h = decode('qcuda_req_hdr', req.read(0, REQ));
  return h.cmd === Cmd.SESSION_CLOSE && h.session === s.id;
}

export class QueueDelegation {
  #rings: readonly Vring[] | undefined;
  /** Queue -> the session its worker serves there. */
  readonly #byQueue = new Map<number, Delegation>();
  /** The same delegations by session: every request looks its session up here. */
  readonly #bySession = new Map<Session, Delegation>();
  /** The timer of the worker watch, while any queue is owned or job runs. */
  #ownerWatch: NodeJS.Timeout | undefined;
  /** Sessions whose worker died with their SESSION_CLOSE waiting, untaken, on their queue: that close is answered as done. At most one per queue. */
  readonly #closedUntaken = new Set<bigint>();

  constructor(private readonly dev: DelegationHost) {
    // A JIT or link job starting in any worker (owned queue or not) starts the watch too.
    dev.provider.jobs?.listen(() => this.#watchOwners());
  }

  /** The backend's rings, which queues are handed over from. */
  useRings(rings: readonly Vring[]): void {
    this.#rings = rings;
  }

  /** The delegation of session s, if its worker serves it. */
  of(s: Session): Delegation | undefined {
    return this.#bySession.get(s);
  }

  /** Whether session id ended with its worker, which never took its SESSION_CLOSE (answered once, as done). */
  takeClosedUntaken(id: bigint): boolean {
    return this.#closedUntaken.delete(id);
  }

  /** The VM went away: every worker is killed, and each ring served here again. */
  async endAll(): Promise<void> {
    this.#closedUntaken.clear();
    const owned = [...this.#byQueue.values()];
    for (const d of owned) d.end('kill');
    await Promise.all(owned.map((d) => d.done));
  }

  /**
   * Hands queue q to s's worker when it may: the provider runs sessions in
   * workers (startOwner), q is not queue 0 and not another session's, and
   * there is a place for another worker. The ring stops taking requests now
   * (this SESSION_OPEN is the last one this process answers there); the
   * worker takes it from there.
   */
  handOver(s: Session, q: number): void {
    const ring = this.#rings?.[q];
    const start = this.dev.provider.startOwner?.bind(this.dev.provider);
    if (!ring || q === 0 || this.#byQueue.has(q) || !start) return;
    try {
      s.takeProcessPlace();
    } catch {
      return; // at the bound on processes: served here, where its context fails the same way
    }
    let started!: () => void;
    const d: Delegation = {
      session: s,
      queue: q,
      parked: false,
      servedBefore: 0,
      servedInCBefore: 0,
      started: new Promise((r) => (started = r)),
      done: Promise.resolve(),
      stuck: 0,
      end: (how) => {
        d.ending ??= how;
        if (d.owner) how === 'kill' ? d.owner.kill() : d.owner.handback();
      },
    };
    this.#byQueue.set(q, d);
    this.#bySession.set(s, d);
    const detaching = ring.detach();
    d.done = this.#serveElsewhere(d, ring, detaching, start, started).catch((e: Error) =>
      this.dev.log.log(`qcuda: queue ${q}: ${e.message}`),
    );
  }

  async #serveElsewhere(
    d: Delegation,
    ring: Vring,
    detaching: Promise<RingState>,
    start: NonNullable<Provider['startOwner']>,
    started: () => void,
  ): Promise<void> {
    const s = d.session;
    const { vm } = this.dev;
    let returned: RingState | undefined;
    try {
      const state = await detaching;
      d.record = InflightRecord.create(state.size, state.lastAvail, state.usedIdx);
      const owner = await start(
        { session: s.id, slot: s.slot, limits: vm.limits, state, identityKey: vm.identityKey },
        [ring.kick!.value, ring.call!.value, d.record.fd.value, vm.ledger.fd.value],
        vm.modules,
        new IpcService(vm, s, this.dev.provider.deviceCount()),
      );
      d.owner = owner;
      // What it opens by IPC, and its VMM allocations and imports, are in its worker (ipc-remote.ts, vmm-remote.ts).
      s.ownWorker = owner;
      if (d.ending) d.end(d.ending); // a close or reset came while it started
      started();
      this.dev.event(`qcuda: session ${s.id.toString(16)}: queue ${d.queue} served by its worker, pid ${owner.pid}`);
      this.#watchOwners();
      returned = await owner.returned;
    } catch (e) {
      this.dev.log.log(
        `qcuda: session ${s.id.toString(16)}: queue ${d.queue} could not be handed to a worker: ${(e as Error).message}; the session is closed`,
      );
    } finally {
      started();
      // Free first: the ring's next SESSION_OPEN, taken as it resumes, may hand it to a new worker.
      this.#byQueue.delete(d.queue);
      this.#bySession.delete(s);
      const { sessions } = this.dev;
      if (sessions.get(s.id) === s) sessions.delete(s.id);
      s.output.close();
      try {
        // What the session held in the VM's ledger is given back before the ring goes on (and its close is answered).
        await s.close();
      } finally {
        // The ring is served here again: from where the worker left it, or past what a dead one left in flight
        // (answered as failed, but for the session's SESSION_CLOSE, which its worker leaves for this answer: owned-queue.ts).
        if (returned && !d.parked) ring.resume(returned);
        else if (d.record) {
          if (ring.waiting(d.record, (req) => isCloseOf(req, s))) this.#closedUntaken.add(s.id);
          ring.recover(d.record, (req) => closedWithWorker(req, s));
        } else ring.resume();
        const { calls, callsInC } = servedBy(d);
        d.record?.close();
        this.dev.event(
          `qcuda: session ${s.id.toString(16)} (queue ${d.queue}) ended after ${describeCalls(calls, callsInC)} on its queue (${sessions.size} open)`,
        );
      }
    }
  }

  /**
   * GET_VRING_BASE on a ring a worker serves (a VM stop): the worker hands
   * the ring back as the stop would find it and keeps its session; the ring
   * goes back to it when it starts again (ringStarting, ringStarted). A
   * worker that cannot (what it had in flight did not finish) is ended.
   */
  async reclaimRing(index: number): Promise<void> {
    const d = this.#byQueue.get(index);
    const ring = this.#rings?.[index];
    if (!d || !ring || d.parked) return;
    await d.started;
    if (!d.owner || !ring.delegated) return;
    try {
      const state = await d.owner.park();
      d.servedBefore += d.record?.served ?? 0;
      d.servedInCBefore += d.record?.servedInC ?? 0;
      d.record?.close();
      d.record = undefined;
      d.parked = true;
      ring.resume(state); // stopped and disabled: nothing is taken here
    } catch (e) {
      this.dev.log.log(`qcuda: session ${d.session.id.toString(16)}: queue ${index} could not be parked: ${(e as Error).message}`);
      d.end('kill');
      await d.done;
    }
  }

  /** Before a ring's kick, call or enable changes: a parked ring stays the worker's (nothing is taken here). */
  ringStarting(index: number): void {
    if (this.#byQueue.get(index)?.parked) this.#rings?.[index]?.holdForOwner();
  }

  /** After: once the parked ring is started and enabled again, it goes back to its worker. */
  ringStarted(index: number): void {
    const d = this.#byQueue.get(index);
    const ring = this.#rings?.[index];
    if (!d?.parked || !d.owner || !ring?.started || !ring.enabled || !ring.kick || !ring.call) return;
    d.parked = false;
    const state = ring.state();
    const record = InflightRecord.create(state.size, state.lastAvail, state.usedIdx);
    d.record = record;
    d.owner.ownAgain(state, [ring.kick.value, ring.call.value, record.fd.value]).catch((e: Error) => {
      this.dev.log.log(`qcuda: session ${d.session.id.toString(16)}: queue ${index} could not go back to its worker: ${e.message}`);
      d.end('kill');
    });
  }

  /** Looks at every owned queue and every worker's jobs each OWNER_CHECK_MS while there are any. */
  #watchOwners(): void {
    if (this.#ownerWatch) return;
    this.#ownerWatch = setInterval(() => {
      const jobs = this.dev.provider.jobs;
      if (this.#byQueue.size === 0 && !jobs?.running) {
        clearInterval(this.#ownerWatch);
        this.#ownerWatch = undefined;
        return;
      }
      for (const d of this.#byQueue.values()) {
        const ring = this.#rings?.[d.queue];
        if (ring) this.#checkOwner(d, ring);
      }
      const bound = this.dev.vm.limits.jitTimeMs;
      if (jobs && bound > 0) for (const line of jobs.endPast(bound)) this.dev.event(line);
    }, OWNER_CHECK_MS);
    this.#ownerWatch.unref();
  }

  /**
   * A worker whose session's SESSION_CLOSE waits on its queue, untaken, for
   * two looks in a row is stuck: its thread is held in the driver (a call
   * that waits for a kernel that never ends, say), where the close cannot
   * reach it. The close ends the process anyway (owned-queue.ts), so it is
   * killed, and its context with it, as a native process's would be: the
   * ring comes back here, which answers the close. Anything else waiting
   * means only that the worker is busy, as a native process may be.
   */
  #checkOwner(d: Delegation, ring: Vring): void {
    const r = d.record;
    if (!r || !d.owner || d.parked || d.ending) return;
    const at = r.lastAvail;
    const moved = at !== d.seen;
    d.seen = at;
    if (moved || !ring.waiting(r, (req) => isCloseOf(req, d.session))) {
      d.stuck = 0;
      return;
    }
    if (++d.stuck < 2) return;
    this.dev.event(
      `qcuda: session ${d.session.id.toString(16)}: its worker (pid ${d.owner.pid}) took nothing for ${d.stuck * OWNER_CHECK_MS} ms while the session's close waited: killed`,
    );
    d.end('kill');
  }
}

/**
 * A request the session's dead worker left in flight: its SESSION_CLOSE
 * is answered (the session ended with the process, and with it the
 * context); anything else failed (used length 0).
 */
function closedWithWorker(req: Request, s: Session): number {
  if (!isCloseOf(req, s)) return 0;
  req.write(0, encode('qcuda_resp_hdr', { status: 0, len: 0, value: 0n }));
  return RESP;
}
