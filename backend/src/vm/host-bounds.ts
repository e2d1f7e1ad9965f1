// Host memory, tasks and CPU for a VM's backends and their workers
// (security review 3, N10). A VM may run 64 workers, each JITting and
// loading guest-chosen images in the driver's host memory for as long as
// the driver takes: without a bound one VM can take the host's RAM or CPU
// from every other. `qcuda vm` and `qcuda run` put the backends they start
// (their workers are their children, so they follow) in a control group of
// the VM's own, made beside the one this process runs in: cgroup v2 where
// its parent delegates the controllers needed, else the v1 hierarchies of
// those controllers where mounted and writable (root, as a rule). Where
// neither can be made the caller says so, once, and no bound applies. The
// systemd unit sets the same bounds itself (MemoryMax=, TasksMax=,
// CPUQuota=: packaging/systemd/qcuda-backend@.service).
import fs from 'node:fs';
import path from 'node:path';
import { parseSize } from '../qcuda/choose-provider';

/** What a VM's backends may use of the host together; 0: no bound of that kind. */
export interface HostBounds {
  /** Bytes of host memory (MemoryMax=). */
  memoryMax: bigint;
  /** Processes and threads (TasksMax=). */
  tasksMax: number;
  /** CPU time, in percent of one CPU (CPUQuota=). */
  cpuQuota: number;
}

/** The defaults, the unit's too: room for 64 workers with NVIDIA's libraries loaded; no CPU cap unless asked. */
export const HOST_BOUNDS_DEFAULT: HostBounds = { memoryMax: 32n << 30n, tasksMax: 8192, cpuQuota: 0 };

/** --host-memory-max, --host-tasks-max and --host-cpu-quota ("none" or 0: no bound); throws a usage message. */
export function parseHostBounds(o: { memory?: string; tasks?: string; cpu?: string }): HostBounds {
  const int = (v: string | undefined, name: string, dflt: number, max: number): number => {
    if (v === undefined) return dflt;
    if (v === 'none') return 0;
    if (!/^\d+$/.test(v) || +v > max) throw new Error(`--${name} must be none or an integer in 0..${max}, got '${v}'`);
    return +v;
  };
  let memoryMax = HOST_BOUNDS_DEFAULT.memoryMax;
  if (o.memory === 'none') memoryMax = 0n;
  else if (o.memory !== undefined) {
    try {
      memoryMax = parseSize(o.memory);
    } catch (e) {
      throw new Error(`--host-memory-max: ${(e as Error).message}`);
    }
  }
  return {
    memoryMax,
    tasksMax: int(o.tasks, 'host-tasks-max', HOST_BOUNDS_DEFAULT.tasksMax, 1 << 22),
    cpuQuota: int(o.cpu, 'host-cpu-quota', HOST_BOUNDS_DEFAULT.cpuQuota, 100 * 4096),
  };
}

/** Each control file to write: its name in v2 and in v1 (under the controller's hierarchy), and its value. */
function settings(b: HostBounds): { controller: string; v2: string; v1: string; value: (dir: string) => string }[] {
  const out = [];
  if (b.memoryMax > 0n) out.push({ controller: 'memory', v2: 'memory.max', v1: 'memory.limit_in_bytes', value: () => String(b.memoryMax) });
  if (b.tasksMax > 0) out.push({ controller: 'pids', v2: 'pids.max', v1: 'pids.max', value: () => String(b.tasksMax) });
  if (b.cpuQuota > 0) {
    // Per 100 ms period: quota / 100 CPUs of it.
    const us = Math.round(b.cpuQuota * 1000);
    out.push({
      controller: 'cpu',
      v2: 'cpu.max',
      v1: 'cpu.cfs_quota_us',
      value: (d: string) => (d === 'v2' ? `${us} 100000` : String(us)),
    });
  }
  return out;
}

/** A mounted cgroup hierarchy: where, and its root's path in this process's view. */
interface Mount {
  point: string;
  root: string;
}

/** cgroup mounts by controller ('' for v2), from /proc/self/mountinfo. */
function mounts(): Map<string, Mount> {
  const out = new Map<string, Mount>();
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const [left, right] = line.split(' - ');
    if (!right) continue;
    const f = left.split(' ');
    const [type, , superOpts] = right.split(' ');
    const m = { point: f[4], root: f[3] };
    if (type === 'cgroup2') out.set('', m);
    else if (type === 'cgroup') for (const c of superOpts.split(',')) if (!out.has(c)) out.set(c, m);
  }
  return out;
}

/** This process's cgroup path by controller ('' for v2), from /proc/self/cgroup. */
function ownPaths(): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const m = /^\d+:([^:]*):(.*)$/.exec(line);
    if (m) for (const c of m[1] === '' ? [''] : m[1].split(',')) out.set(c, m[2]);
  }
  return out;
}

/** Where this process's cgroup of a hierarchy is in the file system. */
function ownDir(m: Mount, own: string): string {
  const rel = m.root !== '/' && own.startsWith(m.root) ? own.slice(m.root.length) : own;
  return path.join(m.point, rel);
}

/** A VM's control group: one directory (v2) or one per controller (v1); add() puts a process in it. */
export class HostCgroup {
  private constructor(
    readonly dirs: string[],
    readonly version: 1 | 2,
  ) {
    // A run that ends by process.exit (a usage error found late) skips remove(): the empty group goes anyway.
    process.once('exit', () => this.#rmdirs());
  }

  /** rmdir of each directory, once; false if one is still busy (a process in it). */
  #rmdirs(): boolean {
    let all = true;
    for (const d of this.dirs) {
      try {
        fs.rmdirSync(d);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENOENT') all = false;
      }
    }
    return all;
  }

  /**
   * Makes the group for name (a word of the VM's), bounded by b; a string
   * says why none could be made. Nothing to bound: undefined.
   */
  static make(name: string, b: HostBounds): HostCgroup | string | undefined {
    const want = settings(b);
    if (want.length === 0) return undefined;
    const leaf = `qcuda-${name}-${process.pid}`;
    const why: string[] = [];
    let all: Map<string, Mount>;
    let own: Map<string, string>;
    try {
      all = mounts();
      own = ownPaths();
    } catch (e) {
      return `no control groups here (${(e as Error).message})`;
    }
    // v2: beside this process's group (one with processes cannot have children with controllers),
    // or under the root, which may (a process in it: a container's init, say).
    const v2 = all.get('');
    const ownV2 = own.get('');
    if (v2 && ownV2 !== undefined) {
      const mine = ownDir(v2, ownV2);
      const parent = path.resolve(mine) === path.resolve(v2.point) ? v2.point : path.dirname(mine);
      try {
        const delegated = fs.readFileSync(path.join(parent, 'cgroup.subtree_control'), 'utf8').split(/\s+/);
        const missing = want.filter((w) => !delegated.includes(w.controller)).map((w) => w.controller);
        if (missing.length > 0) throw new Error(`${parent} does not delegate ${missing.join(', ')}`);
        return HostCgroup.#made(2, [path.join(parent, leaf)], want);
      } catch (e) {
        why.push(`cgroup v2: ${(e as Error).message}`);
      }
    }
    // v1: a group under this process's own in each controller's hierarchy.
    const dirs: string[] = [];
    for (const w of want) {
      const m = all.get(w.controller);
      const p = own.get(w.controller);
      if (!m || p === undefined) {
        why.push(`cgroup v1: no ${w.controller} hierarchy`);
        return why.join('; ');
      }
      dirs.push(path.join(ownDir(m, p), leaf));
    }
    try {
      return HostCgroup.#made(1, dirs, want);
    } catch (e) {
      why.push(`cgroup v1: ${(e as Error).message}`);
      return why.join('; ');
    }
  }

  static #made(version: 1 | 2, dirs: string[], want: ReturnType<typeof settings>): HostCgroup {
    const made: string[] = [];
    try {
      for (const d of new Set(dirs)) {
        fs.mkdirSync(d);
        made.push(d);
      }
      want.forEach((w, i) =>
        fs.writeFileSync(path.join(version === 2 ? dirs[0] : dirs[i], version === 2 ? w.v2 : w.v1), w.value(`v${version}`)),
      );
    } catch (e) {
      for (const d of made.reverse()) fs.rmdirSync(d);
      throw e;
    }
    return new HostCgroup([...new Set(dirs)], version);
  }

  /** Moves process pid (a backend just started: its workers, started later, follow it) into the group. */
  add(pid: number): void {
    for (const d of this.dirs) {
      try {
        fs.writeFileSync(path.join(d, 'cgroup.procs'), String(pid));
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === 'ESRCH') return; // it has exited already: its start fails on its own
        throw new Error(`cannot put process ${pid} in ${d}: ${(e as Error).message}`);
      }
    }
  }

  /**
   * Removes the group once its processes are gone (rmdir takes only an
   * empty group): workers ended with their backend may take a moment
   * more; one still there after 2 s leaves the group behind.
   */
  async remove(): Promise<void> {
    for (let i = 0; !this.#rmdirs() && i < 40; i++) await new Promise((r) => setTimeout(r, 50));
  }

  /** For a log line: where, and the version. */
  toString(): string {
    return `${this.dirs.join(', ')} (cgroup v${this.version})`;
  }
}
