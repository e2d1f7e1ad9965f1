// Guest memory lookups (memory.ts). Where the region and the range lie
// below 2^52 they are compared as numbers, elsewhere as bigints: both ways
// must find the same bytes and refuse the same ranges, at the edges of a
// region and of 2^52, and for addresses no region holds.
import test, { type ExecutionContext } from 'ava';
import { Fd, MemoryError, MemoryTable } from '../../backend/src/vhost-user';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';

const MIB = 1 << 20;
const LIMIT = 1n << 52n;

function mapped(t: ExecutionContext, specs: { gpa: bigint; size: number }[]): { guest: GuestMemory; mem: MemoryTable } {
  const guest = new GuestMemory(specs);
  const mem = new MemoryTable();
  t.teardown(async () => {
    await mem.clear();
    guest.close();
  });
  for (const r of guest.regions) mem.add(r, new Fd(guest.fd.value));
  return { guest, mem };
}

// A region below 2^52 (numbers), one across it and one far above it (bigints).
const REGIONS = [
  { gpa: 0n, size: MIB },
  { gpa: LIMIT - 4096n, size: MIB },
  { gpa: 1n << 62n, size: MIB },
];

test('each range of each region reads the bytes written there, its host address one with its views', (t) => {
  const { guest, mem } = mapped(t, REGIONS);
  for (const [i, r] of REGIONS.entries()) {
    for (const off of [0n, 4096n - 8n, BigInt(r.size) - 16n]) {
      const gpa = r.gpa + off;
      guest.bytes(gpa, 16).set([i + 1, ...new Uint8Array(14), 0xee]);
      const [view] = mem.segmentsGpa(gpa, 16);
      t.is(view.length, 16);
      t.is(view[0], i + 1, `region ${i}, offset ${off}: first byte`);
      t.is(view[15], 0xee, `region ${i}, offset ${off}: last byte`);
      const at = mem.hostSegmentsGpa(gpa, 16);
      t.is(at.addr, mem.hostAddressGpa(gpa, 16));
      t.is(at.views[0][0], i + 1);
      t.is(at.addr, mem.regions[i].hostAddress + off);
    }
  }
});

test('ranges past a region, below it, between regions or past 2^64 are refused the same way on both sides of 2^52', (t) => {
  const { mem } = mapped(t, REGIONS);
  for (const r of REGIONS) {
    const end = r.gpa + BigInt(r.size);
    t.throws(() => mem.segmentsGpa(end - 8n, 16), { instanceOf: MemoryError }, `0x${r.gpa.toString(16)}: crosses the end`);
    t.throws(() => mem.segmentsGpa(end, 1), { instanceOf: MemoryError }, `0x${r.gpa.toString(16)}: just past the end`);
    if (r.gpa > 0n) t.throws(() => mem.segmentsGpa(r.gpa - 1n, 2), { instanceOf: MemoryError }, `0x${r.gpa.toString(16)}: starts below`);
    t.notThrows(() => mem.segmentsGpa(end - 16n, 16));
  }
  t.throws(() => mem.segmentsGpa(BigInt(MIB), 1), { instanceOf: MemoryError }, 'between the regions');
  t.throws(() => mem.segmentsGpa(LIMIT + BigInt(MIB), 1), { instanceOf: MemoryError }, 'above 2^52, in no region');
  t.throws(() => mem.segmentsGpa((1n << 64n) - 8n, 16), { instanceOf: MemoryError }, 'past 2^64');
  t.throws(() => mem.hostAddressGpa((1n << 62n) + BigInt(MIB) - 1n, 2), { instanceOf: MemoryError });
});

test('frontend-virtual lookups (rings) go the same way', (t) => {
  const { guest, mem } = mapped(t, REGIONS);
  for (const r of guest.regions) {
    guest.bytes(r.gpa + 32n, 1)[0] = 0x5a;
    t.is(mem.viewVa(r.userAddr + 32n, 8)[0], 0x5a);
    t.throws(() => mem.viewVa(r.userAddr + r.size - 4n, 8), { instanceOf: MemoryError });
  }
});
