// What the Wine tests share: Wine 8 and its cached prefix, a program run to
// its end, and a qcuda-backend serving a shared-memory region.
import type { ExecutionContext } from 'ava';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEP_ROOT, until } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
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

/** A qcuda-backend serving a region at dir/region (and nothing else), stopped by the test: at its
 * end at the latest, or by stop(), which ends it as its service manager would (SIGTERM) and
 * gives its exit status. env: more of the backend's environment (DEBUG=qcuda:device); size: the
 * region's (qcuda run's default, 512M, where a test compares how much it pins). */
export async function backend(
  t: ExecutionContext,
  dir: string,
  env: NodeJS.ProcessEnv = {},
  size = '128M',
): Promise<{ region: string; log: () => string; stop: () => Promise<number | null> }> {
  const region = path.join(dir, 'region');
  const p: ChildProcess = spawn(process.execPath, [BACKEND, '--provider=host', `--shm=${region}`, `--shm-size=${size}`, ...KEEP_ROOT], {
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
  return { region, log: () => log, stop };
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
