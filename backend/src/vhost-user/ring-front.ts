// A front: what serves a ring's requests ahead of the backend's handler, on
// the same thread (Vring.serveFirst), and the ring as it is handed one.
import type { InflightRecord } from './inflight';
import type { MemoryTable } from './memory';
import type { EventFd } from './platform/fd';
import type { Request } from './request';

/** A device's handling of one request: the used length, at once or once it is answered. */
export type Handler = (req: Request) => number | Promise<number>;

/**
 * Serves requests at the ring's head before this process's handler sees
 * them, on this thread, inside the turn that would take them (a session's
 * worker: qcuda's ring server). It answers only what it is sure of and
 * leaves the rest where it is, for the handler.
 */
export interface RingFront {
  /** The ring as this process sees it now: given again after each memory table change or new call fd. */
  attach(ring: FrontRing): void;
  /** Where the ring stands, in and out of serve(): lastAvail, usedIdx, signalledUsed (then the front's own words). */
  readonly cursor: Uint32Array;
  /**
   * Answers the requests at the ring's head that it can, waiting up to
   * spinNs after each answer for the next, for budgetNs in all; returns how
   * many it answered (it took, published and signalled each).
   */
  serve(spinNs: number, budgetNs: number): number;
  /**
   * After serve(): a request it took (counted in lastAvail and the record)
   * and left unanswered, for handle to finish and answer as the ring's
   * handler would; once.
   */
  takeLeft?(): LeftRequest | undefined;
  /**
   * Whether it may serve while `inflight` requests taken by the handler are
   * in flight: only if it knows they hold nothing its answers depend on (a
   * wait parked until something else happens). Without it, only while none is.
   */
  servesBeside?(inflight: number): boolean;
}

/** A request a front took and left for JavaScript to finish (RingFront.takeLeft). */
export interface LeftRequest {
  head: number;
  handle: Handler;
}

/** A ring's memory and ways, for a RingFront. */
export interface FrontRing {
  desc: Uint8Array;
  avail: Uint16Array;
  used: Uint16Array;
  eventIdx: boolean;
  indirect: boolean;
  maxIndirect: number;
  call: EventFd;
  record: InflightRecord | undefined;
  memory: MemoryTable;
}
