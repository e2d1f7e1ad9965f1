// Memory commands: allocations (under the VM's quota), copies and memsets
// (every device range checked to lie in the session's allocations), and
// guest memory mapped for the GPU.
import type { Call, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { decode, LAYOUT, QCUDA_MAX_EXTENTS, Status } from '../proto';
import type { HostPiece } from '../provider';
import { peerKey } from './peer';
import { native as sys } from '../../sys/native';

const EXTENT = LAYOUT.qcuda_extent.size;

/** A transfer's chunk must lie inside the transfer. */
function chunkOf(c: Call<'MEMCPY_HTOD' | 'MEMCPY_DTOH'>): bigint {
  if (c.dataOffset + c.dataLen > c.args.size)
    throw new CudaError(CudaErr.InvalidValue, `chunk ${c.dataOffset}+${c.dataLen} outside a transfer of ${c.args.size}`);
  return c.dataOffset;
}

/**
 * HOST_MAP_PAGES' extents as host addresses: count of them, each whole
 * pages of this VM's RAM, adding up to size (the guest driver built them;
 * a guest kernel that lies can only name its own VM's memory).
 */
function pieces(c: Call<'HOST_MAP_PAGES'>): HostPiece[] {
  const { size, count } = c.args;
  const page = BigInt(sys.pageSize);
  if (count === 0 || count > QCUDA_MAX_EXTENTS || c.extra.length !== count * EXTENT)
    throw new CudaError(Status.BAD_REQUEST, `HOST_MAP_PAGES: ${count} extents in ${c.extra.length} bytes`);
  const out: HostPiece[] = [];
  let total = 0n;
  for (let i = 0; i < count; i++) {
    const { gpa, len } = decode('qcuda_extent', c.extra.subarray(i * EXTENT, (i + 1) * EXTENT));
    if (len === 0n || gpa % page !== 0n || len % page !== 0n)
      throw new CudaError(CudaErr.InvalidValue, `HOST_MAP_PAGES: extent ${i} (0x${gpa.toString(16)}+${len}) is not whole pages`);
    total += len;
    out.push({ addr: c.dev.hostAddressOfGpa(gpa, len), size: len });
  }
  if (total !== size || size === 0n)
    throw new CudaError(CudaErr.InvalidValue, `HOST_MAP_PAGES: extents of ${total} bytes for a mapping of ${size}`);
  return out;
}

/**
 * The largest mapping: what the guest driver can ask (QCUDA_MAX_EXTENTS of
 * its largest contiguous block, 4 MiB), 8 GiB.
 */
export const MAX_HOST_MAP = BigInt(QCUDA_MAX_EXTENTS) * (4n << 20n);

/** Maps the pieces for the GPU, counted against the VM's bounds on mapped pieces and bytes first. */
async function hostMap(c: Call<'HOST_MAP' | 'HOST_MAP_PAGES'>, list: HostPiece[], size: bigint): Promise<bigint> {
  if (size > MAX_HOST_MAP) throw new CudaError(CudaErr.InvalidValue, `host mapping of ${size} bytes: at most ${MAX_HOST_MAP}`);
  const taken = c.session.memory.takeHostMap(list, c.dev.guestRamBytes());
  let x, ptr;
  try {
    x = await c.session.context();
    ptr = await x.hostDevicePointer(list);
  } catch (e) {
    c.session.memory.dropHostMap(taken);
    throw e;
  }
  c.session.memory.addHostMap(x, ptr, size, taken); // not after a reset meanwhile: the guest driver then drops its hold on the pages
  return ptr;
}

/**
 * The device whose context reaches [ptr, ptr+size): that of the allocation
 * holding it (with unified addressing a pointer names its device, whichever
 * is current), else the current device's (mapped guest memory, variables).
 */
function onDevice(c: Call<'MEMCPY_HTOD' | 'MEMCPY_DTOH' | 'MEMCPY_DTOD' | 'MEMSET'>, ptr: bigint, size: bigint): number {
  return c.session.memory.deviceOf(ptr, size) ?? c.session.device;
}

/**
 * A copy between two devices' memory (cudaMemcpyPeer, or cudaMemcpy of
 * kind default): the provider moves it device to device. It completes
 * before the reply, so stream order holds for either device's streams.
 */
async function peerCopy(c: Call<'MEMCPY_DTOD'>, to: number, dst: bigint, from: number, src: bigint, size: bigint): Promise<void> {
  const p = c.dev.provider;
  if (!p.copyPeer)
    throw new CudaError(
      CudaErr.NotSupported,
      `a copy from device ${from} to device ${to}: the ${p.name} provider serves one device per process`,
    );
  const [x, y] = await Promise.all([c.session.context(to), c.session.context(from)]);
  await p.copyPeer(x, dst, y, src, size);
}

export const RUNS: Runs<
  'MALLOC' | 'FREE' | 'MEMCPY_HTOD' | 'MEMCPY_DTOH' | 'MEMCPY_DTOD' | 'MEMSET' | 'HOST_MAP' | 'HOST_MAP_PAGES' | 'HOST_UNMAP'
> = {
  async MALLOC(c) {
    const { size } = c.args;
    if (size === 0n) return { value: 0n }; // cudaMalloc(0) succeeds with a NULL pointer
    // Reserved before the first await: concurrent mallocs cannot all pass the quota.
    const r = c.session.reserve(size);
    const device = c.session.device; // the request's: another thread may switch the session meanwhile
    try {
      const x = await c.session.context(device);
      const ptr = await x.malloc(size);
      c.session.memory.addAlloc(x, ptr, r, device); // after a reset meanwhile, the memory went with the old context
      return { value: ptr };
    } catch (e) {
      c.session.unreserve(r);
      throw e;
    }
  },

  async FREE(c) {
    const { ptr } = c.args;
    if (ptr === 0n) return; // cudaFree(NULL) is a no-op
    const { device, held } = c.session.memory.removeAlloc(ptr);
    try {
      // Its handle names nothing now; openers close it before the free, and its bytes stay counted until
      // they have (an opener whose close fails or hangs has its process ended: ipc.ts letGo).
      await c.session.vm.ipc.forget(c.session, ptr);
      await (await c.session.context(device)).free(ptr); // cudaFree takes any device's pointer
    } finally {
      c.session.unreserve(held); // not after a reset meanwhile: it gave them back, once the openers let go
    }
  },

  MEMCPY_HTOD(c) {
    const { dst, size } = c.args;
    const at = chunkOf(c);
    c.session.checkRange(dst, size, 'cudaMemcpy destination');
    const stream = c.session.stream(c.args.stream);
    if (c.dataLen > 0n) return c.session.withContext((x) => x.copyToDevice(dst + at, c.data, stream), onDevice(c, dst, size));
  },

  MEMCPY_DTOH(c) {
    const { src, size } = c.args;
    const at = chunkOf(c);
    c.session.checkRange(src, size, 'cudaMemcpy source');
    const stream = c.session.stream(c.args.stream);
    if (c.dataLen > 0n) return c.session.withContext((x) => x.copyFromDevice(c.data, src + at, stream), onDevice(c, src, size));
  },

  async MEMCPY_DTOD(c) {
    const { dst, src, size } = c.args;
    c.session.checkRange(dst, size, 'cudaMemcpy destination');
    c.session.checkRange(src, size, 'cudaMemcpy source');
    const stream = c.session.stream(c.args.stream);
    if (size === 0n) return;
    const to = onDevice(c, dst, size);
    const from = onDevice(c, src, size);
    if (to === from) return (await c.session.context(to)).copyOnDevice(dst, src, size, stream, c.args.async !== 0);
    await peerCopy(c, to, dst, from, src, size);
  },

  async MEMSET(c) {
    const { dst, size } = c.args;
    c.session.checkRange(dst, size, 'cudaMemset destination');
    const stream = c.session.stream(c.args.stream);
    const device = onDevice(c, dst, size);
    // The stream's device (a created stream's), else the current one.
    const current = c.session.deviceOfHandle(c.args.stream) ?? c.session.device;
    // The driver's memset runs on that device: another's memory only with peer access to it (measured, 2 x H100).
    if (device !== current && !c.session.peers.has(peerKey(current, device)))
      throw new CudaError(CudaErr.InvalidValue, `cudaMemset of device ${device} memory with device ${current} current, no peer access`);
    if (size > 0n) await (await c.session.context(device)).memset(dst, c.args.value & 0xff, size, stream, c.args.async !== 0);
  },

  async HOST_MAP(c) {
    const { gpa, size } = c.args;
    if (size === 0n) throw new CudaError(CudaErr.InvalidValue, 'mapping of 0 bytes');
    const addr = c.dev.hostAddressOfGpa(gpa, size);
    return { value: await hostMap(c, [{ addr, size }], size) };
  },

  async HOST_MAP_PAGES(c) {
    return { value: await hostMap(c, pieces(c), c.args.size) };
  },

  async HOST_UNMAP(c) {
    c.session.memory.removeHostMap(c.args.ptr);
    await (await c.session.context()).hostUnmap(c.args.ptr); // the GPU loses its way to those pages before the guest frees them
  },
};
