// A backend restart that keeps the device's state: the backend stopped on
// purpose (SIGTERM) and started again on the same socket, the frontend
// (QEMU, -chardev ...,reconnect-ms) reconnecting to it. The old backend
// takes nothing more from the rings, lets what is in flight finish, and
// writes the device's state (saveState, framed as for a migration:
// state-transfer.ts) to a file; the new one reads the file at start and
// loads the state into its device when the frontend has reconnected and
// set up its rings, before it takes a request.
//
// What QEMU 10 does on a reconnect decides the design (qemu-patches/0002):
// GET_VRING_BASE cannot be asked of a dead backend, so QEMU sets each ring's
// next avail index to the used index it finds in guest memory and hands
// that to the new backend (SET_VRING_BASE). That is exact only if every
// request the old backend took was answered, hence the drain: then the
// requests the guest made available after the stop began are all still
// there, untaken, and the new backend serves them from that index.
//
// A state belongs to one frontend and one moment: the file also records
// the frontend's guest memory (regions by guest-physical and QEMU's own
// virtual address) and each ring's size, addresses and indices. A state is
// loaded only into a connection whose memory table and rings are those
// (QEMU's addresses differ in another QEMU process; a guest that reset its
// device meanwhile has restarted its rings); otherwise it is refused, and
// the device starts empty.
//
// File layout (little-endian):
//   u32 "VURS" (0x53525556), u32 format (1), u32 mark length, u32 crc32 of mark,
//   mark: JSON (RestartMark), then the framed device state (state-transfer.ts).
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import type { VhostUserDevice } from './device';
import type { MemoryTable } from './memory';
import type { Vring } from './vring';
import { checkFrame, loadFramed, MAX_STATE_BYTES, saveFramed } from './state-transfer';

export const RESTART_MAGIC = 0x53525556; // "VURS"
export const RESTART_FORMAT = 1;
const HEAD = 16;
/** The most bytes of mark a file may have (regions and rings: a few KiB). */
const MAX_MARK = 1 << 20;

/** A ring as the saved state left it: its setup and its indices (all answered: lastAvail === usedIdx). */
export interface RingMark {
  index: number;
  size: number;
  lastAvail: number;
  usedIdx: number;
  /** The frontend's addresses of its descriptor table, avail and used rings (hex). */
  desc: string;
  avail: string;
  used: string;
}

/** Whose state it is: the device, the frontend's guest memory and rings, when. */
export interface RestartMark {
  device: string;
  regions: { gpa: string; size: string; userAddr: string }[];
  rings: RingMark[];
  savedAt: string;
  pid: number;
}

/** A state file refused: its message says why. */
export class RestartStateError extends Error {
  override readonly name = 'RestartStateError';
}

const hex = (v: bigint) => `0x${v.toString(16)}`;

/** What a restart needs of a connection's backend (Backend: its device, guest memory and rings). */
export interface Backend {
  readonly device: VhostUserDevice;
  readonly memory: MemoryTable;
  readonly rings: readonly Vring[];
}

/** The connection's frontend as a mark: its memory table and its started rings. */
function markOf(b: Backend): RestartMark {
  return {
    device: b.device.name,
    regions: b.memory.regions.map((r) => ({ gpa: hex(r.gpa), size: hex(r.size), userAddr: hex(r.userAddr) })),
    rings: b.rings
      .filter((r) => r.started)
      .map((r) => {
        const s = r.state();
        return {
          index: s.index,
          size: s.size,
          lastAvail: s.lastAvail,
          usedIdx: s.usedIdx,
          desc: hex(s.addr.desc),
          avail: hex(s.addr.avail),
          used: hex(s.addr.used),
        };
      }),
    savedAt: new Date().toISOString(),
    pid: process.pid,
  };
}

/** Why the frontend of b is not the one the mark was taken of (undefined: it is). */
function mismatch(mark: RestartMark, b: Backend): string | undefined {
  if (mark.device !== b.device.name) return `it is a ${mark.device} device's state, this backend serves ${b.device.name}`;
  const now = markOf(b);
  const regions = (x: RestartMark) => x.regions.map((r) => `${r.gpa}+${r.size}@${r.userAddr}`).join(', ');
  if (regions(mark) !== regions(now))
    return `the frontend's guest memory is not the saved one's (another QEMU?): saved ${regions(mark) || 'none'}, now ${regions(now) || 'none'}`;
  for (const m of mark.rings) {
    const r = now.rings.find((x) => x.index === m.index);
    if (!r) return `vring ${m.index} was started when the state was saved and is not now`;
    if (r.size !== m.size || r.desc !== m.desc || r.avail !== m.avail || r.used !== m.used)
      return `vring ${m.index} is not where it was (the guest reset the device?)`;
    if (r.lastAvail !== m.lastAvail || r.usedIdx !== m.usedIdx)
      return `vring ${m.index} starts at avail ${r.lastAvail}, used ${r.usedIdx}; the state was saved at avail ${m.lastAvail}, used ${m.usedIdx}`;
  }
  const extra = now.rings.find((r) => !mark.rings.some((m) => m.index === r.index));
  if (extra) return `vring ${extra.index} is started now and was not when the state was saved`;
  return undefined;
}

/** A state file read and checked (its mark, the frame's CRC): ready to load once its frontend is back. */
export class RestartState {
  private constructor(
    readonly mark: RestartMark,
    /** The framed device state's body (checked against its CRC). */
    readonly body: Buffer[],
    /** The whole file, in chunks, to be written back as it was (a stop before the frontend came back). */
    readonly raw: Buffer[],
  ) {}

  /** The device state's bytes (without framing). */
  get bytes(): number {
    return this.body.reduce((n, c) => n + c.length, 0);
  }

  /** Reads and checks a state file; throws RestartStateError saying what is wrong with it. */
  static read(file: string, maxBytes = MAX_STATE_BYTES): RestartState {
    const raw = readChunks(file, maxBytes);
    const all = Buffer.concat(raw.slice(0, 1).map((c) => c.subarray(0, HEAD)));
    if (all.length < HEAD) throw new RestartStateError(`${file} is truncated (${all.length} bytes)`);
    if (all.readUInt32LE(0) !== RESTART_MAGIC) throw new RestartStateError(`${file} is not a backend's restart state (bad magic)`);
    const format = all.readUInt32LE(4);
    if (format !== RESTART_FORMAT) throw new RestartStateError(`${file} has format ${format}, this backend reads ${RESTART_FORMAT}`);
    const len = all.readUInt32LE(8);
    const first = raw[0];
    if (len > MAX_MARK || HEAD + len > first.length)
      throw new RestartStateError(`${file} is truncated or corrupted (a mark of ${len} bytes)`);
    const markBytes = first.subarray(HEAD, HEAD + len);
    if (zlib.crc32(markBytes) >>> 0 !== all.readUInt32LE(12))
      throw new RestartStateError(`${file} is corrupted (crc32 mismatch in its mark)`);
    let mark: RestartMark;
    try {
      mark = JSON.parse(markBytes.toString('utf8')) as RestartMark;
    } catch (e) {
      throw new RestartStateError(`${file} is corrupted (its mark is not JSON: ${(e as Error).message})`);
    }
    if (typeof mark?.device !== 'string' || !Array.isArray(mark.regions) || !Array.isArray(mark.rings))
      throw new RestartStateError(`${file} is corrupted (its mark lacks the device, regions or rings)`);
    let body: Buffer[];
    try {
      body = checkFrame([first.subarray(HEAD + len), ...raw.slice(1)]).chunks;
    } catch (e) {
      throw new RestartStateError(`${file}: ${(e as Error).message}`);
    }
    return new RestartState(mark, body, raw);
  }

  /** Why this state is not for b's frontend, or undefined. */
  mismatch(b: Backend): string | undefined {
    return mismatch(this.mark, b);
  }

  /** Hands the state to the device (which refuses it by throwing, unchanged). */
  load(device: VhostUserDevice): Promise<void> {
    if (!device.loadState) return Promise.reject(new Error(`${device.name} cannot load a state`));
    return loadFramed(device, this.body);
  }

  /** Writes the file back as it was read (a stop before its frontend came back). */
  async writeBack(file: string): Promise<void> {
    await writeAtomic(file, async (write) => {
      for (const c of this.raw) await write(c);
    });
  }
}

/**
 * Where a restarted backend keeps the state it read until its frontend is
 * back (VhostUserServer's restart option): the first connection that
 * starts its rings takes it (Backend).
 */
export class RestartSlot {
  #state: RestartState | undefined;
  /** The load under way, if any: a stop waits for it. */
  loading: Promise<void> | undefined;

  constructor(state?: RestartState) {
    this.#state = state;
  }

  get pending(): RestartState | undefined {
    return this.#state;
  }

  take(): RestartState | undefined {
    const s = this.#state;
    this.#state = undefined;
    return s;
  }
}

/** How a stop for a restart went (saveForRestart). */
export interface RestartSave {
  /** saved: the file was written; nothing: there was nothing to keep, and no file was written; failed: the state could not be kept. */
  outcome: 'saved' | 'nothing' | 'failed';
  /** What it holds, or why nothing was written. */
  what: string;
  /** Requests still in flight when the stop gave up on them. */
  inflight: number;
}

/**
 * Stops b's rings for a restart and writes its device's state to file:
 * the rings take nothing more, the device answers what waits on the guest
 * (quiesce), what is in flight has drainMs to finish, then the state is
 * saved. Nothing is written (and the reason said) if a request is still in
 * flight by then, the device says its state cannot be kept, or its save
 * fails. The rings stay paused either way: the backend is about to exit.
 */
export async function saveForRestart(b: Backend, file: string, drainMs: number): Promise<RestartSave> {
  const device = b.device;
  for (const r of b.rings) r.pause();
  if (!device.saveState) return { outcome: 'failed', what: `the ${device.name} device cannot save its state`, inflight: 0 };
  const why = device.quiesce?.();
  const inflight = () => b.rings.reduce((n, r) => n + r.inflight, 0);
  if (why) return { outcome: 'failed', what: why, inflight: inflight() };
  const deadline = Date.now() + drainMs;
  for (const r of b.rings) await r.idle(Math.max(0, deadline - Date.now()));
  const left = inflight();
  if (left > 0) return { outcome: 'failed', what: `${left} requests still in flight after ${drainMs} ms`, inflight: left };
  const mark = markOf(b);
  const markBytes = Buffer.from(JSON.stringify(mark));
  const head = Buffer.alloc(HEAD);
  head.writeUInt32LE(RESTART_MAGIC, 0);
  head.writeUInt32LE(RESTART_FORMAT, 4);
  head.writeUInt32LE(markBytes.length, 8);
  head.writeUInt32LE(zlib.crc32(markBytes) >>> 0, 12);
  let bytes = 0;
  try {
    await writeAtomic(file, async (write) => {
      await write(head);
      await write(markBytes);
      bytes = await saveFramed(device, write);
    });
  } catch (e) {
    return { outcome: 'failed', what: (e as Error).message, inflight: 0 };
  }
  const rings = mark.rings.map((r) => `${r.index}@${r.lastAvail}`).join(' ');
  return { outcome: 'saved', what: `${bytes} bytes of device state, rings at ${rings || 'none'}`, inflight: 0 };
}

/** Chunks a file is read in: a state may be larger than one Buffer (2 GiB for readFileSync). */
const READ_CHUNK = 64 << 20;

/** The whole of file, in chunks; the first holds at least the header and the mark where the file does. */
function readChunks(file: string, maxBytes: number): Buffer[] {
  const fd = fs.openSync(file, 'r');
  try {
    const st = fs.fstatSync(fd);
    if (!st.isFile()) throw new RestartStateError(`${file} is not a regular file`);
    if (st.size > maxBytes) throw new RestartStateError(`${file} holds ${st.size} bytes, more than ${maxBytes}`);
    const out: Buffer[] = [];
    let at = 0;
    while (at < st.size) {
      const b = Buffer.allocUnsafe(Math.min(READ_CHUNK, st.size - at));
      let got = 0;
      while (got < b.length) {
        const n = fs.readSync(fd, b, got, b.length - got, at + got);
        if (n === 0) throw new RestartStateError(`${file} shrank while it was read`);
        got += n;
      }
      out.push(b);
      at += b.length;
    }
    return out.length > 0 ? out : [Buffer.alloc(0)];
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Writes file as a whole or not at all: a temporary file beside it (mode
 * 0600, created anew), fsync, rename over file, fsync of the directory.
 */
export async function writeAtomic(file: string, fill: (write: (b: Uint8Array) => Promise<void>) => Promise<void>): Promise<void> {
  const dir = path.dirname(path.resolve(file));
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.tmp`);
  await fs.promises.rm(tmp, { force: true });
  const h = await fs.promises.open(tmp, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
  try {
    await fill(async (b) => {
      let at = 0;
      while (at < b.length) at += (await h.write(b, at, b.length - at)).bytesWritten;
    });
    await h.sync();
    await h.close();
    await fs.promises.rename(tmp, file);
  } catch (e) {
    await h.close().catch(() => {});
    await fs.promises.rm(tmp, { force: true });
    throw e;
  }
  const d = await fs.promises.open(dir, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}
