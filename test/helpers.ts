// Shared by the tests: temporary dirs, a backend + test frontend pair over a
// real socket, open-fd counting, a seeded PRNG.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ExecutionContext } from 'ava';
import { VhostUserServer, type VhostUserDevice } from '../backend/src/vhost-user';
import { Frontend, GuestMemory, type StartOptions } from '../backend/src/vhost-user/frontend';

export function tmpDir(t: ExecutionContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-test-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

export function openFds(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

export interface Pair {
  server: VhostUserServer;
  fe: Frontend;
  sock: string;
  /** What the library logged (failed requests, closed connections), kept off the test's stderr. */
  logged: string[];
}

/** A listening backend for the device and a connected (not negotiated) frontend. */
export function connect(t: ExecutionContext, device: VhostUserDevice, mem?: GuestMemory): Pair {
  const sock = path.join(tmpDir(t), 'vhost.sock');
  const logged: string[] = [];
  const server = VhostUserServer.listen(sock, device, { logger: { error: (line) => logged.push(line) } });
  const fe = Frontend.connect(sock, mem ?? new GuestMemory());
  t.teardown(() => {
    if (!fe.closed) fe.close();
    server.close();
  });
  return { server, fe, sock, logged };
}

export async function started(t: ExecutionContext, device: VhostUserDevice, o: StartOptions = {}, mem?: GuestMemory): Promise<Pair> {
  const p = connect(t, device, mem);
  await p.fe.negotiate();
  await p.fe.start(o);
  return p;
}

/** Waits for the event loop to run pending I/O callbacks. */
export function tick(ms = 20): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** Polls cond (evaluated once per round: it may consume what it checks). */
export async function until(cond: () => boolean, ms = 2000): Promise<boolean> {
  const end = Date.now() + ms;
  for (;;) {
    if (cond()) return true;
    if (Date.now() > end) return false;
    await tick(5);
  }
}

/** Whether a process of ours still exists (signal 0 checks without sending). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** mulberry32: a small seeded PRNG so random tests are reproducible. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export function randomBytes(rnd: () => number, n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (rnd() * 256) | 0;
  return b;
}

/** f() as a promise: its value, its rejection, or its synchronous throw as a rejection (a Now call of the addon throws at once when it failed inline). */
export function promised<T>(f: () => T | Promise<T>): Promise<T> {
  try {
    return Promise.resolve(f());
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * For a qcuda-backend a test starts as root with its socket in the test's
 * own (root's, mode 0700) directory: root kept, as before (started as root,
 * it would run as qcuda or nobody, who cannot reach that directory).
 */
export const KEEP_ROOT: string[] = process.geteuid?.() === 0 ? ['--backend-user=root'] : [];
