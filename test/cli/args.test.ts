// Every bad argument of every command is refused before anything starts:
// exit status 2 and one line on stderr naming the program, no stack trace.
// QEMU is /bin/false and the kernel and initrd are empty files, so nothing
// here can boot a guest even if a check were missing (that run would end in
// another status, and fail the test).
import test from 'ava';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-args-'));
process.once('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
const KERNEL = path.join(dir, 'kernel');
const INITRD = path.join(dir, 'initrd');
const FILE = path.join(dir, 'file');
for (const f of [KERNEL, INITRD, FILE]) fs.writeFileSync(f, '');
const NONE = path.join(dir, 'not-there');
const SOCK = path.join(dir, 'b.sock');

/** Values no integer option takes. */
const BAD_INTS = ['-1', 'abc', '1.5', '99999999999999999999', ''];
/** Values no size option takes. */
const BAD_SIZES = ['-1', 'abc', '1.5G', '99999999999T', ''];

function badInts(name: string, zeroOk = false): string[][] {
  return [...BAD_INTS, ...(zeroOk ? [] : ['0'])].map((v) => [`--${name}=${v}`]);
}

function badSizes(name: string): string[][] {
  return BAD_SIZES.map((v) => [`--${name}=${v}`]);
}

function badEnum(name: string): string[][] {
  return [[`--${name}=bogus`], [`--${name}=`]];
}

/** The backend options vm and run pass on (checked before anything starts). */
const BACKEND_OPTION_CASES: string[][] = [
  ...badInts('gpu', true),
  ...badEnum('provider'),
  ...badEnum('isolation'),
  ...badEnum('own-queues'),
  ...badEnum('ring-server'),
  ...badEnum('pin-guest-ram'),
  ...badSizes('device-memory-limit'),
  ['--device-memory-limit=0'],
  [`--backend-log=${NONE}/log`],
  ...badSizes('host-memory-max'),
  ...badInts('host-tasks-max', true),
  ...badInts('host-cpu-quota', true),
];

const VM_CASES: string[][] = [
  [`--file=${NONE}`],
  [`--file=${dir}`],
  [`--kernel=${NONE}`],
  [`--initrd=${NONE}`],
  [`--qemu=${NONE}`],
  [`--qemu=${FILE}`],
  [`--disk-image=${NONE}`],
  [`--disk-image=${NONE}:rw`],
  [`--disk-image=${FILE}`],
  ['--disk-image='],
  [`--share=${NONE}`],
  [`--share=${FILE}`],
  [`--share=${dir}:relative`],
  [`--share=${dir}:/proc`],
  ['--share='],
  [`--share=${dir}`, `--virtiofsd=${NONE}`],
  [`--disk=socket=${NONE}`],
  [`--disk=socket=${FILE}`],
  ...badInts('timeout'),
  ...badInts('queues'),
  ['--queues=65'],
  ...badInts('memory'),
  ...badInts('cpus'),
  ['--cpus=257'],
  ...BAD_SIZES.map((v) => [`--disk=${v}`]),
  ['--disk=1000'],
  ['--disk=0'],
  ['--disk=1G,store=tape'],
  ['--disk=1G,rw'],
  ...BACKEND_OPTION_CASES,
  ['--nope'],
  ['-x'],
  ['--memory'],
  ['--quiet=yes'],
  // Options of other commands.
  ['--cudart=native'],
  [`--lib-dir=${dir}`],
  ['--max-processes=4'],
  [`--socket=${SOCK}`],
  ['--json'],
  ['--name=x'],
  ['--type=qemu'],
  ['--cmdline=x'],
  [`--disk-socket=${SOCK}`],
  [`--status-socket=${SOCK}`],
  // Bad combinations.
  ['--console'],
  [`--disk-image=${FILE}`, '--console'],
  [`--disk-image=${FILE}`, `--kernel=${KERNEL}`],
  [`--disk-image=${FILE}`, '--host-root'],
  ['--demo'],
  ...badEnum('transport'),
  ['--shm-size=256M'],
  ...['100M', '192M', '64M', 'abc', ''].map((v) => ['--transport=shm', `--shm-size=${v}`]),
  [`--disk-image=${FILE}`, '--transport=shm'],
  [`--virtio-win=${FILE}`],
  ['--vnc=:0'],
  ['--transport=shm', `--save=${FILE}`],
  ['--transport=shm', `--incoming=unix:${SOCK}`],
  [`--share=${dir}:/a`, `--share=${dir}:/a`],
  Array.from({ length: 9 }, (_, i) => `--share=${dir}:/s${i}`),
];

/** qcuda vm --windows-image (with a file as the image and a folder with an nvcuda.dll). */
const DLLS = path.join(dir, 'dlls');
fs.mkdirSync(DLLS);
fs.writeFileSync(path.join(DLLS, 'nvcuda.dll'), '');
const WINDOWS_CASES: string[][] = [
  [`--windows-image=${NONE}`],
  [`--windows-image=${dir}`],
  [`--windows-image=${FILE}`, '--', 'true'],
  [`--windows-image=${FILE}`, `--share=${dir}`],
  [`--windows-image=${FILE}`, '--transport=shm'],
  [`--windows-image=${FILE}`, `--file=${FILE}`],
  [`--windows-image=${FILE}`, `--virtio-win=${NONE}`],
  [`--windows-image=${FILE}`, `--dll-dir=${NONE}`],
  [`--windows-image=${FILE}`, '--firmware=bogus'],
  [`--windows-image=${FILE}`, '--vnc=bogus'],
  [`--windows-image=${FILE}`, '--shm-size=100M'],
  [`--windows-image=${FILE}`, '--provider=bogus'],
  // A Windows VM's backend keeps no log: the option is refused, not ignored (its file would be writable).
  [`--windows-image=${FILE}`, `--backend-log=${dir}/log`],
  ...badInts('memory').map((a) => [`--windows-image=${FILE}`, ...a]),
];

/** The options of a Windows domain libvirt-xml prints (cli.test.ts checks one prints). */
const WINDOWS_DOMAIN = [
  '--windows',
  '--name=vm',
  '--qemu=/bin/false',
  `--windows-image=${FILE}`,
  '--shm=/dev/shm/qcuda-args',
  '--firmware=bios',
  `--dll-dir=${DLLS}`,
];

const RUN_CASES: string[][] = [
  [`--lib-dir=${NONE}`],
  [`--lib-dir=${dir}`],
  [`--socket=${NONE}`],
  [`--socket=${FILE}`],
  ...badEnum('cudart'),
  ...badEnum('transport'),
  ['--transport=shm', `--socket=${SOCK}`],
  ...badInts('max-processes'),
  ['--max-processes=4097'],
  ...BACKEND_OPTION_CASES,
  [`--socket=${SOCK}`, '--provider=emu'],
  [`--socket=${SOCK}`, '--max-processes=2'],
  [`--socket=${SOCK}`, '--host-memory-max=1G'],
  ['--nope'],
  ['--memory=256'],
  [`--share=${dir}`],
  [`--file=${FILE}`],
  [`--kernel=${KERNEL}`],
  ['--timeout=5'],
  ['--disk=1G'],
  ['--demo'],
];

const QEMU_ARGS_CASES: string[][] = [
  [`--kernel=${NONE}`],
  [`--initrd=${NONE}`],
  ...badInts('queues'),
  ...badInts('memory'),
  ...badInts('cpus'),
  ['--nope'],
  [`--file=${FILE}`],
  ['--provider=emu'],
  ['extra'],
];

const LIBVIRT_CASES: string[][] = [
  [`--kernel=${NONE}`],
  [`--initrd=${NONE}`],
  [`--disk=${NONE}`],
  [`--qemu=${NONE}`],
  ...badEnum('type'),
  ...badInts('memory'),
  ...badInts('cpus'),
  ...badInts('queues'),
  [`--disk=${FILE}`, `--kernel=${KERNEL}`],
  ['--nope'],
  [`--file=${FILE}`],
  ['extra'],
  // A Windows domain's options without --windows.
  ['--shm=/dev/shm/qcuda-args'],
  [`--windows-image=${FILE}`],
  ['--firmware=bios'],
];

/** libvirt-xml --windows: a good domain's options (WINDOWS_DOMAIN), then one bad. */
const LIBVIRT_WINDOWS_CASES: string[][] = [
  // A Linux domain's options.
  [`--socket=${SOCK}`],
  [`--kernel=${KERNEL}`],
  [`--disk=${FILE}`],
  ['--queues=2'],
  // vm's, not libvirt-xml's.
  ['--timeout=5'],
  // libvirt's <shmem> is a file of /dev/shm only.
  ['--shm=/tmp/qcuda-args'],
  ['--shm=/dev/shm/a/b'],
  ['--shm=/dev/shm/.hidden'],
  ['--shm=/dev/shm/'],
  ['--shm=qcuda-args'],
  [`--windows-image=${NONE}`],
  [`--windows-image=${dir}`],
  [`--virtio-win=${NONE}`],
  [`--dll-dir=${NONE}`],
  ['--firmware=bogus'],
  ['--vnc=bogus'],
  ...badEnum('type'),
  ['--shm-size=100M'],
  ...badSizes('shm-size'),
  [`--qemu=${NONE}`],
  ...badEnum('type'),
  ...badInts('memory'),
  ...badInts('cpus'),
  ['extra'],
];

interface Case {
  program: 'qcuda' | 'qcuda-backend';
  args: string[];
}

const cases: Case[] = [
  // The kernel and initrd from the environment (as make passes them), so that --kernel alone is a case.
  ...VM_CASES.map((a) => ({ program: 'qcuda' as const, args: ['vm', `--qemu=/bin/false`, ...a, '--', 'true'] })),
  { program: 'qcuda', args: ['vm', '--qemu=/bin/false'] },
  { program: 'qcuda', args: ['vm', '--qemu=/bin/false', `--disk-image=${FILE}`, '--console'] },
  ...WINDOWS_CASES.map((a) => ({
    program: 'qcuda' as const,
    args: ['vm', '--qemu=/bin/false', '--firmware=bios', `--dll-dir=${DLLS}`, ...a],
  })),
  ...RUN_CASES.map((a) => ({ program: 'qcuda' as const, args: ['run', ...a, '--', 'true'] })),
  { program: 'qcuda', args: ['run'] },
  ...QEMU_ARGS_CASES.map((a) => ({
    program: 'qcuda' as const,
    args: ['qemu-args', `--socket=${SOCK}`, `--kernel=${KERNEL}`, `--initrd=${INITRD}`, ...a],
  })),
  { program: 'qcuda', args: ['qemu-args', `--kernel=${KERNEL}`, `--initrd=${INITRD}`] },
  ...LIBVIRT_CASES.map((a) => ({
    program: 'qcuda' as const,
    args: [
      'libvirt-xml',
      '--name=vm',
      `--socket=${SOCK}`,
      '--qemu=/bin/false',
      ...(a.some((x) => x.startsWith('--disk=')) ? [] : [`--kernel=${KERNEL}`]),
      ...a,
    ],
  })),
  ...LIBVIRT_WINDOWS_CASES.map((a) => ({ program: 'qcuda' as const, args: ['libvirt-xml', ...WINDOWS_DOMAIN, ...a] })),
  // Each of --name, --windows-image and --shm missing.
  ...[1, 3, 4].map((i) => ({ program: 'qcuda' as const, args: ['libvirt-xml', ...WINDOWS_DOMAIN.filter((_, j) => j !== i)] })),
  { program: 'qcuda', args: ['libvirt-xml', `--socket=${SOCK}`, `--kernel=${KERNEL}`] },
  { program: 'qcuda', args: ['libvirt-xml', '--name=vm', `--kernel=${KERNEL}`] },
  { program: 'qcuda', args: ['libvirt-xml', '--name=vm', `--socket=${SOCK}`] },
  { program: 'qcuda', args: ['status'] },
  { program: 'qcuda', args: ['status', `--socket=${SOCK}`, '--memory=5'] },
  { program: 'qcuda', args: ['status', `--socket=${SOCK}`, 'extra'] },
  { program: 'qcuda', args: ['status', `--socket=${SOCK}`, '--nope'] },
  { program: 'qcuda', args: ['frobnicate'] },
  ...backendCases(),
];

function backendCases(): Case[] {
  const at = [`--socket-path=${SOCK}`, '--status-socket=none'];
  const blk = [...at, '--device=blk', '--size=1M', '--store=host'];
  const qcuda: string[][] = [
    ...badInts('queues'),
    ['--queues=65'],
    ...badInts('frontends'),
    ...badInts('gpu', true),
    ['--gpu=64'],
    ...badInts('max-processes'),
    ...badInts('waiter-threads'),
    ...badInts('host-map-pieces'),
    ...badInts('log-rate'),
    ...badInts('inline-wait', true),
    ...badInts('poll-us', true),
    ['--process-handles=1,2,3'],
    ['--process-handles=1,2,3,-4'],
    ['--process-handles=a,b,c,d'],
    ['--process-handles=1,2,3,0'],
    ['--process-handles='],
    ...badSizes('device-memory-limit'),
    ...badSizes('module-staging'),
    ['--module-staging=0'],
    ...badSizes('module-cache'),
    ...badSizes('deferred-limit'),
    ['--deferred-limit=0'],
    ['--jit-time-max=-1'],
    ['--jit-time-max=1.5s'],
    ['--jit-time-max=0.0001'],
    ['--jit-time-max=86401'],
    ['--jit-time-max='],
    ['--device=blk', '--size=1M', '--store=host', '--jit-time-max=5'],
    ...badEnum('device'),
    ...badEnum('provider'),
    ...badEnum('isolation'),
    ...badEnum('inline-calls'),
    ...badEnum('ring-server'),
    ...badEnum('pin-guest-ram'),
    ...badEnum('own-queues'),
    ...badSizes('shm-size').map((a) => [`--shm=${SOCK}.shm`, ...a]),
    [`--shm=${SOCK}.shm`, '--shm-size=10M'],
    [`--shm=${SOCK}.shm`, '--shm-size=99M'],
    ['--shm-size=1G'],
    [`--shm=${NONE}/r.shm`],
    [`--shm=${FILE}`],
    ['--nope'],
    ['extra'],
    ['--read-only=yes'],
    ['--queues'],
    // blk's options on another device.
    ['--size=1M'],
    ['--store=host'],
    ['--read-only'],
  ];
  return [
    ...qcuda.map((a) => ({ program: 'qcuda-backend' as const, args: [...at, ...a] })),
    ...[...badSizes('size'), ['--size=1000'], ['--size=0'], ...badEnum('store')].map((a) => ({
      program: 'qcuda-backend' as const,
      args: [...blk, ...a],
    })),
    { program: 'qcuda-backend', args: [...at, '--device=blk', '--store=host'] },
    { program: 'qcuda-backend', args: ['--status-socket=none'] },
    { program: 'qcuda-backend', args: [...at, '--fd=3'] },
    { program: 'qcuda-backend', args: [`--socket-path=${NONE}/b.sock`] },
    { program: 'qcuda-backend', args: [`--socket-path=${SOCK}`, `--status-socket=${NONE}/s.sock`] },
    ...[...badInts('fd'), ['--fd=99']].map((a) => ({ program: 'qcuda-backend' as const, args: a })),
    { program: 'qcuda-backend', args: ['--fd=1', '--frontends=2'] },
    { program: 'qcuda-backend', args: ['--fd=1', `--shm=${SOCK}.shm`] },
    // --restart-state: one VM's QEMU on a socket, a provider that carries its sessions, a file in a directory.
    { program: 'qcuda-backend', args: [...at, `--restart-state=${NONE}/vm.state`] },
    { program: 'qcuda-backend', args: [...at, `--restart-state=${dir}`] },
    { program: 'qcuda-backend', args: [...at, '--provider=cuda', `--restart-state=${dir}/vm.state`] },
    { program: 'qcuda-backend', args: [...at, '--frontends=2', `--restart-state=${dir}/vm.state`] },
    { program: 'qcuda-backend', args: [...at, `--shm=${SOCK}.shm`, `--restart-state=${dir}/vm.state`] },
    { program: 'qcuda-backend', args: ['--fd=1', `--restart-state=${dir}/vm.state`] },
    { program: 'qcuda-backend', args: [...blk, `--restart-state=${dir}/vm.state`] },
  ];
}

interface Outcome {
  status: number | null;
  stderr: string;
}

function runCase(c: Case): Promise<Outcome> {
  // A clean environment: nothing of the caller's (QEMU_BIN, QCUDA_LIB_DIR, ...) may make a case pass.
  const env = { PATH: process.env.PATH, HOME: process.env.HOME, GUEST_KERNEL: KERNEL, GUEST_INITRD: INITRD };
  const p = spawn(process.execPath, [c.program === 'qcuda' ? QCUDA : BACKEND, ...c.args], { env, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  p.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  // A case that was not refused is listening or running: stop it (and fail).
  const killer = setTimeout(() => p.kill('SIGKILL'), 15_000);
  return new Promise((resolve) =>
    p.once('close', (status) => {
      clearTimeout(killer);
      resolve({ status, stderr });
    }),
  );
}

/** At most n at once (a small machine runs these next to other tests). */
async function pool<T, R>(items: T[], n: number, f: (x: T) => Promise<R>): Promise<R[]> {
  const out: R[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await f(items[i]);
      }
    }),
  );
  return out;
}

test('every bad argument of qcuda and qcuda-backend: exit 2, one line naming the program, no stack trace', async (t) => {
  // Some 400 processes: 3.5 minutes alone on a loaded 2-core machine. Each case is
  // killed at 15 s, so this bound only ends a run gone wrong; it is not a timing.
  t.timeout(480_000);
  const outcomes = await pool(cases, 6, runCase);
  const failed = cases.flatMap((c, i) => {
    const o = outcomes[i];
    const lines = o.stderr.split('\n');
    const ok =
      o.status === 2 && lines.length === 2 && lines[1] === '' && lines[0].startsWith(`${c.program}: `) && !/^\s+at /m.test(o.stderr);
    return ok ? [] : [`${c.program} ${c.args.join(' ')}\n  -> status ${o.status}, stderr: ${JSON.stringify(o.stderr.slice(0, 400))}`];
  });
  t.log(`${cases.length} cases`);
  t.deepEqual(failed, []);
});
