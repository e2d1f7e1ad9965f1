// The native addon's system calls, each checked for its outcome and errors.
import test from 'ava';
import fs from 'node:fs';
import { native } from '../../backend/src/sys/native';
import { Connection, EventFd, Fd, encodeMessage, FLAG_VERSION, type Message } from '../../backend/src/vhost-user';
import { openFds, until } from '../helpers';

test.serial('SCM_RIGHTS passes fds; received ones are close-on-exec; MSG_CTRUNC is reported', (t) => {
  const [a, b] = native.socketPair();
  const e = [EventFd.create(), EventFd.create(), EventFd.create()];
  t.teardown(() => {
    e.forEach((x) => x.close());
    native.close(a);
    native.close(b);
  });
  t.is(
    native.sendMsg(
      a,
      new Uint8Array([7, 8]),
      e.map((x) => x.value),
    ),
    2,
  );
  const r = native.recvMsg(b, new Uint8Array(16));
  t.is(r.n, 2);
  t.is(r.fds!.length, 3);
  const received = r.fds!.map((fd) => new EventFd(fd));
  received[1].signal();
  t.is(e[1].drain(), 1, 'the received fd is the same eventfd');
  const info = fs.readFileSync(`/proc/self/fdinfo/${r.fds![0]}`, 'utf8');
  const flags = parseInt(/flags:\s+([0-7]+)/.exec(info)![1], 8);
  t.truthy(flags & 0o2000000, 'O_CLOEXEC set');
  received.forEach((x) => x.close());
  native.sendMsg(
    a,
    new Uint8Array([1]),
    e.map((x) => x.value),
  );
  const before = openFds();
  const cut = native.recvMsg(b, new Uint8Array(16), 1);
  t.true(cut.ctrunc);
  cut.fds!.forEach((fd) => native.close(fd));
  t.is(openFds(), before);
  t.is(native.recvMsg(b, new Uint8Array(16)).n, -1, 'nothing left: EAGAIN is -1, not an exception');
});

test.serial('a Connection reassembles a message that arrives in pieces and pairs it with its fds', async (t) => {
  const [a, b] = native.socketPair();
  const got: Message[] = [];
  const conn = new Connection(new Fd(b), { onMessage: (m) => got.push(m), onClose: () => {} });
  const e = EventFd.create();
  t.teardown(() => {
    conn.close();
    native.close(a);
    e.close();
    got.forEach((m) => m.fds.forEach((f) => f.close()));
  });
  const msg = encodeMessage(13, FLAG_VERSION, new Uint8Array([1, 0, 0, 0, 0, 0, 0, 0]));
  native.sendMsg(a, msg.subarray(0, 5), [e.value]);
  await until(() => false, 20);
  native.sendMsg(a, msg.subarray(5, 14), []);
  await until(() => false, 20);
  t.is(got.length, 0);
  native.sendMsg(a, msg.subarray(14), []);
  native.sendMsg(a, encodeMessage(1, FLAG_VERSION, new Uint8Array(0)), []);
  t.true(await until(() => got.length === 2));
  t.is(got[0].request, 13);
  t.is(got[0].fds.length, 1);
  t.is(got[1].request, 1);
  t.is(got[1].fds.length, 0);
});

test('memfd + Mapping: windows share memory, oversized windows are errors, unmap detaches views', (t) => {
  const fd = new Fd(native.memfdCreate('t', 1 << 20));
  t.teardown(() => fd.close());
  const m1 = new native.Mapping(fd.value, 1 << 20, 0);
  const m2 = new native.Mapping(fd.value, 4096, 4096);
  const a = new Uint8Array(m1.window(4096, 16));
  const b = new Uint8Array(m2.window(0, 16));
  a[3] = 42;
  t.is(b[3], 42, 'two mappings of one memfd see the same bytes');
  t.throws(() => m1.window(0, 2 ** 32 + 1), { instanceOf: RangeError, message: /1\.\.4 GiB/ });
  t.throws(() => m1.window((1 << 20) - 8, 16), { instanceOf: RangeError, message: /outside the mapping/ });
  t.throws(() => new native.Mapping(fd.value, 4096, 100), { instanceOf: RangeError, message: /page aligned/ });
  t.throws(() => new native.Mapping(fd.value, 0, 0), { instanceOf: RangeError });
  t.throws(() => new native.Mapping(-1 as number, 4096, 0), { instanceOf: RangeError });
  t.is(native.fdInfo(fd.value).size, 1 << 20);
  m1.unmap();
  m1.unmap();
  t.false(m1.mapped);
  t.is(a.length, 0, 'the view is detached, not dangling');
  t.throws(() => m1.window(0, 16), { message: /unmapped/ });
  m2.unmap();
});

test('eventfd: counter semantics, EAGAIN as -1', (t) => {
  const e = EventFd.create();
  t.teardown(() => e.close());
  t.is(e.drain(), -1);
  e.signal();
  e.signal();
  t.is(e.drain(), 2);
  t.is(e.drain(), -1);
  e.close();
  e.close();
  t.true(e.closed);
  t.throws(() => e.value, { message: /closed/ });
});

test('fd ownership: take() hands over without closing', (t) => {
  const e = EventFd.create();
  const raw = e.take();
  t.true(e.closed);
  e.close(); // no-op: the fd now belongs to the new owner
  const owner = new EventFd(raw);
  owner.signal();
  t.is(owner.drain(), 1);
  owner.close();
});

test('a failed system call throws as Node does: errno, code and syscall', (t) => {
  const e = t.throws(() => native.fdInfo(1 << 20)) as Error & { errno?: number; code?: string; syscall?: string };
  t.is(e.errno, 9);
  t.is(e.code, 'EBADF');
  t.is(e.syscall, 'fstat');
  t.regex(e.message, /^fstat: /);
});
