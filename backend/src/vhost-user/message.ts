// vhost-user wire format: header, request ids, feature bits, payload codecs.
// Every decoder checks the payload size it is given; none trusts the peer.
import { ProtocolError } from './errors';

export const HEADER_SIZE = 12;
/** Larger than any payload QEMU sends (SET_MEM_TABLE: 8 + 8 * 32, CONFIG: 12 + 256). */
export const MAX_PAYLOAD = 4096;
export const MAX_FDS = 8;
export const MAX_CONFIG_SIZE = 256;

export const FLAG_VERSION = 0x1;
export const FLAG_VERSION_MASK = 0x3;
export const FLAG_REPLY = 0x4;
export const FLAG_NEED_REPLY = 0x8;

export enum Req {
  GET_FEATURES = 1,
  SET_FEATURES = 2,
  SET_OWNER = 3,
  RESET_OWNER = 4,
  SET_MEM_TABLE = 5,
  SET_LOG_BASE = 6,
  SET_LOG_FD = 7,
  SET_VRING_NUM = 8,
  SET_VRING_ADDR = 9,
  SET_VRING_BASE = 10,
  GET_VRING_BASE = 11,
  SET_VRING_KICK = 12,
  SET_VRING_CALL = 13,
  SET_VRING_ERR = 14,
  GET_PROTOCOL_FEATURES = 15,
  SET_PROTOCOL_FEATURES = 16,
  GET_QUEUE_NUM = 17,
  SET_VRING_ENABLE = 18,
  SEND_RARP = 19,
  NET_SET_MTU = 20,
  SET_BACKEND_REQ_FD = 21,
  IOTLB_MSG = 22,
  SET_VRING_ENDIAN = 23,
  GET_CONFIG = 24,
  SET_CONFIG = 25,
  CREATE_CRYPTO_SESSION = 26,
  CLOSE_CRYPTO_SESSION = 27,
  POSTCOPY_ADVISE = 28,
  POSTCOPY_LISTEN = 29,
  POSTCOPY_END = 30,
  GET_INFLIGHT_FD = 31,
  SET_INFLIGHT_FD = 32,
  GPU_SET_SOCKET = 33,
  RESET_DEVICE = 34,
  VRING_KICK = 35,
  GET_MAX_MEM_SLOTS = 36,
  ADD_MEM_REG = 37,
  REM_MEM_REG = 38,
  SET_STATUS = 39,
  GET_STATUS = 40,
  GET_SHARED_OBJECT = 41,
  SET_DEVICE_STATE_FD = 42,
  CHECK_DEVICE_STATE = 43,
}

export function reqName(id: number): string {
  return Req[id] ?? `UNKNOWN(${id})`;
}

/** Virtio feature bits (device-independent ones). */
export const VirtioF = {
  NOTIFY_ON_EMPTY: 24n,
  RING_INDIRECT_DESC: 28n,
  RING_EVENT_IDX: 29n,
  PROTOCOL_FEATURES: 30n, // VHOST_USER_F_PROTOCOL_FEATURES
  VERSION_1: 32n,
} as const;

/** vhost-user protocol feature bits. */
export const ProtoF = {
  MQ: 0n,
  LOG_SHMFD: 1n,
  RARP: 2n,
  REPLY_ACK: 3n,
  MTU: 4n,
  BACKEND_REQ: 5n,
  CROSS_ENDIAN: 6n,
  CRYPTO_SESSION: 7n,
  PAGEFAULT: 8n,
  CONFIG: 9n,
  BACKEND_SEND_FD: 10n,
  HOST_NOTIFIER: 11n,
  INFLIGHT_SHMFD: 12n,
  RESET_DEVICE: 13n,
  INBAND_NOTIFICATIONS: 14n,
  CONFIGURE_MEM_SLOTS: 15n,
  STATUS: 16n,
  DEVICE_STATE: 19n,
} as const;

export const bit = (n: bigint): bigint => 1n << n;

export interface Header {
  request: number;
  flags: number;
  size: number;
}

export function decodeHeader(b: Uint8Array): Header {
  const v = view(b);
  return { request: v.getUint32(0, true), flags: v.getUint32(4, true), size: v.getUint32(8, true) };
}

/** Checks what can be checked before reading the payload. A backend reads
 * requests; a frontend reads replies, whose flags must be exactly 0x5. */
export function checkHeader(h: Header, replies = false): void {
  if ((h.flags & FLAG_VERSION_MASK) !== FLAG_VERSION)
    throw new ProtocolError('bad-header', `bad header: version ${h.flags & FLAG_VERSION_MASK} (flags 0x${h.flags.toString(16)})`);
  if (replies && h.flags !== (FLAG_VERSION | FLAG_REPLY))
    throw new ProtocolError('bad-header', `bad reply to ${reqName(h.request)}: flags 0x${h.flags.toString(16)}`);
  if (!replies && h.flags & FLAG_REPLY) throw new ProtocolError('bad-header', `bad header: ${reqName(h.request)} carries the REPLY flag`);
  if (h.size > MAX_PAYLOAD) throw new ProtocolError('bad-size', `bad header: ${reqName(h.request)} payload of ${h.size} bytes`);
}

export function encodeMessage(request: number, flags: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(HEADER_SIZE + payload.length);
  const v = view(out);
  v.setUint32(0, request, true);
  v.setUint32(4, flags, true);
  v.setUint32(8, payload.length, true);
  out.set(payload, HEADER_SIZE);
  return out;
}

export function view(b: Uint8Array): DataView {
  return new DataView(b.buffer, b.byteOffset, b.byteLength);
}

function expectSize(name: string, p: Uint8Array, size: number): DataView {
  if (p.length !== size) throw new ProtocolError('bad-size', `${name}: payload is ${p.length} bytes, expected ${size}`);
  return view(p);
}

// ---- payloads ----

export function encodeU64(v: bigint): Uint8Array {
  const b = new Uint8Array(8);
  view(b).setBigUint64(0, v, true);
  return b;
}

export function decodeU64(name: string, p: Uint8Array): bigint {
  return expectSize(name, p, 8).getBigUint64(0, true);
}

export interface VringState {
  index: number;
  num: number;
}

export function decodeVringState(name: string, p: Uint8Array): VringState {
  const v = expectSize(name, p, 8);
  return { index: v.getUint32(0, true), num: v.getUint32(4, true) };
}

export function encodeVringState(s: VringState): Uint8Array {
  const b = new Uint8Array(8);
  const v = view(b);
  v.setUint32(0, s.index, true);
  v.setUint32(4, s.num, true);
  return b;
}

export interface VringAddr {
  index: number;
  flags: number;
  desc: bigint;
  used: bigint;
  avail: bigint;
  log: bigint;
}
export const VRING_ADDR_F_LOG = 0x1;

export function decodeVringAddr(p: Uint8Array): VringAddr {
  const v = expectSize('SET_VRING_ADDR', p, 40);
  return {
    index: v.getUint32(0, true),
    flags: v.getUint32(4, true),
    desc: v.getBigUint64(8, true),
    used: v.getBigUint64(16, true),
    avail: v.getBigUint64(24, true),
    log: v.getBigUint64(32, true),
  };
}

export function encodeVringAddr(a: VringAddr): Uint8Array {
  const b = new Uint8Array(40);
  const v = view(b);
  v.setUint32(0, a.index, true);
  v.setUint32(4, a.flags, true);
  v.setBigUint64(8, a.desc, true);
  v.setBigUint64(16, a.used, true);
  v.setBigUint64(24, a.avail, true);
  v.setBigUint64(32, a.log, true);
  return b;
}

/** SET_VRING_KICK/CALL/ERR: bits 0-7 the queue, bit 8 "no fd" (polling mode). */
export const VRING_NOFD = 0x100n;
export interface VringFdArg {
  index: number;
  noFd: boolean;
}
export function decodeVringFdArg(name: string, p: Uint8Array): VringFdArg {
  const v = decodeU64(name, p);
  if (v & ~0x1ffn) throw new ProtocolError('bad-value', `${name}: reserved bits set in 0x${v.toString(16)}`);
  return { index: Number(v & 0xffn), noFd: (v & VRING_NOFD) !== 0n };
}

export interface MemRegion {
  gpa: bigint;
  size: bigint;
  userAddr: bigint;
  mmapOffset: bigint;
}
const REGION_SIZE = 32;
export const MAX_MEM_TABLE_REGIONS = 8;

function decodeRegion(v: DataView, off: number): MemRegion {
  return {
    gpa: v.getBigUint64(off, true),
    size: v.getBigUint64(off + 8, true),
    userAddr: v.getBigUint64(off + 16, true),
    mmapOffset: v.getBigUint64(off + 24, true),
  };
}

function encodeRegion(v: DataView, off: number, r: MemRegion): void {
  v.setBigUint64(off, r.gpa, true);
  v.setBigUint64(off + 8, r.size, true);
  v.setBigUint64(off + 16, r.userAddr, true);
  v.setBigUint64(off + 24, r.mmapOffset, true);
}

/** SET_MEM_TABLE: u32 nregions, u32 padding, then nregions regions (QEMU may send all 8 slots). */
export function decodeMemTable(p: Uint8Array): MemRegion[] {
  if (p.length < 8) throw new ProtocolError('bad-size', `SET_MEM_TABLE: payload is ${p.length} bytes`);
  const v = view(p);
  const n = v.getUint32(0, true);
  if (n > MAX_MEM_TABLE_REGIONS) throw new ProtocolError('bad-value', `SET_MEM_TABLE: ${n} regions (at most ${MAX_MEM_TABLE_REGIONS})`);
  if (p.length < 8 + n * REGION_SIZE || p.length > 8 + MAX_MEM_TABLE_REGIONS * REGION_SIZE)
    throw new ProtocolError('bad-size', `SET_MEM_TABLE: ${p.length} bytes cannot hold ${n} regions`);
  const out: MemRegion[] = [];
  for (let i = 0; i < n; i++) out.push(decodeRegion(v, 8 + i * REGION_SIZE));
  return out;
}

export function encodeMemTable(regions: MemRegion[]): Uint8Array {
  const b = new Uint8Array(8 + regions.length * REGION_SIZE);
  const v = view(b);
  v.setUint32(0, regions.length, true);
  regions.forEach((r, i) => encodeRegion(v, 8 + i * REGION_SIZE, r));
  return b;
}

/** ADD_MEM_REG / REM_MEM_REG: u64 padding, then one region. */
export function decodeSingleRegion(name: string, p: Uint8Array): MemRegion {
  return decodeRegion(expectSize(name, p, 8 + REGION_SIZE), 8);
}

export function encodeSingleRegion(r: MemRegion): Uint8Array {
  const b = new Uint8Array(8 + REGION_SIZE);
  encodeRegion(view(b), 8, r);
  return b;
}

export interface ConfigMsg {
  offset: number;
  size: number;
  flags: number;
  data: Uint8Array;
}

export function decodeConfig(name: string, p: Uint8Array): ConfigMsg {
  if (p.length < 12) throw new ProtocolError('bad-size', `${name}: payload is ${p.length} bytes`);
  const v = view(p);
  const offset = v.getUint32(0, true);
  const size = v.getUint32(4, true);
  const flags = v.getUint32(8, true);
  if (size > MAX_CONFIG_SIZE) throw new ProtocolError('bad-size', `${name}: size ${size} > ${MAX_CONFIG_SIZE}`);
  if (p.length !== 12 + size) throw new ProtocolError('bad-size', `${name}: payload is ${p.length} bytes for size ${size}`);
  return { offset, size, flags, data: p.subarray(12) };
}

export function encodeConfig(c: ConfigMsg): Uint8Array {
  const b = new Uint8Array(12 + c.data.length);
  const v = view(b);
  v.setUint32(0, c.offset, true);
  v.setUint32(4, c.size, true);
  v.setUint32(8, c.flags, true);
  b.set(c.data, 12);
  return b;
}

/** SET_DEVICE_STATE_FD: u32 direction (0 save, 1 load), u32 phase (0 stopped). */
export interface DeviceStateParams {
  direction: number;
  phase: number;
}

export function decodeDeviceStateParams(p: Uint8Array): DeviceStateParams {
  const v = expectSize('SET_DEVICE_STATE_FD', p, 8);
  return { direction: v.getUint32(0, true), phase: v.getUint32(4, true) };
}

export function encodeDeviceStateParams(s: DeviceStateParams): Uint8Array {
  const b = new Uint8Array(8);
  const v = view(b);
  v.setUint32(0, s.direction, true);
  v.setUint32(4, s.phase, true);
  return b;
}

/** SET_DEVICE_STATE_FD's reply: bits 0-7 an error code (0: accepted), bit 8 "no fd comes back". */
export const DEVICE_STATE_NOFD = 0x100n;
