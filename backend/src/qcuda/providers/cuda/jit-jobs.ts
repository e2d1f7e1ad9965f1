// The JIT and link jobs running in a provider's workers, and since when
// (security review 3, N10: how long one job runs was not bounded). A guest
// can hand its worker PTX that keeps NVIDIA's JIT busy for minutes, on the
// VM's CPU share and in a call nothing else interrupts. The backend's
// worker watch (delegation.ts, the same timer that watches queue owners)
// asks endPast each turn and kills the worker of a job that has run longer
// than the VM's bound (--jit-time-max): the guest process's calls then fail
// as every ended worker's do, and the backend and other sessions go on.
//
// A job is timed here, in the backend: a call the backend sends its worker
// (isolated.ts RemoteContext) from the send to the reply; on a queue the
// worker serves itself, from the worker's 'job' message before it calls
// the driver to the one after. A worker that never says its job ended only
// gets itself killed sooner.
import type { JobWatch, Provider, ProviderContext } from '../../provider';

/** The context methods that run the driver's JIT or linker on guest-chosen input. */
export const JIT_METHODS: ReadonlySet<string> = new Set(['moduleLoad', 'link']);

/** Jobs one worker may say it runs at once: more 'job' messages are ignored (it can only slow its own end). */
const JOBS_PER_WORKER = 256;

/** The jobs running in one worker, by id, each with when it started (ms, monotonic). */
export class WorkerJobs {
  readonly #since = new Map<number, number>();

  constructor(
    private readonly board: JitJobs,
    readonly pid: number | undefined,
    readonly kill: () => void,
  ) {}

  begin(id: number): void {
    if (this.#since.size >= JOBS_PER_WORKER) return;
    this.#since.set(id, performance.now());
    this.board.busy(this);
  }

  end(id: number): void {
    this.#since.delete(id);
    if (this.#since.size === 0) this.board.idle(this);
  }

  /** The worker is gone: its jobs with it. */
  clear(): void {
    this.#since.clear();
    this.board.idle(this);
  }

  /** How long its oldest job has run, ms (0: none runs). */
  oldest(now: number): number {
    let from = now;
    for (const t of this.#since.values()) from = Math.min(from, t);
    return now - from;
  }
}

/** A provider's workers with jobs running. */
export class JitJobs implements JobWatch {
  readonly #busy = new Set<WorkerJobs>();
  readonly #listeners = new Set<() => void>();

  /** A worker's job list, for a worker that may run jobs. */
  forWorker(pid: number | undefined, kill: () => void): WorkerJobs {
    return new WorkerJobs(this, pid, kill);
  }

  busy(w: WorkerJobs): void {
    this.#busy.add(w);
    for (const l of this.#listeners) l();
  }

  idle(w: WorkerJobs): void {
    this.#busy.delete(w);
  }

  listen(onStart: () => void): () => void {
    this.#listeners.add(onStart);
    return () => this.#listeners.delete(onStart);
  }

  get running(): boolean {
    return this.#busy.size > 0;
  }

  endPast(ms: number): string[] {
    const now = performance.now();
    const lines: string[] = [];
    for (const w of this.#busy) {
      const ran = w.oldest(now);
      if (ran <= ms) continue;
      lines.push(
        `qcuda: GPU worker pid ${w.pid}: a JIT or link job ran ${(ran / 1000).toFixed(1)} s, past --jit-time-max=${ms / 1000}: killed`,
      );
      w.clear();
      w.kill();
    }
    return lines;
  }
}

/**
 * In a worker that serves its own queue: every context provider p opens
 * says, through say, when each JIT or link job begins and ends, so that
 * the backend can time it (the job itself runs here).
 */
export function reportJobs(p: Provider, say: (id: number, on: boolean) => void): void {
  let next = 1;
  const open = p.openContext.bind(p);
  p.openContext = async (...a) => {
    const ctx = await open(...a);
    const calls = ctx as unknown as Record<string, (...x: unknown[]) => Promise<unknown>>;
    for (const m of JIT_METHODS) {
      const run = calls[m].bind(ctx);
      calls[m] = async (...x: unknown[]) => {
        const id = next++;
        say(id, true);
        try {
          return await run(...x);
        } finally {
          say(id, false);
        }
      };
    }
    return ctx as ProviderContext;
  };
}
