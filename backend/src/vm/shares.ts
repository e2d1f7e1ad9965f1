// Host directories in the guest (`qcuda vm --share`): validation, the
// virtiofsd command line and the mount namespace it runs in.
//
// One virtiofsd (bookworm's C virtiofsd of QEMU 7.2; it has no read-only
// option) serves each share. It runs in a private mount namespace of its own
// (unshare -m) in which the host directory is bind-mounted (recursively) on
// an empty directory of the run's temp dir and every mount of that tree is
// remounted nosuid,nodev, and read-only unless the share is writable; then
// virtiofsd serves that directory. The guest is untrusted: a read-only guest
// mount alone could be remounted read-write by guest root, whereas here the
// host kernel refuses every write (EROFS) whatever the guest does. Kernel
// filesystems below the directory (proc, sysfs, devtmpfs, cgroup, ...) are
// unmounted in that namespace, so sharing / does not hand the guest the
// host's /proc or /sys.
import fs from 'node:fs';
import path from 'node:path';

export interface VmShare {
  /** A host directory (resolved; must exist). */
  hostDir: string;
  /** Where the guest mounts it (absolute); default: hostDir, or /host for /. */
  guestDir?: string;
  /** Let the guest write (default: read-only, enforced on the host). */
  writable?: boolean;
  /** Serve the mounts below hostDir as one filesystem (no announce_submounts):
   * what an overlay needs of its lower layer (`--host-root-writable`), as it
   * does not descend into mounts; st_ino may then repeat across them. */
  flat?: boolean;
}

export interface ResolvedShare {
  hostDir: string;
  guestDir: string;
  writable: boolean;
  flat: boolean;
  /** The virtiofs tag the guest mounts: qcudashare<N>. */
  tag: string;
}

export const MAX_SHARES = 8;

/** $QCUDA_VIRTIOFSD (make sets it), else what `make virtiofsd` put in the
 * checkout's build/vm/, if there; '' when neither. */
export function defaultVirtiofsd(): string {
  if (process.env.QCUDA_VIRTIOFSD) return process.env.QCUDA_VIRTIOFSD;
  const built = path.resolve(__dirname, '..', '..', '..', '..', 'build', 'vm', 'virtiofsd');
  return fs.existsSync(built) ? built : '';
}

/** Guest paths a share may not cover: the guest's own /init machinery. */
const RESERVED = ['/proc', '/sys', '/dev', '/qcuda'];
const RESERVED_EXACT = [
  '/',
  '/tmp',
  '/usr',
  '/usr/local',
  '/usr/local/bin',
  '/usr/local/lib',
  '/bin',
  '/sbin',
  '/lib',
  '/lib64',
  '/usr/bin',
  '/usr/sbin',
  '/usr/lib',
];

/** The default guest directory of a host directory. */
export function defaultGuestDir(hostDir: string): string {
  return hostDir === '/' ? '/host' : hostDir;
}

/** Checks and resolves shares; throws an Error with a message for people. */
export function resolveShares(shares: VmShare[] | undefined): ResolvedShare[] {
  if (!shares || shares.length === 0) return [];
  if (shares.length > MAX_SHARES) throw new Error(`at most ${MAX_SHARES} shares, not ${shares.length}`);
  const out: ResolvedShare[] = [];
  const seen = new Map<string, string>();
  shares.forEach((s, i) => {
    const hostDir = path.resolve(s.hostDir);
    let st: fs.Stats;
    try {
      st = fs.statSync(hostDir);
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      throw new Error(`share ${hostDir}: ${code === 'ENOENT' ? 'no such directory on the host' : (e as Error).message}`);
    }
    if (!st.isDirectory())
      throw new Error(`share ${hostDir}: not a directory (a share is a host directory; copy single files with --file)`);
    const guestDir = s.guestDir === undefined || s.guestDir === '' ? defaultGuestDir(hostDir) : s.guestDir;
    if (!path.isAbsolute(guestDir)) throw new Error(`share ${hostDir}: the guest directory '${guestDir}' is not absolute`);
    // eslint-disable-next-line no-control-regex
    if (/[\x00-\x1f\x7f]/.test(guestDir) || /\s$/.test(guestDir))
      throw new Error(`share ${hostDir}: the guest directory has control characters or trailing blanks`);
    const g = path.posix.normalize(guestDir).replace(/(.)\/+$/, '$1');
    if (RESERVED_EXACT.includes(g) || RESERVED.some((r) => g === r || g.startsWith(`${r}/`)))
      throw new Error(
        `share ${hostDir}: cannot mount it at ${g} in the guest (the guest needs its own ${g}); pick another directory, e.g. ${hostDir}:/host${g === '/' ? '' : g}`,
      );
    if (seen.has(g)) throw new Error(`shares ${seen.get(g)} and ${hostDir} both at ${g} in the guest`);
    seen.set(g, hostDir);
    out.push({ hostDir, guestDir: g, writable: !!s.writable, flat: !!s.flat, tag: `qcudashare${i}` });
  });
  return out;
}

/** Parses `HOSTDIR[:GUESTDIR[:rw|ro]]` (also `HOSTDIR:rw`, `HOSTDIR::rw`). */
export function parseShareSpec(spec: string): VmShare {
  const parts = spec.split(':');
  if (parts[0] === '') throw new Error(`--share=${spec}: no host directory`);
  let mode: string | undefined;
  if (parts.length > 1 && (parts[parts.length - 1] === 'rw' || parts[parts.length - 1] === 'ro')) mode = parts.pop();
  if (parts.length > 2) throw new Error(`--share=${spec}: expected HOSTDIR[:GUESTDIR[:rw]] (paths with ':' are not supported)`);
  if (mode === undefined && parts.length === 2 && parts[1] !== '' && !parts[1].startsWith('/'))
    throw new Error(`--share=${spec}: '${parts[1]}' is neither an absolute guest directory nor rw/ro`);
  return { hostDir: parts[0], guestDir: parts[1] || undefined, writable: mode === 'rw' };
}

interface MountEntry {
  id: number;
  parent: number;
  mountPoint: string;
  fsType: string;
  options: string[];
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
}

function mountInfo(): MountEntry[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => {
      const [pre, post] = line.split(' - ');
      const f = pre.split(' ');
      return { id: +f[0], parent: +f[1], mountPoint: unescape(f[4]), options: f[5].split(','), fsType: post.split(' ')[0] };
    });
}

/** Kernel filesystems that a share leaves out (unmounted in virtiofsd's namespace). */
const HIDDEN_FS = new Set([
  'proc',
  'sysfs',
  'devtmpfs',
  'devpts',
  'cgroup',
  'cgroup2',
  'debugfs',
  'tracefs',
  'securityfs',
  'bpf',
  'mqueue',
  'hugetlbfs',
  'fusectl',
  'configfs',
  'pstore',
  'efivarfs',
  'binfmt_misc',
  'autofs',
  'rpc_pipefs',
  'nsfs',
  'selinuxfs',
]);

/** The mount plan under a host directory: paths relative to it. */
export function mountPlan(hostDir: string): { hide: string[]; remount: string[]; stuck: number } {
  const root = fs.realpathSync(hostDir);
  const under = (p: string, dir: string) => (dir === '/' ? p !== '/' : p.startsWith(`${dir}/`));
  const all = mountInfo();
  const subs = all.filter((m) => under(m.mountPoint, root));
  // Parents before children: by depth, then in mount order.
  subs.sort((a, b) => a.mountPoint.split('/').length - b.mountPoint.split('/').length);
  const hide: string[] = [];
  const remount: string[] = [];
  let stuck = 0;
  const hiddenAbs: string[] = [];
  const byPoint = new Map<string, MountEntry[]>();
  for (const m of subs) byPoint.set(m.mountPoint, [...(byPoint.get(m.mountPoint) ?? []), m]);
  for (const m of subs) {
    if (hiddenAbs.some((h) => m.mountPoint === h || under(m.mountPoint, h))) continue;
    const rel = path.relative(root, m.mountPoint);
    if (HIDDEN_FS.has(m.fsType)) {
      hiddenAbs.push(m.mountPoint);
      hide.push(rel);
      continue;
    }
    // A mount covered by another at the same place cannot be reached (nor
    // remounted) by path: count those still writable for the check.
    const covered = byPoint.get(m.mountPoint)!.some((o) => o.parent === m.id);
    if (covered) {
      if (!m.options.includes('ro')) stuck++;
      continue;
    }
    if (!remount.includes(rel)) remount.push(rel);
  }
  return { hide, remount, stuck };
}

// Run by unshare in a new mount namespace ($0 is the script's name):
//   $1 mount flags, $2 host dir, $3 mount point, $4 number of mounts allowed
//   to lack the flags (covered ones), $5 open-file limit for virtiofsd, then
//   H:<rel> (unmount) and R:<rel> (remount) items, "--", and the virtiofsd
//   command line.
const NS_SCRIPT = `set -e
flags=$1 src=$2 mnt=$3 stuck=$4 nofile=$5
shift 5
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$nofile" ]; then ulimit -Hn "$nofile" 2>/dev/null || true; fi
ulimit -Sn "$(ulimit -Hn)"
mount --rbind "$src" "$mnt"
mount -o "remount,bind,$flags" "$mnt"
while [ "$1" != -- ]; do
  case $1 in
  H:*) umount -l "$mnt/\${1#H:}" ;;
  R:*) mount -o "remount,bind,$flags" "$mnt/\${1#R:}" ;;
  esac
  shift
done
shift
bad=$(findmnt -R -n -r -o VFS-OPTIONS "$mnt" | awk -v need="$flags" '
  BEGIN { n = split(need, want, ",") }
  { split($0, o, ","); delete have; for (i in o) have[o[i]] = 1
    for (i = 1; i <= n; i++) if (!(want[i] in have)) { bad++; break } }
  END { print bad + 0 }')
if [ "$bad" -gt "$stuck" ]; then
  echo "qcuda-share: $bad mount(s) under $src are not $flags after the remount (mounts changed meanwhile?)" >&2
  exit 1
fi
exec "$@"`;

// Open files of virtiofsd: one per inode the guest has looked up (an O_PATH
// fd) plus one per file it holds open, so a guest walking or importing a
// large tree needs many. The most the host allows a process (fs.nr_open),
// up to 2^20, raised (never lowered) by the namespace script before it execs
// virtiofsd, soft limit to the hard one. The C virtiofsd of QEMU 7.2 here
// ignores --rlimit-nofile (measured: strace shows no setrlimit) and only
// lifts its soft limit to the hard one once QEMU connects; the option stays
// for builds that apply it (the Rust one). Raising the hard limit needs
// CAP_SYS_RESOURCE, which a container's root may lack (this build machine:
// hard 20000): then the hard limit bounds the files the guest can hold open,
// about half of it (2 fds a file).
const MAX_NOFILE = 1 << 20;

export function virtiofsdNofile(): number {
  try {
    const n = Number.parseInt(fs.readFileSync('/proc/sys/fs/nr_open', 'utf8'), 10);
    if (Number.isFinite(n) && n > 0) return Math.min(n, MAX_NOFILE);
  } catch {
    // no /proc/sys: the kernel's default nr_open
  }
  return MAX_NOFILE;
}

/** The command (unshare ... sh -c ... virtiofsd ...) that serves a share on sock. */
export function virtiofsdCommand(
  virtiofsd: string,
  share: ResolvedShare,
  mountPoint: string,
  sock: string,
): { cmd: string; args: string[] } {
  const flags = share.writable ? 'nosuid,nodev' : 'ro,nosuid,nodev';
  const plan = mountPlan(share.hostDir);
  return {
    cmd: 'unshare',
    args: [
      '--mount',
      '--propagation',
      'private',
      '--',
      '/bin/sh',
      '-c',
      NS_SCRIPT,
      'qcuda-share',
      flags,
      share.hostDir,
      mountPoint,
      String(plan.stuck),
      String(virtiofsdNofile()),
      ...plan.hide.map((h) => `H:${h}`),
      ...plan.remount.map((r) => `R:${r}`),
      '--',
      virtiofsd,
      `--socket-path=${sock}`,
      `--rlimit-nofile=${virtiofsdNofile()}`,
      '-o',
      `source=${mountPoint}`,
      '-o',
      'cache=auto',
      // Without CAP_MKNOD and CAP_SETFCAP: guest root must not make device
      // nodes (one of the host's disk, mode 0666, is host root for any user
      // who reaches the share: nodev holds only in virtiofsd's own mount
      // namespace) nor file capabilities in a :rw share (security review 3,
      // N9). mknod of a FIFO or socket needs neither.
      '-o',
      'modcaps=-mknod:-setfcap',
      ...(share.flat ? [] : ['-o', 'announce_submounts']),
      '-o',
      'log_level=warn',
    ],
  };
}
