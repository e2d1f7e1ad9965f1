#!/usr/bin/env node
// qcuda: run commands in a guest with the virtual CUDA device, or print the
// QEMU command line for people who start QEMU themselves.
import path from 'node:path';
import { parseArgs } from 'node:util';
import { readStatus } from '../sys/status-socket';
import { domainXml } from '../vm/libvirt';
import { domainType } from '../vm/libvirt-common';
import { qemuArgs } from '../vm/qemu-args';
import { defaultStatusSocket, formatStatus, type BackendStatus } from './status';
import { gpuProbe, hostDeviceCount, parseGpus, parseSize, PROVIDER_KINDS } from '../qcuda/choose-provider';
import { PROVIDER_ALIASES } from '../qcuda/provider';
import { chooseDiskStores } from './disk-store';
import { MAX_HOST_DEVICES } from '../qcuda/providers/emu';
import { parseWeight } from '../qcuda/share/policy';
import fs from 'node:fs';
import { runCuda, RunError } from '../run/run';
import { chooseBackendUser, type BackendUserChoice } from '../vm/backend-user';
import { HostCgroup, parseHostBounds } from '../vm/host-bounds';
import { DISK_QUEUES, runVm, type VmDisk, type VmDiskImage } from '../vm/runner';
import { defaultVirtiofsd, parseShareSpec, resolveShares, type VmShare } from '../vm/shares';
import { buildPathsFile, onPath, readBuildPaths, type BuildPaths } from './build-paths';
import { migrateCommand } from './migrate';
import { HELP } from './help';
import { vmFailed } from './vm-failed';
import { windowsVm } from './windows-vm';
import { WINDOWS_DOMAIN_ONLY, windowsLibvirtXml } from './windows-libvirt-xml';
import { BACKEND_PASSED, HOST_BOUND_OPTIONS } from './backend-options';
import { GUEST_FIND_SHM, parseShmSize } from '../vm/ivshmem';

/** Writes text to file as it comes, a whole line at a time, each after the milliseconds since the first call ("[12.345] line"). */
function timedLines(file: string): (text: string) => void {
  let fd: number;
  try {
    fd = fs.openSync(file, 'w');
  } catch (e) {
    usage(`--backend-log=${file}: ${(e as Error).message}`);
  }
  let t0: bigint | undefined;
  let part = '';
  return (text) => {
    const now = process.hrtime.bigint();
    t0 ??= now;
    const lines = (part + text).split('\n');
    part = lines.pop()!;
    const ms = (Number(now - t0) / 1e6).toFixed(3);
    for (const l of lines) fs.writeSync(fd, `[${ms}] ${l}\n`);
  };
}

/** Bad usage: one line on stderr, exit 2, before anything starts. */
function usage(msg: string): never {
  process.stderr.write(`qcuda: ${msg.replace(/\.?\s*\n\s*/g, '; ')} (try 'qcuda help')\n`);
  process.exit(2);
}

/** An existing regular file (executable too when asked), else a usage error. */
function existingFile(p: string, what: string, executable = false): string {
  const st = fs.statSync(p, { throwIfNoEntry: false });
  if (!st) usage(`${what} ${p}: no such file`);
  if (!st.isFile()) usage(`${what} ${p}: not a file`);
  if (executable) {
    try {
      fs.accessSync(p, fs.constants.X_OK);
    } catch {
      usage(`${what} ${p}: not executable`);
    }
  }
  return p;
}

function existingSocket(p: string, what: string): string {
  const st = fs.statSync(p, { throwIfNoEntry: false });
  if (!st?.isSocket()) usage(`${what} ${p}: ${st ? 'not a socket' : 'no such socket'}`);
  return p;
}

let built: BuildPaths | undefined;

/** The option, else the environment variable, else what the build recorded (build-paths.ts). */
function need(v: string | undefined, what: string, env: string): string {
  if (what === 'qemu' || what === 'kernel' || what === 'initrd') {
    try {
      built ??= readBuildPaths();
    } catch (e) {
      usage((e as Error).message);
    }
  }
  const x = v ?? (process.env[env] || undefined) ?? built?.[what as keyof BuildPaths];
  if (!x) usage(`${what} is not set: pass --${what} or set ${env}, or build it (make vm records it in ${buildPathsFile()})`);
  return path.resolve(x);
}

function intOpt(v: string | undefined, name: string, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  if (!/^\d+$/.test(v) || +v < 1 || +v > max) usage(`--${name} must be an integer in 1..${max}`);
  return +v;
}

/** Quotes a word for sh. */
function shq(a: string): string {
  return /^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replace(/'/g, "'\\''")}'`;
}

const OPTIONS = {
  file: { type: 'string', multiple: true },
  share: { type: 'string', multiple: true },
  disk: { type: 'string', multiple: true },
  'disk-socket': { type: 'string', multiple: true },
  'host-root': { type: 'boolean' },
  'host-root-writable': { type: 'boolean' },
  virtiofsd: { type: 'string' },
  timeout: { type: 'string' },
  queues: { type: 'string' },
  memory: { type: 'string' },
  cpus: { type: 'string' },
  demo: { type: 'boolean' },
  console: { type: 'boolean' },
  provider: { type: 'string' },
  gpu: { type: 'string' },
  'host-devices': { type: 'string' },
  isolation: { type: 'string' },
  'own-queues': { type: 'string' },
  'ring-server': { type: 'string' },
  'pin-guest-ram': { type: 'string' },
  'real-gpu-identity': { type: 'boolean' },
  'worker-sandbox': { type: 'string' },
  'backend-user': { type: 'string' },
  'backend-log': { type: 'string' },
  'host-memory-max': { type: 'string' },
  'host-tasks-max': { type: 'string' },
  'host-cpu-quota': { type: 'string' },
  'device-memory-limit': { type: 'string' },
  'context-overhead': { type: 'string' },
  'gpu-share': { type: 'string' },
  'gpu-share-mps': { type: 'string' },
  quiet: { type: 'boolean' },
  qemu: { type: 'string' },
  kernel: { type: 'string' },
  'disk-image': { type: 'string' },
  initrd: { type: 'string' },
  socket: { type: 'string' },
  'status-socket': { type: 'string' },
  json: { type: 'boolean' },
  name: { type: 'string' },
  cmdline: { type: 'string' },
  type: { type: 'string' },
  cudart: { type: 'string' },
  transport: { type: 'string' },
  'shm-size': { type: 'string' },
  windows: { type: 'boolean' },
  shm: { type: 'string' },
  'windows-image': { type: 'string' },
  'virtio-win': { type: 'string' },
  'dll-dir': { type: 'string' },
  firmware: { type: 'string' },
  vnc: { type: 'string' },
  'max-processes': { type: 'string' },
  'lib-dir': { type: 'string' },
  save: { type: 'string' },
  restore: { type: 'string' },
  incoming: { type: 'string' },
  monitor: { type: 'string' },
  to: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Values of the backend options vm and run pass on, checked here so that a bad one fails before anything starts. */
const BACKEND_CHOICES: Record<string, readonly string[]> = {
  provider: PROVIDER_KINDS,
  isolation: ['process', 'none'],
  'own-queues': ['yes', 'no'],
  'ring-server': ['yes', 'no'],
  'pin-guest-ram': ['yes', 'no'],
  'worker-sandbox': ['seccomp', 'none'],
};

/** Older names of those values, taken as the value they stand for. */
const BACKEND_ALIASES: Partial<Record<string, ReadonlyMap<string, string>>> = { provider: PROVIDER_ALIASES };

/** Each command's options (a known option of another command is a usage error too, not ignored). */
const COMMAND_OPTIONS: Record<string, string[]> = {
  vm: [
    'file',
    'share',
    'disk',
    'host-root',
    'host-root-writable',
    'virtiofsd',
    'timeout',
    'queues',
    'memory',
    'cpus',
    'demo',
    'console',
    'quiet',
    'qemu',
    'kernel',
    'disk-image',
    'initrd',
    'backend-user',
    'save',
    'restore',
    'incoming',
    'monitor',
    'transport',
    'shm-size',
    'windows-image',
    'virtio-win',
    'dll-dir',
    'firmware',
    'vnc',
    'backend-log',
    ...HOST_BOUND_OPTIONS,
    ...BACKEND_PASSED,
  ],
  migrate: ['monitor', 'to'],
  run: [
    'socket',
    'transport',
    'cudart',
    'max-processes',
    'lib-dir',
    'backend-user',
    'backend-log',
    ...HOST_BOUND_OPTIONS,
    ...BACKEND_PASSED,
  ],
  'qemu-args': ['socket', 'disk-socket', 'kernel', 'initrd', 'queues', 'memory', 'cpus'],
  status: ['socket', 'status-socket', 'json'],
  'libvirt-xml': [
    'name',
    'socket',
    'kernel',
    'initrd',
    'cmdline',
    'disk',
    'qemu',
    'memory',
    'cpus',
    'queues',
    'type',
    ...WINDOWS_DOMAIN_ONLY,
  ],
};

/** The backend options vm and run share. */
function backendOptions(v: { [k: string]: string | boolean | string[] | undefined }): string[] {
  for (const [k, choices] of Object.entries(BACKEND_CHOICES)) {
    const x = v[k];
    if (typeof x === 'string' && !choices.includes(BACKEND_ALIASES[k]?.get(x) ?? x))
      usage(`--${k} must be ${choices.slice(0, -1).join(', ')} or ${choices[choices.length - 1]}, got '${x}'`);
  }
  let gpus = [0];
  if (typeof v.gpu === 'string') {
    try {
      gpus = parseGpus(v.gpu);
    } catch (e) {
      usage((e as Error).message);
    }
  }
  const hd = v['host-devices'];
  if (typeof hd === 'string' && (!/^\d+$/.test(hd) || +hd < 1 || +hd > MAX_HOST_DEVICES))
    usage(`--host-devices must be an integer in 1..${MAX_HOST_DEVICES}, got '${hd}'`);
  try {
    hostDeviceCount(typeof hd === 'string' ? +hd : undefined, gpus); // the backend defaults it so too
  } catch (e) {
    usage((e as Error).message);
  }
  if (typeof v['context-overhead'] === 'string') {
    try {
      parseSize(v['context-overhead']);
    } catch (e) {
      usage(`--context-overhead: ${(e as Error).message}`);
    }
  }
  if (typeof v['gpu-share'] === 'string') {
    try {
      parseWeight(v['gpu-share']);
    } catch (e) {
      usage((e as Error).message);
    }
  }
  // The backend may run as another user, elsewhere: the MPS directory by its whole path, checked here.
  const mps = typeof v['gpu-share-mps'] === 'string' ? path.resolve(v['gpu-share-mps']) : undefined;
  if (mps !== undefined && !fs.statSync(mps, { throwIfNoEntry: false })?.isDirectory())
    usage(`--gpu-share-mps=${v['gpu-share-mps'] as string}: no directory ${mps}`);
  const opt = (k: string) => (typeof v[k] === 'string' ? [`--${k}=${v[k] as string}`] : []);
  return [
    ...opt('provider'),
    ...opt('gpu'),
    ...opt('host-devices'),
    ...opt('isolation'),
    ...opt('own-queues'),
    ...opt('ring-server'),
    ...opt('pin-guest-ram'),
    ...(v['real-gpu-identity'] === true ? ['--real-gpu-identity'] : []),
    ...opt('worker-sandbox'),
    ...opt('context-overhead'),
    ...opt('gpu-share'),
    ...(mps === undefined ? [] : [`--gpu-share-mps=${mps}`]),
  ];
}

/** The host bounds of vm's or run's backends (checked before anything starts). */
function hostBounds(v: { [k: string]: string | boolean | string[] | undefined }) {
  try {
    return parseHostBounds({
      memory: v['host-memory-max'] as string | undefined,
      tasks: v['host-tasks-max'] as string | undefined,
      cpu: v['host-cpu-quota'] as string | undefined,
    });
  } catch (e) {
    usage((e as Error).message);
  }
}

/** The control group the backends run in (name: the command's), or none, said once (security review 3, N10). */
function hostCgroup(name: string, bounds: ReturnType<typeof hostBounds>): HostCgroup | undefined {
  const g = HostCgroup.make(name, bounds);
  if (typeof g !== 'string') return g;
  process.stderr.write(`qcuda: no host memory, task or CPU bound applies to the backends: ${g}\n`);
  return undefined;
}

/** qcuda run: PROGRAM on this host over qcuda's libraries and a backend. */
async function run(v: { [k: string]: string | boolean | string[] | undefined }, argv: string[]): Promise<number> {
  if (argv.length === 0) usage('run needs a PROGRAM to run');
  const cudart = (v.cudart as string | undefined) ?? 'native';
  if (cudart !== 'native' && cudart !== 'qcuda') usage(`--cudart must be native or qcuda, got '${cudart}'`);
  const transport = (v.transport as string | undefined) ?? 'vhost-user';
  if (transport !== 'vhost-user' && transport !== 'shm') usage(`--transport must be vhost-user or shm, got '${transport}'`);
  if (transport === 'shm' && v.socket) usage('--transport=shm needs a backend of its own (not --socket)');
  const str = (k: string) => v[k] as string | undefined;
  if (
    str('socket') &&
    (backendOptions(v).length > 0 ||
      ['device-memory-limit', 'max-processes', 'backend-log', 'backend-user', ...HOST_BOUND_OPTIONS].some((k) => str(k) !== undefined))
  )
    usage("--socket joins a running backend: its options are that backend's (give them to qcuda-backend)");
  const processes = intOpt(str('max-processes'), 'max-processes', 64, 4096);
  // Bounds only where asked: PROGRAM is the user's own process, not a tenant (N10 is about VMs).
  const bounded = HOST_BOUND_OPTIONS.some((k) => str(k) !== undefined);
  const bounds = bounded ? hostBounds(v) : undefined;
  const limit = str('device-memory-limit');
  if (limit !== undefined) quotaOf(limit);
  const socket = str('socket') && existingSocket(path.resolve(str('socket')!), '--socket');
  const given = str('lib-dir') ?? process.env.QCUDA_LIB_DIR;
  const libDir = path.resolve(given ?? path.resolve(__dirname, '..', '..', '..', '..', 'build', 'guest', 'lib'));
  // A directory the user named must hold the libraries (the build's own, if missing, is RunError's: make builds it).
  if (given !== undefined) {
    for (const lib of ['libcuda.so.1', ...(cudart === 'qcuda' ? ['libcudart.so.13'] : [])])
      if (!fs.existsSync(path.join(libDir, lib))) usage(`--lib-dir=${given} (or QCUDA_LIB_DIR): no ${lib} there`);
  }
  const backendArgs = [
    ...backendOptions(v),
    ...(v['pin-guest-ram'] === undefined ? ['--pin-guest-ram=yes'] : []),
    // The program runs on this host, beside NVIDIA's NVML and nvidia-smi: an identity of its
    // own hides nothing there and would break matching NVML's GPUs to CUDA's (NCCL does).
    ...(v['real-gpu-identity'] === undefined ? ['--real-gpu-identity'] : []),
    ...(limit ? [`--device-memory-limit=${limit}`] : []),
    `--max-processes=${processes}`,
  ];
  const backendLog = str('backend-log') !== undefined ? timedLines(str('backend-log')!) : undefined;
  // As root, the backend (and its workers, which run code the command chose) runs as another user, as qcuda vm's do.
  let backendUser: BackendUserChoice = {};
  if (!socket) {
    try {
      backendUser = chooseBackendUser(str('backend-user'), [], true);
    } catch (e) {
      usage((e as Error).message);
    }
    if (backendUser.note) process.stderr.write(`qcuda: ${backendUser.note}\n`);
  }
  const cgroup = socket || !bounds ? undefined : hostCgroup('run', bounds);
  try {
    return await runCuda({
      backendUser: backendUser.user,
      hostCgroup: cgroup,
      argv,
      socket,
      qcudaRuntime: cudart === 'qcuda',
      shm: transport === 'shm',
      libDir,
      // Each frontend is one process and its "guest RAM" is that process's own memory: pinned whole.
      backendArgs,
      frontends: processes,
      startTimeoutMs: 60_000,
      backendLog,
    });
  } catch (e) {
    if (e instanceof RunError) {
      process.stderr.write(`qcuda run: ${e.message}\n`);
      return 125;
    }
    throw e;
  } finally {
    await cgroup?.remove();
  }
}

/** The CUDA programs of the demo, of both builds. */
const DEMO_PROGRAMS = [
  'device',
  'memcpy',
  'stream',
  'hostmem',
  'errors',
  'killcopy',
  'device_static',
  'memcpy_static',
  'stream_static',
  'hostmem_static',
];

/** The main job: the transport, then CUDA programs of both builds (on the GPU where the backend finds one). */
const DEMO_COMMAND =
  'nop_test -t 4 -n 100 > /tmp/nop.out || { cat /tmp/nop.out; exit 1; }; tail -1 /tmp/nop.out; ' +
  `for p in ${DEMO_PROGRAMS.join(' ')}; ` +
  'do $p > /tmp/$p.out || { cat /tmp/$p.out; exit 1; }; echo "$p: $(tail -1 /tmp/$p.out)"; done';

/**
 * A disk image holds none of the test programs: the demo hands them in
 * (GUEST_BIN, which make sets, else the clone's build/guest/bin).
 */
function demoFiles(): string[] {
  const bin = process.env.GUEST_BIN ?? path.resolve(__dirname, '..', '..', '..', '..', 'build', 'guest', 'bin');
  const files = ['nop_test', ...DEMO_PROGRAMS].map((p) => path.join(bin, p));
  const missing = files.filter((f) => !fs.existsSync(f));
  if (missing.length > 0) usage(`--demo --disk-image needs the guest programs (make vm builds them): missing ${missing.join(', ')}`);
  return files;
}

/** PATH[:rw] -> the disk image to boot. */
function parseDiskImage(spec: string): VmDiskImage {
  const writable = spec.endsWith(':rw');
  const p = writable ? spec.slice(0, -3) : spec;
  if (!p) usage('--disk-image needs a PATH');
  return { path: path.resolve(p), writable };
}

/** SIZE[,store=gpu|host][,ro] -> a disk (bad usage exits 2). */
function parseDisk(spec: string): VmDisk {
  if (spec.startsWith('socket=')) return { size: 0n, socket: existingSocket(path.resolve(spec.slice(7)), '--disk socket') };
  const [size, ...opts] = spec.split(',');
  const d: VmDisk = { size: 0n };
  try {
    d.size = parseSize(size);
  } catch (e) {
    usage(`--disk=${spec}: ${(e as Error).message}`);
  }
  if (d.size === 0n || d.size % 512n !== 0n) usage(`--disk=${spec}: the size must be a positive multiple of 512 bytes`);
  for (const o of opts) {
    if (o === 'ro') d.readOnly = true;
    else if (o === 'store=gpu' || o === 'store=host') d.store = o.slice(6) as 'gpu' | 'host';
    else usage(`--disk=${spec}: unknown option '${o}' (store=gpu, store=host or ro)`);
  }
  return d;
}

/** --device-memory-limit for the VM: more than 0. */
function quotaOf(limit: string): bigint {
  let q: bigint;
  try {
    q = parseSize(limit);
  } catch (e) {
    usage(`--device-memory-limit: ${(e as Error).message}`);
  }
  if (q === 0n) usage('--device-memory-limit must be more than 0');
  return q;
}

/** What to try after the demo, as typed: qcuda where it is on PATH (make run installs it), else this file by node. */
function demoNext(gpu: boolean): string {
  const q = onPath('qcuda') ? 'qcuda' : `node ${shq(__filename)}`;
  return [
    '',
    'Next, try:',
    `  ${q} vm -- 'vectorAdd; matrixMul'${gpu ? '' : '        (kernels need a GPU host: here they stop at SKIP)'}`,
    `  ${q} vm --file=./my_program -- my_program`,
    `  ${q} vm --host-root -- 'python3 my_script.py'   (the host's own files and Python, over qcuda's libcuda.so.1)`,
    `  ${q} vm --disk=1G${gpu ? '' : ',store=host'} -- 'mke2fs -q /dev/vda && mkdir -p /mnt && mount /dev/vda /mnt && df -h /mnt'`,
    `  ${q} help`,
    '',
  ].join('\n');
}

async function status(socket: string | undefined, statusSocket: string | undefined, json: boolean): Promise<number> {
  if (!socket && !statusSocket) usage("status needs --socket=PATH (the backend's --socket-path) or --status-socket=PATH");
  const at = statusSocket ?? defaultStatusSocket(socket!);
  let doc: BackendStatus;
  try {
    doc = (await readStatus(at)) as BackendStatus;
  } catch (e) {
    process.stderr.write(`qcuda: no status from ${at}: ${(e as Error).message}\n`);
    return 1;
  }
  process.stdout.write(json ? `${JSON.stringify(doc, null, 2)}\n` : formatStatus(doc));
  return 0;
}

/** qcuda libvirt-xml: a domain for the backend at --socket (--windows: at --shm). */
function libvirtXml(v: { [k: string]: string | boolean | string[] | undefined }): string {
  const str = (k: string) => v[k] as string | undefined;
  const qemu = () => existingFile(need(str('qemu'), 'qemu', 'QEMU_BIN'), 'QEMU', true);
  const int = (name: string, dflt: number, max: number) => intOpt(str(name), name, dflt, max);
  if (v.windows) return windowsLibvirtXml({ str, given: Object.keys(v), qemu, int, fail: usage });
  const windowsOnly = Object.keys(v).find((k) => WINDOWS_DOMAIN_ONLY.includes(k));
  if (windowsOnly) usage(`--${windowsOnly} is an option of a Windows domain (libvirt-xml --windows)`);
  if (!str('name') || !str('socket')) usage("libvirt-xml needs --name=VM and --socket=PATH (the backend's --socket-path)");
  const disks = (v.disk as string[] | undefined) ?? [];
  if (disks.length > 1) usage('libvirt-xml boots one --disk=IMAGE');
  const disk = disks[0] && existingFile(path.resolve(disks[0]), '--disk');
  if (!disk && !str('kernel')) usage('libvirt-xml needs --kernel=PATH (direct boot) or --disk=IMAGE (raw or qcow2)');
  if (disk && (str('kernel') || str('initrd') || str('cmdline')))
    usage('libvirt-xml boots --disk=IMAGE or --kernel=PATH (with --initrd, --cmdline), not both');
  if (str('initrd') && !str('kernel')) usage('--initrd goes with --kernel');
  const type = domainType(str('type'), usage);
  const file = (k: string) => (str(k) ? existingFile(path.resolve(str(k)!), `--${k}`) : undefined);
  return domainXml({
    name: str('name')!,
    socket: path.resolve(str('socket')!),
    emulator: qemu(),
    kernel: file('kernel'),
    initrd: file('initrd'),
    cmdline: str('cmdline'),
    disk: disk ? { path: disk, format: disk.endsWith('.qcow2') ? 'qcow2' : 'raw' } : undefined,
    memoryMiB: int('memory', 2048, 1 << 20),
    cpus: int('cpus', 2, 256),
    queues: int('queues', 4, 64),
    type,
    reconnectMs: 1000,
  });
}

/** qcuda vm --windows-image (cli/windows-vm.ts), with vm's backend options. */
function windowsVmOf(v: { [k: string]: string | boolean | string[] | undefined }, positionals: string[]): Promise<number> {
  const backendArgs = backendOptions(v);
  const limit = v['device-memory-limit'] as string | undefined;
  if (limit !== undefined) backendArgs.push(`--device-memory-limit=${quotaOf(limit)}`);
  const bounds = hostBounds(v);
  let backendUser: BackendUserChoice;
  try {
    backendUser = chooseBackendUser(v['backend-user'] as string | undefined, [], true);
  } catch (e) {
    usage((e as Error).message);
  }
  return windowsVm({
    v,
    positionals,
    given: Object.keys(v),
    backendArgs,
    backendUser: backendUser.user,
    hostCgroup: () => hostCgroup('vm', bounds),
    qemu: () => existingFile(need(v.qemu as string | undefined, 'qemu', 'QEMU_BIN'), 'QEMU', true),
    int: (name, dflt, max) => intOpt(v[name] as string | undefined, name, dflt, max),
    fail: usage,
  });
}

/** vm's --transport and --shm-size: the region's bytes where the VM gets the ivshmem device, else undefined. */
function vmTransport(v: { [k: string]: string | boolean | string[] | undefined }): number | undefined {
  const transport = (v.transport as string | undefined) ?? 'vhost-user';
  if (transport !== 'vhost-user' && transport !== 'shm') usage(`--transport must be vhost-user or shm, got '${transport}'`);
  if (transport !== 'shm') {
    if (v['shm-size'] !== undefined) usage('--shm-size needs --transport=shm');
    return undefined;
  }
  // The device's BAR (sysfs resource2) is root's: the initramfs guest's command runs as root, a disk image's does not.
  if (v['disk-image'] !== undefined) usage('--transport=shm works with the initramfs guest only, not with --disk-image');
  if (v.save !== undefined || v.restore !== undefined || v.incoming !== undefined)
    usage('--transport=shm: a VM with a shared-memory region cannot be saved, restored or migrated');
  try {
    return parseShmSize(v['shm-size'] as string | undefined);
  } catch (e) {
    usage((e as Error).message);
  }
}

async function main(): Promise<number> {
  const [cmd, ...rest] = process.argv.slice(2);
  if (!cmd || cmd === 'help' || cmd === '--help' || cmd === '-h') {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: OPTIONS, allowPositionals: true, strict: true });
  } catch (e) {
    usage((e as Error).message);
  }
  const { values: v, positionals } = parsed;
  if (v.help) {
    process.stdout.write(`${HELP}\n`);
    return 0;
  }
  const known = COMMAND_OPTIONS[cmd];
  if (!known) usage(`unknown command '${cmd}'`);
  const other = Object.keys(v).find((k) => !known.includes(k));
  if (other) usage(`--${other} is not an option of 'qcuda ${cmd}'`);
  if (cmd !== 'vm' && cmd !== 'run' && positionals.length > 0) usage(`'qcuda ${cmd}' takes no arguments, got '${positionals[0]}'`);
  if (cmd === 'qemu-args') {
    if (!v.socket) usage("qemu-args needs --socket=PATH (the backend's --socket-path)");
    const args = qemuArgs({
      kernel: existingFile(need(v.kernel, 'kernel', 'GUEST_KERNEL'), 'the kernel'),
      initrd: existingFile(need(v.initrd, 'initrd', 'GUEST_INITRD'), 'the initrd'),
      socket: path.resolve(v.socket),
      queues: intOpt(v.queues, 'queues', 4, 64),
      memoryMiB: intOpt(v.memory, 'memory', 512, 1 << 20),
      cpus: intOpt(v.cpus, 'cpus', 2, 256),
      disks: (v['disk-socket'] ?? []).map((s) => ({ socket: path.resolve(s), queues: DISK_QUEUES })),
    });
    process.stdout.write(`${args.map(shq).join(' ')}\n`);
    return 0;
  }
  if (cmd === 'status') return status(v.socket, v['status-socket'], v.json ?? false);
  if (cmd === 'migrate') {
    if (!v.monitor || !v.to) usage("migrate needs --monitor=PATH (the VM's, qcuda vm --monitor) and --to=URI");
    return migrateCommand(existingSocket(path.resolve(v.monitor), '--monitor'), v.to, (l) => process.stderr.write(`qcuda: ${l}\n`));
  }
  if (cmd === 'run') return run(v, positionals);
  if (cmd === 'libvirt-xml') {
    process.stdout.write(libvirtXml(v));
    return 0;
  }
  if (v['windows-image'] !== undefined) return windowsVmOf(v, positionals);
  if (v['virtio-win'] !== undefined || v['dll-dir'] !== undefined || v.firmware !== undefined || v.vnc !== undefined)
    usage('--virtio-win, --dll-dir, --firmware and --vnc are options of a Windows VM (--windows-image)');
  if (v.demo && positionals.length > 0) usage('--demo runs its own programs: no COMMAND');
  let command = v.demo ? DEMO_COMMAND : positionals.join(' ');
  if (v.console) {
    if (!v['disk-image']) usage('--console needs --disk-image (the initramfs guest has no login)');
    if (command) usage('--console runs no COMMAND: log in and run it yourself');
  } else if (v.restore !== undefined && v.incoming !== undefined) usage('--restore and --incoming: one or the other');
  const incoming = v.restore !== undefined ? `file:${existingFile(path.resolve(v.restore), '--restore')}` : v.incoming;
  if (!command && incoming)
    command = 'true'; // the guest's own command came with its state
  else if (!command && !v.console) usage('vm needs a COMMAND to run in the guest (or --demo)');
  const shares: VmShare[] = [];
  try {
    for (const spec of v.share ?? []) shares.push(parseShareSpec(spec));
    if (v['host-root'] || v['host-root-writable']) {
      const writable = !!v['host-root-writable'];
      shares.push({ hostDir: '/', guestDir: '/host', flat: writable });
      command = `exec qcuda-chroot /host${writable ? ' -w' : ''} -C ${shq(process.cwd())} ${shq(command)}`;
    }
    resolveShares(shares);
  } catch (e) {
    usage((e as Error).message);
  }
  const shmBytes = vmTransport(v);
  // The command finds the region's device first, as qcuda run --transport=shm's PROGRAM is handed its file.
  if (shmBytes) command = `${GUEST_FIND_SHM}\n${command}`;
  const disks = (v.disk ?? []).map(parseDisk);
  try {
    for (const line of chooseDiskStores(disks, gpuProbe)) process.stderr.write(`qcuda: ${line}\n`);
  } catch (e) {
    usage((e as Error).message);
  }
  const diskImage = v['disk-image'] !== undefined ? parseDiskImage(v['disk-image']) : undefined;
  // A disk image boots its own kernel and initrd unless both are given.
  if (diskImage && (v.kernel === undefined) !== (v.initrd === undefined))
    usage('with --disk-image, pass both --kernel and --initrd or neither');
  for (const f of v.file ?? []) existingFile(path.resolve(f), '--file');
  const files = [...(v.file ?? []).map((f) => path.resolve(f)), ...(diskImage && v.demo ? demoFiles() : [])];
  let backendUser: BackendUserChoice;
  try {
    backendUser = chooseBackendUser(v['backend-user'], [], true);
  } catch (e) {
    usage((e as Error).message);
  }
  if (backendUser.note) process.stderr.write(`qcuda: ${backendUser.note}\n`);
  const virtiofsd = shares.length > 0 ? need(v.virtiofsd ?? (defaultVirtiofsd() || undefined), 'virtiofsd', 'QCUDA_VIRTIOFSD') : undefined;
  // Everything is checked before runVm starts a process: a bad argument is a usage error, never a half-started VM.
  const sizes = {
    timeoutMs: intOpt(v.timeout, 'timeout', v.console ? 86400 : 300, 86400) * 1000,
    queues: intOpt(v.queues, 'queues', 4, 64),
    memoryMiB: intOpt(v.memory, 'memory', 512, 1 << 20),
    cpus: intOpt(v.cpus, 'cpus', 2, 256),
  };
  const backendArgs = backendOptions(v);
  const bounds = hostBounds(v);
  const deviceMemoryLimit = v['device-memory-limit'] !== undefined ? quotaOf(v['device-memory-limit']) : undefined;
  const qemu = existingFile(need(v.qemu, 'qemu', 'QEMU_BIN'), 'QEMU', true);
  const file = (k: 'kernel' | 'initrd') => (v[k] === undefined ? undefined : existingFile(path.resolve(v[k]), `--${k}`));
  const bootFiles = diskImage
    ? { diskImage, kernel: file('kernel'), initrd: file('initrd') }
    : {
        kernel: existingFile(need(v.kernel, 'kernel', 'GUEST_KERNEL'), 'the kernel'),
        initrd: existingFile(need(v.initrd, 'initrd', 'GUEST_INITRD'), 'the initrd'),
      };
  const onBackendLog = v['backend-log'] !== undefined ? timedLines(v['backend-log']) : undefined;
  const cgroup = hostCgroup('vm', bounds);
  try {
    const r = await runVm({
      hostCgroup: cgroup,
      qemu,
      ...bootFiles,
      command,
      files,
      shares,
      virtiofsd,
      disks,
      shmBytes,
      ...sizes,
      interactive: v.console,
      backendArgs,
      deviceMemoryLimit,
      onBackendLog,
      // The demo prints each result once (from the guest's stdout), not the console too.
      onConsole: v.quiet || v.demo ? undefined : (s) => process.stderr.write(s),
      backendUser: backendUser.user,
      // Even with --quiet: it explains a delay that is not the guest's.
      onWaiting: (line) => process.stderr.write(`qcuda: ${line}\n`),
      incoming,
      saveFile: v.save !== undefined ? path.resolve(v.save) : undefined,
      monitorSocket: v.monitor !== undefined ? path.resolve(v.monitor) : undefined,
      onMigration: (line) => process.stderr.write(`qcuda: ${line}\n`),
    });
    if (r.migrated) {
      process.stderr.write('qcuda: the VM migrated away; its command finishes there\n');
      return 0;
    }
    if (v.console) {
      process.stderr.write(`\nqcuda: the guest powered off (QEMU exited with status ${r.exit})\n`);
      return r.exit ?? 125;
    }
    if (v.demo) process.stdout.write(`qcuda: the guest's CUDA calls ran on the ${r.provider ?? "backend's provider"}\n`);
    process.stdout.write(r.stdout);
    process.stderr.write(r.stderr);
    if (v.demo) process.stdout.write(demoNext(r.provider?.startsWith('cuda') ?? false));
    const boot = diskImage ? `systemd ${r.systemd ?? '?'}; boot to qcuda-vm-run` : 'boot to /init';
    process.stderr.write(`qcuda: guest command exited with status ${r.exit}; ${boot} ${r.bootMs ?? '?'} ms, total ${r.wallMs} ms\n`);
    return r.exit ?? 125;
  } catch (e) {
    return vmFailed(e, usage);
  } finally {
    await cgroup?.remove();
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`qcuda: ${(e as Error).stack ?? e}\n`);
    process.exit(1);
  },
);
