// IPC between the processes of one VM (cudaIpcGetMemHandle,
// cudaIpcOpenMemHandle): a handle is a random token the backend minted for
// an allocation of one session; the table of the VM's tokens is the only
// way from a token to memory, so forged bytes and another VM's handles name
// nothing. An allocation's handle and what others opened of it go when its
// owner frees it, resets or exits.
import { randomBytes } from 'node:crypto';
import type { DevPtr } from './provider';

/** One minted handle: an owner's allocation (or event), and the sessions that opened it. */
export interface IpcEntry<S> {
  readonly token: string;
  readonly owner: S;
  /** The allocation's address, or the event's handle, in the owner. */
  readonly ptr: DevPtr;
  readonly size: bigint;
  readonly device: number;
  /** What the provider needs to open it in another process (CUDA's own handle: isolated.ts), never the guest's. */
  readonly exported: Uint8Array | undefined;
  /** The sessions that opened it, with the address it has in each. */
  readonly openers: Map<S, DevPtr>;
}

/** A token's bytes: 128 random bits (the handle's first 16 bytes). */
export const IPC_TOKEN_BYTES = 16;

export class IpcTable<S> {
  /** drop: undoes an opener's opening when the owner's memory goes (none for events: the opener's stays its own). */
  constructor(readonly drop?: (opener: S, at: DevPtr) => Promise<void>) {}

  readonly #byToken = new Map<string, IpcEntry<S>>();
  /** owner -> (pointer -> entry): one handle per allocation, bounded by the owner's allocations. */
  readonly #byOwner = new Map<S, Map<DevPtr, IpcEntry<S>>>();

  /** The handle of owner's allocation at ptr, minted at the first ask. */
  mint(owner: S, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): IpcEntry<S> {
    let mine = this.#byOwner.get(owner);
    const old = mine?.get(ptr);
    if (old) return old;
    const token = randomBytes(IPC_TOKEN_BYTES).toString('hex');
    const e: IpcEntry<S> = { token, owner, ptr, size, device, exported, openers: new Map() };
    if (!mine) this.#byOwner.set(owner, (mine = new Map()));
    mine.set(ptr, e);
    this.#byToken.set(e.token, e);
    return e;
  }

  /** The handle already minted for owner's ptr, if any. */
  minted(owner: S, ptr: DevPtr): IpcEntry<S> | undefined {
    return this.#byOwner.get(owner)?.get(ptr);
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
    // Issued at once, before the owner's free: CUDA keeps the memory while it is opened.
    for (const [o, at] of e.openers) if (at !== 0n) void this.drop?.(o, at).catch(() => undefined);
    e.openers.clear();
  }

  /** The session reset or exited: its handles go (as forget), and what it opened. */
  forgetSession(s: S): void {
    for (const ptr of [...(this.#byOwner.get(s)?.keys() ?? [])]) this.forget(s, ptr);
    this.#byOwner.delete(s);
    for (const e of this.#byToken.values()) e.openers.delete(s);
  }
}
