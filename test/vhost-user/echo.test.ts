// The example device driven through the test frontend: every byte that comes
// back is checked, over several queues, chain shapes and feature sets.
import test, { type ExecutionContext } from 'ava';
import { EchoDevice, fnv1a, ECHO_TRAILER } from '../../backend/src/devices/echo';
import type { Frontend, GuestBuf } from '../../backend/src/vhost-user/frontend';
import { prng, randomBytes, started } from '../helpers';

interface Shape {
  indirect: boolean;
  /** Split the input / output over this many descriptors. */
  pieces: number;
  region: number;
}

/** Posts one echo request and checks every byte of the reply. */
async function roundTrip(t: ExecutionContext, fe: Frontend, q: number, data: Uint8Array, s: Shape): Promise<void> {
  const bufs: GuestBuf[] = [];
  const outLen = data.length + ECHO_TRAILER;
  const inGpa = fe.mem.alloc(Math.max(data.length, 1), 1, s.region);
  const outGpa = fe.mem.alloc(outLen, 1, s.region);
  fe.mem.bytes(inGpa, data.length).set(data);
  fe.mem.bytes(outGpa, outLen).fill(0xee);
  split(inGpa, data.length, s.pieces).forEach((b) => bufs.push(b));
  split(outGpa, outLen, s.pieces).forEach((b) => bufs.push({ ...b, write: true }));
  const used = await fe.submit(q, bufs, s.indirect);
  t.is(used.len, outLen);
  const out = fe.mem.bytes(outGpa, outLen);
  t.deepEqual(out.subarray(0, data.length), data);
  const v = new DataView(out.buffer, out.byteOffset + data.length, ECHO_TRAILER);
  t.is(v.getUint32(0, true), fnv1a(data));
  t.is(v.getUint32(4, true), q);
}

function split(gpa: bigint, len: number, pieces: number): GuestBuf[] {
  const out: GuestBuf[] = [];
  const step = Math.max(1, Math.ceil(len / pieces));
  for (let at = 0; at < len; at += step) out.push({ gpa: gpa + BigInt(at), len: Math.min(step, len - at) });
  return out;
}

for (const eventIdx of [true, false]) {
  test(`thousands of requests on 4 queues, direct and indirect, EVENT_IDX ${eventIdx ? 'on' : 'off'}`, async (t) => {
    const dev = new EchoDevice({ queues: 4 });
    const { fe } = await started(t, dev, { size: 64, eventIdx });
    const rnd = prng(eventIdx ? 1 : 2);
    let sent = 0;
    const scratch = fe.mem.mark();
    for (let round = 0; round < 25; round++) {
      fe.mem.rewind(scratch);
      const batch: Promise<void>[] = [];
      for (let k = 0; k < 48; k++) {
        const q = k % 4;
        const shape = { indirect: rnd() < 0.5, pieces: 1 + ((rnd() * 4) | 0), region: rnd() < 0.5 ? 0 : 1 };
        batch.push(roundTrip(t, fe, q, randomBytes(rnd, 1 + ((rnd() * 3000) | 0)), shape));
        sent++;
      }
      await Promise.all(batch);
    }
    t.is(dev.requests, sent);
    t.true(sent >= 1000);
  });
}

test('out-of-order completions from an async device', async (t) => {
  const dev = new EchoDevice({ queues: 2, maxDelayMs: 5 });
  const { fe } = await started(t, dev, { size: 128 });
  const rnd = prng(7);
  const jobs: Promise<void>[] = [];
  for (let k = 0; k < 200; k++)
    jobs.push(roundTrip(t, fe, k % 2, randomBytes(rnd, 1 + k * 7), { indirect: k % 3 === 0, pieces: 2, region: 0 }));
  await Promise.all(jobs);
  t.is(dev.requests, 200);
});

test('rings above 4 GiB of guest-physical space and memory sent with ADD_MEM_REG', async (t) => {
  const { fe } = await started(t, new EchoDevice({ queues: 1 }), { ringRegion: 1, addMemReg: true, size: 32 });
  t.true(fe.queues[0].ring.desc >= 1n << 32n);
  await roundTrip(t, fe, 0, randomBytes(prng(3), 4096), { indirect: false, pieces: 3, region: 1 });
  await roundTrip(t, fe, 0, randomBytes(prng(4), 100), { indirect: true, pieces: 5, region: 0 });
});

test('a 1 MiB request in one chain of large buffers', async (t) => {
  const { GuestMemory } = await import('../../backend/src/vhost-user/frontend');
  const mem = new GuestMemory([
    { gpa: 0n, size: 8 << 20 },
    { gpa: 1n << 32n, size: 8 << 20 },
  ]);
  const { fe } = await started(t, new EchoDevice({ queues: 1 }), { size: 16 }, mem);
  await roundTrip(t, fe, 0, randomBytes(prng(5), 1 << 20), { indirect: true, pieces: 4, region: 1 });
});

// The benchmarks' driver loop in C (addon ringLoop, Frontend.loop) against
// the echo device in a backend process of its own (the loop holds this
// process's thread, as a guest driver spinning for its answer holds a vCPU).
test.serial(
  'a driver loop in C makes n steps of calls (one chain, then two), each answered; the ring goes on after it; a bad answer stops it',
  async (t) => {
    const { spawn } = await import('node:child_process');
    const path = await import('node:path');
    const { native } = await import('../../backend/src/vhost-user');
    const { Frontend: Fe, GuestMemory } = await import('../../backend/src/vhost-user/frontend');
    const [mine, theirs] = native.socketPair();
    const child = spawn(
      process.execPath,
      [path.resolve(__dirname, '..', '..', 'backend', 'src', 'cli', 'backend.js'), '--fd=3', '--device=echo', '--queues=1', '--poll-us=50'],
      { stdio: ['ignore', 'ignore', 'inherit', theirs] },
    );
    native.close(theirs);
    const exited = new Promise((r) => child.once('exit', r));
    t.teardown(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    const fe = Fe.fromFd(mine, new GuestMemory());
    await fe.negotiate();
    await fe.start({ queues: 1, size: 64 });
    const src = fe.mem.alloc(64, 64);
    const dst = fe.mem.alloc(64 + ECHO_TRAILER, 64);
    fe.mem.bytes(src, 64).fill(0); // the echo's first u32, read as the reply's status, is 0
    const bufs: GuestBuf[] = [
      { gpa: src, len: 64 },
      { gpa: dst, len: 64 + ECHO_TRAILER, write: true },
    ];
    const echoOf = (d: bigint) => new DataView(fe.mem.bytes(d + 64n, 4).slice().buffer).getUint32(0, true);
    const ns = fe.loop(0, [bufs], 500, [fe.mem.bytes(dst, 4)]);
    t.is(ns.length, 500);
    t.true(
      ns.every((x) => x > 0 && x < 5e9),
      'each call took some time, none the timeout',
    );
    t.is(fnv1a(fe.mem.bytes(src, 64)), echoOf(dst), 'the last answer is the echo');
    // A step of two calls, each posted once the one before it is answered.
    const src2 = fe.mem.alloc(64, 64);
    const dst2 = fe.mem.alloc(64 + ECHO_TRAILER, 64);
    fe.mem.bytes(src2, 64).fill(0);
    fe.mem.bytes(src2 + 4n, 60).fill(9);
    const bufs2: GuestBuf[] = [
      { gpa: src2, len: 64 },
      { gpa: dst2, len: 64 + ECHO_TRAILER, write: true },
    ];
    const steps = fe.loop(0, [bufs, bufs2], 200, [fe.mem.bytes(dst, 4), fe.mem.bytes(dst2, 4)]);
    t.is(steps.length, 200);
    t.is(fnv1a(fe.mem.bytes(src2, 64)), echoOf(dst2), 'the second chain of the step was answered with its own echo');
    t.not(echoOf(dst), echoOf(dst2));
    // The ring's state went on with the loop: a call the usual way works after it.
    await roundTrip(
      t,
      fe,
      0,
      Uint8Array.from({ length: 33 }, (_, i) => i),
      { indirect: false, pieces: 2, region: 0 },
    );
    fe.mem.bytes(src2, 4).fill(1);
    t.throws(() => fe.loop(0, [bufs, bufs2], 3, [fe.mem.bytes(dst, 4), fe.mem.bytes(dst2, 4)]), {
      message: /step 0, call 1 answered status/,
    });
    fe.close();
  },
);
