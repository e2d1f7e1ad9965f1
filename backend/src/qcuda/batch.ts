// BATCH: posted work. The guest library queues launches, async memsets and
// device-to-device copies, event records and stream waits, and sends them as
// one request, so a launch costs no round trip of its own. The batch is
// copied out of guest memory first (the guest cannot change it while it is
// checked), its framing is checked whole (a malformed batch runs nothing),
// then its entries run in order; a failing entry does not stop the others,
// and the first failure is what the guest sees at its next synchronizing call.
import { CudaErr, CudaError } from './cuda-error';
import type { Call, Command, Result } from './commands';
import { Cmd, decode, LAYOUT, QCUDA_MAX_BATCH, Status, type Decoded, type StructName } from './proto';
import type { LaunchDesc } from './provider';
import type { Session } from './session';

const ENTRY = LAYOUT.qcuda_batch_entry.size;
/** Launch jobs a session may have handed to the provider and not seen enqueued. */
const LAUNCH_JOBS = 2;
const LAUNCH_ARGS = LAYOUT.qcuda_args_launch.size;
/** What a deferred entry costs in memory besides its argument bytes (closures, promises, the decoded call), counted against VmLimits.deferredBytes. */
const DEFERRED_OVERHEAD = 512;

/** What may be posted: commands that enqueue work and never wait for it. */
const POSTABLE = new Map<number, StructName>([
  [Cmd.LAUNCH, 'qcuda_args_launch'],
  [Cmd.MEMSET, 'qcuda_args_memset'],
  [Cmd.MEMCPY_DTOD, 'qcuda_args_memcpy'],
  [Cmd.EVENT_RECORD, 'qcuda_args_event_record'],
  [Cmd.STREAM_WAIT_EVENT, 'qcuda_args_stream_wait_event'],
  [Cmd.HOST_FUNC, 'qcuda_args_host_func'],
]);

interface Entry {
  cmd: number;
  /** The argument bytes (the struct, then a launch's parameters). */
  args: Uint8Array;
}

const bad = (msg: string) => new CudaError(Status.BAD_REQUEST, `BATCH: ${msg}`);

/** The batch's bytes, copied out of guest memory. */
function gather(c: Call, bytes: bigint): Uint8Array {
  if (bytes > BigInt(QCUDA_MAX_BATCH)) throw new CudaError(Status.TOO_LARGE, `BATCH of ${bytes} bytes (QCUDA_MAX_BATCH is ${QCUDA_MAX_BATCH})`);
  if (c.dataOffset !== 0n || c.dataLen !== bytes) throw bad(`${c.dataLen} data bytes at ${c.dataOffset} for a batch of ${bytes}`);
  const out = new Uint8Array(Number(bytes));
  let at = 0;
  for (const d of c.data) {
    out.set(d.view, at);
    at += d.len;
  }
  return out;
}

/** Splits the batch into entries, checking all of its framing first. */
export function parseBatch(buf: Uint8Array, count: number): Entry[] {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const entries: Entry[] = [];
  let at = 0;
  while (at < buf.length) {
    if (entries.length >= count) throw bad(`more than the ${count} entries announced`);
    if (buf.length - at < ENTRY) throw bad(`truncated entry header at byte ${at}`);
    const cmd = v.getUint32(at, true);
    const len = v.getUint32(at + 4, true);
    const struct = POSTABLE.get(cmd);
    if (struct === undefined) throw bad(`entry ${entries.length}: command ${Cmd[cmd] ?? cmd} cannot be posted`);
    const size = LAYOUT[struct].size;
    if (cmd === Cmd.LAUNCH ? len < size : len !== size) throw bad(`entry ${entries.length}: ${len} argument bytes for ${Cmd[cmd]}`);
    const padded = (len + 7) & ~7;
    if (padded > buf.length - at - ENTRY) throw bad(`entry ${entries.length} runs past the end of the batch`);
    entries.push({ cmd, args: buf.subarray(at + ENTRY, at + ENTRY + len) });
    at += ENTRY + padded;
  }
  if (entries.length !== count) throw bad(`${entries.length} entries, ${count} announced`);
  return entries;
}

/** A posted launch, checked as LAUNCH checks it, ready for the provider. */
function launchOf(c: Call, args: Uint8Array): LaunchDesc {
  return launchDesc(c.session, decode('qcuda_args_launch', args.subarray(0, LAUNCH_ARGS)), args.subarray(LAUNCH_ARGS));
}

/**
 * A launch (qcuda_args_launch a, then its parameter block), posted or not,
 * checked: the parameter bytes are what the header and the kernel say, no
 * dimension is 0, the function and the stream are the session's.
 */
export function launchDesc(s: Session, a: Decoded, params: Uint8Array): LaunchDesc {
  if (params.length !== (a.param_bytes as number)) throw new CudaError(Status.BAD_REQUEST, `LAUNCH: ${params.length} parameter bytes, param_bytes says ${a.param_bytes}`);
  const f = s.func(a.func as bigint);
  if (params.length !== f.paramBytes) throw new CudaError(CudaErr.InvalidValue, `${params.length} parameter bytes for a kernel taking ${f.paramBytes}`);
  return {
    f: f.ref, grid: dims(a.grid as Uint8Array, 'grid'), block: dims(a.block as Uint8Array, 'block'),
    sharedMem: a.shared_mem as number, stream: s.stream(a.stream as bigint), params,
  };
}

function dims(raw: Uint8Array, what: string): [number, number, number] {
  const v = new DataView(raw.buffer, raw.byteOffset, 12);
  const d: [number, number, number] = [v.getUint32(0, true), v.getUint32(4, true), v.getUint32(8, true)];
  if (d.some((x) => x === 0)) throw new CudaError(CudaErr.InvalidConfiguration, `${what} dimensions ${d.join('x')}`);
  return d;
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
function targets(e: Entry, args: Decoded): { stream: bigint; records?: bigint; uses?: bigint } {
  const stream = args.stream as bigint;
  if (e.cmd === Cmd.EVENT_RECORD) return { stream, records: args.event as bigint };
  if (e.cmd === Cmd.STREAM_WAIT_EVENT) return { stream, uses: args.event as bigint };
  return { stream };
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
    readonly c: Call,
    readonly commands: Partial<Record<Cmd, Command>>,
  ) {}

  async run(entries: Entry[]): Promise<void> {
    for (let i = 0; i < entries.length; i++) {
      try {
        await this.#entry(entries[i]);
      } catch (e) {
        this.out.note(i, e);
      }
    }
    await this.#sendLaunches();
  }

  async #entry(e: Entry): Promise<void> {
    const cb = this.c.session.callbacks;
    if (e.cmd === Cmd.LAUNCH) {
      // The hot path: no decoding beyond launchOf's.
      const stream = new DataView(e.args.buffer, e.args.byteOffset + 8, 8).getBigUint64(0, true);
      const gate = cb.gate(stream);
      const l = launchOf(this.c, e.args);
      if (!gate) {
        this.#launches.push(l);
        return;
      }
      await this.#sendLaunches();
      cb.defer(stream, gate, async () => (await this.c.session.context()).launchMany([l]), (err) => this.#late(err), e.args.length + DEFERRED_OVERHEAD);
      return;
    }
    const args = decode(POSTABLE.get(e.cmd)!, e.args);
    const t = targets(e, args);
    const gate = e.cmd === Cmd.HOST_FUNC ? undefined : merge(cb.gate(t.stream), t.uses !== undefined ? cb.eventGate(t.uses) : undefined);
    await this.#sendLaunches();
    if ((e.cmd === Cmd.MEMSET || e.cmd === Cmd.MEMCPY_DTOD) && args.async !== 1)
      throw new CudaError(CudaErr.InvalidValue, `a posted ${Cmd[e.cmd]} must be async`);
    const spec = this.commands[e.cmd as Cmd]!;
    const call: Call = { ...this.c, args, data: [], dataOffset: 0n, dataLen: 0n, extra: new Uint8Array(0) };
    if (!gate) {
      await spec.run(call);
      return;
    }
    cb.defer(t.stream, gate, async () => void (await spec.run(call)), (err) => this.#late(err), e.args.length + DEFERRED_OVERHEAD, t.records);
  }

  /**
   * Hands the launches gathered so far to the provider without waiting for
   * them to be enqueued (the context's thread keeps their order with what
   * follows), so the next batch is read while these go to the GPU. At most
   * LAUNCH_JOBS such jobs per session are outstanding: beyond that the batch
   * waits, which is the back-pressure. Their failures are the session's
   * async error, reported at the next synchronize.
   */
  async #sendLaunches(): Promise<void> {
    if (this.#launches.length === 0) return;
    const list = this.#launches;
    this.#launches = [];
    const s = this.c.session;
    const jobs = s.launchJobs;
    while (jobs.size >= LAUNCH_JOBS) await Promise.race(jobs);
    const job = s.withContext((x) => x.launchMany(list)).catch((e) => this.#late(e));
    jobs.add(job);
    void job.finally(() => jobs.delete(job));
  }

  /** A deferred entry failed after the batch was answered. */
  #late(e: unknown): void {
    this.c.session.noteAsyncError(e instanceof CudaError ? e.code : CudaErr.Unknown);
  }
}

export function batchCommand(commands: Partial<Record<Cmd, Command>>): Command {
  return {
    args: 'qcuda_args_batch',
    data: 'to',
    async run(c): Promise<Result> {
      const entries = parseBatch(gather(c, c.args.bytes as bigint), c.args.count as number);
      const r = new Runner(c, commands);
      await r.run(entries);
      return r.out.index < 0 ? { value: BigInt(entries.length) } : { status: r.out.status, value: BigInt(r.out.index) };
    },
  };
}
