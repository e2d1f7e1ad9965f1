// The VM's shareable VMM handles in its state (vmm-share.ts): each
// exported allocation by its token (the guest holds the token's bytes) and
// owner, and each importer's handles of it. Restored once every session
// is: an importer's memory is its owner's again (the provider's vmmImport),
// under the importer's old handle, mapped where it was.
import { CudaError } from '../cuda-error';
import type { Session, VmShared } from '../session/session';
import { VmmShareTable, type VmmShare } from '../vmm/vmm-share';
import { StateError } from './format';
import { hostContext } from './emu-context';
import type { SessionImage, VmmShareImage } from './image';
import { restoreMapping } from './session-state';

function table(vm: VmShared): VmmShareTable<Session> {
  if (!(vm.vmmShares instanceof VmmShareTable))
    throw new StateError("not yet carried: shareable VMM handles kept in another process's table");
  return vm.vmmShares;
}

export function saveShares(vm: VmShared): VmmShareImage[] {
  const t = table(vm);
  if (t.letting) throw new StateError('not yet carried: freed VMM memory that an importer has not let go of yet');
  return t.entries().map((e) => ({
    token: e.token,
    owner: e.owner.id,
    handle: e.handle,
    size: e.size,
    device: e.device,
    importers: [...e.importers].map(([s, hs]) => ({ session: s.id, handles: [...hs] })),
  }));
}

type Sessions = ReadonlyMap<bigint, readonly [Session, SessionImage]>;

export async function restoreShares(vm: VmShared, list: readonly VmmShareImage[], sessions: Sessions): Promise<void> {
  try {
    await restore(vm, list, sessions);
  } catch (e) {
    if (e instanceof CudaError) throw new StateError(`shareable VMM handles: ${e.message}`);
    throw e;
  }
}

const contextOn = (s: Session, device: number) => hostContext(s.tables().contexts.find((c) => c.device === device)?.opened);

async function restore(vm: VmShared, list: readonly VmmShareImage[], sessions: Sessions): Promise<void> {
  const t = table(vm);
  const session = (id: bigint): readonly [Session, SessionImage] => {
    const s = sessions.get(id);
    if (!s) throw new StateError(`corrupted: a shareable VMM handle of session ${id.toString(16)}, which the state has not`);
    return s;
  };
  const byToken = new Map<string, VmmShare<Session>>();
  for (const e of list) {
    const [owner] = session(e.owner);
    const a = owner.vmm.existing(e.handle);
    if (!a || a.size !== e.size || a.token !== undefined)
      throw new StateError(`corrupted: shareable handle of VMM memory 0x${e.handle.toString(16)}, not of session ${e.owner.toString(16)}`);
    const share: VmmShare<Session> = {
      token: e.token,
      owner,
      handle: e.handle,
      ref: a.ref,
      size: e.size,
      device: e.device,
      importers: new Map(),
    };
    if (!t.adopt(share)) throw new StateError(`corrupted: shareable VMM handle ${e.token} twice`);
    byToken.set(e.token, share);
  }
  const claimed = new Set<string>();
  const mapsOf = (img: SessionImage) => {
    const by = new Map<bigint, SessionImage['vmm']['maps']>();
    for (const m of img.vmm.maps) by.set(m.h, [...(by.get(m.h) ?? []), m]);
    return by;
  };
  for (const e of list) for (const i of e.importers) for (const h of i.handles) claimed.add(`${i.session}:${h}:${e.token}`);
  for (const [id, [s, img]] of sessions) {
    const maps = mapsOf(img);
    for (const a of img.vmm.allocs) {
      if (a.token === null) continue;
      const share = byToken.get(a.token);
      if (!share || share.size !== a.size || share.owner === s || !claimed.delete(`${id}:${a.h}:${a.token}`))
        throw new StateError(`corrupted: session ${id.toString(16)}'s imported VMM memory 0x${a.h.toString(16)} of no handle of the state`);
      const x = contextOn(s, a.device);
      const from = contextOn(share.owner, share.device);
      const ref = x.memory.vmmShare(share.ref, from, x);
      s.handleCounter.reuse(a.h);
      const h = s.addVmmAlloc(x, ref, a.size, a.token);
      if (h !== a.h) throw new StateError(`session ${id.toString(16)}: handle 0x${a.h.toString(16)} came back as 0x${h.toString(16)}`);
      let hs = share.importers.get(s);
      if (!hs) share.importers.set(s, (hs = new Set()));
      hs.add(h);
      for (const m of maps.get(a.h) ?? []) await restoreMapping(s, x, m);
      const now = s.vmm.existing(h)!;
      if (a.held === 0 && now.maps === 0)
        throw new StateError(`corrupted: session ${id.toString(16)}: VMM memory 0x${h.toString(16)} neither held nor mapped`);
      now.held = a.held;
    }
  }
  if (claimed.size > 0) throw new StateError('corrupted: a shareable VMM handle names an import the state has not');
}
