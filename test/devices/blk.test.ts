// The GPU disk (backend/src/devices/blk.ts) driven through the test
// frontend on its host store (the emu provider's memory): what is written
// reads back, on several queues at once; discard and write-zeroes read back
// as zeroes; GET_ID, FLUSH and the config space; every malformed or
// out-of-range request gets an error status and leaves the disk as it was;
// a read-only disk refuses writes.
import test, { type ExecutionContext } from 'ava';
import { BLK_CONFIG_SIZE, BlkDevice, BlkS, BlkT, SECTOR } from '../../backend/src/devices/blk';
import { ProviderStore } from '../../backend/src/devices/blk-store';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import type { Frontend, GuestBuf } from '../../backend/src/vhost-user/frontend';
import { prng, randomBytes, started } from '../helpers';

const SIZE = 8n << 20n;

async function disk(t: ExecutionContext, o: { readOnly?: boolean; queues?: number } = {}) {
  const provider = new EmuProvider();
  const store = await ProviderStore.open(provider, SIZE);
  const dev = new BlkDevice({ store, queues: o.queues ?? 4, readOnly: o.readOnly, provider });
  const { fe } = await started(t, dev, { size: 64 });
  t.teardown(() => dev.close());
  return { dev, fe };
}

function header(fe: Frontend, type: number, sector: bigint): GuestBuf {
  const gpa = fe.mem.alloc(16, 8);
  const v = new DataView(fe.mem.bytes(gpa, 16).buffer, fe.mem.bytes(gpa, 16).byteOffset, 16);
  v.setUint32(0, type, true);
  v.setUint32(4, 0, true);
  v.setBigUint64(8, sector, true);
  return { gpa, len: 16 };
}

/** One request: header, then readable data, then writable data and the status byte; resolves to the status and what was written. */
async function req(fe: Frontend, q: number, type: number, sector: bigint, o: { out?: Uint8Array; inLen?: number; pieces?: number } = {}) {
  const bufs: GuestBuf[] = [header(fe, type, sector)];
  const pieces = o.pieces ?? 1;
  if (o.out) {
    const gpa = fe.mem.alloc(o.out.length, 512);
    fe.mem.bytes(gpa, o.out.length).set(o.out);
    const step = Math.ceil(o.out.length / pieces);
    for (let at = 0; at < o.out.length; at += step) bufs.push({ gpa: gpa + BigInt(at), len: Math.min(step, o.out.length - at) });
  }
  let inGpa = 0n;
  if (o.inLen) {
    inGpa = fe.mem.alloc(o.inLen, 512);
    fe.mem.bytes(inGpa, o.inLen).fill(0xee);
    const step = Math.ceil(o.inLen / pieces);
    for (let at = 0; at < o.inLen; at += step) bufs.push({ gpa: inGpa + BigInt(at), len: Math.min(step, o.inLen - at), write: true });
  }
  const st = fe.mem.alloc(1, 1);
  fe.mem.bytes(st, 1)[0] = 0xff;
  bufs.push({ gpa: st, len: 1, write: true });
  const used = await fe.submit(q, bufs);
  return { status: fe.mem.bytes(st, 1)[0], used: used.len, data: o.inLen ? fe.mem.bytes(inGpa, o.inLen).slice() : new Uint8Array(0) };
}

function segments(list: [bigint, number, number][]): Uint8Array {
  const b = new Uint8Array(16 * list.length);
  const v = new DataView(b.buffer);
  list.forEach(([sector, n, flags], i) => {
    v.setBigUint64(16 * i, sector, true);
    v.setUint32(16 * i + 8, n, true);
    v.setUint32(16 * i + 12, flags, true);
  });
  return b;
}

test('config space and features: capacity in sectors, queues, discard and write-zeroes limits', async (t) => {
  const { dev, fe } = await disk(t);
  const c = await fe.getConfig(0, BLK_CONFIG_SIZE);
  const v = new DataView(c.buffer, c.byteOffset, c.length);
  t.is(v.getBigUint64(0, true), SIZE / SECTOR);
  t.is(v.getUint32(20, true), 512);
  t.is(v.getUint16(34, true), 4);
  t.true(v.getUint32(36, true) > 0 && v.getUint32(40, true) > 0);
  for (const bit of [2, 6, 9, 12, 13, 14]) t.true((dev.features >> BigInt(bit)) & 1n ? true : false, `feature ${bit}`);
  t.is((dev.features >> 5n) & 1n, 0n, 'not read-only');
});

test('what is written reads back, across pieces and queues, many requests at once', async (t) => {
  const { fe } = await disk(t);
  const rnd = prng(11);
  const blocks = new Map<number, Uint8Array>();
  const jobs: Promise<void>[] = [];
  for (let k = 0; k < 64; k++) {
    const sectors = 1 + ((rnd() * 16) | 0);
    const sector = k * 32;
    const data = randomBytes(rnd, sectors * 512);
    blocks.set(sector, data);
    jobs.push(req(fe, k % 4, BlkT.OUT, BigInt(sector), { out: data, pieces: 1 + (k % 3) }).then((r) => void t.is(r.status, BlkS.OK)));
  }
  await Promise.all(jobs);
  t.is((await req(fe, 0, BlkT.FLUSH, 0n)).status, BlkS.OK);
  await Promise.all(
    [...blocks].map(async ([sector, data], k) => {
      const r = await req(fe, (k + 1) % 4, BlkT.IN, BigInt(sector), { inLen: data.length, pieces: 1 + (k % 4) });
      t.is(r.status, BlkS.OK);
      t.is(r.used, data.length + 1);
      t.deepEqual(r.data, data);
    }),
  );
  // The last sector of the disk, too.
  const last = randomBytes(rnd, 512);
  t.is((await req(fe, 1, BlkT.OUT, SIZE / SECTOR - 1n, { out: last })).status, BlkS.OK);
  t.deepEqual((await req(fe, 2, BlkT.IN, SIZE / SECTOR - 1n, { inLen: 512 })).data, last);
});

test('discard and write-zeroes read back as zeroes, only where asked', async (t) => {
  const { fe } = await disk(t);
  const ones = new Uint8Array(64 * 512).fill(1);
  t.is((await req(fe, 0, BlkT.OUT, 100n, { out: ones })).status, BlkS.OK);
  t.is((await req(fe, 0, BlkT.DISCARD, 0n, { out: segments([[104n, 8, 0]]) })).status, BlkS.OK);
  t.is(
    (
      await req(fe, 1, BlkT.WRITE_ZEROES, 0n, {
        out: segments([
          [120n, 4, 1],
          [130n, 2, 0],
        ]),
      })
    ).status,
    BlkS.OK,
  );
  const r = await req(fe, 0, BlkT.IN, 100n, { inLen: 64 * 512 });
  const zeroAt = (s: number) => (s >= 4 && s < 12) || (s >= 20 && s < 24) || (s >= 30 && s < 32);
  for (let s = 0; s < 64; s++) t.is(r.data[s * 512], zeroAt(s) ? 0 : 1, `sector ${100 + s}`);
});

test('GET_ID gives the serial', async (t) => {
  const { fe } = await disk(t);
  const r = await req(fe, 0, BlkT.GET_ID, 0n, { inLen: 20 });
  t.is(r.status, BlkS.OK);
  t.is(Buffer.from(r.data).toString('latin1').replace(/\0+$/, ''), 'qcuda-gpu-disk');
});

test('bad requests get an error status and change nothing; the disk serves on', async (t) => {
  const { dev, fe } = await disk(t);
  const mark = new Uint8Array(512).fill(7);
  t.is((await req(fe, 0, BlkT.OUT, 10n, { out: mark })).status, BlkS.OK);
  const end = SIZE / SECTOR;
  const cases: [string, Promise<{ status: number }>, number][] = [
    ['a write past the end', req(fe, 0, BlkT.OUT, end, { out: new Uint8Array(512) }), BlkS.IOERR],
    ['a write that ends past the end', req(fe, 1, BlkT.OUT, end - 1n, { out: new Uint8Array(1024) }), BlkS.IOERR],
    ['a read past the end', req(fe, 2, BlkT.IN, end, { inLen: 512 }), BlkS.IOERR],
    ['a read at a sector near 2^64', req(fe, 3, BlkT.IN, (1n << 64n) - 1n, { inLen: 512 }), BlkS.IOERR],
    ['a write of part of a sector', req(fe, 0, BlkT.OUT, 10n, { out: new Uint8Array(100) }), BlkS.IOERR],
    ['an unknown request type', req(fe, 1, 99, 0n), BlkS.UNSUPP],
    ['a discard segment past the end', req(fe, 2, BlkT.DISCARD, 0n, { out: segments([[end - 1n, 2, 0]]) }), BlkS.IOERR],
    ['a discard with the unmap flag', req(fe, 3, BlkT.DISCARD, 0n, { out: segments([[10n, 1, 1]]) }), BlkS.UNSUPP],
    ['a discard of a partial segment', req(fe, 0, BlkT.DISCARD, 0n, { out: new Uint8Array(10) }), BlkS.IOERR],
    [
      'a discard of too many segments',
      req(fe, 1, BlkT.DISCARD, 0n, { out: segments(Array.from({ length: 33 }, (_, i) => [BigInt(i), 1, 0] as [bigint, number, number])) }),
      BlkS.IOERR,
    ],
  ];
  for (const [what, p, want] of cases) t.is((await p).status, want, what);
  // A chain with no status byte or no header fails as a whole (used length 0), not the device.
  const noHeader = await fe.submit(0, [
    { gpa: fe.mem.alloc(8), len: 8 },
    { gpa: fe.mem.alloc(1), len: 1, write: true },
  ]);
  t.is(noHeader.len, 0);
  const noStatus = await fe.submit(0, [header(fe, BlkT.IN, 0n)]);
  t.is(noStatus.len, 0);
  t.deepEqual((await req(fe, 2, BlkT.IN, 10n, { inLen: 512 })).data, mark, 'sector 10 as written');
  t.true(dev.counts.ioerr >= 8 && dev.counts.unsupp >= 2);
});

test('a read-only disk refuses writes, discards and write-zeroes, and serves reads', async (t) => {
  const { dev, fe } = await disk(t, { readOnly: true });
  t.is((dev.features >> 5n) & 1n, 1n, 'VIRTIO_BLK_F_RO');
  t.is((await req(fe, 0, BlkT.OUT, 0n, { out: new Uint8Array(512) })).status, BlkS.IOERR);
  t.is((await req(fe, 0, BlkT.DISCARD, 0n, { out: segments([[0n, 1, 0]]) })).status, BlkS.IOERR);
  t.is((await req(fe, 0, BlkT.WRITE_ZEROES, 0n, { out: segments([[0n, 1, 0]]) })).status, BlkS.IOERR);
  const r = await req(fe, 0, BlkT.IN, 0n, { inLen: 1024 });
  t.is(r.status, BlkS.OK);
  t.deepEqual(r.data, new Uint8Array(1024), 'a new disk reads as zeroes');
});

test('a disk larger than the store can hold is refused at start with a clear error', async (t) => {
  await t.throwsAsync(ProviderStore.open(new EmuProvider({ totalMem: 1n << 20n }), 4n << 20n), { message: /does not fit/ });
});
