// What a user sees of a running backend: its log lines per VM event and
// `qcuda status` (the status socket), against the real qcuda-backend program
// driven by the test frontend (which plays QEMU and the guest driver).
import test, { type ExecutionContext } from 'ava';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { BackendStatus } from '../../backend/src/cli/status';
import type { QcudaStatus } from '../../backend/src/qcuda/status';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { tmpDir, until, KEEP_ROOT } from '../helpers';
import { QcudaClient } from '../qcuda/client';
import { ShareTable } from '../../backend/src/qcuda/share/table';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const MIB = 1 << 20;

/** A qcuda-backend (on the emu provider unless args name one) serving sock, its stderr gathered in .log; killed when the test ends. */
function startBackend(t: ExecutionContext, sock: string, args: string[], env = process.env): { p: ChildProcess; log: string } {
  const provider = args.some((a) => a.startsWith('--provider=')) ? [] : ['--provider=emu'];
  const p = spawn(process.execPath, [BACKEND, `--socket-path=${sock}`, '--device=qcuda', ...provider, ...KEEP_ROOT, ...args], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env,
  });
  t.teardown(() => p.kill('SIGKILL'));
  const b = { p, log: '' };
  p.stderr!.on('data', (d: Buffer) => (b.log += d.toString()));
  return b;
}

function qcudaStatus(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(process.execPath, [QCUDA, 'status', ...args], { encoding: 'utf8', timeout: 20_000 });
}

test('qcuda status shows sessions, device memory against the quota and calls served; the backend logs each VM event', async (t) => {
  const sock = path.join(tmpDir(t), 'vm1.sock');
  const b = startBackend(t, sock, ['--queues=2', '--device-memory-limit=64M']);
  const { p } = b;
  t.true(await until(() => fs.existsSync(`${sock}.status`), 10_000), b.log);
  t.is(fs.statSync(`${sock}.status`).mode & 0o777, 0o600, "the status socket is its user's alone");

  // Before any frontend.
  const idle = JSON.parse(qcudaStatus(`--socket=${sock}`, '--json').stdout) as BackendStatus;
  t.is(idle.pid, p.pid!);
  t.false(idle.frontend.connected);
  t.deepEqual((idle.status as QcudaStatus).served, [0, 0]);
  t.is(idle.gpuShare, undefined, 'no GPU share without --gpu-share');

  const fe = Frontend.connect(sock, new GuestMemory([{ gpa: 0n, size: 64 * MIB }]));
  t.teardown(() => void (fe.closed || fe.close()));
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe);
  const id = await c.open();
  t.is((await c.malloc(3 * MIB)).status, 0);
  t.is((await c.malloc(MIB)).status, 0);

  const r = qcudaStatus(`--socket=${sock}`, '--json');
  t.is(r.status, 0, r.stderr);
  const doc = JSON.parse(r.stdout) as BackendStatus;
  const q = doc.status as QcudaStatus;
  t.true(doc.frontend.connected);
  t.deepEqual(doc.frontend.memory, [{ gpa: 0, size: 64 * MIB }]);
  t.is(q.device, 'qcuda');
  t.is(q.provider, 'emu');
  t.deepEqual(q.deviceMemory, { used: 4 * MIB, quota: 64 * MIB, disks: 0 });
  t.is(
    q.served.reduce((a, b) => a + b, 0),
    4,
    'SESSION_OPEN, HELLO and two MALLOCs',
  );
  t.is(q.sessions.length, 1);
  t.like(q.sessions[0], { id: id.toString(16), calls: 3, deviceMemory: 4 * MIB, context: true });

  // The same as a person reads it.
  const table = qcudaStatus(`--socket=${sock}`);
  t.is(table.status, 0, table.stderr);
  t.regex(table.stdout, new RegExp(`^qcuda-backend pid ${p.pid}, up \\d+s, qcuda device on ${sock}$`, 'm'));
  t.regex(table.stdout, /^frontend: connected, guest memory 64 MiB in 1 region$/m);
  t.regex(table.stdout, /^device memory: 4 MiB used of a 64 MiB quota \(6\.3%\)$/m);
  t.regex(table.stdout, /^calls served: 4 \(queue 0: 2, queue 1: 2\)$/m);
  t.regex(table.stdout, new RegExp(`^  ${id.toString(16)}\\s+3\\s+4 MiB\\s+yes\\s+0\\s+0\\s+0$`, 'm'));

  t.is((await c.close()).status, 0);
  fe.close();
  t.true(await until(() => /frontend disconnected/.test(b.log), 5000), b.log);
  const after = JSON.parse(qcudaStatus(`--status-socket=${sock}.status`, '--json').stdout) as BackendStatus;
  t.false(after.frontend.connected);
  t.deepEqual((after.status as QcudaStatus).sessions, []);
  t.deepEqual((after.status as QcudaStatus).deviceMemory, { used: 0, quota: 64 * MIB, disks: 0 });

  // One line per event, in order, each naming the VM's device.
  const lines = b.log.split('\n').filter((l) => /vhost-user: qcuda|session/.test(l));
  t.deepEqual(lines, [
    'qcuda-backend: vhost-user: qcuda: frontend connected',
    'qcuda-backend: vhost-user: qcuda: memory table: 1 region, 64 MiB: 0x0+64 MiB',
    `qcuda-backend: qcuda: session ${id.toString(16)} opened (1 open)`,
    `qcuda-backend: qcuda: session ${id.toString(16)} closed after 3 calls, 4 MiB device memory, a context (0 open)`,
    'qcuda-backend: vhost-user: qcuda: frontend disconnected',
  ]);

  const gone = new Promise<number | null>((res) => p.once('exit', (code) => res(code)));
  p.kill('SIGTERM');
  t.is(await gone, 0);
  t.false(fs.existsSync(`${sock}.status`), 'the status socket is removed on exit');
  const none = qcudaStatus(`--socket=${sock}`);
  t.is(none.status, 1);
  t.regex(none.stderr, /no status from .*vm1\.sock\.status/);
});

test("--provider=host, emu's old name, reaches the emu provider as --provider=emu does", async (t) => {
  for (const given of ['emu', 'host']) {
    const sock = path.join(tmpDir(t), `${given}.sock`);
    const b = startBackend(t, sock, [`--provider=${given}`, '--queues=1']);
    // The log line that names the provider comes before the status socket.
    t.true(await until(() => fs.existsSync(`${sock}.status`) && b.log.includes('qcuda device listening'), 10_000), b.log);
    t.regex(b.log, /^qcuda-backend: emu provider: device memory in host RAM, no GPU$/m, `--provider=${given}`);
    const r = qcudaStatus(`--socket=${sock}`, '--json');
    t.is(r.status, 0, r.stderr);
    t.is(((JSON.parse(r.stdout) as BackendStatus).status as QcudaStatus).provider, 'emu', `--provider=${given}`);
  }
});

test('the VM event log is rate-limited: a flood of sessions cannot flood the journal', async (t) => {
  const sock = path.join(tmpDir(t), 'vm2.sock');
  const b = startBackend(t, sock, ['--queues=1', '--log-rate=5', '--status-socket=none']);
  t.true(await until(() => fs.existsSync(sock), 10_000), b.log);
  t.false(fs.existsSync(`${sock}.status`), '--status-socket=none');
  const fe = Frontend.connect(sock);
  t.teardown(() => void (fe.closed || fe.close()));
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe);
  const t0 = Date.now();
  for (let i = 0; i < 50; i++) {
    await c.open();
    await c.close();
  }
  // The flood's own length bounds what may pass (5 a second): on a loaded machine it takes seconds.
  const seconds = Math.ceil((Date.now() - t0) / 1000) + 1;
  await new Promise((r) => setTimeout(r, 1100));
  await c.open(); // the next line let through reports the count
  t.true(await until(() => /log lines dropped/.test(b.log), 5000), b.log);
  const sessionLines = b.log.split('\n').filter((l) => /session \w+ (opened|closed)/.test(l)).length;
  t.true(
    sessionLines <= 5 * (seconds + 1) && sessionLines < 101,
    `${sessionLines} session lines for 101 events in ${seconds} s at 5 a second`,
  );
  t.regex(b.log, /\(\d+ log lines dropped: more than 5 a second\)/);
});

test("qcuda status shows the VM's GPU share: its weight, its part of the GPU time the VMs used, the part its weight asks for", async (t) => {
  const dir = tmpDir(t);
  const env = { ...process.env, QCUDA_GPU_SHARE_TABLE: path.join(dir, 'table') };
  const a = startBackend(t, path.join(dir, 'a.sock'), ['--queues=1', '--gpu-share=1'], env);
  const b = startBackend(t, path.join(dir, 'b.sock'), ['--queues=1', '--gpu-share=3'], env);
  t.true(
    await until(() => fs.existsSync(path.join(dir, 'a.sock.status')) && fs.existsSync(path.join(dir, 'b.sock.status')), 10_000),
    a.log + b.log,
  );
  const doc = (vm: string): BackendStatus => JSON.parse(qcudaStatus(`--socket=${path.join(dir, vm)}`, '--json').stdout) as BackendStatus;

  // The emu provider runs no kernels: nothing used yet.
  t.like(doc('a.sock').gpuShare, { weight: 1, share: 0, target: 0.25, vms: 2, usedNs: 0, totalNs: 0 });
  t.like(doc('b.sock').gpuShare, { weight: 3, share: 0, target: 0.75, vms: 2 });

  // GPU time charged as the gates charge it: A used 3 ms, B 1 ms.
  const table = ShareTable.open(env.QCUDA_GPU_SHARE_TABLE);
  t.teardown(() => table.close());
  const slot = (p: ChildProcess): number => table.report().find((v) => v.pid === p.pid)!.slot;
  table.addUsage(slot(a.p), 3e6);
  table.addUsage(slot(b.p), 1e6);
  t.like(doc('a.sock').gpuShare, { share: 0.75, target: 0.25, usedNs: 3e6, totalNs: 4e6 });
  const r = qcudaStatus(`--socket=${path.join(dir, 'a.sock')}`);
  t.is(r.status, 0, r.stderr);
  t.regex(r.stdout, /^GPU share: weight 1, 75% of GPU time over \d+ s \(target 25%\), 2 VMs$/m);
  t.regex(
    qcudaStatus(`--socket=${path.join(dir, 'b.sock')}`).stdout,
    /^GPU share: weight 3, 25% of GPU time over \d+ s \(target 75%\), 2 VMs$/m,
  );

  // B gone: A alone in the table.
  const gone = new Promise((res) => b.p.once('exit', res));
  b.p.kill('SIGTERM');
  await gone;
  t.like(doc('a.sock').gpuShare, { share: 1, target: 1, vms: 1 });
  t.regex(
    qcudaStatus(`--socket=${path.join(dir, 'a.sock')}`).stdout,
    /^GPU share: weight 1, 100% of GPU time over \d+ s \(target 100%\), 1 VM$/m,
  );
});
