// The other processes of escape.test.ts (security review 3, N1, N2):
//  - "attack PROBE SANDBOX PID...": another VM's backend (SANDBOX 0) or a
//    compromised worker of it (SANDBOX 1: the worker's own filter) of the
//    same user, trying each PID (the victim VM's backend and worker) with
//    fixtures/escape_probe.c; prints what each call returned (-errno).
//  - "tty PROBE": a process under the worker's filter, in the terminal of
//    whoever started it: TIOCSTI and TIOCLINUX on /dev/tty.
//  - "isolated": starts a worker as the backend does and prints the
//    session and terminal (/proc/PID/stat) of this process and of it.
import fs from 'node:fs';
import { native } from '../../backend/src/sys/native';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';

interface Probe {
  openMem(pid: number): number;
  pidfdGetfd(pid: number, fd: number): number;
  pidfdOpen(pid: number): number;
  ioUringSetup(): number;
  kill(pid: number, sig: number): number;
  tgkill(pid: number, sig: number): number;
  kcmp(pid: number): number;
  processMadvise(): number;
  terminalIoctl(which: number): number;
}

/** Session, terminal and process group of pid (/proc/PID/stat fields 5-7). */
function sessionOf(pid: number): { pgrp: number; session: number; tty: number } {
  const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { pgrp: +f[2], session: +f[3], tty: +f[4] };
}

async function main(): Promise<void> {
  const [what, probePath, ...rest] = process.argv.slice(2);
  if (what === 'isolated') {
    const p = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } });
    await p.openContext(0);
    const worker = p.workerPids[0];
    process.stdout.write(`${JSON.stringify({ self: sessionOf(process.pid), worker: { pid: worker, ...sessionOf(worker) } })}\n`);
    await p.close();
    return;
  }
  const probe = require(probePath) as Probe;
  if (what === 'tty') {
    native.sandboxWorker();
    process.stdout.write(`${JSON.stringify({ tiocsti: probe.terminalIoctl(0), tioclinux: probe.terminalIoctl(1) })}\n`);
    return;
  }
  const [sandboxed, ...pids] = rest.map(Number);
  if (sandboxed) native.sandboxWorker();
  const out = pids.map((pid) => ({
    pid,
    openMem: probe.openMem(pid),
    // Every fd it may hold (guest RAM's memfds among them): none may come here.
    getfd: [...new Set(Array.from({ length: 64 }, (_, fd) => probe.pidfdGetfd(pid, fd)))],
    pidfdOpen: probe.pidfdOpen(pid),
    kcmp: probe.kcmp(pid),
    // SIGTERM: only where a worker's filter is to refuse it (another VM's backend may signal its user's processes).
    ...(sandboxed ? { kill: probe.kill(pid, 15), tgkill: probe.tgkill(pid, 15) } : {}),
  }));
  process.stdout.write(
    `${JSON.stringify({
      uid: process.getuid!(),
      victims: out,
      ioUring: probe.ioUringSetup(),
      processMadvise: probe.processMadvise(),
      killSelf0: probe.kill(process.pid, 0),
    })}\n`,
  );
}

main().catch((e: Error) => {
  process.stderr.write(`${e.stack}\n`);
  process.exit(1);
});
