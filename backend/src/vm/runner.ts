// Runs a command in a fresh guest: starts the backend, starts QEMU with the
// device, streams the console, enforces a timeout and returns what the guest
// reported. Whatever happens (a failure, a timeout, an interrupted test
// run), QEMU, the backend, the socket and the temporary files are removed.
import { spawn, type ChildProcess } from 'node:child_process';
import createDebug from 'debug';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { cpio, type CpioEntry } from './cpio';
import { qemuArgs, type QemuConfig } from './qemu-args';
import { parseReport, type GuestReport } from './result';

const debug = createDebug('qcuda:vm');

export interface VmOptions {
  qemu: string;
  kernel: string;
  initrd: string;
  /** Shell script run by the guest's /init (as /qcuda/run, cwd /qcuda/files). */
  command: string;
  /** Host files copied into the guest's /qcuda/files (on PATH and LD_LIBRARY_PATH). */
  files?: string[];
  timeoutMs?: number;
  queues?: number;
  memoryMiB?: number;
  cpus?: number;
  /** Extra arguments for qcuda-backend. */
  backendArgs?: string[];
  /** Receives the guest console (kernel log and program output) as it comes. */
  onConsole?: (text: string) => void;
  firmwareDirs?: string[];
  accel?: QemuConfig['accel'];
  /** Called once both processes run (tests use it to kill one side). */
  onStarted?: (info: { backendPid: number; qemuPid: number; dir: string }) => void;
  /** Start a new backend this many times when one dies, and let QEMU
   * reconnect to it (-chardev ...,reconnect-ms); 0: a dead backend fails the run. */
  restartBackend?: number;
  onBackendRestarted?: (pid: number) => void;
}

export interface VmResult extends GuestReport {
  console: string;
  /** Milliseconds from QEMU's start to the guest's /init printing its first line (host clock). */
  bootMs?: number;
  wallMs: number;
}

export type FailedSide = 'backend' | 'qemu' | 'guest' | 'timeout';

export class VmError extends Error {
  override readonly name = 'VmError';
  constructor(readonly side: FailedSide, message: string, readonly consoleText = '') {
    super(message);
  }
}

/** What vm-images/init prints on the console first. */
const INIT_MARK = 'qcuda-init: started';
const BACKEND_JS = path.resolve(__dirname, '..', 'cli', 'backend.js');
const live = new Set<ChildProcess>();

// An interrupted run (Ctrl-C, a test runner tearing down) must not leave a
// QEMU or backend behind; temp dirs go with the normal path below.
function killLive(): void {
  for (const p of live) p.kill('SIGKILL');
}
process.once('exit', killLive);
for (const sig of ['SIGINT', 'SIGTERM'] as const) {
  process.once(sig, () => {
    killLive();
    process.exit(130);
  });
}

function start(cmd: string, args: string[], name: string): ChildProcess {
  debug('%s: %s %s', name, cmd, args.join(' '));
  const p = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  live.add(p);
  p.once('exit', () => live.delete(p));
  p.once('error', () => live.delete(p));
  return p;
}

function exited(p: ChildProcess): Promise<string> {
  return new Promise((resolve) => {
    const describe = (code: number | null, sig: string | null) => (sig ? `killed by ${sig}` : `exited with status ${code}`);
    if (p.exitCode !== null || p.signalCode !== null) return resolve(describe(p.exitCode, p.signalCode));
    p.once('exit', (code, sig) => resolve(describe(code, sig)));
    p.once('error', (e) => resolve(`could not start: ${e.message}`));
  });
}

async function stop(p: ChildProcess | undefined): Promise<void> {
  if (!p || p.exitCode !== null || p.signalCode !== null || p.pid === undefined) return;
  const gone = exited(p);
  p.kill('SIGTERM');
  const timer = setTimeout(() => p.kill('SIGKILL'), 2000);
  await gone;
  clearTimeout(timer);
}

function tail(s: string, lines = 15): string {
  return s.trimEnd().split('\n').slice(-lines).join('\n');
}

async function waitForSocket(sock: string, backend: ChildProcess, stderr: () => string): Promise<void> {
  const died = exited(backend).then((how) => how);
  for (let i = 0; i < 400; i++) {
    if (fs.existsSync(sock)) return;
    const how = await Promise.race([died, new Promise<undefined>((r) => setTimeout(() => r(undefined), 25))]);
    if (how) throw new VmError('backend', `backend ${how} before listening:\n${tail(stderr())}`);
  }
  throw new VmError('backend', `backend did not create ${sock} within 10 s`);
}

function buildInitrd(dir: string, o: VmOptions): string {
  const entries: CpioEntry[] = [{ name: 'qcuda/run', data: Buffer.from(`${o.command}\n`), mode: 0o755 }];
  for (const f of o.files ?? []) {
    const st = fs.statSync(f);
    entries.push({ name: `qcuda/files/${path.basename(f)}`, data: fs.readFileSync(f), mode: st.mode & 0o777 });
  }
  const out = path.join(dir, 'initrd');
  fs.copyFileSync(o.initrd, out);
  fs.appendFileSync(out, cpio(entries));
  return out;
}

export async function runVm(o: VmOptions): Promise<VmResult> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-vm-'));
  let backend: ChildProcess | undefined;
  let qemu: ChildProcess | undefined;
  const t0 = Date.now();
  try {
    const sock = path.join(dir, 'vhost.sock');
    const resultFile = path.join(dir, 'result');
    let beErr = '';
    const launchBackend = async (): Promise<ChildProcess> => {
      const p = start(process.execPath, [BACKEND_JS, `--socket-path=${sock}`, '--device=qcuda', `--queues=${o.queues ?? 4}`, ...(o.backendArgs ?? [])], 'backend');
      backend = p;
      p.stdout!.on('data', (d: Buffer) => debug('backend: %s', d.toString().trimEnd()));
      p.stderr!.on('data', (d: Buffer) => (beErr += d.toString()));
      await waitForSocket(sock, p, () => beErr);
      return p;
    };
    await launchBackend();
    let restarts = o.restartBackend ?? 0;

    const initrd = buildInitrd(dir, o);
    let consoleText = '';
    let qemuErr = '';
    qemu = start(o.qemu, qemuArgs({
      kernel: o.kernel, initrd, socket: sock, resultFile, queues: o.queues, memoryMiB: o.memoryMiB, cpus: o.cpus,
      firmwareDirs: o.firmwareDirs, accel: o.accel, reconnectMs: restarts > 0 ? 200 : undefined,
    }), 'qemu');
    const qemuT0 = Date.now();
    let bootMs: number | undefined;
    qemu.stdout!.on('data', (d: Buffer) => {
      consoleText += d.toString();
      if (bootMs === undefined && consoleText.includes(INIT_MARK)) bootMs = Date.now() - qemuT0;
      o.onConsole?.(d.toString());
    });
    qemu.stderr!.on('data', (d: Buffer) => (qemuErr += d.toString()));
    if (qemu.pid !== undefined && backend!.pid !== undefined) o.onStarted?.({ backendPid: backend!.pid, qemuPid: qemu.pid, dir });

    const timeoutMs = o.timeoutMs ?? 120_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<{ who: 'timeout'; how: string }>((r) => (timer = setTimeout(() => r({ who: 'timeout', how: '' }), timeoutMs)));
    const qemuExit = exited(qemu).then((how) => ({ who: 'qemu' as const, how }));
    let outcome;
    for (;;) {
      outcome = await Promise.race([qemuExit, exited(backend!).then((how) => ({ who: 'backend' as const, how })), timeout]);
      if (outcome.who !== 'backend' || restarts-- <= 0 || qemu.exitCode !== null) break;
      debug('backend %s: starting another', outcome.how);
      const p = await launchBackend();
      o.onBackendRestarted?.(p.pid!);
    }
    clearTimeout(timer);
    const report = parseReport(fs.existsSync(resultFile) ? fs.readFileSync(resultFile, 'utf8') : '');
    const result: VmResult = { ...report, console: consoleText, wallMs: Date.now() - t0, bootMs };
    if (outcome.who === 'backend')
      throw new VmError('backend', `the backend died during the run (${outcome.how}):\n${tail(beErr)}`, consoleText);
    if (outcome.who === 'timeout')
      throw new VmError('timeout', `guest did not finish within ${timeoutMs / 1000} s; console tail:\n${tail(consoleText)}`, consoleText);
    if (!report.complete) {
      const why = qemuErr.trim() ? `:\n${tail(qemuErr)}` : '';
      throw new VmError('qemu', `QEMU ${outcome.how} before the guest reported a result${why}\nconsole tail:\n${tail(consoleText)}`, consoleText);
    }
    return result;
  } finally {
    await Promise.all([stop(qemu), stop(backend)]);
    fs.rmSync(dir, { recursive: true, force: true });
  }
}
