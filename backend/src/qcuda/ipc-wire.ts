// What a session's worker and the backend say to each other about IPC
// handles (ipc-remote.ts): the questions and answers alone, so that the
// provider interface can name them without the VM's tables behind them.

export type IpcKind = 'mem' | 'event';

/** What a worker asks of the VM's tables for its session. */
export type IpcAsk =
  | { op: 'mint'; kind: IpcKind; ptr: bigint; size: bigint; device: number; exported: Uint8Array | undefined }
  | { op: 'claim'; kind: IpcKind; token: Uint8Array; size: bigint }
  | { op: 'settle'; kind: IpcKind; token: Uint8Array; at: bigint | undefined }
  | { op: 'close'; kind: IpcKind; ptr: bigint }
  | { op: 'forget'; kind: IpcKind; ptr: bigint }
  | { op: 'forget-session'; kind: IpcKind };

/** The backend's answer to an IpcAsk: its value, or the refusal the guest gets. */
export type IpcAnswer = { ok: true; v: unknown } | { ok: false; code: number; message: string };

/** Who answers a worker's IpcAsk for its session (the backend's IpcService). */
export interface IpcAnswerer {
  answer(ask: IpcAsk): Promise<IpcAnswer>;
}
