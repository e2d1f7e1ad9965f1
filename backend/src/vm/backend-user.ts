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
 * The uids `qcuda vm` and `qcuda run` started as root give each VM's
 * backends (security review 3, N1): a uid, and a gid of the same number,
 * of its own, so that no VM's processes share a user with another's (its
 * /proc, its signals, its files). 4096 of them from 0x7a000000, inside the
 * range systemd leaves unused (1879048192-2147483647: no user of a
 * distribution, of DynamicUser= or of systemd-nspawn's private users).
 */
export const VM_UIDS = { base: 0x7a000000, count: 4096 } as const;

/** Where the leases of VM uids are (root's: mode 0700), one file per uid in use, naming the process that holds it. */
export function vmUidLeases(): string {
  return path.join(socketBase(), 'qcuda-vm-uids');
}

/** pid's start time (/proc/PID/stat field 22), or undefined where it runs no more. */
function startTime(pid: number): string | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[0] === 'Z' ? undefined : f[19];
  } catch {
    return undefined;
  }
}

/** The uids in VM_UIDS that some process runs as now (a lease's holder killed, its processes not yet gone). */
function vmUidsRunning(): Set<number> {
  const used = new Set<number>();
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const uid = +/^Uid:\s+\d+\s+(\d+)/m.exec(fs.readFileSync(`/proc/${e}/status`, 'utf8'))![1];
      if (uid >= VM_UIDS.base && uid < VM_UIDS.base + VM_UIDS.count) used.add(uid);
    } catch {
      // gone meanwhile
    }
  }
  return used;
}

/**
 * A uid of VM_UIDS no other VM has, leased to this process until release()
 * or its exit: a lease file made O_EXCL names its holder (pid and start
 * time); one whose holder is gone, and whose uid no process runs as, is
 * taken over.
 */
export function leaseVmUser(dir = vmUidLeases()): BackendUser & { release(): void } {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = fs.lstatSync(dir);
  if (!st.isDirectory() || st.uid !== 0 || (st.mode & 0o022) !== 0) throw new Error(`${dir} is not a directory of root's own`);
  const me = `${process.pid} ${startTime(process.pid)}`;
  const running = vmUidsRunning();
  for (let i = 0; i < VM_UIDS.count; i++) {
    const uid = VM_UIDS.base + i;
    if (running.has(uid)) continue;
    const file = path.join(dir, String(uid));
    for (let attempt = 0; attempt < 2; attempt++) {
      try {
        fs.writeFileSync(file, me, { flag: 'wx', mode: 0o600 });
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
        const [pid, start] = fs.readFileSync(file, 'utf8').split(' ');
        if (/^\d+$/.test(pid) && startTime(+pid) === start) break; // held
        fs.rmSync(file, { force: true }); // its holder is gone: taken over
        continue;
      }
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        process.off('exit', release);
        try {
          if (fs.readFileSync(file, 'utf8') === me) fs.rmSync(file, { force: true });
        } catch {
          // gone already
        }
      };
      process.on('exit', release);
      return { name: `uid ${uid}`, uid, gid: uid, release };
    }
  }
  throw new Error(`all ${VM_UIDS.count} VM uids from ${VM_UIDS.base} are in use`);
}

/**
 * The user for `--backend-user` (undefined: the default). Only root can
 * choose; 'root' keeps root. An unusable user that was asked for is a
 * Error; the default one that is unusable leaves root, with a note.
 * writable: directories the user must be able to write in (qcuda-backend's
 * socket directories). perVm (qcuda vm, qcuda run): the default is a uid of
 * the VM's own (leaseVmUser), else qcuda or nobody.
 */
export function chooseBackendUser(wanted: string | undefined, writable: string[] = [], perVm = false): BackendUserChoice {
  if (process.geteuid?.() !== 0) {
    if (wanted !== undefined) throw new Error('--backend-user needs root (the backend runs as you)');
    return {};
  }
  if (wanted === 'root') return {};
  if (wanted === undefined && perVm) {
    let lease: ReturnType<typeof leaseVmUser> | undefined;
    try {
      lease = leaseVmUser();
    } catch {
      // no lease (a full range, no directory of root's): qcuda or nobody below
    }
    if (lease && !cannotRun(lease, writable)) return { user: lease };
    lease?.release();
  }
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
