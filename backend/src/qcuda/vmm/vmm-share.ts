// Shareable handles of virtual memory management between the processes of
// one VM (cuMemExportToShareableHandle, cuMemImportFromShareableHandle with
// POSIX file descriptors): the backend mints a random token for an
// allocation of one session, libcuda carries it in a sealed memfd the guest
// passes to another process, and that process imports the token. As with
// IPC handles (ipc.ts), the VM's table is the only way from a token to
// memory: forged bytes, another VM's tokens and freed allocations name
// nothing. The memory stays its owner's (counted in its quota); when the
// owner frees it (release and unmap, reset, exit) the token goes and each
// importer loses its handle and mappings of it (drop); its bytes stay
// counted until every importer has let go of it (letGo, as IPC's).
import { CudaErr, CudaError } from '../cuda-error';
import { letGo, track } from '../ipc/ipc';
import type { Provider, ProviderContext, VmmRef } from '../provider';
import { wire, type AskDecls } from '../ipc/ipc-wire';
import { TOKEN_BYTES, TokenTable } from '../ipc/token-table';

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

/** What an import gives the importer: the memory in its context, and what names it in the VM's table. */
export interface VmmImported {
  readonly token: string;
  readonly size: bigint;
  /** The memory in the importer's context, released by vmmRelease. */
  readonly ref: VmmRef;
}

/**
 * The VM's shareable handles as the VMM commands use them: the table itself
 * where the backend serves the session, or the backend's table asked over
 * the channel from a session's worker serving its own queue (vmm-remote.ts).
 */
export interface VmmShareBook<S> {
  /** Whether sessions served by provider p (this process's) may export and import. */
  servedBy(p: Provider): boolean;
  /** The token of owner's allocation (its handle; ref in its context on device), minted at the first ask. */
  mint(owner: S, handle: bigint, ref: VmmRef, size: bigint, device: number): Promise<string>;
  /** The memory a token names, imported into importer's context x; refused as find is. Not the importer's until imported(). */
  import(importer: S, token: Uint8Array, size: bigint, x: ProviderContext): Promise<VmmImported>;
  /** importer's handle h names token's memory now; false if it went meanwhile (the importer undoes its import). */
  imported(importer: S, token: string, h: bigint): Promise<boolean>;
  /** importer freed its handle h of token's memory. */
  unimported(importer: S, token: string, h: bigint): Promise<void>;
  /** The owner freed its allocation: its token goes, and importers lose it (resolves once they have let go, or their processes ended: IpcBook.forget). */
  forget(owner: S, handle: bigint): Promise<void>;
  /** The session reset or exited: its tokens go (as forget; those of its earlier forgets waited for too), and what it imported. */
  forgetSession(s: S): Promise<void>;
}

/**
 * What a queue owner's worker may ask of the VM's table for its session
 * (vmm-remote.ts): every VmmShareBook method but servedBy (its worker
 * knows), with how the backend checks each argument. A mint names the
 * allocation by its handle alone: the owner's worker finds the ref by it.
 * An import's answer carries an fd (VmmShareService answers it).
 */
export const VMM_ASKS = {
  mint: {
    args: { handle: wire.u64('a handle'), size: wire.u64('a size'), device: wire.device },
    call: (t: VmmShareBook<unknown>, s: unknown, handle: bigint, size: bigint, device: number) => t.mint(s, handle, handle, size, device),
  },
  import: { args: { token: wire.bytes(TOKEN_BYTES, 'a token'), size: wire.u64('a size') } },
  imported: { args: { token: wire.hex(TOKEN_BYTES, 'a token'), handle: wire.u64('a handle') } },
  unimported: { args: { token: wire.hex(TOKEN_BYTES, 'a token'), handle: wire.u64('a handle') } },
  forget: { args: { handle: wire.u64('a handle') } },
  forgetSession: { args: {} },
} satisfies AskDecls<VmmShareBook<unknown>, 'servedBy'>;

export class VmmShareTable<S> implements VmmShareBook<S> {
  /**
   * drop: the owner freed the memory; importer's handle h of it is gone (its
   * mappings unmapped, the import released: resolves once it is). open: e's
   * memory imported into importer's context x. end: ends an importer's
   * process, whose drop failed or hung.
   */
  constructor(
    readonly drop: (importer: S, h: bigint) => Promise<void>,
    readonly open: (e: VmmShare<S>, importer: S, x: ProviderContext) => Promise<VmmRef>,
    readonly end?: (importer: S, why: string) => Promise<void>,
  ) {}

  /** Each owner's forgets whose importers have not let go yet (forgetSession waits for them too). */
  readonly #letting = new Map<S, Set<Promise<void>>>();

  /** A provider that imports another context's memory (Provider.vmmImport) serves the table's sessions. */
  servedBy(p: Provider): boolean {
    return p.vmmImport !== undefined;
  }

  /** One token per allocation of an owner (by its handle). */
  readonly #tokens = new TokenTable<S, bigint, VmmShare<S>>();

  /** The token of owner's allocation h, minted at the first ask. */
  async mint(owner: S, handle: bigint, ref: VmmRef, size: bigint, device: number): Promise<string> {
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

  async import(importer: S, token: Uint8Array, size: bigint, x: ProviderContext): Promise<VmmImported> {
    const e = this.find(token, size);
    return { token: e.token, size: e.size, ref: await this.open(e, importer, x) };
  }

  async imported(importer: S, token: string, h: bigint): Promise<boolean> {
    const e = this.#tokens.find(token);
    if (!e) return false;
    let hs = e.importers.get(importer);
    if (!hs) e.importers.set(importer, (hs = new Set()));
    hs.add(h);
    return true;
  }

  async unimported(importer: S, token: string, h: bigint): Promise<void> {
    const e = this.#tokens.find(token);
    const hs = e?.importers.get(importer);
    hs?.delete(h);
    if (hs?.size === 0) e!.importers.delete(importer);
  }

  /**
   * The owner freed its allocation h: its token names nothing now, and
   * importers lose it. Resolves once each has unmapped and released it (an
   * importer served by its own worker is asked and answers), or, where that
   * failed or took longer than DROP_WAIT_MS, once its process was ended
   * (letGo): the owner's free is answered, and its bytes uncounted, only
   * after that.
   */
  async forget(owner: S, handle: bigint): Promise<void> {
    const e = this.#tokens.remove(owner, handle);
    if (e) await this.#dropImporters(e);
  }

  async forgetSession(s: S): Promise<void> {
    const drops = this.#tokens.removeOwner(s).map((e) => this.#dropImporters(e));
    for (const e of this.#tokens.values()) e.importers.delete(s);
    await Promise.all([...drops, ...(this.#letting.get(s) ?? [])]);
  }

  /** Tokens owner holds. */
  /** Every handle, for the VM's state to be saved (migration/). */
  entries(): VmmShare<S>[] {
    return [...this.#tokens.values()];
  }

  /** Whether an owner's free still waits for importers to let go (a save waits for none). */
  get letting(): boolean {
    return this.#letting.size > 0;
  }

  /** A migrated handle, its token as at its source; false where its token or allocation has one already. */
  adopt(e: VmmShare<S>): boolean {
    return this.#tokens.adopt(e.owner, e.handle, e);
  }

  count(owner: S): number {
    return this.#tokens.count(owner);
  }

  #dropImporters(e: VmmShare<S>): Promise<void> {
    const end = this.end;
    const drops = [...e.importers].flatMap(([s, hs]) => [...hs].map((h) => letGo(() => this.drop(s, h), end && ((why) => end(s, why)))));
    e.importers.clear();
    return track(
      this.#letting,
      e.owner,
      Promise.all(drops).then(() => undefined),
    );
  }
}
