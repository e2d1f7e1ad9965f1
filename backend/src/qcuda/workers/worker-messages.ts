// What a session's GPU worker (worker.ts) and its parent (isolated.ts) say to
// each other over the worker's channel (channel.ts: V8 serialization, so
// bigint and typed arrays go through as they are).
import type { MemRegion, RingState } from '../../vhost-user';
import type { IpcAnswer, IpcAsk } from '../ipc/ipc-remote';
import type { OwnOrder, ProviderName } from '../provider';

/** What the worker runs, as its one command-line argument (JSON). */
export interface WorkerOptions {
  kind: ProviderName;
  /** The host GPU, or the GPUs in guest device order (--gpu=0,1): a queue owner's session may use each. */
  gpu: number | readonly number[];
  /** Not a queue owner: the guest device its one context is on (default 0). */
  device?: number;
  /** The addon's waiter threads (blocking waits) in the worker: VmLimits.waiterThreads. */
  waiterThreads?: number;
  /** How long the worker polls a short wait on its own thread (ProviderSetup.inlineWaitUs). */
  inlineWaitUs?: number;
  /** Ordered calls run on the worker's JS thread when its context thread is idle (ProviderSetup.inlineCalls; default true). */
  inlineCalls?: boolean;
  /** How long the worker polls its channel after each call (ProviderSetup.pollUs). */
  pollUs?: number;
  /** A queue owner answers the short calls of a round trip in C (ring-server.ts; ProviderSetup.ringServer; default true). */
  ringServer?: boolean;
  /** Register all of guest RAM for the device (CudaProviderOptions.pinGuestRam; ProviderSetup.pinGuestRam; default false). */
  pinGuestRam?: boolean;
  /** A queue owner (owned-queue.ts): no context at start; the session's own queue comes with 'own'. */
  owner?: boolean;
  /** seccomp (default): the worker sandboxes itself before it serves a guest (worker.ts sandbox(), addon/src/sandbox.cc); none: not. */
  sandbox?: WorkerSandbox;
}

export type WorkerSandbox = 'seccomp' | 'none';

export type ToWorker =
  /** A guest RAM region: its fd comes with the message. */
  | { t: 'region'; id: number; region: MemRegion; parentAddr: bigint }
  | { t: 'unregion'; id: number }
  /** A ProviderContext method (or 'destroy'); segments carry the parent's addresses. */
  | { t: 'call'; id: number; m: string; a: unknown[] }
  /** Serve the session's queue (a queue owner): fds kick, call, in-flight record, ledger. */
  | ({ t: 'own' } & OwnOrder)
  /** Hand the queue back and end the session (a reset, a close that came elsewhere). */
  | { t: 'handback' }
  /** Hand the queue back for a VM stop (GET_VRING_BASE) and keep the session. */
  | { t: 'park' }
  /** The VM goes on: serve the queue again from state (fds: kick, call, a new in-flight record). */
  | { t: 'own-again'; state: RingState }
  /** The answer to a queue owner's module-find: the VM's cached image, or none. */
  | { t: 'module'; id: number; image?: Uint8Array }
  /** The answer to a queue owner's 'ipc' ask; fd: a POSIX fd comes with it (a VMM import's: the worker imports, then closes it). */
  | ({ t: 'ipc'; id: number; fd?: true } & IpcAnswer)
  /** The owner of memory the session opened by IPC freed it (or reset, or exited): close it, then reply with id. */
  | { t: 'ipc-drop'; id: number; ptr: bigint }
  /** The owner of a VMM allocation the session imported as handle freed it (or reset, or exited): drop it, then reply with id. */
  | { t: 'vmm-drop'; id: number; handle: bigint }
  /**
   * A POSIX fd of the context's VMM allocation m (VmmFdContext; a queue
   * owner's: m is { handle, device } of its session): answered
   * 'vmm-exported' with it, or a failed 'reply'.
   */
  | { t: 'vmm-export'; id: number; m: unknown }
  /** Import the fd that comes with this (another worker's 'vmm-exported'): a 'reply' with the allocation here. */
  | { t: 'vmm-import'; id: number };

export type ToParent =
  | { t: 'ready' }
  | { t: 'reply'; id: number; ok: true; v: unknown }
  | { t: 'reply'; id: number; ok: false; code: number; message: string; index?: number }
  /** Device printf (1), assert (2) or other stderr (3) output (OutputSink), sent before the reply of the call that flushed it. */
  | { t: 'output'; kind: 1 | 2 | 3; bytes: Uint8Array }
  /** A queue owner serves its queue now. */
  | { t: 'owning' }
  /** A region of 'region' is mapped (ADD_MEM_REG waits for it: the frontend may use it on the worker's queue next). */
  | { t: 'region-added'; id: number }
  /** A queue owner gave its queue back for a VM stop, its session kept: where the ring stands. */
  | { t: 'parked'; state: RingState }
  /** A queue owner gave its queue back (the session closed, or 'handback'): where the ring stands; the process then ends. */
  | { t: 'returned'; state: RingState }
  /** A queue owner asks the VM's module cache for an image by content (MODULE_FIND). */
  | { t: 'module-find'; id: number; sha256: Uint8Array; size: bigint }
  /** A queue owner's checked image, for the VM's module cache (the backend hashes it itself). */
  | { t: 'module-add'; image: Uint8Array }
  /** A queue owner's JIT or link job begins (on) or ends: the backend times it (jit-jobs.ts). */
  | { t: 'job'; id: number; on: boolean }
  /** A queue owner asks the VM's IPC tables (ipc-remote.ts). */
  | { t: 'ipc'; id: number; ask: IpcAsk }
  /** The answer to 'vmm-export': the fd comes with it (the parent hands it to the importer's worker, then closes it). */
  | { t: 'vmm-exported'; id: number };

/** The worker's end of the channel: its fd 3. */
export const CHANNEL_FD = 3;

// The hot messages as raw frames (Channel.sendRaw): a copy call, and the
// answer to any call that succeeded with no value. V8 serialization costs a
// process that has just woken tens of microseconds per message on the H100
// host, paid twice per chunk of every transfer; these take a few.
//   copy:  u8 kind (1 to device, 2 from device), u32 id, u64 device pointer,
//          u32 stream (NO_STREAM: the NULL stream), u32 n, n x (u64 addr, u64 len)
//   done:  u8 kind (3), u32 id
export const enum Fast {
  ToDevice = 1,
  FromDevice = 2,
  Done = 3,
}

const NO_STREAM = 0xffff_ffff;
const COPY_HEAD = 21;

export interface FastCopy {
  kind: Fast.ToDevice | Fast.FromDevice;
  id: number;
  ptr: bigint;
  stream: number | undefined;
  segs: { addr: bigint; len: number }[];
}

/** Whether a stream can go in a copy frame: the NULL stream or a provider's numeric handle. */
export function fastStream(s: unknown): s is number | undefined {
  return s === undefined || (typeof s === 'number' && Number.isInteger(s) && s >= 0 && s < NO_STREAM);
}

export function encodeCopy(c: FastCopy): Uint8Array {
  const b = new Uint8Array(COPY_HEAD + 16 * c.segs.length);
  const v = new DataView(b.buffer);
  v.setUint8(0, c.kind);
  v.setUint32(1, c.id, true);
  v.setBigUint64(5, c.ptr, true);
  v.setUint32(13, c.stream ?? NO_STREAM, true);
  v.setUint32(17, c.segs.length, true);
  c.segs.forEach((s, i) => {
    v.setBigUint64(COPY_HEAD + 16 * i, s.addr, true);
    v.setBigUint64(COPY_HEAD + 16 * i + 8, BigInt(s.len), true);
  });
  return b;
}

export function encodeDone(id: number): Uint8Array {
  const b = new Uint8Array(5);
  b[0] = Fast.Done;
  new DataView(b.buffer).setUint32(1, id, true);
  return b;
}

/** A raw frame from the peer; throws on one that is malformed (only the other end of our own channel writes them). */
export function decodeFast(b: Uint8Array): FastCopy | { kind: Fast.Done; id: number } {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const kind = b.length > 0 ? v.getUint8(0) : 0;
  if (kind === Fast.Done && b.length === 5) return { kind, id: v.getUint32(1, true) };
  if ((kind !== Fast.ToDevice && kind !== Fast.FromDevice) || b.length < COPY_HEAD)
    throw new Error(`a raw frame of kind ${kind} and ${b.length} bytes`);
  const n = v.getUint32(17, true);
  if (b.length !== COPY_HEAD + 16 * n) throw new Error(`a copy frame of ${b.length} bytes for ${n} segments`);
  const stream = v.getUint32(13, true);
  const segs = Array.from({ length: n }, (_, i) => ({
    addr: v.getBigUint64(COPY_HEAD + 16 * i, true),
    len: Number(v.getBigUint64(COPY_HEAD + 16 * i + 8, true)),
  }));
  return { kind, id: v.getUint32(1, true), ptr: v.getBigUint64(5, true), stream: stream === NO_STREAM ? undefined : stream, segs };
}
