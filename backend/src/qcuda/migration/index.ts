// A qcuda device's state saved and restored (issue 47, VhostUserDevice's
// saveState and loadState): every session of the VM with what it holds,
// its handles and device addresses unchanged. The save drains each
// session's work and refuses, changing nothing, what it cannot carry; the
// load checks the whole description against the destination before it
// makes anything, reads every byte and the hash before it installs
// anything, and gives back whatever it made if any step fails.
import type { StateSink, StateSource } from '../../vhost-user';
import type { GuestAddresses, Provider } from '../provider';
import type { StateCarrier } from '../virtio-device';
import type { Session, VmShared } from '../session/session';
import { checkImage } from './checks';
import { StateError, StateReader, StateWriter } from './format';
import type { DeviceImage } from './image';
import { restoreIpc, saveIpc } from './ipc-state';
import { restoreShares, saveShares } from './vmm-share-state';
import { drain, restoreSession, saveSession } from './session-state';

export { StateError } from './format';

/** What saving and restoring needs of the device (QcudaDevice). */
export interface Migratable {
  readonly provider: Provider;
  readonly vm: VmShared;
  readonly sessions: Map<bigint, Session>;
  readonly where: GuestAddresses;
  readonly log: { log(line: string): void };
}

/** The providers whose state is carried. */
function carried(p: Provider): void {
  if (p.name !== 'emu') throw new StateError(`not yet carried: the ${p.name} provider (its sessions' CUDA state lives in its workers)`);
}

export async function saveDeviceState(dev: Migratable, sink: StateSink): Promise<void> {
  carried(dev.provider);
  const sessions = [...dev.sessions.values()];
  for (const s of sessions) await drain(s);
  const saved = [];
  for (const s of sessions) saved.push(await saveSession(s, dev.where));
  const image: DeviceImage = {
    provider: dev.provider.name,
    sessions: saved.map((x) => x.image),
    ipc: saveIpc(dev.vm),
    vmmShares: saveShares(dev.vm),
  };
  const w = new StateWriter(sink);
  await w.header(image);
  for (const x of saved) for (const b of x.blobs) await w.blob(b);
  await w.end();
}

export async function loadDeviceState(dev: Migratable, src: StateSource): Promise<void> {
  carried(dev.provider);
  if (dev.sessions.size > 0) throw new StateError(`the destination has ${dev.sessions.size} sessions open already`);
  const r = new StateReader(src);
  const p = dev.provider as Provider & { totalMem?: bigint };
  const left = dev.vm.quota.left;
  const image = checkImage(await r.header(), dev.provider.name, {
    limits: dev.vm.limits,
    devices: dev.provider.deviceCount(),
    totalMem: p.totalMem ?? p.deviceProps(0).totalMem,
    quotaLeft: left,
  });
  // Every blob is read and the hash checked before anything is made of them.
  const blobs: Uint8Array[] = [];
  for (const s of image.sessions) {
    const id = s.id.toString(16);
    for (const a of s.allocs) blobs.push(await r.blob(a.size, `session ${id}'s allocation 0x${a.base.toString(16)}`));
    for (const a of s.vmm.allocs.filter((x) => x.token === null))
      blobs.push(await r.blob(a.size, `session ${id}'s VMM memory 0x${a.h.toString(16)}`));
    for (const a of s.arrays) blobs.push(await r.blob(a.len, `session ${id}'s array 0x${a.h.toString(16)}`));
    for (const m of s.mipmaps)
      for (const [i, l] of m.levels.entries())
        blobs.push(await r.blob(l.len, `level ${i} of session ${id}'s mipmapped array 0x${m.h.toString(16)}`));
  }
  await r.end();
  let next = 0;
  const take = (): Uint8Array => blobs[next++];
  const made: Session[] = [];
  try {
    for (const s of image.sessions)
      made.push(await restoreSession({ provider: dev.provider, vm: dev.vm, log: (l) => dev.log.log(l), where: dev.where }, s, take));
    const byId = new Map(made.map((s, i) => [s.id, [s, image.sessions[i]] as const]));
    restoreIpc(dev.vm, image.ipc, byId);
    await restoreShares(dev.vm, image.vmmShares, byId);
  } catch (e) {
    await Promise.allSettled(made.map((s) => s.close()));
    throw e;
  }
  for (const s of made) dev.sessions.set(s.id, s);
}

/** The emu provider's carrier of a device's sessions (QcudaOptions.state; devices/index.ts gives it). */
export const emuState: StateCarrier = { save: saveDeviceState, load: loadDeviceState };
