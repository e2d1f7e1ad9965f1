// `qcuda libvirt-xml --windows`: a libvirt domain for a user's Windows VM
// (vm/libvirt-windows.ts) on a backend the user started with
// --shm=/dev/shm/NAME. Its machine options are `qcuda vm --windows-image`'s
// (windows-options.ts).
import path from 'node:path';
import { domainType } from '../vm/libvirt-common';
import { shmemName, windowsDomainXml } from '../vm/libvirt-windows';
import { windowsMachine } from './windows-options';

/** The options only a Windows domain takes. */
export const WINDOWS_DOMAIN_ONLY = ['windows', 'windows-image', 'shm', 'shm-size', 'dll-dir', 'virtio-win', 'firmware', 'vnc'];
/** Those it shares with a Linux domain; any other of libvirt-xml's is refused. */
const SHARED = ['name', 'qemu', 'memory', 'cpus', 'type'];

export interface WindowsLibvirtCli {
  str: (k: string) => string | undefined;
  /** The options given. */
  given: string[];
  qemu: () => string;
  int: (name: string, dflt: number, max: number) => number;
  fail: (msg: string) => never;
}

export function windowsLibvirtXml(c: WindowsLibvirtCli): string {
  const { str, fail } = c;
  const linuxOnly = c.given.find((k) => !WINDOWS_DOMAIN_ONLY.includes(k) && !SHARED.includes(k));
  if (linuxOnly) fail(`--${linuxOnly} is not an option of a Windows domain (libvirt-xml --windows)`);
  if (!str('name') || !str('windows-image') || !str('shm'))
    fail("libvirt-xml --windows needs --name=VM, --windows-image=DISK and --shm=/dev/shm/NAME (the backend's --shm)");
  const shm = path.resolve(str('shm')!);
  try {
    shmemName(shm);
  } catch (e) {
    fail((e as Error).message);
  }
  const m = windowsMachine(str, fail);
  const type = domainType(str('type'), fail);
  return windowsDomainXml({
    name: str('name')!,
    emulator: c.qemu(),
    image: m.image,
    shm: { path: shm, bytes: m.shmBytes },
    dllDir: m.dllDir,
    virtioWin: m.virtioWin,
    uefi: m.uefi,
    vnc: m.vnc,
    memoryMiB: c.int('memory', 4096, 1 << 20),
    cpus: c.int('cpus', 2, 256),
    type,
  });
}
