// Commands of the device as a whole: version handshake, properties, the
// current device, synchronize and reset, and the context's limits.
import {
  ATTR_MAX_PERSISTING_L2,
  checkLimit,
  checkLimitSet,
  isL2SetAside,
  Limit,
  limitBytes,
  limitReservesMemory,
  UNSERVED_ATTRS,
  ATTR_POSIX_FD_HANDLES,
  ATTR_MEMPOOL_HANDLE_TYPES,
  ATTR_IPC_EVENTS,
  MEM_HANDLE_TYPE_POSIX_FD,
} from '../attrs';
import type { Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { neutralPci, vmUuid } from '../gpu-identity';
import { encode, QCUDA_CAP_GPU, QCUDA_NUM_ATTRS, QCUDA_PROTO_VERSION, Status } from '../proto';

export const RUNS: Runs<'HELLO' | 'DEVICE_PROPS' | 'SET_DEVICE' | 'DEVICE_SYNC' | 'DEVICE_RESET' | 'LIMIT_SET' | 'LIMIT_GET'> = {
  async HELLO(c) {
    if (c.args.proto_version !== QCUDA_PROTO_VERSION) return { status: Status.VERSION, value: BigInt(QCUDA_PROTO_VERSION) };
    const p = c.dev.provider;
    return {
      out: encode('qcuda_out_hello', {
        proto_version: QCUDA_PROTO_VERSION,
        driver_version: p.driverVersion(),
        device_count: p.deviceCount(),
        capabilities: p.hasGpu ? QCUDA_CAP_GPU : 0n,
        memory_limit: c.session.vm.quota.limit,
      }),
    };
  },

  async DEVICE_PROPS(c) {
    const { device } = c.args;
    if (device >= c.dev.provider.deviceCount()) throw new CudaError(CudaErr.InvalidDevice, `device ${device}`);
    const p = c.dev.provider.deviceProps(device);
    const limit = c.session.vm.quota.limit;
    const attrs = new Uint32Array(QCUDA_NUM_ATTRS);
    attrs.set(new Uint32Array(p.attrs.buffer, p.attrs.byteOffset, Math.min(p.attrs.length, QCUDA_NUM_ATTRS)));
    for (const a of UNSERVED_ATTRS) attrs[a] = 0;
    // cuMemExportToShareableHandle's tokens (vmm-share.ts), where VMM_EXPORT / VMM_IMPORT serve them (commands/vmm.ts sharing()).
    attrs[ATTR_POSIX_FD_HANDLES] = c.session.vm.vmmShares.servedBy(c.dev.provider) ? 1 : 0;
    attrs[ATTR_MEMPOOL_HANDLE_TYPES] = c.dev.provider.ipcOpen ? MEM_HANDLE_TYPE_POSIX_FD : 0;
    attrs[ATTR_IPC_EVENTS] = c.dev.provider.ipcEventOpen ? 1 : 0;
    // The VM's own UUID and a neutral PCI location, unless the real ones are passed through (gpu-identity.ts).
    const key = c.session.vm.identityKey;
    if (key) neutralPci(attrs, device);
    return {
      out: encode('qcuda_out_device_props', {
        name: p.name,
        uuid: key ? vmUuid(key, p.uuid) : p.uuid,
        total_mem: limit > 0n && limit < p.totalMem ? limit : p.totalMem,
        attrs,
      }),
    };
  },

  async SET_DEVICE(c) {
    const { device } = c.args;
    if (device >= c.dev.provider.deviceCount()) throw new CudaError(CudaErr.InvalidDevice, `device ${device}`);
    c.session.device = device; // each device's context opens on its first use there
  },

  DEVICE_SYNC: (c) => c.session.withContext((x) => x.synchronize()),

  DEVICE_RESET: (c) => c.session.reset(),

  /**
   * The stack, heap and printf limits reserve device memory: what a value
   * reserves beyond the context's default counts against the VM's quota
   * (every session's together), given back when set lower or at reset. The
   * stack is the context's local memory, which launches grow too: one
   * charge (local-memory.ts).
   */
  async LIMIT_SET(c) {
    const { limit, value } = c.args;
    checkLimitSet(limit);
    if (isL2SetAside(limit)) {
      const most = BigInt(c.dev.provider.deviceProps(c.session.device).attrs[ATTR_MAX_PERSISTING_L2] ?? 0);
      c.session.l2SetAside = value < most ? value : most;
      return;
    }
    const x = await c.session.context();
    let undo = () => {};
    if (limit === Limit.StackSize) undo = c.session.setLocalMemory((await c.session.localMemory(x)).withStack(value));
    else if (limitReservesMemory(limit)) undo = c.session.chargeLimit(limit, limitBytes(limit, value, await c.session.limitBase(x, limit)));
    try {
      await x.limitSet(limit, value);
    } catch (e) {
      undo();
      throw e;
    }
  },

  async LIMIT_GET(c) {
    checkLimit(c.args.limit);
    if (isL2SetAside(c.args.limit)) return { value: c.session.l2SetAside };
    return { value: await (await c.session.context()).limitGet(c.args.limit) };
  },
};
