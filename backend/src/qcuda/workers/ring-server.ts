// A session's own queue served in C for the short calls of a round trip
// (issue 15): the addon's RingServer (addon/src/cuda_ring_server.cc; the
// calls declared `ring` in wire/protocol.ts, and addon/src/ring_plan.h says
// when) answers them on this thread before the ring's
// handler (QcudaDevice) sees them, with no JavaScript between the guest's
// request and the driver call. It stands in front of the session's ring
// (Vring.serveFirst) in the session's worker, on the cuda provider; every
// request it does not take (any other command, a bad one, one that would
// wait or whose session has something pending) goes to the handler as before.
// A BATCH whose entries it ran but whose ending synchronize would wait (or
// whose ending synchronize or event query follows a failed entry) is left to
// the device to finish (QcudaDevice.finishBatch), as the ring's takeLeft.
//
// What it needs of the session it is told here: the context to run on
// (bound before each serve), the allocations, functions, streams and events to
// check against (SessionMirror), the context's local memory the quota counts
// (a launch of a kernel needing more is left to the handler, which counts
// it: Session.chargeLocal), and whether the session is quiet (no host
// function gates, no posted error or launch pending, no device output
// waiting: Session.quiet), without which it serves nothing. Under
// --gpu-share it admits posts on the process's share gate (share/gate.ts),
// and leaves one whose VM must wait to the handler, whose gate waits. It runs what it
// serves on the current device's context, and checks pointers, functions,
// streams and events against the session's whole mirror, which does not say
// whose device each is: so it serves only a session with one context (one
// device in use). A session that uses two devices is served in JavaScript,
// where each call goes to its device's context (docs/multi-gpu.md).
import {
  cudaNative,
  type CudaContextNative,
  type LeftBatch,
  type RingServerClass,
  type RingServerNative,
} from '../providers/cuda/native-cuda';
import type { FrontRing, LeftRequest, Request, RingFront } from '../../vhost-user';
import type { Now } from '../../sys/now';
import type { BatchEnding } from '../command';
import type { DevPtr, EventRef, FunctionRef, Provider, StreamRef } from '../provider';
import type { Session } from '../session/session';
import type { SessionMirror } from '../session/session-core';
import { cudaSide } from '../providers/cuda/context';
import type { ShareGate } from '../share/gate';

/** An addon id (function, stream or event ref of the cuda provider), else 0: not known to the server, so left to the handler. */
function idOf(ref: unknown): number {
  return typeof ref === 'number' && Number.isInteger(ref) && ref > 0 && ref <= 0xffffffff ? ref : 0;
}

/** Finishes a batch the server left (QcudaDevice.finishBatch): runs its ending synchronize and answers req. */
export type FinishBatch = (req: Request, ending: BatchEnding) => Now<number>;

export class RingServer implements RingFront, SessionMirror {
  readonly cursor: Uint32Array;
  /** Requests answered here, all told. */
  served = 0;
  readonly #class: RingServerClass;
  readonly #native: RingServerNative;
  #bound: CudaContextNative | undefined;
  #side: ReturnType<typeof cudaSide>;
  #left: LeftBatch | undefined;

  /** Serves session's requests; onServed(n) counts n answered here (the device's and the session's counters); finish answers a batch it left. */
  constructor(
    readonly session: Session,
    readonly onServed: (n: number) => void,
    readonly finish: FinishBatch,
    share: ShareGate | undefined,
  ) {
    this.#class = cudaNative().RingServer;
    this.cursor = new Uint32Array(this.#class.CURSOR.words);
    this.#native = new this.#class(session.id, this.cursor);
    session.mirror = this;
    // Under --gpu-share the posts it serves wait their VM's turn too (share/gate.ts): on the gate's table and process slot.
    const proc = share?.slot() ?? -1;
    if (share && proc >= 0) this.#native.share(share.table.words, share.vm, proc, share.policy);
  }

  /** A ring server for session where its provider is cuda; undefined otherwise (the handler serves everything). */
  static for(
    provider: Provider,
    session: Session,
    onServed: (n: number) => void,
    finish: FinishBatch,
    share: ShareGate | undefined,
  ): RingServer | undefined {
    return provider.name === 'cuda' ? new RingServer(session, onServed, finish, share) : undefined;
  }

  attach(r: FrontRing): void {
    this.#native.attach(r.desc, r.avail, r.used, r.eventIdx, r.indirect, r.maxIndirect, r.call.value);
    this.#native.setRegions(r.memory.regions.map((g) => ({ gpa: g.gpa, size: g.size, host: g.hostAddress })));
    this.#native.setRecord(r.record?.bytes);
  }

  /** The ring is not in the memory table now: no region is translated into until the next attach (worker-regions.ts). */
  forgetRegions(): void {
    this.#native.setRegions([]);
  }

  serve(spinNs: number, budgetNs: number): number {
    const s = this.session;
    const x = s.openedContext;
    const side = x && cudaSide(x);
    if (!side || !s.quiet || s.contextCount > 1) return 0;
    if (side.native !== this.#bound) {
      this.#native.bind(side.native);
      this.#bound = side.native;
    }
    const c = this.cursor;
    const { CURSOR, STOP } = this.#class;
    c[CURSOR.served] = 0;
    c[CURSOR.launched] = side.launched ? 1 : 0;
    this.#side = side;
    const stop = this.#native.serve(spinNs, budgetNs, this.#onFlush);
    const n = c[CURSOR.served];
    if (c[CURSOR.launched] !== 0 && !side.launched) side.noteLaunched();
    // An answered batch's launch failed: reported at the session's next synchronize, as the device's own batches do.
    if (stop === STOP.posted) s.noteAsyncError(c[CURSOR.postedError]);
    if (stop === STOP.left) this.#left = this.#native.left();
    if (n > 0) {
      this.served += n;
      this.onServed(n);
    }
    return n;
  }

  /**
   * Beside requests the device holds only if each is a parked CALLBACK_WAIT
   * (the guest library's callback thread keeps one in flight all along):
   * it waits for a host function to be reached, and with none marked (the
   * session is quiet only then) it holds nothing of the session's.
   */
  servesBeside(inflight: number): boolean {
    return inflight <= this.session.callbacks.parked;
  }

  /** The batch serve() took and left: the device runs its ending synchronize or query and answers it. */
  takeLeft(): LeftRequest | undefined {
    const l = this.#left;
    if (!l) return undefined;
    this.#left = undefined;
    const ending: BatchEnding = { cmd: l.cmd, args: l.args, value: BigInt(l.value), postedError: l.postedError };
    return {
      head: l.head,
      handle: (req) => {
        // A launch that failed: the session's async error, as the device's own batches note it (before the ending's).
        if (l.lateError !== 0) this.session.noteAsyncError(l.lateError);
        return this.finish(req, ending);
      },
    };
  }

  /** After a flush point of a context that launched: what CUDA printed goes to the session now; true if the guest has output to read. */
  readonly #onFlush = (): boolean => {
    const side = this.#side!;
    if (!side.launched) side.noteLaunched(); // a launch of this serve(): the drain is only for contexts that launched
    side.drainOutput();
    return this.session.output.pending;
  };

  alloc(base: DevPtr, size: bigint): void {
    this.#native.setAlloc(base, size);
  }

  func(h: bigint, f: FunctionRef | undefined): void {
    this.#native.setFunc(h, idOf(f));
  }

  stream(h: bigint, s: StreamRef | undefined): void {
    this.#native.setStream(h, idOf(s));
  }

  event(h: bigint, e: EventRef | undefined): void {
    this.#native.setEvent(h, idOf(e));
  }

  localMemory(bytes: bigint): void {
    this.#native.setLocalMemory(bytes);
  }

  clear(): void {
    this.#native.clear();
  }
}
