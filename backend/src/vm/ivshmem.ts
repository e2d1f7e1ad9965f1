// The shared-memory transport in a VM (docs/windows.md): the backend's
// region file (qcuda-backend --shm) mapped by QEMU as an ivshmem-plain
// device's memory. A guest finds the device by its PCI id and maps its
// BAR 2, which is the region: a Windows guest through virtio-win's IVSHMEM
// driver, a Linux guest at /sys/bus/pci/devices/BDF/resource2 (QCUDA_SHM).
import { parseSize } from '../qcuda/choose-provider';

/** The ivshmem device's PCI vendor:device (Red Hat's; QEMU's hw/misc/ivshmem-pci.c). */
export const IVSHMEM_PCI_ID = '1af4:1110';

/** The region of a VM: the file the backend makes and QEMU maps, and its size. */
export interface ShmRegion {
  path: string;
  bytes: number;
}

/** The backend's default (qcuda-backend --shm-size). */
export const DEFAULT_SHM_BYTES = 512 << 20;

/**
 * --shm-size for a VM: what the backend takes (a multiple of 2 MiB, at
 * least 98 MiB) and what ivshmem takes (a BAR is a power of two), so
 * 128M, 256M, 512M, 1G, ...
 */
export function parseShmSize(s: string | undefined): number {
  if (s === undefined) return DEFAULT_SHM_BYTES;
  let bytes: number;
  try {
    bytes = Number(parseSize(s));
  } catch (e) {
    throw new Error(`--shm-size: ${(e as Error).message}`);
  }
  if (!Number.isSafeInteger(bytes) || bytes < 128 << 20 || (bytes & (bytes - 1)) !== 0)
    throw new Error(`--shm-size must be a power of two of at least 128M (an ivshmem BAR), got '${s}'`);
  return bytes;
}

/** The arguments that make a backend serve the region (its one frontend: a backend of its own, beside the VM's vhost-user one). */
export function shmBackendArgs(r: ShmRegion): string[] {
  return [`--shm=${r.path}`, `--shm-size=${r.bytes}`];
}

/**
 * QEMU's: the file as a memory backend (share=on: the guest's writes reach
 * the file the backend maps, not a private copy) and ivshmem-plain on it.
 */
export function ivshmemArgs(r: ShmRegion): string[] {
  return [
    '-object',
    `memory-backend-file,id=qcuda-shm,mem-path=${r.path},size=${r.bytes},share=on`,
    '-device',
    'ivshmem-plain,memdev=qcuda-shm',
  ];
}

/**
 * A guest shell snippet that sets QCUDA_SHM to the ivshmem device's BAR 2
 * (the first such device), or fails saying none is there.
 */
export const GUEST_FIND_SHM = [
  'for d in /sys/bus/pci/devices/*; do',
  `  [ "$(cat $d/vendor):$(cat $d/device)" = "0x${IVSHMEM_PCI_ID.replace(':', ':0x')}" ] && { QCUDA_SHM=$d/resource2; break; }`,
  'done',
  '[ -n "$QCUDA_SHM" ] || { echo "no ivshmem device (' + IVSHMEM_PCI_ID + ')" >&2; exit 3; }',
  'export QCUDA_SHM',
].join('\n');
