// The device output capture of qcuda_cuda.node (addon/src/cuda_output.h), in
// a child process since it takes fds 1 and 2 over: what lands on fd 1 and
// what fd 2 carries as device assert lines (with the lines of a message that
// holds newlines) is captured (drained at once, or delivered from the event
// loop), every other fd 2 line is delivered too, a piece of its own each
// (kind 3), never to the real stderr, which only outputWriteStderr reaches;
// the queue is bounded with a note of what was dropped, and stopping puts
// fds 1 and 2 back. At exit with the capture running, a few of the other
// lines reach the real stderr, marked and escaped. No GPU needed.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const ADDON = path.resolve(__dirname, '..', '..', '..', 'addon', 'build', 'Release', 'qcuda_cuda.node');
const ASSERT = 'k.cu:7: void k(int): block: [1,0,0], thread: [2,0,0] Assertion `x == 0` failed.\n';
// An assert whose message (guest text) holds newlines: its lines are the assert's, up to the one ending "` failed.".
const ASSERT_LINES = 'k.cu:9: void k(int): block: [0,0,0], thread: [0,0,0] Assertion `y\nqcuda-backend: forged\n` failed.\n';
const MIB = 1 << 20;

// Run by the child; prints its findings as JSON on the restored stdout.
const CHILD = `
const fs = require('fs');
const n = require(process.env.ADDON);
const got = [];
const take = () => got.splice(0).map(([k, b]) => [k, b.toString('latin1')]);
const join = (pieces, kind) => pieces.filter(([k]) => k === kind).map(([, s]) => s).join('');
const fds = () => [fs.readlinkSync('/proc/self/fd/1'), fs.readlinkSync('/proc/self/fd/2')];
const before = fds();
process.stdout; process.stderr;
n.outputDrain(); // not running: nothing happens
n.outputStart((kind, bytes) => got.push([kind, Buffer.from(bytes)]));
const r = { running: n.outputStats().running };
try { n.outputStart(() => {}); } catch (e) { r.again = e.message; }
fs.writeSync(1, 'printf one\\n');
fs.writeSync(2, 'log: first\\n');
fs.writeSync(2, ${JSON.stringify(ASSERT)});
fs.writeSync(2, ${JSON.stringify(ASSERT_LINES)});
n.outputWriteStderr(Buffer.from('own: to the real stderr\\n'));
fs.writeSync(2, 'log: partial ');
fs.writeSync(1, 'printf two, no newline');
fs.writeSync(2, 'line\\nlog: second\\n');
console.error('log: console.error');
fs.writeSync(2, 'x'.repeat(40000) + '\\n'); // longer than a line may be: passed on in pieces
n.outputDrain();
const drained = take();
r.drainedOut = join(drained, 1);
r.drainedErr = join(drained, 2);
r.otherLines = drained.filter(([k]) => k === 3).map(([, s]) => s.length > 100 ? s.length : s);
fs.writeSync(1, 'from the loop\\n');
const t0 = Date.now();
const poll = setInterval(() => {
  if (got.length === 0 && Date.now() - t0 < 10000) return;
  clearInterval(poll);
  r.fromLoop = join(take(), 1);
  const mib = Buffer.alloc(${MIB}, 0x41);
  for (let i = 0; i < 5; i++) fs.writeSync(1, mib); // while nobody delivers: 4 MiB are kept
  n.outputDrain();
  const bounded = take();
  r.boundedOut = join(bounded, 1).length;
  r.boundedErr = join(bounded, 2);
  r.statsRunning = n.outputStats();
  fs.writeSync(1, 'left at stop\\n');
  n.outputStop();
  r.atStop = join(take(), 1);
  r.stats = n.outputStats();
  r.fdsBack = JSON.stringify(fds()) === JSON.stringify(before);
  fs.writeSync(1, JSON.stringify(r) + '\\n');
  fs.writeSync(2, 'after stop\\n');
}, 10);
`;

test('the capture takes device output from fds 1 and 2, passes other stderr lines through, bounds its queue, restores the fds', (t) => {
  const c = spawnSync(process.execPath, ['-e', CHILD], { env: { ...process.env, ADDON }, encoding: 'latin1', timeout: 60_000 });
  t.is(c.status, 0, c.stderr);
  const r = JSON.parse(c.stdout);
  t.true(r.running);
  t.is(r.again, 'the device output capture is already running');
  t.is(r.drainedOut, 'printf one\nprintf two, no newline', 'all of fd 1, at once');
  t.is(r.drainedErr, ASSERT + ASSERT_LINES, "the asserts of fd 2, each with its message's lines");
  t.deepEqual(
    r.otherLines,
    ['log: first\n', 'log: partial line\n', 'log: second\n', 'log: console.error\n', 16384, 16384, 40001 - 32768],
    'every other line of fd 2, a piece each (a long one in pieces of 16 KiB)',
  );
  t.is(r.fromLoop, 'from the loop\n', 'delivered from the event loop without a drain');
  t.is(r.boundedOut, 4 * MIB);
  t.is(r.boundedErr, `[qcuda: ${MIB} bytes of device output dropped]\n`);
  t.deepEqual(r.statsRunning, { running: true, queued: 0, dropped: MIB });
  t.is(r.atStop, 'left at stop\n', 'stop delivers what is left');
  t.deepEqual(r.stats, { running: false, queued: 0, dropped: 0 });
  t.true(r.fdsBack, 'fds 1 and 2 are what they were');
  t.is(c.stdout, `${JSON.stringify(r)}\n`, 'nothing captured reached the real stdout');
  t.is(
    c.stderr,
    'own: to the real stderr\nafter stop\n',
    'only what the process wrote past the capture, and after it, reached the real stderr',
  );
});

test('when the process ends with the capture running, its last stderr lines still reach the real stderr, marked, escaped and at most 32', (t) => {
  for (const end of ['throw new Error("boom-" + "marker")', 'process.exit(3)']) {
    const code = `const fs = require('fs'); const n = require(process.env.ADDON); process.stdout; process.stderr;
      n.outputStart(() => {}); fs.writeSync(1, 'device output: lost\\n'); fs.writeSync(2, 'last words \\x1b[2J\\n');
      fs.writeSync(2, ${JSON.stringify(ASSERT_LINES)}); ${end.startsWith('process') ? "for (let i = 0; i < 40; i++) fs.writeSync(2, 'flood\\n');" : ''}
      ${end};`; // a line of its own: the uncaught exception's report quotes it
    const c = spawnSync(process.execPath, ['-e', code], { env: { ...process.env, ADDON }, encoding: 'latin1', timeout: 60_000 });
    t.not(c.status, 0, end);
    t.regex(c.stderr, /^qcuda: stderr at exit: last words \\x1b\[2J\n/, end);
    t.false(c.stderr.includes('forged'), "an assert's lines are device output: dropped");
    t.true(
      c.stderr.split('\n').every((l) => l === '' || l.startsWith('qcuda: stderr at exit: ')),
      'every line marked',
    );
    if (end.startsWith('throw')) t.regex(c.stderr, /qcuda: stderr at exit: Error: boom-marker/, "the uncaught exception's report");
    else
      t.regex(
        c.stderr,
        /(qcuda: stderr at exit: flood\n){31}qcuda: stderr at exit: 9 more lines dropped\n$/,
        'last words, 31 of 40 more, and a count of the rest',
      );
    t.is(c.stdout, '', 'device output never reaches the real stdout');
  }
});
