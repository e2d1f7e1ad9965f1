// Randomized tests with fixed seeds and bounded counts: the message decoder
// fed mutated and random messages over the socket, and the chain walker fed
// random descriptor tables. Neither may throw anything but its own errors,
// leak an fd, or touch memory outside the guest.
import test, { type ExecutionContext } from 'ava';
import { EchoDevice } from '../../backend/src/devices/echo';
import {
  native,
  ChainError,
  DEFAULT_MAX_INDIRECT as MAX_INDIRECT,
  DescTable,
  encodeConfig,
  encodeMemTable,
  encodeMessage,
  encodeU64,
  encodeVringAddr,
  encodeVringState,
  Fd,
  FLAG_NEED_REPLY,
  FLAG_VERSION,
  MemoryError,
  MemoryTable,
  ProtocolError,
  Req,
  VIRTQ_DESC_F_INDIRECT,
  VIRTQ_DESC_F_NEXT,
  VIRTQ_DESC_F_WRITE,
  walkChain,
  type ChainReason,
} from '../../backend/src/vhost-user';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { connect, openFds, prng, randomBytes, tick, until } from '../helpers';

const SEEDS = [11, 22, 33];
const MESSAGES_PER_SEED = 400;

/** Guest RAM and a memory table over it (the table borrows the memfd), both gone after the test. */
function mappedGuest(t: ExecutionContext, regions = [{ gpa: 0n, size: 1 << 20 }]): { guest: GuestMemory; mem: MemoryTable } {
  const guest = new GuestMemory(regions);
  const mem = new MemoryTable();
  // The regions unmapped (clear() waits for requests holding them) before the memory goes.
  t.teardown(async () => {
    await mem.clear();
    guest.close();
  });
  for (const r of guest.regions) mem.add(r, new Fd(guest.fd.value));
  return { guest, mem };
}

/** Writes descriptor i of a table in the split-ring layout. */
function putDesc(v: DataView, i: number, addr: bigint, len: number, flags: number, next: number): void {
  v.setBigUint64(i * 16, addr, true);
  v.setUint32(i * 16 + 8, len, true);
  v.setUint16(i * 16 + 12, flags, true);
  v.setUint16(i * 16 + 14, next, true);
}

/** Valid messages to mutate: what a real frontend sends. */
function corpus(mem: GuestMemory): Uint8Array[] {
  const vs = (i: number, n: number) => encodeVringState({ index: i, num: n });
  const m = (req: Req, p: Uint8Array = new Uint8Array(0)) => encodeMessage(req, FLAG_VERSION | FLAG_NEED_REPLY, p);
  return [
    m(Req.GET_FEATURES),
    m(Req.SET_FEATURES, encodeU64((1n << 32n) | (1n << 30n))),
    m(Req.SET_OWNER),
    m(Req.GET_PROTOCOL_FEATURES),
    m(Req.SET_PROTOCOL_FEATURES, encodeU64(9n)),
    m(Req.GET_QUEUE_NUM),
    m(Req.SET_MEM_TABLE, encodeMemTable(mem.regions)),
    m(Req.SET_VRING_NUM, vs(0, 64)),
    m(Req.SET_VRING_BASE, vs(0, 0)),
    m(
      Req.SET_VRING_ADDR,
      encodeVringAddr({ index: 0, flags: 0, desc: mem.va(0n), used: mem.va(0x2000n), avail: mem.va(0x1000n), log: 0n }),
    ),
    m(Req.SET_VRING_ENABLE, vs(0, 1)),
    m(Req.GET_VRING_BASE, vs(0, 0)),
    m(Req.SET_VRING_KICK, encodeU64(0n)),
    m(Req.GET_CONFIG, encodeConfig({ offset: 0, size: 8, flags: 0, data: new Uint8Array(8) })),
    m(Req.GET_MAX_MEM_SLOTS),
    m(Req.SET_STATUS, encodeU64(15n)),
    m(Req.GET_STATUS),
    m(Req.RESET_DEVICE),
  ];
}

function mutate(rnd: () => number, msg: Uint8Array): Uint8Array {
  const out = new Uint8Array(msg);
  const v = new DataView(out.buffer);
  switch ((rnd() * 6) | 0) {
    case 0: // flip bytes anywhere, the header included
      for (let k = 0; k < 1 + rnd() * 4; k++) out[(rnd() * out.length) | 0] ^= 1 << ((rnd() * 8) | 0);
      return out;
    case 1: // a random request id
      v.setUint32(0, (rnd() * 48) | 0, true);
      return out;
    case 2: // a lying size field (kept small so the stream stays parseable most of the time)
      v.setUint32(8, (rnd() * 300) | 0, true);
      return out;
    case 3: // random payload words
      for (let o = 12; o + 4 <= out.length; o += 4) if (rnd() < 0.3) v.setUint32(o, (rnd() * 2 ** 32) >>> 0, true);
      return out;
    case 4: // truncated
      return out.subarray(0, (rnd() * out.length) | 0);
    default: // pure noise with a plausible header
      return encodeMessage((rnd() * 48) | 0, FLAG_VERSION, randomBytes(rnd, (rnd() * 64) | 0));
  }
}

test.serial('the message decoder survives mutated and random messages, leaking no fd', async (t) => {
  const dev = new EchoDevice({ queues: 2 });
  const { fe, sock, server } = connect(t, dev);
  fe.close();
  await until(() => !server.connected);
  const guest = new GuestMemory();
  t.teardown(() => guest.close());
  const base = corpus(guest);
  const before = openFds();
  let connections = 0;
  for (const seed of SEEDS) {
    const rnd = prng(seed);
    let fd = -1;
    for (let i = 0; i < MESSAGES_PER_SEED; i++) {
      if (fd < 0) {
        fd = native.unixConnect(sock);
        connections++;
        await tick(1);
      }
      const msg = mutate(rnd, base[(rnd() * base.length) | 0]);
      const fds = rnd() < 0.2 ? [guest.fd.value] : [];
      try {
        native.sendMsg(fd, msg, fds);
      } catch {
        native.close(fd); // the backend hung up on an earlier message
        fd = -1;
        continue;
      }
      if (i % 16 === 0) await tick(1);
      const sink = new Uint8Array(4096);
      try {
        while (native.recvMsg(fd, sink).n > 0);
      } catch {
        /* reset by the backend */
      }
    }
    if (fd >= 0) native.close(fd);
    await until(() => !server.connected);
  }
  t.true(await until(() => !server.connected && openFds() === before), `fds ${openFds()} vs ${before}`);
  // The server still serves a well-behaved frontend.
  const good = Frontend.connect(sock);
  t.teardown(() => good.close());
  await good.negotiate();
  t.is(good.queueNum, 2);
  t.log(`${SEEDS.length * MESSAGES_PER_SEED} messages over ${connections} connections`);
});

test('the chain walker rejects every malformed random table with its own errors, never reading outside guest memory', (t) => {
  const { guest, mem } = mappedGuest(t, [
    { gpa: 0n, size: 1 << 20 },
    { gpa: 1n << 32n, size: 1 << 20 },
  ]);
  const rnd = prng(99);
  const size = 16;
  const tableGpa = guest.alloc(size * 16, 16);
  const indirectGpa = guest.alloc(64 * 16, 16);
  const d = guest.bytes(tableGpa, size * 16);
  const ind = guest.bytes(indirectGpa, 64 * 16);
  const table = new DescTable(d);
  const randomAddr = (): bigint => {
    const choice = rnd();
    if (choice < 0.4) return BigInt((rnd() * (1 << 20)) | 0);
    if (choice < 0.7) return (1n << 32n) + BigInt((rnd() * (1 << 20)) | 0);
    return BigInt(Math.floor(rnd() * 2 ** 52));
  };
  const fill = (bytes: Uint8Array, n: number, indirectTarget: boolean) => {
    const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
    for (let i = 0; i < n; i++) {
      const addr = indirectTarget && rnd() < 0.2 ? indirectGpa : randomAddr();
      const len = rnd() < 0.1 ? (rnd() * 2 ** 32) >>> 0 : (rnd() * 4096) | 0;
      const flags = (rnd() * 8) | 0;
      putDesc(v, i, addr, len, flags, rnd() < 0.9 ? (rnd() * n) | 0 : (rnd() * 65536) | 0);
    }
  };
  let ok = 0;
  let rejected = 0;
  for (let iter = 0; iter < 20000; iter++) {
    fill(d, size, true);
    fill(ind, 64, false);
    try {
      const chain = walkChain(table, (rnd() * size) | 0, mem, rnd() < 0.8);
      for (const b of [...chain.readable, ...chain.writable]) mem.segmentsGpa(b.gpa, b.len); // each inside guest memory
      t.true(chain.readable.length + chain.writable.length <= size + 64);
      ok++;
    } catch (e) {
      if (!(e instanceof ChainError)) throw e; // a buffer outside guest memory too (out-of-memory-table)
      rejected++;
    }
  }
  t.true(ok > 100 && rejected > 100, `ok ${ok}, rejected ${rejected}`);
});

test('hand-made malformed chains each fail with their reason', (t) => {
  const { guest, mem } = mappedGuest(t);
  const d = guest.bytes(guest.alloc(4 * 16, 16), 4 * 16);
  const v = new DataView(d.buffer, d.byteOffset, d.length);
  const table = new DescTable(d);
  const set = (i: number, addr: bigint, len: number, flags: number, next: number) => putDesc(v, i, addr, len, flags, next);
  const expectError = (reason: ChainReason, what: string, head = 0, indirectOk = true) => {
    const e = t.throws(() => walkChain(table, head, mem, indirectOk), { instanceOf: ChainError }, what);
    t.is(e?.reason, reason, what);
    return e;
  };
  set(0, 0x1000n, 8, 1, 1);
  set(1, 0x2000n, 8, 1, 0);
  expectError('loop', 'a loop');
  set(1, 0x2000n, 8, 1, 9);
  expectError('bad-index', 'next past the table');
  set(0, 0x1000n, 8, 2 | 1, 1);
  set(1, 0x2000n, 8, 0, 0);
  expectError('bad-order', 'readable after writable');
  set(0, 0x1000n, 32, 4 | 1, 1);
  expectError('indirect-table', 'INDIRECT and NEXT');
  set(0, 0x1000n, 24, 4, 0);
  expectError('indirect-table', 'not a multiple of 16');
  set(0, 0x100n, 32, 4, 0); // an indirect table that points at itself
  const inner = new DataView(guest.bytes(0x100n, 32).buffer, guest.bytes(0x100n, 32).byteOffset, 32);
  inner.setBigUint64(0, 0x100n, true);
  inner.setUint32(8, 32, true);
  inner.setUint16(12, 4, true);
  expectError('indirect-table', 'nested');
  expectError('indirect-table', 'without RING_INDIRECT_DESC', 0, false);
  set(0, 0xfff00n, 0x200, 0, 0); // runs past the end of guest memory by 0x100 bytes
  t.true(expectError('out-of-memory-table', 'past guest memory')?.cause instanceof MemoryError, 'the memory table said so');
  set(0, 0x800000n, 32, 4, 0); // an indirect table outside guest memory
  expectError('out-of-memory-table', 'an indirect table past guest memory');
  expectError('bad-index', 'a head past the ring', 4);
  set(0, 0xfff00n, 0x100, 0, 0); // ends exactly at the end: fine
  t.is(walkChain(table, 0, mem, true).readableBytes, 0x100);
});

test('an indirect table as large as a 16 MiB chunk of scattered pages is walked; one above MAX_INDIRECT is refused', (t) => {
  const { guest, mem } = mappedGuest(t);
  const head = guest.bytes(guest.alloc(16, 16), 16);
  const hv = new DataView(head.buffer, head.byteOffset, 16);
  const tableGpa = guest.alloc((MAX_INDIRECT + 1) * 16, 16);
  const tb = guest.bytes(tableGpa, (MAX_INDIRECT + 1) * 16);
  const tv = new DataView(tb.buffer, tb.byteOffset, tb.length);
  /** An indirect chain of n descriptors (4 KiB each, repeating addresses), the last `writable` device-writable. */
  const chain = (n: number, writable: number) => {
    for (let i = 0; i < n; i++) {
      const flags = (i < n - 1 ? VIRTQ_DESC_F_NEXT : 0) | (i >= n - writable ? VIRTQ_DESC_F_WRITE : 0);
      putDesc(tv, i, BigInt((i % 128) * 4096), 4096, flags, i < n - 1 ? i + 1 : 0);
    }
    putDesc(hv, 0, tableGpa, n * 16, VIRTQ_DESC_F_INDIRECT, 0);
    return walkChain(new DescTable(head), 0, mem, true);
  };
  // A device-to-host chunk: header, arguments; response, output, 4097 pages (unaligned 16 MiB).
  const c = chain(2 + 2 + 4097, 2 + 4097);
  t.deepEqual([c.readable.length, c.writable.length, c.writableBytes], [2, 4099, 4099 * 4096]);
  t.is(chain(MAX_INDIRECT, 1).readable.length, MAX_INDIRECT - 1);
  t.is(t.throws(() => chain(MAX_INDIRECT + 1, 1), { instanceOf: ChainError })?.reason, 'indirect-table');
});

void ProtocolError;
