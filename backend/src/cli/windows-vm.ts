// `qcuda vm --windows-image=DISK`: the options of a user's Windows VM,
// checked before anything starts, and the run (vm/windows-run.ts).
import fs from 'node:fs';
import path from 'node:path';
import type { BackendUser } from '../vm/backend-user';
import type { HostCgroup } from '../vm/host-bounds';
import { parseShmSize } from '../vm/ivshmem';
import { findUefi } from '../vm/windows';
import { runWindowsVm } from '../vm/windows-run';
import { BACKEND_PASSED, HOST_BOUND_OPTIONS } from './backend-options';
import { vmFailed } from './vm-failed';

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

/** The zip's folder as `make windows-dll windows-zip` leaves it. */
const BUILD_DLL_DIR = path.resolve(__dirname, '..', '..', '..', '..', 'build', 'windows', 'zip', 'qcuda-windows-x64');

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

function file(p: string, what: string, fail: (m: string) => never): string {
  const abs = path.resolve(p);
  if (!fs.statSync(abs, { throwIfNoEntry: false })?.isFile()) fail(`${what}=${p}: no such file`);
  return abs;
}

/** Everything checked; then the VM runs until Windows shuts down. Returns QEMU's status, 125 when the VM failed. */
export async function windowsVm(c: WindowsVmCli): Promise<number> {
  const { v, fail } = c;
  const str = (k: string) => v[k] as string | undefined;
  if (c.positionals.length > 0) fail('--windows-image runs no COMMAND: Windows is interactive (VNC)');
  const linuxOnly = c.given.find((k) => !WINDOWS_OPTIONS.includes(k) && !BACKEND_OR_HOST.has(k));
  if (linuxOnly) fail(`--${linuxOnly} is not an option of a Windows VM (--windows-image)`);
  const image = file(str('windows-image')!, '--windows-image', fail);
  const virtioWin = str('virtio-win') !== undefined ? file(str('virtio-win')!, '--virtio-win', fail) : undefined;
  const dllDir = path.resolve(str('dll-dir') ?? BUILD_DLL_DIR);
  if (!fs.existsSync(path.join(dllDir, 'nvcuda.dll')))
    fail(`--dll-dir=${dllDir}: no nvcuda.dll there (make windows-dll windows-zip builds build/windows/zip/qcuda-windows-x64)`);
  const firmware = str('firmware') ?? 'uefi';
  if (firmware !== 'uefi' && firmware !== 'bios') fail(`--firmware must be uefi or bios, got '${firmware}'`);
  const uefi = firmware === 'uefi' ? findUefi() : undefined;
  if (firmware === 'uefi' && !uefi)
    fail('no UEFI firmware (OVMF_CODE*.fd and its OVMF_VARS*.fd): install ovmf, set QCUDA_FIRMWARE_DIRS, or --firmware=bios');
  const vnc = str('vnc') ?? '127.0.0.1:0';
  if (!/^(unix:\/\S+|[\w.-]*:\d+)$/.test(vnc)) fail(`--vnc must be HOST:DISPLAY or unix:/PATH, got '${vnc}'`);
  let shmBytes: number;
  try {
    shmBytes = parseShmSize(str('shm-size'));
  } catch (e) {
    return fail((e as Error).message);
  }
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
