// BATCH: posted work. The guest library queues launches, async memsets and
// device-to-device copies, event records and stream waits, and sends them as
// one request, so a launch costs no round trip of its own. The batch is
// copied out of guest memory first (the guest cannot change it while it is
// checked), its framing is checked whole (a malformed batch runs nothing),
// then its entries run in order; a failing entry does not stop the others,
// and the first failure is what the guest sees at its next synchronizing call.
// A batch may end with that synchronizing call (QCUDA_BATCH_ENDS_SYNC: the
// guest library flushes its posted work with the call that waits for it), so
// a launch and a synchronize take one round trip; the reply is then the
// call's, which reports the other entries' first failure. A batch may end
// with a query too (QCUDA_BATCH_ENDS_QUERY: an event or stream query, which
// does not wait): the reply's status is then the query's own, and the other
// entries' first failure is its value, which the guest keeps as it keeps a
// batch's failure.
import type { BatchEnding, Call, Result, Run, Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import {
  CALLS,
  Cmd,
  cmdName,
  decode,
  LAYOUT,
  QCUDA_BATCH_ENDS_QUERY,
  QCUDA_BATCH_ENDS_SYNC,
  QCUDA_MAX_BATCH,
  Status,
  type CmdName,
  type StructName,
} from '../proto';
import type { LaunchDesc } from '../provider';
import type { CallDecl } from '../wire/protocol';
import { postedLaunch } from './launch';
import { later, then, type Now } from '../../sys/now';

const nothing = (): void => undefined;
const NO_BYTES = new Uint8Array(0);

const ENTRY = LAYOUT.qcuda_batch_entry.size;
/** Where a launch's stream lies in its argument struct. */
const LAUNCH_STREAM = LAYOUT.qcuda_args_launch.offsets.stream;
/** Launch jobs a session may have handed to the provider and not seen enqueued. */
const LAUNCH_JOBS = 2;
/** What a deferred entry costs in memory besides its argument bytes (closures, promises, the decoded call), counted against VmLimits.deferredBytes. */
const DEFERRED_OVERHEAD = 512;

/** The commands that may be posted (declared `posted`): they enqueue work and never wait for it. */
type PostedCmd = { [K in CmdName]: (typeof CALLS)[K] extends { posted: true } ? K : never }[CmdName];
/** What a batch runs its entries with, but launches (which go to the provider together). */
export type PostedRuns = Runs<Exclude<PostedCmd, 'LAUNCH'>>;

/** Postable command number -> its argument struct. */
const POSTABLE = new Map<number, StructName>(
  Object.values(CALLS).flatMap((d) => ('posted' in d && d.posted ? [[d.cmd, d.args] as [number, StructName]] : [])),
);

/** Postable commands whose struct is followed by more bytes (a launch's parameters). */
const VAR_ARGS = new Set<number>(
  Object.values(CALLS).flatMap((d) => ('posted' in d && d.posted && 'varArgs' in d && d.varArgs ? [d.cmd] : [])),
);

/**
 * The commands that may end a batch: declared `syncs` (they wait for posted
 * work and report its errors) or `endsBatch` (queries: they do not wait, and
 * their status is their own); no data, no output.
 */
export type EndingCmd = {
  [K in CmdName]: (typeof CALLS)[K] extends { syncs: true } | { endsBatch: true } ? K : never;
}[CmdName];
/** Runs one of them as the dispatcher would (after its gate). */
export type RunEnding = (name: EndingCmd, c: Call) => Now<Result>;

/** The batch flag of an ending command: what its declaration says it is. */
function endingFlag(name: string, d: CallDecl): number | undefined {
  if (!d.syncs && !d.endsBatch) return undefined;
  if ((d.syncs && d.endsBatch) || d.data || d.out || d.varArgs)
    throw new Error(`${name}: only a call with no data and no output may end a batch, as syncs or endsBatch`);
  return d.syncs ? QCUDA_BATCH_ENDS_SYNC : QCUDA_BATCH_ENDS_QUERY;
}

/** Ending command number -> its name, its argument struct, if any, and the batch flag it ends a batch with. */
const ENDING = new Map<number, { name: EndingCmd; args?: StructName; flag: number }>(
  (Object.entries(CALLS) as [EndingCmd, CallDecl][]).flatMap(([name, d]) => {
    const flag = endingFlag(name, d);
    return flag === undefined ? [] : [[d.cmd, { name, args: d.args, flag }] as const];
  }),
);

interface Entry {
  cmd: number;
  /** The argument bytes (the struct, then a launch's parameters). */
  args: Uint8Array;
}

const bad = (msg: string) => new CudaError(Status.BAD_REQUEST, `BATCH: ${msg}`);

/** The batch's bytes, copied out of guest memory. */
function gather(c: Call<'BATCH'>, bytes: bigint): Uint8Array {
  if (bytes > BigInt(QCUDA_MAX_BATCH))
    throw new CudaError(Status.TOO_LARGE, `BATCH of ${bytes} bytes (QCUDA_MAX_BATCH is ${QCUDA_MAX_BATCH})`);
  if (c.dataOffset !== 0n || c.dataLen !== bytes) throw bad(`${c.dataLen} data bytes at ${c.dataOffset} for a batch of ${bytes}`);
  const out = new Uint8Array(Number(bytes));
  let at = 0;
  for (const d of c.data) {
    out.set(d.view, at);
    at += d.len;
  }
  return out;
}

/** The name of a batch's ending flag, for messages. */
const flagName = (ending: number): string => (ending === QCUDA_BATCH_ENDS_SYNC ? 'QCUDA_BATCH_ENDS_SYNC' : 'QCUDA_BATCH_ENDS_QUERY');

/** Splits the batch into entries, checking all of its framing first; ending (a flag, 0: none): the last entry is a command that ends a batch so. */
export function parseBatch(buf: Uint8Array, count: number, ending = 0): Entry[] {
  if (ending !== 0 && count === 0) throw bad(`${flagName(ending)} with no entry to end it`);
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const entries: Entry[] = [];
  let at = 0;
  while (at < buf.length) {
    if (entries.length >= count) throw bad(`more than the ${count} entries announced`);
    if (buf.length - at < ENTRY) throw bad(`truncated entry header at byte ${at}`);
    const cmd = v.getUint32(at, true);
    const len = v.getUint32(at + 4, true);
    const last = ending !== 0 && entries.length === count - 1;
    const size = last ? endingArgsSize(cmd, ending, entries.length) : postedArgsSize(cmd, entries.length);
    if (VAR_ARGS.has(cmd) && !last ? len < size : len !== size)
      throw bad(`entry ${entries.length}: ${len} argument bytes for ${cmdName(cmd)}`);
    // Plain arithmetic, not (len + 7) & ~7: JavaScript's bitwise operators
    // work in 32 bits, so a len near 2^32 would wrap to a small padded size.
    const padded = len + ((8 - (len % 8)) % 8);
    if (padded > buf.length - at - ENTRY) throw bad(`entry ${entries.length} runs past the end of the batch`);
    entries.push({ cmd, args: buf.subarray(at + ENTRY, at + ENTRY + len) });
    at += ENTRY + padded;
  }
  if (entries.length !== count) throw bad(`${entries.length} entries, ${count} announced`);
  return entries;
}

function postedArgsSize(cmd: number, index: number): number {
  const struct = POSTABLE.get(cmd);
  if (struct === undefined) throw bad(`entry ${index}: command ${cmdName(cmd)} cannot be posted`);
  return LAYOUT[struct].size;
}

function endingArgsSize(cmd: number, ending: number, index: number): number {
  const s = ENDING.get(cmd);
  if (s?.flag !== ending) throw bad(`entry ${index}: command ${cmdName(cmd)} cannot end a batch (${flagName(ending)})`);
  return s.args ? LAYOUT[s.args].size : 0;
}

/** The first failure of a batch: its entry index and status. */
class Outcome {
  index = -1;
  status = 0;
  note(index: number, e: unknown): void {
    if (!(e instanceof CudaError)) throw e;
    if (this.index >= 0) return;
    this.index = index;
    this.status = e.code;
  }
}

/** The stream an entry works on, and the event it records or waits for. */
function targets(cmd: number, args: Record<string, unknown>): { stream: bigint; records?: bigint; uses?: bigint } {
  const stream = args.stream as bigint;
  if (cmd === Cmd.EVENT_RECORD) return { stream, records: args.event as bigint };
  if (cmd === Cmd.STREAM_WAIT_EVENT) return { stream, uses: args.event as bigint };
  return { stream };
}

/** What an entry's call takes from its batch's. */
type BatchCaller = Pick<Call, 'session' | 'queue' | 'dev'>;

/** An entry as a command of its own sees it: the batch's session and queue, its own arguments (and the bytes after its struct), no data. */
function entryCall(c: BatchCaller, args: object, extra: Uint8Array = NO_BYTES): Call {
  // Written out, not spread from c: a spread copies every field the slow way, on every synchronize that ends a batch.
  const call = {
    session: c.session,
    args,
    queue: c.queue,
    data: [],
    dataOffset: 0n,
    dataLen: 0n,
    dev: c.dev,
    extra,
  } satisfies Record<keyof Call, unknown>;
  return call as unknown as Call;
}

/** A posted launch's stream, read where qcuda_args_launch has it, without decoding the rest. */
function launchStream(e: Entry): bigint {
  return new DataView(e.args.buffer, e.args.byteOffset + LAUNCH_STREAM, 8).getBigUint64(0, true);
}

function merge(a: Promise<void> | undefined, b: Promise<void> | undefined): Promise<void> | undefined {
  return a && b ? Promise.all([a, b]).then(() => undefined) : (a ?? b);
}

/**
 * Runs a batch's entries in order. Consecutive launches go to the provider as
 * one call. An entry whose stream (or event) is held by a host function that
 * has not run yet is deferred behind it (callbacks.ts), so the batch's reply
 * never waits for the guest's own callback thread; a deferred entry's failure
 * is the session's async error, reported at the next synchronize.
 */
class Runner {
  readonly out = new Outcome();
  #launches: LaunchDesc[] = [];

  constructor(
    readonly c: Call<'BATCH'>,
    readonly runs: PostedRuns,
  ) {}

  /** Runs entries from `from` on: at once while every entry finishes on this thread, going on once one that waits has. */
  run(entries: Entry[], from = 0): Now<void> {
    for (let i = from; i < entries.length; i++) {
      let r: Now<void>;
      try {
        // A launch is taken at once (no promise step each: a batch may hold hundreds).
        if (entries[i].cmd === Cmd.LAUNCH && this.#launch(entries[i])) continue;
        r = this.#entry(entries[i]);
      } catch (e) {
        this.out.note(i, e);
        continue;
      }
      if (later(r))
        return r.then(
          () => this.run(entries, i + 1),
          (e: unknown) => {
            this.out.note(i, e);
            return this.run(entries, i + 1);
          },
        );
    }
    return this.#sendLaunches();
  }

  /** A posted launch: gathered for the provider (true), or, behind a host function, left to #entry (false). */
  #launch(e: Entry): boolean {
    // The hot path: no decoding beyond postedLaunch's.
    const stream = launchStream(e);
    if (this.c.session.callbacks.gate(stream)) return false;
    this.#launches.push(postedLaunch(this.c.session, e.args));
    return true;
  }

  /** Any entry but a launch #launch took: at once where it finishes on this thread. */
  #entry(e: Entry): Now<void> {
    const cb = this.c.session.callbacks;
    if (e.cmd === Cmd.LAUNCH) {
      // Behind a host function that has not run yet (#launch took the others).
      const stream = launchStream(e);
      const gate = cb.gate(stream)!;
      const l = postedLaunch(this.c.session, e.args);
      return then(this.#sendLaunches(), () => {
        cb.defer(
          stream,
          gate,
          async () => (await this.c.session.context()).launchMany([l]),
          (err) => this.#late(err),
          e.args.length + DEFERRED_OVERHEAD,
        );
      });
    }
    const name = cmdName(e.cmd) as Exclude<PostedCmd, 'LAUNCH'>;
    const struct = POSTABLE.get(e.cmd)!;
    const args = decode(struct, e.args.subarray(0, LAYOUT[struct].size)) as Record<string, unknown>;
    const t = targets(e.cmd, args);
    const gate = e.cmd === Cmd.HOST_FUNC ? undefined : merge(cb.gate(t.stream), t.uses !== undefined ? cb.eventGate(t.uses) : undefined);
    return then(this.#sendLaunches(), () => {
      if ((e.cmd === Cmd.MEMSET || e.cmd === Cmd.MEMCPY_DTOD) && args.async !== 1)
        throw new CudaError(CudaErr.InvalidValue, `a posted ${name} must be async`);
      const run = this.runs[name] as Run<CmdName>;
      const call = entryCall(this.c, args, e.args.subarray(LAYOUT[struct].size));
      if (!gate) return then(run(call), nothing);
      cb.defer(
        t.stream,
        gate,
        async () => void (await run(call)),
        (err) => this.#late(err),
        e.args.length + DEFERRED_OVERHEAD,
        t.records,
      );
    });
  }

  /**
   * Hands the launches gathered so far to the provider without waiting for
   * them to be enqueued (the context's thread keeps their order with what
   * follows), so the next batch is read while these go to the GPU. At most
   * LAUNCH_JOBS such jobs per session are outstanding: beyond that the batch
   * waits, which is the back-pressure. Their failures are the session's
   * async error, reported at the next synchronize.
   */
  #sendLaunches(): Promise<void> | undefined {
    if (this.#launches.length === 0) return undefined;
    const list = this.#launches;
    this.#launches = [];
    const jobs = this.c.session.launchJobs;
    if (jobs.size < LAUNCH_JOBS) {
      this.#launchJob(list);
      return undefined;
    }
    return (async () => {
      while (jobs.size >= LAUNCH_JOBS) await Promise.race(jobs);
      this.#launchJob(list);
    })();
  }

  #launchJob(list: LaunchDesc[]): void {
    const jobs = this.c.session.launchJobs;
    let sent;
    try {
      sent = this.c.session.withContext((x) => x.launchMany(list));
    } catch (e) {
      return this.#late(e);
    }
    if (!later(sent)) return; // enqueued already, on this thread
    const job: Promise<void> = sent.then(
      () => void jobs.delete(job),
      (e: unknown) => {
        jobs.delete(job);
        this.#late(e);
      },
    );
    jobs.add(job);
  }

  /** A deferred entry failed after the batch was answered. */
  #late(e: unknown): void {
    this.c.session.noteAsyncError(e instanceof CudaError ? e.code : CudaErr.Unknown);
  }
}

/**
 * The call that ends a batch, after the other entries. A synchronizing one:
 * their first failure is posted work's error, which the call reports (as it
 * would, sent on its own after the batch); the reply is the call's, with
 * the batch's value, failed or not. A query: the reply's status is its own
 * (as it would be, sent on its own), and the failure is the reply's value,
 * which the guest keeps as it keeps a batch's failure (the query neither
 * reports it nor leaves it to the session: where it shows does not depend
 * on whether the posted work left before the query or with it).
 */
export function endBatch(c: BatchCaller, e: BatchEnding, runEnding: RunEnding): Now<Result> {
  const s = ENDING.get(e.cmd);
  if (s === undefined || e.args.length !== (s.args ? LAYOUT[s.args].size : 0))
    throw bad(`${cmdName(e.cmd)} with ${e.args.length} argument bytes cannot end a batch`);
  const syncs = s.flag === QCUDA_BATCH_ENDS_SYNC;
  if (syncs && e.postedError !== 0) c.session.noteAsyncError(e.postedError);
  const value = syncs ? e.value : BigInt(e.postedError);
  const call = entryCall(c, s.args ? decode(s.args, e.args) : {});
  const answer = (r: Result): Result => ({ status: r.status ?? 0, value });
  const failed = (err: unknown): Result => {
    if (!(err instanceof CudaError)) throw err;
    return { status: err.code, value };
  };
  let r: Now<Result>;
  try {
    r = runEnding(s.name, call);
  } catch (err) {
    return failed(err);
  }
  return later(r) ? r.then(answer, failed) : answer(r);
}

/** BATCH, running posted entries with runs, and a call that ends one (a synchronize or a query) with runEnding. */
export function batchRun(runs: PostedRuns, runEnding: RunEnding): Run<'BATCH'> {
  return (c): Now<Result> => {
    const flags = c.args.flags;
    if (flags !== 0 && flags !== QCUDA_BATCH_ENDS_SYNC && flags !== QCUDA_BATCH_ENDS_QUERY)
      throw bad(`unknown flags 0x${flags.toString(16)}`);
    const ends = flags !== 0;
    const entries = parseBatch(gather(c, c.args.bytes), c.args.count, flags);
    const posted = ends ? entries.slice(0, -1) : entries;
    const r = new Runner(c, runs);
    return then(r.run(posted), () => {
      const value = BigInt(r.out.index < 0 ? posted.length : r.out.index);
      const last = entries[entries.length - 1];
      if (ends) return endBatch(c, { cmd: last.cmd, args: last.args, value, postedError: r.out.index < 0 ? 0 : r.out.status }, runEnding);
      return r.out.index < 0 ? { value } : { status: r.out.status, value };
    });
  };
}
