// IPC handles of a session served by its worker on its own queue
// (owned-queue.ts): the VM's tables stay in the backend, one per VM, so a
// handle minted in one worker opens in another (and in a session the
// backend serves). The worker asks over its channel (IpcAsk, as it asks the
// VM's module cache) and the backend answers from its tables for that
// worker's session (IpcService); when an owner's memory goes, the backend
// tells each opener's worker to close it ('ipc-drop'). Which table methods
// a worker may ask, and how each argument is checked, is the table's
// declaration (ipc.ts IPC_ASKS); both ends here are derived from it.
import { CudaErr, CudaError } from '../cuda-error';
import { IPC_ASKS, IpcTable, type IpcBook, type IpcClaim } from './ipc';
import {
  askOf,
  checkedAsk,
  checkKind,
  defineAsks,
  runAsk,
  type IpcAnswer,
  type IpcAnswerer,
  type IpcAsker,
  type IpcAsk,
  type IpcKind,
  type IpcReply,
} from './ipc-wire';

export type { IpcAnswer, IpcAnswerer, IpcAsk, IpcKind, IpcReply } from './ipc-wire';
import type { DevPtr } from '../provider';
import type { Session, VmShared } from '../session/session';
import type { Fd } from '../../vhost-user';
import { RemoteVmmShares, VmmShareService } from '../vmm/vmm-remote';

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
 * everything else is the backend's; the methods not defined here only ask
 * (defineAsks, below).
 */
export interface RemoteIpc extends IpcBook<Session> {}

export class RemoteIpc implements IpcBook<Session> {
  readonly #mine = new Map<DevPtr, string>();

  constructor(
    readonly link: IpcLink,
    readonly kind: IpcKind,
  ) {}

  #ask<T>(op: keyof typeof IPC_ASKS, ...args: unknown[]): Promise<T> {
    return this.link.ask<T>(askOf(IPC_ASKS, this.kind, op, args));
  }

  minted(_owner: Session, ptr: DevPtr): string | undefined {
    return this.#mine.get(ptr);
  }

  async mint(_owner: Session, ptr: DevPtr, size: bigint, device: number, exported?: Uint8Array): Promise<string> {
    const token = await this.#ask<string>('mint', ptr, size, device, exported);
    this.#mine.set(ptr, token);
    return token;
  }

  async claim(_opener: Session, token: Uint8Array, size: bigint): Promise<IpcClaim<Session>> {
    const c = await this.#ask<Omit<IpcClaim<Session>, 'owner'>>('claim', token, size);
    return { ...c, owner: undefined };
  }

  /** Asks only for what was minted here; waits for the openers to have closed it (or been ended: ipc.ts letGo). */
  async forget(_owner: Session, ptr: DevPtr): Promise<void> {
    if (!this.#mine.delete(ptr)) return;
    await this.#ask('forget', ptr).catch(() => undefined);
  }

  async forgetSession(): Promise<void> {
    this.#mine.clear();
    await this.#ask('forgetSession').catch(() => undefined);
  }
}
defineAsks(RemoteIpc, IPC_ASKS);

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
      checkKind(ask);
      if (ask.kind === 'vmm') return { ok: true, ...(await this.#vmm.answer(ask)) };
      const t = this.#table(ask.kind);
      return { ok: true, v: await runAsk(t, this.session, checkedAsk(IPC_ASKS, ask, this.deviceCount)) };
    } catch (e) {
      const code = e instanceof CudaError ? e.code : CudaErr.Unknown;
      return { ok: false, code, message: (e as Error).message };
    }
  }
}
