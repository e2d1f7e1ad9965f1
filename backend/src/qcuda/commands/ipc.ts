// IPC between the processes of one VM: a process gets a handle of one of
// its allocations (IPC_GET), another opens it (IPC_OPEN) and may copy to
// and from that memory until it closes it (IPC_CLOSE) or the owner frees
// it. The memory stays the owner's: counted in its quota, freed only by it.
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { encode } from '../proto';

function provider(c: Call) {
  const p = c.dev.provider;
  if (!p.ipcOpen)
    throw new CudaError(CudaErr.NotSupported, `IPC memory handles: the ${p.name} provider cannot share memory between processes`);
  return { ipcOpen: p.ipcOpen.bind(p), ipcClose: p.ipcClose?.bind(p) };
}

export const IPC_COMMANDS: Runs<'IPC_GET' | 'IPC_OPEN' | 'IPC_CLOSE'> = {
  async IPC_GET(c) {
    const { ptr } = c.args;
    provider(c);
    const a = c.session.memory.allocAt(ptr);
    if (!a)
      throw new CudaError(CudaErr.InvalidValue, `IPC handle of 0x${ptr.toString(16)}: not the start of an allocation of this process`);
    const e = c.session.vm.ipc.mint(c.session, ptr, a.size, a.device);
    return { out: encode('qcuda_ipc_handle', { token: Buffer.from(e.token, 'hex'), size: e.size, reserved: new Uint8Array(40) }) };
  },

  async IPC_OPEN(c) {
    const table = c.session.vm.ipc;
    const e = table.find(c.args.token);
    if (!e || e.size !== c.args.size)
      throw new CudaError(CudaErr.InvalidResourceHandle, 'IPC handle: not one of this VM, or its memory was freed');
    if (e.owner === c.session) throw new CudaError(CudaErr.DeviceUninitialized, 'IPC handle opened in the process that made it');
    if (e.openers.has(c.session)) throw new CudaError(CudaErr.InvalidValue, 'IPC handle: opened already in this process');
    const p = provider(c);
    e.openers.set(c.session, 0n); // before the awaits: a second open meanwhile is refused
    try {
      const [owner, opener] = await Promise.all([e.owner.context(e.device), c.session.context(e.device)]);
      const ptr = await p.ipcOpen(owner, e.ptr, opener);
      if (table.find(c.args.token) !== e || !e.openers.has(c.session)) {
        await p.ipcClose?.(opener, ptr);
        throw new CudaError(CudaErr.InvalidResourceHandle, 'IPC handle: its memory was freed meanwhile');
      }
      c.session.memory.addImport(ptr, e.size, e.device);
      e.openers.set(c.session, ptr);
      return { value: ptr };
    } catch (err) {
      e.openers.delete(c.session);
      throw err;
    }
  },

  async IPC_CLOSE(c) {
    const { ptr } = c.args;
    const e = c.session.vm.ipc.openedBy(c.session, ptr);
    if (!e) throw new CudaError(CudaErr.InvalidValue, `0x${ptr.toString(16)} is not memory this process opened by IPC`);
    e.openers.delete(c.session);
    await c.session.closeImport(ptr);
  },
};
