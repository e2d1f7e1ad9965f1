// A session's CUDA arrays (mipmapped ones and their levels), texture and
// surface objects, graphs and executable graphs. The context's destruction
// frees them all, so a reset or the close only forgets them here.
import { CudaErr, CudaError } from '../cuda-error';
import { HandleTable } from './handles';
import type { ArrayDesc, ArrayRef, GraphExecRef, GraphRef, MipmapRef, ProviderContext } from '../provider';
import type { Reservation, SessionCore } from './session-core';

/** Graphs and executable graphs a session may hold at once (each is host memory of the driver's). */
export const MAX_GRAPHS = 4096;
/** Conditional handles one graph may have. */
export const MAX_COND_HANDLES = 1024;

/** A CUDA array of the session: its shape (copies are checked against it) and what it counts against the quota. */
export interface SessionArray {
  ref: ArrayRef;
  desc: ArrayDesc;
  /** Bytes per element (channels * the format's size). */
  elemSize: bigint;
  bytes: bigint;
  /** A level of this mipmapped array (handle): freed with it, never by itself. */
  levelOf?: bigint;
}

/** A mipmapped array of the session: its level-0 shape, levels, and the handles of the levels asked for. */
export interface SessionMipmap {
  ref: MipmapRef;
  desc: ArrayDesc;
  levels: number;
  elemSize: bigint;
  bytes: bigint;
  levelHandles: Map<number, bigint>;
}

/** A graph of the session (GRAPH_CREATE) and the conditional handles made on it. */
export interface SessionGraph {
  ref: GraphRef;
  conds: Set<bigint>;
}

export class SessionObjects {
  readonly #arrays: HandleTable<SessionArray>;
  readonly #mipmaps: HandleTable<SessionMipmap>;
  /** Texture and surface objects the session made (their values are the GPU's): only these may be destroyed. */
  readonly #textures = new Set<bigint>();
  readonly #surfaces = new Set<bigint>();
  readonly #graphs: HandleTable<SessionGraph>;
  readonly #graphExecs: HandleTable<GraphExecRef>;

  constructor(private readonly s: SessionCore) {
    this.#arrays = new HandleTable('array', s.handles, CudaErr.InvalidResourceHandle);
    this.#mipmaps = new HandleTable('mipmapped array', s.handles, CudaErr.InvalidResourceHandle);
    this.#graphs = new HandleTable('graph', s.handles, CudaErr.InvalidValue);
    this.#graphExecs = new HandleTable('executable graph', s.handles, CudaErr.InvalidValue);
  }

  // ---- arrays ----

  /** Records an array made on x with the bytes reserved for it. */
  addArray(x: ProviderContext, ref: ArrayRef, desc: ArrayDesc, elemSize: bigint, r: Reservation): bigint {
    this.s.live(x);
    return this.#arrays.add({ ref, desc, elemSize, bytes: r.bytes });
  }

  array(h: bigint): SessionArray {
    return this.#arrays.get(h);
  }

  /** Forgets an array and gives its bytes back to the quota (a mipmap level is freed with its mipmapped array only). */
  takeArray(h: bigint): SessionArray {
    const a = this.array(h);
    if (a.levelOf !== undefined)
      throw new CudaError(CudaErr.InvalidValue, `array 0x${h.toString(16)} is a level of a mipmapped array: free that`);
    this.#arrays.remove(h);
    this.s.quota.give(a.bytes);
    return a;
  }

  get arrayCount(): number {
    return this.#arrays.size + this.#mipmaps.size;
  }

  addMipmap(x: ProviderContext, ref: MipmapRef, desc: ArrayDesc, levels: number, elemSize: bigint, r: Reservation): bigint {
    this.s.live(x);
    return this.#mipmaps.add({ ref, desc, levels, elemSize, bytes: r.bytes, levelHandles: new Map() });
  }

  mipmap(h: bigint): SessionMipmap {
    return this.#mipmaps.get(h);
  }

  /** A level of mipmapped array h as an array of the session (its shape desc), once per level. */
  addLevel(x: ProviderContext, h: bigint, level: number, ref: ArrayRef, desc: ArrayDesc): bigint {
    this.s.live(x);
    const m = this.mipmap(h); // destroyed meanwhile: refused
    const known = m.levelHandles.get(level);
    if (known !== undefined) return known;
    const lh = this.#arrays.add({ ref, desc, elemSize: m.elemSize, bytes: 0n, levelOf: h });
    m.levelHandles.set(level, lh);
    return lh;
  }

  /** Forgets a mipmapped array with its levels and gives its bytes back. */
  takeMipmap(h: bigint): SessionMipmap {
    const m = this.#mipmaps.take(h);
    for (const lh of m.levelHandles.values()) this.#arrays.remove(lh);
    this.s.quota.give(m.bytes);
    return m;
  }

  // ---- texture and surface objects ----

  addObject(x: ProviderContext, kind: 'texture' | 'surface', v: bigint): void {
    this.s.live(x);
    (kind === 'texture' ? this.#textures : this.#surfaces).add(v);
  }

  /** Forgets a texture or surface object of this session (another's, or a destroyed one, is refused). */
  takeObject(kind: 'texture' | 'surface', v: bigint): void {
    const set = kind === 'texture' ? this.#textures : this.#surfaces;
    if (!set.delete(v)) throw new CudaError(CudaErr.InvalidValue, `${kind} object 0x${v.toString(16)} is not one of this process`);
  }

  get objectCount(): number {
    return this.#textures.size + this.#surfaces.size;
  }

  // ---- graphs with conditional nodes ----

  /** Refuses one more graph or executable graph past MAX_GRAPHS. */
  checkGraphRoom(): void {
    if (this.graphCount >= MAX_GRAPHS)
      throw new CudaError(CudaErr.MemoryAllocation, `${MAX_GRAPHS} graphs and executable graphs held at once`);
  }

  addGraph(x: ProviderContext, ref: GraphRef): bigint {
    this.s.live(x);
    return this.#graphs.add({ ref, conds: new Set() });
  }

  graph(h: bigint): SessionGraph {
    return this.#graphs.get(h);
  }

  takeGraph(h: bigint): SessionGraph {
    return this.#graphs.take(h);
  }

  addGraphExec(x: ProviderContext, ref: GraphExecRef): bigint {
    this.s.live(x);
    return this.#graphExecs.add(ref);
  }

  graphExec(h: bigint): GraphExecRef {
    return this.#graphExecs.get(h);
  }

  takeGraphExec(h: bigint): GraphExecRef {
    return this.#graphExecs.take(h);
  }

  get graphCount(): number {
    return this.#graphs.size + this.#graphExecs.size;
  }

  /** What the session holds, for its state to be saved (src/qcuda/migration/session-state.ts). */
  snapshot(): {
    arrays: [bigint, SessionArray][];
    mipmaps: [bigint, SessionMipmap][];
    textures: bigint[];
    surfaces: bigint[];
    graphs: [bigint, SessionGraph][];
    execs: [bigint, GraphExecRef][];
  } {
    return {
      arrays: [...this.#arrays.entries()],
      mipmaps: [...this.#mipmaps.entries()],
      textures: [...this.#textures],
      surfaces: [...this.#surfaces],
      graphs: [...this.#graphs.entries()],
      execs: [...this.#graphExecs.entries()],
    };
  }

  /** Forgets everything (a reset, the close): the context's destruction frees it. */
  clear(): void {
    this.#arrays.clear();
    this.#mipmaps.clear();
    this.#textures.clear();
    this.#surfaces.clear();
    this.#graphs.clear();
    this.#graphExecs.clear();
  }
}
