// What a session's GPU worker (worker.ts) and its parent (isolated.ts) say to
// each other over the worker's channel (channel.ts: V8 serialization, so
// bigint and typed arrays go through as they are).
import type { MemRegion } from '../../vhost-user/message';

/** What the worker runs, as its one command-line argument (JSON). */
export interface WorkerOptions {
  kind: 'cuda' | 'host';
  gpu: number;
}

export type ToWorker =
  /** A guest RAM region: its fd comes with the message. */
  | { t: 'region'; id: number; region: MemRegion; parentAddr: bigint }
  | { t: 'unregion'; id: number }
  /** A ProviderContext method (or 'destroy'); segments carry the parent's addresses. */
  | { t: 'call'; id: number; m: string; a: unknown[] };

export type ToParent =
  | { t: 'ready' }
  | { t: 'reply'; id: number; ok: true; v: unknown }
  | { t: 'reply'; id: number; ok: false; code: number; message: string; index?: number }
  /** Device printf (1) or assert (2) output, sent before the reply of the call that flushed it. */
  | { t: 'output'; kind: 1 | 2; bytes: Uint8Array };

/** The worker's end of the channel: its fd 3. */
export const CHANNEL_FD = 3;
