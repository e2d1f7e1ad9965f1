// CPU time of a process and its descendants, in nanoseconds, from
// /proc/PID/task/TID/schedstat (time on a CPU, ns; /proc/PID/stat counts in
// 10 ms ticks, too coarse for a call of microseconds). Processes that exit
// between two samples drop out of the second: sample while they live.
import fs from 'node:fs';

function read(file: string): string | undefined {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return undefined; // gone meanwhile
  }
}

function parentOf(pid: number): number | undefined {
  const stat = read(`/proc/${pid}/stat`);
  if (!stat) return undefined;
  // The command name (field 2) may hold spaces and parentheses: fields after the last ')'.
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
}

/** pid and every process below it now. */
export function processTree(pid: number): number[] {
  const parents = new Map<number, number[]>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const ppid = parentOf(Number(name));
    if (ppid === undefined) continue;
    parents.set(ppid, [...(parents.get(ppid) ?? []), Number(name)]);
  }
  const out: number[] = [];
  const walk = (p: number) => {
    out.push(p);
    for (const c of parents.get(p) ?? []) walk(c);
  };
  walk(pid);
  return out;
}

/** CPU time (ns) the process tree under pid has used so far, all threads. */
export function treeCpuNs(pid: number): number {
  let ns = 0;
  for (const p of processTree(pid)) {
    let tasks: string[];
    try {
      tasks = fs.readdirSync(`/proc/${p}/task`);
    } catch {
      continue;
    }
    for (const t of tasks) ns += Number((read(`/proc/${p}/task/${t}/schedstat`) ?? '0').split(' ')[0]);
  }
  return ns;
}
