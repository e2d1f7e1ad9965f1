// The QEMU command line of a user's Windows VM (qcuda vm --windows-image,
// docs/windows.md): the user's disk, qcuda's DLLs on a second, read-only
// disk (QEMU's vvfat of the `make windows-zip` folder), virtio-win's ISO as
// a CD-ROM, the shared-memory region as an ivshmem-plain device, UEFI (or
// BIOS) firmware, a VNC display. Windows has no virtio drivers until
// virtio-win's are installed, so its disk and the ISO are on q35's AHCI
// controller, and the DLL disk (read-only, which ide-hd refuses) on USB.
import fs from 'node:fs';
import path from 'node:path';
import { ivshmemArgs, type ShmRegion } from './ivshmem';
import { accelArgs, DEFAULT_FIRMWARE_DIRS, firmwareArgs } from './qemu-args';

export interface WindowsConfig {
  /** The user's Windows disk: qcow2 by its name (.qcow2), else raw. Written to: it is the VM's own disk. */
  image: string;
  shm: ShmRegion;
  /** The folder of qcuda's DLLs (build/windows-zip), a read-only FAT disk in the guest; none: no such disk. */
  dllDir?: string;
  /** virtio-win's ISO, a CD-ROM. */
  virtioWin?: string;
  /** UEFI: pflash code (read-only) and a copy of the variables (the run's own). */
  uefi?: { code: string; vars: string };
  /** QEMU's -vnc value (127.0.0.1:0, unix:PATH); none: no display. */
  vnc?: string;
  memoryMiB?: number;
  cpus?: number;
  accel?: 'kvm' | 'tcg';
  firmwareDirs?: string[];
  /** QMP monitors, one unix socket each. */
  qmp?: string[];
}

/** Where distributions put OVMF (Debian's ovmf, Fedora's edk2-ovmf), after QCUDA_FIRMWARE_DIRS. */
const UEFI_DIRS = ['/usr/share/OVMF', '/usr/share/ovmf', '/usr/share/edk2/x64', '/usr/share/edk2/ovmf', '/usr/share/qemu'];
/** Code and variable files by name, each pair from one package. */
const UEFI_PAIRS: [string, string][] = [
  ['OVMF_CODE_4M.fd', 'OVMF_VARS_4M.fd'],
  ['OVMF_CODE.fd', 'OVMF_VARS.fd'],
  ['edk2-x86_64-code.fd', 'edk2-i386-vars.fd'],
];

/** The first OVMF code and variables pair of the firmware directories, or undefined. */
export function findUefi(dirs: string[] = [...DEFAULT_FIRMWARE_DIRS, ...UEFI_DIRS]): { code: string; vars: string } | undefined {
  for (const d of dirs)
    for (const [code, vars] of UEFI_PAIRS) {
      const c = path.join(d, code);
      const v = path.join(d, vars);
      if (fs.existsSync(c) && fs.existsSync(v)) return { code: c, vars: v };
    }
  return undefined;
}

/** The image's format as QEMU's format= takes it (never probed: a raw image could pose as another format). */
export function imageFormat(image: string): 'qcow2' | 'raw' {
  return /\.qcow2$/i.test(image) ? 'qcow2' : 'raw';
}

export function windowsQemuArgs(c: WindowsConfig): string[] {
  const mem = c.memoryMiB ?? 4096;
  return [
    ...firmwareArgs(c.firmwareDirs),
    ...accelArgs(c.accel),
    '-machine',
    'q35',
    '-smp',
    String(c.cpus ?? 2),
    '-m',
    `${mem}M`,
    '-nodefaults',
    '-no-user-config',
    ...(c.uefi
      ? [
          '-drive',
          `if=pflash,format=raw,unit=0,readonly=on,file=${c.uefi.code}`,
          '-drive',
          `if=pflash,format=raw,unit=1,file=${c.uefi.vars}`,
        ]
      : []),
    '-drive',
    `file=${c.image},if=none,id=windows,format=${imageFormat(c.image)}`,
    '-device',
    'ide-hd,drive=windows,bus=ide.0,bootindex=0',
    ...(c.virtioWin
      ? ['-drive', `file=${c.virtioWin},if=none,id=virtio-win,media=cdrom,readonly=on`, '-device', 'ide-cd,drive=virtio-win,bus=ide.2']
      : []),
    ...ivshmemArgs(c.shm),
    '-device',
    'VGA',
    '-device',
    'qemu-xhci',
    '-device',
    'usb-tablet',
    // On USB: QEMU refuses a read-only drive on ide-hd ("Block node is read-only").
    ...(c.dllDir
      ? ['-drive', `file=fat:ro:${c.dllDir},if=none,id=qcuda-dlls,format=raw,readonly=on`, '-device', 'usb-storage,drive=qcuda-dlls']
      : []),
    '-display',
    'none',
    ...(c.vnc ? ['-vnc', c.vnc] : []),
    ...(c.qmp ?? []).flatMap((q) => ['-qmp', `unix:${q},server=on,wait=off`]),
  ];
}
