// What a session writes of itself (its tables, by the handles and
// addresses its guest process knows) and how a fresh session is made of
// it again on the destination: every object through the same calls that
// made it at the source, each given its old handle (HandleCounter.reuse),
// its memory at its old address. A failure closes the half-made session,
// which gives back everything it took.
import { CudaError } from '../cuda-error';
import type { EventRef, GuestAddresses, HostPiece, Provider } from '../provider';
import { Session, type VmShared } from '../session/session';
import { GRANULARITY } from '../vmm/vmm';
import { StateError } from './format';
import {
  allocBytes,
  arrayBase,
  arrayBytes,
  eventImage,
  execImage,
  graphConds,
  holds,
  hostContext,
  restoreAlloc,
  restoreArray,
  restoreContext,
  restoreEvent,
  restoreExec,
  restoreGraph,
  restoreObject,
  restoreStream,
  restoreVmm,
  saveContext,
  streamImage,
  vmmBytes,
} from './emu-context';
import type { EmuContext } from '../providers/emu';
import type { SessionImage } from './image';

/** What cannot be carried of s: a reason, or undefined. The session is not changed. */
function notCarried(s: Session): string | undefined {
  if (s.ownWorker || s.endSelf) return 'a session served on its own queue by a worker';
  if (!s.callbacks.quiet) return 'a host function (cudaLaunchHostFunc) that has not run yet';
  if (s.output.pending) return 'device output the guest has not read yet';
  if (s.modules.moduleCount > 0) return 'loaded modules';
  if (s.modules.pendingUploads > 0 || s.modules.linkResults > 0) return 'a module upload or link result in progress';
  return undefined;
}

/** Work in flight is done (as cudaCtxSynchronize on each of its contexts), then what cannot be carried is named. */
export async function drain(s: Session): Promise<void> {
  await Promise.allSettled([...s.launchJobs]);
  for (const c of s.tables().contexts) {
    const x = await c.ctx.catch(() => undefined);
    await x?.synchronize();
  }
  const why = notCarried(s);
  if (why) throw new StateError(`session ${s.id.toString(16)}: not yet carried: ${why}`);
}

/** The session's image and its blobs (views of its memory, in the image's order). */
export async function saveSession(s: Session, where: GuestAddresses): Promise<{ image: SessionImage; blobs: Uint8Array[][] }> {
  const t = s.tables();
  const ctx = new Map<number, EmuContext>();
  for (const c of t.contexts) {
    if (!c.opened) throw new StateError(`session ${s.id.toString(16)}: not yet carried: a context that failed to open`);
    ctx.set(c.device, hostContext(c.opened));
  }
  const on = (device: number): EmuContext => ctx.get(device)!;
  const holder = (what: Parameters<typeof holds>[1], ref: unknown): [number, EmuContext] => {
    const found = [...ctx].filter(([, x]) => holds(x, what, ref));
    if (found.length !== 1) throw new StateError(`session ${s.id.toString(16)}: not yet carried: a ${what} of no one context`);
    return found[0];
  };
  const blobs: Uint8Array[][] = [];
  const mem = s.memory.snapshot();
  const allocs = mem.allocs.map((a) => {
    blobs.push(allocBytes(on(a.device), a.base, a.size));
    return { base: a.base, size: a.size, device: a.device };
  });
  const hostMaps = mem.hostMaps.map((m) => {
    const found = [...ctx].map(([d, x]) => [d, x.mappings.piecesAt(m.base)] as const).find(([, p]) => p);
    if (!found) throw new StateError(`session ${s.id.toString(16)}: mapped host memory 0x${m.base.toString(16)} of no context`);
    return { base: m.base, device: found[0], pieces: found[1]!.map((p) => ({ gpa: where.gpaOf(p.addr, p.size), size: p.size })) };
  });
  const v = s.vmm.snapshot();
  const vmm = {
    ranges: v.ranges.map((r) => {
      const d = [...ctx].find(([, x]) => x.memory.vmmReserved(r.base, r.size, x));
      if (!d) throw new StateError(`session ${s.id.toString(16)}: a VMM reservation of no context`);
      return { base: r.base, size: r.size, device: d[0] };
    }),
    allocs: v.allocs.map(([h, a]) => {
      const [device, x] = holder('vmm', a.ref);
      // Imported memory is its owner's: the share (vmm-share-state.ts) brings it.
      if (a.token === undefined) blobs.push([vmmBytes(x, a.ref)]);
      return { h, size: a.size, held: a.held, device, token: a.token ?? null };
    }),
    maps: v.maps.map((m) => ({ base: m.base, size: m.size, h: m.handle, access: m.access })),
  };
  const o = s.objects.snapshot();
  const arrays = o.arrays
    .filter(([, a]) => a.levelOf === undefined)
    .map(([h, a]) => {
      const [device, x] = holder('array', a.ref);
      const bytes = arrayBytes(x, a.ref);
      blobs.push([bytes]);
      return { h, device, base: arrayBase(x, a.ref), desc: a.desc, elemSize: a.elemSize, bytes: a.bytes, len: BigInt(bytes.length) };
    });
  const levelOf = new Map(o.arrays.filter(([, a]) => a.levelOf !== undefined).map(([h, a]) => [h, a]));
  const mipmaps = o.mipmaps.map(([h, m]) => {
    const [device, x] = holder('mipmap', m.ref);
    const levels = Array.from({ length: m.levels }, (_, l) => {
      const ref = x.parts.arrays.mipmapLevel(m.ref, l);
      const bytes = arrayBytes(x, ref);
      blobs.push([bytes]);
      return { base: arrayBase(x, ref), len: BigInt(bytes.length) };
    });
    const levelHandles = [...m.levelHandles].map(([level, lh]) => ({ level, h: lh, desc: levelOf.get(lh)!.desc }));
    return { h, device, desc: m.desc, elemSize: m.elemSize, bytes: m.bytes, levels, levelHandles };
  });
  const objectsOf = [...ctx].map(([d, x]) => [d, new Map(x.parts.arrays.objects())] as const);
  const object = (v: bigint, kind: 'texture' | 'surface') => {
    const found = objectsOf.filter(([, m]) => m.get(v) === kind);
    if (found.length !== 1) throw new StateError(`session ${s.id.toString(16)}: not yet carried: a ${kind} object of no one context`);
    return { v, device: found[0][0] };
  };
  const eventOf = new Map<EventRef, bigint>(t.events.map((e) => [e.ref, e.h]));
  const image: SessionImage = {
    id: s.id,
    device: s.device,
    calls: s.calls,
    next: t.next,
    allocated: s.allocated,
    l2SetAside: s.l2SetAside,
    peers: [...s.peers],
    asyncError: t.asyncError,
    contexts: await Promise.all([...ctx].map(([d, x]) => saveContext(x, d))),
    streams: t.streams.map((x) => ({ h: x.h, device: x.device, ...streamImage(x.ref) })),
    events: t.events.map((x) => ({ h: x.h, device: x.device, ...eventImage(x.ref) })),
    limitCharges: t.limitCharges,
    limitBases: t.limitBases,
    local: t.local,
    allocs,
    imports: mem.imports.map((a) => ({ base: a.base, size: a.size, device: a.device })),
    droppedImports: [...s.droppedImports],
    hostMaps,
    vmm,
    arrays,
    mipmaps,
    textures: o.textures.map((v) => object(v, 'texture')),
    surfaces: o.surfaces.map((v) => object(v, 'surface')),
    graphs: o.graphs.map(([h, g]) => {
      const [device, x] = holder('graph', g.ref);
      return { h, device, conds: graphConds(x, g.ref) };
    }),
    execs: o.execs.map(([h, e]) => {
      const [device, x] = holder('exec', e);
      return { h, device, ...execImage(x, e, (ev) => eventOf.get(ev)) };
    }),
  };
  return { image, blobs };
}

/** A VMM mapping of the session's memory h made again, with its access. */
export async function restoreMapping(
  s: Session,
  x: EmuContext,
  m: { base: bigint; size: bigint; h: bigint; access: number },
): Promise<void> {
  const a = s.vmm.addMapping(m.base, m.size, 0n, m.h);
  await x.vmmMap(m.base, m.size, a.ref);
  if (m.access !== 0) s.vmm.grantAccess([s.vmm.mappingAt(m.base)]);
}

/** What restoreSession needs of the device. */
export interface Destination {
  provider: Provider;
  vm: VmShared;
  log: (line: string) => void;
  where: GuestAddresses;
}

/**
 * A session made again of its image, its blobs taken in order: the
 * session, or a throw with every part of it given back.
 */
export async function restoreSession(d: Destination, img: SessionImage, blobs: () => Uint8Array): Promise<Session> {
  const s = new Session(d.provider, d.vm, img.device, { id: img.id, log: d.log });
  try {
    await fill(s, d, img, blobs);
  } catch (e) {
    await s.close();
    if (e instanceof CudaError) throw new StateError(`session ${img.id.toString(16)}: ${e.message}`);
    throw e;
  }
  return s;
}

async function fill(s: Session, d: Destination, img: SessionImage, blob: () => Uint8Array): Promise<void> {
  const id = img.id.toString(16);
  const counter = s.handleCounter;
  counter.resume(img.next);
  const used = new Set<bigint>();
  /** Makes the next handle given h, once per session. */
  const again = (h: bigint): bigint => {
    if (used.has(h) || h >= img.next || h < 0x100n)
      throw new StateError(`corrupted: session ${id}: handle 0x${h.toString(16)} twice or out of range`);
    used.add(h);
    counter.reuse(h);
    return h;
  };
  const same = (h: bigint, got: bigint): void => {
    if (got !== h) throw new StateError(`session ${id}: handle 0x${h.toString(16)} came back as 0x${got.toString(16)}`);
  };
  const ctx = new Map<number, EmuContext>();
  for (const c of img.contexts) {
    if (ctx.has(c.device)) throw new StateError(`corrupted: session ${id}: two contexts on device ${c.device}`);
    const x = hostContext(await s.context(c.device));
    await restoreContext(x, c);
    ctx.set(c.device, x);
  }
  const on = (device: number): EmuContext => {
    const x = ctx.get(device);
    if (!x) throw new StateError(`corrupted: session ${id}: an object of device ${device}, where it has no context`);
    return x;
  };
  for (const st of img.streams) {
    const x = on(st.device);
    const ref = await restoreStream(x, st.priority, st.attrs);
    again(st.h);
    same(st.h, s.addStream(x, ref));
  }
  const events = new Map<bigint, EventRef>();
  for (const e of img.events) {
    const x = on(e.device);
    const ref = await restoreEvent(x, e.flags, e.at);
    again(e.h);
    same(e.h, s.addEvent(x, ref));
    events.set(e.h, ref);
  }
  for (const a of img.allocs) {
    const x = on(a.device);
    const r = s.reserve(a.size);
    restoreAlloc(x, a.base, blob());
    s.memory.addAlloc(x, a.base, r, a.device);
  }
  for (const m of img.hostMaps) {
    const x = on(m.device);
    const pieces: HostPiece[] = m.pieces.map((p) => ({ addr: d.where.hostOf(p.gpa, p.size), size: p.size }));
    const ticket = s.memory.takeHostMap(pieces, d.where.guestRam());
    try {
      x.mappings.mapAt(m.base, pieces);
    } catch (e) {
      s.memory.dropHostMap(ticket);
      throw e;
    }
    s.memory.addHostMap(x, m.base, ticket.bytes, ticket);
  }
  for (const r of img.vmm.ranges) {
    const x = on(r.device);
    s.vmm.takeAddressSpace(r.size);
    const got = await x.vmmReserve(r.size, GRANULARITY, r.base);
    if (got !== r.base) {
      await x.vmmFree(got, r.size);
      throw new StateError(`session ${id}: the VMM address range 0x${r.base.toString(16)}+${r.size} is taken on the destination`);
    }
    s.vmm.addReservation(r.base, r.size);
  }
  const vmmHeld = new Map<bigint, number>();
  const vmmDevice = new Map<bigint, number>();
  for (const a of img.vmm.allocs) {
    if (a.token !== null) {
      on(a.device);
      used.add(a.h); // imported once every session is back (vmm-share-state.ts)
      continue;
    }
    const x = on(a.device);
    s.reserve(a.size);
    const ref = restoreVmm(x, blob());
    again(a.h);
    same(a.h, s.addVmmAlloc(x, ref, a.size));
    vmmHeld.set(a.h, a.held);
    vmmDevice.set(a.h, a.device);
  }
  const imported = new Set(img.vmm.allocs.filter((a) => a.token !== null).map((a) => a.h));
  for (const m of img.vmm.maps) {
    if (imported.has(m.h)) continue; // mapped with its import (vmm-share-state.ts)
    if (!vmmDevice.has(m.h))
      throw new StateError(`corrupted: session ${id}: a mapping of VMM memory 0x${m.h.toString(16)}, which it has not`);
    await restoreMapping(s, on(vmmDevice.get(m.h)!), m);
  }
  for (const [h, held] of vmmHeld) {
    const a = s.vmm.existing(h)!;
    if (held === 0 && a.maps === 0)
      throw new StateError(`corrupted: session ${id}: VMM memory 0x${h.toString(16)} neither held nor mapped`);
    a.held = held;
  }
  for (const a of img.arrays) {
    const x = on(a.device);
    const r = s.reserve(a.bytes);
    const ref = restoreArray(x, a.desc, a.base, blob());
    again(a.h);
    same(a.h, s.objects.addArray(x, ref, a.desc, a.elemSize, r));
  }
  for (const m of img.mipmaps) {
    const x = on(m.device);
    const r = s.reserve(m.bytes);
    const ref = x.parts.arrays.adoptMipmap(
      m.desc,
      m.levels.map((l) => ({ base: l.base, bytes: blob() })),
    );
    again(m.h);
    same(m.h, s.objects.addMipmap(x, ref, m.desc, m.levels.length, m.elemSize, r));
    for (const l of m.levelHandles) {
      if (l.level >= m.levels.length) throw new StateError(`corrupted: session ${id}: level ${l.level} of ${m.levels.length}`);
      again(l.h);
      same(l.h, s.objects.addLevel(x, m.h, l.level, x.parts.arrays.mipmapLevel(ref, l.level), l.desc));
    }
  }
  for (const [list, kind] of [
    [img.textures, 'texture'],
    [img.surfaces, 'surface'],
  ] as const)
    for (const { v, device } of list) {
      const x = on(device);
      restoreObject(x, v, kind);
      s.objects.addObject(x, kind, v);
    }
  for (const g of img.graphs) {
    const x = on(g.device);
    const ref = restoreGraph(x, g.conds);
    again(g.h);
    same(g.h, s.objects.addGraph(x, ref as never));
    for (const c of g.conds) s.objects.graph(g.h).conds.add(c.h);
  }
  for (const e of img.execs) {
    const x = on(e.device);
    const ref = restoreExec(x, e, (h) => {
      const ev = events.get(h);
      if (!ev) throw new StateError(`corrupted: session ${id}: a graph node of event 0x${h.toString(16)}, which it has not`);
      return ev;
    });
    again(e.h);
    same(e.h, s.objects.addGraphExec(x, ref as never));
  }
  for (const p of img.droppedImports) s.droppedImports.add(p);
  s.restoreTables(img);
  s.l2SetAside = img.l2SetAside;
  for (const p of img.peers) s.peers.add(p);
  s.calls = img.calls;
  if (s.allocated !== img.allocated)
    throw new StateError(`session ${id}: restored, it holds ${s.allocated} bytes of the quota; at its source it held ${img.allocated}`);
}
