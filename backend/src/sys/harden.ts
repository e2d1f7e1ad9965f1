// What every backend and GPU worker does first (security review 3):
//  - PR_SET_DUMPABLE 0 (N1): another process of the same user (another
//    VM's backend or worker, under one uid) can no longer open its
//    /proc/PID/mem, take its fds (pidfd_getfd) or trace it; only root can.
//  - where the process that started it asked (QCUDA_DIE_WITH_PARENT: its
//    pid), the kernel ends it when that process ends (PR_SET_PDEATHSIG).
//    Backends and workers run in sessions of their own, without the
//    starter's terminal (N2), so a closed terminal's SIGHUP no longer ends
//    them; this does, also where the starter is killed outright.
// Both are reset by a change of ids, so they come after any drop of root.
import os from 'node:os';
import { native } from './native';

const PARENT = 'QCUDA_DIE_WITH_PARENT';

/** base plus what makes a child started with it end when this process ends (it calls harden()). */
export function childEnv(base: NodeJS.ProcessEnv = process.env): NodeJS.ProcessEnv {
  return { ...base, [PARENT]: String(process.pid) };
}

/** Not dumpable; ended with signal when the parent that asked ends (if it has ended already: now). */
export function harden(signal: NodeJS.Signals): void {
  native.undumpable();
  const parent = process.env[PARENT];
  delete process.env[PARENT]; // not this process's children's
  if (parent === undefined || !/^\d+$/.test(parent)) return;
  if (!native.dieWithParent(os.constants.signals[signal], +parent)) process.kill(process.pid, signal);
}
