// What a session's worker and the backend say to each other about IPC
// handles (ipc-remote.ts) and VMM shareable handles (vmm-remote.ts): the
// questions and answers alone, so that the provider interface can name them
// without the VM's tables behind them.
import type { Fd } from '../sys/fd';
import { CudaErr, CudaError } from './cuda-error';

export type IpcKind = 'mem' | 'event';

/** What a worker asks of the VM's table of shareable handles for its session (kind 'vmm'). */
export type VmmAsk =
  | { op: 'mint'; kind: 'vmm'; handle: bigint; size: bigint; device: number }
  /** Answered with the owner's allocation as a POSIX fd (IpcReply.fd), the token's string and size. */
  | { op: 'import'; kind: 'vmm'; token: Uint8Array; size: bigint }
  | { op: 'imported'; kind: 'vmm'; token: string; handle: bigint }
  | { op: 'unimported'; kind: 'vmm'; token: string; handle: bigint }
  | { op: 'forget'; kind: 'vmm'; handle: bigint }
  | { op: 'forget-session'; kind: 'vmm' };

/** What a worker asks of the VM's tables for its session. */
export type IpcAsk =
  | { op: 'mint'; kind: IpcKind; ptr: bigint; size: bigint; device: number; exported: Uint8Array | undefined }
  | { op: 'claim'; kind: IpcKind; token: Uint8Array; size: bigint }
  | { op: 'settle'; kind: IpcKind; token: Uint8Array; at: bigint | undefined }
  | { op: 'close'; kind: IpcKind; ptr: bigint }
  | { op: 'forget'; kind: IpcKind; ptr: bigint }
  | { op: 'forget-session'; kind: IpcKind }
  | VmmAsk;

/** The backend's answer to an IpcAsk: its value, or the refusal the guest gets. */
export type IpcAnswer = { ok: true; v: unknown } | { ok: false; code: number; message: string };

/** An answer as the backend makes it: with an fd to hand over (a VMM import's), which goes with the message and is closed once sent. */
export type IpcReply = IpcAnswer & { fd?: Fd };

/** A worker's way to ask (ipc-remote.ts IpcLink): refusals are thrown as CudaError. */
export interface IpcAsker {
  ask<T>(ask: IpcAsk): Promise<T>;
  /** As ask, for an answer that comes with an fd: the caller's to close. */
  askFd<T>(ask: IpcAsk): Promise<{ v: T; fd: Fd }>;
}

/** Who answers a worker's IpcAsk for its session (the backend's IpcService). */
export interface IpcAnswerer {
  answer(ask: IpcAsk): Promise<IpcReply>;
}

/** What a worker sends, checked (it runs guest-chosen code): n bytes. */
export function bytes(v: unknown, n: number, what: string): Uint8Array {
  if (!(v instanceof Uint8Array) || v.length !== n) throw new CudaError(CudaErr.InvalidValue, `IPC: ${what} of a worker is malformed`);
  return v;
}

/** The same: a 64-bit unsigned value. */
export function big(v: unknown, what: string): bigint {
  if (typeof v !== 'bigint' || v < 0n || v >= 1n << 64n) throw new CudaError(CudaErr.InvalidValue, `IPC: ${what} of a worker is malformed`);
  return v;
}
