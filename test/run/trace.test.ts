// The driver-call tracer (guest-driver/trace): a default-built program
// (static cudart: cuGetProcAddress and export tables) traced under qcuda run
// on the emu provider, over qcuda's libcuda.so.1; then trace-diff.py on two
// traces of the same run (no difference) and of a run with another answer.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ATTRS } from '../../backend/src/qcuda/providers/emu';
import { tmpDir } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const ROOT = path.resolve(dist, '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const PROG = path.join(ROOT, 'build/guest/bin/device_static');
const REAL = path.join(ROOT, 'build/guest/lib/libcuda.so.1');
const TRACE = path.join(ROOT, 'guest-driver/trace/qcuda-trace');
const DIFF = path.join(ROOT, 'guest-driver/trace/trace-diff.py');
const MULTIPROCESSOR_COUNT = 16;

interface Run {
  status: number | null;
  stdout: string;
  stderr: string;
}

function spawn(cmd: string, args: string[]): Run {
  const r = spawnSync(cmd, args, { encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** device_static under qcuda run; traced to PREFIX.PID when prefix is given. Returns the run and the trace. */
function runProgram(runArgs: string[], prefix?: string): { run: Run; trace: string } {
  const tracer = prefix ? [TRACE, `--real=${REAL}`, `--out=${prefix}`, '--'] : [];
  const run = spawn(process.execPath, [QCUDA, 'run', '--provider=emu', ...runArgs, '--', ...tracer, PROG]);
  if (!prefix) return { run, trace: '' };
  const dir = path.dirname(prefix);
  const files = fs.readdirSync(dir).filter((f) => f.startsWith(`${path.basename(prefix)}.`));
  if (files.length !== 1) throw new Error(`${files.length} trace files for ${prefix}: ${run.stderr}`);
  return { run, trace: path.join(dir, files[0]) };
}

test('a default-built program traced over qcuda libcuda.so.1: calls, answers, cuGetProcAddress, export tables; its output unchanged', (t) => {
  const dir = tmpDir(t);
  const plain = runProgram([]);
  t.is(plain.run.status, 0, plain.run.stderr);
  const traced = runProgram([], path.join(dir, 'tr'));
  t.is(traced.run.status, plain.run.status);
  t.is(traced.run.stdout, plain.run.stdout);
  const lines = fs.readFileSync(traced.trace, 'utf8').split('\n');
  t.regex(lines[0], new RegExp(`^# qcuda-trace pid=\\d+ real=${REAL.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`));
  t.true(lines.some((l) => /^c T\d+ cuInit Flags=0 -> CUDA_SUCCESS$/.test(l)));
  // The device's answer, as the emu provider gives it.
  const mp = lines
    .map((l) =>
      new RegExp(`^c T\\d+ cuDeviceGetAttribute pi=@0x[0-9a-f]+ attrib=${MULTIPROCESSOR_COUNT} dev=0 -> CUDA_SUCCESS \\*pi=(\\d+)$`).exec(
        l,
      ),
    )
    .find(Boolean);
  t.truthy(mp, 'no multiprocessor count in the trace');
  t.is(Number(mp![1]), ATTRS[MULTIPROCESSOR_COUNT]);
  t.true(
    lines.some((l) => /^c T\d+ cuDeviceGetName name=@0x[0-9a-f]+ len=\d+ dev=0 -> CUDA_SUCCESS \*name="qcuda\\x20host-memory/.test(l)),
  );
  // cudart finds the driver through cuGetProcAddress: each answer names the
  // export it is, and the program is handed the wrapper (cuCtxSynchronize at
  // 13000 is cuCtxSynchronize_v2).
  t.true(
    lines.some((l) =>
      /^g T\d+ cuGetProcAddress_v2 symbol="cuCtxSynchronize" cudaVersion=13000 flags=0 -> CUDA_SUCCESS fn=cuCtxSynchronize_v2 how=wrapped/.test(
        l,
      ),
    ),
  );
  t.true(lines.filter((l) => /^g .* fn=cu\w+ how=wrapped/.test(l)).length > 100);
  // Export tables: the context-local-storage table wrapped and its slots called;
  // the integrity table handed over as it is (its address is in cudart's check).
  t.true(lines.some((l) => /^t T\d+ cuGetExportTable id=c693336e-\S+ -> CUDA_SUCCESS len=\d+ sized=0 tag=c693336e$/.test(l)));
  t.true(lines.some((l) => /^t T\d+ cuGetExportTable id=d4082055-\S+ -> CUDA_SUCCESS len=3 sized=1 tag=d4082055 passthrough$/.test(l)));
  t.true(lines.some((l) => /^x T\d+ c693336e\[\d+\] a0=\S+ a1=\S+ a2=\S+ a3=\S+ a4=\S+ a5=\S+ -> /.test(l)));
});

test('trace-diff.py: two traces of the same run agree; a different device count is named', (t) => {
  const dir = tmpDir(t);
  const a = runProgram([], path.join(dir, 'a'));
  const b = runProgram([], path.join(dir, 'b'));
  const c = runProgram(['--host-devices=2'], path.join(dir, 'c'));
  for (const r of [a, b, c]) t.is(r.run.status, 0, r.run.stderr);
  const same = spawn('python3', [DIFF, a.trace, b.trace]);
  t.is(same.status, 0, same.stdout + same.stderr);
  t.regex(same.stdout, /^0 answers differ, 0 entry points only native, 0 only qcuda \(ignored: .*cuMemGetInfo_v2/m);
  const other = spawn('python3', [DIFF, a.trace, c.trace]);
  t.is(other.status, 1, other.stdout + other.stderr);
  t.regex(
    other.stdout,
    /^answers that differ:\n {2}cuDeviceGetCount count=@\n {4}native: CUDA_SUCCESS \*count=1\n {4}qcuda: {2}CUDA_SUCCESS \*count=2$/m,
  );
  t.regex(other.stdout, /^[1-9]\d* answers differ, /m);
});
