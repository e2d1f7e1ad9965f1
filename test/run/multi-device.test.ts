// Several devices in one process through qcuda run (issue 37): the guest
// test program multidevice (test/guest/multidevice.cu), both builds (qcuda's
// runtime, and nvcc's static runtime over qcuda's libcuda.so.1), on the host
// provider emulating two devices: device selection, properties, per-device
// allocations and memory info, peer copies byte for byte, refusals.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import path from 'node:path';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const BIN = path.resolve(dist, '..', 'build', 'guest', 'bin');

function run(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [QCUDA, 'run', ...args], { encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

const fails = (out: string) =>
  out
    .split('\n')
    .filter((l) => l.startsWith('FAIL'))
    .join('\n');

test('multidevice passes on two emulated devices, in both builds, with all its checks', (t) => {
  for (const [prog, cudart] of [
    ['multidevice', ['--cudart=qcuda']],
    ['multidevice_static', []],
  ] as const) {
    const r = run(['--provider=emu', '--host-devices=2', ...cudart, '--', path.join(BIN, prog)]);
    t.is(r.status, 0, fails(r.stdout) + r.stderr);
    const m = /^PASS: multidevice: (\d+) checks$/m.exec(r.stdout);
    t.truthy(m, prog);
    t.true(Number(m?.[1]) > 30, `${prog}: the two-device checks ran`);
  }
});

test('on one device (the default) multidevice checks what one device allows', (t) => {
  const r = run(['--provider=emu', '--cudart=qcuda', '--', path.join(BIN, 'multidevice')]);
  t.is(r.status, 0, fails(r.stdout) + r.stderr);
  t.regex(r.stdout, /cudaSetDevice\(1\) -> cudaErrorInvalidDevice/);
  t.regex(r.stdout, /^PASS: multidevice: \d+ checks$/m);
});

test('--host-devices out of range is a usage error before anything starts', (t) => {
  for (const n of ['0', '17', 'two']) {
    const r = run(['--provider=emu', `--host-devices=${n}`, '--', 'true']);
    t.is(r.status, 2, n);
    t.regex(r.stderr, /--host-devices must be an integer in 1\.\.16/);
  }
});

test('--gpu=0,1 on the emu provider gives two devices without --host-devices', (t) => {
  const r = run(['--provider=emu', '--gpu=0,1', '--cudart=qcuda', '--', path.join(BIN, 'multidevice')]);
  t.is(r.status, 0, fails(r.stdout) + r.stderr);
  const m = /^PASS: multidevice: (\d+) checks$/m.exec(r.stdout);
  t.true(Number(m?.[1]) > 30, `the two-device checks ran: ${r.stdout.slice(-300)}`);
});

test('--host-devices that contradicts a --gpu list is a one-line usage error, in qcuda run and qcuda-backend', (t) => {
  const r = run(['--provider=emu', '--host-devices=1', '--gpu=0,1', '--', 'true']);
  t.is(r.status, 2);
  t.regex(r.stderr, /--host-devices=1 contradicts --gpu=0,1/);
  const b = spawnSync(
    process.execPath,
    [
      path.join(dist, 'backend/src/cli/backend.js'),
      '--socket-path=/tmp/qcuda-none.sock',
      '--provider=emu',
      '--host-devices=3',
      '--gpu=0,1',
    ],
    { encoding: 'utf8', timeout: 30_000 },
  );
  t.is(b.status, 2);
  t.regex(b.stderr, /--host-devices=3 contradicts --gpu=0,1/);
  t.false(b.stderr.trim().includes('\n'), b.stderr);
});

// Issue 45: device 0's memory, stream and event used while device 1 is
// current: pointer attributes name device 0 (and its context), work on the
// stream lands in device 0's memory, the event records and waits there.
test("device 0's memory, stream and event while device 1 is current, in both builds and the driver API", (t) => {
  for (const [prog, cudart] of [
    ['multidevobj', ['--cudart=qcuda']],
    ['multidevobj_static', []],
    ['multidevctx', []],
  ] as const) {
    const r = run(['--provider=emu', '--host-devices=2', '--gpu=0,1', ...cudart, '--', path.join(BIN, prog)]);
    t.is(r.status, 0, `${prog}:\n${fails(r.stdout)}${r.stderr}`);
    t.regex(r.stdout, /^PASS: multidev(obj|ctx): \d+ checks$/m, prog);
    t.regex(r.stdout, /^ok {3}device 1 current: device 0's memory says device 0/m, prog);
  }
});
