// IPC handles of a session served by its worker on its own queue
// (owned-queue.ts): the VM's tables stay in the backend, one per VM, so a
// handle minted in one worker opens in another (and in a session the
// backend serves). The worker asks over its channel (IpcAsk, as it asks the
// VM's module cache) and the backend answers from its tables for that
// worker's session (IpcService); when an owner's memory goes, the backend
// tells each opener's worker to close it ('ipc-drop').
import { CudaErr, CudaError } from './cuda-error';
import { IPC_TOKEN_BYTES, IpcTable, type IpcBook, type IpcClaim } from './ipc';
import { big, bytes, type IpcAnswer, type IpcAnswerer, type IpcAsker, type IpcAsk, type IpcKind, type IpcReply } from './ipc-wire';

export type { IpcAnswer, IpcAnswerer, IpcAsk, IpcKind, IpcReply } from './ipc-wire';
import type { DevPtr, EventRef, Provider, ProviderContext } from './provider';
import type { Session, VmShared } from './session';
import type { Fd } from '../sys/fd';
import { RemoteVmmShares, VmmShareService } from './vmm-remote';

/** CUDA's handles are 64 bytes (CUipcMemHandle, CUipcEventHandle). */
const CUDA_HANDLE_BYTES = 64;

/** The worker's end: asks go out with an id, answers come back (ToWorker 'ipc'). */
export class IpcLink implements IpcAsker {
  readonly #waiting = new Map<number, (a: IpcAnswer, fd: Fd | undefined) => void>();
  #nextId = 1;
  /** What the backend tells the worker to close (its session opened it; the owner's memory went). */
  onDrop: (ptr: DevPtr) => Promise<void> = () => Promise.resolve();
  /** The same for a VMM allocation its session imported as handle (vmm-remote.ts). */
  onVmmDrop: (handle: bigint) => Promise<void> = () => Promise.resolve();

  constructor(readonly send: (id: number, ask: IpcAsk) => void) {}

  async ask<T>(ask: IpcAsk): Promise<T> {
    const { v, fd } = await this.#ask(ask);
    fd?.close(); // none was asked for
    return v as T;
  }

  /** As ask, for an answer that comes with an fd (a VMM import's): the caller's to close. */
  async askFd<T>(ask: IpcAsk): Promise<{ v: T; fd: Fd }> {
    const { v, fd } = await this.#ask(ask);
    if (!fd) throw new CudaError(CudaErr.Unknown, "the backend's answer came without its fd");
    return { v: v as T, fd };
  }

  async #ask(ask: IpcAsk): Promise<{ v: unknown; fd: Fd | undefined }> {
    const id = this.#nextId++;
    const [a, fd] = await new Promise<[IpcAnswer, Fd | undefined]>((resolve) => {
      this.#waiting.set(id, (a, fd) => resolve([a, fd]));
      this.send(id, ask);
    });
    if (a.ok) return { v: a.v, fd };
    fd?.close();
    throw new CudaError(a.code, a.message);
  }

  /** Answer id came (with fd, taken over: closed if nobody waits for it). */
  answer(id: number, a: IpcAnswer, fd?: Fd): void {
    const w = this.#waiting.get(id);
    this.#waiting.delete(id);
    if (w) w(a, fd);
    else fd?.close();
  }

  /** The channel closed: nothing will answer (the process is ending). */
  close(): void {
    for (const w of this.#waiting.values()) w({ ok: false, code: CudaErr.Unknown, message: 'the backend is gone' }, undefined);
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

  /** Asks only for what was minted here; waits for the openers to have closed it (or been ended: ipc.ts letGo). */
  async forget(_owner: Session, ptr: DevPtr): Promise<void> {
    if (!this.#mine.delete(ptr)) return;
    await this.link.ask({ op: 'forget', kind: this.kind, ptr }).catch(() => undefined);
  }

  async forgetSession(): Promise<void> {
    this.#mine.clear();
    await this.link.ask({ op: 'forget-session', kind: this.kind }).catch(() => undefined);
  }
}

/**
 * A queue owner's tables: every kind over one link. vmmFds: its contexts
 * export and import VMM allocations as POSIX fds (the cuda provider's).
 */
export function remoteIpc(link: IpcLink, vmmFds: boolean): Pick<VmShared, 'ipc' | 'ipcEvents' | 'vmmShares'> {
  return { ipc: new RemoteIpc(link, 'mem'), ipcEvents: new RemoteIpc(link, 'event'), vmmShares: new RemoteVmmShares(link, vmmFds) };
}

/**
 * The backend's end, for one queue owner's session: what its worker asks is
 * checked (the worker runs guest-chosen code) and answered from the VM's
 * tables, the session being the backend's Session of it.
 */
export class IpcService implements IpcAnswerer {
  readonly #vmm: VmmShareService;

  constructor(
    readonly vm: VmShared,
    readonly session: Session,
    readonly deviceCount: number,
  ) {
    this.#vmm = new VmmShareService(vm, session, deviceCount);
  }

  #table(kind: unknown): IpcTable<Session> {
    const t = kind === 'mem' ? this.vm.ipc : kind === 'event' ? this.vm.ipcEvents : undefined;
    if (!(t instanceof IpcTable)) throw new CudaError(CudaErr.NotSupported, 'IPC: the VM has no table of that kind here');
    return t;
  }

  async answer(ask: IpcAsk): Promise<IpcReply> {
    try {
      checkAsk(ask);
      if (ask.kind === 'vmm') return { ok: true, ...(await this.#vmm.answer(ask)) };
      return { ok: true, v: await this.#run(ask) };
    } catch (e) {
      const code = e instanceof CudaError ? e.code : CudaErr.Unknown;
      return { ok: false, code, message: (e as Error).message };
    }
  }

  async #run(a: Exclude<IpcAsk, { kind: 'vmm' }>): Promise<unknown> {
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

/** An ask is an object of a kind the backend has tables of; its fields are checked where they are used. */
function checkAsk(a: unknown): asserts a is IpcAsk {
  const kind = typeof a === 'object' && a !== null ? (a as { kind?: unknown }).kind : undefined;
  if (kind !== 'mem' && kind !== 'event' && kind !== 'vmm')
    throw new CudaError(CudaErr.InvalidValue, 'IPC: an ask of a worker is malformed');
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
