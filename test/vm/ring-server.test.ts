// The ring server (workers/ring-server.ts, addon/src/cuda_ring_server.cc)
// behind a real guest, without a GPU: a TCG guest's CUDA programs, through
// qcuda's guest library and driver on queues of their own, on the cuda
// provider over the fake driver (test/qcuda/fixtures/fakecuda.c, whose
// kernels do nothing). The programs that check what the fake driver can
// give (copies and their bytes, pinned host memory, host functions in stream
// order) and the two benchmarks (launches, a launch and synchronize in one
// batch, event record and query, copies) run with the ring server on and
// off: they pass either way, and the backend log says how many of each
// session's calls were answered in C.
import test from 'ava';
import fs from 'node:fs';
import { runVm } from '../../backend/src/vm/runner';
import { fakeLibcuda } from '../addon/fake-driver';

const env = { qemu: process.env.QEMU_BIN, kernel: process.env.GUEST_KERNEL, initrd: process.env.GUEST_INITRD };
const missing = Object.entries(env)
  .filter(([, v]) => !v || !fs.existsSync(v))
  .map(([k]) => k);
if (missing.length > 0)
  throw new Error(`VM tests need QEMU_BIN, GUEST_KERNEL and GUEST_INITRD (missing: ${missing.join(', ')}); run them with 'make test'`);

// The backend this file starts inherits it: its workers load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

const PROGRAMS = ['memcpy', 'hostmem', 'callbacks'];
const SCRIPT = [
  'echo 50 > /sys/module/qcuda/parameters/poll_us',
  ...PROGRAMS.map((p) => `${p} > ${p}.out 2>&1; echo "=== ${p} exit $?"; tail -1 ${p}.out`),
  'launch_bench 300; echo "=== launch_bench exit $?"',
  'copy_bench; echo "=== copy_bench exit $?"',
].join('\n');

interface Ended {
  calls: number;
  inC: number;
}

async function run(ringServer: 'yes' | 'no'): Promise<{ exit: number | undefined; stdout: string; ended: Ended[] }> {
  let log = '';
  const r = await runVm({
    qemu: env.qemu!,
    kernel: env.kernel!,
    initrd: env.initrd!,
    queues: 4,
    memoryMiB: 1536,
    timeoutMs: 300_000,
    command: SCRIPT,
    backendArgs: ['--provider=cuda', '--own-queues=yes', `--ring-server=${ringServer}`],
    onBackendLog: (s) => (log += s),
  });
  // One line per session as it ends (qcuda/workers/delegation.ts), in the order the programs ran.
  const ended = [...log.matchAll(/session \w+ \(queue \d+\) ended after (\d+) calls(?: \((\d+) answered in C\))? on its queue/g)].map(
    (m) => ({ calls: Number(m[1]), inC: Number(m[2] ?? 0) }),
  );
  return { exit: r.exit, stdout: r.stdout, ended };
}

test.serial(
  "a guest's CUDA programs over the ring server, on the fake driver: they pass with it on and off, and on, their calls are answered in C",
  async (t) => {
    t.timeout(700_000);
    const on = await run('yes');
    const off = await run('no');
    for (const [name, r] of [
      ['on', on],
      ['off', off],
    ] as const) {
      t.is(r.exit, 0, `${name}: ${r.stdout}`);
      for (const p of PROGRAMS) t.regex(r.stdout, new RegExp(`=== ${p} exit 0\\nPASS: ${p}: \\d+ checks`), `${name}: ${r.stdout}`);
      t.regex(r.stdout, /"launches":300,.*\n=== launch_bench exit 0/, `${name}: ${r.stdout}`);
      t.regex(r.stdout, /"MiB":256,.*\n=== copy_bench exit 0/, `${name}: ${r.stdout}`);
      t.is(r.ended.length, PROGRAMS.length + 2, `${name}: a session per program ended: ${JSON.stringify(r.ended)}`);
    }
    t.log(`on: ${on.ended.map((e) => `${e.inC} of ${e.calls}`).join(', ')}; ${on.stdout.match(/^\{"launches".*$/m)?.[0]}`);
    t.log(`off: ${off.stdout.match(/^\{"launches".*$/m)?.[0]}`);
    t.true(
      off.ended.every((e) => e.inC === 0),
      'none answered in C with it off',
    );
    const [memcpy, hostmem] = on.ended;
    t.true(memcpy.inC > 0 && hostmem.inC > 0, `some of memcpy's and hostmem's calls answered in C with it on: ${JSON.stringify(on.ended)}`);
    // callbacks: its calls mostly wait behind host functions (the device's); the few made while
    // none is marked are answered in C beside its callback thread's parked CALLBACK_WAIT, a
    // number that depends on timing (ring-server.test.ts checks that case on its own).
    // launch_bench: batches of launches ending in a synchronize, event records and queries: nearly all in C.
    const bench = on.ended[PROGRAMS.length];
    t.true(bench.inC > 0.9 * bench.calls, `launch_bench: ${bench.inC} of ${bench.calls} in C`);
  },
);
