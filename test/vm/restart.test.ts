// A backend restart under a running guest program (qcuda-backend
// --restart-state, emu provider): memcpy, mid-run with its device memory
// allocated and filled, sees its backend stopped with SIGTERM (what
// systemctl restart sends) and a new one started on the socket; QEMU
// reconnects (reconnect-ms) and the program finishes with the output of a
// run never restarted. A crash (SIGKILL) keeps nothing: the program's next
// calls get errors from the new backend, and it ends, not hangs. Every
// QEMU and backend is runVm's, ended by it (by pid), each run under a
// timeout.
import test from 'ava';
import path from 'node:path';
import { runVm, type StartedInfo, type VmOptions } from '../../backend/src/vm/runner';
import { tmpDir } from '../helpers';
import { base } from './helpers';

const emu = { ...base, backendArgs: ['--provider=emu'], timeoutMs: 300_000 };
/** memcpy prints this after its first round trips: the program is mid-run, its memory allocated and filled. */
const MID = 'round trips of 7 bytes';
const PROGRAM = 'memcpy';

let unrestarted: string;

test.serial.before(async () => {
  const r = await runVm({ ...emu, command: PROGRAM });
  if (r.exit !== 0) throw new Error(`${PROGRAM} failed:\n${r.stdout}${r.stderr}`);
  unrestarted = r.stdout;
});

/** Sends signal to the backend once the console shows MID; the run starts one more backend when it exits. */
function restartAtMid(signal: NodeJS.Signals): Pick<
  VmOptions,
  'onStarted' | 'onConsole' | 'onBackendRestarted' | 'onBackendLog' | 'restartBackend'
> & {
  restarted: number[];
  log: () => string;
  sent: () => boolean;
  /** Milliseconds from the signal to the new backend's "restored" line (undefined: none came). */
  restoredMs: () => number | undefined;
} {
  let info: StartedInfo | undefined;
  let seen = '';
  let sent = false;
  let log = '';
  let sentAt = 0;
  let restoredAt: number | undefined;
  const restarted: number[] = [];
  return {
    restartBackend: 1,
    onStarted: (i) => (info = i),
    onBackendRestarted: (pid) => restarted.push(pid),
    onBackendLog: (s) => {
      log += s;
      if (restoredAt === undefined && /restored the state saved at/.test(s)) restoredAt = Date.now();
    },
    onConsole: (s) => {
      seen += s;
      if (sent || !info || !seen.includes(MID)) return;
      sent = true;
      sentAt = Date.now();
      process.kill(info.backendPid, signal);
    },
    restarted,
    log: () => log,
    sent: () => sent,
    restoredMs: () => (restoredAt === undefined ? undefined : restoredAt - sentAt),
  };
}

test.serial('a graceful restart mid-run: the program finishes with the output of a run never restarted', async (t) => {
  const file = path.join(tmpDir(t), 'vm.state');
  const w = restartAtMid('SIGTERM');
  const r = await runVm({ ...emu, ...w, backendArgs: [...emu.backendArgs, `--restart-state=${file}`], command: PROGRAM });
  t.true(w.sent(), 'the backend was stopped mid-run');
  t.is(w.restarted.length, 1, 'a second backend was started');
  t.is(r.exit, 0, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}\nbackends:\n${w.log()}`);
  t.is(r.stdout, unrestarted, 'the same output as a run never restarted');
  const log = w.log();
  t.regex(log, /restart state saved to .*vm\.state: \d+ bytes of device state/, log);
  t.regex(log, /restart state: .*vm\.state read \(\d+ bytes of qcuda state saved at .*\) and removed/);
  t.regex(log, /restored the state saved at/);
  t.notRegex(log, /restart state refused|restart state not saved/);
  t.log(`from SIGTERM to the state restored in the new backend: ${w.restoredMs()} ms; ${/restored the state saved at .*/.exec(log)?.[0]}`);
});

test.serial('a crash mid-run keeps nothing: the program gets errors from the new backend and ends', async (t) => {
  const file = path.join(tmpDir(t), 'vm.state');
  const w = restartAtMid('SIGKILL');
  const t0 = Date.now();
  const r = await runVm({ ...emu, ...w, backendArgs: [...emu.backendArgs, `--restart-state=${file}`], command: PROGRAM });
  t.true(w.sent());
  t.is(w.restarted.length, 1);
  t.not(r.exit, 0, 'the program failed');
  t.regex(r.stdout + r.stderr, /the backend has no session for this process/, `stdout:\n${r.stdout}\nstderr:\n${r.stderr}`);
  t.regex(w.log(), /restart state: none in .*vm\.state: the device starts empty/);
  t.true(Date.now() - t0 < emu.timeoutMs - 60_000, 'it ended, well before the timeout');
});
