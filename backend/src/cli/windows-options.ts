// The options that make a Windows VM's machine, checked the same way for
// `qcuda vm --windows-image` (windows-vm.ts) and `qcuda libvirt-xml
// --windows` (windows-libvirt-xml.ts): the disk, virtio-win's ISO, the DLL
// folder, the firmware, the display, the region's size.
import fs from 'node:fs';
import path from 'node:path';
import { parseShmSize } from '../vm/ivshmem';
import { findUefi } from '../vm/windows';

/** The zip's folder as `make windows-dll windows-zip` leaves it. */
const BUILD_DLL_DIR = path.resolve(__dirname, '..', '..', '..', '..', 'build', 'windows', 'zip', 'qcuda-windows-x64');

export interface WindowsMachine {
  image: string;
  virtioWin?: string;
  dllDir: string;
  /** UEFI's code and variables; undefined: BIOS. */
  uefi?: { code: string; vars: string };
  vnc: string;
  shmBytes: number;
}

function file(p: string, what: string, fail: (m: string) => never): string {
  const abs = path.resolve(p);
  if (!fs.statSync(abs, { throwIfNoEntry: false })?.isFile()) fail(`${what}=${p}: no such file`);
  return abs;
}

/** --windows-image, --virtio-win, --dll-dir, --firmware, --vnc and --shm-size, each checked (fail: a usage error). */
export function windowsMachine(str: (k: string) => string | undefined, fail: (m: string) => never): WindowsMachine {
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
  return { image, virtioWin, dllDir, uefi, vnc, shmBytes };
}
