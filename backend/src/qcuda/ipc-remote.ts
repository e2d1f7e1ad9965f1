// IPC handles of a session served by its worker on its own queue
// (owned-queue.ts): the VM's tables stay in the backend, one per VM, so a
// handle minted in one worker opens in another (and in a session the
// backend serves). The worker asks over its channel (IpcAsk, as it asks the
// VM's module cache) and the backend answers from its tables for that
// worker's session (IpcService); when an owner's memory goes, the backend
// tells each opener's worker to close it ('ipc-drop').
import { CudaErr, CudaError } from './cuda-error';
import { IPC_TOKEN_BYTES, IpcTable, type IpcBook, type IpcClaim } from './ipc';
import type { IpcAnswer, IpcAnswerer, IpcAsk, IpcKind } from './ipc-wire';

export type { IpcAnswer, IpcAnswerer, IpcAsk, IpcKind } from './ipc-wire';
import type { DevPtr, EventRef, Provider, ProviderContext } from './provider';
import type { Session, VmShared } from './session';

/** CUDA's handles are 64 bytes (CUipcMemHandle, CUipcEventHandle). */
const CUDA_HANDLE_BYTES = 64;

/** The worker's end: asks go out with an id, answers come back (ToWorker 'ipc'). */
export class IpcLink {
  readonly #waiting = new Map<number, (a: IpcAnswer) => void>();
  #nextId = 1;
  /** What the backend tells the worker to close (its session opened it; the owner's memory went). */
  onDrop: (ptr: DevPtr) => Promise<void> = () => Promise.resolve();

  constructor(readonly send: (id: number, ask: IpcAsk) => void) {}

  async ask<T>(ask: IpcAsk): Promise<T> {
    const id = this.#nextId++;
    const a = await new Promise<IpcAnswer>((resolve) => {
      this.#waiting.set(id, resolve);
      this.send(id, ask);
    });
    if (!a.ok) throw new CudaError(a.code, a.message);
    return a.v as T;
  }

  answer(id: number, a: IpcAnswer): void {
    this.#waiting.get(id)?.(a);
    this.#waiting.delete(id);
  }

  /** The channel closed: nothing will answer (the process is ending). */
  close(): void {
    for (const w of this.#waiting.values()) w({ ok: false, code: CudaErr.Unknown, message: 'the backend is gone' });
    this.#waiting.clear();
  }
}

/**
 * One of the VM's tables as a queue owner's worker sees it: its one
 * session's minted tokens are kept here too (a second IPC_GET asks nothing),
 * everything else is the backend's.
 */
export class RemoteIpc implements IpcBook<Session> {
  readonly #mine = new Map<DevPtr, string>();

  constructor(
    readonly link: IpcLink,
    readonly kind: IpcKind,
  ) {}

  minted(_owner: Session, ptr: DevPtr): string | undefined {
    return this.#mine.get(ptr);
  }

  async mint(_owner: Session, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): Promise<string> {
    const token = await this.link.ask<string>({ op: 'mint', kind: this.kind, ptr, size, device, exported });
    this.#mine.set(ptr, token);
    return token;
  }

  async claim(_opener: Session, token: Uint8Array, size: bigint): Promise<IpcClaim<Session>> {
    const c = await this.link.ask<Omit<IpcClaim<Session>, 'owner'>>({ op: 'claim', kind: this.kind, token, size });
    return { ...c, owner: undefined };
  }

  settle(_opener: Session, token: Uint8Array, at: DevPtr | undefined): Promise<boolean> {
    return this.link.ask<boolean>({ op: 'settle', kind: this.kind, token, at });
  }

  close(_opener: Session, ptr: DevPtr): Promise<boolean> {
    return this.link.ask<boolean>({ op: 'close', kind: this.kind, ptr });
  }

  /** Asks only for what was minted here; waits for the backend to have sent the openers' closes. */
  async forget(_owner: Session, ptr: DevPtr): Promise<void> {
    if (!this.#mine.delete(ptr)) return;
    await this.link.ask({ op: 'forget', kind: this.kind, ptr }).catch(() => undefined);
  }

  async forgetSession(): Promise<void> {
    this.#mine.clear();
    await this.link.ask({ op: 'forget-session', kind: this.kind }).catch(() => undefined);
  }
}

/** A queue owner's tables: both kinds over one link. */
export function remoteIpc(link: IpcLink): Pick<VmShared, 'ipc' | 'ipcEvents'> {
  return { ipc: new RemoteIpc(link, 'mem'), ipcEvents: new RemoteIpc(link, 'event') };
}

function bytes(v: unknown, n: number, what: string): Uint8Array {
  if (!(v instanceof Uint8Array) || v.length !== n) throw new CudaError(CudaErr.InvalidValue, `IPC: ${what} of a worker is malformed`);
  return v;
}

function big(v: unknown, what: string): bigint {
  if (typeof v !== 'bigint' || v < 0n || v >= 1n << 64n) throw new CudaError(CudaErr.InvalidValue, `IPC: ${what} of a worker is malformed`);
  return v;
}

/**
 * The backend's end, for one queue owner's session: what its worker asks is
 * checked (the worker runs guest-chosen code) and answered from the VM's
 * tables, the session being the backend's Session of it.
 */
export class IpcService implements IpcAnswerer {
  constructor(
    readonly vm: VmShared,
    readonly session: Session,
    readonly deviceCount: number,
  ) {}

  #table(kind: unknown): IpcTable<Session> {
    const t = kind === 'mem' ? this.vm.ipc : kind === 'event' ? this.vm.ipcEvents : undefined;
    if (!(t instanceof IpcTable)) throw new CudaError(CudaErr.NotSupported, 'IPC: the VM has no table of that kind here');
    return t;
  }

  async answer(ask: IpcAsk): Promise<IpcAnswer> {
    try {
      return { ok: true, v: await this.#run(ask) };
    } catch (e) {
      const code = e instanceof CudaError ? e.code : CudaErr.Unknown;
      return { ok: false, code, message: (e as Error).message };
    }
  }

  async #run(a: IpcAsk): Promise<unknown> {
    const t = this.#table(a.kind);
    const s = this.session;
    switch (a.op) {
      case 'mint': {
        const ptr = big(a.ptr, 'a pointer');
        const size = big(a.size, 'a size');
        if (!Number.isInteger(a.device) || a.device < 0 || a.device >= this.deviceCount)
          throw new CudaError(CudaErr.InvalidValue, 'IPC: a device of a worker is malformed');
        const exported = a.exported === undefined ? undefined : bytes(a.exported, CUDA_HANDLE_BYTES, "CUDA's handle");
        return t.mint(s, ptr, size, a.device, exported);
      }
      case 'claim': {
        const c = await t.claim(s, bytes(a.token, IPC_TOKEN_BYTES, 'a token'), big(a.size, 'a size'));
        return { ptr: c.ptr, size: c.size, device: c.device, exported: c.exported };
      }
      case 'settle':
        return t.settle(s, bytes(a.token, IPC_TOKEN_BYTES, 'a token'), a.at === undefined ? undefined : big(a.at, 'a pointer'));
      case 'close':
        return t.close(s, big(a.ptr, 'a pointer'));
      case 'forget':
        return t.forget(s, big(a.ptr, 'a pointer'));
      case 'forget-session':
        return t.forgetSession(s);
      default:
        throw new CudaError(CudaErr.InvalidValue, 'IPC: no such ask');
    }
  }
}

/**
 * IPC where each session's context is in a process of its own (a worker per
 * session, isolated.ts; a queue owner's worker): the owner's context gives
 * CUDA's handle (cuIpcGetMemHandle), which the backend keeps, and the
 * opener's context opens it (cuIpcOpenMemHandle_v2). Host contexts refuse
 * with NotSupported at the export: host memory does not leave its process.
 */
export const CONTEXT_IPC: Required<Pick<Provider, 'ipcExport' | 'ipcOpen' | 'ipcClose' | 'ipcEventExport' | 'ipcEventOpen'>> = {
  ipcExport(owner: ProviderContext, ptr: DevPtr): Promise<Uint8Array> {
    return owner.ipcMemExport(ptr);
  },
  ipcOpen(_owner: ProviderContext | undefined, _ptr: DevPtr, opener: ProviderContext, exported?: Uint8Array): Promise<DevPtr> {
    if (!exported) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'an IPC handle without its CUDA handle'));
    return opener.ipcMemOpen(exported);
  },
  ipcClose(opener: ProviderContext, ptr: DevPtr): Promise<void> {
    return opener.ipcMemClose(ptr);
  },
  ipcEventExport(owner: ProviderContext, e: EventRef): Promise<Uint8Array> {
    return owner.ipcEventExport(e);
  },
  ipcEventOpen(
    _owner: ProviderContext | undefined,
    _e: EventRef | undefined,
    opener: ProviderContext,
    exported?: Uint8Array,
  ): Promise<EventRef> {
    if (!exported) return Promise.reject(new CudaError(CudaErr.InvalidResourceHandle, 'an IPC event handle without its CUDA handle'));
    return opener.ipcEventOpen(exported);
  },
};
