// qcuda vm's migration plumbing against real QEMUs (TCG) with the qcuda
// device (qemu-patches/0003): QMP monitors, `qcuda migrate`, --save,
// --incoming. Every QEMU and backend is runVm's, ended by it (by pid) when
// the run ends, each run under a timeout.
import test from 'ava';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { runVm } from '../../backend/src/vm/runner';
import { Qmp, waitForMigration } from '../../backend/src/vm/qmp';
import { tmpDir } from '../helpers';
import { base, onMark } from './helpers';

/**
 * Tests of a backend whose device offers no state: the emu provider with a
 * worker process per guest process (--own-queues=yes), whose sessions are
 * not carried yet, so QEMU refuses the migration at its start.
 */
const withoutState = test.serial;

const QCUDA = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'qcuda.js');
const emu = { ...base, backendArgs: ['--provider=emu'], timeoutMs: 240_000 };
/** A backend whose device offers no state (above). */
const stateless = { ...emu, backendArgs: ['--provider=emu', '--own-queues=yes'] };
/** The guest says it is up, then waits (guest time: it stands still while the VM is stopped). */
const READY = 'qcuda-ready';

/** Runs `qcuda migrate`, killed (by pid) after timeoutMs. */
function qcudaMigrate(monitor: string, to: string, timeoutMs = 120_000): Promise<{ code: number | null; stderr: string }> {
  const p = spawn(process.execPath, [QCUDA, 'migrate', `--monitor=${monitor}`, `--to=${to}`], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
  return new Promise((resolve) =>
    p.once('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stderr });
    }),
  );
}

/** Calls act(monitor) once the guest printed READY on its console. */
const whenReady = (act: (monitor: string) => Promise<void>) => onMark(READY, act);

withoutState('a back-end without the device state: qcuda migrate fails at setup, says why, and the source VM runs on', async (t) => {
  const dir = tmpDir(t);
  const file = path.join(dir, 'vm.state');
  let out: { code: number | null; stderr: string } | undefined;
  const w = whenReady(async (monitor) => {
    out = await qcudaMigrate(monitor, `file:${file}`);
  });
  const r = await runVm({ ...stateless, ...w, command: `echo ${READY}; sleep 3; memcpy` });
  await w.done;
  t.is(out!.code, 1, out!.stderr);
  t.regex(out!.stderr, /its back-end does not support migration \(no VHOST_USER_PROTOCOL_F_DEVICE_STATE\); the VM goes on running here/);
  t.falsy(r.migrated);
  t.is(r.exit, 0, r.stderr);
  t.regex(r.stdout, /PASS: memcpy/, 'the CUDA program after the failed migration passed on the source');
});

test.serial('a running VM is not migrated behind its back: QEMU refuses a migrate without stop, the guest goes on', async (t) => {
  let err: string | undefined;
  const w = whenReady(async (monitor) => {
    const q = await Qmp.connect(monitor);
    try {
      await q.execute('migrate', { uri: 'exec:cat >/dev/null' });
      const info = await waitForMigration(q, 60_000);
      err = info['error-desc'] ?? info.status;
    } catch (e) {
      err = (e as Error).message;
    } finally {
      q.close();
    }
  });
  const r = await runVm({ ...emu, ...w, command: `echo ${READY}; sleep 3; memcpy` });
  await w.done;
  t.regex(err ?? '', /migrates only a stopped VM/);
  t.is(r.exit, 0, r.stderr);
  t.regex(r.stdout, /PASS: memcpy/);
});

withoutState('--save on a signal, a back-end without the device state: a failed save leaves the VM running and says why', async (t) => {
  const dir = tmpDir(t);
  const file = path.join(dir, 'vm.state');
  const lines: string[] = [];
  const w = whenReady(async () => {
    process.kill(process.pid, 'SIGUSR2');
    await new Promise((r) => setTimeout(r, 10));
  });
  const r = await runVm({
    ...stateless,
    ...w,
    saveFile: file,
    onMigration: (l) => lines.push(l),
    command: `echo ${READY}; sleep 3; memcpy`,
  });
  await w.done;
  t.true(
    lines.some((l) => l.startsWith(`saving the VM to ${file} failed:`) && /does not support migration/.test(l)),
    lines.join('\n'),
  );
  t.is(r.exit, 0);
  t.regex(r.stdout, /PASS: memcpy/);
});
