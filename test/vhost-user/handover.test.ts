// Handing a ring to another process and back (Vring.detach, adopt, resume,
// recover; inflight.ts), the ring-level half of a session's worker serving
// its own queue: the other process serves the ring with dups of its kick
// and call fds, the backend takes it back where that process left it, and
// if that process is killed mid-request the backend answers what it left in
// flight, once, and serves the ring again.
import test, { type ExecutionContext } from 'ava';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { EchoDevice, ECHO_TRAILER } from '../../backend/src/devices/echo';
import { Channel } from '../../backend/src/qcuda/workers/channel';
import { native } from '../../backend/src/vhost-user';
import { InflightRecord, leftover } from '../../backend/src/vhost-user/inflight';
import type { Frontend, Used } from '../../backend/src/vhost-user/frontend';
import type { VhostUserServer } from '../../backend/src/vhost-user';
import type { RingState, Vring } from '../../backend/src/vhost-user/vring';
import { started, until } from '../helpers';

/** An echo of n bytes on queue q; resolves with its used element and whether the bytes came back. */
async function echo(fe: Frontend, q: number, n: number, fill: number): Promise<{ used: Used; ok: boolean }> {
  const src = fe.mem.alloc(n, 1);
  const dst = fe.mem.alloc(n + ECHO_TRAILER, 1);
  fe.mem.bytes(src, n).fill(fill);
  const used = await fe.submit(q, [
    { gpa: src, len: n },
    { gpa: dst, len: n + ECHO_TRAILER, write: true },
  ]);
  return { used, ok: used.len === n + ECHO_TRAILER && fe.mem.bytes(dst, n).every((b) => b === fill) };
}

async function echoes(fe: Frontend, q: number, count: number): Promise<number> {
  let ok = 0;
  for (let i = 0; i < count; i++) {
    const at = fe.mem.mark();
    if ((await echo(fe, q, 16 + i, i & 0xff)).ok) ok++;
    fe.mem.rewind(at);
  }
  return ok;
}

interface Owner {
  child: ChildProcess;
  channel: Channel;
  exited: Promise<void>;
  next(t: string): Promise<Record<string, unknown>>;
}

function spawnOwner(t: ExecutionContext): Owner {
  const [mine, theirs] = native.socketPair();
  const child = spawn(process.execPath, [path.join(__dirname, 'ring-owner-child.js')], { stdio: ['ignore', 'inherit', 'inherit', theirs] });
  native.close(theirs);
  const inbox: Record<string, unknown>[] = [];
  const waiters: (() => void)[] = [];
  const channel = new Channel(
    mine,
    (m) => {
      inbox.push(m as Record<string, unknown>);
      for (const w of waiters.splice(0)) w();
    },
    () => undefined,
  );
  const exited = new Promise<void>((r) => child.once('exit', () => r()));
  t.teardown(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    await exited;
    channel.close();
  });
  const next = async (type: string): Promise<Record<string, unknown>> => {
    for (;;) {
      const i = inbox.findIndex((m) => m.t === type);
      if (i >= 0) return inbox.splice(i, 1)[0];
      await new Promise<void>((r) => waiters.push(r));
    }
  };
  return { child, channel, exited, next };
}

/** Detaches the ring of queue q and hands it, with guest RAM, to a new owner process. */
async function handOver(
  t: ExecutionContext,
  fe: Frontend,
  server: VhostUserServer,
  q: number,
  holdMs: number,
): Promise<{ ring: Vring; owner: Owner; record: InflightRecord }> {
  const ring = server.backend!.rings[q];
  const state = await ring.detach();
  t.true(ring.delegated);
  const record = InflightRecord.create(state.size, state.lastAvail, state.usedIdx);
  t.teardown(() => record.close());
  const owner = spawnOwner(t);
  for (const r of fe.mem.regions)
    owner.channel.send({ t: 'region', region: { gpa: r.gpa, size: r.size, userAddr: r.userAddr, mmapOffset: r.mmapOffset } }, [
      fe.mem.fd.value,
    ]);
  owner.channel.send({ t: 'adopt', state, holdMs }, [ring.kick!.value, ring.call!.value, record.fd.value]);
  await owner.next('adopted');
  return { ring, owner, record };
}

test.serial('a ring handed to another process is served there; handed back, the backend goes on from where it left off', async (t) => {
  const dev = new EchoDevice({ queues: 2 });
  const { fe, server } = await started(t, dev, { queues: 2, size: 64 });
  t.is(await echoes(fe, 1, 20), 20);
  t.is(dev.requests, 20);
  const { ring, owner } = await handOver(t, fe, server, 1, 0);
  // Queue 1 is the owner's now (more requests than the ring has entries: indices wrap), queue 0 still the backend's.
  t.is(await echoes(fe, 1, 150), 150);
  t.is(await echoes(fe, 0, 10), 10);
  t.is(dev.requests, 30, 'the backend served only queue 0 meanwhile');
  owner.channel.send({ t: 'detach' });
  const back = await owner.next('state');
  t.is(back.served, 150, 'the owner served every request of queue 1');
  ring.resume(back.state as RingState);
  t.false(ring.delegated);
  await owner.exited;
  t.is(await echoes(fe, 1, 30), 30);
  t.is(dev.requests, 60, 'the backend serves queue 1 again');
});

test.serial(
  'the owner killed mid-request: the backend answers what it left in flight once (used length 0) and serves the ring again',
  async (t) => {
    const dev = new EchoDevice({ queues: 2 });
    const { fe, server } = await started(t, dev, { queues: 2, size: 64 });
    t.is(await echoes(fe, 1, 5), 5);
    // Requests the owner holds for 10 s before answering (a fixed hold: a random one
    // may answer one before all 8 are taken): it is killed first.
    const { ring, owner, record } = await handOver(t, fe, server, 1, 10_000);
    const pending = Array.from({ length: 8 }, (_, i) => echo(fe, 1, 32, i));
    t.true(await until(() => record.heads().length === 8, 5000), `the owner took ${record.heads().length} of 8`);
    owner.child.kill('SIGKILL');
    await owner.exited;
    const answered = ring.recover(record);
    t.is(answered.length, 8, 'every request the owner took is answered');
    const results = await Promise.all(pending);
    t.true(
      results.every((r) => r.used.len === 0),
      'each as failed (used length 0), once',
    );
    t.false(ring.delegated);
    t.is(await echoes(fe, 1, 20), 20, 'the backend serves the ring again');
    t.is(dev.requests, 25);
  },
);

test("recovery undoes the owner's half-done steps: an answer published but not yet recorded, a head marked but not yet taken", (t) => {
  const r = InflightRecord.create(8, 0, 0);
  t.teardown(() => r.close());
  const avail = [3, 5, 6, 1, 0, 0, 0, 0];
  const used: number[] = [];
  // Took 3, 5 and 6; answered 5 (recorded), then answered 3 (published, died before recording it).
  r.took(3, 1);
  r.took(5, 2);
  r.took(6, 3);
  used.push(5);
  r.published(5, 1);
  used.push(3);
  // Then marked head 1 (avail slot 3) and died before counting it in lastAvail.
  r.took(1, 3);
  t.deepEqual(r.heads(), [1, 3, 6]);
  const left = leftover(r, { usedIdx: 2, availIdx: 4, usedHead: (i) => used[i % 8], availHead: (i) => avail[i % 8] });
  t.deepEqual(left, { lastAvail: 3, heads: [6] }, 'only 6 is left to answer; 1 is taken again from slot 3');
  // Slot 3 holding an old entry (avail index not past lastAvail): its head stays in flight.
  t.deepEqual(leftover(r, { usedIdx: 2, availIdx: 3, usedHead: (i) => used[i % 8], availHead: (i) => avail[i % 8] }).heads, [1, 6]);
});

test.serial('a handler that detaches its ring takes nothing more from it, though more requests wait there', async (t) => {
  // As a SESSION_OPEN that hands its queue to a worker: the requests after it are the worker's, even those already in the ring.
  class DetachingEcho extends EchoDevice {
    ring: Vring | undefined;
    detached: Promise<RingState> | undefined;
    override handle(req: Parameters<EchoDevice['handle']>[0]): number | Promise<number> {
      if (this.ring && !this.detached) this.detached = this.ring.detach();
      return super.handle(req);
    }
  }
  const dev = new DetachingEcho({ queues: 2 });
  const { fe, server } = await started(t, dev, { queues: 2, size: 64 });
  dev.ring = server.backend!.rings[1];
  // Both in the ring before the backend looks: one kick finds two.
  const first = echo(fe, 1, 16, 1);
  void echo(fe, 1, 17, 2);
  t.true((await first).ok);
  const state = await dev.detached!;
  t.is(dev.requests, 1, 'only the request that detached was served here');
  t.is(state.lastAvail, 1, 'the second is left in the ring for whoever adopts it');
  dev.ring.resume(state);
  await until(() => dev.requests === 2);
  t.is(dev.requests, 2, 'served once the ring is back');
});
