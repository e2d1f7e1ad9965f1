// IPC between the processes of one VM: a process gets a handle of one of
// its allocations (IPC_GET), another opens it (IPC_OPEN) and may copy to
// and from that memory until it closes it (IPC_CLOSE) or the owner frees
// it. The memory stays the owner's: counted in its quota, freed only by it.
import type { Call, Runs } from '../command';
import type { DevPtr } from '../provider';
import { CudaErr, CudaError } from '../cuda-error';
import { encode } from '../proto';

function provider(c: Call) {
  const p = c.dev.provider;
  if (!p.ipcOpen)
    throw new CudaError(CudaErr.NotSupported, `IPC memory handles: the ${p.name} provider cannot share memory between processes`);
  return { ipcOpen: p.ipcOpen.bind(p), ipcClose: p.ipcClose?.bind(p), ipcExport: p.ipcExport?.bind(p) };
}

/** The guest's handle: the token and size, nothing of what the provider keeps. */
function handleOut(token: string, size: bigint) {
  return { out: encode('qcuda_ipc_handle', { token: Buffer.from(token, 'hex'), size, reserved: new Uint8Array(40) }) };
}

const MEMORY_HANDLES: Runs<'IPC_GET' | 'IPC_OPEN' | 'IPC_CLOSE'> = {
  async IPC_GET(c) {
    const { ptr } = c.args;
    const p = provider(c);
    const book = c.session.vm.ipc;
    const a = c.session.memory.allocAt(ptr);
    if (!a)
      throw new CudaError(CudaErr.InvalidValue, `IPC handle of 0x${ptr.toString(16)}: not the start of an allocation of this process`);
    const old = book.minted(c.session, ptr);
    if (old) return handleOut(old, a.size);
    // CUDA's handle, from the owner's worker (cuIpcGetMemHandle), kept in the VM's table.
    const exported = p.ipcExport ? await p.ipcExport(await c.session.context(a.device), ptr) : undefined;
    const now = c.session.memory.allocAt(ptr);
    if (now?.size !== a.size || now.device !== a.device)
      throw new CudaError(CudaErr.InvalidValue, `IPC handle of 0x${ptr.toString(16)}: freed meanwhile`);
    return handleOut(await book.mint(c.session, ptr, a.size, a.device, exported), a.size);
  },

  async IPC_OPEN(c) {
    const { token } = c.args;
    const book = c.session.vm.ipc;
    const e = await book.claim(c.session, token, c.args.size);
    // Opened in the opener's current device's context, as CUDA opens it in the
    // current context: another GPU's memory (NCCL's P2P) is reached there with peer access.
    const device = c.session.device;
    let at: DevPtr;
    try {
      const p = provider(c);
      const [owner, opener] = await Promise.all([e.owner?.context(e.device), c.session.context(device)]);
      at = await p.ipcOpen(owner, e.ptr, opener, e.exported);
    } catch (err) {
      await book.settle(c.session, token, undefined);
      throw err;
    }
    // Known before the table has it as opened: a close sent to the opener after that finds it.
    c.session.memory.addImport(at, e.size, device);
    c.session.droppedImports.delete(at); // the address is open again: its next close is this one's
    if (!(await book.settle(c.session, token, at))) {
      // Closed here, not by the owner's free (which no longer waits for it): one that fails ends the process, as there.
      await c.session
        .closeImport(at)
        .catch((e: Error) => c.session.endProcess(`its close of IPC memory freed meanwhile failed (${e.message})`));
      throw new CudaError(CudaErr.InvalidResourceHandle, 'IPC handle: its memory was freed meanwhile');
    }
    return { value: at };
  },

  async IPC_CLOSE(c) {
    const { ptr } = c.args;
    if (!(await c.session.vm.ipc.close(c.session, ptr))) {
      // Its owner freed it first: gone already, and closing it succeeds, as with CUDA.
      if (c.session.droppedImports.delete(ptr)) return;
      throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not memory this process opened by IPC`);
    }
    try {
      await c.session.closeImport(ptr);
    } catch (e) {
      // The memory stays mapped in the process (a context with a sticky fault fails the close and keeps it until
      // it exits), out of the owner's count once it frees it: the process ends here, as its owner's free would end it.
      await c.session.endProcess(`its close of IPC memory failed (${(e as Error).message})`);
      throw e;
    }
  },
};

function eventProvider(c: Call) {
  const p = c.dev.provider;
  if (!p.ipcEventOpen)
    throw new CudaError(CudaErr.NotSupported, `IPC event handles: the ${p.name} provider cannot share events between processes`);
  return { ipcEventOpen: p.ipcEventOpen.bind(p), ipcEventExport: p.ipcEventExport?.bind(p) };
}

// Event handles (cudaIpcGetEventHandle): the same token scheme, by the
// owner's event handle, size 0. An opened event is the opener's own (its
// destroy, its reset); the owner's destroy, reset or exit forgets the token.
const EVENT_HANDLES: Runs<'IPC_EVENT_GET' | 'IPC_EVENT_OPEN'> = {
  async IPC_EVENT_GET(c) {
    const { handle } = c.args;
    const p = eventProvider(c);
    const book = c.session.vm.ipcEvents;
    const ev = c.session.event(handle);
    const old = book.minted(c.session, handle);
    if (old) return handleOut(old, 0n);
    const device = c.session.device;
    // The provider refuses an event not made interprocess with timing disabled (InvalidValue, as CUDA).
    const exported = p.ipcEventExport ? await p.ipcEventExport(await c.session.context(device), ev) : undefined;
    if (c.session.event(handle) !== ev) throw new CudaError(CudaErr.InvalidResourceHandle, 'IPC event handle: destroyed meanwhile');
    return handleOut(await book.mint(c.session, handle, 0n, device, exported), 0n);
  },

  async IPC_EVENT_OPEN(c) {
    const e = await c.session.vm.ipcEvents.claim(c.session, c.args.token, c.args.size);
    const p = eventProvider(c);
    const [owner, opener] = await Promise.all([e.owner?.context(e.device), c.session.context(e.device)]);
    const ref = await p.ipcEventOpen(owner, e.owner?.event(e.ptr), opener, e.exported);
    return { value: c.session.addEvent(opener, ref) };
  },
};

export const RUNS = { ...MEMORY_HANDLES, ...EVENT_HANDLES };
