// IPC between the processes of one VM (cudaIpcGetMemHandle,
// cudaIpcOpenMemHandle): a handle is a random token the backend minted for
// an allocation of one session; the table of the VM's tokens is the only
// way from a token to memory, so forged bytes and another VM's handles name
// nothing. An allocation's handle and what others opened of it go when its
// owner frees it, resets or exits.
import { randomBytes } from 'node:crypto';
import type { DevPtr } from './provider';

/** What a session must offer the table: a way to drop what it opened. */
export interface IpcSession {
  /** Forgets memory it opened at ptr and has its provider drop it (the owner's memory went). */
  closeImport(ptr: DevPtr): Promise<void>;
}

/** One minted handle: an owner's allocation, and the sessions that opened it. */
export interface IpcEntry<S extends IpcSession = IpcSession> {
  readonly token: string;
  readonly owner: S;
  readonly ptr: DevPtr;
  readonly size: bigint;
  readonly device: number;
  /** The sessions that opened it, with the address it has in each. */
  readonly openers: Map<S, DevPtr>;
}

/** A token's bytes: 128 random bits (the handle's first 16 bytes). */
export const IPC_TOKEN_BYTES = 16;

export class IpcTable<S extends IpcSession = IpcSession> {
  readonly #byToken = new Map<string, IpcEntry<S>>();
  /** owner -> (pointer -> entry): one handle per allocation, bounded by the owner's allocations. */
  readonly #byOwner = new Map<S, Map<DevPtr, IpcEntry<S>>>();

  /** The handle of owner's allocation at ptr, minted at the first ask. */
  mint(owner: S, ptr: DevPtr, size: bigint, device: number): IpcEntry<S> {
    let mine = this.#byOwner.get(owner);
    const old = mine?.get(ptr);
    if (old) return old;
    const e: IpcEntry<S> = { token: randomBytes(IPC_TOKEN_BYTES).toString('hex'), owner, ptr, size, device, openers: new Map() };
    if (!mine) this.#byOwner.set(owner, (mine = new Map()));
    mine.set(ptr, e);
    this.#byToken.set(e.token, e);
    return e;
  }

  find(token: Uint8Array): IpcEntry<S> | undefined {
    return this.#byToken.get(Buffer.from(token).toString('hex'));
  }

  /** The entry opener opened at ptr, if any. */
  openedBy(opener: S, ptr: DevPtr): IpcEntry<S> | undefined {
    for (const e of this.#byToken.values()) if (e.openers.get(opener) === ptr) return e;
    return undefined;
  }

  /** Owner freed the allocation at ptr: its handle names nothing now, and openers lose it. */
  forget(owner: S, ptr: DevPtr): void {
    const e = this.#byOwner.get(owner)?.get(ptr);
    if (!e) return;
    this.#byOwner.get(owner)!.delete(ptr);
    this.#byToken.delete(e.token);
    // An opener whose context is gone meanwhile has nothing left to drop.
    for (const [o, at] of e.openers) void o.closeImport(at).catch(() => undefined);
    e.openers.clear();
  }

  /** The session reset or exited: its handles go (as forget), and what it opened. */
  forgetSession(s: S): void {
    for (const ptr of [...(this.#byOwner.get(s)?.keys() ?? [])]) this.forget(s, ptr);
    this.#byOwner.delete(s);
    for (const e of this.#byToken.values()) e.openers.delete(s);
  }
}
