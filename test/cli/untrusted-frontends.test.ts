// A backend shared by several frontends (qcuda-backend --frontends, as
// qcuda run's programs use it) against one hostile frontend (security
// review 3, N5): one that makes its call eventfd blocking with a full
// counter, or that hands over guest RAM it can cut short (an unsealed
// memfd), is dropped with the reason logged, and another frontend's calls
// are still answered.
import test, { type ExecutionContext } from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEP_ROOT } from '../helpers';
import { native } from '../../backend/src/vhost-user/platform/native';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { QcudaClient, sessionAt } from '../qcuda/client';

const BACKEND = path.join(__dirname, '../../backend/src/cli/backend.js');
const tick = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const within = <T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> => Promise.race([p, tick(ms).then(() => 'timeout' as const)]);

async function until(f: () => boolean, ms: number): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; await tick(20)) if (f()) return true;
  return f();
}

/** A backend serving up to 4 frontends (emu provider), and a victim frontend with a session open. */
async function sharedBackend(t: ExecutionContext) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-untrusted-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const sock = path.join(dir, 'qcuda.sock');
  const be = spawn(
    process.execPath,
    [BACKEND, `--socket-path=${sock}`, '--status-socket=none', '--frontends=4', '--provider=emu', ...KEEP_ROOT],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  t.teardown(() => be.kill('SIGKILL'));
  let log = '';
  be.stderr.on('data', (b: Buffer) => (log += b.toString()));
  while (!/listening on/.test(log)) {
    if (be.exitCode !== null) throw new Error(log);
    await tick(20);
  }
  const v = await sessionAt(t, sock);
  t.is((await v.malloc(4096)).status, 0, 'the victim is served');
  return { be, sock, v, log: () => log };
}

test('a frontend that makes its call eventfd blocking with a full counter is dropped; the other frontend is still answered', async (t) => {
  const { be, sock, v, log } = await sharedBackend(t);
  const fe = Frontend.connect(sock, new GuestMemory());
  t.teardown(() => fe.close());
  await fe.negotiate();
  await fe.start({ size: 64 });
  const a = new QcudaClient(fe, 1, 8);
  await a.open();
  // Queue 0's call eventfd: O_NONBLOCK cleared (its file description is the backend's too) and the counter at its most.
  const callFd = fe.queues[0].call.value;
  fe.queues[0].call.unwatch(); // this process must not drain it
  const py = spawnSync(
    'python3',
    [
      '-c',
      'import fcntl, os\n' +
        'fcntl.fcntl(3, fcntl.F_SETFL, fcntl.fcntl(3, fcntl.F_GETFL) & ~os.O_NONBLOCK)\n' +
        "os.write(3, (0xfffffffffffffffe).to_bytes(8, 'little'))\n",
    ],
    { stdio: ['ignore', 'inherit', 'inherit', callFd] },
  );
  t.is(py.status, 0, 'the attacker set its eventfd up');
  // One request on queue 0: its answer's interrupt is the write that blocked the backend for good.
  void a.call(1, { queue: 0 }).catch(() => undefined);
  const r = await within(v.malloc(4096), 5000);
  t.not(r, 'timeout', 'the shared backend answered the victim');
  if (r !== 'timeout') t.is(r.status, 0);
  t.true(await until(() => fe.closed, 5000), "the attacker's connection is closed");
  const why = /connection closed: vring 0: the frontend made its call eventfd blocking/;
  t.true(await until(() => why.test(log()), 5000), `the reason is logged: ${log()}`);
  t.is(be.exitCode, null, 'the backend runs');
});

test('a frontend whose guest RAM is a memfd it can cut short is refused at its memory table and dropped; the other frontend is still answered', async (t) => {
  const { be, sock, v, log } = await sharedBackend(t);
  // The attacker's guest RAM: a memfd with no seals (the test frontend seals its own; a program need not).
  const seal = native.addSeals;
  native.addSeals = () => undefined;
  let mem: GuestMemory;
  try {
    mem = new GuestMemory();
  } finally {
    native.addSeals = seal;
  }
  const fe = Frontend.connect(sock, mem);
  t.teardown(() => fe.close());
  await fe.negotiate();
  const started = await within(
    fe.start({ size: 64 }).then(
      () => 'started',
      (e: Error) => e.message,
    ),
    5000,
  );
  t.regex(String(started), /backend closed the connection instead of answering SET_MEM_TABLE/);
  // What it would then do: cut the file to 0 bytes and kick.
  fs.ftruncateSync(mem.fd.value, 0);
  t.true(await until(() => fe.closed, 5000), "the attacker's connection is closed");
  const why = /connection closed: region gpa 0x0: its fd is not a memfd sealed against shrinking/;
  t.true(await until(() => why.test(log()), 5000), `the reason is logged: ${log()}`);
  const r = await within(v.malloc(4096), 5000);
  t.not(r, 'timeout', 'the shared backend answered the victim');
  if (r !== 'timeout') t.is(r.status, 0);
  t.is(be.exitCode, null, 'the backend runs');
});
