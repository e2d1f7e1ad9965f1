// The cuda provider's device output path without a GPU: the provider on a
// fake libcuda (fixtures/fakecuda.c, through QCUDA_LIBCUDA) that prints the
// way NVIDIA's driver does, in a child process (the capture takes its fds 1
// and 2 over). Output printed at a synchronize reaches the sink of the
// context that launched before that synchronize resolves, never another
// context's; output printed from a driver thread at another moment reaches
// the last launcher unprompted; a failed assert's line reaches the sink as
// stderr output while the synchronize rejects with cudaErrorAssert; the
// backend's own stderr lines still reach the real stderr; close gives the
// fds back. Every other line the driver writes to stderr is the session's
// too, and reaches the host's stderr only through the VM's rate limit,
// named by the session and escaped; an assert whose message holds newlines
// is the session's whole, and none of its lines reach the host's stderr
// (security review 2, L2).
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { FAKE_CUDA_SOURCES } from '../addon/fake-driver';

const CUDA_JS = path.resolve(__dirname, '..', '..', 'backend', 'src', 'qcuda', 'providers', 'cuda', 'cuda.js');
const DIST = path.resolve(__dirname, '..', '..');

function fakeDriver(t: Parameters<typeof tmpDir>[0]): string {
  const lib = path.join(tmpDir(t), 'libcuda.so.1');
  execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-Wall', '-o', lib, ...FAKE_CUDA_SOURCES, '-lpthread']);
  return lib;
}

const CHILD = `
const { createCudaProvider } = require(process.env.CUDA_JS);
const got = { a: [], b: [] };
const sink = (who) => (kind, bytes) => got[who].push(kind + ':' + Buffer.from(bytes).toString('latin1'));
// Pieces are not lines (libc may split a write): consecutive ones of a kind are joined.
const take = (who) => got[who].splice(0).reduce((l, p) => {
  if (l.length && l[l.length - 1][0] === p[0]) l[l.length - 1] += p.slice(2); else l.push(p);
  return l;
}, []).join('|');
const arg = (x) => new Uint8Array(new Int32Array([x]).buffer);
const one = [1, 1, 1];
const until = async (f) => { for (let i = 0; i < 500 && !f(); i++) await new Promise((r) => setTimeout(r, 10)); };
(async () => {
  const r = {};
  const p = await createCudaProvider(0, { captureOutput: true });
  const a = await p.openContext(0, sink('a'));
  const b = await p.openContext(0, sink('b'));
  const ma = (await a.moduleLoad(new Uint8Array(Buffer.from('// a PTX comment')))).ref;
  const mb = (await b.moduleLoad(new Uint8Array(Buffer.from('// a PTX comment')))).ref;
  const say = await a.functionGet(ma, 'say', 256);
  const later = await a.functionGet(ma, 'later', 256);
  const boom = await a.functionGet(ma, 'boom', 256);
  const sayB = await b.functionGet(mb, 'say', 256);

  await a.launch(say.ref, one, one, 0, undefined, arg(1));
  await a.launch(say.ref, one, one, 0, undefined, arg(2));
  await b.synchronize();
  r.beforeSync = take('a') + '/' + take('b');
  await a.synchronize();
  r.atSync = take('a') + '/' + take('b');

  const s = await a.streamCreate(0, 0);
  await a.launch(say.ref, one, one, 0, s, arg(3));
  await a.streamSynchronize(s);
  r.atStreamSync = take('a');

  await b.launch(sayB.ref, one, one, 0, undefined, arg(4));
  await b.synchronize();
  r.bOwn = take('a') + '/' + take('b');

  await a.launch(later.ref, one, one, 0, undefined, arg(5)); // printed by a driver thread, 20 ms on
  await until(() => got.a.join('').endsWith('\\n')); // the whole line: a write may arrive in pieces
  r.unprompted = take('a') + '/' + take('b');

  console.error('backend: a log line');
  await a.launch(boom.ref, one, one, 0, undefined, new Uint8Array(0));
  try {
    await a.synchronize();
    r.assertSync = 'resolved';
  } catch (e) {
    r.assertSync = e.code;
  }
  r.assert = take('a') + '/' + take('b');
  await p.close();
  process.stdout.write(JSON.stringify(r) + '\\n');
  console.error('after close');
})().catch((e) => { console.error(e); process.exit(1); });
`;

test("on a driver that prints like NVIDIA's, device output reaches the right context's sink at the right time", (t) => {
  const dir = tmpDir(t);
  const lib = path.join(dir, 'libcuda.so.1');
  execFileSync('gcc', ['-shared', '-fPIC', '-O1', '-Wall', '-o', lib, ...FAKE_CUDA_SOURCES, '-lpthread']);
  const c = spawnSync(process.execPath, ['-e', CHILD], {
    env: { ...process.env, QCUDA_LIBCUDA: lib, CUDA_JS },
    encoding: 'latin1',
    timeout: 60_000,
  });
  t.is(c.status, 0, c.stderr);
  const r = JSON.parse(c.stdout);
  t.is(r.beforeSync, '/', "nothing before the sync that prints it, and another context's sync brings nothing");
  t.is(r.atSync, '1:say 1\nsay 2\n/', 'all of it by the end of the synchronize, to the context that launched');
  t.is(r.atStreamSync, '1:say 3\n', 'a stream synchronize');
  t.is(r.bOwn, '/1:say 4\n', "the other context's own output goes to it");
  t.is(r.unprompted, '1:later 5\n/', "output of the driver's thread goes to the last launcher without a sync");
  t.is(r.assertSync, 710, 'cudaErrorAssert');
  t.is(r.assert, '2:fake.cu:3: void boom(): block: [0,0,0], thread: [0,0,0] Assertion `0` failed.\n/', 'the assert line, as stderr output');
  t.is(c.stdout, `${JSON.stringify(r)}\n`, 'no device output reached the real stdout');
  t.is(c.stderr, 'backend: a log line\nafter close\n', "the backend's own lines reached the real stderr");
});

// A session on the cuda provider (fake driver), its host-log lines through a
// LogLimiter of 5 a second as the VM's, with fd 2 written to as the driver
// would: the bytes security-2/assert-inject.js writes (an assert whose
// message holds a newline and a forged backend line), then a flood of other
// lines with control characters in them.
const FLOOD_CHILD = `
const fs = require('fs');
const { createCudaProvider } = require(process.env.DIST + '/backend/src/qcuda/providers/cuda/cuda.js');
const { Session, vmShared } = require(process.env.DIST + '/backend/src/qcuda/session/session.js');
const { DEFAULT_LIMITS } = require(process.env.DIST + '/backend/src/qcuda/quota/limits.js');
const { LogLimiter } = require(process.env.DIST + '/backend/src/vhost-user/index.js');
(async () => {
  const p = await createCudaProvider(0, { captureOutput: true });
  const vmLog = new LogLimiter(5, (l) => process.stderr.write(l + '\\n'));
  const s = new Session(p, vmShared(DEFAULT_LIMITS), 0, { log: (l) => vmLog.log(l) });
  const x = await s.context();
  const m = (await x.moduleLoad(new Uint8Array(Buffer.from('// a PTX comment')))).ref;
  const say = await x.functionGet(m, 'say', 256);
  await x.launch(say.ref, [1, 1, 1], [1, 1, 1], 0, undefined, new Uint8Array(new Int32Array([1]).buffer));
  const assert = 'k.cu:7: void k(): block: [0,0,0], thread: [0,0,0] Assertion \`x\\nqcuda-backend: vhost-user: qcuda: frontend disconnected (forged by the guest)\\n\` failed.\\n';
  for (let i = 0; i < 3; i++) fs.writeSync(2, assert);
  for (let i = 0; i < 1000; i++) fs.writeSync(2, 'driver line ' + i + ' \\x1b[31mred\\r\\n');
  await x.synchronize();
  const out = [];
  for (let r = s.output.read(1 << 20); r.bytes.length > 0; r = s.output.read(1 << 20)) out.push(r.kind + ':' + Buffer.from(r.bytes).toString('latin1'));
  console.error('backend: its own line');
  await p.close();
  process.stdout.write(JSON.stringify({ out, id: s.id.toString(16) }) + '\\n');
})().catch((e) => { console.error(e); process.exit(1); });
`;

test("other stderr lines of the driver: the session's, and on the host's stderr only rate-limited, named and escaped; an assert's message lines never", (t) => {
  const lib = fakeDriver(t);
  const c = spawnSync(process.execPath, ['-e', FLOOD_CHILD], {
    env: { ...process.env, QCUDA_LIBCUDA: lib, DIST },
    encoding: 'latin1',
    timeout: 60_000,
  });
  t.is(c.status, 0, c.stderr);
  const r = JSON.parse(c.stdout) as { out: string[]; id: string };
  const text = r.out.join('');
  const assert =
    'k.cu:7: void k(): block: [0,0,0], thread: [0,0,0] Assertion `x\nqcuda-backend: vhost-user: qcuda: frontend disconnected (forged by the guest)\n` failed.\n';
  t.true(
    r.out.every((p) => p.startsWith('2:') || p.startsWith('1:')),
    'stdout and stderr kinds only',
  );
  // The launch's stdout may come before or after (the driver's output thread): the first stderr piece is the assert.
  t.true(
    r.out.find((p) => p.startsWith('2:'))!.startsWith(`2:${assert}`),
    "the assert, its message's lines with it, as the session's stderr",
  );
  t.is(text.split(assert).length - 1, 3, 'three times');
  for (const i of [0, 500, 999]) t.true(text.includes(`driver line ${i} \x1b[31mred\r\n`), `line ${i} reached the session as it was`);
  const lines = c.stderr.split('\n').filter((l) => l !== '');
  const prefix = `qcuda: session ${r.id}: device stderr: `;
  t.deepEqual(
    lines.filter((l) => !l.startsWith(prefix)),
    ['backend: its own line'],
    'no other line reached the real stderr',
  );
  t.deepEqual(
    lines.filter((l) => l.startsWith(prefix)),
    [0, 1, 2, 3, 4].map((i) => `${prefix}driver line ${i} \\x1b[31mred\\x0d`),
    'five a second, escaped',
  );
  t.false(c.stderr.includes('forged by the guest'));
});
