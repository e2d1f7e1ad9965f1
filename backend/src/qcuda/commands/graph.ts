// Graphs with conditional nodes. A conditional node's condition is set by a
// kernel through the driver (cudaGraphSetConditional), so such a graph cannot
// be run by the guest library step by step, as it runs other graphs: it
// becomes a CUDA graph of the session's context. The library describes the
// graph's nodes once, at instantiation (staged like a module image, since
// kernels' parameters may make it large); every node is checked here as the
// call it stands for would be (ranges inside the session's memory, handles
// the session's, a kernel's parameters its layout's size), and the structure
// (parents before bodies, edges inside one body, forwards only) before the
// provider builds anything.
import type { Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import { COND_ASSIGN_DEFAULT } from '../cuda-formats';
import {
  decode,
  LAYOUT,
  QCUDA_GNODE_COND,
  QCUDA_GNODE_EMPTY,
  QCUDA_GNODE_EVENT_RECORD,
  QCUDA_GNODE_EVENT_WAIT,
  QCUDA_GNODE_KERNEL,
  QCUDA_GNODE_MEMCPY,
  QCUDA_GNODE_MEMSET,
  QCUDA_GRAPH_TOP,
  QCUDA_MAX_GRAPH_NODES,
  type Decoded,
} from '../proto';
import type { GraphNodeSpec, GraphSpec } from '../provider';
import type { Session } from '../session/session';
import { MAX_CLUSTER_BLOCKS } from './launch';
import { MAX_COND_HANDLES, type SessionGraph } from '../session/session-objects';

const NODE_BYTES = LAYOUT.qcuda_graph_node.size;
const EDGE_BYTES = LAYOUT.qcuda_graph_edge.size;
/** Bodies one switch node may have (each is a graph the driver makes). */
export const MAX_SWITCH_BODIES = 256;

const inval = (what: string): CudaError => new CudaError(CudaErr.InvalidValue, `graph: ${what}`);

/** Bytes a box of width x height x depth covers, rows pitch apart and slices pitch * rows apart. */
function span(width: bigint, height: bigint, depth: bigint, pitch: bigint, rows: bigint): bigint {
  return (depth - 1n) * pitch * rows + (height - 1n) * pitch + width;
}

type KernelNode = Omit<Extract<GraphNodeSpec, { type: 'kernel' }>, 'parent' | 'body'>;

function kernelNode(s: Session, n: Decoded<'qcuda_graph_node'>, params: Uint8Array, i: number): KernelNode {
  const f = s.modules.func(n.handle);
  if (n.param_bytes !== f.paramBytes) throw inval(`node ${i}: ${n.param_bytes} parameter bytes for a kernel taking ${f.paramBytes}`);
  const end = n.param_off + BigInt(n.param_bytes);
  if (end > BigInt(params.length))
    throw inval(`node ${i}: parameters ${n.param_off}+${n.param_bytes} outside the ${params.length} bytes sent`);
  if ([...n.grid, ...n.block].some((d) => d === 0))
    throw new CudaError(CudaErr.InvalidConfiguration, `graph: node ${i}: a grid or block dimension of 0`);
  const [cx, cy, cz] = n.cluster;
  if (cx === 0 || cy === 0 || cz === 0 || cx * cy * cz > MAX_CLUSTER_BLOCKS)
    throw inval(`node ${i}: a cluster of ${cx}x${cy}x${cz} blocks`);
  return {
    type: 'kernel',
    f: f.ref,
    grid: [n.grid[0], n.grid[1], n.grid[2]],
    block: [n.block[0], n.block[1], n.block[2]],
    sharedMem: n.shared_mem,
    params: params.subarray(Number(n.param_off), Number(end)),
    cluster: [cx, cy, cz],
  };
}

/** One node, checked as the call it stands for; parent and body are checked by the caller. */
function nodeOf(s: Session, g: SessionGraph, n: Decoded<'qcuda_graph_node'>, params: Uint8Array, i: number): GraphNodeSpec {
  const where = { parent: n.parent === QCUDA_GRAPH_TOP ? -1 : n.parent, body: n.body };
  switch (n.type) {
    case QCUDA_GNODE_KERNEL:
      return { ...where, ...kernelNode(s, n, params, i) };
    case QCUDA_GNODE_MEMCPY: {
      const { width, height, depth, pitch, rows, src_pitch: sp, src_rows: sr } = n;
      if (width === 0n || height === 0n || depth === 0n) throw inval(`node ${i}: a copy of ${width}x${height}x${depth}`);
      if (pitch < width || sp < width || rows < height || sr < height)
        throw inval(`node ${i}: pitches ${pitch}/${sp} or rows ${rows}/${sr} below the box`);
      s.checkRange(n.dst, span(width, height, depth, pitch, rows), `graph node ${i}: copy destination`);
      s.checkRange(n.src, span(width, height, depth, sp, sr), `graph node ${i}: copy source`);
      return {
        ...where,
        type: 'memcpy',
        dst: n.dst,
        src: n.src,
        dstPitch: pitch,
        dstRows: rows,
        srcPitch: sp,
        srcRows: sr,
        width,
        height,
        depth,
      };
    }
    case QCUDA_GNODE_MEMSET: {
      const { width, height, pitch, elem } = n;
      if (elem !== 1 && elem !== 2 && elem !== 4) throw inval(`node ${i}: memset element of ${elem} bytes`);
      if (width === 0n || height === 0n) throw inval(`node ${i}: a memset of ${width}x${height}`);
      const row = width * BigInt(elem);
      if (pitch < row) throw new CudaError(CudaErr.InvalidPitchValue, `graph: node ${i}: pitch ${pitch} below a row of ${row} bytes`);
      s.checkRange(n.dst, (height - 1n) * pitch + row, `graph node ${i}: memset destination`);
      return {
        ...where,
        type: 'memset',
        dst: n.dst,
        pitch,
        value: elem === 4 ? n.value : n.value & (elem === 2 ? 0xffff : 0xff),
        elem,
        width,
        height,
      };
    }
    case QCUDA_GNODE_EMPTY:
      return { ...where, type: 'empty' };
    case QCUDA_GNODE_EVENT_RECORD:
    case QCUDA_GNODE_EVENT_WAIT:
      return { ...where, type: n.type === QCUDA_GNODE_EVENT_RECORD ? 'eventRecord' : 'eventWait', event: s.event(n.handle) };
    case QCUDA_GNODE_COND: {
      if (!g.conds.has(n.handle)) throw inval(`node ${i}: conditional handle 0x${n.handle.toString(16)} was not made on this graph`);
      const most = [2, 1, MAX_SWITCH_BODIES][n.cond_type];
      if (most === undefined) throw inval(`node ${i}: conditional type ${n.cond_type}`);
      if (n.size < 1 || n.size > most) throw inval(`node ${i}: ${n.size} bodies for conditional type ${n.cond_type}`);
      return { ...where, type: 'cond', handle: n.handle, condType: n.cond_type, size: n.size };
    }
    default:
      throw inval(`node ${i}: type ${n.type}`);
  }
}

/** The staged description of GRAPH_INSTANTIATE, checked whole; localBytes: the most local memory a thread of its kernels needs. */
export function graphSpec(
  s: Session,
  g: SessionGraph,
  bytes: Uint8Array,
  nodeCount: number,
  edgeCount: number,
): GraphSpec & { localBytes: number } {
  if (nodeCount > QCUDA_MAX_GRAPH_NODES || edgeCount > QCUDA_MAX_GRAPH_NODES)
    throw inval(`${nodeCount} nodes, ${edgeCount} edges (at most ${QCUDA_MAX_GRAPH_NODES} each)`);
  const edgesAt = nodeCount * NODE_BYTES;
  const paramsAt = edgesAt + edgeCount * EDGE_BYTES;
  if (paramsAt > bytes.length) throw inval(`${nodeCount} nodes and ${edgeCount} edges do not fit in ${bytes.length} bytes`);
  const params = bytes.subarray(paramsAt);
  const nodes: GraphNodeSpec[] = [];
  let bodies = 0;
  let localBytes = 0;
  for (let i = 0; i < nodeCount; i++) {
    const n = decode('qcuda_graph_node', bytes.subarray(i * NODE_BYTES, (i + 1) * NODE_BYTES));
    if (n.parent !== QCUDA_GRAPH_TOP) {
      const p = n.parent < i ? nodes[n.parent] : undefined;
      if (p?.type !== 'cond' || n.body >= p.size)
        throw inval(`node ${i}: parent ${n.parent}, body ${n.body} is no conditional node's body before it`);
    } else if (n.body !== 0) {
      throw inval(`node ${i}: body ${n.body} outside a conditional node`);
    }
    const node = nodeOf(s, g, n, params, i);
    if (n.type === QCUDA_GNODE_KERNEL) localBytes = Math.max(localBytes, s.modules.func(n.handle).localBytes);
    if (node.type === 'cond' && (bodies += node.size) > QCUDA_MAX_GRAPH_NODES) throw inval(`more than ${QCUDA_MAX_GRAPH_NODES} bodies`);
    nodes.push(node);
  }
  const edges = new Uint32Array(edgeCount * 2);
  for (let i = 0; i < edgeCount; i++) {
    const e = decode('qcuda_graph_edge', bytes.subarray(edgesAt + i * EDGE_BYTES, edgesAt + (i + 1) * EDGE_BYTES));
    const a = nodes[e.from];
    const b = e.to < nodeCount ? nodes[e.to] : undefined;
    if (e.from >= e.to || b === undefined || a.parent !== b.parent || a.body !== b.body)
      throw inval(`edge ${i} (${e.from} -> ${e.to}) is not forwards inside one body`);
    edges[2 * i] = e.from;
    edges[2 * i + 1] = e.to;
  }
  return { nodes, edges, localBytes };
}

export const RUNS: Runs<
  'GRAPH_CREATE' | 'GRAPH_DESTROY' | 'GRAPH_COND_HANDLE' | 'GRAPH_INSTANTIATE' | 'GRAPH_EXEC_DESTROY' | 'GRAPH_LAUNCH'
> = {
  async GRAPH_CREATE(c) {
    c.session.objects.checkGraphRoom();
    const x = await c.session.context();
    const ref = await x.graphCreate();
    try {
      return { value: c.session.objects.addGraph(x, ref) };
    } catch (e) {
      await x.graphDestroy(ref).catch(() => undefined); // a reset meanwhile: the context's destruction takes it anyway
      throw e;
    }
  },

  async GRAPH_DESTROY(c) {
    const g = c.session.objects.takeGraph(c.args.handle);
    await (await c.session.context()).graphDestroy(g.ref);
  },

  async GRAPH_COND_HANDLE(c) {
    const g = c.session.objects.graph(c.args.graph);
    if (c.args.flags & ~COND_ASSIGN_DEFAULT) throw inval(`conditional handle flags 0x${c.args.flags.toString(16)}`);
    if (g.conds.size >= MAX_COND_HANDLES)
      throw new CudaError(CudaErr.MemoryAllocation, `graph: ${MAX_COND_HANDLES} conditional handles on one graph`);
    const h = await (await c.session.context()).graphCondHandle(g.ref, c.args.default_value, c.args.flags);
    g.conds.add(h);
    return { value: h };
  },

  async GRAPH_INSTANTIATE(c) {
    const s = c.session;
    const { image } = s.modules.takeUpload(c.args.upload_id);
    if (BigInt(image.length) !== c.args.size) throw inval(`${image.length} bytes staged, size says ${c.args.size}`);
    const g = s.objects.graph(c.args.graph);
    const { localBytes, ...spec } = graphSpec(s, g, image, c.args.nodes, c.args.edges);
    s.objects.checkGraphRoom();
    // Its kernels' local memory, counted here for every launch of the executable graph (Session.chargeLocal).
    s.chargeLocal(localBytes);
    const x = await s.context();
    const ref = await x.graphInstantiate(g.ref, spec);
    try {
      return { value: s.objects.addGraphExec(x, ref) };
    } catch (e) {
      await x.graphExecDestroy(ref).catch(() => undefined);
      throw e;
    }
  },

  async GRAPH_EXEC_DESTROY(c) {
    const ref = c.session.objects.takeGraphExec(c.args.handle);
    await (await c.session.context()).graphExecDestroy(ref);
  },

  async GRAPH_LAUNCH(c) {
    const ref = c.session.objects.graphExec(c.args.exec);
    const stream = c.session.stream(c.args.stream);
    await (await c.session.context()).graphLaunch(ref, stream);
  },
};
