// A libvirt domain with the qcuda device. libvirt has no element for a
// vhost-user device of its own kind, so the device goes in through
// <qemu:commandline> (the same arguments as qemuArgs: qcudaDeviceArgs);
// what the backend needs of guest RAM (a memfd it can map) is libvirt's own
// <memoryBacking>. `qcuda libvirt-xml` prints one; test/vm/libvirt.test.ts
// defines, starts and destroys one with virsh.
import { cpuLine, diskXml, domainHead, esc, qemuCommandline, ROOT_SECLABEL, type DomainType } from './libvirt-common';
import { DEFAULT_FIRMWARE_DIRS, firmwareArgs, guestCmdline, qcudaDeviceArgs, type QemuConfig } from './qemu-args';

/** What the domain shares with a QEMU command line (qemu-args.ts): the backend's socket, the guest's size, firmware, reconnect, the result file. */
type SharedWithQemu = 'socket' | 'memoryMiB' | 'cpus' | 'queues' | 'queueSize' | 'firmwareDirs' | 'reconnectMs' | 'resultFile';

export interface DomainConfig extends Pick<QemuConfig, SharedWithQemu> {
  name: string;
  /** The patched QEMU (vhost-user-qcuda-pci). */
  emulator: string;
  /** kvm (default where /dev/kvm works) or qemu (TCG). */
  type?: DomainType;
  /** Direct kernel boot (the test guest): kernel, initrd and command line. */
  kernel?: string;
  initrd?: string;
  cmdline?: string;
  /** A disk image to boot from instead (virtio, /dev/vda), raw or qcow2. */
  disk?: { path: string; format: 'raw' | 'qcow2' };
  /** The file the console (ttyS0) writes to (the result channel, ttyS1: resultFile). */
  consoleFile?: string;
  /** Run QEMU as root instead of libvirt's qemu user (the test: its QEMU lives in root's home). */
  runAsRoot?: boolean;
}

/** ttyS0 (and ttyS1 where results go) to files; else ttyS0 on a pty, for `virsh console`. */
function serials(c: DomainConfig): string[] {
  const file = (port: number, f: string) =>
    `    <serial type='file'><source path='${esc(f)}'/><target type='isa-serial' port='${port}'/></serial>`;
  return [
    c.consoleFile ? file(0, c.consoleFile) : `    <serial type='pty'><target type='isa-serial' port='0'/></serial>`,
    ...(c.resultFile ? [file(1, c.resultFile)] : []),
  ];
}

function osBlock(c: DomainConfig): string[] {
  const lines = [`    <type arch='x86_64' machine='q35'>hvm</type>`];
  if (c.kernel) {
    // qboot: the firmware that boots a PVH kernel fastest (as qemuArgs does).
    lines.push(`    <loader type='rom' readonly='yes'>${esc(`${(c.firmwareDirs ?? DEFAULT_FIRMWARE_DIRS)[0]}/qboot.rom`)}</loader>`);
    lines.push(`    <kernel>${esc(c.kernel)}</kernel>`);
    if (c.initrd) lines.push(`    <initrd>${esc(c.initrd)}</initrd>`);
    lines.push(`    <cmdline>${esc(c.cmdline ?? guestCmdline())}</cmdline>`);
  } else {
    lines.push(`    <boot dev='hd'/>`);
  }
  return lines;
}

export function domainXml(c: DomainConfig): string {
  if (!c.kernel && !c.disk) throw new Error('a domain needs a kernel (direct boot) or a disk to boot from');
  const args = [...firmwareArgs(c.firmwareDirs), ...qcudaDeviceArgs(c)];
  const type = c.type ?? 'kvm';
  return [
    ...domainHead({ type, name: c.name, memoryMiB: c.memoryMiB ?? 512, cpus: c.cpus ?? 2 }),
    // The backend maps guest RAM from the memfd QEMU passes it: shared, not private.
    `  <memoryBacking>`,
    `    <source type='memfd'/>`,
    `    <access mode='shared'/>`,
    `  </memoryBacking>`,
    `  <os>`,
    ...osBlock(c),
    `  </os>`,
    // ACPI: the guest's poweroff ends QEMU (q35 powers off through it).
    `  <features><acpi/></features>`,
    cpuLine(type),
    `  <on_poweroff>destroy</on_poweroff>`,
    `  <on_reboot>destroy</on_reboot>`,
    `  <on_crash>destroy</on_crash>`,
    `  <devices>`,
    `    <emulator>${esc(c.emulator)}</emulator>`,
    ...(c.disk ? diskXml({ kind: 'file', device: 'disk', format: c.disk.format, source: c.disk.path, dev: 'vda', bus: 'virtio' }) : []),
    ...serials(c),
    `    <controller type='usb' model='none'/>`,
    `    <memballoon model='none'/>`,
    `  </devices>`,
    ...(c.runAsRoot ? [ROOT_SECLABEL] : []),
    ...qemuCommandline(args),
    `</domain>`,
    '',
  ].join('\n');
}
