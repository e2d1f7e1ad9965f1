// What the parts of a session (session-memory.ts, session-modules.ts,
// session-objects.ts) use of the session that holds them, and what it tells
// a queue owner's ring server. Types only: the parts and the session import
// them from here, not from one another.
import type { HandleCounter } from './handles';
import type { Share } from '../quota/limits';
import type { DevPtr, EventRef, FunctionRef, ProviderContext, StreamRef } from '../provider';

/**
 * Told of what a session holds as it changes: its allocations, functions,
 * streams and events (a queue owner's ring server checks requests against them:
 * workers/ring-server.ts). Whatever it is not told of, it leaves to the
 * session's own checks.
 */
export interface SessionMirror {
  /** size 0n: freed. */
  alloc(base: DevPtr, size: bigint): void;
  func(h: bigint, f: FunctionRef | undefined): void;
  stream(h: bigint, s: StreamRef | undefined): void;
  event(h: bigint, e: EventRef | undefined): void;
  /** The context's per-thread local memory the quota counts now (Session.setLocalMemory): a launch of a kernel needing more is the session's to count. */
  localMemory(bytes: bigint): void;
  /** Everything is gone (a reset, the close). */
  clear(): void;
}

/** A session as its parts see it. */
export interface SessionCore {
  /** Where every handle of the session comes from. */
  readonly handles: HandleCounter;
  /** Throws unless x is still the session's context: what a command made on x may be recorded only then (Session.live). */
  live(x: ProviderContext): void;
  /** Counts resets: what was taken before one was given back by it. */
  epoch(): number;
  /** Device memory of the VM's quota held by the session. */
  readonly quota: Share;
  /** Module image bytes staged by the session (uploads, link results). */
  readonly staging: Share;
  mirror(): SessionMirror | undefined;
}

/** Device memory taken from the quota for a request in flight (Session.reserve). */
export interface Reservation {
  readonly epoch: number;
  readonly bytes: bigint;
}
