// The VM's IPC tables in its state: each memory and event handle its
// sessions minted, by its token (the guest holds the token's bytes), its
// owner and what it names there, and each opening of IPC memory, at the
// address the opener got. Restored once every session is, by session id:
// an opening reaches its owner's allocation again, at its old address.
import { CudaError } from '../cuda-error';
import { IpcTable, type IpcEntry } from '../ipc/ipc';
import type { DevPtr } from '../provider';
import type { Session, VmShared } from '../session/session';
import { StateError } from './format';
import { hostContext } from './emu-context';
import type { IpcImage, SessionImage } from './image';

function tables(vm: VmShared): { memory: IpcTable<Session>; event: IpcTable<Session> } {
  const { ipc, ipcEvents } = vm;
  if (!(ipc instanceof IpcTable) || !(ipcEvents instanceof IpcTable))
    throw new StateError("not yet carried: IPC handles kept in another process's table");
  return { memory: ipc, event: ipcEvents };
}

const hex = (b: Uint8Array | undefined): string | null => (b === undefined ? null : Buffer.from(b).toString('hex'));

/** Every handle of the VM's sessions; refused while an owner's free waits for its openers, or an opening is half made. */
export function saveIpc(vm: VmShared): IpcImage[] {
  const t = tables(vm);
  if (t.memory.letting || t.event.letting) throw new StateError('not yet carried: freed IPC memory that an opener has not let go of yet');
  return (['memory', 'event'] as const).flatMap((kind) =>
    t[kind].entries().map((e) => {
      const openers = [...e.openers].map(([o, at]) => ({ session: o.id, at }));
      if (openers.some((o) => o.at === 0n)) throw new StateError('not yet carried: an IPC handle being opened');
      return { kind, token: e.token, owner: e.owner.id, ptr: e.ptr, size: e.size, device: e.device, exported: hex(e.exported), openers };
    }),
  );
}

/** The VM's handles again, over its restored sessions (by id, with their images); a throw leaves the caller to close them. */
export function restoreIpc(vm: VmShared, list: readonly IpcImage[], sessions: ReadonlyMap<bigint, readonly [Session, SessionImage]>): void {
  try {
    restore(vm, list, sessions);
  } catch (e) {
    if (e instanceof CudaError) throw new StateError(`IPC: ${e.message}`);
    throw e;
  }
}

function restore(vm: VmShared, list: readonly IpcImage[], sessions: ReadonlyMap<bigint, readonly [Session, SessionImage]>): void {
  const t = tables(vm);
  const session = (id: bigint): readonly [Session, SessionImage] => {
    const s = sessions.get(id);
    if (!s) throw new StateError(`corrupted: an IPC handle of session ${id.toString(16)}, which the state has not`);
    return s;
  };
  const opened = new Set<string>();
  for (const e of list) {
    const [owner] = session(e.owner);
    const openers = new Map<Session, DevPtr>();
    if (e.kind === 'memory') {
      const a = owner.memory.allocAt(e.ptr);
      if (!a || a.size !== e.size || a.device !== e.device)
        throw new StateError(`corrupted: IPC handle of 0x${e.ptr.toString(16)}: not an allocation of session ${e.owner.toString(16)}`);
      const from = owner.tables().contexts.find((c) => c.device === e.device)?.opened;
      const bytes = hostContext(from).memory.views(e.ptr, e.size, hostContext(from))[0];
      for (const o of e.openers) {
        const [s, img] = session(o.session);
        const imp = img.imports.find((i) => i.base === o.at && i.size === e.size);
        if (!imp || s === owner || opened.has(`${o.session}:${o.at}`))
          throw new StateError(`corrupted: session ${o.session.toString(16)}'s opening of IPC memory at 0x${o.at.toString(16)}`);
        opened.add(`${o.session}:${o.at}`);
        const x = hostContext(s.tables().contexts.find((c) => c.device === imp.device)?.opened);
        x.memory.adoptImport(o.at, bytes, x);
        s.memory.addImport(o.at, e.size, imp.device);
        openers.set(s, o.at);
      }
    } else {
      owner.event(e.ptr); // refused where the owner has no such event
    }
    const entry: IpcEntry<Session> = {
      token: e.token,
      owner,
      ptr: e.ptr,
      size: e.size,
      device: e.device,
      exported: e.exported === null ? undefined : new Uint8Array(Buffer.from(e.exported, 'hex')),
      openers,
    };
    if (!t[e.kind].adopt(entry)) throw new StateError(`corrupted: IPC handle ${e.token} twice`);
  }
  for (const [id, [, img]] of sessions)
    for (const i of img.imports)
      if (!opened.has(`${id}:${i.base}`))
        throw new StateError(`corrupted: session ${id.toString(16)} opened IPC memory at 0x${i.base.toString(16)} of no handle`);
}
