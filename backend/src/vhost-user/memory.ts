// Guest memory as the frontend describes it: regions of an fd, each known by
// its guest-physical address (descriptor buffers) and by the frontend's
// virtual address (ring addresses). Every lookup checks the whole range.
import createDebug from 'debug';
import { native, type Mapping } from './platform/native';
import type { Fd } from './platform/fd';
import { MAX_SAFE_BIG } from './platform/numbers';
import { FrontendFault, MemoryError, ProtocolError } from './errors';
import type { MemRegion } from './message';

const debug = createDebug('vhost-user:mem');

/** JS views are windows of at most 4 GiB (N-API); overlapping them by OVERLAP
 * keeps any range up to OVERLAP bytes (every ring) inside a single window. */
const WINDOW = 1 << 30;
const OVERLAP = 1 << 20;
/**
 * Lookups compare plain numbers where every value is below this (all guest
 * RAM of a machine with up to 4 PiB: sums stay exact), bigints otherwise:
 * each bigint operation allocates, and every request looks up each buffer.
 */
const NUMBER_LIMIT = 2 ** 52;
const NUMBER_LIMIT_BIG = BigInt(NUMBER_LIMIT);

export class GuestRegion {
  readonly gpa: bigint;
  readonly size: bigint;
  readonly userAddr: bigint;
  readonly mmapOffset: bigint;
  /** Where the region starts in this process (fixed while it is mapped). */
  readonly hostAddress: bigint;
  /** gpa, userAddr and size as numbers, where the region ends below NUMBER_LIMIT (else NaN: compared as bigints). */
  readonly gpaNum: number;
  readonly userAddrNum: number;
  readonly sizeNum: number;
  readonly #mapping: Mapping;
  readonly #delta: number; // mmap_offset - its page-aligned base
  readonly #windows: ArrayBuffer[] = [];
  /** Requests in flight that may use this region (MemoryTable.hold). */
  #holds = 0;
  /** Set once the region left the table: runs when the last hold goes. */
  #onIdle: (() => void) | undefined;

  /** sealedOnly: the frontend is untrusted (MemoryTable.sealedOnly): fd must be a memfd sealed against shrinking. */
  constructor(r: MemRegion, fd: Fd, sealedOnly = false) {
    checkRegionShape(r);
    const info = native.fdInfo(fd.value);
    if (BigInt(info.size) < r.mmapOffset + r.size)
      throw new ProtocolError(
        'bad-fds',
        `region gpa 0x${r.gpa.toString(16)}: fd holds ${info.size} bytes, region needs ${r.mmapOffset + r.size}`,
      );
    const sealed = info.regular && info.seals >= 0 && (info.seals & native.F_SEAL_SHRINK) !== 0;
    // A file the frontend can cut short would fault this process (SIGBUS) at its next access: every frontend's backend.
    if (sealedOnly && !sealed)
      throw new FrontendFault(
        `region gpa 0x${r.gpa.toString(16)}: its fd is not a memfd sealed against shrinking (F_SEAL_SHRINK), which a backend shared by several frontends requires`,
      );
    if (!sealed && info.regular && info.seals >= 0)
      debug('warning: region fd is not sealed against shrinking; a shrink would fault the backend');
    const page = BigInt(native.pageSize);
    const aligned = r.mmapOffset - (r.mmapOffset % page);
    this.#delta = Number(r.mmapOffset - aligned);
    // At a random address: a GPU may be able to read guest RAM through it (addon/src/memory.cc).
    this.#mapping = new native.Mapping(fd.value, Number(r.size) + this.#delta, Number(aligned), true);
    this.gpa = r.gpa;
    this.size = r.size;
    this.userAddr = r.userAddr;
    this.mmapOffset = r.mmapOffset;
    this.hostAddress = this.#mapping.address + BigInt(this.#delta);
    const small = r.gpa + r.size <= NUMBER_LIMIT_BIG && r.userAddr + r.size <= NUMBER_LIMIT_BIG;
    this.gpaNum = small ? Number(r.gpa) : NaN;
    this.userAddrNum = small ? Number(r.userAddr) : NaN;
    this.sizeNum = small ? Number(r.size) : NaN;
  }

  /** A view of [offset, offset+len) inside this region (caller checked bounds). */
  view(offset: number, len: number): Uint8Array {
    const abs = offset + this.#delta;
    const w = Math.floor(abs / WINDOW);
    const inWindow = abs - w * WINDOW;
    if (inWindow + len <= WINDOW + OVERLAP) return new Uint8Array(this.#window(w), inWindow, len);
    throw new MemoryError('range crosses a mapping window');
  }

  /** Views covering [offset, offset+len), split at window boundaries. */
  segments(offset: number, len: number): Uint8Array[] {
    const out: Uint8Array[] = [];
    while (len > 0) {
      const abs = offset + this.#delta;
      const n = Math.min(len, WINDOW - (abs % WINDOW));
      out.push(this.view(offset, n));
      offset += n;
      len -= n;
    }
    return out;
  }

  #window(w: number): ArrayBuffer {
    let ab = this.#windows[w];
    if (!ab) {
      const start = w * WINDOW;
      const len = Math.min(WINDOW + OVERLAP, this.#mapping.length - start);
      ab = this.#mapping.window(start, len);
      this.#windows[w] = ab;
    }
    return ab;
  }

  unmap(): void {
    this.#mapping.unmap();
  }

  hold(): void {
    this.#holds++;
  }

  release(): void {
    if (--this.#holds === 0 && this.#onIdle) {
      const f = this.#onIdle;
      this.#onIdle = undefined;
      f();
    }
  }

  /** Runs f now if no request holds the region, else when the last one lets go. */
  whenIdle(f: () => void): void {
    if (this.#holds === 0) f();
    else this.#onIdle = f;
  }

  get held(): number {
    return this.#holds;
  }
}

function checkRegionShape(r: MemRegion): void {
  const where = `region gpa 0x${r.gpa.toString(16)}`;
  if (r.size === 0n) throw new ProtocolError('bad-value', `${where}: size 0`);
  if (r.size > MAX_SAFE_BIG) throw new ProtocolError('bad-value', `${where}: size too large`);
  if (r.gpa + r.size > 1n << 64n || r.userAddr + r.size > 1n << 64n) throw new ProtocolError('bad-value', `${where}: wraps around`);
  if (r.mmapOffset > MAX_SAFE_BIG) throw new ProtocolError('bad-value', `${where}: mmap offset too large`);
}

function overlaps(aStart: bigint, aSize: bigint, bStart: bigint, bSize: bigint): boolean {
  return aStart < bStart + bSize && bStart < aStart + aSize;
}

/** Told of each region after it is mapped and before it is unmapped (e.g. to
 * register guest RAM with a DMA engine). */
export interface MemoryListener {
  /** fd: the region's file, open only during the call (dup it to keep it). ADD_MEM_REG is acked once this settles. */
  added(r: GuestRegion, fd: Fd): void | Promise<void>;
  /** The region is unmapped once this settles. */
  removing(r: GuestRegion): void | Promise<void>;
}

export class MemoryTable {
  /** Replaced, never changed in place: a hold keeps the array it saw. */
  #regions: readonly GuestRegion[] = [];
  listener: MemoryListener | undefined;
  /** Only regions of memfds sealed against shrinking (the frontend is untrusted: VhostUserServer.listenEach). */
  sealedOnly = false;
  /** Regions out of the table and still held by requests in flight. */
  readonly #retiring = new Set<GuestRegion>();

  get regions(): readonly GuestRegion[] {
    return this.#regions;
  }

  /** SET_MEM_TABLE: maps the whole new table before letting go of the old one. */
  async replace(list: { region: MemRegion; fd: Fd }[]): Promise<void> {
    const old = this.#regions;
    this.#regions = [];
    try {
      for (const { region, fd } of list) this.add(region, fd);
    } catch (e) {
      await this.clear();
      this.#regions = old;
      throw e;
    }
    for (const r of old) await this.#unmap(r);
  }

  /**
   * Unmaps a region that has left the table. A request in flight may still
   * use it (a copy the GPU or a worker is doing, a reply to write): then it
   * stays mapped, and registered, until the last such request completes, and
   * this returns at once so the frontend's message is answered (the guest
   * decides when a request completes; the frontend must not wait for it).
   */
  #unmap(r: GuestRegion): Promise<void> {
    return new Promise((resolve, reject) => {
      if (r.held) this.#retiring.add(r);
      r.whenIdle(() => {
        this.#retiring.delete(r);
        Promise.resolve()
          .then(() => this.listener?.removing(r))
          .finally(() => r.unmap())
          .then(resolve, reject);
      });
      if (r.held) resolve();
    });
  }

  /**
   * Keeps every region of the table mapped until the returned function is
   * called: a request holds the table it was taken with, and each table its
   * buffers are resolved in later (Request.hold), for as long as it is in
   * flight, so a memory-table change meanwhile cannot unmap what it uses.
   */
  hold(): () => void {
    const held = this.#regions;
    for (const r of held) r.hold();
    let done = false;
    return () => {
      if (done) return;
      done = true;
      for (const r of held) r.release();
    };
  }

  /** Regions unmapped from the table that requests still hold (tests read it). */
  get retiring(): number {
    return this.#retiring.size;
  }

  /**
   * Maps a region; the fd stays the caller's to close (the mapping survives
   * it). A region that overlaps one in the table is refused, unless
   * displace is set (a session's worker, told of a new table's regions
   * before the old ones go): the overlapped ones then leave the table still
   * mapped, theirs to unmap who added them.
   */
  add(r: MemRegion, fd: Fd, o: { displace?: boolean } = {}): GuestRegion {
    return this.#insert(r, fd, o).region;
  }

  /** add(), settled once the listener has taken the region (ADD_MEM_REG: the frontend may use it as soon as it is acked). */
  async addSettled(r: MemRegion, fd: Fd): Promise<GuestRegion> {
    const { region, taken } = this.#insert(r, fd, {});
    await taken;
    return region;
  }

  #insert(r: MemRegion, fd: Fd, o: { displace?: boolean }): { region: GuestRegion; taken: void | Promise<void> } {
    const clash = this.#regions.filter((x) => overlaps(x.gpa, x.size, r.gpa, r.size) || overlaps(x.userAddr, x.size, r.userAddr, r.size));
    if (clash.length > 0 && !o.displace)
      throw new ProtocolError('bad-value', `region gpa 0x${r.gpa.toString(16)} overlaps gpa 0x${clash[0].gpa.toString(16)}`);
    const region = new GuestRegion(r, fd, this.sealedOnly);
    this.#regions = [...this.#regions.filter((x) => !clash.includes(x)), region];
    const taken = this.listener?.added(region, fd);
    debug('region gpa=0x%s size=0x%s uaddr=0x%s', r.gpa.toString(16), r.size.toString(16), r.userAddr.toString(16));
    return { region, taken };
  }

  async remove(r: MemRegion): Promise<void> {
    const i = this.#regions.findIndex((o) => o.gpa === r.gpa && o.size === r.size && o.userAddr === r.userAddr);
    if (i < 0) throw new ProtocolError('bad-value', `REM_MEM_REG: no region at gpa 0x${r.gpa.toString(16)}`);
    const gone = this.#regions[i];
    this.#regions = this.#regions.filter((_, j) => j !== i);
    await this.#unmap(gone);
  }

  async clear(): Promise<void> {
    const gone = this.#regions;
    this.#regions = [];
    for (const r of gone) await this.#unmap(r);
  }

  /** The region holding host addresses [addr, addr+len), and the offset into it. */
  atHost(addr: bigint, len: number): { region: GuestRegion; offset: number } {
    for (const region of this.#regions) {
      const start = region.hostAddress;
      if (addr >= start && addr + BigInt(len) <= start + region.size) return { region, offset: Number(addr - start) };
    }
    throw new MemoryError(`host range 0x${addr.toString(16)}+${len} is not guest memory`);
  }

  #find(addr: bigint, len: number, key: 'gpa' | 'userAddr'): { region: GuestRegion; offset: number } {
    const byGpa = key === 'gpa';
    const small = addr < NUMBER_LIMIT_BIG && len < NUMBER_LIMIT;
    const a = small ? Number(addr) : 0;
    let end: bigint | undefined; // as a bigint, once a region needs it
    for (const region of this.#regions) {
      const startNum = byGpa ? region.gpaNum : region.userAddrNum;
      if (small && !Number.isNaN(startNum)) {
        // Both below NUMBER_LIMIT (a region beyond has NaN here): exact as numbers.
        if (a >= startNum && a + len <= startNum + region.sizeNum) return { region, offset: a - startNum };
        continue;
      }
      const start = byGpa ? region.gpa : region.userAddr;
      end ??= addr + BigInt(len);
      if (addr >= start && end <= start + region.size) return { region, offset: Number(addr - start) };
    }
    const kind = byGpa ? 'guest-physical' : 'frontend-virtual';
    throw new MemoryError(`${kind} range 0x${addr.toString(16)}+${len} is not inside guest memory`);
  }

  /** One view of a frontend-virtual range (rings); it must lie in one region. */
  viewVa(va: bigint, len: number): Uint8Array {
    const { region, offset } = this.#find(va, len, 'userAddr');
    return region.view(offset, len);
  }

  /** Throws (MemoryError) unless the guest-physical range lies in one region. */
  checkGpa(gpa: bigint, len: number): void {
    this.#find(gpa, len, 'gpa');
  }

  /** Views of a guest-physical range (descriptor buffers); it must lie in one region. */
  segmentsGpa(gpa: bigint, len: number): Uint8Array[] {
    if (len === 0) return [];
    const { region, offset } = this.#find(gpa, len, 'gpa');
    return region.segments(offset, len);
  }

  /** The host address of a guest-physical range, for native consumers. */
  hostAddressGpa(gpa: bigint, len: number): bigint {
    const { region, offset } = this.#find(gpa, len, 'gpa');
    return region.hostAddress + BigInt(offset);
  }

  /** hostAddressGpa and segmentsGpa of one range in one lookup. */
  hostSegmentsGpa(gpa: bigint, len: number): { addr: bigint; views: Uint8Array[] } {
    const { region, offset } = this.#find(gpa, len, 'gpa');
    return { addr: region.hostAddress + BigInt(offset), views: len === 0 ? [] : region.segments(offset, len) };
  }
}
