// Runs a command in a fresh guest: starts the backend (and a virtiofsd per
// shared host directory), starts QEMU with the device, streams the console,
// enforces a timeout and returns what the guest reported. Whatever happens (a
// failure, a timeout, an interrupted test run), QEMU, the backend, the
// virtiofsds, the sockets and the temporary files are removed.
import { spawn, type ChildProcess } from 'node:child_process';
import createDebug from 'debug';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { makeSocketDir, type BackendUser } from './backend-user';
import type { HostCgroup } from './host-bounds';
import { childEnv } from '../sys/harden';
import type { Ledger } from '../qcuda/quota/limits';
import { diskSlot, vmLedger } from '../qcuda/quota/vm-ledger';
import { cpio, type CpioEntry } from './cpio';
import { DISK_APPEND, DiskImageError, prepareDiskImage, runArg, RUN_DISK_SERIAL } from './disk-image';
import { qemuArgs, type QemuConfig } from './qemu-args';
import { shmBackendArgs, type ShmRegion } from './ivshmem';
import { exited, ListenError, tail, waitForListen } from './listen-wait';
import { parseReport, type GuestReport } from './result';
import { VmControl, type VmMigrationOptions } from './migration';
import { defaultVirtiofsd, resolveShares, virtiofsdCommand, type ResolvedShare, type VmShare } from './shares';

export type { VmShare } from './shares';

const debug = createDebug('qcuda:vm');

export interface VmOptions extends VmMigrationOptions {
  qemu: string;
  /** The initramfs guest's kernel; with diskImage, the image's own unless given (then initrd too). */
  kernel?: string;
  /** The initramfs guest's base image; with diskImage, the image's own initrd unless given. */
  initrd?: string;
  /** Boot this disk image (`make guest-disk`'s) with systemd instead of the initramfs guest. */
  diskImage?: VmDiskImage;
  /** Shell script run by the guest's /init (as /qcuda/run, cwd /qcuda/files); in a disk image, by qcuda-vm-run as its user. */
  command: string;
  /**
   * Disk images only: no command; the console is this process's terminal
   * (stdin and stdout) for a person to log in, and the run ends when the
   * guest powers off. The result has no report, exit is QEMU's status.
   */
  interactive?: boolean;
  /** Host files copied into the guest's /qcuda/files (on PATH and LD_LIBRARY_PATH). */
  files?: string[];
  timeoutMs?: number;
  queues?: number;
  memoryMiB?: number;
  cpus?: number;
  /** Extra arguments for qcuda-backend. */
  backendArgs?: string[];
  /**
   * The VM's device memory quota (bytes; default none): the qcuda backend's
   * --device-memory-limit, and the GPU disks' (store gpu) too, which take
   * from it as they are written (one ledger shared by the backends:
   * qcuda/quota/vm-ledger.ts).
   */
  deviceMemoryLimit?: bigint;
  /**
   * Who the backends run as (backend-user.ts chooses; root only): their
   * sockets then go in a directory of that user's own, and they serve only
   * this process's user (QEMU's). Default: as this process.
   */
  backendUser?: BackendUser;
  /** The control group the backends (and so their workers) run in: host memory, tasks and CPU bounded (host-bounds.ts); default none. */
  hostCgroup?: HostCgroup;
  /** Receives what the backend writes to stderr (its log: sessions, workers, warnings) as it comes. */
  onBackendLog?: (text: string) => void;
  /** Receives one line when a backend or virtiofsd is slow to listen (a loaded host): what the run waits for. */
  onWaiting?: (line: string) => void;
  /** Receives the guest console (kernel log and program output) as it comes. */
  onConsole?: (text: string) => void;
  firmwareDirs?: string[];
  accel?: QemuConfig['accel'];
  /** Host directories the guest mounts over virtiofs before the command runs
   * (at most 8; read-only unless writable, enforced on the host). */
  shares?: VmShare[];
  /** The virtiofsd binary for shares (default: $QCUDA_VIRTIOFSD, set by make, or build/vm/virtiofsd). */
  virtiofsd?: string;
  /** Called once the processes run (tests use it to kill one side). */
  onStarted?: (info: StartedInfo) => void;
  /** Start a new backend this many times when one dies, and let QEMU
   * reconnect to it (-chardev ...,reconnect-ms); 0: a dead backend fails the run. */
  restartBackend?: number;
  onBackendRestarted?: (pid: number) => void;
  /** GPU disks: each a blk backend of its own (vhost-user-blk-pci), /dev/vda, vdb, ... in the guest. */
  disks?: VmDisk[];
  /**
   * Also serve a shared-memory region of this many bytes (ivshmem.ts): the
   * backend makes it beside its socket, QEMU maps it as an ivshmem-plain
   * device; removed with the run.
   */
  shmBytes?: number;
}

export interface VmDiskImage {
  path: string;
  /** Keep the guest's writes in the image; default: a snapshot (QEMU's temporary overlay), the file is left as it was. */
  writable?: boolean;
}

export interface VmDisk {
  /** Bytes, whole 512-byte sectors. */
  size: bigint;
  /** The socket of a blk backend started by the caller (size, store and readOnly are its own then): it outlives the run, and the disk with it. */
  socket?: string;
  /** Where the disk lives (default gpu). */
  store?: 'gpu' | 'host';
  readOnly?: boolean;
}

/** Request queues of a disk (QEMU's num-queues and the backend's --queues). */
export const DISK_QUEUES = 2;

export interface VmResult extends GuestReport {
  console: string;
  /** Milliseconds from QEMU's start to the guest's /init printing its first line (host clock). */
  bootMs?: number;
  wallMs: number;
  /** What the backend said of the provider it chose ("cuda provider on GPU 0 ...", "emu provider: device memory in host RAM, no GPU (why)"). */
  provider?: string;
  /** The VM migrated away before its command finished (its result is the destination's). */
  migrated?: boolean;
}

export interface StartedInfo {
  backendPid: number;
  /** The backend's socket (its status socket: this with '.status'). */
  socket: string;
  /** One per disk, in order. */
  diskPids: number[];
  qemuPid: number;
  /** One per share, in order (each also has a sandboxed child once QEMU connected). */
  virtiofsdPids: number[];
  dir: string;
  /** QEMU's QMP monitor for others (qcuda migrate --monitor): the VM's own stays runVm's. */
  monitor: string;
}

export type FailedSide = 'backend' | 'qemu' | 'virtiofsd' | 'guest' | 'timeout';

export class VmError extends Error {
  override readonly name = 'VmError';
  constructor(
    readonly side: FailedSide,
    message: string,
    readonly consoleText = '',
  ) {
    super(message);
  }
}

/** Options that cannot work (a bad share, no virtiofsd): thrown before anything starts. */
export class VmConfigError extends Error {
  override readonly name = 'VmConfigError';
}

/** What vm-images/init prints on the console first. */
const INIT_MARK = 'qcuda-init: started';
export const BACKEND_JS = path.resolve(__dirname, '..', 'cli', 'backend.js');
const live = new Set<ChildProcess>();

// An interrupted run (Ctrl-C, a test runner tearing down) must not leave a
// QEMU or backend behind; temp dirs go with the normal path below.
// Backends run in sessions of their own (no terminal: security review 3,
// N2), so a closed terminal's SIGHUP no longer reaches them: it ends them
// through this process, as Ctrl-C does, and where this process is killed
// outright the kernel ends them (PR_SET_PDEATHSIG, sys/harden.ts).
function killLive(): void {
  for (const p of live) p.kill('SIGKILL');
}
process.once('exit', killLive);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(sig, () => {
    killLive();
    process.exit(130);
  });
}

/** The fd a backend inherits the VM's ledger as (the first after stdio). */
const LEDGER_FD = 3;

/**
 * A backend (qcuda or blk): in a session of its own, without the terminal of
 * whoever started this (its workers run guest-chosen code: security review 3,
 * N2), and ended by the kernel if this process is (sys/harden.ts). As root
 * and not dropped, it is told to keep root (it would drop by itself).
 */
function backendProcess(as: BackendUser | undefined, args: string[]): { args: string[]; detached: true; env: NodeJS.ProcessEnv } {
  const keepRoot = !as && process.geteuid?.() === 0 ? ['--backend-user=root'] : [];
  return { args: [...args, ...keepRoot], detached: true, env: childEnv() };
}

/** Starts a child the run owns: killed with this process (killLive) wherever the run ends. */
export function start(
  cmd: string,
  args: string[],
  name: string,
  terminal = false,
  as?: BackendUser,
  ledger?: Ledger,
  backend = false,
): ChildProcess {
  debug('%s: %s %s%s', name, cmd, args.join(' '), as ? ` (as ${as.name})` : '');
  const user = as ? { uid: as.uid, gid: as.gid, cwd: '/' } : {};
  const stdio: ('inherit' | 'pipe' | 'ignore' | number)[] = terminal ? ['inherit', 'inherit', 'pipe'] : ['ignore', 'pipe', 'pipe'];
  const { args: argv, ...apart } = backend ? backendProcess(as, args) : { args };
  const p = spawn(cmd, argv, { stdio: ledger ? [...stdio, ledger.fd.value] : stdio, ...user, ...apart });
  live.add(p);
  p.once('exit', () => live.delete(p));
  p.once('error', () => live.delete(p));
  return p;
}

export async function stop(p: ChildProcess | undefined): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null || p.pid === undefined) return;
  const gone = exited(p);
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 2000);
  await gone;
  clearTimeout(timer);
}

/** Waits for a started process's socket; a process that exits (or passes the bound) fails the run as `side`. */
async function waitForSocket(
  sock: string,
  p: ChildProcess,
  stderr: () => string,
  o: VmOptions,
  side: FailedSide = 'backend',
  name = 'backend',
): Promise<void> {
  try {
    await waitForListen(p, { sock, name, stderr, onWaiting: o.onWaiting });
  } catch (e) {
    if (e instanceof ListenError) throw new VmError(side, e.message);
    throw e;
  }
}

/** pid and start time (to tell a reused pid apart) of a process's children. */
function childrenOf(pid: number): { pid: number; start: string }[] {
  const out: { pid: number; start: string }[] = [];
  for (const e of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${e}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // f[0] is field 3 (state)
      if (+f[1] === pid) out.push({ pid: +e, start: f[19] });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

function sameProcess(k: { pid: number; start: string }): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${k.pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return f[19] === k.start && f[0] !== 'Z';
  } catch {
    return false;
  }
}

// virtiofsd (sandbox=namespace) forks once QEMU has connected: the child
// serves in new pid/mount/net namespaces, the parent waits for it. Killed,
// the parent exits and the child gets SIGTERM (PR_SET_PDEATHSIG); wait for
// it too, so that no virtiofsd outlives the run.
async function stopVirtiofsd(p: ChildProcess): Promise<void> {
  const kids = p.pid !== undefined && p.exitCode === null && p.signalCode === null ? childrenOf(p.pid) : [];
  await stop(p);
  for (const k of kids) {
    for (let i = 0; i < 100 && sameProcess(k); i++) await new Promise((r) => setTimeout(r, 20));
    if (sameProcess(k)) {
      debug('virtiofsd child %d did not exit: SIGKILL', k.pid);
      try {
        process.kill(k.pid, 'SIGKILL');
      } catch {
        // exited meanwhile
      }
      for (let i = 0; i < 50 && sameProcess(k); i++) await new Promise((r) => setTimeout(r, 20));
    }
  }
}

/** The per-run archive (vm-images/README.md): the command, the shares to mount, the files. */
function runArchive(o: Pick<VmOptions, 'command' | 'files'>, shares: ResolvedShare[]): Buffer {
  const entries: CpioEntry[] = [{ name: 'qcuda/run', data: Buffer.from(`${o.command}\n`), mode: 0o755 }];
  // vm-images/init mounts each line's tag at its directory before the command runs.
  if (shares.length > 0)
    entries.push({
      name: 'qcuda/shares',
      data: Buffer.from(shares.map((s) => `${s.tag} ${s.writable ? 'rw' : 'ro'} ${s.guestDir}\n`).join('')),
      mode: 0o644,
    });
  for (const f of o.files ?? []) {
    const st = fs.statSync(f);
    entries.push({ name: `qcuda/files/${path.basename(f)}`, data: fs.readFileSync(f), mode: st.mode & 0o777 });
  }
  return Buffer.from(cpio(entries));
}

/**
 * The base initramfs with the command (and files, and shares to mount)
 * appended as a second archive, written to DIR/initrd; vm-images/init runs
 * the command. Also what a libvirt domain boots (libvirt.ts).
 */
export function buildInitrd(dir: string, o: Pick<VmOptions, 'initrd' | 'command' | 'files'>, shares: ResolvedShare[] = []): string {
  if (!o.initrd) throw new VmConfigError('the guest needs a base initramfs (GUEST_INITRD)');
  const out = path.join(dir, 'initrd');
  fs.copyFileSync(o.initrd, out);
  fs.appendFileSync(out, runArchive(o, shares));
  return out;
}

interface Boot {
  kernel: string;
  initrd: string;
  append?: string;
  rootDisk?: { file: string; snapshot: boolean };
  dataDisks?: { file: string; serial: string }[];
}

/**
 * What QEMU boots: the initramfs guest with the run archive appended to its
 * initrd, or a disk image (its own kernel and initrd, full systemd boot) with
 * the run archive on a second disk, where qcuda-vm-run.service reads it.
 */
function prepareBoot(dir: string, o: VmOptions, shares: ResolvedShare[]): Boot {
  if (!o.diskImage) {
    if (!o.kernel) throw new VmConfigError('the guest needs a kernel (GUEST_KERNEL)');
    return { kernel: o.kernel, initrd: buildInitrd(dir, o, shares) };
  }
  let files: { kernel: string; initrd: string };
  try {
    files = prepareDiskImage(o.diskImage.path, dir);
  } catch (e) {
    if (e instanceof DiskImageError) throw new VmConfigError(e.message);
    throw e;
  }
  if (o.kernel && o.initrd) files = { kernel: o.kernel, initrd: o.initrd };
  const rootDisk = { file: path.resolve(o.diskImage.path), snapshot: !o.diskImage.writable };
  // Without qcuda.run, qcuda-vm-run.service stays off: a plain boot to the login prompt.
  if (o.interactive) return { ...files, append: DISK_APPEND, rootDisk };
  const archive = runArchive(o, shares);
  const runFile = path.join(dir, 'run.cpio');
  // Whole sectors: QEMU drops a raw image's partial last sector.
  fs.writeFileSync(runFile, Buffer.concat([archive, Buffer.alloc((512 - (archive.length % 512)) % 512)]));
  return {
    ...files,
    append: `${DISK_APPEND} ${runArg(rootDisk.snapshot)}`,
    rootDisk,
    dataDisks: [{ file: runFile, serial: RUN_DISK_SERIAL }],
  };
}

function checkShares(o: VmOptions): { shares: ResolvedShare[]; virtiofsd: string } {
  let shares: ResolvedShare[];
  try {
    shares = resolveShares(o.shares);
  } catch (e) {
    throw new VmConfigError((e as Error).message);
  }
  const virtiofsd = o.virtiofsd ?? defaultVirtiofsd();
  if (shares.length === 0) return { shares, virtiofsd };
  if (!virtiofsd)
    throw new VmConfigError(
      'shares need virtiofsd: pass --virtiofsd=PATH or set QCUDA_VIRTIOFSD (make sets it; `make virtiofsd` fetches it)',
    );
  try {
    fs.accessSync(virtiofsd, fs.constants.X_OK);
  } catch {
    throw new VmConfigError(`virtiofsd ${virtiofsd} is not there or not executable (\`make virtiofsd\` fetches it)`);
  }
  if (process.getuid?.() !== 0)
    throw new VmConfigError(
      'shares need root: virtiofsd, and the private mount namespace that makes a share read-only on the host, need CAP_SYS_ADMIN',
    );
  return { shares, virtiofsd };
}

export async function runVm(o: VmOptions): Promise<VmResult> {
  const { shares, virtiofsd } = checkShares(o);
  // qcuda-vm-run (the disk image's side) mounts no shares yet.
  if (o.diskImage && shares.length > 0)
    throw new VmConfigError('--share and --host-root work with the initramfs guest only, not with --disk-image');
  if (o.interactive && !o.diskImage)
    throw new VmConfigError('an interactive console needs a disk image (the initramfs guest has no login)');
  // QEMU keeps the region it mapped at start: a new backend's would be another file.
  if (o.shmBytes && o.restartBackend) throw new VmConfigError('a shared-memory region cannot outlive its backend (no restartBackend)');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-vm-'));
  // A backend of another user's gets a directory of its own for its sockets (dir is closed to it).
  let sockDir = dir;
  let backend: ChildProcess | undefined;
  let shmBackend: ChildProcess | undefined;
  let qemu: ChildProcess | undefined;
  let control: VmControl | undefined;
  const fsds: ChildProcess[] = [];
  const disks: ChildProcess[] = [];
  const t0 = Date.now();
  // GPU disks of the run's own take device memory from the VM's quota as
  // they are written: its ledger, made here, is shared by their backends
  // and the qcuda backend (each applies the limit it is given).
  const ledger = (o.disks ?? []).some((d) => !d.socket && (d.store ?? 'gpu') === 'gpu') ? vmLedger(o.disks!.length) : undefined;
  const limitArgs = o.deviceMemoryLimit !== undefined ? [`--device-memory-limit=${o.deviceMemoryLimit}`] : [];
  const ledgerArgs = ledger ? [`--ledger-fd=${LEDGER_FD}`] : [];
  try {
    // First: a bad disk image fails the run before any process starts.
    const boot = prepareBoot(dir, o, shares);
    if (o.backendUser) sockDir = makeSocketDir(o.backendUser);
    const sock = path.join(sockDir, 'vhost.sock');
    // Beside the socket: a backend of another user's makes it in its own directory (QEMU, as root, still opens it).
    const shm: ShmRegion | undefined = o.shmBytes ? { path: path.join(sockDir, 'qcuda.shm'), bytes: o.shmBytes } : undefined;
    // Dropped: only QEMU, which runs as this process does, may be the frontend (others of the user's cannot take the device).
    const peerArgs = o.backendUser ? [`--peer-uid=${process.geteuid!()}`] : [];
    const resultFile = path.join(dir, 'result');
    // One virtiofsd per share, each on its own socket, serving its own
    // (read-only) bind mount of the host directory.
    const fsErr: string[] = [];
    await Promise.all(
      shares.map(async (s, i) => {
        const mnt = path.join(dir, `share${i}`);
        fs.mkdirSync(mnt);
        const fsSock = path.join(dir, `fs${i}.sock`);
        fsErr[i] = '';
        const c = virtiofsdCommand(virtiofsd, s, mnt, fsSock);
        const p = start(c.cmd, c.args, `virtiofsd ${i}`);
        fsds[i] = p;
        p.stdout!.on('data', (d: Buffer) => debug('virtiofsd %d: %s', i, d.toString().trimEnd()));
        p.stderr!.on('data', (d: Buffer) => {
          debug('virtiofsd %d: %s', i, d.toString().trimEnd());
          fsErr[i] += d.toString();
        });
        await waitForSocket(fsSock, p, () => fsErr[i], o, 'virtiofsd', `virtiofsd for share ${s.hostDir}`);
      }),
    );
    let beErr = '';
    const launchBackend = async (): Promise<ChildProcess> => {
      const p = start(
        process.execPath,
        [
          BACKEND_JS,
          `--socket-path=${sock}`,
          '--device=qcuda',
          `--queues=${o.queues ?? 4}`,
          ...peerArgs,
          ...limitArgs,
          ...ledgerArgs,
          ...(o.backendArgs ?? []),
        ],
        'backend',
        false,
        o.backendUser,
        ledger,
        true,
      );
      backend = p;
      if (p.pid !== undefined) o.hostCgroup?.add(p.pid);
      p.stdout!.on('data', (d: Buffer) => debug('backend: %s', d.toString().trimEnd()));
      p.stderr!.on('data', (d: Buffer) => {
        beErr += d.toString();
        o.onBackendLog?.(d.toString());
      });
      await waitForSocket(sock, p, () => beErr, o);
      return p;
    };
    await launchBackend();
    // The region's backend: one of its own (it serves the region alone; its socket only tells that it is up).
    if (shm) {
      const shmSock = path.join(sockDir, 'shm.sock');
      let shmErr = '';
      const args = [BACKEND_JS, `--socket-path=${shmSock}`, '--device=qcuda', ...shmBackendArgs(shm), ...peerArgs, ...limitArgs];
      shmBackend = start(process.execPath, [...args, ...(o.backendArgs ?? [])], 'shm backend', false, o.backendUser, undefined, true);
      if (shmBackend.pid !== undefined) o.hostCgroup?.add(shmBackend.pid);
      shmBackend.stderr!.on('data', (d: Buffer) => {
        shmErr += d.toString();
        o.onBackendLog?.(d.toString());
      });
      await waitForSocket(shmSock, shmBackend, () => shmErr, o, 'backend', 'backend of the shared-memory region');
    }
    let restarts = o.restartBackend ?? 0;
    // A blk backend per disk: a disk that does not fit the device fails the
    // run here, as the backend's. A GPU disk is allocated as written, from
    // the VM's quota; a host one at start.
    const diskErr: string[] = [];
    const diskSockets = (o.disks ?? []).map((d, i) => d.socket ?? path.join(sockDir, `blk${i}.sock`));
    await Promise.all(
      (o.disks ?? []).map(async (d, i) => {
        if (d.socket) return;
        const s = diskSockets[i];
        diskErr[i] = '';
        const shared = (d.store ?? 'gpu') === 'gpu' ? ledger : undefined;
        const args = [
          BACKEND_JS,
          `--socket-path=${s}`,
          '--device=blk',
          `--queues=${DISK_QUEUES}`,
          `--size=${d.size}`,
          `--store=${d.store ?? 'gpu'}`,
          ...(d.readOnly ? ['--read-only'] : []),
          ...peerArgs,
          ...(shared ? [...limitArgs, ...ledgerArgs, `--ledger-slot=${diskSlot(i)}`] : []),
        ];
        const p = start(process.execPath, args, `disk ${i}`, false, o.backendUser, shared, true);
        disks[i] = p;
        if (p.pid !== undefined) o.hostCgroup?.add(p.pid);
        // What a disk backend that dies held of the quota goes back (one that exits gives it back itself).
        if (shared) p.once('exit', () => shared.native.reclaim(diskSlot(i)));
        p.stderr!.on('data', (b: Buffer) => (diskErr[i] += b.toString()));
        await waitForSocket(s, p, () => diskErr[i], o, 'backend', `backend of disk ${i}`);
      }),
    );

    let consoleText = '';
    let qemuErr = '';
    if ((o.incoming || o.saveFile) && (shares.length > 0 || (o.disks ?? []).length > 0 || shm))
      throw new VmConfigError(
        'a VM with shares, disks or a shared-memory region cannot be saved or migrated (their backends keep no state to move)',
      );
    const qmpSock = path.join(dir, 'qmp.sock');
    const monitor = o.monitorSocket ?? path.join(dir, 'monitor.sock');
    qemu = start(
      o.qemu,
      qemuArgs({
        kernel: boot.kernel,
        initrd: boot.initrd,
        append: boot.append,
        rootDisk: boot.rootDisk,
        dataDisks: boot.dataDisks,
        socket: sock,
        resultFile,
        queues: o.queues,
        memoryMiB: o.memoryMiB,
        cpus: o.cpus,
        firmwareDirs: o.firmwareDirs,
        accel: o.accel,
        reconnectMs: restarts > 0 ? 200 : undefined,
        shares: shares.map((s, i) => ({ socket: path.join(dir, `fs${i}.sock`), tag: s.tag })),
        disks: diskSockets.map((socket) => ({ socket, queues: DISK_QUEUES })),
        shm,
        interactive: o.interactive,
        qmp: [qmpSock, monitor],
        incoming: o.incoming ? 'defer' : undefined,
      }),
      'qemu',
      o.interactive,
    );
    const qemuT0 = Date.now();
    let bootMs: number | undefined;
    // Interactive: the console goes to the terminal, not through here.
    qemu.stdout?.on('data', (d: Buffer) => {
      consoleText += d.toString();
      if (bootMs === undefined && consoleText.includes(INIT_MARK)) bootMs = Date.now() - qemuT0;
      o.onConsole?.(d.toString());
    });
    qemu.stderr!.on('data', (d: Buffer) => (qemuErr += d.toString()));
    if (qemu.pid !== undefined && backend!.pid !== undefined)
      o.onStarted?.({
        backendPid: backend!.pid,
        socket: sock,
        diskPids: disks.filter(Boolean).map((p) => p.pid!),
        qemuPid: qemu.pid,
        virtiofsdPids: fsds.map((p) => p.pid!),
        dir,
        monitor,
      });
    control = await VmControl.attach(qmpSock, qemu, o);

    const timeoutMs = o.timeoutMs ?? 120_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<{ who: 'timeout'; how: string }>(
      (r) => (timer = setTimeout(() => r({ who: 'timeout', how: '' }), timeoutMs)),
    );
    const qemuExit = exited(qemu).then((how) => ({ who: 'qemu' as const, how }));
    const readReport = () => parseReport(fs.existsSync(resultFile) ? fs.readFileSync(resultFile, 'utf8') : '');
    const fsdExit =
      fsds.length === 0
        ? new Promise<never>(() => {})
        : Promise.race(fsds.map((p, i) => exited(p).then((how) => ({ who: 'virtiofsd' as const, how, i }))));
    const ours = disks.flatMap((p, i) => (p ? [{ p, i }] : []));
    const diskExit =
      ours.length === 0
        ? new Promise<never>(() => {})
        : Promise.race(ours.map(({ p, i }) => exited(p).then((how) => ({ who: 'disk' as const, how, i }))));
    let outcome;
    for (;;) {
      outcome = await Promise.race([
        qemuExit,
        exited(backend!).then((how) => ({ who: 'backend' as const, how })),
        fsdExit,
        diskExit,
        timeout,
      ]);
      if (outcome.who === 'disk') break;
      if (outcome.who === 'virtiofsd') {
        // A virtiofsd exits by itself when QEMU closes its socket, which can
        // come before QEMU's own exit: that is QEMU's outcome, not a death.
        const late = await Promise.race([qemuExit, new Promise<undefined>((r) => setTimeout(() => r(undefined), 1000))]);
        if (late) outcome = late;
        else if (readReport().complete) outcome = await Promise.race([qemuExit, timeout]);
        break;
      }
      if (outcome.who !== 'backend' || restarts-- <= 0 || qemu.exitCode !== null) break;
      debug('backend %s: starting another', outcome.how);
      const p = await launchBackend();
      o.onBackendRestarted?.(p.pid!);
    }
    clearTimeout(timer);
    const report = readReport();
    const provider = /^qcuda-backend: (.*provider.*)$/m.exec(beErr)?.[1];
    const result: VmResult = { ...report, console: consoleText, wallMs: Date.now() - t0, bootMs, provider };
    if (outcome.who === 'disk')
      throw new VmError(
        'backend',
        `the backend of disk ${outcome.i} died during the run (${outcome.how}):\n${tail(diskErr[outcome.i])}`,
        consoleText,
      );
    if (outcome.who === 'backend')
      throw new VmError('backend', `the backend died during the run (${outcome.how}):\n${tail(beErr)}`, consoleText);
    if (outcome.who === 'virtiofsd')
      throw new VmError(
        'virtiofsd',
        `the virtiofsd of share ${shares[outcome.i].hostDir} died during the run (${outcome.how})${fsErr[outcome.i].trim() ? `:\n${tail(fsErr[outcome.i])}` : ''}`,
        consoleText,
      );
    if (outcome.who === 'timeout')
      throw new VmError('timeout', `guest did not finish within ${timeoutMs / 1000} s; console tail:\n${tail(consoleText)}`, consoleText);
    if (o.interactive) return { ...result, exit: qemu.exitCode ?? 125 };
    const share = /^share qcudashare(\d+)/.exec(report.error ?? '');
    if (share) {
      const s = shares[+share[1]];
      throw new VmError('guest', `the guest could not mount share ${s?.hostDir} at ${s?.guestDir}:\n${tail(report.log)}`, consoleText);
    }
    if (!report.complete && (await control?.migratedAway())) return { ...result, migrated: true, exit: 0 };
    if (!report.complete) {
      const why = (qemuErr.trim() ? `:\n${tail(qemuErr)}` : '') + (o.incoming && beErr.trim() ? `\nthe backend said:\n${tail(beErr)}` : '');
      throw new VmError(
        'qemu',
        `QEMU ${outcome.how} before the guest reported a result${why}\nconsole tail:\n${tail(consoleText)}`,
        consoleText,
      );
    }
    return result;
  } finally {
    control?.close();
    await Promise.all([
      stop(qemu),
      stop(backend),
      stop(shmBackend),
      ...disks.filter(Boolean).map(stop),
      ...fsds.filter(Boolean).map(stopVirtiofsd),
    ]);
    ledger?.close();
    fs.rmSync(dir, { recursive: true, force: true });
    if (sockDir !== dir) fs.rmSync(sockDir, { recursive: true, force: true });
  }
}
