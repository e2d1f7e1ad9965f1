// A libvirt domain for a user's Windows VM with the shared-memory transport
// (`qcuda libvirt-xml --windows`, docs/windows.md): the machine
// windows.ts' windowsQemuArgs gives QEMU, in libvirt's elements. The disk
// and virtio-win's ISO on q35's AHCI controller, the DLL folder a read-only
// FAT disk on USB (libvirt refuses a read-only SATA disk, and QEMU a
// read-only drive on ide-hd; Windows has USB storage and xHCI drivers of
// its own), the backend's region as libvirt's <shmem> (an ivshmem-plain
// device on /dev/shm/NAME), UEFI or BIOS, VNC, a VGA, a USB tablet.
// The backend is not libvirt's: the user starts it first (it makes the
// region file; libvirt only maps it). test/vm/libvirt-windows.test.ts
// defines, starts and destroys one with virsh.
import path from 'node:path';
import { cpuLine, diskXml, domainHead, esc, qemuCommandline, ROOT_SECLABEL, type DomainType } from './libvirt-common';
import { firmwareArgs } from './qemu-args';
import { imageFormat, type WindowsConfig } from './windows';

/** What the domain shares with windowsQemuArgs' machine (windows.ts); there the UEFI variables are the run's copy, here the template libvirt copies for the domain (its nvram). */
type SharedWithQemu = 'image' | 'shm' | 'dllDir' | 'virtioWin' | 'uefi' | 'vnc' | 'memoryMiB' | 'cpus' | 'firmwareDirs';

/** shm's path is /dev/shm/NAME (shmemName); no uefi: BIOS. */
export interface WindowsDomainConfig extends Pick<WindowsConfig, SharedWithQemu> {
  name: string;
  /** QEMU: one with vvfat for the DLL disk and VNC for the display (a distribution's). */
  emulator: string;
  type?: DomainType;
  /** Run QEMU as root instead of libvirt's qemu user (the test). */
  runAsRoot?: boolean;
}

/** libvirt puts a <shmem name='NAME'> at /dev/shm/NAME: the name of such a path, else an error saying so. */
export function shmemName(p: string): string {
  const m = /^\/dev\/shm\/([\w-][\w.-]*)$/.exec(path.normalize(p));
  if (!m) throw new Error(`--shm=${p}: libvirt maps a region at /dev/shm/NAME only (NAME: letters, digits, '_', '-' and '.', not first)`);
  return m[1];
}

/** The Windows disk and the ISO on SATA (windowsQemuArgs' ide.0 and ide.2), the DLLs on USB. */
function disks(c: WindowsDomainConfig): string[] {
  return [
    ...diskXml({ kind: 'file', device: 'disk', format: imageFormat(c.image), source: c.image, dev: 'sda', bus: 'sata', bootOrder: 1 }),
    ...(c.dllDir ? diskXml({ kind: 'dir', device: 'disk', format: 'fat', source: c.dllDir, dev: 'sdb', bus: 'usb', readonly: true }) : []),
    ...(c.virtioWin
      ? diskXml({ kind: 'file', device: 'cdrom', format: 'raw', source: c.virtioWin, dev: 'sdc', bus: 'sata', readonly: true })
      : []),
  ];
}

/** VNC on a unix socket, or on HOST's port 5900+DISPLAY (an empty HOST: every address, as QEMU's -vnc :N). */
function graphics(vnc: string): string {
  if (vnc.startsWith('unix:')) return `    <graphics type='vnc'><listen type='socket' socket='${esc(vnc.slice(5))}'/></graphics>`;
  const at = vnc.lastIndexOf(':');
  const host = vnc.slice(0, at) || '0.0.0.0';
  const port = 5900 + Number(vnc.slice(at + 1));
  return `    <graphics type='vnc' port='${port}' autoport='no'><listen type='address' address='${esc(host)}'/></graphics>`;
}

function osBlock(c: WindowsDomainConfig): string[] {
  return [
    `  <os>`,
    `    <type arch='x86_64' machine='q35'>hvm</type>`,
    // libvirt copies the template to /var/lib/libvirt/qemu/nvram/NAME_VARS.fd (undefine --nvram removes it).
    ...(c.uefi
      ? [`    <loader readonly='yes' type='pflash'>${esc(c.uefi.code)}</loader>`, `    <nvram template='${esc(c.uefi.vars)}'/>`]
      : []),
    `  </os>`,
  ];
}

export function windowsDomainXml(c: WindowsDomainConfig): string {
  const type = c.type ?? 'kvm';
  return [
    ...domainHead({ type, name: c.name, memoryMiB: c.memoryMiB ?? 4096, cpus: c.cpus ?? 2 }),
    ...osBlock(c),
    `  <features><acpi/><apic/></features>`,
    cpuLine(type),
    // Windows restarts itself while installing drivers and updates: a reboot is a reboot, as under qcuda vm.
    `  <on_poweroff>destroy</on_poweroff>`,
    `  <on_reboot>restart</on_reboot>`,
    `  <on_crash>destroy</on_crash>`,
    `  <devices>`,
    `    <emulator>${esc(c.emulator)}</emulator>`,
    ...disks(c),
    `    <controller type='usb' model='qemu-xhci'/>`,
    `    <input type='tablet' bus='usb'/>`,
    ...(c.vnc ? [graphics(c.vnc)] : []),
    `    <video><model type='vga'/></video>`,
    // share=on, as ivshmem.ts' ivshmemArgs: the guest's writes reach the backend's file.
    `    <shmem name='${esc(shmemName(c.shm.path))}'>`,
    `      <model type='ivshmem-plain'/>`,
    `      <size unit='M'>${c.shm.bytes >> 20}</size>`,
    `    </shmem>`,
    `    <memballoon model='none'/>`,
    `  </devices>`,
    ...(c.runAsRoot ? [ROOT_SECLABEL] : []),
    ...qemuCommandline(firmwareArgs(c.firmwareDirs)),
    `</domain>`,
    '',
  ].join('\n');
}
