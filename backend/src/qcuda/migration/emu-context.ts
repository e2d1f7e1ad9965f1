// What the emu provider writes of a context, and makes again from it:
// its limits and NULL stream, its streams' and events' records, and the
// bytes of its allocations, VMM physical memory and arrays (views of its
// memory as they are: work completes at once here, nothing is in flight).
import { StreamAttr } from '../attrs';
import { CudaError } from '../cuda-error';
import type { ArrayRef, DevPtr, EventRef, GraphNodeSpec, ProviderContext, StreamRef, VmmRef } from '../provider';
import { EmuContext } from '../providers/emu';
import type { EmuCond } from '../providers/emu/graphs';
import type { EmuEvent, EmuStream } from '../providers/emu/streams';
import { StateError } from './format';
import type { AttrImage, CondImage, ContextImage, NodeImage } from './image';

/** cudaLimit values a context has (streams.ts LIMIT_DEFAULTS). */
const LIMITS = 7;

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');
const unhex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));

/** x as an emu context, or the reason it cannot be carried. */
export function hostContext(x: ProviderContext | undefined): EmuContext {
  if (!(x instanceof EmuContext)) throw new StateError('not yet carried: a context of a provider other than emu');
  return x;
}

const attrsOf = (st: EmuStream): AttrImage[] => [...st.attrs].map(([k, v]) => [k, hex(v)]);

function setAttrs(st: EmuStream, attrs: readonly AttrImage[]): void {
  for (const [k, v] of attrs) {
    const bytes = unhex(v);
    st.attrs.set(k, bytes);
    if (k === StreamAttr.Priority && bytes.length >= 4) st.priority = new DataView(bytes.buffer, bytes.byteOffset, 4).getInt32(0, true);
  }
}

export async function saveContext(x: EmuContext, device: number): Promise<ContextImage> {
  const limits: (bigint | null)[] = [];
  for (let l = 0; l < LIMITS; l++) limits.push(await x.limitGet(l).catch(() => null));
  return { device, limits, legacy: attrsOf(x.parts.legacy) };
}

export async function restoreContext(x: EmuContext, c: ContextImage): Promise<void> {
  for (const [l, v] of c.limits.entries()) if (v !== null) await x.limitSet(l, v);
  setAttrs(x.parts.legacy, c.legacy);
}

export const streamImage = (s: StreamRef): { priority: number; attrs: AttrImage[] } => ({
  priority: (s as EmuStream).priority,
  attrs: attrsOf(s as EmuStream),
});

export async function restoreStream(x: EmuContext, priority: number, attrs: readonly AttrImage[]): Promise<StreamRef> {
  const s = await x.streamCreate(0, priority);
  setAttrs(s as EmuStream, attrs);
  return s;
}

export const eventImage = (e: EventRef): { flags: number; at: number | null } => ({
  flags: (e as EmuEvent).flags,
  at: (e as EmuEvent).at ?? null,
});

export async function restoreEvent(x: EmuContext, flags: number, at: number | null): Promise<EventRef> {
  const e = (await x.eventCreate(flags)) as EmuEvent;
  e.at = at ?? undefined;
  return e;
}

/** Bytes of an allocation, VMM physical memory or array of x's (views of its memory, not copies). */
export const allocBytes = (x: EmuContext, base: DevPtr, size: bigint): Uint8Array[] => x.memory.views(base, size, x);
export const vmmBytes = (x: EmuContext, m: VmmRef): Uint8Array => x.memory.vmmBytes(m, x);
export const arrayBytes = (x: EmuContext, a: ArrayRef): Uint8Array => x.parts.arrays.bytesOf(a);

/** Whether x holds physical memory m, array a, graph g, executable graph e: a session's refs are per context. */
export function holds(x: EmuContext, what: 'vmm' | 'array' | 'mipmap' | 'graph' | 'exec', ref: unknown): boolean {
  try {
    if (what === 'vmm') x.memory.vmmBytes(ref as VmmRef, x);
    else if (what === 'mipmap') x.parts.arrays.mipmapLevel(ref as never, 0);
    else if (what === 'array') x.parts.arrays.bytesOf(ref as ArrayRef);
    else if (what === 'graph') x.parts.graphs.condsOf(ref as never);
    else x.parts.graphs.execOf(ref as never);
    return true;
  } catch {
    return false;
  }
}

export const condImages = (conds: Map<bigint, EmuCond>): CondImage[] => [...conds].map(([h, c]) => ({ h, ...c }));
const condMap = (conds: readonly CondImage[]): Map<bigint, EmuCond> =>
  new Map(conds.map((c) => [c.h, { defaultValue: c.defaultValue, assignDefault: c.assignDefault, value: c.value }]));

export const graphConds = (x: EmuContext, g: unknown): CondImage[] => condImages(x.parts.graphs.condsOf(g as never));

export const restoreGraph = (x: EmuContext, conds: readonly CondImage[]): unknown => x.parts.graphs.adoptGraph(condMap(conds));

/** An executable graph's nodes, its event nodes naming events by the session's handle (eventHandle). */
export function execImage(
  x: EmuContext,
  e: unknown,
  eventHandle: (e: EventRef) => bigint | undefined,
): { nodes: NodeImage[]; edges: number[]; conds: CondImage[] } {
  const { spec, conds } = x.parts.graphs.execOf(e as never);
  const nodes = spec.nodes.map((n): NodeImage => {
    if (n.type === 'kernel') throw new StateError('not yet carried: graphs with kernel nodes');
    if (n.type === 'eventRecord' || n.type === 'eventWait') {
      const h = eventHandle(n.event);
      if (h === undefined) throw new StateError('not yet carried: a graph node of an event the session destroyed');
      return { parent: n.parent, body: n.body, type: n.type, event: h };
    }
    return { ...n } as NodeImage;
  });
  return { nodes, edges: [...spec.edges], conds: condImages(conds) };
}

export function restoreExec(
  x: EmuContext,
  img: { nodes: readonly NodeImage[]; edges: readonly number[]; conds: readonly CondImage[] },
  event: (h: bigint) => EventRef,
): unknown {
  if (img.edges.length % 2 !== 0) throw new StateError('corrupted: an executable graph with an odd count of edge ends');
  const nodes = img.nodes.map((n): GraphNodeSpec => {
    if (n.type === 'eventRecord' || n.type === 'eventWait') return { parent: n.parent, body: n.body, type: n.type, event: event(n.event) };
    return { ...n };
  });
  try {
    return x.parts.graphs.adoptExec({ nodes, edges: new Uint32Array(img.edges) }, condMap(img.conds));
  } catch (e) {
    if (e instanceof CudaError) throw new StateError(`corrupted: an executable graph: ${e.message}`);
    throw e;
  }
}

/** A migrated allocation at its address. */
export function restoreAlloc(x: EmuContext, base: DevPtr, bytes: Uint8Array): void {
  try {
    x.memory.adoptAllocation(base, bytes, x);
  } catch (e) {
    throw new StateError(`device memory 0x${base.toString(16)}+${bytes.length}: ${(e as Error).message}`);
  }
}

export const restoreVmm = (x: EmuContext, bytes: Uint8Array): VmmRef => x.memory.vmmAdopt(bytes, x);

/** A migrated array at its address, with its bytes. */
export function restoreArray(x: EmuContext, desc: Parameters<EmuContext['arrayCreate']>[0], base: DevPtr, bytes: Uint8Array): ArrayRef {
  return x.parts.arrays.adopt(desc, base, bytes);
}

export const arrayBase = (x: EmuContext, a: ArrayRef): DevPtr => x.parts.arrays.baseOf(a);

export function restoreObject(x: EmuContext, v: bigint, kind: 'texture' | 'surface'): void {
  x.parts.arrays.adoptObject(v, kind);
}
