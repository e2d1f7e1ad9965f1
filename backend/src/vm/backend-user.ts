// Who the backends of `qcuda vm` run as. Started as root, `qcuda vm` would
// give its backends root too, and with them their GPU workers, which feed
// guest-chosen images to NVIDIA's loader and JIT (security review 2, H1).
// They run as an unprivileged user instead: `qcuda` where that user exists
// (the systemd unit's), else `nobody`. A backend needs no root: guest RAM
// comes as fds over its socket, its socket directory is made its own
// (runner.ts), and NVIDIA's device nodes are open to every user by default
// (mode 0666; where a host narrows them to a group, name a user of that
// group). Where the user cannot run a backend here (a checkout under /root,
// say), the backend stays root and the caller is told why.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export interface BackendUser {
  name: string;
  uid: number;
  gid: number;
}

export interface BackendUserChoice {
  /** undefined: the backend runs as this process does. */
  user?: BackendUser;
  /** Why it is not the default user (to print). */
  note?: string;
  /** Why the default user cannot be used (with note). */
  why?: string;
}

/** What a backend loads first: its devices, the providers and the addon. */
const DEVICES_JS = path.resolve(__dirname, '..', 'devices', 'index.js');

/** A user's uid and primary gid (getent: NSS users too), or undefined where there is no such user. */
export function lookupUser(name: string): BackendUser | undefined {
  const r = spawnSync('getent', ['passwd', name], { encoding: 'utf8', timeout: 10_000 });
  const f = r.status === 0 ? r.stdout.trim().split(':') : [];
  return f.length >= 4 && /^\d+$/.test(f[2]) && /^\d+$/.test(f[3]) ? { name, uid: +f[2], gid: +f[3] } : undefined;
}

/**
 * Where a dropped backend's socket directory goes: /run, root's run-time
 * files (the temp dir may be closed to other users: mode 0700), else the
 * temp dir.
 */
export function socketBase(): string {
  return fs.statSync('/run', { throwIfNoEntry: false })?.isDirectory() ? '/run' : os.tmpdir();
}

/**
 * Why user cannot start a backend here (the code or socketBase() closed to
 * it, or one of writable not writable by it), or undefined where it can.
 */
function cannotRun(user: BackendUser, writable: string[]): string | undefined {
  const probe =
    'const fs = require("fs"); fs.accessSync(process.argv[1], fs.constants.X_OK); require(process.argv[2]);' +
    ' for (const d of process.argv.slice(3)) fs.accessSync(d, fs.constants.W_OK | fs.constants.X_OK)';
  const r = spawnSync(process.execPath, ['-e', probe, socketBase(), DEVICES_JS, ...writable], {
    uid: user.uid,
    gid: user.gid,
    cwd: '/',
    encoding: 'utf8',
    timeout: 30_000,
  });
  if (r.status === 0) return undefined;
  const why = r.error?.message ?? r.stderr.split('\n').find((l) => /^\w*Error/.test(l)) ?? `status ${r.status}`;
  return `user ${user.name} cannot run it here (${why})`;
}

/**
 * The user for `--backend-user` (undefined: the default). Only root can
 * choose; 'root' keeps root. An unusable user that was asked for is a
 * Error; the default one that is unusable leaves root, with a note.
 * writable: directories the user must be able to write in (qcuda-backend's
 * socket directories).
 */
export function chooseBackendUser(wanted: string | undefined, writable: string[] = []): BackendUserChoice {
  if (process.geteuid?.() !== 0) {
    if (wanted !== undefined) throw new Error('--backend-user needs root (the backend runs as you)');
    return {};
  }
  if (wanted === 'root') return {};
  const name = wanted ?? (lookupUser('qcuda') ? 'qcuda' : 'nobody');
  const user = lookupUser(name);
  if (!user) {
    if (wanted !== undefined) throw new Error(`--backend-user=${wanted}: no such user`);
    return { note: `the backend runs as root: there is no user ${name}`, why: `there is no user ${name}` };
  }
  if (user.uid === 0) return {};
  const why = cannotRun(user, writable);
  if (!why) return { user };
  if (wanted !== undefined) throw new Error(`--backend-user=${wanted}: ${why}`);
  return { note: `the backend runs as root: ${why}; pass --backend-user=root to keep root without this note`, why };
}

/** A socket directory of user's own (mode 0700), which root (QEMU) reaches too. */
export function makeSocketDir(user: BackendUser): string {
  const dir = fs.mkdtempSync(path.join(socketBase(), 'qcuda-vm-'));
  fs.chownSync(dir, user.uid, user.gid);
  return dir;
}
