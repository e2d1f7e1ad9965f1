// What the two libvirt domains qcuda prints have in common (libvirt.ts, a
// Linux guest on the vhost-user device; libvirt-windows.ts, a Windows guest
// on the shared-memory region): XML escaping, the domain's head, the CPU,
// a disk, running QEMU as root, and QEMU arguments libvirt has no element
// for.

export const QEMU_NS = 'http://libvirt.org/schemas/domain/qemu/1.0';

/** kvm (hardware virtualization) or qemu (TCG). */
export type DomainType = 'kvm' | 'qemu';

/** `libvirt-xml --type`'s value (kvm if not given); fail: a usage error. */
export function domainType(value: string | undefined, fail: (msg: string) => never): DomainType {
  const type = value ?? 'kvm';
  if (type !== 'kvm' && type !== 'qemu') fail(`--type must be kvm or qemu (TCG), got '${type}'`);
  return type;
}

export function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/'/g, '&apos;').replace(/"/g, '&quot;');
}

/** The opening tag, the name and the guest's size. */
export function domainHead(c: { type: DomainType; name: string; memoryMiB: number; cpus: number }): string[] {
  return [
    `<domain type='${c.type}' xmlns:qemu='${QEMU_NS}'>`,
    `  <name>${esc(c.name)}</name>`,
    `  <memory unit='MiB'>${c.memoryMiB}</memory>`,
    `  <vcpu>${c.cpus}</vcpu>`,
  ];
}

/** The host's CPU under KVM, TCG's fullest model else (as qemu-args.ts' accelArgs). */
export function cpuLine(type: DomainType): string {
  return type === 'kvm' ? `  <cpu mode='host-passthrough'/>` : `  <cpu mode='maximum'/>`;
}

/** A <disk>: an image file, or a folder QEMU shows as a FAT disk (kind 'dir'). */
export interface DiskElement {
  kind: 'file' | 'dir';
  device: 'disk' | 'cdrom';
  /** The driver's type: raw, qcow2, fat. */
  format: string;
  source: string;
  dev: string;
  bus: string;
  bootOrder?: number;
  readonly?: boolean;
}

export function diskXml(d: DiskElement): string[] {
  return [
    `    <disk type='${d.kind}' device='${d.device}'>`,
    `      <driver name='qemu' type='${d.format}'/>`,
    `      <source ${d.kind}='${esc(d.source)}'/>`,
    `      <target dev='${d.dev}' bus='${d.bus}'/>`,
    ...(d.bootOrder !== undefined ? [`      <boot order='${d.bootOrder}'/>`] : []),
    ...(d.readonly ? [`      <readonly/>`] : []),
    `    </disk>`,
  ];
}

/** QEMU as root, nothing relabelled (the tests: their QEMU lives in root's home). */
export const ROOT_SECLABEL = `  <seclabel type='static' model='dac' relabel='no'><label>+0:+0</label></seclabel>`;

/** Arguments appended to QEMU's command line. */
export function qemuCommandline(args: string[]): string[] {
  return [`  <qemu:commandline>`, ...args.map((a) => `    <qemu:arg value='${esc(a)}'/>`), `  </qemu:commandline>`];
}
