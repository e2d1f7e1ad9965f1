// A backend restart that keeps a guest's CUDA state (qcuda-backend
// --restart-state; restart-state.ts), on the emu provider: a guest process
// with allocations, their bytes, a stream and a parked CALLBACK_WAIT; the
// backend stops for a restart (the wait answered "wait again", the state
// saved), a new device loads it when the "QEMU" reconnects, and the process
// goes on with the same handles and bytes. What is not kept fails cleanly:
// a host function not yet run (nothing saved, said at once), a state over
// the new backend's quota and a new backend without the file (the old
// session's calls get NO_SESSION, none hangs).
import test, { type ExecutionContext } from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';
import { emuState } from '../../backend/src/qcuda/migration';
import { Cmd, Status } from '../../backend/src/qcuda/proto';
import { RestartSlot, RestartState, VhostUserServer } from '../../backend/src/vhost-user';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { tmpDir, until } from '../helpers';
import { QcudaClient } from './client';

interface Served {
  server: VhostUserServer;
  dev: QcudaDevice;
}

interface Rig {
  sock: string;
  file: string;
  fe: Frontend;
  c: QcudaClient;
  logged: string[];
  /** The backend the process started on. */
  first: Served;
  /** A backend on the same socket (the restarted one). */
  serve(o?: { memoryLimit?: bigint; restart?: RestartSlot }): Served;
}

async function rig(t: ExecutionContext): Promise<Rig> {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'vhost.sock');
  const logged: string[] = [];
  const servers: VhostUserServer[] = [];
  const serve: Rig['serve'] = (o = {}) => {
    const dev = new QcudaDevice({
      provider: emuProvider,
      queues: 2,
      state: emuState,
      memoryLimit: o.memoryLimit,
      log: (l) => logged.push(l),
    });
    const server = VhostUserServer.listen(sock, dev, {
      logger: { error: (l) => logged.push(l), info: (l) => logged.push(l) },
      restart: o.restart,
    });
    servers.push(server);
    return { server, dev };
  };
  const first = serve();
  const fe = Frontend.connect(sock, new GuestMemory());
  t.teardown(() => {
    fe.close(); // also when a backend closed it: its rings' fds and memory are the test's
    for (const s of servers) s.close();
  });
  await fe.negotiate();
  await fe.start({ size: 64 });
  const c = new QcudaClient(fe, 2, 16);
  await c.open();
  return { sock, file: path.join(dir, 'vm.state'), fe, c, logged, first, serve };
}

const pattern = (n: number, seed: number) => Uint8Array.from({ length: n }, (_, i) => (i * seed + 3) & 0xff);

async function put(r: Rig, ptr: bigint, bytes: Uint8Array): Promise<number> {
  const gpa = r.fe.mem.alloc(bytes.length, 16);
  r.fe.mem.bytes(gpa, bytes.length).set(bytes);
  return r.c.htod(ptr, gpa, bytes.length);
}

async function get(r: Rig, ptr: bigint, n: number): Promise<{ status: number; bytes: Uint8Array }> {
  const gpa = r.fe.mem.alloc(n, 16);
  const status = await r.c.dtoh(gpa, ptr, n);
  return { status, bytes: Uint8Array.from(r.fe.mem.bytes(gpa, n)) };
}

/** Stops the first backend for a restart (its outcome), then closes it: the "QEMU" sees it gone. */
async function stopFirst(t: ExecutionContext, r: Rig): Promise<string> {
  const saved = await r.first.server.saveForRestart(r.file, 5000);
  r.first.server.close();
  t.true(await until(() => r.fe.closed));
  return saved.outcome;
}

/** A process's memory: a (3 MiB + 5) and b (4 KiB), filled. */
async function filled(t: ExecutionContext, r: Rig): Promise<{ a: bigint; b: bigint }> {
  const a = (await r.c.malloc((3 << 20) + 5)).value;
  const b = (await r.c.malloc(4096)).value;
  t.is(await put(r, a, pattern((3 << 20) + 5, 7)), 0);
  t.is(await put(r, b, pattern(4096, 5)), 0);
  return { a, b };
}

test.serial("a guest process's allocations, bytes, stream and parked callback wait survive a restart", async (t) => {
  const r = await rig(t);
  const { c } = r;
  const { a, b } = await filled(t, r);
  const stream = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 1, priority: -2 }] })).value;
  // The library's callback thread lives in a parked CALLBACK_WAIT once the process used a host function.
  const parked = c.call(Cmd.CALLBACK_WAIT, { args: ['qcuda_args_callback_wait', { done: 0n }], out: 'qcuda_out_callback' });
  const session = [...r.first.dev.sessions.values()][0];
  t.true(await until(() => session.callbacks.parked === 1));
  t.is(await stopFirst(t, r), 'saved');
  const woke = await parked;
  t.deepEqual([woke.status, woke.out?.id], [0, 0n], 'the parked wait was answered "nothing to run: wait again" before the save');
  t.is(fs.statSync(r.file).mode & 0o777, 0o600);

  // While no backend is there the process goes on: its next calls wait in the rings.
  const later = [get(r, a, (3 << 20) + 5), get(r, b, 4096)];
  const again = c.call(Cmd.CALLBACK_WAIT, { args: ['qcuda_args_callback_wait', { done: 0n }], out: 'qcuda_out_callback' });
  const next = r.serve({ restart: new RestartSlot(RestartState.read(r.file)) });
  await r.fe.reconnect(r.sock);
  const [ra, rb] = await Promise.all(later);
  t.is(ra.status, 0);
  t.true(Buffer.from(ra.bytes).equals(pattern((3 << 20) + 5, 7)), "a's bytes, carried");
  t.is(rb.status, 0);
  t.true(Buffer.from(rb.bytes).equals(pattern(4096, 5)), "b's bytes, carried");
  const prio = await c.call(Cmd.STREAM_GET_PRIORITY, { args: ['qcuda_args_handle', { handle: stream }] });
  t.deepEqual([prio.status, BigInt.asIntN(64, prio.value)], [0, -2n], 'the stream, by its handle');
  const moved = [...next.dev.sessions.values()];
  t.deepEqual(
    moved.map((s) => s.id),
    [c.session],
    'the session, by its id',
  );
  t.true(await until(() => moved[0].callbacks.parked === 1), 'the wait made meanwhile is parked on the new backend');
  t.is(next.dev.status().deviceMemory.used, (3 << 20) + 5 + 4096, 'the quota counts what was carried');
  // The process frees and ends as it would have.
  t.is((await c.free(a)).status, 0);
  t.is((await c.free(b)).status, 0);
  const closed = c.close();
  t.deepEqual((await again).status, Status.NO_SESSION, 'its parked wait ends with the session');
  t.is((await closed).status, 0);
  t.is(next.dev.sessions.size, 0);
  t.true(
    r.logged.some((l) => /restored the state saved at/.test(l)),
    r.logged.join('\n'),
  );
});

test.serial('a host function that has not run yet: the stop saves nothing, at once, and says why', async (t) => {
  const r = await rig(t);
  const { c } = r;
  const stream = (await c.call(Cmd.STREAM_CREATE, { args: ['qcuda_args_stream_create', { flags: 0, priority: 0 }] })).value;
  t.is((await c.call(Cmd.HOST_FUNC, { args: ['qcuda_args_host_func', { stream, id: 1n }] })).status, 0);
  const saved = await r.first.server.saveForRestart(r.file, 10_000);
  t.is(saved.outcome, 'failed');
  t.regex(saved.what, /session [0-9a-f]+: not yet carried: a host function \(cudaLaunchHostFunc\) that has not run yet/);
  t.false(fs.existsSync(r.file));
});

test.serial("a state over the new backend's quota is refused: it starts empty, the old session's calls get NO_SESSION", async (t) => {
  const r = await rig(t);
  const { a } = await filled(t, r);
  t.is(await stopFirst(t, r), 'saved');
  const late = get(r, a, 4096);
  const next = r.serve({ memoryLimit: 1n << 20n, restart: new RestartSlot(RestartState.read(r.file)) });
  await r.fe.reconnect(r.sock);
  t.is((await late).status, Status.NO_SESSION, 'an error, not a hang');
  t.is(next.dev.sessions.size, 0);
  t.true(
    r.logged.some((l) =>
      /restart state refused, the device starts empty: the device refused the state: qcuda device state: .*quota/.test(l),
    ),
    r.logged.join('\n'),
  );
  // The process's next calls fail the same way; a new process is served.
  t.is((await r.c.malloc(4096)).status, Status.NO_SESSION);
  const fresh = new QcudaClient(r.fe, 2, 4);
  await fresh.open();
  t.is((await fresh.malloc(4096)).status, 0);
});

test.serial('a crash (no state kept): the restarted backend answers the old session with NO_SESSION', async (t) => {
  const r = await rig(t);
  const { b } = await filled(t, r);
  r.first.server.close(); // as a SIGKILL: nothing saved
  t.true(await until(() => r.fe.closed));
  const late = get(r, b, 4096);
  r.serve();
  await r.fe.reconnect(r.sock);
  t.is((await late).status, Status.NO_SESSION);
  t.false(fs.existsSync(r.file));
});
