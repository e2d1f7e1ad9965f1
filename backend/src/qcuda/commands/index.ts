// The command table: every command a session sends, with its run. Built
// once from the command files; the compiler checks that every declared
// command (wire/protocol.ts) has a run, typed by its declaration, and the
// build that no command has two.
import type { BatchEnding, Call, Result, Run, Runs, SessionCmd } from '../command';
import { then, type Now } from '../../sys/now';
import { CALLS, type CallDecl, type CmdName } from '../wire/protocol';
import { ARRAY_COMMANDS } from './array';
import { batchRun, endBatch, type EndingCmd } from './batch';
import { contextCalls } from './context-call';
import { DEVICE_COMMANDS } from './device';
import { GRAPH_COMMANDS } from './graph';
import { LAUNCH_COMMANDS } from './launch';
import { MEMORY_COMMANDS } from './memory';
import { LINK_COMMANDS } from './link';
import { MODULE_COMMANDS } from './module';
import { OUTPUT_COMMANDS } from './output';
import { PEER_COMMANDS } from './peer';
import { IPC_COMMANDS, IPC_EVENT_COMMANDS } from './ipc';
import { STREAM_COMMANDS } from './stream';
import { VMM_COMMANDS } from './vmm';
import { shareAfter, shareBefore } from '../share/commands';

/** A synchronizing command's status: posted work's failure that came after its batch, if any. */
function reportingPostedErrors<K extends CmdName>(run: Run<K>): Run<K> {
  return (c) =>
    then(run(c), (r) => {
      const e = c.session.takeAsyncError();
      return e !== 0 ? { ...r, status: e } : r;
    });
}

/**
 * What must run before the command may start: the host functions marked
 * before it on its stream (or every stream), and a deferred record of the
 * event it uses (callbacks.ts). Undefined, the usual case, lets it start in
 * the same tick, before the next request of the ring is even parsed.
 */
export function gateOf(d: CallDecl, c: Call): Promise<unknown> | undefined {
  if (!d.event && !d.stream) return undefined;
  const cb = c.session.callbacks;
  const args = c.args as Record<string, unknown>;
  const e = d.event ? cb.eventGate(args[d.event] as bigint) : undefined;
  const g = !d.stream ? undefined : d.stream === 'all' ? cb.all() : cb.gate(args[d.stream] as bigint);
  return e && g ? Promise.all([e, g]) : (e ?? g);
}

/** Each command in one group only: a spread would let a later run replace an earlier one unseen. */
function disjoint(groups: Readonly<Record<string, object>>): void {
  const owner = new Map<string, string>();
  for (const [group, runs] of Object.entries(groups)) {
    for (const cmd of Object.keys(runs)) {
      const other = owner.get(cmd);
      if (other !== undefined) throw new Error(`command ${cmd} has a run in ${other} and in ${group}`);
      owner.set(cmd, group);
    }
  }
}

function build(): Runs<SessionCmd> {
  const context = contextCalls();
  const groups = {
    device: DEVICE_COMMANDS,
    memory: MEMORY_COMMANDS,
    vmm: VMM_COMMANDS,
    array: ARRAY_COMMANDS,
    graph: GRAPH_COMMANDS,
    stream: STREAM_COMMANDS,
    module: MODULE_COMMANDS,
    link: LINK_COMMANDS,
    launch: LAUNCH_COMMANDS,
    output: OUTPUT_COMMANDS,
    peer: PEER_COMMANDS,
    ipc: IPC_COMMANDS,
    ipcEvents: IPC_EVENT_COMMANDS,
    context,
  };
  disjoint(groups);
  const runs: Runs<SessionCmd> = {
    ...groups.device,
    ...groups.memory,
    ...groups.vmm,
    ...groups.array,
    ...groups.graph,
    ...groups.stream,
    ...groups.module,
    ...groups.link,
    ...groups.launch,
    ...groups.output,
    ...groups.peer,
    ...groups.ipc,
    ...groups.ipcEvents,
    ...groups.context,
    BATCH: batchRun(
      {
        MEMSET: MEMORY_COMMANDS.MEMSET,
        MEMCPY_DTOD: MEMORY_COMMANDS.MEMCPY_DTOD,
        MEMCPY_3D_DTOD: ARRAY_COMMANDS.MEMCPY_3D_DTOD,
        MEMSET_2D: ARRAY_COMMANDS.MEMSET_2D,
        EVENT_RECORD: context.EVENT_RECORD,
        STREAM_WAIT_EVENT: context.STREAM_WAIT_EVENT,
        HOST_FUNC: STREAM_COMMANDS.HOST_FUNC,
        LAUNCH_EX: LAUNCH_COMMANDS.LAUNCH_EX,
        GRAPH_LAUNCH: GRAPH_COMMANDS.GRAPH_LAUNCH,
      },
      runEnding,
    ),
  };
  const synced = (Object.keys(runs) as SessionCmd[]).filter((k) => (CALLS[k] as CallDecl).syncs);
  return { ...runs, ...Object.fromEntries(synced.map((k) => [k, reportingPostedErrors(runs[k] as Run<CmdName>)])) };
}

const NO_RESULT: Result = Object.freeze({});
/** A run's result; a run that returns nothing answered with status 0 and no output. */
const orNothing = (r: Result | void): Result => r ?? NO_RESULT;

/**
 * How every command runs, from the dispatcher or ending a batch: after its
 * gate (gateOf), with `ready` first (what must be worked out only once the
 * gate has opened), a run that returns nothing answering status 0.
 */
export function runGated(d: CallDecl, run: Run<CmdName>, c: Call, ready?: () => void): Now<Result> {
  const go = (): Now<Result> => {
    ready?.();
    return shareAfter(d, c, then(run(c), orNothing));
  };
  // The VM's GPU share (--gpu-share): a post waits while the VM is ahead of it.
  const share = shareBefore(d);
  const gate = gateOf(d, c);
  const both = share && gate ? Promise.all([share, gate]) : (share ?? gate);
  return both ? both.then(go) : go();
}

/** A call that ends a batch, run as the dispatcher runs one (a synchronize reporting posted work's errors: COMMANDS has it so). */
function runEnding(name: EndingCmd, c: Call): Now<Result> {
  return runGated(CALLS[name], COMMANDS[name] as Run<CmdName>, c);
}

/** A batch whose other entries ran in the ring server: its ending call, run and answered as BATCH's would be (batch.ts). */
export function finishBatch(c: Pick<Call, 'session' | 'queue' | 'dev'>, e: BatchEnding): Now<Result> {
  return endBatch(c, e, runEnding);
}

export const COMMANDS: Runs<SessionCmd> = build();

export type { Result };
