// Ring polling (VhostUserDevice.pollUs, vhost-user/platform/busy-poll.ts): while a device is
// busy its rings are polled with the driver's kicks suppressed, every
// request is still served, and once the window has passed kicks are asked
// for again and the process sleeps (no CPU).
import test from 'ava';
import { EchoDevice, ECHO_TRAILER } from '../../backend/src/devices/echo';
import { BusyPoll } from '../../backend/src/vhost-user';
import type { Frontend } from '../../backend/src/vhost-user/frontend';
import { started, tick } from '../helpers';

/** One echo of `n` bytes on queue 0; resolves once its bytes came back right. */
async function echo(fe: Frontend, n: number, fill: number): Promise<boolean> {
  const at = fe.mem.mark();
  const src = fe.mem.alloc(n, 1);
  const dst = fe.mem.alloc(n + ECHO_TRAILER, 1);
  fe.mem.bytes(src, n).fill(fill);
  const used = await fe.submit(0, [
    { gpa: src, len: n },
    { gpa: dst, len: n + ECHO_TRAILER, write: true },
  ]);
  const ok = used.len === n + ECHO_TRAILER && fe.mem.bytes(dst, n).every((b) => b === fill);
  fe.mem.rewind(at);
  return ok;
}

/** CPU milliseconds this process (backend and frontend both live here) uses over `ms`. */
async function cpuOver(ms: number): Promise<number> {
  const before = process.cpuUsage();
  await tick(ms);
  const d = process.cpuUsage(before);
  return (d.user + d.system) / 1000;
}

const ROUNDS = 100;
/** Long enough that a loaded CI machine does not pause past it between two requests. */
const WINDOW_US = 200_000;

for (const eventIdx of [true, false]) {
  const mode = `EVENT_IDX ${eventIdx ? 'on' : 'off'}`;

  test.serial(`without polling each request after an answer needs a kick (${mode})`, async (t) => {
    const { fe } = await started(t, new EchoDevice({ queues: 1 }), { queues: 1, size: 64, eventIdx });
    for (let i = 0; i < ROUNDS; i++) t.true(await echo(fe, 64 + i, i));
    t.is(fe.queues[0].kicks, ROUNDS);
  });

  test.serial(`a polled ring serves requests without kicks, then asks for them again and sleeps (${mode})`, async (t) => {
    const dev = new EchoDevice({ queues: 1, pollUs: WINDOW_US });
    const { fe } = await started(t, dev, { queues: 1, size: 64, eventIdx });
    for (let i = 0; i < ROUNDS; i++) t.true(await echo(fe, 64 + i, i));
    t.is(dev.requests, ROUNDS);
    // The first request woke the ring; the rest came while it was polled.
    t.true(fe.queues[0].kicks <= 3, `${fe.queues[0].kicks} kicks for ${ROUNDS} requests`);
    // Past the window the process sleeps: no CPU, whatever is polled.
    await tick(WINDOW_US / 1000 + 100);
    const idle = await cpuOver(300);
    t.true(idle < 60, `${idle} ms of CPU in 300 ms idle`);
    // And the ring wants kicks again: the next request sends one and is served.
    const kicks = fe.queues[0].kicks;
    t.true(await echo(fe, 10, 0xab));
    t.is(fe.queues[0].kicks, kicks + 1);
  });

  test.serial(`a driver that polls takes no interrupts while it polls, though the device polls too (${mode})`, async (t) => {
    // An interrupt taken mid-window must not re-arm it: the device would then
    // interrupt for every answer (an eventfd write there, a wake-up here).
    const dev = new EchoDevice({ queues: 1, pollUs: WINDOW_US });
    const { fe } = await started(t, dev, { queues: 1, size: 64, eventIdx, pollUs: WINDOW_US });
    for (let i = 0; i < ROUNDS; i++) t.true(await echo(fe, 64 + i, i));
    t.true(fe.queues[0].calls <= 3, `${fe.queues[0].calls} interrupts for ${ROUNDS} answers`);
  });

  test.serial(`requests made while the window closes are not lost (${mode})`, async (t) => {
    // A short window: many requests land just before, during and after its end.
    const dev = new EchoDevice({ queues: 1, pollUs: 50 });
    const { fe } = await started(t, dev, { queues: 1, size: 64, eventIdx });
    for (let i = 0; i < 300; i++) {
      if (i % 3 === 0) await new Promise((r) => setTimeout(r, 0));
      t.true(await echo(fe, 8, i & 0xff));
    }
    t.is(dev.requests, 300);
  });
}

test.serial(
  'a device given the poller (usePoll) has its kept check run as each window opens, on each turn, and once expired; never while idle',
  async (t) => {
    const calls: boolean[] = [];
    class Polled extends EchoDevice {
      given = 0;
      usePoll(poll: BusyPoll): void {
        this.given++;
        poll.keep((expired) => calls.push(expired));
      }
    }
    const dev = new Polled({ queues: 1, pollUs: 2000 });
    const { fe } = await started(t, dev, { queues: 1, size: 64 });
    t.is(dev.given, 1, 'the backend hands its poller over once');
    t.true(await echo(fe, 16, 1));
    await tick(50);
    const first = calls.length;
    t.true(first >= 2, `${first} calls`);
    t.is(calls.filter((e) => e).length, 1, 'one window, one last turn');
    t.true(calls[first - 1], 'the last call is the expired one');
    await tick(100);
    t.is(calls.length, first, 'not called while idle');
    t.true(await echo(fe, 16, 2));
    await tick(50);
    t.is(calls.filter((e) => e).length, 2, 'a second window, a second last turn');
    t.false(calls[first], 'the second window opens with a call that is not expired');
    const unpolled = new Polled({ queues: 1, pollUs: 0 });
    await started(t, unpolled, { queues: 1, size: 64 });
    t.is(unpolled.given, 0, 'no poller where the rings are not polled');
  },
);

// Spinning (BusyPoll spinUs): a turn waits on its checks' quiet() instead of
// letting the event loop turn, only while every check can say it is quiet.
test.serial('a turn spins while every check is quiet, and runs the checks as soon as one is not', async (t) => {
  const poll = new BusyPoll(100_000, 20_000);
  let asked = 0;
  const seen: number[] = [];
  poll.add(
    () => seen.push(asked),
    () => ++asked < 500,
  );
  poll.touch();
  await new Promise((r) => setImmediate(r));
  await new Promise((r) => setImmediate(r));
  t.true(seen.length >= 1);
  t.is(seen[0], 500, 'the first turn asked until the check was not quiet, then ran it');
});

test.serial('no turn spins while a check cannot say it is quiet', async (t) => {
  // A window of 200 ms, waited for up to 1 s: turns enough even on a loaded machine.
  const poll = new BusyPoll(200_000, 5_000);
  let asked = 0;
  let turns = 0;
  const quietOne = (): void => {};
  poll.add(quietOne, () => {
    asked++;
    return true;
  });
  poll.add(() => turns++);
  poll.touch();
  const until = Date.now() + 1000;
  while (turns < 2 && Date.now() < until) await new Promise((r) => setTimeout(r, 5));
  t.true(turns >= 2, `${turns} turns`);
  t.is(asked, 0, 'quiet() was never asked');
});

// Spinning after an answer (BusyPoll.spinAfterAnswer): the caller's next
// request is taken in the same turn, not after a turn of the event loop;
// bounded, so the loop still turns.
test.serial(
  'after an answer a turn spins until a check is not quiet and says so; never outside a turn, nor once the turn has run long',
  async (t) => {
    // A turn's bound of 50 ms here (0.2 ms in use): the first check must run within it even on a loaded machine.
    const poll = new BusyPoll(500_000, 20_000, 50_000);
    let asked = 0;
    let quietFor = 0;
    const results: { spun: boolean; asks: number }[] = [];
    poll.add(
      () => {
        if (results.length >= 2) return;
        if (results.length === 1) {
          const until = performance.now() + 60; // past the turn's bound (50 ms)
          while (performance.now() < until);
        }
        quietFor = asked + 300;
        const before = asked;
        results.push({ spun: poll.spinAfterAnswer(), asks: asked - before });
      },
      () => ++asked < quietFor,
    );
    t.false(poll.spinAfterAnswer(), 'no turn yet: no spin');
    t.is(asked, 0);
    poll.touch();
    for (let i = 0; i < 4; i++) await new Promise((r) => setImmediate(r));
    t.deepEqual(results[0], { spun: true, asks: 300 }, 'the spin asked until the check was no longer quiet');
    t.deepEqual(results[1], { spun: false, asks: 0 }, 'a turn past its bound does not spin');
  },
);
