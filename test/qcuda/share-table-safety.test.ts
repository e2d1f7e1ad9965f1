// The --gpu-share table against the processes that can reach its file
// (security review 3, N6): a file another user made first under its name
// is refused with a clear error, and so is one of the wrong mode or size;
// a process of the backends' own user (a compromised worker, say) that cuts
// the file short does not end the backends that map it; weights read from
// the file are clamped to 1-1000.
import test, { type ExecutionContext } from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { KEEP_ROOT } from '../helpers';
import { Cmd } from '../../backend/src/qcuda/proto';
import { ShareTable, TABLE_BYTES } from '../../backend/src/qcuda/share/table';
import { sessionAt } from './client';

const BACKEND = path.join(__dirname, '../../backend/src/cli/backend.js');
const tick = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function tmpDir(t: ExecutionContext): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-share-safety-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

(process.getuid?.() === 0 ? test : test.skip)(
  'a table file another user made first is refused with a clear error, and the backend does not start on it',
  async (t) => {
    const dir = tmpDir(t);
    const file = path.join(dir, 'table');
    fs.writeFileSync(file, Buffer.alloc(TABLE_BYTES), { mode: 0o600 });
    fs.chownSync(file, 65534, 65534);
    t.throws(() => ShareTable.open(file), {
      message: /the GPU share table .*table is owned by uid 65534, not by this process's uid 0: refusing it/,
    });
    const r = spawn(
      process.execPath,
      [BACKEND, `--socket-path=${path.join(dir, 'b.sock')}`, '--status-socket=none', '--provider=emu', '--gpu-share=1', ...KEEP_ROOT],
      {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...process.env, QCUDA_GPU_SHARE_TABLE: file },
      },
    );
    t.teardown(() => r.kill('SIGKILL'));
    let err = '';
    r.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => r.once('exit', resolve));
    t.is(code, 1, err);
    t.regex(err, /owned by uid 65534.*refusing it/);
  },
);

test('a table file of the wrong mode, or shorter than the table, is refused; a new one is made whole, mode 0600', (t) => {
  const dir = tmpDir(t);
  const open = path.join(dir, 'open');
  fs.writeFileSync(open, Buffer.alloc(TABLE_BYTES));
  fs.chmodSync(open, 0o666);
  t.throws(() => ShareTable.open(open), { message: /has mode 0666, not 0600: refusing it/ });
  const short = path.join(dir, 'short');
  fs.writeFileSync(short, Buffer.alloc(64), { mode: 0o600 });
  t.throws(() => ShareTable.open(short), { message: new RegExp(`holds 64 bytes, less than the table's ${TABLE_BYTES}`) });
  const fresh = path.join(dir, 'fresh');
  const table = ShareTable.open(fresh);
  t.teardown(() => table.close());
  const st = fs.statSync(fresh);
  t.is(st.mode & 0o777, 0o600);
  t.is(st.size, TABLE_BYTES);
  t.deepEqual(fs.readdirSync(dir).sort(), ['fresh', 'open', 'short'], 'no name of its own left behind');
});

test('weights read from the table are clamped to 1-1000, whatever another process wrote', (t) => {
  const table = ShareTable.open(path.join(tmpDir(t), 'table'));
  t.teardown(() => table.close());
  const a = table.joinVm(1_000_000_000);
  const b = table.joinVm(-5, process.pid + 1_000_000);
  t.is(table.weight(a), 1000);
  t.is(table.weight(b), 1);
  const weights = table.snapshot(() => true).map((v) => v.weight);
  t.deepEqual(weights, [1000, 1]);
});

/** A backend with --gpu-share on `table`, one frontend, and one allocation to memset. */
async function shareBackend(t: ExecutionContext, dir: string, name: string, table: string) {
  const sock = path.join(dir, `${name}.sock`);
  const be = spawn(
    process.execPath,
    [BACKEND, `--socket-path=${sock}`, '--status-socket=none', '--provider=emu', '--gpu-share=1', ...KEEP_ROOT],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, QCUDA_GPU_SHARE_TABLE: table },
    },
  );
  t.teardown(() => be.kill('SIGKILL'));
  let log = '';
  be.stderr.on('data', (b: Buffer) => (log += b.toString()));
  const died = new Promise<string>((r) => be.once('exit', (code, sig) => r(`backend died (${sig ?? `status ${code}`})`)));
  while (!/listening on/.test(log)) {
    if (be.exitCode !== null) throw new Error(log);
    await tick(20);
  }
  const c = await sessionAt(t, sock);
  const ptr = (await c.malloc(4096)).value;
  const memset = () =>
    Promise.race([
      c
        .call(Cmd.MEMSET, { args: ['qcuda_args_memset', { dst: ptr, size: 4096n, stream: 0n, value: 1, async: 0 }] })
        .then((r) => `status ${r.status}`),
      died,
      tick(5000).then(() => 'no answer'),
    ]);
  return { be, memset, log: () => log };
}

test('a process of the same user cuts the table short under two backends: both go on serving, and say they go on without shares', async (t) => {
  const dir = tmpDir(t);
  const table = path.join(dir, 'table');
  const a = await shareBackend(t, dir, 'vm-a', table);
  const b = await shareBackend(t, dir, 'vm-b', table);
  t.is(await a.memset(), 'status 0');
  t.is(await b.memset(), 'status 0');
  fs.truncateSync(table, 0);
  t.is(await b.memset(), 'status 0', `VM B: ${b.log()}`);
  t.is(await a.memset(), 'status 0', `VM A: ${a.log()}`);
  t.is(a.be.exitCode, null);
  t.is(b.be.exitCode, null);
  t.regex(a.log() + b.log(), /the GPU share table .* was cut short by another process; this process goes on without GPU shares/);
});
