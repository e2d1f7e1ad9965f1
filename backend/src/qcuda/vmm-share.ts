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
import { CudaErr, CudaError } from './cuda-error';
import type { VmmRef } from './provider';
import { TokenTable } from './token-table';

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

  /** One token per allocation of an owner (by its handle). */
  readonly #tokens = new TokenTable<S, bigint, VmmShare<S>>();

  /** The token of owner's allocation h, minted at the first ask. */
  mint(owner: S, handle: bigint, ref: VmmRef, size: bigint, device: number): string {
    if (!this.#tokens.of(owner, handle) && this.#tokens.count(owner) >= VMM_SHARES_PER_SESSION)
      throw new CudaError(
        CudaErr.MemoryAllocation,
        `cuMemExportToShareableHandle: a process may hold ${VMM_SHARES_PER_SESSION} exported allocations`,
      );
    return this.#tokens.entry(owner, handle, (token) => ({ token, owner, handle, ref, size, device, importers: new Map() })).token;
  }

  /**
   * The share a token names, refused as InvalidValue (what the driver
   * answers for a descriptor that is not a shareable handle) when this VM
   * never minted it or its allocation was freed.
   */
  find(token: Uint8Array, size: bigint): VmmShare<S> {
    const e = this.#tokens.find(token);
    if (!e || e.size !== size)
      throw new CudaError(CudaErr.InvalidValue, 'cuMemImportFromShareableHandle: not a handle of this VM, or its memory was freed');
    return e;
  }

  /** importer's handle h names e's memory now; false if e went meanwhile (the importer undoes its import). */
  imported(e: VmmShare<S>, importer: S, h: bigint): boolean {
    if (!this.#tokens.holds(e)) return false;
    let hs = e.importers.get(importer);
    if (!hs) e.importers.set(importer, (hs = new Set()));
    hs.add(h);
    return true;
  }

  /** importer freed its handle h of e's memory. */
  unimported(token: string, importer: S, h: bigint): void {
    const e = this.#tokens.find(token);
    const hs = e?.importers.get(importer);
    hs?.delete(h);
    if (hs?.size === 0) e!.importers.delete(importer);
  }

  /** The owner freed its allocation h: its token names nothing now, and importers lose it (their drops issued, not waited on). */
  forget(owner: S, handle: bigint): void {
    const e = this.#tokens.remove(owner, handle);
    if (e) this.#dropImporters(e);
  }

  /** The session reset or exited: its tokens go (as forget), and what it imported. */
  forgetSession(s: S): void {
    for (const e of this.#tokens.removeOwner(s)) this.#dropImporters(e);
    for (const e of this.#tokens.values()) e.importers.delete(s);
  }

  /** Tokens owner holds. */
  count(owner: S): number {
    return this.#tokens.count(owner);
  }

  #dropImporters(e: VmmShare<S>): void {
    for (const [s, hs] of e.importers) for (const h of hs) void this.drop(s, h).catch(() => undefined);
    e.importers.clear();
  }
}
