// Callbacks (callbacks.ts) on its own: host functions marked on streams, the
// gates later work waits at, the order CALLBACK_WAIT answers them in,
// deferred posted work and its byte limit, event gates, and what reset and
// close do to marks, gates and parked waits.
import test from 'ava';
import { Callbacks, MAX_CALLBACKS, MAX_WAITERS, type Reached } from '../../backend/src/qcuda/session/callbacks';
import { CudaErr, CudaError } from '../../backend/src/qcuda/cuda-error';
import { QCUDA_STREAM_LEGACY, Status } from '../../backend/src/qcuda/proto';

const S1 = 0x11n;
const S2 = 0x22n;
const LEGACY = QCUDA_STREAM_LEGACY;

/** Lets every promise that can settle now settle. */
async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
}

interface Watched<T> {
  done: boolean;
  value?: T;
  error?: unknown;
}
/** Records when p settles, and how. */
function watch<T>(p: Promise<T> | undefined): Watched<T> {
  if (p === undefined) throw new Error('no promise to watch');
  const w: Watched<T> = { done: false };
  p.then(
    (value) => Object.assign(w, { done: true, value }),
    (error) => Object.assign(w, { done: true, error }),
  );
  return w;
}

/** A promise settled from outside. */
function later<T>(): { p: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const p = new Promise<T>((r) => (resolve = r));
  return { p, resolve };
}

/** The CudaError code a synchronous call throws. */
function code(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (e) {
    if (e instanceof CudaError) return e.code;
    throw e;
  }
  return undefined;
}

const reached = (id: bigint, status = 0): Reached => ({ id, status });

test('no marks: no gates, nothing to wait for on any stream', (t) => {
  const cb = new Callbacks(0n);
  t.is(cb.gate(S1), undefined);
  t.is(cb.gate(LEGACY), undefined);
  t.is(cb.all(), undefined);
  t.is(cb.eventGate(0x99n), undefined);
  t.is(cb.waiting, 0);
});

test('a mark gates its own stream until the guest says the function ran; other streams pass', async (t) => {
  const cb = new Callbacks(0n);
  cb.mark(S1, 1n, Promise.resolve(0));
  t.is(cb.waiting, 1);
  t.is(cb.gate(S2), undefined, 'another stream is not held');
  const g = watch(cb.gate(S1));
  const all = watch(cb.all());
  const legacy = watch(cb.gate(LEGACY));
  const w = await cb.wait(0n);
  t.deepEqual(w, reached(1n), 'the GPU reached it: handed out to run');
  await flush();
  t.false(g.done, 'reaching the point is not running the function');
  t.false(all.done);
  t.false(legacy.done, 'the NULL stream waits for every stream');
  const next = watch(cb.wait(1n));
  await flush();
  t.true(g.done, 'ran: the gate opens');
  t.true(all.done);
  t.true(legacy.done);
  t.false(next.done, 'and the callback thread parks for the next one');
  t.is(cb.waiting, 0);
  t.is(cb.gate(S1), undefined, 'an opened gate is dropped');
  t.is(cb.all(), undefined);
});

test('a mark on the NULL stream gates every stream; a stream with its own mark waits for both', async (t) => {
  const cb = new Callbacks(0n);
  const l = later<number>();
  cb.mark(LEGACY, 1n, l.p);
  cb.mark(S1, 2n, Promise.resolve(0));
  const s1 = watch(cb.gate(S1));
  const s2 = watch(cb.gate(S2));
  t.deepEqual(await cb.wait(0n), reached(2n));
  const w = watch(cb.wait(2n));
  await flush();
  t.false(s1.done, "S1 still waits for the NULL stream's function");
  t.false(s2.done, "S2 has none of its own but waits for the NULL stream's");
  t.false(w.done, 'function 1 is not reached yet');
  t.is(cb.gate(S2), cb.gate(S2), "S2's gate is the NULL stream's (no own gate to combine with)");
  l.resolve(0);
  await flush();
  t.deepEqual(w.value, reached(1n));
  t.false(s1.done);
  void cb.wait(1n);
  await flush();
  t.true(s1.done);
  t.true(s2.done);
  t.is(cb.gate(S1), undefined);
});

test('two marks on one stream: the gate opens only when both have run, in order', async (t) => {
  const cb = new Callbacks(0n);
  cb.mark(S1, 1n, Promise.resolve(0));
  const after1 = watch(cb.gate(S1));
  cb.mark(S1, 2n, Promise.resolve(0));
  const after2 = watch(cb.gate(S1));
  t.deepEqual(await cb.wait(0n), reached(1n));
  t.deepEqual(await cb.wait(1n), reached(2n), 'already reached: answered at once');
  await flush();
  t.true(after1.done, 'the gate taken after the first mark opens when it ran');
  t.false(after2.done, 'the one taken after the second does not');
  t.not(cb.gate(S1), undefined);
  void cb.wait(2n);
  await flush();
  t.true(after2.done);
  t.is(cb.gate(S1), undefined);
});

test('a later mark keeps the stream gated behind earlier marks and deferred work, even if it runs first', async (t) => {
  const cb = new Callbacks(0n);
  const w1 = watch(cb.wait(0n));
  const w2 = watch(cb.wait(0n));
  cb.mark(S1, 1n, Promise.resolve(0));
  cb.mark(S1, 2n, Promise.resolve(0));
  const g = watch(cb.gate(S1));
  await flush();
  t.deepEqual([w1.value, w2.value], [reached(1n), reached(2n)], 'both handed out to two waits');
  const parked = cb.wait(2n); // the second says it ran first (and parks for the next)
  await flush();
  t.false(g.done, 'the first has not run: the stream stays gated');
  void cb.wait(1n);
  await flush();
  t.true(g.done);

  // Deferred work, then a mark on the same stream: the mark's gate includes the work.
  const work = later<void>();
  cb.defer(
    S2,
    work.p,
    async () => {},
    () => t.fail(),
    1,
  );
  cb.mark(S2, 3n, Promise.resolve(0));
  const g2 = watch(cb.gate(S2));
  t.deepEqual(await parked, reached(3n), 'the first parked wait gets it');
  void cb.wait(3n);
  await flush();
  t.false(g2.done, 'the function ran, the work before it has not');
  work.resolve();
  await flush();
  t.true(g2.done);
});

test('reset forgets a function reached and not yet handed out: the next wait parks', async (t) => {
  const cb = new Callbacks(0n);
  cb.mark(S1, 1n, Promise.resolve(0));
  await flush();
  cb.reset();
  const w = watch(cb.wait(0n));
  await flush();
  t.false(w.done);
  t.is(
    code(() => cb.wait(1n)),
    CudaErr.InvalidValue,
  );
});

test("functions are answered in the order the GPU reaches them (not marked), with the stream's status", async (t) => {
  const cb = new Callbacks(0n);
  const a = later<number>();
  const b = later<number>();
  const c = later<number>();
  cb.mark(S1, 10n, a.p);
  cb.mark(S2, 20n, b.p);
  cb.mark(LEGACY, 30n, c.p);
  c.resolve(CudaErr.IllegalAddress);
  a.resolve(0);
  await flush();
  const got: Reached[] = [await cb.wait(0n)];
  got.push(await cb.wait(got[0].id));
  const third = watch(cb.wait(got[1].id));
  await flush();
  t.false(third.done, 'the third is not reached yet: the wait parks');
  b.resolve(CudaErr.LaunchFailure);
  await flush();
  got.push(third.value!);
  t.deepEqual(got, [reached(30n, CudaErr.IllegalAddress), reached(10n), reached(20n, CudaErr.LaunchFailure)]);
});

test('parked waits are answered first come, first served', async (t) => {
  const cb = new Callbacks(0n);
  const w1 = watch(cb.wait(0n));
  const w2 = watch(cb.wait(0n));
  const l1 = later<number>();
  const l2 = later<number>();
  cb.mark(S1, 1n, l1.p);
  cb.mark(S2, 2n, l2.p);
  await flush();
  t.false(w1.done);
  l2.resolve(7);
  await flush();
  t.deepEqual([w1.value, w2.done], [reached(2n, 7), false], 'the oldest wait gets the first reached');
  l1.resolve(0);
  await flush();
  t.deepEqual(w2.value, reached(1n));
  // Both were handed out by being given to a parked wait: both may be said to have run.
  t.is(
    code(() => void cb.wait(2n)),
    undefined,
  );
  t.is(
    code(() => void cb.wait(1n)),
    undefined,
  );
  t.is(cb.waiting, 0);
});

test('wait refuses a done id that was never marked, not handed out yet, or already reported', async (t) => {
  const cb = new Callbacks(0n);
  const l = later<number>();
  cb.mark(S1, 5n, l.p);
  t.is(
    code(() => cb.wait(9n)),
    CudaErr.InvalidValue,
    'never marked',
  );
  t.is(
    code(() => cb.wait(5n)),
    CudaErr.InvalidValue,
    'marked, not reached',
  );
  l.resolve(0);
  await flush();
  t.is(
    code(() => cb.wait(5n)),
    CudaErr.InvalidValue,
    'reached but not handed out yet',
  );
  t.is(cb.waiting, 1, 'refusals change nothing');
  t.deepEqual(await cb.wait(0n), reached(5n));
  void cb.wait(5n);
  t.is(
    code(() => cb.wait(5n)),
    CudaErr.InvalidValue,
    'reported twice',
  );
});

test('mark refuses id 0, an id in use, and more than MAX_CALLBACKS; an id that ran may be used again', async (t) => {
  const cb = new Callbacks(0n);
  const never = new Promise<number>(() => {});
  t.is(
    code(() => cb.mark(S1, 0n, never)),
    CudaErr.InvalidValue,
  );
  cb.mark(S1, 1n, Promise.resolve(0));
  t.is(
    code(() => cb.mark(S2, 1n, never)),
    CudaErr.InvalidValue,
    'in use, on another stream too',
  );
  t.deepEqual(await cb.wait(0n), reached(1n));
  void cb.wait(1n);
  t.is(
    code(() => cb.mark(S2, 1n, never)),
    undefined,
    'ran: free again',
  );
  for (let id = 2n; cb.waiting < MAX_CALLBACKS; id++) cb.mark(S1, id, never);
  t.is(cb.waiting, MAX_CALLBACKS);
  t.is(
    code(() => cb.mark(S1, 1_000_000n, never)),
    CudaErr.MemoryAllocation,
  );
  t.is(cb.waiting, MAX_CALLBACKS);
});

test('at most MAX_WAITERS waits park; one more is refused', (t) => {
  const cb = new Callbacks(0n);
  for (let i = 0; i < MAX_WAITERS; i++)
    t.is(
      code(() => void cb.wait(0n)),
      undefined,
    );
  t.is(
    code(() => cb.wait(0n)),
    Status.TOO_LARGE,
  );
});

test('reset answers parked waits with id 0, opens every gate, forgets what was reached; marking goes on', async (t) => {
  const cb = new Callbacks(0n);
  const late = later<number>();
  cb.mark(S1, 1n, Promise.resolve(0)); // reached, queued, never handed out
  cb.mark(S2, 2n, late.p); // reached only after the reset
  await flush();
  t.deepEqual(await cb.wait(0n), reached(1n));
  const parked = [watch(cb.wait(0n)), watch(cb.wait(0n))];
  const g1 = watch(cb.gate(S1));
  const g2 = watch(cb.gate(S2));
  const deferred = { ran: false };
  cb.defer(
    S2,
    cb.gate(S2)!,
    async () => void (deferred.ran = true),
    () => t.fail(),
    8,
  );
  cb.reset();
  await flush();
  t.deepEqual(
    parked.map((w) => w.value),
    [reached(0n), reached(0n)],
    'each parked wait: nothing to run, wait again',
  );
  t.true(g1.done && g2.done, 'natively they never run: their gates open');
  t.true(deferred.ran, 'and work deferred behind them runs');
  t.is(cb.waiting, 0);
  t.is(
    code(() => cb.wait(1n)),
    CudaErr.InvalidValue,
    'a handed-out function is forgotten',
  );
  const w = watch(cb.wait(0n));
  late.resolve(0);
  await flush();
  t.false(w.done, 'a forgotten function reached after the reset is not handed out');
  cb.mark(S1, 2n, Promise.resolve(3));
  await flush();
  t.deepEqual(w.value, reached(2n, 3), 'ids are free again and marks work after a reset');
});

test('close rejects parked waits, opens every gate, and refuses marks and waits after', async (t) => {
  const cb = new Callbacks(0n);
  const l = later<number>();
  cb.mark(S1, 1n, l.p);
  const w = watch(cb.wait(0n));
  const g = watch(cb.gate(S1));
  cb.close();
  await flush();
  t.true(w.error instanceof CudaError && w.error.code === Status.NO_SESSION, 'the parked wait ends with NO_SESSION');
  t.true(g.done && g.error === undefined, 'the gate opens');
  t.is(cb.waiting, 0);
  t.is(
    code(() => cb.mark(S1, 2n, Promise.resolve(0))),
    Status.NO_SESSION,
  );
  t.is(
    code(() => cb.wait(0n)),
    Status.NO_SESSION,
  );
  l.resolve(0); // reached after the close: ignored, nothing throws
  await flush();
  t.pass();
});

test("defer: work runs once its gate opens and becomes the stream's gate until it has run", async (t) => {
  const cb = new Callbacks(0n);
  const order: string[] = [];
  cb.mark(S1, 1n, Promise.resolve(0));
  const work = later<void>();
  cb.defer(
    S1,
    cb.gate(S1)!,
    async () => {
      order.push('first starts');
      await work.p;
      order.push('first ends');
    },
    () => t.fail(),
    100,
  );
  cb.defer(
    S1,
    cb.gate(S1)!,
    async () => void order.push('second'),
    () => t.fail(),
    50,
  );
  const g = watch(cb.gate(S1));
  t.is(cb.deferredBytes, 150n);
  await flush();
  t.deepEqual(order, [], 'nothing runs before the function has');
  t.deepEqual(await cb.wait(0n), reached(1n));
  void cb.wait(1n);
  await flush();
  t.deepEqual(order, ['first starts']);
  t.false(g.done, 'the stream stays gated while deferred work runs');
  t.is(cb.gate(S2), undefined, 'other streams are not');
  work.resolve();
  await flush();
  t.deepEqual(order, ['first starts', 'first ends', 'second'], 'deferred entries keep their order');
  t.true(g.done);
  t.is(cb.deferredBytes, 0n, 'their bytes are given back when they have run');
  t.is(cb.gate(S1), undefined);
});

test('defer: a failure goes to onError, is counted back, and does not keep the stream gated', async (t) => {
  const cb = new Callbacks(0n);
  const errors: unknown[] = [];
  const boom = new CudaError(CudaErr.LaunchFailure, 'boom');
  const gate = later<void>();
  cb.defer(
    S1,
    gate.p,
    async () => {
      throw boom;
    },
    (e) => errors.push(e),
    10,
  );
  let ran = false;
  cb.defer(
    S1,
    cb.gate(S1)!,
    async () => void (ran = true),
    (e) => errors.push(e),
    10,
  );
  gate.resolve();
  await flush();
  t.deepEqual(errors, [boom]);
  t.true(ran, 'the next deferred entry still runs');
  t.is(cb.deferredBytes, 0n);
  t.is(cb.gate(S1), undefined);
});

test('defer on the NULL stream gates the others; defer on another stream gates the NULL stream', async (t) => {
  const cb = new Callbacks(0n);
  const a = later<void>();
  cb.defer(
    LEGACY,
    a.p,
    async () => {},
    () => t.fail(),
    1,
  );
  const s1 = watch(cb.gate(S1));
  a.resolve();
  await flush();
  t.true(s1.done);
  const b = later<void>();
  cb.defer(
    S2,
    b.p,
    async () => {},
    () => t.fail(),
    1,
  );
  t.is(cb.gate(S1), undefined, "S2's work does not hold S1");
  const legacy = watch(cb.gate(LEGACY));
  await flush();
  t.false(legacy.done);
  b.resolve();
  await flush();
  t.true(legacy.done);
});

test('an event recorded by deferred work has a gate until that record has run', async (t) => {
  const cb = new Callbacks(0n);
  const EV = 0x77n;
  const gate = later<void>();
  const record = later<void>();
  cb.defer(
    S1,
    gate.p,
    () => record.p,
    () => t.fail(),
    10,
    EV,
  );
  t.is(cb.eventGate(0x78n), undefined, 'another event has none');
  const e = watch(cb.eventGate(EV));
  gate.resolve();
  await flush();
  t.false(e.done, 'the record has not run yet');
  record.resolve();
  await flush();
  t.true(e.done);
  t.is(cb.eventGate(EV), undefined, 'dropped once it ran');
  // A later record replaces the gate; the earlier one settling does not drop the later one.
  const g1 = later<void>();
  const g2 = later<void>();
  cb.defer(
    S1,
    g1.p,
    async () => {},
    () => t.fail(),
    1,
    EV,
  );
  cb.defer(
    S2,
    g2.p,
    async () => {},
    () => t.fail(),
    1,
    EV,
  );
  const second = cb.eventGate(EV);
  g1.resolve();
  await flush();
  t.is(cb.eventGate(EV), second, "still the later record's gate");
  g2.resolve();
  await flush();
  t.is(cb.eventGate(EV), undefined);
});

test('the deferred-bytes limit: up to it is fine, past it fails at once with MemoryAllocation and holds nothing', async (t) => {
  const cb = new Callbacks(1000n);
  const gate = later<void>();
  let ran = 0;
  const fn = async () => void ran++;
  cb.defer(S1, gate.p, fn, () => t.fail(), 600);
  cb.defer(S1, gate.p, fn, () => t.fail(), 400);
  t.is(cb.deferredBytes, 1000n, 'exactly the limit');
  t.is(
    code(() => cb.defer(S1, gate.p, fn, () => t.fail(), 1)),
    CudaErr.MemoryAllocation,
  );
  t.is(cb.deferredBytes, 1000n, 'the refused entry is not counted');
  gate.resolve();
  await flush();
  t.is(ran, 2, 'the refused entry never runs');
  t.is(cb.deferredBytes, 0n);
  t.is(
    code(() => cb.defer(S1, Promise.resolve(), fn, () => t.fail(), 1000)),
    undefined,
    'room again once they ran',
  );
  t.is(
    code(() => cb.defer(S1, Promise.resolve(), fn, () => t.fail(), 1)),
    CudaErr.MemoryAllocation,
  );
  await flush();
  t.is(ran, 3);
});

test('a limit of 0 means unbounded', async (t) => {
  const cb = new Callbacks(0n);
  const gate = later<void>();
  cb.defer(
    S1,
    gate.p,
    async () => {},
    () => t.fail(),
    1 << 30,
  );
  cb.defer(
    S1,
    gate.p,
    async () => {},
    () => t.fail(),
    1 << 30,
  );
  t.is(cb.deferredBytes, 2n << 30n);
  gate.resolve();
  await flush();
  t.is(cb.deferredBytes, 0n);
});
