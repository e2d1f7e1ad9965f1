// The checks on a state's description before anything is made of it:
// every field of the type it must be, every count within the VM's bounds
// (limits.ts) and the session's (handles.ts, vmm.ts, session-objects.ts),
// every size within the provider's memory, and the whole within the
// destination's quota. What passes is a DeviceImage (image.ts).
import { IPC_TOKEN_BYTES } from '../ipc/ipc';
import { PROVIDER_ALIASES } from '../provider';
import type { VmLimits } from '../quota/limits';
import { IPC_DROPPED_KEPT } from '../session/session';
import { MAX_GRAPHS, MAX_COND_HANDLES } from '../session/session-objects';
import { MAX_VMM_RESERVED } from '../vmm/vmm';
import { StateError } from './format';
import type { AttrImage, CondImage, DeviceImage, NodeImage, SessionImage } from './image';

/** Sessions of a VM (virtio-device.ts MAX_SESSIONS). */
const MAX_SESSIONS = 4096;
/** Nodes of one executable graph: a node description is a module upload (QCUDA_MAX_MODULE) of 64-byte nodes at most. */
const MAX_NODES = 1 << 20;
/** Allocations and host mappings of one session: more than any process makes (each costs a RangeSet entry). */
const MAX_ALLOCS = 1 << 20;
const U64 = (1n << 64n) - 1n;
/** Levels of a mipmapped array: one per halving of a 64-bit extent. */
const MAX_LEVELS = 64;

/** A value of the description at a path: each read checks its type and range, or throws a StateError naming the path. */
class Field {
  constructor(
    readonly v: unknown,
    readonly path: string,
  ) {}

  #bad(what: string): never {
    throw new StateError(`corrupted: ${this.path}: ${what}`);
  }

  at(key: string): Field {
    if (typeof this.v !== 'object' || this.v === null || Array.isArray(this.v)) this.#bad('not an object');
    return new Field((this.v as Record<string, unknown>)[key], `${this.path}.${key}`);
  }

  list(max: number, what = 'entries'): Field[] {
    if (!Array.isArray(this.v)) this.#bad('not a list');
    if (this.v.length > max) this.#bad(`${this.v.length} ${what}, more than the ${max} the destination allows`);
    return this.v.map((x, i) => new Field(x, `${this.path}[${i}]`));
  }

  int(min: number, max: number): number {
    if (typeof this.v !== 'number' || !Number.isInteger(this.v) || this.v < min || this.v > max)
      this.#bad(`not an integer in [${min}, ${max}]`);
    return this.v;
  }

  num(): number | null {
    if (this.v === null) return null;
    if (typeof this.v !== 'number' || !Number.isFinite(this.v)) this.#bad('not a number');
    return this.v;
  }

  big(max = U64, min = 0n): bigint {
    if (typeof this.v !== 'string' || !/^0x[0-9a-f]{1,16}$/.test(this.v)) this.#bad('not a 64-bit number');
    const n = BigInt(this.v);
    if (n < min || n > max) this.#bad(`${n} outside [${min}, ${max}]`);
    return n;
  }

  str(max: number, pattern: RegExp): string {
    if (typeof this.v !== 'string' || this.v.length > max || !pattern.test(this.v)) this.#bad('not a string of the form expected');
    return this.v;
  }

  bool(): boolean {
    if (typeof this.v !== 'boolean') this.#bad('not true or false');
    return this.v;
  }
}

/** What the destination allows: the VM's bounds, its devices, each device's memory, its quota left. */
export interface Room {
  limits: VmLimits;
  devices: number;
  totalMem: bigint;
  /** Device memory the VM's quota has left (undefined: no quota). */
  quotaLeft: bigint | undefined;
}

/** Stream attributes: [attr, hex of its bytes] pairs. */
const attrList = (f: Field): AttrImage[] =>
  f.list(64, 'attributes').map((a) => {
    const [k, v] = a.list(2);
    return [k.int(0, 255), v.str(128, /^([0-9a-f]{2})*$/)];
  });

const conds = (f: Field): CondImage[] =>
  f.list(MAX_COND_HANDLES, 'conditional handles').map((c) => ({
    h: c.at('h').big(),
    defaultValue: c.at('defaultValue').int(0, 0xffffffff),
    assignDefault: c.at('assignDefault').bool(),
    value: c.at('value').int(0, 0xffffffff),
  }));

function node(f: Field): NodeImage {
  const base = { parent: f.at('parent').int(-1, MAX_NODES), body: f.at('body').int(0, 0xffff) };
  const type = f.at('type').str(16, /^[a-zA-Z]+$/);
  const b = (k: string) => f.at(k).big();
  switch (type) {
    case 'memcpy':
      return {
        ...base,
        type,
        dst: b('dst'),
        src: b('src'),
        dstPitch: b('dstPitch'),
        dstRows: b('dstRows'),
        srcPitch: b('srcPitch'),
        srcRows: b('srcRows'),
        width: b('width'),
        height: b('height'),
        depth: b('depth'),
      };
    case 'memset':
      return {
        ...base,
        type,
        dst: b('dst'),
        pitch: b('pitch'),
        value: f.at('value').int(0, 0xffffffff),
        elem: f.at('elem').int(1, 4),
        width: b('width'),
        height: b('height'),
      };
    case 'empty':
      return { ...base, type };
    case 'eventRecord':
    case 'eventWait':
      return { ...base, type, event: b('event') };
    case 'cond':
      return { ...base, type, handle: b('handle'), condType: f.at('condType').int(0, 2), size: f.at('size').int(0, 0xffff) };
    default:
      throw new StateError(`corrupted: ${f.path}: a graph node of type ${type}, which this backend does not carry`);
  }
}

function session(f: Field, room: Room): SessionImage {
  const { limits } = room;
  const dev = (x: Field) => x.int(0, room.devices - 1);
  const objects = limits.processObjects;
  const pairs = (x: Field, max: number): [string, bigint][] =>
    x.list(max).map((p) => {
      const [k, v] = p.list(2);
      return [k.str(32, /^[0-9]+:[0-9]+$/), v.big()];
    });
  const desc = (x: Field) => ({
    width: x.at('width').big(),
    height: x.at('height').big(),
    depth: x.at('depth').big(),
    format: x.at('format').int(0, 0xffff),
    channels: x.at('channels').int(1, 4),
    flags: x.at('flags').int(0, 0xffffffff),
  });
  const mem = room.totalMem;
  return {
    id: f.at('id').big(U64, 1n),
    device: dev(f.at('device')),
    calls: f.at('calls').int(0, Number.MAX_SAFE_INTEGER),
    next: f.at('next').big(U64, 0x100n),
    allocated: f.at('allocated').big(),
    l2SetAside: f.at('l2SetAside').big(),
    peers: f
      .at('peers')
      .list(room.devices * room.devices)
      .map((p) => p.str(16, /^[0-9]+>[0-9]+$/)),
    asyncError: f.at('asyncError').int(0, 0xffffffff),
    contexts: f
      .at('contexts')
      .list(room.devices, 'contexts')
      .map((c) => ({
        device: dev(c.at('device')),
        limits: c
          .at('limits')
          .list(16)
          .map((l) => (l.v === null ? null : l.big())),
        legacy: attrList(c.at('legacy')),
      })),
    streams: f
      .at('streams')
      .list(limits.processStreams, 'streams')
      .map((s) => ({
        h: s.at('h').big(),
        device: dev(s.at('device')),
        priority: s.at('priority').int(-1000, 1000),
        attrs: attrList(s.at('attrs')),
      })),
    events: f
      .at('events')
      .list(limits.processEvents, 'events')
      .map((e) => ({ h: e.at('h').big(), device: dev(e.at('device')), flags: e.at('flags').int(0, 0xff), at: e.at('at').num() })),
    limitCharges: pairs(f.at('limitCharges'), 16 * room.devices),
    limitBases: pairs(f.at('limitBases'), 16 * room.devices),
    local: f
      .at('local')
      .list(room.devices)
      .map((l) => ({
        device: dev(l.at('device')),
        base: l.at('base').big(),
        threads: l.at('threads').big(),
        stack: l.at('stack').big(),
        launched: l.at('launched').big(),
      })),
    allocs: f
      .at('allocs')
      .list(MAX_ALLOCS, 'allocations')
      .map((a) => ({ base: a.at('base').big(), size: a.at('size').big(mem, 1n), device: dev(a.at('device')) })),
    imports: f
      .at('imports')
      .list(MAX_ALLOCS, 'IPC openings')
      .map((a) => ({ base: a.at('base').big(), size: a.at('size').big(mem, 1n), device: dev(a.at('device')) })),
    droppedImports: f
      .at('droppedImports')
      .list(IPC_DROPPED_KEPT)
      .map((x) => x.big()),
    hostMaps: f
      .at('hostMaps')
      .list(limits.hostMapPieces, 'host mappings')
      .map((m) => ({
        base: m.at('base').big(),
        device: dev(m.at('device')),
        pieces: m
          .at('pieces')
          .list(limits.hostMapPieces, 'pieces')
          .map((p) => ({ gpa: p.at('gpa').big(), size: p.at('size').big(U64, 1n) })),
      })),
    vmm: {
      ranges: f
        .at('vmm')
        .at('ranges')
        .list(objects, 'VMM reservations')
        .map((r) => ({ base: r.at('base').big(), size: r.at('size').big(MAX_VMM_RESERVED, 1n), device: dev(r.at('device')) })),
      allocs: f
        .at('vmm')
        .at('allocs')
        .list(objects, 'VMM allocations')
        .map((a) => ({
          h: a.at('h').big(),
          size: a.at('size').big(mem, 1n),
          held: a.at('held').int(0, 0x7fffffff),
          device: dev(a.at('device')),
          token: a.at('token').v === null ? null : a.at('token').str(32, /^[0-9a-f]{32}$/),
        })),
      maps: f
        .at('vmm')
        .at('maps')
        .list(objects, 'VMM mappings')
        .map((m) => ({ base: m.at('base').big(), size: m.at('size').big(mem, 1n), h: m.at('h').big(), access: m.at('access').int(0, 3) })),
    },
    arrays: f
      .at('arrays')
      .list(objects, 'arrays')
      .map((a) => ({
        h: a.at('h').big(),
        device: dev(a.at('device')),
        base: a.at('base').big(),
        desc: desc(a.at('desc')),
        elemSize: a.at('elemSize').big(64n, 1n),
        bytes: a.at('bytes').big(mem),
        len: a.at('len').big(mem, 1n),
      })),
    mipmaps: f
      .at('mipmaps')
      .list(objects, 'mipmapped arrays')
      .map((m) => ({
        h: m.at('h').big(),
        device: dev(m.at('device')),
        desc: desc(m.at('desc')),
        elemSize: m.at('elemSize').big(64n, 1n),
        bytes: m.at('bytes').big(mem),
        levels: m
          .at('levels')
          .list(MAX_LEVELS, 'levels')
          .map((l) => ({ base: l.at('base').big(), len: l.at('len').big(mem, 1n) })),
        levelHandles: m
          .at('levelHandles')
          .list(MAX_LEVELS, 'levels')
          .map((l) => ({ level: l.at('level').int(0, MAX_LEVELS - 1), h: l.at('h').big(), desc: desc(l.at('desc')) })),
      })),
    textures: f
      .at('textures')
      .list(objects, 'texture objects')
      .map((x) => ({ v: x.at('v').big(), device: dev(x.at('device')) })),
    surfaces: f
      .at('surfaces')
      .list(objects, 'surface objects')
      .map((x) => ({ v: x.at('v').big(), device: dev(x.at('device')) })),
    graphs: f
      .at('graphs')
      .list(MAX_GRAPHS, 'graphs')
      .map((g) => ({ h: g.at('h').big(), device: dev(g.at('device')), conds: conds(g.at('conds')) })),
    execs: f
      .at('execs')
      .list(MAX_GRAPHS, 'executable graphs')
      .map((x) => ({
        h: x.at('h').big(),
        device: dev(x.at('device')),
        nodes: x.at('nodes').list(MAX_NODES, 'nodes').map(node),
        edges: x
          .at('edges')
          .list(2 * MAX_NODES, 'edge ends')
          .map((e) => e.int(0, MAX_NODES)),
        conds: conds(x.at('conds')),
      })),
  };
}

/** The description checked against the destination: a DeviceImage, or a StateError saying what is wrong. */
export function checkImage(v: unknown, provider: string, room: Room): DeviceImage {
  const top = new Field(v, 'state');
  const named = top.at('provider').str(32, /^[a-z]+$/);
  // A state saved before a provider's rename names it by its older name.
  const from = PROVIDER_ALIASES.get(named) ?? named;
  if (from !== provider) throw new StateError(`made by the ${from} provider: this backend runs the ${provider} provider`);
  const sessions = top
    .at('sessions')
    .list(MAX_SESSIONS, 'sessions')
    .map((s) => session(s, room));
  const ids = new Set(sessions.map((s) => s.id));
  if (ids.size !== sessions.length) throw new StateError('corrupted: two sessions of one id');
  for (const s of sessions) {
    if (s.graphs.length + s.execs.length > MAX_GRAPHS) throw new StateError(`session ${s.id.toString(16)}: more than ${MAX_GRAPHS} graphs`);
    const vmm = s.vmm.ranges.length + s.vmm.allocs.length + s.vmm.maps.length;
    if (vmm > room.limits.processObjects)
      throw new StateError(`session ${s.id.toString(16)}: ${vmm} VMM objects, past the destination's bound`);
    if (s.textures.length + s.surfaces.length > room.limits.processObjects)
      throw new StateError(`session ${s.id.toString(16)}: more texture and surface objects than the destination allows`);
  }
  // Every byte the blobs will bring is device memory: within the provider's, and each session's within what it holds.
  const bytes = sessions.reduce(
    (n, s) =>
      n +
      [...s.allocs, ...s.vmm.allocs].reduce((m, a) => m + a.size, 0n) +
      s.arrays.reduce((m, a) => m + a.len, 0n) +
      s.mipmaps.reduce((m, a) => m + a.levels.reduce((k, l) => k + l.len, 0n), 0n),
    0n,
  );
  if (bytes > room.totalMem * BigInt(room.devices))
    throw new StateError(`${bytes} bytes of device memory, more than the destination's ${room.devices} x ${room.totalMem}`);
  const used = sessions.reduce((n, s) => n + s.allocated, 0n);
  if (room.quotaLeft !== undefined && used > room.quotaLeft)
    throw new StateError(
      `the state uses ${used} bytes of device memory; the destination VM's quota has ${room.quotaLeft} left (raise its --device-memory-limit)`,
    );
  const ipc = top
    .at('ipc')
    .list(MAX_ALLOCS, 'IPC handles')
    .map((e) => ({
      kind: e.at('kind').str(8, /^(memory|event)$/) as 'memory' | 'event',
      token: e.at('token').str(2 * IPC_TOKEN_BYTES, /^[0-9a-f]{32}$/),
      owner: e.at('owner').big(),
      ptr: e.at('ptr').big(),
      size: e.at('size').big(),
      device: e.at('device').int(0, room.devices - 1),
      exported: e.at('exported').v === null ? null : e.at('exported').str(1024, /^([0-9a-f]{2})*$/),
      openers: e
        .at('openers')
        .list(MAX_SESSIONS, 'openers')
        .map((o) => ({ session: o.at('session').big(), at: o.at('at').big() })),
    }));
  const vmmShares = top
    .at('vmmShares')
    .list(MAX_ALLOCS, 'shareable VMM handles')
    .map((e) => ({
      token: e.at('token').str(32, /^[0-9a-f]{32}$/),
      owner: e.at('owner').big(),
      handle: e.at('handle').big(),
      size: e.at('size').big(room.totalMem, 1n),
      device: e.at('device').int(0, room.devices - 1),
      importers: e
        .at('importers')
        .list(MAX_SESSIONS, 'importers')
        .map((i) => ({
          session: i.at('session').big(),
          handles: i
            .at('handles')
            .list(room.limits.processObjects, 'handles')
            .map((h) => h.big()),
        })),
    }));
  return { provider: from, sessions, ipc, vmmShares };
}
