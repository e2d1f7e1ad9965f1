// Reader and Writer (cursor.ts) over a request whose buffers lie scattered
// in guest memory: each reads or writes the bytes in order across buffer
// ends, a split never lets one half reach into the other's bytes, and every
// length a guest could have chosen (past the end, negative, fractional,
// huge) is refused with a RequestError that leaves the cursor where it was.
// Also: each library error names its kind.
import test, { type ExecutionContext } from 'ava';
import {
  ChainError,
  DescTable,
  Fd,
  InflightRecord,
  MemoryError,
  MemoryTable,
  native,
  Request,
  RequestError,
  walkChain,
  type Buf,
  type DescChain,
  type VhostUserError,
} from '../../backend/src/vhost-user';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';

const MIB = 1 << 20;

function mapped(t: ExecutionContext): { guest: GuestMemory; mem: MemoryTable } {
  const guest = new GuestMemory([{ gpa: 0n, size: MIB }]);
  const mem = new MemoryTable();
  t.teardown(async () => {
    await mem.clear();
    guest.close();
  });
  for (const r of guest.regions) mem.add(r, new Fd(guest.fd.value));
  return { guest, mem };
}

function chain(readable: Buf[], writable: Buf[]): DescChain {
  const sum = (bs: Buf[]) => bs.reduce((n, b) => n + b.len, 0);
  return { head: 0, readable, writable, readableBytes: sum(readable), writableBytes: sum(writable) };
}

/** Readable bytes 0..29 in three buffers far apart (5, 10 and 15 bytes), and 24 writable bytes in two. */
function scattered(t: ExecutionContext): { guest: GuestMemory; req: Request } {
  const { guest, mem } = mapped(t);
  const rd = [
    { gpa: 0x1000n, len: 5 },
    { gpa: 0x3003n, len: 10 },
    { gpa: 0x8ff1n, len: 15 },
  ];
  let v = 0;
  for (const b of rd) for (let i = 0; i < b.len; i++) guest.bytes(b.gpa + BigInt(i), 1)[0] = v++;
  const wr = [
    { gpa: 0x20000n, len: 10 },
    { gpa: 0x30005n, len: 14 },
  ];
  return { guest, req: new Request(0, chain(rd, wr), mem) };
}

const range = (from: number, n: number) => [...Array(n).keys()].map((i) => from + i);

test('a reader reads in order across buffer ends; readObj decodes its struct; a split keeps each half to its bytes', (t) => {
  const { req } = scattered(t);
  const r = req.reader();
  t.is(r.available, 30);
  const u32 = { size: 4, decode: (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, 4).getUint32(0, true) };
  t.is(r.readObj(u32), 0x03020100);
  t.deepEqual([...r.read(3)], [4, 5, 6], 'across the first buffer end');
  const rest = r.splitAt(10);
  t.is(r.available, 10);
  t.is(rest.available, 13);
  t.is(rest.offset, 17);
  t.deepEqual([...r.read(10)], range(7, 10), 'the first half, across the second buffer end');
  t.throws(() => r.read(1), { instanceOf: RequestError }, 'the first half ends at the split');
  t.deepEqual([...rest.read(13)], range(17, 13), 'the second half starts at the split');
  t.is(rest.available, 0);
});

test("a reader's segments are the host pieces of its bytes, in order", (t) => {
  const { req } = scattered(t);
  const r = req.reader();
  r.skip(3);
  const segs = r.segments(10);
  t.deepEqual(
    segs.map((s) => s.len),
    [2, 8],
  );
  t.deepEqual(
    segs.flatMap((s) => [...s.view]),
    range(3, 10),
  );
  t.is(r.available, 17);
});

test('lengths a guest could choose past the end, negative, fractional or huge are refused and move nothing', (t) => {
  const { req } = scattered(t);
  const r = req.reader();
  r.skip(28);
  for (const n of [3, -1, 1.5, 2 ** 32, Number.NaN, Infinity]) {
    for (const [what, f] of [
      ['read', () => r.read(n)],
      ['splitAt', () => r.splitAt(n)],
      ['segments', () => r.segments(n)],
      ['skip', () => r.skip(n)],
    ] as const) {
      const e = t.throws(f, { instanceOf: RequestError }, `${what}(${n})`);
      t.is((e as VhostUserError | undefined)?.kind, 'request');
    }
  }
  t.deepEqual([...r.read(2)], [28, 29], 'the cursor stayed where it was');
  const w = req.writer();
  t.throws(() => w.write(new Uint8Array(25)), { instanceOf: RequestError });
  t.is(w.available, 24);
});

test('a writer fills the reply in order across buffer ends; its split-off tail writes at the end', (t) => {
  const { guest, req } = scattered(t);
  const w = req.writer();
  const tail = w.splitAt(w.available - 6);
  w.write(Uint8Array.from(range(100, 12)));
  t.throws(() => w.write(new Uint8Array(7)), { instanceOf: RequestError }, 'the head ends where the tail starts');
  tail.write(Uint8Array.from(range(200, 6)));
  t.deepEqual([...guest.bytes(0x20000n, 10)], range(100, 10));
  t.deepEqual([...guest.bytes(0x30005n, 14)], [...range(110, 2), 0, 0, 0, 0, 0, 0, ...range(200, 6)]);
});

test('each library error names its kind (chain, memory, ring) and a chain error its reason', (t) => {
  const { mem } = mapped(t);
  const bytes = new Uint8Array(16 * 4);
  const table = new DescTable(bytes);
  const d = new DataView(bytes.buffer);
  d.setBigUint64(0, 0x100n, true);
  d.setUint32(8, 16, true);
  d.setUint16(12, 1, true); // NEXT, to itself: a loop
  const loop = t.throws(() => walkChain(table, 0, mem, true), { instanceOf: ChainError });
  t.deepEqual([loop?.name, loop?.kind, loop?.reason], ['ChainError', 'chain', 'loop']);
  d.setBigUint64(0, BigInt(2 * MIB), true);
  d.setUint16(12, 0, true);
  // Outside guest memory: the chain's fault, the memory table's error its cause.
  const outside = t.throws(() => walkChain(table, 0, mem, true), { instanceOf: ChainError });
  t.deepEqual([outside?.kind, outside?.reason], ['chain', 'out-of-memory-table']);
  t.is((outside?.cause as VhostUserError | undefined)?.kind, 'memory');
  t.true(outside?.cause instanceof MemoryError);
  const rec = InflightRecord.create(8, 0, 0);
  t.teardown(() => rec.close());
  const e = t.throws(() => InflightRecord.open(new Fd(native.dup(rec.fd.value)), 4)) as VhostUserError;
  t.is(e.kind, 'ring');
  t.regex(e.message, /for 8 entries, not 4/);
});
