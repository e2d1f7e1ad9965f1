// The description of a device's state (format.ts carries it as JSON, the
// memory's bytes after it as blobs): what each session holds, by the
// handles and addresses its guest process knows. Blobs follow in this
// order: per session, its allocations, then its VMM physical memory, then
// its arrays, each in the order listed.
import type { ArrayDesc, GraphNodeSpec } from '../provider';

/** A conditional handle of a graph or executable graph (its value as now). */
export interface CondImage {
  h: bigint;
  defaultValue: number;
  assignDefault: boolean;
  value: number;
}

type EventNode = Extract<GraphNodeSpec, { type: 'eventRecord' | 'eventWait' }>;
/**
 * A node of an executable graph as GraphNodeSpec has it, but an event node
 * names its event by the session's handle; kernel nodes are not carried.
 */
export type NodeImage = Exclude<GraphNodeSpec, { type: 'kernel' } | EventNode> | (Omit<EventNode, 'event'> & { event: bigint });

/** A stream attribute's bytes, as hex. */
export type AttrImage = [attr: number, hex: string];

/** A context of the session: its device, its limits (cudaLimit order, null: unsupported), its NULL stream's attributes. */
export interface ContextImage {
  device: number;
  limits: (bigint | null)[];
  legacy: AttrImage[];
}

export interface SessionImage {
  id: bigint;
  /** The current device. */
  device: number;
  calls: number;
  /** The next handle its counter gives. */
  next: bigint;
  /** Device memory it holds against the VM's quota. */
  allocated: bigint;
  l2SetAside: bigint;
  peers: string[];
  asyncError: number;
  contexts: ContextImage[];
  streams: { h: bigint; device: number; priority: number; attrs: AttrImage[] }[];
  events: { h: bigint; device: number; flags: number; at: number | null }[];
  limitCharges: [string, bigint][];
  limitBases: [string, bigint][];
  local: { device: number; base: bigint; threads: bigint; stack: bigint; launched: bigint }[];
  /** Each a blob of size bytes. */
  allocs: { base: bigint; size: bigint; device: number }[];
  /** Other sessions' memory it opened by IPC (ipc names whose), and what it opened that its owner freed (IPC_CLOSE still succeeds). */
  imports: { base: bigint; size: bigint; device: number }[];
  droppedImports: bigint[];
  /** Guest memory mapped for the device: by guest physical address (it lies elsewhere in the destination's address space). */
  hostMaps: { base: bigint; device: number; pieces: { gpa: bigint; size: bigint }[] }[];
  vmm: {
    ranges: { base: bigint; size: bigint; device: number }[];
    /** Each a blob of size bytes, but those imported by a shareable handle's token (their owner's memory). */
    allocs: { h: bigint; size: bigint; held: number; device: number; token: string | null }[];
    maps: { base: bigint; size: bigint; h: bigint; access: number }[];
  };
  /** Each a blob of len bytes (its rows dense). */
  arrays: { h: bigint; device: number; base: bigint; desc: ArrayDesc; elemSize: bigint; bytes: bigint; len: bigint }[];
  /** Each level a blob of its len bytes, after the arrays'; levelHandles: [level, the session's handle of it, its shape]. */
  mipmaps: {
    h: bigint;
    device: number;
    desc: ArrayDesc;
    elemSize: bigint;
    bytes: bigint;
    levels: { base: bigint; len: bigint }[];
    levelHandles: { level: number; h: bigint; desc: ArrayDesc }[];
  }[];
  textures: { v: bigint; device: number }[];
  surfaces: { v: bigint; device: number }[];
  graphs: { h: bigint; device: number; conds: CondImage[] }[];
  execs: { h: bigint; device: number; nodes: NodeImage[]; edges: number[]; conds: CondImage[] }[];
}

/** An IPC memory or event handle of the VM (ipc.ts): its token as the guest holds it, and the openings of memory. */
export interface IpcImage {
  kind: 'memory' | 'event';
  token: string;
  /** The owner's session id, and its allocation's address or its event's handle. */
  owner: bigint;
  ptr: bigint;
  size: bigint;
  device: number;
  exported: string | null;
  openers: { session: bigint; at: bigint }[];
}

/** A shareable handle of a session's VMM memory (vmm-share.ts): its token, and the importers' handles of it. */
export interface VmmShareImage {
  token: string;
  owner: bigint;
  handle: bigint;
  size: bigint;
  device: number;
  importers: { session: bigint; handles: bigint[] }[];
}

export interface DeviceImage {
  /** The provider that made it: only the same kind takes it. */
  provider: string;
  sessions: SessionImage[];
  ipc: IpcImage[];
  vmmShares: VmmShareImage[];
}
