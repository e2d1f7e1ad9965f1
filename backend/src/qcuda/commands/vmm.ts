// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, ...): each call checked against the session's VMM table
// (vmm.ts) and recorded there before the provider runs it, so that
// concurrent calls of the process's threads see each other; undone if the
// provider fails. Physical memory is taken from the VM's quota like MALLOC's.
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { encode, QCUDA_VMM_ACCESS_RW } from '../proto';
import type { ProviderContext } from '../provider';
import type { Session } from '../session/session';
import { checkSpan, GRANULARITY, MAX_VMM_ALIGNMENT, type VmmFreed } from '../vmm/vmm';
import type { VmmShareBook } from '../vmm/vmm-share';

/**
 * Frees allocations a release or an unmap left unused, then gives their
 * bytes back to the quota (not after a reset meanwhile: it gave them back).
 * An exported one's token goes first, and its importers lose it; an
 * imported one is the owner's memory: only this session's hold of it goes.
 */
async function freeUnused(s: Session, x: ProviderContext, freed: readonly VmmFreed[]): Promise<void> {
  const bytes = s.heldBytes(freed.reduce((n, f) => (f.token ? n : n + f.size), 0n));
  try {
    // Importers lose an exported allocation before its owner's free is answered (forget waits for them, bounded).
    for (const f of freed) await (f.token ? s.vm.vmmShares.unimported(s, f.token, f.handle) : s.vm.vmmShares.forget(s, f.handle));
    for (const f of freed) await release(s, x, f);
  } finally {
    s.unreserve(bytes);
  }
}

/**
 * Releases f in x. An import whose release fails stays in the process (a
 * context with a sticky fault keeps it until it exits), out of its owner's
 * count once the owner frees it: the process ends, as the owner's free
 * would end it (vmm-share.ts letGo). Not after a reset meanwhile: x is gone.
 */
async function release(s: Session, x: ProviderContext, f: VmmFreed): Promise<void> {
  try {
    await x.vmmRelease(f.ref);
  } catch (e) {
    if (f.token && s.deviceOfContext(x) !== undefined)
      await s.endProcess(`its release of imported memory failed (${(e as Error).message})`);
    throw e;
  }
}

/**
 * The VM's shareable handles (its table, or the backend's asked from a
 * queue owner's worker: vmm-remote.ts); NotSupported where the provider
 * cannot share memory between processes.
 */
function sharing(c: Call): VmmShareBook<Session> {
  const shares = c.session.vm.vmmShares;
  const p = c.dev.provider;
  if (!shares.servedBy(p))
    throw new CudaError(CudaErr.NotSupported, `shareable memory handles: the ${p.name} provider cannot share memory between processes`);
  return shares;
}

function noFlags(flags: bigint, what: string): void {
  if (flags !== 0n) throw new CudaError(CudaErr.InvalidValue, `${what}: flags 0x${flags.toString(16)} (CUDA takes 0)`);
}

export const RUNS: Runs<
  | 'VMM_RESERVE'
  | 'VMM_FREE'
  | 'VMM_CREATE'
  | 'VMM_RELEASE'
  | 'VMM_MAP'
  | 'VMM_UNMAP'
  | 'VMM_SET_ACCESS'
  | 'VMM_GET_ACCESS'
  | 'VMM_RETAIN'
  | 'VMM_SIZE'
  | 'VMM_EXPORT'
  | 'VMM_IMPORT'
> = {
  async VMM_RESERVE(c) {
    const { size, alignment, addr, flags } = c.args;
    noFlags(flags, 'cuMemAddressReserve');
    checkSpan(0n, size, 'cuMemAddressReserve');
    if (alignment !== 0n && ((alignment & (alignment - 1n)) !== 0n || alignment > MAX_VMM_ALIGNMENT))
      throw new CudaError(
        CudaErr.InvalidValue,
        `cuMemAddressReserve: alignment ${alignment} is not a power of two up to ${MAX_VMM_ALIGNMENT}`,
      );
    const s = c.session;
    s.checkRoom('vmm');
    const space = s.vmm.takeAddressSpace(size);
    try {
      const x = await s.context();
      const hint = addr % GRANULARITY === 0n ? addr : 0n;
      const base = await x.vmmReserve(size, alignment < GRANULARITY ? GRANULARITY : alignment, hint);
      s.live(x);
      s.vmm.addReservation(base, size);
      return { value: base };
    } catch (e) {
      s.vmm.giveAddressSpace(space);
      throw e;
    }
  },

  async VMM_FREE(c) {
    const { ptr, size } = c.args;
    const s = c.session;
    const space = s.vmm.takeReservation(ptr, size);
    try {
      await (await s.context()).vmmFree(ptr, size);
    } finally {
      s.vmm.giveAddressSpace(space);
    }
  },

  async VMM_CREATE(c) {
    const { size, flags } = c.args;
    noFlags(flags, 'cuMemCreate');
    checkSpan(0n, size, 'cuMemCreate');
    const s = c.session;
    s.checkRoom('vmm');
    const r = s.reserve(size); // before the first await: concurrent creations cannot all pass the quota
    try {
      const x = await s.context();
      const ref = await x.vmmCreate(size);
      return { value: s.addVmmAlloc(x, ref, size) };
    } catch (e) {
      s.unreserve(r);
      throw e;
    }
  },

  async VMM_RELEASE(c) {
    const s = c.session;
    const freed = s.vmm.release(c.args.handle);
    if (freed) await freeUnused(s, await s.context(), [freed]);
  },

  async VMM_MAP(c) {
    const { ptr, size, offset, handle, flags } = c.args;
    noFlags(flags, 'cuMemMap');
    const s = c.session;
    s.checkRoom('vmm');
    const a = s.vmm.addMapping(ptr, size, offset, handle);
    try {
      const x = await s.context();
      await x.vmmMap(ptr, size, a.ref);
      s.live(x);
    } catch (e) {
      const freed = s.vmm.dropMapping(ptr, handle);
      const x = s.openedContext;
      if (freed && x) await freeUnused(s, x, [freed]).catch(() => undefined); // the map's failure is what the guest hears of
      throw e;
    }
  },

  async VMM_UNMAP(c) {
    const { ptr, size } = c.args;
    const s = c.session;
    const list = s.vmm.tiling(ptr, size, 'cuMemUnmap');
    const freed = s.vmm.removeMappings(list); // no copy may use them from now on
    const x = await s.context();
    for (const m of list) await x.vmmUnmap(m.base, m.size);
    // Not after a failed unmap: memory the GPU may still map stays counted, until the context goes.
    if (freed.length > 0) await freeUnused(s, x, freed);
  },

  async VMM_SET_ACCESS(c) {
    const { ptr, size, device, prot } = c.args;
    const s = c.session;
    if (device !== s.device)
      throw new CudaError(CudaErr.InvalidDevice, `cuMemSetAccess for device ${device}: the process has device ${s.device} only`);
    if (prot !== QCUDA_VMM_ACCESS_RW) throw new CudaError(CudaErr.InvalidValue, `cuMemSetAccess: access flags ${prot} (read-write only)`);
    const list = s.vmm.tiling(ptr, size, 'cuMemSetAccess');
    const x = await s.context();
    for (const m of list) await x.vmmSetAccess(m.base, m.size);
    s.live(x);
    s.vmm.grantAccess(list);
  },

  VMM_GET_ACCESS(c: Call<'VMM_GET_ACCESS'>) {
    return { value: BigInt(c.session.vmm.mappingAt(c.args.ptr).access) };
  },

  VMM_RETAIN(c) {
    return { value: c.session.vmm.retain(c.args.ptr) };
  },

  VMM_SIZE(c) {
    return { value: c.session.vmm.alloc(c.args.handle).size };
  },

  async VMM_EXPORT(c) {
    const shares = sharing(c);
    const s = c.session;
    const a = s.vmm.alloc(c.args.handle);
    if (a.token)
      throw new CudaError(CudaErr.NotSupported, 'cuMemExportToShareableHandle of an imported allocation: export it from its owner');
    const token = await shares.mint(s, c.args.handle, a.ref, a.size, s.device);
    return { out: encode('qcuda_ipc_handle', { token: Buffer.from(token, 'hex'), size: a.size, reserved: new Uint8Array(40) }) };
  },

  async VMM_IMPORT(c) {
    const shares = sharing(c);
    const s = c.session;
    s.checkRoom('vmm');
    const x = await s.context();
    const e = await shares.import(s, c.args.token, c.args.size, x);
    const h = s.addVmmAlloc(x, e.ref, e.size, e.token);
    if (!(await shares.imported(s, e.token, h))) {
      // Its owner freed it meanwhile: this import names nothing.
      await s.dropVmmImport(h);
      throw new CudaError(CudaErr.InvalidValue, 'cuMemImportFromShareableHandle: its memory was freed meanwhile');
    }
    return { value: h };
  },
};
