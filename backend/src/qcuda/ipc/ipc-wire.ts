// What a session's worker and the backend say to each other about the VM's
// tables: IPC handles (ipc-remote.ts) and VMM shareable handles
// (vmm-remote.ts). A queue owner's worker calls a table's method for its
// session as an ask: the method's name (op) and its arguments after the
// session, by the names the table's AskDecls give them (ipc.ts IPC_ASKS,
// vmm-share.ts VMM_ASKS). Both ends are derived from those declarations:
// the worker's asks (askOf, defineAsks) and the backend's checks of them
// (checkedAsk), so a table method is declared once, beside the table.
import type { Fd } from '../../vhost-user';
import { CudaErr, CudaError } from '../cuda-error';

export type IpcKind = 'mem' | 'event';
/** The VM's tables a worker asks: IPC memory and event handles, and VMM shareable handles. */
export type AskKind = IpcKind | 'vmm';

/**
 * What a worker asks of one of the VM's tables for its session: a method
 * of the table (op) and its arguments after the session, each under its
 * declared name. Nothing of it is trusted: the worker runs guest-chosen
 * code, so the backend checks every field (checkedAsk).
 */
export interface IpcAsk {
  readonly op: string;
  readonly kind: AskKind;
  readonly [arg: string]: unknown;
}

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

const malformed = (what: string) => new CudaError(CudaErr.InvalidValue, `IPC: ${what} of a worker is malformed`);

/** Checks a value a worker sent: the value as the table takes it, or a thrown InvalidValue saying what was malformed. */
export type WireCheck<T = unknown> = (v: unknown, deviceCount: number) => T;

/** The checks an argument may have. */
export const wire = {
  /** A 64-bit unsigned value. */
  u64:
    (what: string): WireCheck<bigint> =>
    (v) => {
      if (typeof v !== 'bigint' || v < 0n || v >= 1n << 64n) throw malformed(what);
      return v;
    },
  /** n bytes. */
  bytes:
    (n: number, what: string): WireCheck<Uint8Array> =>
    (v) => {
      if (!(v instanceof Uint8Array) || v.length !== n) throw malformed(what);
      return v;
    },
  /** n bytes as a table names them (their hex string). */
  hex:
    (n: number, what: string): WireCheck<string> =>
    (v) => {
      if (typeof v !== 'string' || v.length !== n * 2) throw malformed(what);
      return v;
    },
  /** One of the backend's devices. */
  device: ((v, count) => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v >= count) throw malformed('a device');
    return v;
  }) as WireCheck<number>,
  /** Absent, or as check has it. */
  optional:
    <T>(check: WireCheck<T>): WireCheck<T | undefined> =>
    (v, count) =>
      v === undefined ? undefined : check(v, count),
};

/**
 * A table method a worker may call for its session: its arguments after
 * the session, by name and in order, each with its check at the backend;
 * call: how the backend calls the table with them, where that is not
 * method(session, ...args); reply: what of the table's answer goes back
 * (default: all of it).
 */
export interface AskDecl {
  readonly args: Readonly<Record<string, WireCheck>>;
  readonly call?: (table: never, session: unknown, ...args: never[]) => Promise<unknown>;
  readonly reply?: (v: never) => unknown;
}

/** The asks of a table whose methods (but those answered in the worker itself, Local) a worker may call: one each, checked complete. */
export type AskDecls<Book, Local extends keyof Book = never> = { readonly [M in Exclude<keyof Book, Local>]: AskDecl };

/** The ask of table `kind`'s op with args, named as declared (the worker's side). */
export function askOf(decls: Readonly<Record<string, AskDecl>>, kind: AskKind, op: string, args: readonly unknown[]): IpcAsk {
  return { op, kind, ...Object.fromEntries(Object.keys(decls[op].args).map((name, i) => [name, args[i]])) };
}

/**
 * Gives a worker's remote table class a method for every declared op it
 * does not define itself: it asks the backend, its session's argument
 * left out, and resolves with the answer. The class declares them with
 * `interface X extends Book {}`; its instances have the link and kind.
 */
export function defineAsks(cls: { prototype: object }, decls: Readonly<Record<string, AskDecl>>): void {
  for (const op of Object.keys(decls)) {
    if (Object.hasOwn(cls.prototype, op)) continue;
    Object.defineProperty(cls.prototype, op, {
      value(this: { link: IpcAsker; kind: AskKind }, _session: unknown, ...args: unknown[]) {
        return this.link.ask(askOf(decls, this.kind, op, args));
      },
      writable: true,
      configurable: true,
    });
  }
}

/** The ask's op and its arguments, each checked as declared (the backend's side); an op not declared is refused. */
export function checkedAsk(
  decls: Readonly<Record<string, AskDecl>>,
  ask: IpcAsk,
  deviceCount: number,
): { op: string; decl: AskDecl; args: unknown[] } {
  const op = ask.op;
  if (typeof op !== 'string' || !Object.hasOwn(decls, op)) throw new CudaError(CudaErr.InvalidValue, 'IPC: no such ask');
  const decl = decls[op];
  return { op, decl, args: Object.entries(decl.args).map(([name, check]) => check(ask[name], deviceCount)) };
}

/** Runs a checked ask on table for session: the declared call, or the table's method of that name; then the declared reply. */
export async function runAsk(table: object, session: unknown, a: { op: string; decl: AskDecl; args: unknown[] }): Promise<unknown> {
  const call = a.decl.call as ((t: object, s: unknown, ...args: unknown[]) => Promise<unknown>) | undefined;
  const method = (table as Record<string, (...x: unknown[]) => Promise<unknown>>)[a.op];
  const v = await (call ? call(table, session, ...a.args) : method.call(table, session, ...a.args));
  const reply = a.decl.reply as ((x: unknown) => unknown) | undefined;
  return reply ? reply(v) : v;
}

/** An ask is an object of a kind the backend has tables of; its fields are checked where they are used. */
export function checkKind(a: unknown): asserts a is IpcAsk {
  const kind = typeof a === 'object' && a !== null ? (a as { kind?: unknown }).kind : undefined;
  if (kind !== 'mem' && kind !== 'event' && kind !== 'vmm')
    throw new CudaError(CudaErr.InvalidValue, 'IPC: an ask of a worker is malformed');
}
