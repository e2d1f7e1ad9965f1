// How a session's worker lets go of a region of guest RAM (REM_MEM_REG, or
// a newer region that displaced it), in the order its ring server needs.
//
// The ring server (ring-server.ts, addon/src/cuda_ring_server.cc) resolves
// guest addresses in C through its own list of the regions, given with each
// attach (Vring.remap). That list must never name a region about to be
// unmapped: a request served in the moment between the unmap and the next
// attach would be read from, or written to, memory that is gone (the
// worker faults). So the ring is remapped from the table as soon as the
// region is out of it, before it is unregistered and unmapped; and where
// the ring itself is no longer in the table, the server is left no region
// at all (security review 2, L3).
import createDebug from 'debug';
import type { GuestRegion, MemoryTable } from '../../vhost-user';

const debug = createDebug('qcuda:worker');

/** A queue owner's ring and its ring server, as the regions' changes need them. */
export interface RingOfRegions {
  /** Maps the ring again from the table as it is now, and gives its server the table's regions; throws where the ring is not in it. */
  remap(): void;
  /** Leaves the ring server no region to translate into. */
  forgetRegions(): void;
}

/** The ring as the table now has it; where that fails, its server keeps no region. */
export function remapRing(ring: RingOfRegions | undefined): void {
  if (!ring) return;
  try {
    ring.remap();
  } catch (e) {
    ring.forgetRegions();
    debug('the owned ring is not in the new memory table: %s', (e as Error).message);
  }
}

/**
 * Takes region out of the worker: out of memory's table (if it is still
 * there), the ring remapped without it, then, once no request in flight
 * holds it, unregistered (memory's listener does that for a region of its
 * table; unregister for one displaced from it) and unmapped.
 */
export async function dropRegion(
  memory: MemoryTable,
  region: GuestRegion,
  ring: RingOfRegions | undefined,
  unregister: (hostAddress: bigint) => Promise<void> | void,
): Promise<void> {
  if (memory.regions.includes(region)) {
    const gone = memory.remove(region); // out of the table at once; unmapped later
    remapRing(ring);
    await gone;
    return;
  }
  // Displaced by a newer region: out of the table already (and the ring remapped then), mapped until its requests are done.
  remapRing(ring);
  await new Promise<void>((resolve) => region.whenIdle(resolve));
  await unregister(region.hostAddress);
  region.unmap();
}
