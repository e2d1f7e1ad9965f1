// The vhost-user message codecs (message.ts) on their own, beside
// protocol.test.ts (which sends bad messages over a socket): the header's
// bytes and its checks, every payload's encode/decode round trip at its
// extremes, and each decoder refusing sizes it was not made for.
import test, { type ExecutionContext } from 'ava';
import {
  bit,
  checkHeader,
  decodeConfig,
  decodeHeader,
  decodeMemTable,
  decodeSingleRegion,
  decodeU64,
  decodeVringAddr,
  decodeVringFdArg,
  decodeVringState,
  encodeConfig,
  encodeMemTable,
  encodeMessage,
  encodeSingleRegion,
  encodeU64,
  encodeVringAddr,
  encodeVringState,
  FLAG_NEED_REPLY,
  FLAG_REPLY,
  FLAG_VERSION,
  HEADER_SIZE,
  MAX_CONFIG_SIZE,
  MAX_MEM_TABLE_REGIONS,
  MAX_PAYLOAD,
  ProtocolError,
  Req,
  reqName,
  type MemRegion,
  type ProtocolReason,
} from '../../backend/src/vhost-user';

const MAX64 = (1n << 64n) - 1n;

/** fn must throw a ProtocolError for this reason (its kind: protocol). */
function bad(t: ExecutionContext, fn: () => unknown, reason: ProtocolReason, what?: string): void {
  const e = t.throws(fn, { instanceOf: ProtocolError }, what);
  if (e) t.is(e.reason, reason, what);
  if (e) t.is(e.kind, 'protocol', what);
}

/** The same bytes at an odd offset of a larger buffer (decoders must honour byteOffset). */
function shifted(b: Uint8Array, by = 3): Uint8Array {
  const big = new Uint8Array(b.length + by + 5).fill(0xee);
  big.set(b, by);
  return big.subarray(by, by + b.length);
}

const region = (i: number): MemRegion => ({
  gpa: 0x1000_0000n * BigInt(i + 1),
  size: 0x20_0000n + BigInt(i),
  userAddr: 0x7f00_0000_0000n + BigInt(i) * 0x1_0000_0000n,
  mmapOffset: BigInt(i) * 4096n,
});

test('encodeMessage lays out request, flags and size little-endian before the payload; decodeHeader reads them back', (t) => {
  const m = encodeMessage(Req.SET_VRING_ADDR, FLAG_VERSION | FLAG_NEED_REPLY, new Uint8Array([0xaa, 0xbb, 0xcc]));
  t.is(HEADER_SIZE, 12);
  t.deepEqual(Array.from(m), [9, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0, 0, 0xaa, 0xbb, 0xcc]);
  t.deepEqual(decodeHeader(m), { request: 9, flags: 9, size: 3 });
  const big = encodeMessage(0x01020304, 0xfffffffd, new Uint8Array(0));
  t.is(big.length, HEADER_SIZE);
  t.deepEqual(decodeHeader(shifted(big)), { request: 0x01020304, flags: 0xfffffffd, size: 0 }, 'from a subarray, all 32 bits');
});

test('checkHeader for requests: version 1 only, no REPLY flag, NEED_REPLY allowed, payload up to MAX_PAYLOAD', (t) => {
  const h = (flags: number, size = 0) => ({ request: Req.SET_FEATURES, flags, size });
  t.notThrows(() => checkHeader(h(FLAG_VERSION)));
  t.notThrows(() => checkHeader(h(FLAG_VERSION | FLAG_NEED_REPLY)));
  t.notThrows(() => checkHeader(h(FLAG_VERSION, MAX_PAYLOAD)), 'exactly the largest payload');
  bad(t, () => checkHeader(h(FLAG_VERSION, MAX_PAYLOAD + 1)), 'bad-size');
  bad(t, () => checkHeader(h(0)), 'bad-header');
  bad(t, () => checkHeader(h(2)), 'bad-header');
  bad(t, () => checkHeader(h(3)), 'bad-header');
  bad(t, () => checkHeader(h(FLAG_VERSION | FLAG_REPLY)), 'bad-header');
});

test('checkHeader for replies: flags exactly VERSION|REPLY', (t) => {
  const h = (flags: number) => ({ request: Req.GET_FEATURES, flags, size: 8 });
  t.notThrows(() => checkHeader(h(FLAG_VERSION | FLAG_REPLY), true));
  bad(t, () => checkHeader(h(FLAG_VERSION), true), 'bad-header');
  bad(t, () => checkHeader(h(FLAG_VERSION | FLAG_REPLY | FLAG_NEED_REPLY), true), 'bad-header');
  bad(t, () => checkHeader(h(FLAG_REPLY), true), 'bad-header');
  bad(t, () => checkHeader({ request: Req.GET_FEATURES, flags: FLAG_VERSION | FLAG_REPLY, size: MAX_PAYLOAD + 1 }, true), 'bad-size');
});

test('reqName names known requests and marks unknown ones; bit shifts', (t) => {
  t.is(reqName(Req.SET_MEM_TABLE), 'SET_MEM_TABLE');
  t.is(reqName(43), 'CHECK_DEVICE_STATE');
  t.is(reqName(0), 'UNKNOWN(0)');
  t.is(reqName(999), 'UNKNOWN(999)');
  t.is(bit(0n), 1n);
  t.is(bit(40n), 0x100_0000_0000n);
});

test('u64: round trip at 0, 2^32 and 2^64-1, little-endian; other sizes refused by name', (t) => {
  for (const v of [0n, 1n, 1n << 32n, 0x0102030405060708n, MAX64]) t.is(decodeU64('X', shifted(encodeU64(v))), v);
  t.deepEqual(Array.from(encodeU64(0x0102030405060708n)), [8, 7, 6, 5, 4, 3, 2, 1]);
  for (const n of [0, 4, 7, 9, 16]) bad(t, () => decodeU64('SET_FEATURES', new Uint8Array(n)), 'bad-size');
});

test('vring state: round trip of index and num (all 32 bits); other sizes refused', (t) => {
  for (const s of [
    { index: 0, num: 0 },
    { index: 1, num: 256 },
    { index: 0xffffffff, num: 0xffffffff },
  ]) {
    t.deepEqual(decodeVringState('SET_VRING_NUM', shifted(encodeVringState(s))), s);
  }
  t.deepEqual(Array.from(encodeVringState({ index: 2, num: 0x100 })), [2, 0, 0, 0, 0, 1, 0, 0]);
  for (const n of [0, 4, 7, 9, 12]) bad(t, () => decodeVringState('SET_VRING_BASE', new Uint8Array(n)), 'bad-size');
});

test('vring address: round trip of every field (distinct values, 64-bit extremes); exactly 40 bytes', (t) => {
  const a = { index: 3, flags: 1, desc: 0x1111_2222_3333_4444n, used: MAX64, avail: 0x10n, log: 0xdead_beefn };
  const b = encodeVringAddr(a);
  t.is(b.length, 40);
  t.deepEqual(decodeVringAddr(shifted(b)), a);
  const v = new DataView(b.buffer);
  t.deepEqual(
    [
      v.getUint32(0, true),
      v.getUint32(4, true),
      v.getBigUint64(8, true),
      v.getBigUint64(16, true),
      v.getBigUint64(24, true),
      v.getBigUint64(32, true),
    ],
    [3, 1, a.desc, a.used, a.avail, a.log],
    'the order of the fields: index, flags, desc, used, avail, log',
  );
  for (const n of [0, 32, 39, 41, 48]) bad(t, () => decodeVringAddr(new Uint8Array(n)), 'bad-size');
});

test('vring fd argument: the queue in bits 0-7, "no fd" in bit 8, any other bit refused', (t) => {
  t.deepEqual(decodeVringFdArg('SET_VRING_KICK', encodeU64(0n)), { index: 0, noFd: false });
  t.deepEqual(decodeVringFdArg('SET_VRING_KICK', encodeU64(0xffn)), { index: 255, noFd: false });
  t.deepEqual(decodeVringFdArg('SET_VRING_CALL', encodeU64(0x105n)), { index: 5, noFd: true });
  t.deepEqual(decodeVringFdArg('SET_VRING_ERR', encodeU64(0x1ffn)), { index: 255, noFd: true });
  for (const v of [0x200n, 0x300n, 1n << 63n, MAX64]) bad(t, () => decodeVringFdArg('SET_VRING_KICK', encodeU64(v)), 'bad-value');
  bad(t, () => decodeVringFdArg('SET_VRING_CALL', new Uint8Array(4)), 'bad-size');
});

test('memory table: round trip of 0 to 8 regions; the count and padding in the first 8 bytes', (t) => {
  for (let n = 0; n <= MAX_MEM_TABLE_REGIONS; n++) {
    const regions = Array.from({ length: n }, (_, i) => region(i));
    const b = encodeMemTable(regions);
    t.is(b.length, 8 + 32 * n);
    t.deepEqual(Array.from(b.subarray(0, 8)), [n, 0, 0, 0, 0, 0, 0, 0]);
    t.deepEqual(decodeMemTable(shifted(b)), regions, `${n} regions`);
  }
  const r = { gpa: MAX64, size: MAX64 - 1n, userAddr: 1n << 63n, mmapOffset: 0x0102030405060708n };
  const one = encodeMemTable([r]);
  t.deepEqual(decodeMemTable(one), [r], '64-bit extremes');
  t.deepEqual(Array.from(one.subarray(32, 40)), [8, 7, 6, 5, 4, 3, 2, 1], 'region fields in order: gpa, size, user address, mmap offset');
});

test('memory table: trailing unused slots are accepted up to 8; anything short, over 8 regions or over 8 slots is refused', (t) => {
  const two = encodeMemTable([region(0), region(1)]);
  // QEMU may send all 8 slots with only the first n used.
  const full = new Uint8Array(8 + 32 * MAX_MEM_TABLE_REGIONS);
  full.set(two);
  t.deepEqual(decodeMemTable(full), [region(0), region(1)], 'all 8 slots sent, 2 used');
  t.deepEqual(decodeMemTable(full.subarray(0, 8 + 32 * 3)), [region(0), region(1)], 'a slot more than used');
  bad(t, () => decodeMemTable(Buffer.concat([full, new Uint8Array(1)])), 'bad-size', 'a byte over 8 slots');
  bad(t, () => decodeMemTable(two.subarray(0, two.length - 1)), 'bad-size', 'a byte short');
  bad(t, () => decodeMemTable(two.subarray(0, 8 + 32)), 'bad-size', 'a region short');
  for (const n of [0, 4, 7]) bad(t, () => decodeMemTable(new Uint8Array(n)), 'bad-size');
  const nine = new Uint8Array(8 + 32 * 9);
  new DataView(nine.buffer).setUint32(0, 9, true);
  bad(t, () => decodeMemTable(nine), 'bad-value');
  const huge = new Uint8Array(8);
  new DataView(huge.buffer).setUint32(0, 0xffffffff, true);
  bad(t, () => decodeMemTable(huge), 'bad-value');
});

test('single region (ADD/REM_MEM_REG): 8 bytes of padding then the region; exactly 40 bytes', (t) => {
  const r = region(5);
  const b = encodeSingleRegion(r);
  t.is(b.length, 40);
  t.deepEqual(Array.from(b.subarray(0, 8)), [0, 0, 0, 0, 0, 0, 0, 0]);
  t.deepEqual(decodeSingleRegion('ADD_MEM_REG', shifted(b)), r);
  const padded = b.slice();
  padded.fill(0xff, 0, 8);
  t.deepEqual(decodeSingleRegion('ADD_MEM_REG', padded), r, 'the padding is not read');
  for (const n of [0, 8, 32, 39, 41, 72]) bad(t, () => decodeSingleRegion('REM_MEM_REG', new Uint8Array(n)), 'bad-size');
});

test('config: round trip of offset, size, flags and data, up to MAX_CONFIG_SIZE bytes of data', (t) => {
  for (const size of [0, 1, 8, MAX_CONFIG_SIZE]) {
    const data = Uint8Array.from({ length: size }, (_, i) => (i * 7 + 1) & 0xff);
    const c = { offset: 0x100 + size, size, flags: 0xffffffff, data };
    const b = encodeConfig(c);
    t.is(b.length, 12 + size);
    const d = decodeConfig('GET_CONFIG', shifted(b));
    t.deepEqual({ ...d, data: Array.from(d.data) }, { ...c, data: Array.from(data) }, `${size} bytes`);
  }
  t.deepEqual(
    Array.from(encodeConfig({ offset: 4, size: 2, flags: 1, data: new Uint8Array([9, 8]) })),
    [4, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 9, 8],
  );
});

test('config: short headers, a size over MAX_CONFIG_SIZE and data not of size bytes are refused', (t) => {
  for (const n of [0, 8, 11]) bad(t, () => decodeConfig('SET_CONFIG', new Uint8Array(n)), 'bad-size');
  const over = encodeConfig({ offset: 0, size: MAX_CONFIG_SIZE + 1, flags: 0, data: new Uint8Array(MAX_CONFIG_SIZE + 1) });
  bad(t, () => decodeConfig('SET_CONFIG', over), 'bad-size');
  const lying = (size: number, data: number) => encodeConfig({ offset: 0, size, flags: 0, data: new Uint8Array(data) });
  bad(t, () => decodeConfig('GET_CONFIG', lying(4, 3)), 'bad-size');
  bad(t, () => decodeConfig('GET_CONFIG', lying(4, 5)), 'bad-size');
  bad(t, () => decodeConfig('GET_CONFIG', lying(0, 1)), 'bad-size');
  bad(t, () => decodeConfig('GET_CONFIG', lying(0xffffffff, 0)), 'bad-size');
});
