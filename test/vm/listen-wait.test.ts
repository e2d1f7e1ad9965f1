// A backend slow to listen (a loaded host) is waited for; one that exits
// first fails the run at once with its status and stderr. No guest: QEMU is
// /bin/false, so a run whose backend was waited for ends as QEMU's failure.
import test from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { waitForListen } from '../../backend/src/vm/listen-wait';
import { runVm, VmError, type VmOptions } from '../../backend/src/vm/runner';
import { tmpDir } from '../helpers';

function stubBoot(t: import('ava').ExecutionContext): Pick<VmOptions, 'qemu' | 'kernel' | 'initrd'> {
  const dir = tmpDir(t);
  fs.writeFileSync(path.join(dir, 'kernel'), '');
  fs.writeFileSync(path.join(dir, 'initrd'), '');
  return { qemu: '/bin/false', kernel: path.join(dir, 'kernel'), initrd: path.join(dir, 'initrd') };
}

test.serial('a backend that listens only after 12 s is waited for, and the wait is said once', async (t) => {
  // Every node the run starts (only the backend: QEMU is /bin/false) first sleeps 12 s.
  const slow = path.join(tmpDir(t), 'slow.js');
  fs.writeFileSync(slow, 'Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 12000);\n');
  const saved = process.env.NODE_OPTIONS;
  process.env.NODE_OPTIONS = `--require ${slow}`;
  const lines: string[] = [];
  const t0 = Date.now();
  try {
    const e = await t.throwsAsync(
      runVm({ ...stubBoot(t), command: 'true', backendArgs: ['--provider=emu'], onWaiting: (l) => lines.push(l) }),
      { instanceOf: VmError },
    );
    t.is(e!.side, 'qemu', e!.message);
  } finally {
    if (saved === undefined) delete process.env.NODE_OPTIONS;
    else process.env.NODE_OPTIONS = saved;
  }
  t.true(Date.now() - t0 >= 12_000);
  t.is(lines.length, 1, lines.join('\n'));
  t.regex(lines[0], /^waiting for the backend to listen on \/\S+\/vhost\.sock \(\d+ s\)$/);
});

test.serial('a backend that exits before listening fails the run at once with its status and stderr', async (t) => {
  const t0 = Date.now();
  const e = await t.throwsAsync(runVm({ ...stubBoot(t), command: 'true', backendArgs: ['--queues=0'] }), { instanceOf: VmError });
  t.is(e!.side, 'backend');
  t.regex(e!.message, /^the backend exited with status 2 before listening:\nqcuda-backend: --queues must be an integer in 1\.\.64/);
  t.true(Date.now() - t0 < 10_000, `${Date.now() - t0} ms`);
});

test('a process that stays alive without listening fails at the bound, naming the socket and its stderr', async (t) => {
  const sock = path.join(tmpDir(t), 'never.sock');
  const p = spawn(process.execPath, ['-e', 'console.error("still loading"); setTimeout(() => {}, 60000)'], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  t.teardown(() => p.kill('SIGKILL'));
  let err = '';
  p.stderr!.on('data', (d: Buffer) => (err += d.toString()));
  const e = await t.throwsAsync(waitForListen(p, { name: 'backend', sock, stderr: () => err, limitMs: 2000 }));
  t.is(e!.message, `the backend is running but did not create ${sock} within 2 s; its stderr:\nstill loading`);
  t.is(p.exitCode, null, 'the caller stops it, not the wait');
});
