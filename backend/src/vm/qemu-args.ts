// The QEMU command line for a guest with the vhost-user-qcuda-pci device.
// `qcuda qemu-args` prints it for people who start QEMU themselves.
import fs from 'node:fs';
import { ivshmemArgs, type ShmRegion } from './ivshmem';

export interface QemuConfig {
  kernel: string;
  initrd: string;
  socket: string;
  /** Where the guest's result channel (ttyS1) goes: a file path. */
  resultFile?: string;
  /** The console (ttyS0) is a person's terminal: QEMU's monitor multiplexed in (Ctrl-a x quits, Ctrl-a h helps). */
  interactive?: boolean;
  memoryMiB?: number;
  cpus?: number;
  queues?: number;
  queueSize?: number;
  accel?: 'kvm' | 'tcg';
  /** QEMU's firmware search path (-L): a source build of QEMU has none of its own. */
  firmwareDirs?: string[];
  append?: string;
  /** Reconnect to a restarted backend after this many ms (needs qemu-patches/0002). */
  reconnectMs?: number;
  /** virtiofs devices (vhost-user-fs-pci): a virtiofsd's socket and the tag the guest mounts. */
  shares?: { socket: string; tag: string }[];
  /** GPU disks (vhost-user-blk-pci): a blk backend's socket and its queues. */
  disks?: { socket: string; queues: number }[];
  /** A root disk image (virtio-blk, raw); snapshot: the guest's writes go to a temporary overlay, the file is not changed. */
  rootDisk?: { file: string; snapshot: boolean };
  /** Read-only raw disks the guest finds by their virtio serial (/sys/block/vdX/serial). */
  dataDisks?: { file: string; serial: string }[];
  /** QMP monitors, one unix socket each (QEMU listens; one client at a time on each). */
  qmp?: string[];
  /** The backend's shared-memory region as an ivshmem-plain device (ivshmem.ts). */
  shm?: ShmRegion;
  /** Wait for an incoming migration from this URI (-incoming: "unix:PATH", "tcp:HOST:PORT", "file:PATH", "exec:CMD"). */
  incoming?: string;
}

/** Debian's firmware packages; QCUDA_FIRMWARE_DIRS (colon-separated) overrides, e.g. for a carried copy. */
export const DEFAULT_FIRMWARE_DIRS = process.env.QCUDA_FIRMWARE_DIRS?.split(':').filter(Boolean) ?? [
  '/usr/share/qemu',
  '/usr/share/seabios',
  '/usr/lib/ipxe/qemu',
];

/** Where QEMU looks for its firmware: -L for each folder. */
export function firmwareArgs(dirs: readonly string[] = DEFAULT_FIRMWARE_DIRS): string[] {
  return dirs.flatMap((d) => ['-L', d]);
}

/** The accelerator and the CPU it shows the guest: the host's under KVM, TCG's fullest model else. */
export function accelArgs(accel: 'kvm' | 'tcg' = detectAccel()): string[] {
  return accel === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host'] : ['-accel', 'tcg,thread=multi', '-cpu', 'max'];
}

/** KVM only where the CPU has hardware virtualization and /dev/kvm opens; else TCG. */
export function detectAccel(): 'kvm' | 'tcg' {
  try {
    const cpu = fs.readFileSync('/proc/cpuinfo', 'utf8');
    if (!/\b(vmx|svm)\b/.test(cpu)) return 'tcg';
    fs.accessSync('/dev/kvm', fs.constants.R_OK | fs.constants.W_OK);
    return 'kvm';
  } catch {
    return 'tcg';
  }
}

/**
 * The kernel command line the test guest boots with (vm-images/init reports
 * on ttyS1). no_timer_check: on a loaded host a TCG guest's timer interrupt
 * can come too late for the kernel's IO-APIC timer check, which then panics
 * ("IO-APIC + timer doesn't work!"): 1 boot in 24 with 12 guests at once on
 * 2 cores.
 */
export function guestCmdline(append?: string): string {
  return `console=ttyS0 panic=-1 quiet no_timer_check ${append ?? ''}`.trim();
}

/**
 * The qcuda device's own arguments: the chardev to the backend's socket and
 * vhost-user-qcuda-pci on it. Guest RAM must be a shared memfd (the
 * backend maps it): qemuArgs and the libvirt domain (libvirt.ts) both add that.
 */
export function qcudaDeviceArgs(c: { socket: string; queues?: number; queueSize?: number; reconnectMs?: number }): string[] {
  return [
    '-chardev',
    `socket,id=qcuda0,path=${c.socket}${c.reconnectMs ? `,reconnect-ms=${c.reconnectMs}` : ''}`,
    '-device',
    `vhost-user-qcuda-pci,chardev=qcuda0,num-queues=${c.queues ?? 4},queue-size=${c.queueSize ?? 256}`,
  ];
}

export function qemuArgs(c: QemuConfig): string[] {
  const mem = c.memoryMiB ?? 512;
  return [
    ...firmwareArgs(c.firmwareDirs),
    ...accelArgs(c.accel),
    '-machine',
    'q35,memory-backend=mem',
    '-bios',
    'qboot.rom',
    '-smp',
    String(c.cpus ?? 2),
    '-m',
    `${mem}M`,
    '-object',
    `memory-backend-memfd,id=mem,size=${mem}M,share=on`,
    '-nodefaults',
    '-no-user-config',
    '-display',
    'none',
    '-no-reboot',
    '-kernel',
    c.kernel,
    '-initrd',
    c.initrd,
    '-append',
    guestCmdline(c.append),
    ...qcudaDeviceArgs(c),
    ...(c.shares ?? []).flatMap((s, i) => [
      '-chardev',
      `socket,id=fs${i},path=${s.socket}`,
      '-device',
      `vhost-user-fs-pci,chardev=fs${i},tag=${s.tag}`,
    ]),
    ...(c.disks ?? []).flatMap((d, i) => [
      '-chardev',
      `socket,id=blk${i},path=${d.socket}`,
      '-device',
      `vhost-user-blk-pci,chardev=blk${i},num-queues=${d.queues}`,
    ]),
    ...(c.shm ? ivshmemArgs(c.shm) : []),
    ...(c.rootDisk
      ? [
          '-drive',
          `file=${c.rootDisk.file},if=none,id=root,format=raw${c.rootDisk.snapshot ? ',snapshot=on,cache=unsafe' : ''}`,
          '-device',
          'virtio-blk-pci,drive=root',
        ]
      : []),
    ...(c.dataDisks ?? []).flatMap((d, i) => [
      '-drive',
      `file=${d.file},if=none,id=data${i},format=raw,readonly=on`,
      '-device',
      `virtio-blk-pci,drive=data${i},serial=${d.serial}`,
    ]),
    '-serial',
    c.interactive ? 'mon:stdio' : 'stdio',
    '-serial',
    c.resultFile ? `file:${c.resultFile}` : 'null',
    ...(c.qmp ?? []).flatMap((q) => ['-qmp', `unix:${q},server=on,wait=off`]),
    ...(c.incoming ? ['-incoming', c.incoming] : []),
  ];
}
