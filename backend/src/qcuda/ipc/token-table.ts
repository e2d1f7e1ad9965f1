// Random tokens naming what one session holds, for the other sessions of
// its VM to open: IPC memory and event handles (ipc.ts) and exported
// virtual memory (vmm-share.ts). The table is the only way from a token to
// its entry, so forged bytes and another VM's tokens name nothing; an
// owner has one token per key (allocation, event, handle).
import { randomBytes } from 'node:crypto';

/** A token's bytes: 128 random bits. */
export const TOKEN_BYTES = 16;

export class TokenTable<S, K, E extends { readonly token: string }> {
  readonly #byToken = new Map<string, E>();
  /** owner -> (key -> entry). */
  readonly #byOwner = new Map<S, Map<K, E>>();

  /** owner's entry for key, made with a new token (make) at the first ask. */
  entry(owner: S, key: K, make: (token: string) => E): E {
    let mine = this.#byOwner.get(owner);
    const old = mine?.get(key);
    if (old) return old;
    const e = make(randomBytes(TOKEN_BYTES).toString('hex'));
    if (!mine) this.#byOwner.set(owner, (mine = new Map()));
    mine.set(key, e);
    this.#byToken.set(e.token, e);
    return e;
  }

  /** A migrated entry, its token as at its source; false where the token or owner's key is taken. */
  adopt(owner: S, key: K, e: E): boolean {
    if (this.#byToken.has(e.token) || this.#byOwner.get(owner)?.has(key)) return false;
    let mine = this.#byOwner.get(owner);
    if (!mine) this.#byOwner.set(owner, (mine = new Map()));
    mine.set(key, e);
    this.#byToken.set(e.token, e);
    return true;
  }

  /** owner's entry for key, if it has one. */
  of(owner: S, key: K): E | undefined {
    return this.#byOwner.get(owner)?.get(key);
  }

  /** The entry a token names (its bytes, or the entry's own token string), if any. */
  find(token: Uint8Array | string): E | undefined {
    return this.#byToken.get(typeof token === 'string' ? token : Buffer.from(token).toString('hex'));
  }

  /** Whether e is still in the table (not removed meanwhile). */
  holds(e: E): boolean {
    return this.#byToken.get(e.token) === e;
  }

  /** Takes owner's entry for key out: its token names nothing from now. */
  remove(owner: S, key: K): E | undefined {
    const e = this.#byOwner.get(owner)?.get(key);
    if (!e) return undefined;
    this.#byOwner.get(owner)!.delete(key);
    this.#byToken.delete(e.token);
    return e;
  }

  /** Takes every entry of owner out, each as remove; returns them. */
  removeOwner(owner: S): E[] {
    const gone = [...(this.#byOwner.get(owner)?.keys() ?? [])].map((k) => this.remove(owner, k)!);
    this.#byOwner.delete(owner);
    return gone;
  }

  /** How many entries owner has. */
  count(owner: S): number {
    return this.#byOwner.get(owner)?.size ?? 0;
  }

  values(): IterableIterator<E> {
    return this.#byToken.values();
  }
}
