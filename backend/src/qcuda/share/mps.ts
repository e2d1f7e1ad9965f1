// MPS mode of the GPU share (--gpu-share-mps=PIPE_DIR, issue 36): every
// process that runs a guest process's CUDA (a worker; the backend itself
// with --isolation=none) is a client of the operator's MPS control daemon,
// capped to its VM's part of the GPU's threads. Time-slicing (what the
// driver does without MPS) runs one context at a time, so a long kernel or
// a launch storm of one VM delays every other VM's next kernel; under MPS
// the VMs' kernels run side by side on their parts of the SMs (measured on
// the H200: a latency tenant's p99 beside such a neighbour 1.09x/1.13x of
// alone, against 25x/48x with admission control alone). But MPS caps each
// client (process), not each VM: a VM of 8 processes would be 8 clients'
// worth. So in this mode the gate (gate.ts, policy.ts mayPostInVm) lets
// one process of a VM at a time have work on the GPU, which makes the VM
// one client's worth, and holds no VM back for another: MPS confines each
// already, and waits across VMs only left their parts idle (measured on
// 2 x H100: aggregate 0.73, docs/gpu-sharing.md).
//
// A VM's part: 100 x its weight / the weights of the VMs in the share table
// (table.ts), itself included, at least 1; computed again for each worker as
// it starts, and fixed for that worker's life (MPS reads it once, at the
// client's first CUDA call). So a VM's workers started before the other VMs
// joined have a larger part than its weight asks for.
import fs from 'node:fs';
import path from 'node:path';
import type { ShareTable } from './table';

/** What the backend runs its CUDA processes under in MPS mode. */
export interface MpsMode {
  /** The MPS control daemon's CUDA_MPS_PIPE_DIRECTORY. */
  pipeDir: string;
  /** The share table and this VM's slot in it (joinShare). */
  table: ShareTable;
  slot: number;
  /** The VM's device memory quota: each client's pinned device memory limit. */
  memoryLimit?: bigint;
}

let mode: MpsMode | undefined;

/** Turns MPS mode on for this process's workers (the backend, at start), or off (undefined: tests). */
export function setMpsMode(m: MpsMode | undefined): void {
  mode = m;
}

/**
 * The percentage of the GPU's threads a VM of `weight` gets beside VMs of
 * `others` (their weights): at least 1. Rounded to the nearest (MPS takes an
 * integer): 12.5% taken down to 12 left weights 1:1:2:4's small two 10%
 * short of their share on the H200; the percentages are caps, so a sum of
 * 101 takes nothing from anyone.
 */
export function mpsPercentage(weight: number, others: readonly number[]): number {
  const total = others.reduce((n, w) => n + w, weight);
  return Math.max(1, Math.round((100 * weight) / total));
}

const PID_FILE = 'nvidia-cuda-mps-control.pid';

/**
 * Why PIPE_DIR cannot serve (a one-line reason), or undefined: it must hold
 * a running control daemon's pid file (or, from drivers that write none, its
 * control socket). Without a daemon CUDA quietly runs without MPS, every
 * worker with the whole GPU: refused at start instead.
 */
export function mpsDaemonMissing(pipeDir: string): string | undefined {
  const how = `start it first: CUDA_MPS_PIPE_DIRECTORY=${pipeDir} nvidia-cuda-mps-control -d`;
  let pid: number;
  try {
    pid = Number(fs.readFileSync(path.join(pipeDir, PID_FILE), 'utf8').trim());
  } catch {
    if (fs.existsSync(path.join(pipeDir, 'control'))) return undefined;
    return `no MPS control daemon in ${pipeDir} (no ${PID_FILE} there); ${how}`;
  }
  if (!Number.isInteger(pid) || pid <= 0 || !running(pid))
    return `the MPS control daemon of ${pipeDir} (${PID_FILE}) is not running; ${how}`;
  return undefined;
}

function running(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'EPERM'; // the daemon runs as root
  }
}

/** This VM's percentage now, from the table (undefined: MPS mode off). */
export function mpsPercentageNow(): number | undefined {
  if (!mode) return undefined;
  const m = mode;
  const others = m.table
    .snapshot()
    .filter((v) => v.slot !== m.slot)
    .map((v) => v.weight);
  return mpsPercentage(Math.max(1, m.table.weight(m.slot)), others);
}

/** The environment a CUDA process of this VM on GPUs `gpus` joins MPS with (empty: MPS mode off). */
export function mpsEnv(gpus: number | readonly number[]): Record<string, string> {
  const pct = mpsPercentageNow();
  if (!mode || pct === undefined) return {};
  const env: Record<string, string> = { CUDA_MPS_PIPE_DIRECTORY: mode.pipeDir, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE: String(pct) };
  // A backstop to the quota, which counts what the VM allocates: the driver's own bound on one client, in MiB.
  if (mode.memoryLimit !== undefined) {
    const mib = mode.memoryLimit >> 20n;
    // The VM's quota is one budget across its GPUs: each may hold all of it.
    env.CUDA_MPS_PINNED_DEVICE_MEM_LIMIT = (typeof gpus === 'number' ? [gpus] : gpus).map((g) => `${g}=${mib > 0n ? mib : 1n}M`).join(',');
  }
  return env;
}
