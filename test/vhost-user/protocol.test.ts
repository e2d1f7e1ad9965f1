// The backend against a frontend that breaks the rules: every bad message
// gets an error (REPLY_ACK status or a closed connection), fds are closed,
// and the server keeps serving.
import test from 'ava';
import { EchoDevice } from '../../backend/src/devices/echo';
import {
  Backend,
  Fd,
  ProtocolError,
  native,
  encodeConfig,
  encodeMemTable,
  encodeU64,
  encodeVringAddr,
  encodeVringState,
  EventFd,
  FLAG_NEED_REPLY,
  FLAG_VERSION,
  encodeMessage,
  Req,
  type Connection,
  type Message,
  type ProtocolReason,
  type VhostUserDevice,
} from '../../backend/src/vhost-user';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { connect, openFds, started, tick, until } from '../helpers';

const state = (index: number, num: number) => encodeVringState({ index, num });

test.serial('negotiation offers what the notes require and the config space reads back', async (t) => {
  const { fe } = connect(t, new EchoDevice({ queues: 3 }));
  await fe.negotiate();
  t.is(fe.features & (1n << 32n), 1n << 32n, 'VERSION_1');
  t.is(fe.features & (1n << 30n), 1n << 30n, 'PROTOCOL_FEATURES');
  t.is(fe.features & (1n << 34n), 0n, 'no PACKED');
  t.is(fe.features & (1n << 33n), 0n, 'no ACCESS_PLATFORM');
  const want = [0n, 3n, 9n, 13n, 15n, 16n].reduce((a, b) => a | (1n << b), 0n);
  t.is(fe.protocolFeatures, want);
  t.is(fe.queueNum, 3);
  const cfg = await fe.getConfig(0, 8);
  t.deepEqual(Array.from(cfg), [3, 0, 0, 0, 0x45, 0x43, 0x48, 0x4f]);
  t.deepEqual(Array.from(await fe.getConfig(4, 2)), [0x45, 0x43]);
  t.is(await fe.acked(Req.SET_CONFIG, encodeConfig({ offset: 0, size: 4, flags: 0, data: new Uint8Array(4) })), 1n, 'read-only config');
});

test.serial('bad requests get a failing REPLY_ACK and the connection lives on', async (t) => {
  const { fe } = connect(t, new EchoDevice({ queues: 2 }));
  await fe.negotiate();
  t.is(await fe.acked(Req.SET_FEATURES, new Uint8Array(4)), 1n, 'short payload');
  t.is(await fe.acked(Req.SET_FEATURES, encodeU64(1n << 40n)), 1n, 'feature never offered');
  t.is(await fe.acked(Req.SET_PROTOCOL_FEATURES, encodeU64(1n << 14n)), 1n, 'INBAND_NOTIFICATIONS never offered');
  t.is(await fe.acked(Req.SET_FEATURES, encodeU64((1n << 32n) | (1n << 30n))), 0n);
  for (const num of [0, 3, 100, 2048, 65536]) t.is(await fe.acked(Req.SET_VRING_NUM, state(0, num)), 1n, `queue size ${num}`);
  t.is(await fe.acked(Req.SET_VRING_NUM, state(2, 64)), 1n, 'queue index past the last queue');
  t.is(await fe.acked(Req.SET_VRING_NUM, state(0, 64)), 0n);
  t.is(await fe.acked(Req.SET_VRING_BASE, state(0, 0x10000)), 1n, 'base is not 16-bit');
  const addr = { index: 0, flags: 0, desc: 0x1000n, used: 0x3000n, avail: 0x2000n, log: 0n };
  t.is(await fe.acked(Req.SET_VRING_ADDR, encodeVringAddr(addr)), 1n, 'ring address before any memory table');
  await fe.sendMemory(false);
  t.is(await fe.acked(Req.SET_VRING_ADDR, encodeVringAddr({ ...addr, desc: 1n << 50n })), 1n, 'ring outside guest memory');
  t.is(await fe.acked(Req.SET_VRING_ADDR, encodeVringAddr({ ...addr, desc: fe.mem.va(0x1008n) })), 1n, 'misaligned ring');
  t.is(await fe.acked(Req.SET_VRING_ADDR, encodeVringAddr({ ...addr, flags: 1 })), 1n, 'dirty log never offered');
  t.is(
    await fe.acked(
      Req.SET_VRING_ADDR,
      encodeVringAddr({ ...addr, desc: fe.mem.va(0x1000n), used: fe.mem.va(0x3000n), avail: fe.mem.va(0x2000n) }),
    ),
    0n,
  );
  t.is(await fe.acked(Req.SET_VRING_ENABLE, state(0, 2)), 1n, 'enable state 2');
  t.is(await fe.acked(Req.SET_VRING_KICK, encodeU64(0x100n | 0n)), 1n, 'polling mode is refused');
  t.is(await fe.acked(Req.SET_VRING_KICK, encodeU64(1n << 12n)), 1n, 'reserved bits');
  t.false(fe.closed);
});

test('a request that must be answered and cannot is a ProtocolError, its reason what the frontend did wrong', async (t) => {
  // The Backend alone, over a connection that drops its replies: the error a
  // request with a reply throws is the one the server ends the connection on.
  const conn = { closed: false, send: () => {}, close: () => {} } as unknown as Connection;
  const quiet = { error: () => {} };
  const echo = new Backend(new EchoDevice({ queues: 1 }), conn, quiet);
  const bare: VhostUserDevice = { name: 'bare', numQueues: 1, maxQueueSize: 256, features: 0n, configSize: 0, handle: () => 0 };
  const configless = new Backend(bare, conn, quiet);
  t.teardown(async () => {
    await echo.close();
    await configless.close();
  });
  const msg = (request: Req, payload: Uint8Array = new Uint8Array(0), fds: Fd[] = []): Message => ({
    request,
    flags: FLAG_VERSION,
    size: payload.length,
    payload,
    fds,
  });
  const reason = async (b: Backend, m: Message): Promise<ProtocolReason | undefined> =>
    (await t.throwsAsync(b.handle(m), { instanceOf: ProtocolError }))?.reason;
  const config = (offset: number, size: number) => encodeConfig({ offset, size, flags: 0, data: new Uint8Array(size) });
  t.is(await reason(echo, msg(Req.GET_FEATURES, new Uint8Array(0), [new Fd(native.eventfd())])), 'bad-fds', 'an fd where none belongs');
  t.is(await reason(echo, msg(Req.GET_VRING_BASE, new Uint8Array(4))), 'bad-size', 'a vring state of 4 bytes');
  t.is(await reason(echo, msg(Req.GET_VRING_BASE, state(1, 0))), 'bad-value', 'a queue past the last');
  t.is(await reason(echo, msg(Req.GET_CONFIG, config(4, 8))), 'bad-size', 'past the config space');
  t.is(await reason(configless, msg(Req.GET_CONFIG, config(0, 4))), 'unsupported-request', 'a device without a config space');
});

test.serial('fds are checked and always closed, also on unknown and failing requests', async (t) => {
  const { fe } = connect(t, new EchoDevice({ queues: 1 }));
  await fe.negotiate();
  const efds = [EventFd.create(), EventFd.create(), EventFd.create()];
  t.teardown(() => efds.forEach((e) => e.close()));
  const fds = efds.map((e) => e.value);
  const before = openFds();
  t.is(await fe.acked(99 as Req, new Uint8Array(16), fds), 1n, 'unknown request');
  t.is(await fe.acked(Req.SET_VRING_KICK, encodeU64(0n), fds.slice(0, 2)), 1n, 'two fds for a kick');
  t.is(await fe.acked(Req.SET_VRING_CALL, encodeU64(0n)), 1n, 'fd flag says an fd comes, none came');
  t.is(await fe.acked(Req.SET_FEATURES, encodeU64(0n), fds), 1n, 'fds on a request that takes none');
  t.is(await fe.acked(Req.SET_MEM_TABLE, encodeMemTable(fe.mem.regions), fds.slice(0, 1)), 1n, 'two regions, one fd');
  const big = [{ ...fe.mem.regions[0], size: 1n << 40n }];
  t.is(await fe.acked(Req.SET_MEM_TABLE, encodeMemTable(big), [fe.mem.fd.value]), 1n, 'region larger than its fd');
  const overlap = [fe.mem.regions[0], { ...fe.mem.regions[1], gpa: 0x1000n }];
  t.is(await fe.acked(Req.SET_MEM_TABLE, encodeMemTable(overlap), [fe.mem.fd.value, fe.mem.fd.value]), 1n, 'overlapping regions');
  t.is(await fe.acked(Req.SET_MEM_TABLE, new Uint8Array(7), [fe.mem.fd.value]), 1n, 'truncated table');
  t.true(await until(() => openFds() === before), 'every received fd was closed');
  t.false(fe.closed);
});

/** Sends raw bytes on a fresh connection and reports whether the backend hung up. */
async function raw(sock: string, bytes: Uint8Array, closeAfter = false): Promise<boolean> {
  const fd = native.unixConnect(sock);
  try {
    native.sendMsg(fd, bytes, []);
    if (closeAfter) native.shutdown(fd);
    const buf = new Uint8Array(64);
    for (let i = 0; i < 100; i++) {
      await tick(5);
      try {
        if (native.recvMsg(fd, buf).n === 0) return true;
      } catch (e) {
        if ((e as { errno?: number }).errno === 104) return true; // ECONNRESET: closed with our data unread
        throw e;
      }
    }
    return false;
  } finally {
    native.close(fd);
  }
}

test.serial('broken framing ends only that connection; the server accepts the next frontend', async (t) => {
  const dev = new EchoDevice({ queues: 1 });
  const { fe, sock, server, logged } = connect(t, dev);
  fe.close();
  await until(() => !server.connected);
  const header = (req: number, flags: number, size: number) => {
    const b = new Uint8Array(12);
    const v = new DataView(b.buffer);
    v.setUint32(0, req, true);
    v.setUint32(4, flags, true);
    v.setUint32(8, size, true);
    return b;
  };
  const before = openFds();
  t.true(await raw(sock, header(Req.GET_FEATURES, 0x2, 0)), 'wrong version');
  t.true(await raw(sock, header(Req.GET_FEATURES, 0x5, 0)), 'a request flagged as a reply');
  t.true(await raw(sock, header(Req.SET_MEM_TABLE, 0x1, 1 << 20)), 'oversized payload');
  t.true(await raw(sock, header(Req.SET_FEATURES, 0x1, 8).subarray(0, 7), true), 'truncated header');
  t.true(await raw(sock, encodeMessage(Req.SET_FEATURES, FLAG_VERSION, new Uint8Array(8)).subarray(0, 15), true), 'truncated payload');
  t.true(
    await raw(sock, encodeMessage(Req.GET_CONFIG, FLAG_VERSION, encodeConfig({ offset: 250, size: 8, flags: 0, data: new Uint8Array(8) }))),
    'GET_CONFIG past the config space',
  );
  t.true(await until(() => openFds() === before));
  t.true(
    logged.some((l) => /connection closed: bad header: SET_MEM_TABLE payload of 1048576 bytes/.test(l)),
    'the reason reaches the logger',
  );
  t.false(
    logged.some((l) => !l.startsWith('vhost-user: ')),
    'each line names its source',
  );
  const next = Frontend.connect(sock);
  t.teardown(() => next.close());
  await next.negotiate();
  t.is(next.queueNum, 1);
});

test.serial('a second frontend is refused while the first is connected', async (t) => {
  const { fe, sock } = connect(t, new EchoDevice({ queues: 1 }));
  await fe.negotiate();
  t.true(await raw(sock, new Uint8Array(0)));
  t.is(Number(await fe.getU64(Req.GET_QUEUE_NUM)), 1);
});

test.serial('a kick that arrives before SET_VRING_ENABLE is not lost', async (t) => {
  const dev = new EchoDevice({ queues: 1 });
  const { fe } = await started(t, dev, { size: 16 });
  await fe.stop();
  // Restart the ring by hand, kicking while it is still disabled.
  const q = fe.queues[0];
  const inp = fe.mem.alloc(4);
  const out = fe.mem.alloc(12);
  fe.mem.bytes(inp, 4).set([1, 2, 3, 4]);
  t.is(
    await fe.acked(
      Req.SET_VRING_ADDR,
      encodeVringAddr({
        index: 0,
        flags: 0,
        desc: fe.mem.va(q.ring.desc),
        used: fe.mem.va(q.ring.used),
        avail: fe.mem.va(q.ring.avail),
        log: 0n,
      }),
    ),
    0n,
  );
  const kick = EventFd.create();
  t.is(await fe.acked(Req.SET_VRING_KICK, encodeU64(0n), [kick.value]), 0n);
  kick.close();
  const done = fe.submit(0, [
    { gpa: inp, len: 4 },
    { gpa: out, len: 12, write: true },
  ]);
  await tick(30);
  t.is(dev.requests, 0, 'a disabled ring takes nothing');
  t.is(await fe.acked(Req.SET_VRING_ENABLE, state(0, 1)), 0n);
  t.is((await done).len, 12);
  t.deepEqual(Array.from(fe.mem.bytes(out, 4)), [1, 2, 3, 4]);
});

test.serial('GET_VRING_BASE waits for in-flight requests and returns the live index', async (t) => {
  const dev = new EchoDevice({ queues: 1, maxDelayMs: 40 });
  const { fe } = await started(t, dev, { size: 16 });
  const replies: Promise<unknown>[] = [];
  for (let i = 0; i < 5; i++) {
    const inp = fe.mem.alloc(8);
    replies.push(
      fe.submit(0, [
        { gpa: inp, len: 8 },
        { gpa: fe.mem.alloc(16), len: 16, write: true },
      ]),
    );
  }
  t.true(await until(() => dev.requests === 5), 'the device took all five'); // in flight: replies come 0-40 ms later
  const [base] = await fe.stop();
  t.is(base, 5);
  t.is(
    fe.queues[0].ring.harvest().length + (await Promise.race([Promise.all(replies).then(() => 5), tick(50).then(() => 0)])),
    5,
    'all five completed before the ring stopped',
  );
});

test.serial('a malformed chain fails that request only; a runaway avail index breaks the ring and signals its err fd', async (t) => {
  const dev = new EchoDevice({ queues: 1 });
  const { fe } = await started(t, dev, { size: 16 });
  const bad = await fe.submit(0, [
    { gpa: 1n << 45n, len: 8 },
    { gpa: fe.mem.alloc(16), len: 16, write: true },
  ]);
  t.is(bad.len, 0);
  t.is(dev.requests, 0);
  const inp = fe.mem.alloc(8);
  const good = await fe.submit(0, [
    { gpa: inp, len: 8 },
    { gpa: fe.mem.alloc(16), len: 16, write: true },
  ]);
  t.is(good.len, 16);
  const err = EventFd.create();
  t.teardown(() => err.close());
  t.is(await fe.acked(Req.SET_VRING_ERR, encodeU64(0n), [err.value]), 0n);
  const ring = fe.queues[0].ring;
  Atomics.store(ring.a16, 1, (ring.availIdx + 100) & 0xffff);
  fe.queues[0].kick.signal();
  t.true(await until(() => err.drain() > 0), 'err eventfd signalled');
  t.is(dev.requests, 1);
  t.false(fe.closed, 'the connection survives');
});

test.serial('guest memory is unmapped when the frontend goes away, and no fd is left open', async (t) => {
  const baseline = openFds();
  const mem = new GuestMemory();
  const { fe, server } = await started(t, new EchoDevice({ queues: 2 }), { size: 8 }, mem);
  await fe.submit(1, [
    { gpa: fe.mem.alloc(8), len: 8 },
    { gpa: fe.mem.alloc(16), len: 16, write: true },
  ]);
  fe.close();
  t.true(await until(() => !server.connected));
  server.close();
  t.true(await until(() => openFds() === baseline), `fds: ${openFds()} vs ${baseline}`);
});

test.serial('NEED_REPLY on SET_VRING_ENABLE is acked (QEMU waits for it)', async (t) => {
  const { fe } = await started(t, new EchoDevice({ queues: 1 }), { size: 8 });
  const m = await fe.request(Req.SET_VRING_ENABLE, state(0, 1), [], { needReply: true });
  t.is(m!.flags, 0x5);
  t.is(m!.size, 8);
});

void FLAG_NEED_REPLY;
