// `qcuda vm --windows-image=DISK`: the options of a user's Windows VM,
// checked before anything starts, and the run (vm/windows-run.ts).
import path from 'node:path';
import type { BackendUser } from '../vm/backend-user';
import type { HostCgroup } from '../vm/host-bounds';
import { runWindowsVm } from '../vm/windows-run';
import { BACKEND_PASSED, HOST_BOUND_OPTIONS } from './backend-options';
import { vmFailed } from './vm-failed';
import { windowsMachine } from './windows-options';

/**
 * Backend and host-bound options apply to a Windows VM's backend as to a
 * Linux one's (--backend-log does not: qcuda.ts's windowsVmOf keeps no log).
 */
const BACKEND_OR_HOST = new Set([...BACKEND_PASSED, 'backend-user', ...HOST_BOUND_OPTIONS]);

type Values = { [k: string]: string | boolean | string[] | undefined };

/** The options a Windows VM takes beyond the backend's (vm's others are the Linux guest's). */
export const WINDOWS_OPTIONS = [
  'windows-image',
  'virtio-win',
  'dll-dir',
  'firmware',
  'vnc',
  'shm-size',
  'memory',
  'cpus',
  'timeout',
  'qemu',
  'monitor',
];

export interface WindowsVmCli {
  v: Values;
  positionals: string[];
  /** Options of vm given (a Linux guest's among them is refused). */
  given: string[];
  /** The backend options vm passes on, checked. */
  backendArgs: string[];
  backendUser?: BackendUser;
  hostCgroup?: () => HostCgroup | undefined;
  qemu: () => string;
  int: (name: string, dflt: number, max: number) => number;
  fail: (msg: string) => never;
}

/** Everything checked; then the VM runs until Windows shuts down. Returns QEMU's status, 125 when the VM failed. */
export async function windowsVm(c: WindowsVmCli): Promise<number> {
  const { v, fail } = c;
  const str = (k: string) => v[k] as string | undefined;
  if (c.positionals.length > 0) fail('--windows-image runs no COMMAND: Windows is interactive (VNC)');
  const linuxOnly = c.given.find((k) => !WINDOWS_OPTIONS.includes(k) && !BACKEND_OR_HOST.has(k));
  if (linuxOnly) fail(`--${linuxOnly} is not an option of a Windows VM (--windows-image)`);
  const { image, virtioWin, dllDir, uefi, vnc, shmBytes } = windowsMachine(str, fail);
  const sizes = { memoryMiB: c.int('memory', 4096, 1 << 20), cpus: c.int('cpus', 2, 256), timeoutS: c.int('timeout', 0, 86400 * 365) };
  const qemu = c.qemu();
  const cgroup = c.hostCgroup?.();
  try {
    process.stderr.write(`qcuda: Windows VM from ${image}; its display on VNC ${vnc}; qcuda's DLLs on its second disk\n`);
    const r = await runWindowsVm({
      qemu,
      image,
      dllDir,
      virtioWin,
      uefi,
      vnc,
      shmBytes,
      memoryMiB: sizes.memoryMiB,
      cpus: sizes.cpus,
      timeoutMs: sizes.timeoutS ? sizes.timeoutS * 1000 : undefined,
      backendArgs: c.backendArgs,
      backendUser: c.backendUser,
      hostCgroup: cgroup,
      monitor: str('monitor') !== undefined ? path.resolve(str('monitor')!) : undefined,
      onWaiting: (line) => process.stderr.write(`qcuda: ${line}\n`),
    });
    process.stderr.write('qcuda: the Windows VM shut down\n');
    return r.exit;
  } catch (e) {
    return vmFailed(e, fail);
  } finally {
    await cgroup?.remove();
  }
}
