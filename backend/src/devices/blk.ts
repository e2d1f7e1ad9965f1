// A virtio-blk device for QEMU's stock vhost-user-blk-pci whose disk lives
// in GPU memory (or host memory, for machines without a GPU): blk-store.ts.
// It serves what a Linux guest sends (read, write, flush, get id, discard
// and write-zeroes) on several queues, read-only if asked. Every request is
// checked before a byte moves: its header, that the data part is whole
// sectors inside the disk, its status byte; a bad one gets
// VIRTIO_BLK_S_IOERR (or UNSUPP) and the device goes on.
import type { Request, VhostUserDevice } from '../vhost-user';
import type { MemoryTable } from '../vhost-user';
import type { Provider } from '../qcuda/provider';
import type { BusyPoll } from '../vhost-user';
import { StoreFullError, type BlkStore } from './blk-store';

export const SECTOR = 512n;

/** Feature bits (virtio 1.2, 5.2.3). */
export const BlkF = { SEG_MAX: 2, RO: 5, BLK_SIZE: 6, FLUSH: 9, MQ: 12, DISCARD: 13, WRITE_ZEROES: 14 } as const;
/** Request types and statuses (5.2.6). */
export const BlkT = { IN: 0, OUT: 1, FLUSH: 4, GET_ID: 8, DISCARD: 11, WRITE_ZEROES: 13 } as const;
export const BlkS = { OK: 0, IOERR: 1, UNSUPP: 2 } as const;

/** struct virtio_blk_config up to write_zeroes_may_unmap and its padding (what QEMU reads for these features). */
export const BLK_CONFIG_SIZE = 60;
const HEADER = 16; // type u32, reserved u32, sector u64
const SEG_MAX = 254; // data descriptors per request the driver may use
const DISCARD_SEG = 16; // sector u64, num_sectors u32, flags u32
/** Discard / write-zeroes: segments per request, sectors per segment. */
const MAX_DISCARD_SEGS = 32;
const MAX_DISCARD_SECTORS = 1 << 22; // 2 GiB a segment
const WRITE_ZEROES_UNMAP = 1;

export interface BlkOptions {
  queues?: number;
  store: BlkStore;
  readOnly?: boolean;
  /** GET_ID's answer (at most 20 bytes). */
  serial?: string;
  /** The provider behind the store, told of guest RAM so that copies to and from it run natively. */
  provider?: Provider;
  /** VhostUserDevice.pollUs: the rings (and with them the copies' completions) polled this long after each request and answer. */
  pollUs?: number;
  /** Where a write that finds no room (StoreFullError) is told (the backend's rate-limited log); default stderr. */
  log?: (line: string) => void;
}

class BlkError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export class BlkDevice implements VhostUserDevice {
  readonly name = 'blk';
  readonly numQueues: number;
  readonly maxQueueSize = 1024;
  readonly features: bigint;
  readonly configSize = BLK_CONFIG_SIZE;
  readonly pollUs: number;
  readonly #store: BlkStore;
  readonly #readOnly: boolean;
  readonly #serial: Uint8Array;
  readonly #provider: Provider | undefined;
  readonly #log: (line: string) => void;
  /** Requests served, by outcome (for tests and logs). */
  readonly counts = { ok: 0, ioerr: 0, unsupp: 0 };

  constructor(o: BlkOptions) {
    if (o.store.size % SECTOR !== 0n || o.store.size === 0n) throw new Error(`a disk of ${o.store.size} bytes: not whole sectors`);
    this.numQueues = o.queues ?? 4;
    this.#store = o.store;
    this.#readOnly = o.readOnly ?? false;
    this.#serial = new TextEncoder().encode((o.serial ?? 'qcuda-gpu-disk').slice(0, 20));
    this.#provider = o.provider;
    this.pollUs = o.pollUs ?? 0;
    this.#log = o.log ?? ((line) => console.error(line));
    const bits = [BlkF.SEG_MAX, BlkF.BLK_SIZE, BlkF.FLUSH, BlkF.MQ, ...(this.#readOnly ? [BlkF.RO] : [BlkF.DISCARD, BlkF.WRITE_ZEROES])];
    this.features = bits.reduce((f, b) => f | (1n << BigInt(b)), 0n);
  }

  readConfig(): Uint8Array {
    const b = new Uint8Array(BLK_CONFIG_SIZE);
    const v = new DataView(b.buffer);
    v.setBigUint64(0, this.#store.size / SECTOR, true); // capacity
    v.setUint32(12, SEG_MAX, true);
    v.setUint32(20, Number(SECTOR), true); // blk_size
    v.setUint16(34, this.numQueues, true);
    v.setUint32(36, MAX_DISCARD_SECTORS, true);
    v.setUint32(40, MAX_DISCARD_SEGS, true);
    v.setUint32(44, 1, true); // discard_sector_alignment
    v.setUint32(48, MAX_DISCARD_SECTORS, true);
    v.setUint32(52, MAX_DISCARD_SEGS, true);
    b[56] = 1; // write_zeroes_may_unmap
    return b;
  }

  usePoll(poll: BusyPoll): void {
    this.#provider?.pollWith?.(poll);
  }

  attachMemory(memory: MemoryTable): void {
    const p = this.#provider;
    if (!p) return;
    memory.listener = {
      added: (r, fd) => p.registerGuestMemory(r.hostAddress, r.size, { fd: fd.value, region: r }),
      removing: (r) => p.unregisterGuestMemory(r.hostAddress),
    };
  }

  /** Every request writes its status in its last writable byte; the bytes written come back as the used length. */
  async handle(req: Request): Promise<number> {
    if (req.readableBytes < HEADER || req.writableBytes < 1)
      throw new RangeError(
        `blk: a chain of ${req.readableBytes} readable and ${req.writableBytes} writable bytes has no header or no status byte`,
      );
    const h = new DataView(req.read(0, HEADER).slice().buffer);
    const type = h.getUint32(0, true);
    const sector = h.getBigUint64(8, true);
    const statusAt = req.writableBytes - 1;
    let status: number = BlkS.OK;
    let written = 0;
    try {
      written = await this.#serve(req, type, sector, statusAt);
      this.counts.ok++;
    } catch (e) {
      if (!(e instanceof BlkError)) throw e;
      status = e.status;
      if (status === BlkS.UNSUPP) this.counts.unsupp++;
      else this.counts.ioerr++;
    }
    req.write(statusAt, new Uint8Array([status]));
    return written + 1;
  }

  async #serve(req: Request, type: number, sector: bigint, statusAt: number): Promise<number> {
    switch (type) {
      case BlkT.IN: {
        const len = BigInt(statusAt);
        this.#checkRange(sector, len, 'read');
        if (len > 0n) await this.#store.read(sector * SECTOR, req.segments('writable', 0, statusAt));
        return statusAt;
      }
      case BlkT.OUT: {
        const len = req.readableBytes - HEADER;
        this.#writable('write');
        this.#checkRange(sector, BigInt(len), 'write');
        if (len > 0)
          await this.#roomFor(`a write of ${len} bytes at sector ${sector}`, () =>
            this.#store.write(sector * SECTOR, req.segments('readable', HEADER, len)),
          );
        return 0;
      }
      case BlkT.FLUSH:
        await this.#store.flush();
        return 0;
      case BlkT.GET_ID: {
        const id = new Uint8Array(Math.min(20, statusAt));
        id.set(this.#serial.subarray(0, id.length));
        req.write(0, id);
        return id.length;
      }
      case BlkT.DISCARD:
      case BlkT.WRITE_ZEROES:
        this.#writable(type === BlkT.DISCARD ? 'discard' : 'write-zeroes');
        await this.#zeroSegments(req, type);
        return 0;
      default:
        throw new BlkError(BlkS.UNSUPP, `request type ${type}`);
    }
  }

  /** A write the store has no room for (the VM's device memory quota is used up) fails as an I/O error; the disk serves on. */
  async #roomFor(what: string, write: () => Promise<void>): Promise<void> {
    try {
      await write();
    } catch (e) {
      if (!(e instanceof StoreFullError)) throw e;
      this.#log(`blk: ${what} failed (I/O error to the guest): no room for the disk's next piece: ${e.message}`);
      throw new BlkError(BlkS.IOERR, e.message);
    }
  }

  #writable(what: string): void {
    if (this.#readOnly) throw new BlkError(BlkS.IOERR, `${what} on a read-only disk`);
  }

  /** len bytes from sector: whole sectors, inside the disk. */
  #checkRange(sector: bigint, len: bigint, what: string): void {
    if (len % SECTOR !== 0n) throw new BlkError(BlkS.IOERR, `${what} of ${len} bytes: not whole sectors`);
    if (sector * SECTOR + len > this.#store.size)
      throw new BlkError(BlkS.IOERR, `${what} of ${len} bytes at sector ${sector}: past the end of the disk`);
  }

  /**
   * Discard and write-zeroes both zero their ranges: a discarded range reads
   * back as zeroes (the device promises nothing else, and this is the simple
   * safe answer), and the memory stays allocated either way.
   */
  async #zeroSegments(req: Request, type: number): Promise<void> {
    const bytes = req.readableBytes - HEADER;
    if (bytes === 0 || bytes % DISCARD_SEG !== 0 || bytes / DISCARD_SEG > MAX_DISCARD_SEGS)
      throw new BlkError(BlkS.IOERR, `${bytes} bytes of discard segments`);
    const segs = new DataView(req.read(HEADER, bytes).slice().buffer);
    const ranges: [bigint, bigint][] = [];
    for (let i = 0; i < bytes; i += DISCARD_SEG) {
      const sector = segs.getBigUint64(i, true);
      const n = segs.getUint32(i + 8, true);
      const flags = segs.getUint32(i + 12, true);
      if (n > MAX_DISCARD_SECTORS || flags & ~(type === BlkT.WRITE_ZEROES ? WRITE_ZEROES_UNMAP : 0))
        throw new BlkError(type === BlkT.DISCARD && flags ? BlkS.UNSUPP : BlkS.IOERR, `discard segment of ${n} sectors, flags ${flags}`);
      this.#checkRange(sector, BigInt(n) * SECTOR, 'discard');
      ranges.push([sector * SECTOR, BigInt(n) * SECTOR]);
    }
    for (const [off, len] of ranges) if (len > 0n) await this.#store.zero(off, len);
  }

  async reset(): Promise<void> {
    // The disk outlives the connection: a guest that reboots onto the same backend finds its data.
  }

  close(): Promise<void> {
    return this.#store.close();
  }
}
