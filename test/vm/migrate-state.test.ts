// A guest CUDA program (emu provider) moved mid-run with the qcuda device's
// state: migrated live to a second QEMU on this machine, and saved to a file
// and restored; each finishes with the output of a run never moved. A state
// the destination refuses fails with the reason, and the source runs on.
// Every QEMU and backend is runVm's, ended by it (by pid), each run under a
// timeout.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { runVm, VmError } from '../../backend/src/vm/runner';
import { migrateVm, Qmp } from '../../backend/src/vm/qmp';
import { tmpDir } from '../helpers';
import { base, onMark } from './helpers';

const withState = test.serial;

const emu = { ...base, backendArgs: ['--provider=emu'], timeoutMs: 300_000 };
/** memcpy prints this after its first round trips: the program is mid-run, its memory allocated. */
const MID = 'round trips of';
const PROGRAM = 'memcpy';

let unmoved: string;

test.serial.before(async () => {
  const r = await runVm({ ...emu, command: PROGRAM });
  if (r.exit !== 0) throw new Error(`${PROGRAM} failed unmoved:\n${r.stdout}${r.stderr}`);
  unmoved = r.stdout;
});

withState('a guest program migrated mid-run to another QEMU finishes there with the same output', async (t) => {
  const uri = `unix:${path.join(tmpDir(t), 'mig.sock')}`;
  let moved: { pausedMs: number; bytes?: number } | undefined;
  const dst = runVm({ ...emu, command: 'true', incoming: uri });
  const w = onMark(MID, async (monitor) => {
    const q = await Qmp.connect(monitor);
    try {
      moved = await migrateVm(q, uri);
      await q.execute('quit').catch(() => {});
    } finally {
      q.close();
    }
  });
  const src = await runVm({ ...emu, ...w, command: PROGRAM });
  await w.done;
  const r = await dst;
  t.log(`guest paused ${moved?.pausedMs} ms, ${moved?.bytes} bytes of RAM`);
  t.true(src.migrated);
  t.is(r.exit, 0, r.stderr);
  t.is(r.stdout, unmoved, 'the same output as a run never moved');
});

withState(
  'a destination that refuses the state (too small a quota): the migration fails, the source runs on to the same output',
  async (t) => {
    const uri = `unix:${path.join(tmpDir(t), 'mig.sock')}`;
    let err: string | undefined;
    const dst = runVm({ ...emu, backendArgs: ['--provider=emu', '--device-memory-limit=64K'], command: 'true', incoming: uri }).then(
      () => 'ran',
      (e: Error) => e,
    );
    const w = onMark(MID, async (monitor) => {
      const q = await Qmp.connect(monitor);
      try {
        await migrateVm(q, uri);
      } catch (e) {
        err = (e as Error).message;
      } finally {
        q.close();
      }
    });
    const src = await runVm({ ...emu, ...w, command: PROGRAM });
    await w.done;
    const d = await dst;
    t.true(d instanceof VmError, String(d));
    t.regex((d as VmError).message, /Error loading back-end state/);
    t.regex((d as VmError).message, /quota|device memory/i);
    t.regex(err ?? '', /^migration to unix:.* failed/, 'the source heard of the refusal (return path)');
    t.falsy(src.migrated);
    t.is(src.stdout, unmoved, 'the source ran on to the unmoved output');
  },
);

withState('saved mid-run to a file: the source goes on, the file restores to the same output, a corrupted one is refused', async (t) => {
  const dir = tmpDir(t);
  const file = path.join(dir, 'vm.state');
  const lines: string[] = [];
  const w = onMark(MID, async () => {
    process.kill(process.pid, 'SIGUSR2');
    const end = Date.now() + 120_000;
    while (!lines.length && Date.now() < end) await new Promise((r) => setTimeout(r, 50));
  });
  const src = await runVm({ ...emu, ...w, command: PROGRAM, saveFile: file, onMigration: (l) => lines.push(l) });
  await w.done;
  t.regex(lines[0] ?? '', /^saved the VM to .* \(\d+ bytes; the guest paused \d+ ms\)$/);
  t.is(src.stdout, unmoved, 'the source went on after the save');

  const restored = await runVm({ ...emu, command: 'true', incoming: `file:${file}` });
  t.is(restored.exit, 0);
  t.is(restored.stdout, unmoved, 'the restored run ends as the unmoved one');

  // One byte of the device's state flipped (the library's frame starts "VUST").
  const bytes = fs.readFileSync(file);
  const at = bytes.lastIndexOf(Buffer.from('VUST'));
  t.true(at > 0, 'the device state is in the file');
  bytes[at + 200] ^= 0xff;
  const bad = path.join(dir, 'bad.state');
  fs.writeFileSync(bad, bytes);
  const e = await t.throwsAsync(runVm({ ...emu, command: 'true', incoming: `file:${bad}` }), { instanceOf: VmError });
  t.regex(e!.message, /Error loading back-end state/);
  t.regex(e!.message, /crc32 mismatch|corrupted/);
});
