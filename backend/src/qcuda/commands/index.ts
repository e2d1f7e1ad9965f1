// The command table: every command a session sends, with its run. Built
// once from the command files, each of which exports its runs as RUNS (a
// new file is one more entry in FILES; a new run in a file, none); the
// compiler checks that every declared command (wire/protocol.ts) has a
// run, typed by its declaration, and the build that no command has two.
// BATCH runs the runs of the commands declared posted.
import type { BatchEnding, Call, Result, Run, Runs, SessionCmd } from '../command';
import { then, type Now } from '../../sys/now';
import { CALLS, type CallDecl, type CmdName } from '../wire/protocol';
import * as array from './array';
import { batchRun, endBatch, type EndingCmd, type PostedRuns } from './batch';
import * as context from './context-call';
import * as cudaDevice from './cuda-device';
import * as graph from './graph';
import * as ipc from './ipc';
import * as launch from './launch';
import * as link from './link';
import * as memory from './memory';
import * as modules from './module';
import * as output from './output';
import * as peer from './peer';
import * as stream from './stream';
import * as vmm from './vmm';
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

/** The files of commands, by name: each exports RUNS, its commands' runs (context-call.ts: those derived from `context` declarations). */
const FILES = { 'cuda-device': cudaDevice, memory, vmm, array, graph, stream, module: modules, link, launch, output, peer, ipc, context };

type UnionToIntersection<U> = (U extends unknown ? (x: U) => void : never) extends (x: infer I) => void ? I : never;
/** Every file's runs together. */
type FileRuns = UnionToIntersection<(typeof FILES)[keyof typeof FILES]['RUNS']>;

/** Files' runs in one table, each command in one file only: a spread would let a later run replace an earlier one unseen. */
export function foldRuns(files: Readonly<Record<string, { readonly RUNS: object }>>): Record<string, unknown> {
  const owner = new Map<string, string>();
  const runs: Record<string, unknown> = {};
  for (const [file, m] of Object.entries(files)) {
    for (const [cmd, run] of Object.entries(m.RUNS)) {
      const other = owner.get(cmd);
      if (other !== undefined) throw new Error(`command ${cmd} has a run in ${other}.ts and in ${file}.ts`);
      owner.set(cmd, file);
      runs[cmd] = run;
    }
  }
  return runs;
}

/** What a batch runs its entries with: the run of every command declared posted (but LAUNCH: launches go to the provider together). */
function postedRuns(runs: FileRuns): PostedRuns {
  const posted = (Object.keys(CALLS) as CmdName[]).filter((k) => (CALLS[k] as CallDecl).posted && k !== 'LAUNCH');
  return Object.fromEntries(posted.map((k) => [k, (runs as Record<string, unknown>)[k]])) as PostedRuns;
}

function build(): Runs<SessionCmd> {
  const files = foldRuns(FILES) as FileRuns;
  const runs: Runs<SessionCmd> = { ...files, BATCH: batchRun(postedRuns(files), runEnding) };
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
    return shareAfter(c.dev.share, d, c, then(run(c), orNothing));
  };
  // The VM's GPU share (--gpu-share): a post waits while the VM is ahead of it.
  const share = shareBefore(c.dev.share, d);
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
