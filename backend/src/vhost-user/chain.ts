// Descriptor chains of a split virtqueue: walked defensively. The driver is
// untrusted, so a chain that loops, points past the table, nests indirect
// tables, puts a readable buffer after a writable one or names memory outside
// the guest is rejected as a whole (ChainError), and only that request fails.
import { ChainError, MemoryError } from './errors';
import type { MemoryTable } from './memory';

export const VIRTQ_DESC_F_NEXT = 1;
export const VIRTQ_DESC_F_WRITE = 2;
export const VIRTQ_DESC_F_INDIRECT = 4;
export const DESC_SIZE = 16;
/**
 * An indirect table larger than this (in descriptors) is refused unless the
 * device says otherwise (VhostUserDevice.maxIndirect): the virtio queue size
 * limit, as a driver may not make a chain longer than its queue.
 */
export const DEFAULT_MAX_INDIRECT = 32768;
/** The largest maxIndirect a device may set: `next` is a 16-bit index. */
export const MAX_INDIRECT_LIMIT = 65536;

/** A guest buffer: guest-physical address and length. */
export interface Buf {
  gpa: bigint;
  len: number;
  /**
   * Its host views, once a handler has asked for them as one buffer
   * (Request: a header, a reply); the request holds the regions mapped
   * while it lives (vring-serve.ts).
   */
  views?: Uint8Array[];
}

export interface DescChain {
  head: number;
  readable: Buf[];
  writable: Buf[];
  readableBytes: number;
  writableBytes: number;
}

/** A descriptor table seen through aligned typed arrays (little-endian host). */
export class DescTable {
  readonly u32: Uint32Array;
  readonly u16: Uint16Array;
  readonly u64: BigUint64Array | undefined;
  readonly count: number;

  constructor(bytes: Uint8Array) {
    if (bytes.byteOffset % 4 !== 0) throw new ChainError('indirect-table', 'descriptor table is not 4-byte aligned');
    this.count = Math.floor(bytes.length / DESC_SIZE);
    this.u32 = new Uint32Array(bytes.buffer, bytes.byteOffset, this.count * 4);
    this.u16 = new Uint16Array(bytes.buffer, bytes.byteOffset, this.count * 8);
    // A ring's table is 16-byte aligned (checked where it is mapped); an indirect one need not be 8-byte aligned.
    this.u64 = bytes.byteOffset % 8 === 0 ? new BigUint64Array(bytes.buffer, bytes.byteOffset, this.count * 2) : undefined;
  }

  addr(i: number): bigint {
    return this.u64 ? this.u64[i * 2] : (BigInt(this.u32[i * 4 + 1]) << 32n) | BigInt(this.u32[i * 4]);
  }
  len(i: number): number {
    return this.u32[i * 4 + 2];
  }
  flags(i: number): number {
    return this.u16[i * 8 + 6];
  }
  next(i: number): number {
    return this.u16[i * 8 + 7];
  }
}

/**
 * The chain from `head`; indirectOk: RING_INDIRECT_DESC was negotiated;
 * maxIndirect: the largest indirect table accepted, in descriptors. Every
 * fault of the chain is a ChainError, its reason saying which; a buffer or
 * an indirect table outside guest memory is one too (out-of-memory-table,
 * the memory table's MemoryError its cause).
 */
export function walkChain(
  table: DescTable,
  head: number,
  mem: MemoryTable,
  indirectOk: boolean,
  maxIndirect = DEFAULT_MAX_INDIRECT,
): DescChain {
  try {
    return walk(table, head, mem, indirectOk, maxIndirect);
  } catch (e) {
    if (e instanceof MemoryError) throw new ChainError('out-of-memory-table', e.message, { cause: e });
    throw e;
  }
}

function walk(table: DescTable, head: number, mem: MemoryTable, indirectOk: boolean, maxIndirect: number): DescChain {
  if (head >= table.count) throw new ChainError('bad-index', `head ${head} is past the ring (size ${table.count})`);
  const chain: DescChain = { head, readable: [], writable: [], readableBytes: 0, writableBytes: 0 };
  let t = table;
  let i = head;
  let budget = table.count;
  let indirect = false;
  for (;;) {
    if (budget-- === 0) throw new ChainError('loop', `chain from head ${head} loops or is longer than its table`);
    const flags = t.flags(i);
    if (flags & VIRTQ_DESC_F_INDIRECT) {
      if (!indirectOk) throw new ChainError('indirect-table', 'indirect descriptor without RING_INDIRECT_DESC');
      if (indirect) throw new ChainError('indirect-table', 'nested indirect descriptor');
      if (flags & VIRTQ_DESC_F_NEXT) throw new ChainError('indirect-table', 'descriptor has both INDIRECT and NEXT');
      t = indirectTable(t.addr(i), t.len(i), mem, maxIndirect);
      indirect = true;
      budget = t.count;
      i = 0;
      continue;
    }
    addBuffer(chain, t.addr(i), t.len(i), (flags & VIRTQ_DESC_F_WRITE) !== 0, mem);
    if (!(flags & VIRTQ_DESC_F_NEXT)) return chain;
    i = t.next(i);
    if (i >= t.count) throw new ChainError('bad-index', `next index ${i} is past the table (size ${t.count})`);
  }
}

function indirectTable(gpa: bigint, len: number, mem: MemoryTable, max: number): DescTable {
  if (len === 0 || len % DESC_SIZE !== 0) throw new ChainError('indirect-table', `indirect table length ${len} is not a multiple of 16`);
  if (len / DESC_SIZE > max) throw new ChainError('indirect-table', `indirect table of ${len / DESC_SIZE} descriptors`);
  const segs = mem.segmentsGpa(gpa, len);
  if (segs.length !== 1) throw new ChainError('indirect-table', 'indirect table crosses a mapping window');
  return new DescTable(segs[0]);
}

function addBuffer(chain: DescChain, gpa: bigint, len: number, writable: boolean, mem: MemoryTable): void {
  if (len === 0) return; // legal and harmless; nothing to translate
  // Only checked here (it throws if any byte lies outside guest memory): its
  // views are made when asked for, since most data buffers are only ever
  // handed on by host address.
  mem.checkGpa(gpa, len);
  if (writable) {
    chain.writable.push({ gpa, len });
    chain.writableBytes += len;
  } else {
    if (chain.writable.length > 0) throw new ChainError('bad-order', 'readable descriptor after a writable one');
    chain.readable.push({ gpa, len });
    chain.readableBytes += len;
  }
}
