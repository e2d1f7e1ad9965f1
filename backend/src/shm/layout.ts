// The shared-memory transport's region, as guest-driver/include/qcuda_shm.h
// declares it (the offsets below are that header's; test/qcuda/shm-layout
// checks them against the C compiler's). The backend writes the layout once,
// then only its answer fields; of the guest's fields it reads three words
// (the claim, the attach and detach generations) and the rings' avail
// indexes, and uses none of them as an offset or a length.

export const SHM_MAGIC = 0x4d48534144554351n; // "QCUDASHM"
export const SHM_VERSION = 1;
export const HDR_BYTES = 4096;
export const RING_SIZE = 256;
/** Where the data area starts: a huge page in, so that it can be mapped with huge pages. */
export const DATA_OFFSET = 2 << 20;
/** Its guest-physical address (the userspace transport's VHU_GPA_BASE). */
export const DATA_GPA = 1n << 30n;
/** Each ring: descriptors, avail, used, a page each (guest-driver/lib/vhu_ring.c). */
export const RING_BYTES = 3 * 4096;
/** The library's rings, slots and staging room (vhu_ring_start: 32 slots of 2 MiB) come first: a region smaller than this and a little pinned memory serves nothing. */
export const MIN_DATA_BYTES = 96 << 20;

export const enum State {
  Idle = 0,
  Ready = 1,
  Failed = 2,
}

/** Byte offsets in the header. */
export const Off = {
  magic: 0,
  version: 8,
  hdrBytes: 12,
  regionBytes: 16,
  dataOffset: 24,
  dataBytes: 32,
  dataGpa: 40,
  numRings: 48,
  ringSize: 52,
  owner: 64,
  attach: 72,
  detach: 76,
  served: 128,
  state: 132,
  config: 192,
} as const;

/** What the guest wrote: three words, untrusted, read once a turn. */
export interface GuestWords {
  owner: bigint;
  attach: number;
  detach: number;
}

/** The header as the backend reads and writes it (a view of the region's first page). */
export class Header {
  readonly #v: DataView;
  readonly #i32: Int32Array;

  constructor(page: ArrayBuffer) {
    this.#v = new DataView(page, 0, HDR_BYTES);
    this.#i32 = new Int32Array(page, 0, HDR_BYTES / 4);
  }

  /** Before any guest: the layout, and no generation served. */
  writeLayout(regionBytes: number): void {
    const v = this.#v;
    new Uint8Array(v.buffer, 0, HDR_BYTES).fill(0);
    v.setBigUint64(Off.version, BigInt(SHM_VERSION) | (BigInt(HDR_BYTES) << 32n), true);
    v.setBigUint64(Off.regionBytes, BigInt(regionBytes), true);
    v.setBigUint64(Off.dataOffset, BigInt(DATA_OFFSET), true);
    v.setBigUint64(Off.dataBytes, BigInt(regionBytes - DATA_OFFSET), true);
    v.setBigUint64(Off.dataGpa, DATA_GPA, true);
    v.setUint32(Off.ringSize, RING_SIZE, true);
    // The magic last: a guest that sees it sees the rest.
    Atomics.store(this.#i32, Off.magic / 4 + 1, Number(SHM_MAGIC >> 32n) | 0);
    Atomics.store(this.#i32, Off.magic / 4, Number(SHM_MAGIC & 0xffffffffn) | 0);
  }

  guest(): GuestWords {
    return {
      owner: this.#v.getBigUint64(Off.owner, true),
      attach: Atomics.load(this.#i32, Off.attach / 4) >>> 0,
      detach: Atomics.load(this.#i32, Off.detach / 4) >>> 0,
    };
  }

  /** The answer to generation gen: config and rings first, then the generation, the state last. */
  answer(gen: number, state: State, config?: Uint8Array, rings = 0): void {
    if (config) new Uint8Array(this.#v.buffer, Off.config, config.length).set(config);
    this.#v.setUint32(Off.numRings, rings, true);
    Atomics.store(this.#i32, Off.state / 4, State.Idle);
    Atomics.store(this.#i32, Off.served / 4, gen | 0);
    Atomics.store(this.#i32, Off.state / 4, state);
  }

  get served(): number {
    return Atomics.load(this.#i32, Off.served / 4) >>> 0;
  }
}
