// The backend <-> worker channel (workers/channel.ts) on a real socketpair:
// order, values V8 serializes, raw frames among them, fds, messages far
// larger than the socket buffer (partial writes and reads), and a peer that
// sends garbage; and the raw frames' codec (worker-messages.ts).
import { isDeepStrictEqual } from 'node:util';
import test from 'ava';
import { native } from '../../backend/src/sys/native';
import { Fd } from '../../backend/src/vhost-user';
import { Channel } from '../../backend/src/qcuda/workers/channel';
import { decodeFast, encodeCopy, encodeDone, Fast } from '../../backend/src/qcuda/workers/worker-messages';

function pair() {
  const [a, b] = native.socketPair();
  const got: unknown[] = [];
  const closed: (Error | undefined)[] = [];
  let wake: (() => void) | undefined;
  const rx = new Channel(
    b,
    (m) => {
      got.push(m);
      wake?.();
    },
    (e) => {
      closed.push(e);
      wake?.();
    },
  );
  const tx = new Channel(
    a,
    () => undefined,
    () => undefined,
  );
  const until = async (ok: () => boolean) => {
    while (!ok())
      await new Promise<void>((r) => {
        wake = r;
        setTimeout(r, 50);
      });
  };
  return { rx, tx, got, closed, until };
}

test('messages arrive whole and in order: bigint, typed arrays, undefined, 24 MiB bodies among small ones', async (t) => {
  const { rx, tx, got, until } = pair();
  const big = new Uint8Array(24 << 20).map((_, i) => (i * 13) & 0xff);
  const sent: unknown[] = [];
  for (let i = 0; i < 200; i++) {
    const m = i % 50 === 7 ? { i, big } : { i, n: BigInt(i) << 40n, a: [undefined, new Int32Array([i, -i])], s: 'x'.repeat(i) };
    sent.push(m);
    tx.send(m);
  }
  await until(() => got.length === 200);
  // node's own deep equality (ava's would diff 24 MiB arrays element by element)
  const same = got.every((m, i) => isDeepStrictEqual(m, sent[i]));
  t.true(same, 'every message identical to what was sent, in order');
  t.is((got[7] as { big: Uint8Array }).big[12345], (12345 * 13) & 0xff);
  tx.close();
  rx.close();
});

test('fds travel with their message and stay usable', async (t) => {
  const { rx, tx, got, until } = pair();
  const mfd = native.memfdCreate('channel-test', 4096);
  const m = new native.Mapping(mfd, 4096, 0);
  new Uint8Array(m.window(0, 4096)).set([1, 2, 3]);
  tx.send({ t: 'region' }, [mfd]);
  await until(() => got.length === 1);
  const fd = rx.takeFd();
  t.truthy(fd, 'an fd came');
  const m2 = new native.Mapping(fd!.value, 4096, 0);
  t.deepEqual([...new Uint8Array(m2.window(0, 3))], [1, 2, 3], 'the same memory, mapped from the received fd');
  t.is(rx.takeFd(), undefined);
  for (const x of [m, m2]) x.unmap();
  fd!.close();
  native.close(mfd);
  tx.close();
  rx.close();
});

test("sendTaking: the sender's copy of an fd is closed once its message has gone, not before (a full socket first)", async (t) => {
  const { rx, tx, got, until } = pair();
  tx.send({ big: new Uint8Array(24 << 20) }); // more than the socket takes at once: the next message waits in the outbox
  const mfd = new Fd(native.memfdCreate('channel-test', 4096));
  const sent = new native.Mapping(mfd.value, 4096, 0);
  new Uint8Array(sent.window(0, 4096)).set([7, 8, 9]);
  tx.sendTaking({ t: 'fd' }, [mfd]);
  t.false(mfd.closed, 'still queued: still open');
  await until(() => got.length === 2);
  t.true(mfd.closed, 'gone with its message: closed');
  const fd = rx.takeFd();
  t.truthy(fd, 'the fd came');
  const m = new native.Mapping(fd!.value, 4096, 0);
  t.deepEqual([...new Uint8Array(m.window(0, 3))], [7, 8, 9], 'the same memory');
  for (const x of [m, sent]) x.unmap();
  fd!.close();
  tx.close();
  rx.close();
});

test('a peer that sends a length past the limit, or closes mid-message, closes the channel with a reason', async (t) => {
  for (const bytes of [new Uint8Array([0xff, 0xff, 0xff, 0x7f, 1, 2]), new Uint8Array([16, 0, 0, 0, 1, 2])]) {
    const [a, b] = native.socketPair();
    const closed: (Error | undefined)[] = [];
    const rx = new Channel(
      b,
      () => t.fail('no message may come'),
      (e) => closed.push(e),
    );
    native.sendMsg(a, bytes, []);
    native.close(a);
    for (let i = 0; i < 100 && closed.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
    t.is(closed.length, 1);
    t.regex(closed[0]?.message ?? '', /a message of|in the middle of a message/);
    t.true(rx.closed);
  }
});

test('raw frames keep their place among serialized messages and decode to what was encoded', async (t) => {
  const { rx, tx, got, until } = pair();
  const segs = Array.from({ length: 4101 }, (_, i) => ({ addr: 0x7f00_0000_0000n + BigInt(i) * 8192n, len: 4096 + (i % 3) }));
  const copy = { kind: Fast.FromDevice as const, id: 0xfffffffe, ptr: 0xffff_ffff_ffff_f000n, stream: 7, segs };
  tx.send({ t: 'first' });
  tx.sendRaw(encodeCopy(copy));
  tx.sendRaw(encodeDone(42));
  tx.sendRaw(encodeCopy({ ...copy, kind: Fast.ToDevice, stream: undefined, segs: [] }));
  tx.send({ t: 'last' });
  await until(() => got.length === 5);
  t.deepEqual(got[0], { t: 'first' });
  t.true(got[1] instanceof Uint8Array && got[2] instanceof Uint8Array);
  t.true(isDeepStrictEqual(decodeFast(got[1] as Uint8Array), copy), 'a 4101-segment copy call, intact');
  t.deepEqual(decodeFast(got[2] as Uint8Array), { kind: Fast.Done, id: 42 });
  t.deepEqual(decodeFast(got[3] as Uint8Array), { kind: Fast.ToDevice, id: 0xfffffffe, ptr: copy.ptr, stream: undefined, segs: [] });
  t.deepEqual(got[4], { t: 'last' });
  tx.close();
  rx.close();
});

test('malformed raw frames are refused with the reason, never half-decoded', (t) => {
  const good = encodeCopy({ kind: Fast.ToDevice, id: 1, ptr: 0n, stream: undefined, segs: [{ addr: 4096n, len: 8 }] });
  t.throws(() => decodeFast(new Uint8Array(0)), { message: /kind 0 and 0 bytes/ });
  t.throws(() => decodeFast(Uint8Array.of(9, 0, 0, 0, 0)), { message: /kind 9/ });
  t.throws(() => decodeFast(Uint8Array.of(Fast.Done, 1, 0, 0)), { message: /kind 3 and 4 bytes/ });
  t.throws(() => decodeFast(good.subarray(0, good.length - 1)), { message: /36 bytes for 1 segments/ });
  t.throws(() => decodeFast(good.subarray(0, 20)), { message: /20 bytes/ });
  const more = good.slice();
  new DataView(more.buffer).setUint32(17, 2, true);
  t.throws(() => decodeFast(more), { message: /37 bytes for 2 segments/ });
});
