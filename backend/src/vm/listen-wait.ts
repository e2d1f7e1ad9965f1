// Waiting for a started process (a backend, a virtiofsd) to create its
// listening socket. No fixed short limit: on a loaded host (dozens of VMs
// started at once) a backend can take well over 10 s to load Node, its
// addon and probe the GPU, and it is not stuck. So the wait goes on while
// the process lives, up to a generous bound that grows with the host's load;
// a process that exits fails the wait at once, with its status and stderr.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';

/** The bound on an unloaded host: far above a normal start (well under 1 s). */
const BASE_LIMIT_MS = 120_000;
/** Added per unit of 1-minute load average per CPU. */
const LOAD_MS = 5_000;
/** When the one line saying what is waited for is printed. */
const NOTICE_MS = 3_000;
const POLL_MS = 25;

export interface ListenWait {
  /** Who listens, after "the" in messages ("backend", "virtiofsd for share /data"). */
  name: string;
  sock: string;
  /** What the process wrote to stderr so far. */
  stderr: () => string;
  /** Receives one line once the wait has taken NOTICE_MS. */
  onWaiting?: (line: string) => void;
  /** Tests: the bound (default: 120 s + 5 s per unit of load per CPU). */
  limitMs?: number;
  /** Tests: when the line is printed. */
  noticeMs?: number;
}

export class ListenError extends Error {
  override readonly name = 'ListenError';
}

/** How a process ended ("exited with status 2", "killed by SIGKILL"), once it has. */
export function exited(p: ChildProcess): Promise<string> {
  return new Promise((resolve) => {
    const describe = (code: number | null, sig: string | null) => (sig ? `killed by ${sig}` : `exited with status ${code}`);
    if (p.exitCode !== null || p.signalCode !== null) return resolve(describe(p.exitCode, p.signalCode));
    p.once('exit', (code, sig) => resolve(describe(code, sig)));
    p.once('error', (e) => resolve(`could not start: ${e.message}`));
  });
}

export function tail(s: string, lines = 15): string {
  return s.trimEnd().split('\n').slice(-lines).join('\n');
}

function loadLimitMs(): number {
  const cpus = Math.max(1, os.availableParallelism());
  return BASE_LIMIT_MS + Math.round((LOAD_MS * os.loadavg()[0]) / cpus);
}

const sleep = (ms: number) => new Promise<undefined>((r) => setTimeout(() => r(undefined), ms));

/** Its stderr is complete only once its pipes closed, which can come after 'exit'. */
async function drained(p: ChildProcess): Promise<void> {
  if (!p.stderr || p.stderr.closed) return;
  await Promise.race([new Promise((r) => p.stderr!.once('close', r)), sleep(1000)]);
}

/** Resolves once w.sock exists; throws ListenError when p exits first or the bound passes. */
export async function waitForListen(p: ChildProcess, w: ListenWait): Promise<void> {
  const died = exited(p);
  const t0 = Date.now();
  let noticed = false;
  for (;;) {
    if (fs.existsSync(w.sock)) return;
    const how = await Promise.race([died, sleep(POLL_MS)]);
    if (how) {
      await drained(p);
      const err = tail(w.stderr());
      throw new ListenError(`the ${w.name} ${how} before listening${err ? `:\n${err}` : ' (it wrote nothing on stderr)'}`);
    }
    const waited = Date.now() - t0;
    if (!noticed && waited >= (w.noticeMs ?? NOTICE_MS)) {
      noticed = true;
      w.onWaiting?.(`waiting for the ${w.name} to listen on ${w.sock} (${Math.round(waited / 1000)} s)`);
    }
    // The load is read again each round: a host that gets busier meanwhile gets more time.
    const limit = w.limitMs ?? loadLimitMs();
    if (waited > limit) {
      const err = tail(w.stderr());
      throw new ListenError(
        `the ${w.name} is running but did not create ${w.sock} within ${Math.round(limit / 1000)} s${err ? `; its stderr:\n${err}` : ''}`,
      );
    }
  }
}
