// A session's worker letting go of a region of guest RAM
// (workers/worker-regions.ts; security review 2, L3): its ring server's
// list of regions (the ring remapped from the table) must not name the
// region by the time it is unregistered and unmapped, whether it leaves at
// once, is held by a request in flight, or was displaced by a newer one;
// and where the ring itself is not in the table, the server keeps no region.
import test, { type ExecutionContext } from 'ava';
import { dropRegion, remapRing } from '../../backend/src/qcuda/workers/worker-regions';
import { Fd, MemoryTable, type GuestRegion } from '../../backend/src/vhost-user';
import { GuestMemory } from '../../backend/src/vhost-user/frontend';
import { until } from '../helpers';

const MIB = 1 << 20;

/**
 * A worker's table of two regions, with what happens to region 1 in order:
 * the ring remapped (what the server is given then), its unregistration,
 * and whether it was still mapped at each.
 */
function worker(t: ExecutionContext) {
  const guest = new GuestMemory([
    { gpa: 0n, size: MIB },
    { gpa: 1n << 32n, size: MIB },
  ]);
  const memory = new MemoryTable();
  t.teardown(async () => {
    await memory.clear();
    guest.close();
  });
  for (const r of guest.regions) memory.add(r, new Fd(guest.fd.value));
  const r1 = memory.regions[1];
  const probe = r1.view(0, 1); // no bytes once unmapped
  const mapped = (): string => (probe.byteLength > 0 ? 'mapped' : 'unmapped');
  const events: string[] = [];
  const names = (): string => memory.regions.map((g) => (g === r1 ? 'r1' : `gpa 0x${g.gpa.toString(16)}`)).join(', ');
  const ring = {
    remap: () => void events.push(`server given [${names()}], r1 ${mapped()}`),
    forgetRegions: () => void events.push('server given []'),
  };
  const unregister = (g: GuestRegion): void => void events.push(`${g === r1 ? 'r1' : 'another'} unregistered, r1 ${mapped()}`);
  // As the worker's: unregistration comes with the unmapping.
  memory.listener = { added: () => undefined, removing: (g) => unregister(g) };
  return { guest, memory, r1, events, mapped, ring, unregister };
}

test('REM_MEM_REG: the ring server is given the table without the region before it is unregistered and unmapped, held by a request or not', async (t) => {
  const { memory, r1, events, mapped, ring } = worker(t);
  await dropRegion(memory, r1, ring, () => t.fail('not displaced'));
  t.deepEqual(events, ['server given [gpa 0x0], r1 mapped', 'r1 unregistered, r1 mapped']);
  t.is(mapped(), 'unmapped');
  // Held by a request in flight: out of the server's list at once, unmapped when the request is done.
  const held = worker(t);
  const release = held.memory.hold();
  await dropRegion(held.memory, held.r1, held.ring, () => t.fail('not displaced'));
  t.deepEqual(held.events, ['server given [gpa 0x0], r1 mapped'], 'answered at once, r1 still mapped for the request');
  release();
  t.true(await until(() => held.events.length === 2), 'unregistered once the request let go');
  t.deepEqual(held.events, ['server given [gpa 0x0], r1 mapped', 'r1 unregistered, r1 mapped']);
  t.is(held.mapped(), 'unmapped');
});

test('a region a newer one displaced: the server has the new table before the old region is unregistered and unmapped', async (t) => {
  const { guest, memory, r1, events, mapped, ring, unregister } = worker(t);
  memory.add(guest.regions[1], new Fd(guest.fd.value), { displace: true }); // the same guest RAM, mapped again
  await dropRegion(memory, r1, ring, () => unregister(r1));
  t.deepEqual(events, ['server given [gpa 0x0, gpa 0x100000000], r1 mapped', 'r1 unregistered, r1 mapped']);
  t.is(mapped(), 'unmapped');
});

test('the ring itself no longer in the table: its server keeps no region', (t) => {
  const events: string[] = [];
  remapRing({
    remap: () => {
      throw new Error('vring 1: not in guest memory');
    },
    forgetRegions: () => void events.push('server given []'),
  });
  t.deepEqual(events, ['server given []']);
});
