// VMM shareable handles of a session served by its worker on its own queue
// (owned-queue.ts), as IPC handles are (ipc-remote.ts): the VM's table stays
// in the backend, so a token minted in one worker imports in another, or in
// a session the backend serves, and the reverse. The worker asks over its
// channel (kind 'vmm' on the IPC link); the backend answers from the table
// for that worker's session (VmmShareService). Which table methods a worker
// may ask, and how each argument is checked, is the table's declaration
// (vmm-share.ts VMM_ASKS); both ends here are derived from it. An import's
// answer carries the owner's allocation as a POSIX fd, got from the owner's
// worker however it is served (Session.vmmExportFd): the fd is only in
// transit, closed once the importer's context has imported it. When the
// owner's memory goes, the backend tells each importer's worker to drop its
// import ('vmm-drop', answered once released, bounded by the table as
// 'ipc-drop' is).
import { CudaErr, CudaError } from '../cuda-error';
import { askOf, checkedAsk, defineAsks, runAsk, type IpcAsk, type IpcAsker } from '../ipc/ipc-wire';
import type { Provider, ProviderContext, VmmFdContext, VmmRef } from '../provider';
import type { Session, VmShared } from '../session/session';
import type { Fd } from '../../vhost-user';
import { VMM_ASKS, VmmShareTable, type VmmImported, type VmmShareBook } from './vmm-share';

/**
 * The VM's table as a queue owner's worker sees it: what its session minted
 * is remembered here (a free of anything else asks nothing), the rest is
 * the backend's; the methods not defined here only ask (defineAsks, below).
 */
export interface RemoteVmmShares extends VmmShareBook<Session> {}

export class RemoteVmmShares implements VmmShareBook<Session> {
  readonly kind = 'vmm';
  /** The session's handles with a token (bounded by what it holds: each goes with its free, or the reset). */
  readonly #mine = new Set<bigint>();

  /** fds: this worker's contexts export and import POSIX fds (the cuda provider's: VmmFdContext). */
  constructor(
    readonly link: IpcAsker,
    readonly fds: boolean,
  ) {}

  #ask(op: keyof typeof VMM_ASKS, ...args: unknown[]): IpcAsk {
    return askOf(VMM_ASKS, this.kind, op, args);
  }

  servedBy(_p: Provider): boolean {
    return this.fds;
  }

  /** The backend keeps the handle (this worker exports it when asked: OwnedQueue.vmmExportFd), never the ref. */
  async mint(_owner: Session, handle: bigint, _ref: VmmRef, size: bigint, device: number): Promise<string> {
    // Before the ask: a free meanwhile asks after it, so the backend's token goes too.
    this.#mine.add(handle);
    return this.link.ask<string>(this.#ask('mint', handle, size, device));
  }

  /** The owner's fd comes with the answer; it is closed once imported (the driver's import holds the memory). */
  async import(_importer: Session, token: Uint8Array, size: bigint, x: ProviderContext): Promise<VmmImported> {
    const { v, fd } = await this.link.askFd<{ token: string; size: bigint }>(this.#ask('import', token, size));
    try {
      const c = x as Partial<VmmFdContext>;
      if (!c.vmmImportFd) throw new CudaError(CudaErr.NotSupported, "shareable memory handles: this worker's context cannot import");
      return { token: v.token, size: v.size, ref: await c.vmmImportFd(fd.value) };
    } finally {
      fd.close();
    }
  }

  /** Never refused: the import's release goes on (the backend forgets this session's imports at its end anyway). */
  async unimported(_importer: Session, token: string, handle: bigint): Promise<void> {
    await this.link.ask(this.#ask('unimported', token, handle)).catch(() => undefined);
  }

  /** Waits for the backend to have dropped the importers' imports (bounded there). */
  async forget(_owner: Session, handle: bigint): Promise<void> {
    if (!this.#mine.delete(handle)) return;
    await this.link.ask(this.#ask('forget', handle)).catch(() => undefined);
  }

  async forgetSession(): Promise<void> {
    this.#mine.clear();
    await this.link.ask(this.#ask('forgetSession')).catch(() => undefined);
  }
}
defineAsks(RemoteVmmShares, VMM_ASKS);

/**
 * The backend's end, for one queue owner's session: what its worker asks is
 * checked (the worker runs guest-chosen code) and answered from the VM's
 * table, the session being the backend's Session of it.
 */
export class VmmShareService {
  constructor(
    readonly vm: VmShared,
    readonly session: Session,
    readonly deviceCount: number,
  ) {}

  /** The answer's value, and the fd it hands over (an import's: the caller's, to send and close). */
  async answer(ask: IpcAsk): Promise<{ v: unknown; fd?: Fd }> {
    const t = this.vm.vmmShares;
    if (!(t instanceof VmmShareTable)) throw new CudaError(CudaErr.NotSupported, 'shareable memory handles: the VM has no table here');
    const a = checkedAsk(VMM_ASKS, ask, this.deviceCount);
    if (a.op !== 'import') return { v: await runAsk(t, this.session, a) };
    // The owner's allocation as an fd, from its worker however it is served.
    const [token, size] = a.args as [Uint8Array, bigint];
    const e = t.find(token, size);
    const fd = await e.owner.vmmExportFd(e.handle, e.ref, e.device);
    return { v: { token: e.token, size: e.size }, fd };
  }
}
