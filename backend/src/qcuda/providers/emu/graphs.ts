// An emu context's CUDA graphs with conditional nodes. Refs are ids, as for
// arrays: they cross to a session's worker and back. Work completes when
// enqueued here, so a launch runs the whole graph before it resolves, in
// stream order like any other call.
import { performance } from 'node:perf_hooks';
import { CudaErr, CudaError } from '../../cuda-error';
import { COND_ASSIGN_DEFAULT } from '../../cuda-formats';
import type { DevPtr, Extent, GraphExecRef, GraphNodeSpec, GraphRef, GraphSpec, Place, Pos } from '../../provider';
import { copyViews, pattern } from './views';
import type { EmuEvent } from './streams';

/** cudaGraphCondType */
const COND_IF = 0;
const COND_WHILE = 1;
/** cudaErrorLaunchTimeout (CudaErr does not name it). */
const LAUNCH_TIMEOUT = 702;
/**
 * Iterations one WHILE node may run per launch. Only kernels set conditions
 * and none run here, so a WHILE that goes round once goes round forever: fail
 * it as a GPU's watchdog would, rather than hang the session.
 */
const MAX_WHILE_ITERATIONS = 1_000_000;
/**
 * What WHILE bodies may do in one launch, in units of a node run or 512 bytes
 * written: the iteration bound alone would let a body of thousands of nodes,
 * or of large memsets, hold the backend's event loop for hours (this provider
 * runs in it, synchronously). About a second of work; a one-node body meets
 * MAX_WHILE_ITERATIONS first.
 */
const MAX_LOOP_WORK = 2_000_000;
const LOOP_WORK_BYTES = 512n;

/** A conditional handle: what a launch starts it at, and its current value. */
export interface EmuCond {
  defaultValue: number;
  assignDefault: boolean;
  value: number;
}

/** A graph (GRAPH_CREATE): only where conditional handles live; the nodes come at instantiation. */
interface HostGraph {
  conds: Map<bigint, EmuCond>;
}

/**
 * An executable graph: a copy of its spec, each body's node indices
 * (bodies.get(-1)![0]: the graph itself; bodies.get(i)![b]: body b of
 * conditional node i), and its own conditions (CUDA keeps their values per
 * executable graph, so they outlive the graph they were made on).
 */
interface HostGraphExec {
  spec: GraphSpec;
  bodies: Map<number, number[][]>;
  conds: Map<bigint, EmuCond>;
  hasKernel: boolean;
}

/** One launch of an executable graph: how deep in WHILE bodies it is, and the work they have done. */
interface GraphRun {
  exec: HostGraphExec;
  loops: number;
  loopWork: number;
}

/** The error every kernel call gets here. */
export function noKernels(): CudaError {
  return new CudaError(CudaErr.InvalidResourceHandle, 'the emu provider has no kernels');
}

/** Counts a node run inside a WHILE body against the launch's MAX_LOOP_WORK. */
function chargeLoopWork(r: GraphRun, n: GraphNodeSpec): void {
  const bytes = n.type === 'memcpy' ? n.width * n.height * n.depth : n.type === 'memset' ? n.width * BigInt(n.elem) * n.height : 0n;
  r.loopWork += 1 + Number(bytes / LOOP_WORK_BYTES);
  if (r.loopWork > MAX_LOOP_WORK)
    throw new CudaError(
      LAUNCH_TIMEOUT,
      `graph: while bodies did more than ${MAX_LOOP_WORK} units of work (node runs, 512 bytes written) in one launch`,
    );
}

/** What graph nodes do to the context's memory. */
export interface GraphTarget {
  /** A 2D/3D copy between places, memmove semantics. */
  copyBox(dst: Place, dstPos: Pos, src: Place, srcPos: Pos, e: Extent): void;
  views(ptr: DevPtr, size: bigint): Uint8Array[];
}

/** Graph ids and conditional handles, unique in the process, as arrays' (arrays.ts). */
let nextGraph = 1;
let nextCond = 0xc0d0000001n;

export class EmuGraphs {
  /** Graphs and executable graphs, by id (one numbering: neither passes for the other). */
  readonly #graphs = new Map<number, HostGraph>();
  readonly #execs = new Map<number, HostGraphExec>();

  constructor(private readonly target: GraphTarget) {}

  create(): GraphRef {
    const id = nextGraph++;
    this.#graphs.set(id, { conds: new Map() });
    return id;
  }

  destroy(g: GraphRef): void {
    this.#graph(g);
    this.#graphs.delete(g as number); // its executable graphs hold their own copies
  }

  condHandle(g: GraphRef, defaultValue: number, flags: number): bigint {
    const h = nextCond++;
    this.#graph(g).conds.set(h, { defaultValue, assignDefault: (flags & COND_ASSIGN_DEFAULT) !== 0, value: defaultValue });
    return h;
  }

  instantiate(g: GraphRef, spec: GraphSpec): GraphExecRef {
    const graph = this.#graph(g);
    const nodes = spec.nodes.map((n) => (n.type === 'kernel' ? { ...n, params: n.params.slice() } : { ...n })); // params view the staged image
    const bodies = new Map<number, number[][]>([[-1, [[]]]]);
    const conds = new Map<bigint, EmuCond>();
    nodes.forEach((n, i) => {
      // Parents come first (the dispatcher checked), so a node's body list exists when it is reached.
      const body = bodies.get(n.parent)?.[n.body];
      if (body === undefined) throw new CudaError(CudaErr.InvalidValue, `graph: node ${i} is in no body of a conditional node before it`);
      body.push(i);
      if (n.type !== 'cond') return;
      const c = graph.conds.get(n.handle);
      if (c === undefined)
        throw new CudaError(CudaErr.InvalidValue, `graph: node ${i}: conditional handle 0x${n.handle.toString(16)} is not this graph's`);
      conds.set(n.handle, { ...c, value: c.defaultValue });
      bodies.set(
        i,
        Array.from({ length: n.size }, () => []),
      );
    });
    const id = nextGraph++;
    this.#execs.set(id, { spec: { nodes, edges: spec.edges.slice() }, bodies, conds, hasKernel: nodes.some((n) => n.type === 'kernel') });
    return id;
  }

  execDestroy(x: GraphExecRef): void {
    this.#exec(x);
    this.#execs.delete(x as number);
  }

  launch(x: GraphExecRef): void {
    const e = this.#exec(x);
    if (e.hasKernel) throw noKernels(); // as launch() would, before any node runs: no half-run graph
    for (const c of e.conds.values()) if (c.assignDefault) c.value = c.defaultValue;
    this.#runBody({ exec: e, loops: 0, loopWork: 0 }, e.bodies.get(-1)![0]);
  }

  #graph(g: GraphRef): HostGraph {
    const x = typeof g === 'number' ? this.#graphs.get(g) : undefined;
    if (!x) throw new CudaError(CudaErr.InvalidValue, `not a graph of this context: ${String(g)}`);
    return x;
  }

  #exec(x: GraphExecRef): HostGraphExec {
    const e = typeof x === 'number' ? this.#execs.get(x) : undefined;
    if (!e) throw new CudaError(CudaErr.InvalidValue, `not an executable graph of this context: ${String(x)}`);
    return e;
  }

  /**
   * One body's nodes in index order: every edge runs from a lower index to a
   * higher one inside its body (the dispatcher checked), so that order keeps
   * every dependency, and nodes run one at a time here anyway.
   */
  #runBody(r: GraphRun, body: readonly number[]): void {
    for (const i of body) this.#runNode(r, i);
  }

  #runNode(r: GraphRun, i: number): void {
    const n = r.exec.spec.nodes[i];
    if (r.loops > 0) chargeLoopWork(r, n);
    switch (n.type) {
      case 'memcpy': {
        const zero = { x: 0n, y: 0n, z: 0n };
        this.target.copyBox(
          { ptr: n.dst, pitch: n.dstPitch, rows: n.dstRows },
          zero,
          { ptr: n.src, pitch: n.srcPitch, rows: n.srcRows },
          zero,
          n,
        );
        return;
      }
      case 'memset': {
        const row = pattern(n.value, n.elem, Number(n.width));
        for (let y = 0n; y < n.height; y++) copyViews(this.target.views(n.dst + y * n.pitch, BigInt(row.length)), [row]);
        return;
      }
      case 'eventRecord':
        (n.event as EmuEvent).at = performance.now(); // as eventRecord()
        return;
      case 'eventWait': // as streamWaitEvent(): recorded work is already done
      case 'empty':
        return;
      case 'kernel':
        throw noKernels(); // graphLaunch refused it already
      case 'cond':
        return this.#runCond(r, i, n);
    }
  }

  /** A conditional node: which body runs (and how often) by its handle's value now. */
  #runCond(r: GraphRun, i: number, n: Extract<GraphNodeSpec, { type: 'cond' }>): void {
    const c = r.exec.conds.get(n.handle)!;
    const bodies = r.exec.bodies.get(i)!;
    if (n.condType === COND_IF) {
      const b = c.value !== 0 ? 0 : 1; // body 1: the else branch, where there is one
      if (b < n.size) this.#runBody(r, bodies[b]);
    } else if (n.condType === COND_WHILE) {
      r.loops++;
      for (let k = 0; c.value !== 0; k++) {
        if (k === MAX_WHILE_ITERATIONS)
          throw new CudaError(
            LAUNCH_TIMEOUT,
            `graph: while node ${i} still true after ${MAX_WHILE_ITERATIONS} iterations (no kernel runs here to end it)`,
          );
        this.#runBody(r, bodies[0]);
      }
      r.loops--;
    } else if (c.value < n.size) {
      this.#runBody(r, bodies[c.value]); // switch: no body for a value past the last
    }
  }

  /** Graph g's conditional handles, or an executable graph's spec and conditions (migration/). */
  condsOf(g: GraphRef): Map<bigint, EmuCond> {
    return this.#graph(g).conds;
  }

  execOf(x: GraphExecRef): { spec: GraphSpec; conds: Map<bigint, EmuCond> } {
    const e = this.#exec(x);
    return { spec: e.spec, conds: e.conds };
  }

  /** A migrated graph: its conditional handles as at its source (the guest holds them). */
  adoptGraph(conds: Map<bigint, EmuCond>): GraphRef {
    for (const h of conds.keys()) if (h >= nextCond) nextCond = h + 1n;
    const id = nextGraph++;
    this.#graphs.set(id, { conds });
    return id;
  }

  /** A migrated executable graph: spec instantiated over conds, then their values as they were. */
  adoptExec(spec: GraphSpec, conds: Map<bigint, EmuCond>): GraphExecRef {
    const g = this.adoptGraph(conds);
    try {
      const x = this.instantiate(g, spec);
      for (const [h, c] of this.#exec(x).conds) c.value = conds.get(h)!.value;
      return x;
    } finally {
      this.#graphs.delete(g as number);
    }
  }

  clear(): void {
    this.#graphs.clear();
    this.#execs.clear();
  }
}
