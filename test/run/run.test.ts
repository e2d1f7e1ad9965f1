// qcuda run on the emu provider: real processes over a real backend, no VM.
// Both builds of a program (qcuda's runtime over the userspace transport,
// and nvcc's default static runtime over qcuda's libcuda.so.1), a program
// whose children use CUDA under one quota, and the bad cases: a socket that
// is no backend, a backend killed mid-run.
import test from 'ava';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { tmpDir, until, KEEP_ROOT } from '../helpers';
import { fakeLibcuda } from '../addon/fake-driver';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const BIN = path.resolve(dist, '..', 'build', 'guest', 'bin');

/** qcuda run with these arguments; its status, stdout and stderr. */
function run(args: string[], timeout = 120_000): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [QCUDA, 'run', ...args], { encoding: 'utf8', timeout });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Pids of processes whose command line names path (what a run may leave behind). */
function processesOf(needle: string): number[] {
  return fs
    .readdirSync('/proc')
    .filter((d) => /^\d+$/.test(d))
    .filter((d) => {
      try {
        return fs.readFileSync(`/proc/${d}/cmdline`, 'utf8').includes(needle);
      } catch {
        return false;
      }
    })
    .map(Number);
}

test('a -cudart=shared program and its default build print the same through qcuda run, and exit 0', (t) => {
  const shared = run(['--provider=emu', '--cudart=qcuda', '--', path.join(BIN, 'device')]);
  t.is(shared.status, 0, shared.stderr);
  t.regex(shared.stdout, /^PASS: device: \d+ checks$/m);
  const dflt = run(['--provider=emu', '--', path.join(BIN, 'device_static')]);
  t.is(dflt.status, 0, dflt.stderr);
  t.is(dflt.stdout, shared.stdout);
});

test('copies of every size and alignment come back exact through the userspace transport (pinned, registered and pageable)', (t) => {
  // hostmem: registered memory too, its device pointer included (made shared where it lies).
  for (const p of ['memcpy', 'hostmem']) {
    const r = run(['--provider=emu', '--cudart=qcuda', '--', path.join(BIN, p)]);
    t.is(
      r.status,
      0,
      r.stdout
        .split('\n')
        .filter((l) => l.startsWith('FAIL'))
        .join('\n'),
    );
    t.regex(r.stdout, new RegExp(`^PASS: ${p}: \\d+ checks$`, 'm'));
  }
});

test('a driver-API program using virtual memory management (reserve, create, map, set access, copies, unmap, release) passes, with a worker per process too', (t) => {
  for (const queues of ['--own-queues=no', '--own-queues=yes']) {
    const r = run(['--provider=emu', queues, '--', path.join(BIN, 'vmm')]);
    t.is(
      r.status,
      0,
      r.stdout
        .split('\n')
        .filter((l) => l.startsWith('FAIL'))
        .join('\n') + r.stderr,
    );
    t.regex(r.stdout, /^PASS: vmm: \d+ checks$/m, queues);
  }
});

test("the exit status is the program's, and a missing program is a one-line error", (t) => {
  t.is(run(['--provider=emu', '--', 'sh', '-c', 'exit 7']).status, 7);
  const missing = run(['--provider=emu', '--', '/nonexistent/prog']);
  t.is(missing.status, 125);
  t.regex(missing.stderr, /^qcuda run: cannot run \/nonexistent\/prog: /);
  const none = run([]);
  t.is(none.status, 2);
  t.regex(none.stderr, /run needs a PROGRAM/);
});

/**
 * Run inside qcuda run: the control groups of the run's backend (QCUDA_BACKEND_PID) named qcuda-run-*,
 * each with its bound files, as JSON. v1: a hierarchy per controller; v2: one (controllers '').
 */
const READ_GROUPS = `
const fs = require('fs');
const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\\n').map((l) => l.split(' - ')).filter((p) => p[1]);
const where = (c) => mounts.find(([l, r]) => (c === '' ? r.startsWith('cgroup2 ') : r.startsWith('cgroup ') && r.split(' ')[2].split(',').includes(c.split(',')[0])))?.[0].split(' ')[4];
const files = ['memory.limit_in_bytes', 'memory.max', 'pids.max', 'cpu.cfs_quota_us', 'cpu.max'];
const out = fs.readFileSync('/proc/' + process.env.QCUDA_BACKEND_PID + '/cgroup', 'utf8').split('\\n').filter((l) => l.includes('qcuda-run-')).map((l) => {
  const [, controllers, p] = l.split(':');
  const dir = where(controllers) + p;
  return { controllers, dir, files: Object.fromEntries(files.filter((f) => fs.existsSync(dir + '/' + f)).map((f) => [f, fs.readFileSync(dir + '/' + f, 'utf8').trim()])) };
});
console.log(JSON.stringify(out));
`;

test('the backend runs in a control group of its own bounding host memory, tasks and CPU (review 3, N10), gone after; where none can be made, a line says so', (t) => {
  const r = run([
    '--provider=emu',
    '--host-memory-max=256M',
    '--host-tasks-max=300',
    '--host-cpu-quota=150',
    '--',
    process.execPath,
    '-e',
    READ_GROUPS,
  ]);
  t.is(r.status, 0, r.stderr);
  const groups = JSON.parse(r.stdout) as { controllers: string; dir: string; files: Record<string, string> }[];
  const note = /^qcuda: no host memory, task or CPU bound applies to the backends: .+$/m;
  if (groups.length === 0) {
    // This machine lets this user make no control group: said once, and nothing else changed.
    t.regex(r.stderr, note);
    t.is(r.stderr.match(new RegExp(note.source, 'gm'))!.length, 1);
    return;
  }
  t.notRegex(r.stderr, note);
  const files = Object.assign({}, ...groups.map((g) => g.files)) as Record<string, string>;
  if (groups.some((g) => g.controllers === '')) {
    t.is(files['memory.max'], String(256 << 20));
    t.is(files['pids.max'], '300');
    t.is(files['cpu.max'], '150000 100000');
  } else {
    t.is(files['memory.limit_in_bytes'], String(256 << 20), 'v1 memory');
    t.is(files['pids.max'], '300', 'v1 pids');
    t.is(files['cpu.cfs_quota_us'], '150000', 'v1 cpu: 1.5 CPUs of each 100 ms');
  }
  for (const g of groups) t.false(fs.existsSync(g.dir), `${g.dir} removed with the run`);
  // A worker (a CUDA process's, on the fake driver, which a dropped backend could not read) is in its backend's group.
  const dir = tmpDir(t);
  const prog = path.join(dir, 'ctx');
  fs.writeFileSync(
    `${prog}.c`,
    'extern int cuInit(unsigned), cuCtxCreate_v2(void **, unsigned, int);\n#include <unistd.h>\nint main(void) { void *c; if (cuInit(0) || cuCtxCreate_v2(&c, 0, 0)) return 1; sleep(2); return 0; }\n',
  );
  execFileSync('gcc', ['-o', prog, `${prog}.c`, `-L${path.resolve(BIN, '..', 'lib')}`, '-l:libcuda.so.1']);
  const show = `${prog} & sleep 1; for c in $(cat /proc/$QCUDA_BACKEND_PID/task/*/children); do grep -h qcuda-run- /proc/$c/cgroup; done; wait $!`;
  const w = spawnSync(process.execPath, [QCUDA, 'run', '--provider=cuda', '--host-memory-max=1G', ...KEEP_ROOT, '--', 'sh', '-c', show], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, QCUDA_LIBCUDA: fakeLibcuda() },
  });
  t.is(w.status, 0, w.stderr);
  t.regex(w.stdout, /qcuda-run-\d+$/m, "the worker's control group is the run's");
  // A user who may make no group (nobody, where this runs as root): one line says so, and the run goes on.
  if (process.geteuid?.() === 0) {
    const u = spawnSync(
      process.execPath,
      [
        QCUDA,
        'run',
        '--provider=emu',
        '--host-memory-max=64M',
        '--',
        'sh',
        '-c',
        'grep -c qcuda-run- /proc/$QCUDA_BACKEND_PID/cgroup || :',
      ],
      {
        encoding: 'utf8',
        timeout: 60_000,
        uid: 65534,
        gid: 65534,
        cwd: '/',
      },
    );
    t.is(u.status, 0, u.stderr);
    t.is(u.stdout.trim(), '0', "nobody's backend is in no group of the run's");
    t.is(u.stderr.match(new RegExp(note.source, 'gm'))?.length, 1, u.stderr);
  }
  // Bounds turned off, or none asked (qcuda run bounds only where asked: PROGRAM is the user's own): no group, no line.
  for (const off of [['--host-memory-max=none', '--host-tasks-max=none'], []]) {
    const none = run(['--provider=emu', ...off, '--', process.execPath, '-e', READ_GROUPS]);
    t.is(none.status, 0, none.stderr);
    t.deepEqual(JSON.parse(none.stdout), []);
    t.notRegex(none.stderr, note);
  }
});

test("a program's children get sessions of their own under one quota; a forked child cannot use its parent's", (t) => {
  const r = run(['--provider=emu', '--device-memory-limit=64M', '--', path.join(BIN, 'forkquota'), '48', '32']);
  t.is(r.status, 0, r.stdout);
  t.regex(r.stdout, /^ok {3}child: an allocation past what the parent left of the quota is refused$/m);
  t.regex(r.stdout, /^PASS: forkquota$/m);
});

test('IPC memory and event handles between two processes of the program: bytes both ways, the event waited on, refusals', (t) => {
  const r = run(['--provider=emu', '--', path.join(BIN, 'ipcpair')]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^ok {3}child: reads the parent's bytes$/m);
  t.regex(r.stdout, /^ok {3}parent: reads the child's bytes$/m);
  t.regex(r.stdout, /^ok {3}child: synchronizes and queries it$/m);
  t.regex(r.stdout, /^PASS: ipcpair$/m);
});

test("the guest's NVML (libnvidia-ml.so.1) names the devices CUDA has: index, name, UUID, bus id, P2P status, refusals", (t) => {
  const nvml = path.resolve(BIN, '..', 'lib', 'libnvidia-ml.so.1');
  const r = run(['--provider=emu', '--host-devices=2', '--', path.join(BIN, 'nvmlcheck'), nvml]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^ok {3}NVML counts the devices CUDA has$/m);
  t.regex(r.stdout, /^ok {3}device 1: the handle of its bus id as CUDA writes it$/m);
  t.regex(r.stdout, /^ok {3}devices 0, 1: P2P status OK exactly where cuDeviceCanAccessPeer says 1 \(1\)$/m);
  t.regex(r.stdout, /^ok {3}after it, queries are UNINITIALIZED$/m);
  t.regex(r.stdout, /^PASS: nvmlcheck: \d+ checks$/m);
});

test('a memory pool shared between two processes of the program: its descriptor over a socket, a pointer both ways, refusals', (t) => {
  const r = run(['--provider=emu', '--', path.join(BIN, 'poolipc')]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^ok {3}importer: reads the exporter's bytes$/m);
  t.regex(r.stdout, /^ok {3}importer: forged export data is refused$/m);
  t.regex(r.stdout, /^ok {3}importer: no allocation from an imported pool$/m);
  t.regex(r.stdout, /^ok {3}exporter: a pool made without a handle type is not exported$/m);
  t.regex(r.stdout, /^ok {3}exporter: reads the importer's bytes$/m);
  t.regex(r.stdout, /^PASS: poolipc importer: \d+ checks$/m);
  t.regex(r.stdout, /^PASS: poolipc: \d+ checks$/m);
});

test("a registered shared file mapping stays shared with its other mappings (as NCCL's SHM transport needs)", (t) => {
  const r = run(['--provider=emu', '--', path.join(BIN, 'shmreg')]);
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^ok {3}a CPU write through the other mapping is seen in the registered one$/m);
  t.regex(r.stdout, /^ok {3}a copy from the device into the registered mapping is seen through the other$/m);
  t.regex(r.stdout, /^PASS: shmreg: \d+ checks$/m);
});

test('a socket that is no backend: the program gets no device, says why and exits', async (t) => {
  const sock = path.join(tmpDir(t), 'not-a-backend.sock');
  const server = net.createServer((c) => c.end('hello\n'));
  await new Promise<void>((resolve) => server.listen(sock, resolve));
  t.teardown(() => server.close());
  const r = await new Promise<{ status: number | null; stderr: string }>((resolve) => {
    const p = spawn(process.execPath, [QCUDA, 'run', `--socket=${sock}`, '--cudart=qcuda', '--', path.join(BIN, 'device')], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let stderr = '';
    p.stderr.on('data', (b: Buffer) => (stderr += b.toString()));
    const killer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.on('exit', (status) => {
      clearTimeout(killer);
      resolve({ status, stderr });
    });
  });
  t.not(r.status, 0);
  t.not(r.status, null, 'it hung');
  t.regex(r.stderr, /qcuda: no CUDA device: cannot open .*not-a-backend\.sock/);
});

test("a backend killed mid-run: the program's calls fail at once and it exits; nothing is left running", async (t) => {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'b.sock');
  const backend = spawn(
    process.execPath,
    [BACKEND, `--socket-path=${sock}`, '--provider=emu', '--frontends=4', '--status-socket=none', ...KEEP_ROOT],
    {
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let log = '';
  backend.stderr.on('data', (b: Buffer) => (log += b.toString()));
  t.teardown(() => backend.kill('SIGKILL'));
  t.true(await until(() => /listening on/.test(log), 60_000), log); // a start, not a timing: a loaded CI took over 20 s
  const prog = spawn(process.execPath, [QCUDA, 'run', `--socket=${sock}`, '--cudart=qcuda', '--', path.join(BIN, 'memcpy')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  prog.stdout.on('data', (b: Buffer) => (out += b.toString()));
  prog.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const exited = new Promise<number | null>((resolve) => prog.on('exit', (s) => resolve(s)));
  t.teardown(() => prog.kill('SIGKILL'));
  // Mid-run: its session is open and its copies under way.
  t.true(await until(() => /session \w+ opened/.test(log) && /round trips of 4095 bytes/.test(out), 30_000), log);
  backend.kill('SIGKILL');
  const killedAt = Date.now();
  const status = await Promise.race([exited, new Promise<string>((r) => setTimeout(() => r('hung'), 30_000))]);
  t.is(status, 1, `${out}\n${err}`);
  t.true(Date.now() - killedAt < 30_000);
  t.regex(err, /the qcuda device is gone/);
  t.deepEqual(processesOf(sock), []);
});

test('qcuda run stops the backend it started (here with a worker per process) and removes its scratch directory', async (t) => {
  const r = run([
    '--provider=emu',
    '--own-queues=yes',
    '--cudart=qcuda',
    '--',
    'sh',
    '-c',
    'echo $QCUDA_DEVICE; exec ' + path.join(BIN, 'stream'),
  ]);
  t.is(r.status, 0, r.stderr);
  const sock = r.stdout.split('\n')[0];
  // Run as root, the socket is in a directory of the backend's user's own, inside the scratch directory.
  t.regex(sock, /qcuda-run-\w+\/(backend\/)?qcuda\.sock$/);
  const scratch = /^(.*qcuda-run-\w+)\//.exec(sock)![1];
  t.false(fs.existsSync(scratch), 'its scratch directory is gone');
  t.deepEqual(processesOf(scratch), []);
});

test("Hopper's driver calls reach the backend, and an unserved private-table slot answers instead of crashing", (t) => {
  const r = run(['--provider=emu', '--', path.join(BIN, 'hopper'), '--unserved']);
  t.is(r.status, 0, r.stderr);
  // Served, not stubbed: the emu provider's own refusal, not the library's "not supported" stub.
  t.regex(r.stdout, /^tiled fp16 rank 2 swizzle 128B: CUDA_ERROR_NOT_SUPPORTED$/m);
  t.regex(r.stdout, /^im2col fp16 rank 4: CUDA_ERROR_NOT_SUPPORTED$/m);
  t.notRegex(r.stderr, /cuTensorMap\w* is not supported/);
  t.regex(r.stdout, /^rank 6: CUDA_ERROR_INVALID_VALUE$/m);
  t.regex(r.stdout, /^clusters: no kernel: /m);
  t.notRegex(r.stderr, /cuOccupancy\w* is not supported/);
  // The slot answers CUDA_ERROR_NOT_SUPPORTED and names itself once.
  t.regex(r.stdout, /^export table 21318c60: CUDA_SUCCESS, 93 slots$/m);
  t.regex(r.stdout, /^its slot 10: CUDA_ERROR_NOT_SUPPORTED$/m);
  t.regex(r.stderr, /^qcuda: slot 10 of the driver's private table 21318c60 is not served$/m);
});

test('a graph the host can run is replayed as one request a launch, and answers as its steps do', (t) => {
  const posted = (env: NodeJS.ProcessEnv, prog: string) => {
    const r = spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', '--', path.join(BIN, prog)], {
      encoding: 'utf8',
      timeout: 120_000,
      env: { ...process.env, QCUDA_STATS: '1', ...env },
    });
    t.is(r.status, 0, r.stdout + r.stderr);
    t.regex(r.stdout, /^PASS: graphreplay: \d+ checks$/m);
    const m = /carrying (\d+) posted requests/.exec(r.stderr);
    t.truthy(m, r.stderr);
    return Number(m![1]);
  };
  // 100 launches of 7 nodes, with 2 memsets before each: replayed, a launch is one posted request.
  for (const prog of ['graphreplay', 'graphreplay_static']) t.true(posted({}, prog) < 400, `${prog}: one request a launch`);
  t.true(posted({ QCUDA_GRAPH_REPLAY: '0' }, 'graphreplay') > 800, 'step by step: one a node');
});

test('context limits asked again and again cross once, and stay right across a set and a reset', (t) => {
  const r = spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', '--', path.join(BIN, 'limitcache')], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, QCUDA_STATS: '1' },
  });
  t.is(r.status, 0, r.stdout + r.stderr);
  t.regex(r.stdout, /^PASS: limitcache: \d+ checks$/m);
  // 1,005 asks: one each after the first, a set and a reset cross (LIMIT_GET is command 65).
  const gets = Number(/cmd 65: (\d+)/.exec(r.stderr)?.[1] ?? '0');
  t.true(gets >= 1 && gets <= 8, `LIMIT_GET crossed ${gets} times: ${r.stderr}`);
});
