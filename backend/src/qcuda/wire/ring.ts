// The ring server's table (addon/src/ring_calls.h, for ring_plan.cc),
// derived from the calls' declarations (CallDecl.ring): each call it answers
// in C, how, and what it checks of the request before it does. A declaration
// the server cannot serve as declared (a handle kind it is not told of, a
// sync with data, a copy without a range) is refused here, so `npm run gen`
// fails rather than the server serving it some other way.
import { layoutOf } from './layout';
import { CALLS, STRUCTS, type CallDecl, type CmdName, type HandleKind, type RingDecl } from './protocol';

/** The enums of ring_calls.h, in their order: what a handle names, the data it moves (RING_SERVES, how it is served, below). */
export const RING_KINDS = ['none', 'stream', 'event', 'function'] as const;
export const RING_DATA = ['none', 'to', 'from'] as const;

/** An argument field the server looks up in the session's tables. */
export interface RingHandle {
  readonly field: string;
  readonly offset: number;
  readonly kind: Extract<HandleKind, (typeof RING_KINDS)[number]>;
}

/** One row of the table: a call the ring server answers, and its checks. */
export interface RingCall {
  readonly name: CmdName;
  readonly cmd: number;
  readonly serves: RingDecl['serves'];
  /** Served when sent on its own (not batchOnly). */
  readonly alone: boolean;
  /** Served as a posted entry of a batch (CallDecl.posted). */
  readonly posted: boolean;
  /** Served as a batch's ending, with this flag of the batch: a synchronize, or a query. */
  readonly ends?: 'sync' | 'query';
  /** The argument struct's bytes (0: none); exactly these, or at least these with varArgs. */
  readonly argBytes: number;
  readonly argStruct?: string;
  readonly varArgs: boolean;
  readonly data?: 'to' | 'from';
  /** Puts work on the GPU: admitted by the share gate first (gpu: 'posts'). */
  readonly posts: boolean;
  readonly syncs: boolean;
  readonly handles: readonly RingHandle[];
  readonly range?: { readonly ptr: string; readonly size: string; readonly ptrOffset: number; readonly sizeOffset: number };
  readonly maxData: number;
}

/** What each way of serving needs of its declaration: the handle kinds it takes, data, posting. */
interface Needs {
  /** The handle kinds it may take, one list of each way. */
  readonly handles: readonly (readonly string[])[];
  readonly data?: boolean;
  readonly args?: string;
  /** Served only as a batch's posted entry: alone, its own failure is its answer, which the server does not give. */
  readonly batchOnly?: boolean;
}
const NEEDS: Record<RingDecl['serves'], Needs> = {
  sync: { handles: [[], ['stream'], ['event']] },
  query: { handles: [['event']] },
  copy: { handles: [['stream']], data: true },
  launch: { handles: [['function', 'stream']], args: 'qcuda_args_launch' },
  'cluster-launch': { handles: [['function', 'stream']], args: 'qcuda_args_launch_ex', batchOnly: true },
  record: { handles: [['event', 'stream']], batchOnly: true },
  batch: { handles: [[]], data: true, args: 'qcuda_args_batch' },
};

/** ring_calls.h's Serves, in its order: one for each way NEEDS knows. */
export const RING_SERVES = Object.keys(NEEDS) as RingDecl['serves'][];

function rowOf(name: CmdName, d: CallDecl, r: RingDecl): RingCall {
  const fail = (why: string): never => {
    throw new Error(`${name}: ring ${r.serves}: ${why}`);
  };
  const layout = d.args ? layoutOf(STRUCTS[d.args]) : undefined;
  const u64 = (field: string): number => {
    const f = layout?.fields.find((x) => x.name === field);
    if (!f || f.kind !== 'u64') fail(`${field} is not a u64 field of its arguments`);
    return f!.offset;
  };
  const need = NEEDS[r.serves];
  const handles = Object.entries(d.handles ?? {}).map(([field, kind]) => ({ field, offset: u64(field), kind }) as RingHandle);
  const kinds = handles.map((h) => h.kind).sort();
  if (!need.handles.some((k) => [...k].sort().join() === kinds.join())) fail(`handles ${kinds.join(', ') || 'none'}`);
  if (Boolean(d.data) !== Boolean(need.data)) fail(d.data ? 'moves data' : 'moves no data');
  if (need.args && d.args !== need.args) fail(`arguments ${need.args}`);
  if (need.batchOnly && !(r.batchOnly && d.posted)) fail('served only as a posted entry of a batch (posted, batchOnly)');
  if (r.serves === 'sync' && !d.syncs) fail('does not synchronize');
  if (r.serves === 'query' && !d.endsBatch) fail('does not end a batch');
  if ((r.serves === 'copy') !== (r.range !== undefined)) fail(r.range ? 'a range only for a copy' : 'a copy without a range');
  if ((r.serves === 'copy') !== (r.maxData !== undefined))
    fail(r.maxData !== undefined ? 'maxData only for a copy' : 'a copy without maxData');
  const ends = d.syncs ? 'sync' : d.endsBatch ? 'query' : undefined;
  if (r.batchOnly && !d.posted && !ends) fail('batchOnly, but neither posted nor ending a batch');
  return {
    name,
    cmd: d.cmd,
    serves: r.serves,
    alone: !r.batchOnly,
    posted: Boolean(d.posted),
    ends,
    argBytes: layout?.size ?? 0,
    argStruct: d.args,
    varArgs: Boolean(d.varArgs),
    data: d.data,
    posts: d.gpu === 'posts',
    syncs: Boolean(d.syncs),
    handles,
    range: r.range && { ptr: r.range[0], size: r.range[1], ptrOffset: u64(r.range[0]), sizeOffset: u64(r.range[1]) },
    maxData: r.maxData ?? 0,
  };
}

/** The calls the ring server answers (of calls: the protocol's), in command order; throws for a declaration it cannot serve as declared. */
export function ringCalls(calls: Readonly<Record<string, CallDecl>> = CALLS): RingCall[] {
  const rows = (Object.entries(calls) as [CmdName, CallDecl][])
    .filter(([, d]) => d.ring)
    .map(([name, d]) => rowOf(name, d, d.ring!))
    .sort((a, b) => a.cmd - b.cmd);
  const inBatch = rows.filter((r) => r.posted || r.ends);
  if (inBatch.length && !rows.some((r) => r.serves === 'batch'))
    throw new Error(`ring: ${inBatch.map((r) => r.name).join(', ')} served in a batch, but no call is served as a batch`);
  return rows;
}
