// qcuda-backend --restart-state as systemctl restart drives it: a backend
// serving a guest process (the test frontend and client) gets SIGTERM,
// writes the state (mode 0600) and exits 0; the next one on the socket reads
// the file, removes it, and serves the process on once the "QEMU"
// reconnects. A corrupted file is refused in one line and set aside, the
// backend starts empty and the old session's calls get NO_SESSION. A
// provider that cannot carry its sessions is refused at start. Every
// backend is stopped by the test (by its pid).
import test, { type ExecutionContext } from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Status } from '../../backend/src/qcuda/proto';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { KEEP_ROOT, tmpDir, until } from '../helpers';
import { QcudaClient } from '../qcuda/client';

const BACKEND = path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js');

interface Backend {
  p: ChildProcess;
  log: () => string;
  exit: Promise<number | null>;
}

function backend(t: ExecutionContext, sock: string, file: string, extra: string[] = []): Backend {
  const p = spawn(
    process.execPath,
    [
      BACKEND,
      `--socket-path=${sock}`,
      '--status-socket=none',
      '--provider=emu',
      '--queues=2',
      `--restart-state=${file}`,
      ...extra,
      ...KEEP_ROOT,
    ],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  t.teardown(() => p.kill('SIGKILL'));
  let log = '';
  p.stderr!.on('data', (d: Buffer) => (log += d.toString()));
  const exit = new Promise<number | null>((r) => p.once('exit', (code) => r(code)));
  return { p, log: () => log, exit };
}

async function listening(t: ExecutionContext, b: Backend): Promise<void> {
  t.true(await until(() => /device listening on/.test(b.log()), 20_000), b.log());
}

const pattern = (n: number) => Uint8Array.from({ length: n }, (_, i) => (i * 13 + 1) & 0xff);

/** A guest process on a backend: a session, 64 KiB allocated and filled. */
async function guest(t: ExecutionContext, sock: string): Promise<{ fe: Frontend; c: QcudaClient; ptr: bigint }> {
  const fe = Frontend.connect(sock, new GuestMemory());
  t.teardown(() => {
    fe.close(); // also when a backend closed it: its rings' fds and memory are the test's
  });
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe, 2, 8);
  await c.open();
  const ptr = (await c.malloc(65536)).value;
  const gpa = fe.mem.alloc(65536, 16);
  fe.mem.bytes(gpa, 65536).set(pattern(65536));
  t.is(await c.htod(ptr, gpa, 65536), 0);
  return { fe, c, ptr };
}

async function readBack(g: { fe: Frontend; c: QcudaClient; ptr: bigint }): Promise<{ status: number; same: boolean }> {
  const gpa = g.fe.mem.alloc(65536, 16);
  const status = await g.c.dtoh(gpa, g.ptr, 65536);
  return { status, same: Buffer.from(g.fe.mem.bytes(gpa, 65536)).equals(pattern(65536)) };
}

test.serial('SIGTERM saves the state (0600) and exits 0; the next backend restores it and the process goes on', async (t) => {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'vm.sock');
  const file = path.join(dir, 'vm.state');
  const first = backend(t, sock, file);
  await listening(t, first);
  t.regex(first.log(), /restart state: none in .*vm\.state: the device starts empty/);
  const g = await guest(t, sock);
  first.p.kill('SIGTERM'); // what systemctl restart sends
  t.is(await first.exit, 0, first.log());
  t.regex(first.log(), /stopping for a restart: no more requests taken/);
  t.regex(first.log(), /restart state saved to .*vm\.state: \d+ bytes of device state, rings at 0@\d+ 1@\d+/);
  t.is(fs.statSync(file).mode & 0o777, 0o600);
  t.true(await until(() => g.fe.closed));

  const late = readBack(g); // made while no backend is there
  const second = backend(t, sock, file);
  await listening(t, second);
  t.regex(second.log(), /restart state: .*vm\.state read \(\d+ bytes of qcuda state saved at .* by pid \d+\) and removed/);
  t.false(fs.existsSync(file), 'removed: a crash of this backend does not bring it back');
  await g.fe.reconnect(sock);
  t.deepEqual(await late, { status: 0, same: true }, 'the bytes, by the same pointer and session');
  t.true(await until(() => /restored the state saved at/.test(second.log())), second.log());
  t.is((await g.c.free(g.ptr)).status, 0);
  second.p.kill('SIGTERM');
  t.is(await second.exit, 0);
  t.true(fs.existsSync(file), 'the second stop saved too');
});

test.serial('a corrupted file: refused in one line, set aside, the backend starts empty and the old session gets NO_SESSION', async (t) => {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'vm.sock');
  const file = path.join(dir, 'vm.state');
  const first = backend(t, sock, file);
  await listening(t, first);
  const g = await guest(t, sock);
  first.p.kill('SIGTERM');
  t.is(await first.exit, 0, first.log());
  const bytes = fs.readFileSync(file);
  bytes[bytes.length - 40] ^= 0x01;
  fs.writeFileSync(file, bytes, { mode: 0o600 });
  const late = readBack(g);
  const second = backend(t, sock, file);
  await listening(t, second);
  t.regex(
    second.log(),
    /restart state refused, the device starts empty \(the guest's old sessions get errors\): .*crc32 mismatch.*; kept as .*vm\.state\.refused/,
  );
  t.false(fs.existsSync(file));
  t.true(fs.existsSync(`${file}.refused`));
  await g.fe.reconnect(sock);
  t.is((await late).status, Status.NO_SESSION, 'an error, not a hang');
  second.p.kill('SIGTERM');
  t.is(await second.exit, 0);
});

test.serial('a provider whose sessions cannot be carried is refused at start, with the reason', async (t) => {
  const dir = tmpDir(t);
  const b = backend(t, path.join(dir, 'vm.sock'), path.join(dir, 'vm.state'), ['--own-queues=yes']);
  t.is(await b.exit, 2, b.log());
  t.regex(
    b.log(),
    /--restart-state: this backend's sessions cannot be saved \(emu provider with --own-queues=yes; only the emu provider's, served here, are carried yet\)/,
  );
  t.false(fs.existsSync(path.join(dir, 'vm.sock')));
});
