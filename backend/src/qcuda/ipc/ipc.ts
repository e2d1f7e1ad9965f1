// IPC between the processes of one VM (cudaIpcGetMemHandle,
// cudaIpcOpenMemHandle): a handle is a random token the backend minted for
// an allocation of one session; the table of the VM's tokens is the only
// way from a token to memory, so forged bytes and another VM's handles name
// nothing. An allocation's handle and what others opened of it go when its
// owner frees it, resets or exits; its bytes stay counted until every opener
// has closed it (letGo).
import { CudaErr, CudaError } from '../cuda-error';
import type { DevPtr } from '../provider';
import { wire, type AskDecls } from './ipc-wire';
import { TOKEN_BYTES, TokenTable } from './token-table';

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

/** A token's bytes (the handle's first 16). */
export const IPC_TOKEN_BYTES = TOKEN_BYTES;

/** CUDA's handles are 64 bytes (CUipcMemHandle, CUipcEventHandle). */
export const CUDA_HANDLE_BYTES = 64;

/** Handles one session may hold (memory and events, each), however it is served: its allocations bound them too. */
export const IPC_HANDLES_PER_SESSION = 65536;

/**
 * The longest an opener (or importer: vmm-share.ts) may take to let go of
 * memory whose owner freed it, before its process is ended (letGo).
 */
export const DROP_WAIT_MS = 2_000;

/**
 * Runs drop (an opener closes what it opened of memory its owner freed) and
 * resolves once the memory is let go of: drop succeeded, or, where it
 * failed or took longer than DROP_WAIT_MS, once end() has ended the
 * opener's process (its contexts, and what they hold, go with it). CUDA
 * keeps freed memory while another process has it open (a context with a
 * sticky fault fails the close and keeps it until it exits: security
 * review 3, N4), so the owner's bytes stay counted until this resolves.
 */
export async function letGo(drop: () => Promise<void>, end: ((why: string) => Promise<void>) | undefined): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`it did not let go in ${DROP_WAIT_MS} ms`)), DROP_WAIT_MS);
  });
  try {
    await Promise.race([drop(), late]);
  } catch (e) {
    await end?.((e as Error).message).catch(() => undefined);
  } finally {
    clearTimeout(timer);
  }
}

/** What an opener needs of a handle it may open: the owner (where it is in this process) and CUDA's handle. */
export interface IpcClaim<S> {
  /** The owner's session, where it is served in this process (undefined in a queue owner's worker). */
  readonly owner: S | undefined;
  /** The allocation's address, or the event's handle, in the owner. */
  readonly ptr: DevPtr;
  readonly size: bigint;
  readonly device: number;
  readonly exported: Uint8Array | undefined;
}

/**
 * The VM's handles as the IPC commands use them: the table itself where
 * the backend serves the session, or the backend's table asked over the
 * channel from a session's worker serving its own queue (ipc-remote.ts).
 */
export interface IpcBook<S> {
  /** The token already minted for owner's ptr, if any. */
  minted(owner: S, ptr: DevPtr): string | undefined;
  /** The token of owner's ptr, minted at the first ask. */
  mint(owner: S, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): Promise<string>;
  /** What opening token needs; refused as CUDA does (unknown, the owner's own, opened already). A memory handle is the opener's from here (settle). */
  claim(opener: S, token: Uint8Array, size: bigint): Promise<IpcClaim<S>>;
  /** The opening of token ended: opened at `at`, or failed (undefined). False: the handle went meanwhile (the opener closes it). */
  settle(opener: S, token: Uint8Array, at: DevPtr | undefined): Promise<boolean>;
  /** Opener closes what it opened at ptr; false if it opened nothing there. */
  close(opener: S, ptr: DevPtr): Promise<boolean>;
  /** Owner freed ptr: its handle goes, and its openers lose it (resolves once they have closed it, or their processes ended: letGo). */
  forget(owner: S, ptr: DevPtr): Promise<void>;
  /** The session reset or exited: its handles go (resolves once their openers have let go, as forget, those of its earlier forgets too), and what it opened. */
  forgetSession(s: S): Promise<void>;
}

/**
 * What a queue owner's worker may ask of the VM's table for its session
 * (ipc-remote.ts): every IpcBook method but minted (its worker keeps its
 * own), with how the backend checks each argument; a claim's owner stays
 * in the backend.
 */
export const IPC_ASKS = {
  mint: {
    args: {
      ptr: wire.u64('a pointer'),
      size: wire.u64('a size'),
      device: wire.device,
      exported: wire.optional(wire.bytes(CUDA_HANDLE_BYTES, "CUDA's handle")),
    },
  },
  claim: {
    args: { token: wire.bytes(IPC_TOKEN_BYTES, 'a token'), size: wire.u64('a size') },
    reply: (c: IpcClaim<unknown>) => ({ ptr: c.ptr, size: c.size, device: c.device, exported: c.exported }),
  },
  settle: { args: { token: wire.bytes(IPC_TOKEN_BYTES, 'a token'), at: wire.optional(wire.u64('a pointer')) } },
  close: { args: { ptr: wire.u64('a pointer') } },
  forget: { args: { ptr: wire.u64('a pointer') } },
  forgetSession: { args: {} },
} satisfies AskDecls<IpcBook<unknown>, 'minted'>;

export class IpcTable<S> implements IpcBook<S> {
  /**
   * what: the handle's name in refusals. drop: undoes an opener's opening
   * when the owner's memory goes, resolving once it is closed (none for
   * events: the opener's stays its own, and the same event may be opened
   * again). end: ends an opener's process, whose drop failed or hung.
   */
  constructor(
    readonly what: string,
    readonly drop?: (opener: S, at: DevPtr) => Promise<void>,
    readonly end?: (opener: S, why: string) => Promise<void>,
  ) {}

  /** Each owner's forgets whose openers have not let go yet (forgetSession waits for them too). */
  readonly #letting = new Map<S, Set<Promise<void>>>();

  /** One handle per allocation (or event) of an owner, bounded by what the owner holds. */
  readonly #tokens = new TokenTable<S, DevPtr, IpcEntry<S>>();

  /** The handle of owner's allocation at ptr, minted at the first ask. */
  entry(owner: S, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): IpcEntry<S> {
    return this.#tokens.entry(owner, ptr, (token) => ({ token, owner, ptr, size, device, exported, openers: new Map() }));
  }

  /** The handle already minted for owner's ptr, if any. */
  minted(owner: S, ptr: DevPtr): string | undefined {
    return this.#tokens.of(owner, ptr)?.token;
  }

  /** Every handle, for the VM's state to be saved (migration/). */
  entries(): IpcEntry<S>[] {
    return [...this.#tokens.values()];
  }

  /** Whether an owner's free still waits for openers to let go (a save waits for none). */
  get letting(): boolean {
    return this.#letting.size > 0;
  }

  /** A migrated handle, its token and openers as at its source; false where its token or allocation has one already. */
  adopt(e: IpcEntry<S>): boolean {
    return this.#tokens.adopt(e.owner, e.ptr, e);
  }

  /** How many handles owner has. */
  count(owner: S): number {
    return this.#tokens.count(owner);
  }

  async mint(owner: S, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): Promise<string> {
    if (!this.minted(owner, ptr) && this.count(owner) >= IPC_HANDLES_PER_SESSION)
      throw new CudaError(CudaErr.MemoryAllocation, `IPC: a process may hold ${IPC_HANDLES_PER_SESSION} handles of each kind`);
    return this.entry(owner, ptr, size, device, exported).token;
  }

  async claim(opener: S, token: Uint8Array, size: bigint): Promise<IpcClaim<S>> {
    const e = this.find(token);
    if (!e || e.size !== size)
      throw new CudaError(CudaErr.InvalidResourceHandle, `${this.what}: not one of this VM, or what it named is gone`);
    if (e.owner === opener) throw new CudaError(CudaErr.DeviceUninitialized, `${this.what} opened in the process that made it`);
    if (this.drop) {
      if (e.openers.has(opener)) throw new CudaError(CudaErr.InvalidValue, `${this.what}: opened already in this process`);
      e.openers.set(opener, 0n); // before the opening's awaits: a second open meanwhile is refused
    }
    return { owner: e.owner, ptr: e.ptr, size: e.size, device: e.device, exported: e.exported };
  }

  async settle(opener: S, token: Uint8Array, at: DevPtr | undefined): Promise<boolean> {
    const e = this.find(token);
    if (!this.drop) return e !== undefined;
    if (at === undefined || !e?.openers.has(opener)) {
      e?.openers.delete(opener);
      return false;
    }
    e.openers.set(opener, at);
    return true;
  }

  async close(opener: S, ptr: DevPtr): Promise<boolean> {
    const e = this.openedBy(opener, ptr);
    e?.openers.delete(opener);
    return e !== undefined;
  }

  find(token: Uint8Array): IpcEntry<S> | undefined {
    return this.#tokens.find(token);
  }

  /** The entry opener opened at ptr, if any. */
  openedBy(opener: S, ptr: DevPtr): IpcEntry<S> | undefined {
    for (const e of this.#tokens.values()) if (e.openers.get(opener) === ptr) return e;
    return undefined;
  }

  /**
   * Owner freed the allocation at ptr: its handle names nothing now, and
   * openers lose it. Resolves once each has closed it (an opener served by
   * its own worker is asked and answers), or, where its close failed or
   * took longer than DROP_WAIT_MS, once its process was ended (letGo): the
   * owner's free counts the bytes until then, and an opener's next call
   * after the owner's free is answered never reaches the memory.
   */
  async forget(owner: S, ptr: DevPtr): Promise<void> {
    const e = this.#tokens.remove(owner, ptr);
    if (e) await this.#dropOpeners(e);
  }

  /** The session reset or exited: its handles go (as forget), and what it opened; resolves once the openers of its earlier forgets have let go too. */
  async forgetSession(s: S): Promise<void> {
    const drops = [...this.#tokens.removeOwner(s)].map((e) => this.#dropOpeners(e));
    for (const e of this.#tokens.values()) e.openers.delete(s);
    await Promise.all([...drops, ...(this.#letting.get(s) ?? [])]);
  }

  #dropOpeners(e: IpcEntry<S>): Promise<void> {
    // An opener whose context is gone meanwhile has nothing left to drop.
    // Each is issued at once, before the owner's free: CUDA keeps the memory while it is opened.
    const drop = this.drop;
    const drops = drop
      ? [...e.openers].filter(([, at]) => at !== 0n).map(([o, at]) => letGo(() => drop(o, at), this.end && ((why) => this.end!(o, why))))
      : [];
    e.openers.clear();
    return track(
      this.#letting,
      e.owner,
      Promise.all(drops).then(() => undefined),
    );
  }
}

/** Keeps p in owner's set of letting until it settles; p. */
export function track<S>(letting: Map<S, Set<Promise<void>>>, owner: S, p: Promise<void>): Promise<void> {
  let set = letting.get(owner);
  if (!set) letting.set(owner, (set = new Set()));
  set.add(p);
  void p.finally(() => {
    set.delete(p);
    if (set.size === 0 && letting.get(owner) === set) letting.delete(owner);
  });
  return p;
}
