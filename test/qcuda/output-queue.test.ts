// OutputQueue (output.ts) on its own, beside output.test.ts (which drives it
// through OUTPUT_READ): reads by kind and by size, what `more` and `pending`
// say, the byte limit cutting a piece, the one note of a run of dropped bytes
// and where in the stream it lands, empty pushes and reads, and close.
import test from 'ava';
import { MAX_SESSION_OUTPUT, OutputQueue } from '../../backend/src/qcuda/session/output';
import { QCUDA_OUTPUT_STDERR as ERR, QCUDA_OUTPUT_STDOUT as OUT } from '../../backend/src/qcuda/proto';

const enc = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => Buffer.from(b).toString('latin1');
const note = (n: number) => `[qcuda: ${n} bytes of device output dropped]\n`;

/** Reads everything, one read per entry: [kind, text, more]. */
function drain(q: OutputQueue, max = 1 << 20): [number, string, boolean][] {
  const out: [number, string, boolean][] = [];
  for (let i = 0; i < 1000; i++) {
    const r = q.read(max);
    if (r.kind === 0) break;
    out.push([r.kind, text(r.bytes), r.more]);
  }
  return out;
}

test('an empty queue: nothing pending, a read gives kind 0 and no bytes', (t) => {
  const q = new OutputQueue();
  t.is(q.limit, MAX_SESSION_OUTPUT, 'the default limit');
  t.false(q.pending);
  t.is(q.size, 0);
  const r = q.read(100);
  t.deepEqual([r.kind, r.bytes.length, r.more], [0, 0, false]);
  q.push(OUT, new Uint8Array(0));
  t.false(q.pending, 'an empty push is nothing');
});

test('reads come in push order, one kind at a time, with `more` while anything is left', (t) => {
  const q = new OutputQueue();
  q.push(OUT, enc('a'));
  q.push(OUT, enc('b'));
  q.push(ERR, enc('E1'));
  q.push(ERR, enc('E2'));
  q.push(OUT, enc('c'));
  t.is(q.size, 7);
  t.true(q.pending);
  t.deepEqual(drain(q), [
    [OUT, 'ab', true],
    [ERR, 'E1E2', true],
    [OUT, 'c', false],
  ]);
  t.is(q.size, 0);
  t.false(q.pending);
});

test('a read takes at most max bytes, splitting pieces; size follows', (t) => {
  const q = new OutputQueue();
  q.push(OUT, enc('0123'));
  q.push(OUT, enc('4567'));
  q.push(ERR, enc('xy'));
  let r = q.read(3);
  t.deepEqual([r.kind, text(r.bytes), r.more, q.size], [OUT, '012', true, 7]);
  r = q.read(3);
  t.deepEqual([r.kind, text(r.bytes), q.size], [OUT, '345', 4], 'across two pieces');
  r = q.read(100);
  t.deepEqual([r.kind, text(r.bytes), q.size], [OUT, '67', 2], 'not into the next kind');
  r = q.read(1);
  t.deepEqual([r.kind, text(r.bytes), r.more], [ERR, 'x', true]);
  r = q.read(1);
  t.deepEqual([r.kind, text(r.bytes), r.more, q.size], [ERR, 'y', false, 0]);
});

test('a read of 0 (or less) bytes takes nothing and says what is pending', (t) => {
  const q = new OutputQueue();
  q.push(ERR, enc('kept'));
  for (const max of [0, -1]) {
    const r = q.read(max);
    t.deepEqual([r.kind, r.bytes.length, r.more], [0, 0, true]);
  }
  t.is(q.size, 4);
  t.deepEqual(drain(q), [[ERR, 'kept', false]]);
});

test('the queue keeps its own copy of pushed bytes', (t) => {
  const q = new OutputQueue();
  const b = enc('abc');
  q.push(OUT, b);
  b.fill(0x7a);
  t.deepEqual(drain(q), [[OUT, 'abc', false]]);
});

test('the limit: a piece is cut to what fits; the rest is counted and its note is read after what fitted', (t) => {
  const q = new OutputQueue(10);
  q.push(OUT, enc('0123456'));
  q.push(OUT, enc('789abc'));
  t.is(q.size, 10, 'exactly the limit');
  q.push(ERR, enc('lost'));
  q.push(OUT, enc('x'));
  t.is(q.size, 10, 'dropped bytes take no room');
  t.true(q.pending);
  t.deepEqual(drain(q), [
    [OUT, '0123456789', true],
    [ERR, note(3 + 4 + 1), false],
  ]);
  t.false(q.pending, 'the note was the last thing');
  q.push(OUT, enc('again'));
  t.deepEqual(drain(q), [[OUT, 'again', false]], 'one note per loss');
});

test('the note lands where the loss happened: before output that fits again, after what was kept', (t) => {
  const q = new OutputQueue(100);
  q.push(OUT, new Uint8Array(100).fill(0x61));
  q.push(OUT, enc('dropped')); // 7 bytes lost
  t.is(q.read(50).bytes.length, 50, 'room for 50 again');
  q.push(OUT, new Uint8Array(60).fill(0x62)); // does not fit whole while a loss is pending: dropped whole, not cut
  t.is(q.size, 50);
  // 'ok' fits: the note takes its place at once, ahead of it.
  q.push(OUT, enc('ok'));
  t.is(q.size, 50 + note(67).length + 2);
  t.deepEqual(drain(q), [
    [OUT, 'a'.repeat(50), true],
    [ERR, note(7 + 60), true],
    [OUT, 'ok', false],
  ]);
});

test('a note waits even when nothing else does: pending says so, a read gives it', (t) => {
  const q = new OutputQueue(4);
  q.push(OUT, enc('abcdef'));
  t.deepEqual(drain(q), [
    [OUT, 'abcd', true],
    [ERR, note(2), false],
  ]);
  const z = new OutputQueue(0);
  z.push(ERR, enc('all lost'));
  t.true(z.pending, 'a queue with no room still reports its losses');
  t.is(z.size, 0);
  const r = z.read(1000);
  t.deepEqual([r.kind, text(r.bytes), r.more], [ERR, note(8), false]);
});

test('an empty push does not end a loss: the note stays ahead of the next real output', (t) => {
  const q = new OutputQueue(100);
  q.push(OUT, new Uint8Array(100).fill(0x61));
  q.push(OUT, enc('lost!'));
  q.read(50);
  q.push(OUT, new Uint8Array(0));
  q.push(OUT, new Uint8Array(60).fill(0x62)); // still in the loss: does not fit whole, dropped whole
  t.is(q.size, 50);
  t.deepEqual(drain(q), [
    [OUT, 'a'.repeat(50), true],
    [ERR, note(65), false],
  ]);
});

test('over the limit (a note can take it there), what comes is counted as dropped, byte for byte', (t) => {
  const q = new OutputQueue(0);
  q.push(OUT, enc('a'));
  const n1 = note(1);
  t.is(text(q.read(1).bytes), n1[0], 'the note is placed, and read in part');
  t.is(q.size, n1.length - 1, 'over a limit of 0');
  q.push(OUT, enc('bc'));
  t.deepEqual(
    drain(q),
    [
      [ERR, n1.slice(1), true],
      [ERR, note(2), false],
    ],
    'the rest of the first note, then the second',
  );
});

test('the note counts toward size and can be read in parts', (t) => {
  const q = new OutputQueue(2);
  q.push(OUT, enc('abc'));
  t.is(text(q.read(2).bytes), 'ab');
  const n = note(1);
  const first = q.read(5);
  t.deepEqual([first.kind, text(first.bytes), first.more], [ERR, n.slice(0, 5), true]);
  t.is(q.size, n.length - 5);
  t.deepEqual(drain(q), [[ERR, n.slice(5), false]]);
  t.is(q.size, 0);
});

test('close drops what waits, and the note of a loss; later pushes are ignored', (t) => {
  const q = new OutputQueue(4);
  q.push(OUT, enc('abcdef'));
  t.true(q.pending);
  q.close();
  t.false(q.pending);
  t.is(q.size, 0);
  q.push(OUT, enc('after'));
  t.false(q.pending);
  const r = q.read(100);
  t.deepEqual([r.kind, r.bytes.length, r.more], [0, 0, false]);
});

// Regression (found by this suite): when a loss ended, the check that the new
// bytes fit was made before the note was put in front of them, so the note
// could push them past the limit and cut them (a second loss right after the
// first). Now the note's length counts: the bytes come whole or are dropped
// whole and counted in the one note.
test('bytes that end a loss are not cut by the note put in front of them', (t) => {
  const q = new OutputQueue(60);
  q.push(OUT, new Uint8Array(60).fill(0x61));
  q.push(OUT, enc('lost!')); // 5 bytes dropped
  q.read(50); // room for 50 again: enough for the 10 bytes, not for them and the note (42)
  q.push(OUT, enc('0123456789'));
  const got = drain(q);
  t.deepEqual(got[0], [OUT, 'a'.repeat(10), true]);
  t.false(
    got.some(([k, s]) => k === OUT && s.startsWith('0') && s !== '0123456789'),
    `not cut: ${JSON.stringify(got)}`,
  );
  t.is(got.filter(([k]) => k === ERR).length, 1, 'one note for one loss');
});
