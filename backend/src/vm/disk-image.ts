// A disk image as `make guest-disk` builds it (vm-images/disk/): Debian 12 on
// a partitionless ext4 filesystem, the qcuda packages installed, and
// qcuda-vm-run.service, which runs the command the runner hands in on a
// second, read-only disk. Before QEMU starts, the image is read with debugfs (e2fsprogs; no
// mount, no root): it must be such an image, and its own kernel and initrd
// (the ones DKMS built qcuda.ko for) are copied out to boot it.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** The filesystem label mkdisk.sh gives the image; the kernel finds root by it. */
export const ROOT_LABEL = 'qcuda-root';
/**
 * The virtio serial of the disk that holds the run archive (qcuda/run,
 * qcuda/files/...), which qcuda-vm-run reads. A disk rather than fw_cfg:
 * the kernel reads fw_cfg files a byte at a time (minutes for a few MB under
 * TCG), a virtio disk at once.
 */
export const RUN_DISK_SERIAL = 'qcuda-run';
/** Kernel arguments of a disk-image boot: root by label. */
export const DISK_APPEND = `root=LABEL=${ROOT_LABEL} rw`;
/**
 * The kernel argument that starts qcuda-vm-run.service (its condition): a run
 * with a command. Its value says whether the root disk is a snapshot, which
 * the guest may power off without unmounting (3-4 s less under TCG).
 */
export function runArg(snapshot: boolean): string {
  return `qcuda.run=${snapshot ? 'snapshot' : 'rw'}`;
}

const PACKAGES = ['qcuda-dkms', 'qcuda-libs'];
const SERVICE = '/etc/systemd/system/qcuda-vm-run.service';

export class DiskImageError extends Error {
  override readonly name = 'DiskImageError';
}

export interface BootFiles {
  kernel: string;
  initrd: string;
  /** The kernel version they are (from the file names in /boot). */
  version: string;
}

function debugfs(image: string, request: string): { out: string; err: string } {
  const r = spawnSync('debugfs', ['-R', request, image], { encoding: 'utf8', maxBuffer: 64 << 20 });
  if (r.error) throw new DiskImageError(`debugfs (e2fsprogs) could not run: ${r.error.message}`);
  // debugfs prints its banner to stderr and exits 0 even when a request fails.
  const err = r.stderr
    .split('\n')
    .filter((l) => l.trim() && !/^debugfs [\d.]+ /.test(l))
    .join('\n');
  return { out: r.stdout, err };
}

/** Names in a directory of the image ("ls -p": /inode/mode/uid/gid/name/size/). */
function list(image: string, dir: string): string[] {
  const { out, err } = debugfs(image, `ls -p ${dir}`);
  if (err) {
    if (/Bad magic number|superblock|Attempt to read block|Short read/i.test(err))
      throw new DiskImageError(
        `${image} is not an ext2/3/4 filesystem image (qcuda vm --disk-image boots a partitionless ext4 image as \`make guest-disk\` builds it): ${err.split('\n')[0]}`,
      );
    if (/not found/i.test(err)) return [];
    throw new DiskImageError(`cannot read ${dir} in ${image}: ${err.split('\n')[0]}`);
  }
  return out
    .split('\n')
    .map((l) => l.split('/')[5])
    .filter((n): n is string => !!n && n !== '.' && n !== '..');
}

function compareVersions(a: string, b: string): number {
  return a.localeCompare(b, 'en', { numeric: true });
}

/** The newest kernel in the image's /boot that has an initrd beside it. */
function newestKernel(image: string, boot: string[]): string {
  const versions = boot
    .filter((n) => n.startsWith('vmlinuz-'))
    .map((n) => n.slice('vmlinuz-'.length))
    .filter((v) => boot.includes(`initrd.img-${v}`))
    .sort(compareVersions);
  if (versions.length === 0)
    throw new DiskImageError(`${image} has no kernel with an initrd in /boot (vmlinuz-VERSION and initrd.img-VERSION)`);
  return versions[versions.length - 1];
}

function dump(image: string, from: string, to: string): void {
  const { err } = debugfs(image, `dump ${from} ${to}`);
  if (err || !fs.existsSync(to) || fs.statSync(to).size === 0)
    throw new DiskImageError(`cannot copy ${from} out of ${image}${err ? `: ${err.split('\n')[0]}` : ''}`);
}

/**
 * Checks that `image` is a qcuda disk image (the qcuda packages installed,
 * qcuda-vm-run.service there) and copies its newest kernel and initrd into
 * `dir`. Throws DiskImageError saying what is wrong.
 */
export function prepareDiskImage(image: string, dir: string): BootFiles {
  let st: fs.Stats;
  try {
    st = fs.statSync(image);
  } catch {
    throw new DiskImageError(`disk image ${image} does not exist (\`make guest-disk\` builds build/guest-disk/qcuda-debian12.img)`);
  }
  if (!st.isFile()) throw new DiskImageError(`disk image ${image} is not a file`);
  fs.accessSync(image, fs.constants.R_OK);
  const info = list(image, '/var/lib/dpkg/info');
  if (info.length === 0) throw new DiskImageError(`${image} has no /var/lib/dpkg/info: not a Debian root filesystem`);
  const missing = PACKAGES.filter((p) => !info.includes(`${p}.list`));
  if (missing.length > 0)
    throw new DiskImageError(
      `${image} does not have the qcuda packages installed (missing: ${missing.join(', ')}); install them in it with apt install ./qcuda-dkms_*.deb ./qcuda-libs_*.deb (\`make guest-debs\`), or build the image with \`make guest-disk\``,
    );
  if (!list(image, path.dirname(SERVICE)).includes(path.basename(SERVICE)))
    throw new DiskImageError(
      `${image} has no ${SERVICE}, which runs qcuda vm's command in the guest (\`make guest-disk\` images have it: vm-images/disk/)`,
    );
  const version = newestKernel(image, list(image, '/boot'));
  const kernel = path.join(dir, 'vmlinuz');
  const initrd = path.join(dir, 'initrd.img');
  dump(image, `/boot/vmlinuz-${version}`, kernel);
  dump(image, `/boot/initrd.img-${version}`, initrd);
  return { kernel, initrd, version };
}
