// `qcuda-backend --shm=PATH`: a shared-memory region (qcuda_shm.h) that one
// guest process at a time attaches to, served as one more frontend of the
// backend's server. The region is a file this backend creates (a Windows
// VM's QEMU maps it as an ivshmem device's memory; under Wine or on Linux
// the guest library maps it as it is). Each attach the guest asks for
// (a new generation in the header) gets a fresh vhost-user connection into
// the server (link.ts), so a new session with nothing left of the last one;
// a detach, or a new attach, ends the old connection and with it everything
// that session held.
//
// Nothing signals this side: it polls the header and the rings' avail
// indexes, every turn while requests come and every IDLE_MS otherwise
// (UNATTACHED_MS while no guest is attached), and turns a moved index into
// a kick.
import fs from 'node:fs';
import path from 'node:path';
import { parseSize } from '../qcuda/choose-provider';
import { Fd, native, type Mapping } from '../vhost-user';
import { DATA_OFFSET, Header, MIN_DATA_BYTES, RING_BYTES, State, type GuestWords } from './layout';
import { Link } from './link';

/** How the bridge reaches the server: a new frontend on this connected socket, or false (none is free). */
export type Connect = (fd: number) => Promise<boolean>;

export interface BridgeOptions {
  path: string;
  bytes: number;
  connect: Connect;
  log: (line: string) => void;
  /** Microseconds the rings are polled every turn after the last request seen (default 2000). */
  busyUs?: number;
}

/** How long an attach's device may take to start (negotiation, memory, rings): past it the attach fails and the bridge serves on. */
const START_TIMEOUT_MS = 30_000;
/** A poll turn while idle: the latency of a request that comes after a pause. */
const IDLE_MS = 1;
/** A poll turn while no guest is attached: only an attach is looked for (a backend with no guest costs little). */
const UNATTACHED_MS = 10;

export class ShmBridge {
  readonly #fd: number;
  readonly #map: Mapping;
  readonly #hdr: Header;
  /** The avail index words of the two rings the guest library may use. */
  readonly #avail: Uint16Array[];
  readonly #busyNs: bigint;
  #link: Link | undefined;
  #gen = 0;
  #starting = false;
  #last = [0, 0];
  #busyUntil = 0n;
  #timer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  #closed = false;

  private constructor(
    private readonly o: BridgeOptions,
    fd: number,
  ) {
    this.#fd = fd;
    // Only the header and the ring pages: the data area is the server's to map.
    this.#map = new native.Mapping(fd, DATA_OFFSET + 2 * RING_BYTES, 0);
    this.#hdr = new Header(this.#map.window(0, 4096));
    this.#avail = [0, 1].map((i) => new Uint16Array(this.#map.window(DATA_OFFSET + i * RING_BYTES + 4096, 4)));
    this.#busyNs = BigInt(o.busyUs ?? 2000) * 1000n;
  }

  /** Creates the region file (it must not exist), lays it out and starts polling. */
  static create(o: BridgeOptions): ShmBridge {
    checkRegionBytes(o.bytes);
    // O_EXCL and no symlink followed: the file is this backend's own, never one somebody put there.
    const fd = fs.openSync(o.path, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW, 0o600);
    try {
      fs.ftruncateSync(fd, o.bytes);
      const b = new ShmBridge(o, fd);
      b.#hdr.writeLayout(o.bytes);
      b.#schedule();
      return b;
    } catch (e) {
      fs.closeSync(fd);
      fs.rmSync(o.path, { force: true });
      throw e;
    }
  }

  /** The generation served now (0: none), for tests and status. */
  get served(): number {
    return this.#link && !this.#link.closed ? this.#gen : 0;
  }

  #schedule(): void {
    if (this.#closed) return;
    if (process.hrtime.bigint() < this.#busyUntil) this.#timer = setImmediate(() => this.#turn());
    else this.#timer = setTimeout(() => this.#turn(), this.#link || this.#starting ? IDLE_MS : UNATTACHED_MS);
  }

  #turn(): void {
    try {
      this.#check();
    } catch (e) {
      this.o.log(`shm ${this.o.path}: ${(e as Error).message}`);
    }
    this.#schedule();
  }

  /** One look at what the guest wrote: an attach, a detach, moved avail indexes. */
  #check(): void {
    const g = this.#hdr.guest();
    if (this.#starting) return;
    if (g.attach !== 0 && g.attach !== this.#gen) return void this.#attach(g.attach);
    const link = this.#link;
    if (!link || link.closed) return;
    if (this.#detached(g)) return;
    for (let i = 0; i < link.kicks.length; i++) {
      const idx = this.#avail[i][1];
      if (idx === this.#last[i]) continue;
      this.#last[i] = idx;
      this.#busyUntil = process.hrtime.bigint() + this.#busyNs;
      link.kicks[i].signal();
    }
  }

  /** A detach of the generation served: its link ends as the guest asked (IDLE). Whether there was one. */
  #detached(g: GuestWords): boolean {
    if (!this.#link || this.#link.closed || g.detach !== this.#gen) return false;
    this.#drop(State.Idle);
    this.o.log(`shm ${this.o.path}: detach ${this.#gen}`);
    return true;
  }

  /** Ends the link served now; the guest reads state for its generation. */
  #drop(state: State): void {
    const link = this.#link;
    this.#link = undefined;
    link?.close();
    this.#hdr.answer(this.#gen, state);
  }

  /** A new generation: the old link ends (its session with it), a new one starts. */
  async #attach(gen: number): Promise<void> {
    this.#starting = true;
    if (this.#link) this.#drop(State.Idle);
    this.#gen = gen;
    this.#last = [0, 0];
    const [mine, theirs] = native.socketPair();
    let link: Link | undefined;
    try {
      link = new Link(new Fd(mine), (reason) => this.#lost(link!, reason));
      if (!(await this.o.connect(theirs))) throw new Error('no frontend is free (--frontends)');
      const s = await withTimeout(link.start(this.#fd, this.o.bytes - DATA_OFFSET), START_TIMEOUT_MS, 'the device did not start');
      if (this.#closed) throw new Error('the backend stops');
      this.#link = link;
      this.#hdr.answer(gen, State.Ready, s.config, s.rings);
      this.o.log(`shm ${this.o.path}: attach ${gen} served`);
    } catch (e) {
      link?.close();
      // Once closed, the header is unmapped: close() has told the guest already.
      if (!this.#closed) this.#hdr.answer(gen, State.Failed);
      this.o.log(`shm ${this.o.path}: attach ${gen} refused: ${(e as Error).message}`);
    } finally {
      this.#starting = false;
    }
  }

  /** The server ended a link this side did not, or broke its ring (a guest that faulted its rings): its guest hears FAILED. */
  #lost(link: Link, reason: Error | undefined): void {
    if (link !== this.#link) return;
    this.#link = undefined;
    link.close();
    this.#hdr.answer(this.#gen, State.Failed);
    this.o.log(`shm ${this.o.path}: attach ${this.#gen} dropped${reason ? `: ${reason.message}` : ''}`);
  }

  /**
   * Stops serving, tells a guest attached now, and removes the file. A
   * detach the guest wrote that no turn has seen yet (the backend stopped
   * just after its process detached) is taken as a turn would take it: its
   * session ends as a detach, and the guest reads IDLE, not FAILED.
   */
  close(): void {
    if (this.#closed) return;
    if (!this.#starting) this.#detached(this.#hdr.guest());
    this.#closed = true;
    if (this.#timer) {
      clearTimeout(this.#timer as NodeJS.Timeout);
      clearImmediate(this.#timer as NodeJS.Immediate);
    }
    // A guest attached, or attaching, hears FAILED; one that detached keeps its IDLE.
    if (this.#link || this.#starting) this.#drop(State.Failed);
    this.#map.unmap();
    fs.closeSync(this.#fd);
    fs.rmSync(this.o.path, { force: true });
  }
}

function checkRegionBytes(bytes: number): void {
  if (!Number.isSafeInteger(bytes) || bytes < DATA_OFFSET + MIN_DATA_BYTES || bytes % (2 << 20))
    throw new Error(`--shm-size: ${bytes} bytes; a region takes a multiple of 2 MiB, at least ${(DATA_OFFSET + MIN_DATA_BYTES) >> 20} MiB`);
}

/** --shm and --shm-size, checked; undefined without --shm. */
export function shmOptions(p: string | undefined, size: string | undefined, fd: boolean): { path: string; bytes: number } | undefined {
  if (p === undefined) {
    if (size !== undefined) throw new Error('--shm-size needs --shm');
    return undefined;
  }
  if (fd) throw new Error('--shm serves frontends of its own: not with --fd');
  const dir = path.dirname(path.resolve(p));
  if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`--shm=${p}: no directory ${dir}`);
  if (fs.lstatSync(p, { throwIfNoEntry: false })) throw new Error(`--shm=${p}: it exists (the backend makes the region itself)`);
  const bytes = size === undefined ? 512 << 20 : Number(parseSize(size));
  checkRegionBytes(bytes);
  return { path: path.resolve(p), bytes };
}

/** p, or a rejection with why once ms have passed. */
function withTimeout<T>(p: Promise<T>, ms: number, why: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${why} within ${ms / 1000} s`)), ms)));
  return Promise.race([p, late]).finally(() => clearTimeout(timer));
}
