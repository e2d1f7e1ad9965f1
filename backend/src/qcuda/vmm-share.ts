// Shareable handles of virtual memory management between the processes of
// one VM (cuMemExportToShareableHandle, cuMemImportFromShareableHandle with
// POSIX file descriptors): the backend mints a random token for an
// allocation of one session, libcuda carries it in a sealed memfd the guest
// passes to another process, and that process imports the token. As with
// IPC handles (ipc.ts), the VM's table is the only way from a token to
// memory: forged bytes, another VM's tokens and freed allocations name
// nothing. The memory stays its owner's (counted in its quota); when the
// owner frees it (release and unmap, reset, exit) the token goes and each
// importer loses its handle and mappings of it (drop).
import { randomBytes } from 'node:crypto';
import { CudaErr, CudaError } from './cuda-error';
import { IPC_TOKEN_BYTES } from './ipc';
import type { VmmRef } from './provider';

/** Tokens one session may have minted at once (each names an allocation it holds, which its bound on objects bounds too). */
export const VMM_SHARES_PER_SESSION = 65536;

/** One minted token: the owner's allocation and the sessions that imported it (their handle of it). */
export interface VmmShare<S> {
  readonly token: string;
  readonly owner: S;
  /** The owner's handle of it. */
  readonly handle: bigint;
  readonly ref: VmmRef;
  readonly size: bigint;
  readonly device: number;
  readonly importers: Map<S, Set<bigint>>;
}

export class VmmShareTable<S> {
  /** drop: the owner freed the memory; importer's handle h of it is gone (its mappings unmapped). */
  constructor(readonly drop: (importer: S, h: bigint) => Promise<void>) {}

  readonly #byToken = new Map<string, VmmShare<S>>();
  /** owner -> (its handle -> share): one token per allocation. */
  readonly #byOwner = new Map<S, Map<bigint, VmmShare<S>>>();

  /** The token of owner's allocation h, minted at the first ask. */
  mint(owner: S, handle: bigint, ref: VmmRef, size: bigint, device: number): string {
    let mine = this.#byOwner.get(owner);
    const old = mine?.get(handle);
    if (old) return old.token;
    if ((mine?.size ?? 0) >= VMM_SHARES_PER_SESSION)
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `cuMemExportToShareableHandle: a process may hold ${VMM_SHARES_PER_SESSION} exported allocations`,
      );
    const token = randomBytes(IPC_TOKEN_BYTES).toString('hex');
    const e: VmmShare<S> = { token, owner, handle, ref, size, device, importers: new Map() };
    if (!mine) this.#byOwner.set(owner, (mine = new Map()));
    mine.set(handle, e);
    this.#byToken.set(token, e);
    return token;
  }

  /**
   * The share a token names, refused as InvalidValue (what the driver
   * answers for a descriptor that is not a shareable handle) when this VM
   * never minted it or its allocation was freed.
   */
  find(token: Uint8Array, size: bigint): VmmShare<S> {
    const e = this.#byToken.get(Buffer.from(token).toString('hex'));
    if (!e || e.size !== size)
      throw new CudaError(CudaErr.InvalidValue, 'cuMemImportFromShareableHandle: not a handle of this VM, or its memory was freed');
    return e;
  }

  /** importer's handle h names e's memory now; false if e went meanwhile (the importer undoes its import). */
  imported(e: VmmShare<S>, importer: S, h: bigint): boolean {
    if (this.#byToken.get(e.token) !== e) return false;
    let hs = e.importers.get(importer);
    if (!hs) e.importers.set(importer, (hs = new Set()));
    hs.add(h);
    return true;
  }

  /** importer freed its handle h of e's memory. */
  unimported(token: string, importer: S, h: bigint): void {
    const hs = this.#byToken.get(token)?.importers.get(importer);
    hs?.delete(h);
    if (hs?.size === 0) this.#byToken.get(token)!.importers.delete(importer);
  }

  /** The owner freed its allocation h: its token names nothing now, and importers lose it (their drops issued, not waited on). */
  forget(owner: S, handle: bigint): void {
    const e = this.#byOwner.get(owner)?.get(handle);
    if (!e) return;
    this.#byOwner.get(owner)!.delete(handle);
    this.#byToken.delete(e.token);
    for (const [s, hs] of e.importers) for (const h of hs) void this.drop(s, h).catch(() => undefined);
    e.importers.clear();
  }

  /** The session reset or exited: its tokens go (as forget), and what it imported. */
  forgetSession(s: S): void {
    for (const h of [...(this.#byOwner.get(s)?.keys() ?? [])]) this.forget(s, h);
    this.#byOwner.delete(s);
    for (const e of this.#byToken.values()) e.importers.delete(s);
  }

  /** Tokens owner holds. */
  count(owner: S): number {
    return this.#byOwner.get(owner)?.size ?? 0;
  }
}
