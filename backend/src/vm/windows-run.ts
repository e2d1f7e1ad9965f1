// qcuda vm --windows-image: a user's Windows VM with the shared-memory
// transport. Starts a backend that makes the region (it listens on a socket
// too, which nothing joins: the socket tells when it is ready), then QEMU
// (windows.ts), and waits for QEMU to exit (Windows shut down) or the
// timeout. Whatever happens, QEMU and the backend are stopped and the
// region, the firmware variables and the sockets go with the run's
// directory.
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { makeSocketDir, type BackendUser } from './backend-user';
import type { HostCgroup } from './host-bounds';
import { shmBackendArgs, type ShmRegion } from './ivshmem';
import { exited, ListenError, tail, waitForListen } from './listen-wait';
import { BACKEND_JS, start, stop, VmError } from './runner';
import { windowsQemuArgs, type WindowsConfig } from './windows';

export interface WindowsVmOptions extends Omit<WindowsConfig, 'shm' | 'qmp' | 'uefi'> {
  qemu: string;
  shmBytes: number;
  /** UEFI firmware (findUefi); undefined: QEMU's BIOS. The variables are copied: each run starts from the package's. */
  uefi?: { code: string; vars: string };
  backendArgs?: string[];
  backendUser?: BackendUser;
  hostCgroup?: HostCgroup;
  /** QEMU's QMP socket for the caller (tests ask it what devices there are). */
  monitor?: string;
  /** Default: none (Windows runs until it shuts down). */
  timeoutMs?: number;
  onBackendLog?: (text: string) => void;
  onWaiting?: (line: string) => void;
  onStarted?: (i: { qemuPid: number; backendPid: number; monitor: string; region: ShmRegion; args: string[] }) => void;
}

export interface WindowsVmResult {
  /** QEMU's exit status (0: Windows shut down). */
  exit: number;
  /** QEMU's stderr. */
  qemuLog: string;
}

/** Waits (30 s at most) for QEMU's socket; QEMU's exit before fails the run with what it said. */
async function socketOf(sock: string, qemu: ChildProcess, log: () => string): Promise<void> {
  for (let i = 0; i < 300 && !fs.existsSync(sock); i++) {
    if (qemu.exitCode !== null || qemu.signalCode !== null) throw new VmError('qemu', `QEMU exited at start:\n${tail(log())}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!fs.existsSync(sock)) throw new VmError('qemu', `QEMU made no monitor socket in 30 s:\n${tail(log())}`);
}

export async function runWindowsVm(o: WindowsVmOptions): Promise<WindowsVmResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-winvm-'));
  let sockDir = dir;
  let backend: ChildProcess | undefined;
  let qemu: ChildProcess | undefined;
  try {
    if (o.backendUser) sockDir = makeSocketDir(o.backendUser);
    const sock = path.join(sockDir, 'vhost.sock');
    const region: ShmRegion = { path: path.join(sockDir, 'qcuda.shm'), bytes: o.shmBytes };
    const peer = o.backendUser ? [`--peer-uid=${process.geteuid!()}`] : [];
    const args = [BACKEND_JS, `--socket-path=${sock}`, '--device=qcuda', ...shmBackendArgs(region), ...peer, ...(o.backendArgs ?? [])];
    backend = start(process.execPath, args, 'backend', false, o.backendUser, undefined, true);
    if (backend.pid !== undefined) o.hostCgroup?.add(backend.pid);
    let beErr = '';
    backend.stderr!.on('data', (d: Buffer) => {
      beErr += d.toString();
      o.onBackendLog?.(d.toString());
    });
    try {
      await waitForListen(backend, { sock, name: 'backend', stderr: () => beErr, onWaiting: o.onWaiting });
    } catch (e) {
      if (e instanceof ListenError) throw new VmError('backend', e.message);
      throw e;
    }
    const uefi = o.uefi && { code: o.uefi.code, vars: path.join(dir, 'efivars.fd') };
    if (o.uefi) fs.copyFileSync(o.uefi.vars, uefi!.vars);
    const monitor = o.monitor ?? path.join(dir, 'monitor.sock');
    const qemuArgs = windowsQemuArgs({ ...o, shm: region, uefi, qmp: [monitor] });
    qemu = start(o.qemu, qemuArgs, 'qemu');
    let qemuLog = '';
    qemu.stderr!.on('data', (d: Buffer) => (qemuLog += d.toString()));
    // QEMU makes its monitor's socket once its devices are up: then the VM is there to be asked about.
    await socketOf(monitor, qemu, () => qemuLog);
    o.onStarted?.({ qemuPid: qemu.pid!, backendPid: backend.pid!, monitor, region, args: qemuArgs });
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      exited(qemu).then((how) => ({ who: 'qemu' as const, how })),
      exited(backend).then((how) => ({ who: 'backend' as const, how })),
      ...(o.timeoutMs
        ? [new Promise<{ who: 'timeout'; how: string }>((r) => (timer = setTimeout(() => r({ who: 'timeout', how: '' }), o.timeoutMs)))]
        : []),
    ]);
    clearTimeout(timer);
    if (outcome.who === 'backend') throw new VmError('backend', `the backend died (${outcome.how}):\n${tail(beErr)}`);
    if (outcome.who === 'timeout') throw new VmError('timeout', `the VM ran past ${o.timeoutMs! / 1000} s`);
    if (qemu.exitCode !== 0) throw new VmError('qemu', `QEMU ${outcome.how}${qemuLog.trim() ? `:\n${tail(qemuLog)}` : ''}`);
    return { exit: 0, qemuLog };
  } finally {
    await Promise.all([stop(qemu), stop(backend)]);
    fs.rmSync(dir, { recursive: true, force: true });
    if (sockDir !== dir) fs.rmSync(sockDir, { recursive: true, force: true });
  }
}
