// Shared by the libvirt tests (libvirt.test.ts, libvirt-windows.test.ts):
// virsh on the right URI, a libvirt daemon to talk to (the system's, else
// one of the test's own, held by one test file at a time), polling, QEMU's
// pid, stopping a child.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

// As root, libvirt's session URI is the system daemon's (root has no session
// daemon of its own); CI runs as root.
export const URI = process.getuid?.() === 0 ? 'qemu:///system' : 'qemu:///session';

export function virsh(...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('virsh', ['-c', URI, ...args], { encoding: 'utf8', timeout: 60_000 });
  return { status: r.status, out: `${r.stdout ?? ''}${r.stderr ?? ''}`.trim() };
}

export function stopChild(p: ChildProcess): Promise<void> {
  if (p.exitCode !== null || p.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => p.kill('SIGKILL'), 5000);
    p.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    p.kill('SIGTERM');
  });
}

/**
 * A libvirt daemon to talk to: the one that answers (systemd's socket
 * units start it), else one of the test's own (a container without systemd,
 * as CI is), with virtlogd, which writes QEMU's log and file serial ports.
 * Returns the processes it started, for the caller to stop.
 */
async function ensureLibvirtd(): Promise<ChildProcess[]> {
  if (virsh('uri').status === 0) return [];
  const started: ChildProcess[] = [];
  const daemon = (bin: string) => {
    const p = spawn(bin, [], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    p.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    p.once('exit', (code, sig) => (err += `\n${bin} exited (${sig ?? code})`));
    started.push(p);
    return () => err;
  };
  if (!fs.existsSync('/run/libvirt/virtlogd-sock')) daemon('/usr/sbin/virtlogd');
  const libvirtdErr = daemon('/usr/sbin/libvirtd');
  if (!(await poll(() => virsh('uri').status === 0, 30_000))) {
    await Promise.all(started.reverse().map(stopChild));
    throw new Error(`libvirtd did not answer within 30 s:\n${libvirtdErr()}`);
  }
  return started;
}

/** Held by one test file at a time: ava runs the files at once, and one's daemon must not be stopped under another's domain. */
const LOCK = path.join(os.tmpdir(), 'qcuda-test-libvirtd.lock');

/** flock(1) on LOCK, held while its cat reads our pipe (a test that dies lets it go). */
function lock(waitS: number): Promise<ChildProcess> {
  const p = spawn('flock', ['--timeout', String(waitS), LOCK, 'sh', '-c', 'echo held; exec cat'], { stdio: ['pipe', 'pipe', 'ignore'] });
  return new Promise((resolve, reject) => {
    p.stdout!.once('data', () => resolve(p));
    p.once('exit', (code) => reject(new Error(`${LOCK} not held within ${waitS} s (flock exited ${code})`)));
  });
}

export interface Libvirtd {
  /** Whether the daemon is the test's own (none answered). */
  own: boolean;
  /** Stops the daemons the test started, then lets another test file have libvirt. */
  release: () => Promise<void>;
}

/** libvirt for this test file alone (waiting up to waitS for another's to finish): the daemon that answers, else one of its own. */
export async function holdLibvirtd(waitS = 600): Promise<Libvirtd> {
  const held = await lock(waitS);
  const unlock = () =>
    new Promise<void>((resolve) => {
      held.once('exit', () => resolve());
      held.stdin!.end();
    });
  let started: ChildProcess[];
  try {
    started = await ensureLibvirtd();
  } catch (e) {
    await unlock();
    throw e;
  }
  return {
    own: started.length > 0,
    release: async () => {
      await Promise.all(started.reverse().map(stopChild));
      await unlock();
    },
  };
}

/** Polls every 500 ms (each poll runs virsh) until cond holds or ms pass. */
export async function poll(cond: () => boolean, ms: number): Promise<boolean> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, 500));
  }
  return true;
}

export function qemuPidOf(name: string): number | undefined {
  try {
    return +fs.readFileSync(`/run/libvirt/qemu/${name}.pid`, 'utf8');
  } catch {
    return undefined;
  }
}
