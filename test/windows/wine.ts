// What the Wine tests share: Wine 8 and its cached prefix, a program run to
// its end under Wine and its Linux build under qcuda run, a qcuda-backend
// serving a shared-memory region, and the end of a test that started both.
import type { ExecutionContext } from 'ava';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEP_ROOT, until } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
/** The repository's root, and what `make windows windows-dll` builds there (the .exe files and their Linux builds). */
export const ROOT = path.resolve(dist, '..');
export const WIN = path.join(ROOT, 'build', 'windows');
/** How long a program may take under Wine (a fresh prefix's first start takes its time). */
const WINE_MS = 240_000;
export const WINE = ['/usr/lib/wine/wine64', '/usr/bin/wine64', '/usr/bin/wine'].find((p) => fs.existsSync(p));
export const WINESERVER = ['/usr/lib/wine/wineserver64', '/usr/bin/wineserver'].find((p) => fs.existsSync(p));

/** Wine's environment; a test file with a prefix of its own (tag) can run
 * beside another, whose teardown's `wineserver -k` ends only its prefix's
 * processes. */
export function wineEnv(tag = ''): NodeJS.ProcessEnv {
  const version = spawnSync(WINE!, ['--version'], { encoding: 'utf8' })
    .stdout.trim()
    .replace(/[^\w.-]/g, '_');
  const prefix = path.join(os.homedir(), '.cache', 'qcuda', `wine-prefix-${version}${tag ? `-${tag}` : ''}`);
  fs.mkdirSync(path.dirname(prefix), { recursive: true });
  return { ...process.env, WINEPREFIX: prefix, WINEDEBUG: '-all', WINEARCH: 'win64' };
}

/**
 * A test's Wine: installed (it fails otherwise), the prefix of wineEnv(tag),
 * and its wineserver and everything it runs ended at the test's end. Its
 * time is a Wine test's (5 minutes).
 */
export function wineFor(t: ExecutionContext, tag = ''): NodeJS.ProcessEnv {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  const env = wineEnv(tag);
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  return env;
}

/** A Windows program run to its end under Wine, over the region at the host path region (QCUDA_SHM), or without QCUDA_SHM. */
export function wineRun(
  env: NodeJS.ProcessEnv,
  exe: string,
  args: string[] = [],
  region?: string,
): Promise<{ code: number | null; out: string }> {
  const own = { ...env };
  delete own.QCUDA_SHM;
  if (region !== undefined) own.QCUDA_SHM = winPath(region);
  return runTo(WINE!, [exe, ...args], own, WINE_MS);
}

/** A Windows program's output without Wine's own lines (a fresh prefix's, on its first start), in Linux's line ends. */
export function programLines(out: string): string {
  return out
    .replace(/\r/g, '')
    .split('\n')
    .filter((l) => !l.startsWith('wine: '))
    .join('\n');
}

/**
 * The Linux build of a program (argv) under qcuda run over a shared-memory
 * region on the emu provider, as its Windows build runs over one: its
 * status and output; the backend's log in dir. runArgs: more of qcuda
 * run's options (--cudart=qcuda).
 */
export function linuxRun(dir: string, argv: string[], runArgs: string[] = []): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [QCUDA, 'run', '--provider=emu', '--transport=shm', ...runArgs, `--backend-log=${path.join(dir, 'linux.log')}`, '--', ...argv],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A program run to its end (spawned: the test's backend is another process, but its output is waited for without blocking). */
export function runTo(cmd: string, args: string[], env: NodeJS.ProcessEnv, ms: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const killer = setTimeout(() => p.kill('SIGKILL'), ms);
    p.once('close', (code) => {
      clearTimeout(killer);
      resolve({ code, out });
    });
  });
}

export interface Backend {
  /** The region's file. */
  region: string;
  /** Its stderr so far. */
  log: () => string;
  /** Whether its log came to match re exactly count times (within 10 s): a session ended at its detach, say. */
  logged: (re: RegExp, count?: number) => Promise<boolean>;
  stop: () => Promise<number | null>;
}

/** A qcuda-backend serving a region at dir/region (and nothing else), stopped by the test: at its
 * end at the latest, or by stop(), which ends it as its service manager would (SIGTERM) and
 * gives its exit status. env: more of the backend's environment (DEBUG=qcuda:device); size: the
 * region's (qcuda run's default, 512M, where a test compares how much it pins). */
export async function backend(t: ExecutionContext, dir: string, env: NodeJS.ProcessEnv = {}, size = '128M'): Promise<Backend> {
  const region = path.join(dir, 'region');
  const p: ChildProcess = spawn(process.execPath, [BACKEND, '--provider=emu', `--shm=${region}`, `--shm-size=${size}`, ...KEEP_ROOT], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env },
  });
  let log = '';
  p.stderr!.on('data', (b: Buffer) => (log += b.toString()));
  const exited = new Promise<number | null>((resolve) => p.once('exit', (code) => resolve(code)));
  t.teardown(() => {
    p.kill('SIGKILL');
  });
  t.true(await until(() => /serving the shared-memory region/.test(log), 60_000), log);
  const stop = (): Promise<number | null> => {
    p.kill('SIGTERM');
    return exited;
  };
  const logged = (re: RegExp, count = 1) =>
    until(() => (log.match(new RegExp(re.source, `${re.flags.replace('g', '')}g`)) ?? []).length === count, 10_000);
  return { region, log: () => log, logged, stop };
}

/** The end of a test that started a backend and Wine: the backend exits 0 at SIGTERM, its region file gone with it, and no process of the prefix is left. */
export async function stopBoth(t: ExecutionContext, b: Backend, env: NodeJS.ProcessEnv): Promise<void> {
  t.is(await b.stop(), 0, b.log());
  t.false(fs.existsSync(b.region));
  t.deepEqual(await stopWine(env), []);
}

/** The processes whose environment names this Wine prefix (the program, wineserver, Wine's services). */
export function wineProcesses(env: NodeJS.ProcessEnv): number[] {
  const mark = `WINEPREFIX=${env.WINEPREFIX}`;
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return fs.readFileSync(`/proc/${d}/environ`, 'latin1').split('\0').includes(mark);
      } catch {
        return false; // gone meanwhile, or not ours to read
      }
    })
    .map(Number);
}

/** Ends the prefix's wineserver and everything it runs (wineserver -k), and waits until no process of the prefix is left: those left. */
export async function stopWine(env: NodeJS.ProcessEnv): Promise<number[]> {
  spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 });
  await until(() => wineProcesses(env).length === 0, 15_000);
  return wineProcesses(env);
}

/** A host path as Wine sees it (under Z:). */
export function winPath(p: string): string {
  return `Z:${p.replace(/\//g, '\\')}`;
}
