// A guest graph as the addon's graphInstantiate takes it (addon/src/cuda_ctx_graphs.cc reads
// the records): a record of u64 fields per node, and the kernels' parameters one after another.
import type { EventRef, FunctionRef, GraphSpec } from '../../provider';

/** The addon's ids of a kernel's function and an event node's event. */
export interface GraphIds {
  func: (f: FunctionRef) => number;
  event: (e: EventRef) => number;
}

/** u64 fields per node record of graphInstantiate (addon/src/cuda_ctx_graphs.cc reads them). */
const GRAPH_RECORD = 16;
const GRAPH_TYPES = { kernel: 1, memcpy: 2, memset: 3, empty: 4, eventRecord: 5, eventWait: 6, cond: 7 } as const;

/** A graph's nodes as the addon takes them: records, and the kernels' parameters one after another. */
export function graphRecords(spec: GraphSpec, ids: GraphIds): { records: BigUint64Array; params: Uint8Array } {
  const records = new BigUint64Array(spec.nodes.length * GRAPH_RECORD);
  const params = new Uint8Array(spec.nodes.reduce((n, x) => n + (x.type === 'kernel' ? x.params.length : 0), 0));
  let at = 0;
  spec.nodes.forEach((n, i) => {
    let f: (number | bigint)[];
    switch (n.type) {
      case 'kernel':
        params.set(n.params, at);
        f = [ids.func(n.f), ...n.grid, ...n.block, n.sharedMem, at, n.params.length, ...n.cluster];
        at += n.params.length;
        break;
      case 'memcpy':
        f = [n.dst, n.src, n.dstPitch, n.dstRows, n.srcPitch, n.srcRows, n.width, n.height, n.depth];
        break;
      case 'memset':
        f = [n.dst, n.pitch, n.value, n.elem, n.width, n.height];
        break;
      case 'empty':
        f = [];
        break;
      case 'eventRecord':
      case 'eventWait':
        f = [ids.event(n.event)];
        break;
      case 'cond':
        f = [n.handle, n.condType, n.size];
        break;
    }
    const head = [GRAPH_TYPES[n.type], n.parent < 0 ? 0xffffffff : n.parent, n.body];
    records.set([...head, ...f].map(BigInt), i * GRAPH_RECORD);
  });
  return { records, params };
}
