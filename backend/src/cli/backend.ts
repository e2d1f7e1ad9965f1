#!/usr/bin/env node
// qcuda-backend: the vhost-user backend program, following the vhost-user
// spec's "backend program conventions" (--socket-path, --fd,
// --print-capabilities; exits cleanly on SIGTERM).
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { DEVICES, type DeviceOptions } from '../devices';
import type { VmShared } from '../qcuda/session/session';
import { DEFAULT_LIMITS, GPU_CONTEXT_OVERHEAD, type VmLimits } from '../qcuda/quota/limits';
import { ShmBridge, shmOptions } from '../shm/bridge';
import {
  DEFAULT_INLINE_WAIT_US,
  DEFAULT_POLL_US,
  hostDeviceCount,
  parseGpus,
  parseSize,
  PROVIDER_KINDS,
  providerKind,
} from '../qcuda/choose-provider';
import { MAX_HOST_DEVICES } from '../qcuda/providers/emu';
import { LogLimiter } from '../vhost-user';
import { StatusSocket } from '../sys/status-socket';
import { stderrLogger, VhostUserServer, type DeviceSource, type Logger } from '../vhost-user';
import { backendStatus, defaultStatusSocket } from './status';
import { joinShare, type ShareGate } from '../qcuda/share/gate';
import { parseWeight } from '../qcuda/share/policy';
import { defaultTablePath } from '../qcuda/share/table';
import { UsageWindow } from '../qcuda/share/usage-window';
import { mpsDaemonMissing, mpsPercentageNow, setMpsMode } from '../qcuda/share/mps';
import { harden } from '../sys/harden';
import { chooseBackendUser, type BackendUserChoice } from '../vm/backend-user';
import { RestartSlot, RestartState } from '../vhost-user';

/** How long a stop for a restart waits for the requests in flight (the unit's TimeoutStopSec leaves room for it and the save). */
const RESTART_DRAIN_MS = 30_000;
/** How long a stopping backend waits for its devices' resets (qcuda vm kills it at 2 s, qcuda run at 5 s). */
const SETTLE_MS = 1500;

const HELP = `Usage: qcuda-backend (--socket-path=PATH | --fd=FDNUM) [options]

Serves a virtio device to QEMU over vhost-user.

  --socket-path=PATH      listen on this unix socket (an old socket file there
                          is replaced; it is removed on exit). The backend keeps
                          listening after a frontend disconnects, so QEMU can
                          reconnect (-chardev socket,...,reconnect-ms=N).
  --fd=FDNUM              serve an already connected socket inherited as FDNUM;
                          exit when it closes.
  --status-socket=PATH    answer each connection on this unix socket with one
                          JSON document: sessions, device memory against the
                          quota, calls served per queue, guest memory mapped,
                          uptime ('qcuda status' prints it). Default: the
                          --socket-path with '.status' appended; 'none': no
                          status socket (the default with --fd)
  --device=NAME           the device to serve (default qcuda):
${Object.entries(DEVICES)
  .map(([n, d]) => `                            ${n.padEnd(8)}${d.describe}`)
  .join('\n')}
  --queues=N              request queues (default 4; must match QEMU's num-queues)
  --shm=PATH              qcuda: also serve a shared-memory region, a file
                          created at PATH (it must not exist; removed on
                          exit), which one guest process at a time attaches
                          to (QCUDA_SHM=PATH; a Windows VM's ivshmem device:
                          docs/windows.md); it is one of the --frontends.
                          Without --socket-path the region is all it serves
  --shm-size=SIZE         the region's size (default 512M; at least 98M):
                          rings, staging room and the guest's pinned memory
  --frontends=N           with --socket-path: serve up to N frontends at once,
                          each a device of its own sharing one quota and the
                          bounds below (the processes of 'qcuda run', each
                          its own frontend); default 1 (a VM's QEMU)
  --provider=KIND         qcuda only: what runs the CUDA calls (default auto):
                            cuda    the GPU, through the CUDA driver (libcuda.so.1)
                            emu     a CUDA device emulated in host RAM (no
                                    kernels; 'host', its old name, works too)
                            auto    cuda where a GPU answers, else emu
  --gpu=N                 qcuda, and blk with --store=gpu: which GPU (default 0);
                          qcuda also takes a list (--gpu=0,1): the guest sees
                          those GPUs as its devices 0, 1, ... in that order
  --host-devices=N        qcuda with the emu provider: how many devices it
                          emulates (1 to 16; default: as many as --gpu lists,
                          else 1), each with the emulated memory, peer copies
                          between them
  --isolation=MODE        qcuda with the cuda provider: where each guest
                          process's CUDA context runs (default process):
                            process  a worker process per guest process: a
                                     kernel fault (which poisons every CUDA
                                     context of the process it happens in)
                                     ends only that guest process's context
                            none     all in this process: one message hop
                                     less per call, but one guest process's
                                     kernel fault ends CUDA for all of the VM,
                                     and contexts of one process can read each
                                     other's device memory, so the VM gets one
                                     CUDA process at a time (a second one's
                                     first call fails: cudaErrorDevicesUnavailable);
                                     its waits and calls then run on this
                                     process's thread as a worker's do
                                     (--inline-wait, --inline-calls)
  --worker-sandbox=MODE   qcuda with --isolation=process: what confines each
                          worker process once its CUDA context is made, before
                          it serves the guest (default seccomp):
                            seccomp  no new privileges (PR_SET_NO_NEW_PRIVS) and
                                     a system call filter: exec, ptrace, mount,
                                     namespaces, module and kexec loading, eBPF,
                                     keyrings, perf, userfaultfd, id changes and
                                     the like fail with EPERM; a worker whose
                                     kernel refuses the filter does not start
                            none     no sandbox
  --peer-uid=UID          with --socket-path: serve only a frontend whose
                          process runs as UID (the VM's QEMU; SO_PEERCRED): any
                          other connection is logged (its pid and uid) and
                          closed, and the backend keeps listening. The status
                          socket then answers only root, this process's user
                          and UID. Default: any process that can open the socket
  --restart-state=FILE    qcuda, with --socket-path: keep the guest's CUDA
                          programs running across a restart of this backend
                          (systemctl restart; QEMU reconnects: -chardev
                          socket,...,reconnect-ms=N). On SIGTERM or SIGINT the
                          backend takes no more requests, lets those in flight
                          finish (up to ${RESTART_DRAIN_MS / 1000} s), writes the device's state
                          (sessions, device memory, handles) to FILE (a new
                          file renamed into place, mode 0600) and exits 0;
                          started with FILE there, it reads it, removes it, and
                          loads the state when its QEMU is back, before it
                          serves a request, so that the programs' next calls
                          find their memory and handles. A state it cannot
                          keep (a host function not yet run, loaded modules,
                          calls still in flight) or cannot load (corrupted,
                          another VM's, over the quota) is said in one line
                          and the guest's sessions then end (their calls get
                          errors): exit 1 for a stop that could not save it;
                          a refused FILE is kept as FILE.refused. The host
                          provider only: with --provider=cuda it does not
                          start (docs/migration.md)
  --backend-user=USER     started as root: run as USER (its groups too) from the
                          start, before any socket, file or worker is made
                          (default: qcuda where that user exists, else nobody;
                          root: keep root). The socket directories must be
                          writable by USER; where the default user cannot run
                          here (those directories, or the code, closed to it),
                          it does not start: name a user who can, or root
  --size=SIZE             blk only: the disk's size (e.g. 4G; whole 512-byte sectors)
  --store=WHERE           blk only: where the disk lives (default gpu):
                            gpu     device memory of GPU --gpu, allocated at start
                            host    host memory (no GPU needed; at most half the
                                    host's RAM)
  --read-only             blk only: the guest may read the disk, not write it
  --device-memory-limit=SIZE
                          qcuda (and blk with --ledger-fd): per-VM device memory quota (e.g. 2G):
                          allocations, module globals and what the stack, heap
                          and printf limits reserve beyond their defaults, all
                          processes of the VM together, and each process's
                          context (--context-overhead); past it calls fail
                          with cudaErrorMemoryAllocation, and cudaMemGetInfo
                          reports the quota
  --context-overhead=SIZE qcuda only: device memory each guest process's CUDA
                          context counts against --device-memory-limit while
                          it exists: what the driver takes for it beyond any
                          allocation (default ${GPU_CONTEXT_OVERHEAD >> 20n}M with the cuda provider,
                          measured on the H100 with --isolation=process; 0
                          with the emu provider); a context that would pass
                          the quota is not created: the process's first call
                          fails with cudaErrorMemoryAllocation

Bounds per VM (what a guest can make this process hold; past each, the call
that would pass it fails with the CUDA error named, nothing grows):
  --max-processes=N       guest processes with a CUDA context at once, i.e.
                          worker processes (default ${DEFAULT_LIMITS.contexts}; 1 with
                          --isolation=none): cudaErrorDevicesUnavailable
  --module-staging=SIZE   module image bytes being uploaded at once and JIT
                          link results not read back yet, all
                          processes together (default ${DEFAULT_LIMITS.moduleStaging >> 20n}M):
                          cudaErrorMemoryAllocation
  --jit-time-max=SECONDS  how long one module load or JIT link (the driver's
                          JIT of guest PTX) may run in a guest process's
                          worker (default ${DEFAULT_LIMITS.jitTimeMs / 1000}; 0: no bound): past it
                          the worker is ended, and that process's calls fail
                          as when its worker exits; the backend and the
                          other sessions go on (with --isolation=none: no
                          bound)
  --module-cache=SIZE     module image bytes kept by content so that the VM's
                          next processes do not send them again (default
                          ${DEFAULT_LIMITS.moduleCache >> 20n}M; 0: none): the oldest images go first
  --deferred-limit=SIZE   posted work one process may have held behind host
                          functions that have not run (default ${DEFAULT_LIMITS.deferredBytes >> 20n}M):
                          cudaErrorMemoryAllocation at the next synchronize
  --waiter-threads=N      threads of the cuda addon that wait for the GPU
                          (blocking synchronizes), per process: this one and
                          each worker (default ${DEFAULT_LIMITS.waiterThreads}); more waits queue for one
  --inline-wait=US        how long a guest process's worker (with
                          --isolation=none: this process) polls the GPU on
                          its own thread for a
                          synchronize, blocking copy or event wait before
                          handing it to a waiter thread (default ${DEFAULT_INLINE_WAIT_US};
                          0: never); the CPU time of a short wait, for no
                          thread hop
  --inline-calls=yes|no   a guest process's worker (with --isolation=none:
                          this process) runs its ordered calls (allocations,
                          launches, handle changes) on its own thread when
                          its context thread is idle (default yes): no
                          thread hop a call
  --real-gpu-identity     qcuda only: the guest sees the host GPU's real UUID
                          and PCI location (default: a UUID of the VM's own,
                          an HMAC of the real one with a key drawn when this
                          process starts, and PCI location 0:(device+1):0, so
                          that VMs cannot tell that they share a GPU)
  --own-queues=yes|no     a guest process whose driver keeps its requests on a
                          queue of its own (QCUDA_SESSION_OWN_QUEUE) gets that
                          queue served by its worker (isolation process):
                          no hop through this process a call (default yes
                          with the cuda provider, no with the emu provider;
                          with it, yes gives the emu provider's sessions
                          host-memory workers: the same path without a GPU)
  --ring-server=yes|no    a worker serving its guest process's own queue
                          answers the short calls of a round trip
                          (synchronizes, event queries, small copies,
                          launches and short batches of them) in C, with no
                          JavaScript between the request and the driver
                          (cuda provider; default yes)
  --pin-guest-ram=yes|no  register all of guest RAM for the GPU in each
                          worker (cuda provider; default no). Yes: copies
                          from pageable guest memory run at pinned speed,
                          but a guest process's kernel can reach all guest
                          RAM (the guest kernel's, other processes') at an
                          address it can guess. No: only memory a guest
                          process pinned (cudaHostAlloc, managed memory) is
                          registered, and other copies run as pageable ones
                          do natively. qcuda run says yes: there guest RAM
                          is the program's own memory
  --poll-us=US            how long the rings, and each worker its channel, are
                          polled after each request and answer before the
                          process sleeps (default 50 on a host of 4 or more
                          CPUs, else 0; here ${DEFAULT_POLL_US}; 0: wait for kicks): a
                          synchronous call's next request then finds this side
                          awake (no wake-up, no guest kick), for the CPU time
                          of the window; an idle VM costs none. Meanwhile
                          the GPU's completions are polled on the same turns
                          (no waiter thread's wake-up per copy)
  --host-map-pieces=N     pieces of guest memory mapped for the GPU at once
                          (pinned, mapped and managed memory; a piece is a
                          run of physically adjacent guest pages), all
                          processes together (default ${DEFAULT_LIMITS.hostMapPieces}):
                          the memory gets no device pointer past it
  --process-handles=STREAMS,EVENTS,MODULES,OBJECTS
                          what one guest process may hold at once: streams,
                          events, loaded modules, texture and surface objects
                          (and, on a count of their own, virtual memory
                          reservations, allocations and mappings)
                          (default ${DEFAULT_LIMITS.processStreams},${DEFAULT_LIMITS.processEvents},${DEFAULT_LIMITS.processModules},${DEFAULT_LIMITS.processObjects}); past a bound the
                          creation fails with cudaErrorMemoryAllocation
  --gpu-share=WEIGHT      the VM's share of the GPU's compute time, against
                          the other VMs on it started with --gpu-share: an
                          integer from 1 to 1000 (equal weights: equal
                          shares, whatever the number of guest processes).
                          A guest process's posts (launches, copies) wait
                          while its VM is ahead of its weighted share of the
                          time the GPU was busy. Default: no share kept (the
                          driver time-slices every process alike). The VMs
                          meet in a table file only this user can write
                          (QCUDA_GPU_SHARE_TABLE, default
                          qcuda-gpu-share-UID-gpuN in /run/qcuda, else
                          $XDG_RUNTIME_DIR, else /dev/shm/qcuda-UID)
  --gpu-share-mps=PIPE_DIR
                          the VM's share of the GPU's threads too, through
                          NVIDIA's MPS: each process running a guest
                          process's CUDA (a worker) is a client of the MPS
                          control daemon of PIPE_DIR (the operator starts it:
                          CUDA_MPS_PIPE_DIRECTORY=PIPE_DIR
                          nvidia-cuda-mps-control -d; refused at start where
                          none runs), with CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
                          100 x the VM's weight / the weights of the VMs in
                          the table (itself included; at least 1), taken
                          when the worker starts and fixed for its life, and
                          CUDA_MPS_PINNED_DEVICE_MEM_LIMIT the
                          --device-memory-limit. Kernels of different VMs
                          then run side by side instead of taking turns; no
                          VM waits for another (MPS confines each), but the
                          VM's processes take turns on the GPU, one with
                          work on it at a time (MPS caps each process, so
                          the VM is one process's worth; default weight 1).
                          Opt-in:
                          one MPS server serves every VM, and a fatal fault
                          in one client may be reported to all
                          (docs/security.md)
  --log-rate=N            log lines a second caused by the VM (default
                          ${DEFAULT_LIMITS.logLinesPerSecond}); the rest are counted and the count logged
  --ledger-fd=FDNUM       internal (qcuda vm): the VM's budgets in shared
                          memory, inherited as FDNUM, shared by its qcuda
                          backend and its GPU disks' backends: a disk takes
                          device memory from the qcuda device's
                          --device-memory-limit as it is written (a piece at
                          a time; a write past the quota fails with an I/O
                          error), and the qcuda device sees what the disks
                          hold. Each process applies its own limit, never the
                          file's
  --ledger-slot=N         internal, blk with --ledger-fd: the disk's slot in it
  --print-capabilities    print the backend's capabilities as JSON and exit
  -h, --help              this text

Logging: one line on stderr per VM event (frontend connected or gone, memory
table, session opened or closed with what it held, errors), at most --log-rate
a second; DEBUG=qcuda:*,vhost-user:* adds protocol traces. Exit status: 0 on SIGTERM/SIGINT
or when an --fd connection ends; 2 on bad usage (one line on stderr, before
anything starts: a bad number or value, an option of another --device, a
socket in a missing directory, an --fd that is not an open socket, a
--restart-state the provider cannot honour); 1 on a startup error, or a
stop whose --restart-state could not be saved.`;

/** Bad usage: one line on stderr, exit 2, before anything starts. */
function usage(msg: string): never {
  process.stderr.write(`qcuda-backend: ${msg.replace(/\.?\s*\n\s*/g, '; ')} (try 'qcuda-backend --help')\n`);
  process.exit(2);
}

/** Options of one device only: given to another, they would be ignored. */
const DEVICE_ONLY: Record<string, string[]> = {
  blk: ['size', 'store', 'read-only', 'ledger-slot'],
  qcuda: [
    'shm',
    'shm-size',
    'provider',
    'host-devices',
    'isolation',
    'max-processes',
    'module-staging',
    'module-cache',
    'jit-time-max',
    'deferred-limit',
    'inline-wait',
    'inline-calls',
    'own-queues',
    'ring-server',
    'pin-guest-ram',
    'host-map-pieces',
    'process-handles',
    'worker-sandbox',
    'context-overhead',
    'gpu-share',
    'gpu-share-mps',
    'real-gpu-identity',
    'restart-state',
  ],
};

function checkDeviceOptions(device: string, given: string[]): void {
  for (const [owner, names] of Object.entries(DEVICE_ONLY)) {
    const k = owner === device ? undefined : given.find((g) => names.includes(g));
    if (k) usage(`--${k} is an option of --device=${owner}, not of --device=${device}`);
  }
  if (device === 'echo' && given.includes('gpu')) usage('--gpu is an option of --device=qcuda and --device=blk, not of --device=echo');
  if (device === 'blk' && !given.includes('size')) usage('--device=blk needs --size');
  if (device === 'echo' && given.includes('ledger-fd')) usage('--ledger-fd is an option of --device=qcuda and --device=blk');
  // A disk's quota is the VM's, which it shares through the ledger; without one it would bound nothing.
  if (device !== 'qcuda' && given.includes('device-memory-limit') && !given.includes('ledger-fd'))
    usage(`--device-memory-limit is an option of --device=qcuda (and of --device=blk with --ledger-fd), not of --device=${device}`);
  if (device === 'blk' && given.includes('ledger-fd') !== given.includes('ledger-slot')) usage('--ledger-fd and --ledger-slot go together');
}

/** A unix socket is created in an existing directory: a missing one is a bad path, not a startup failure. */
function socketDir(name: string, p: string): void {
  const dir = path.dirname(path.resolve(p));
  if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) usage(`--${name}=${p}: no directory ${dir}`);
}

/** An inherited fd must be open and a socket. */
function connectedFd(v: string): number {
  const fd = positiveInt('fd', v, 0, 1 << 20);
  let st: fs.Stats;
  try {
    st = fs.fstatSync(fd);
  } catch {
    usage(`--fd=${fd}: not an open file descriptor`);
  }
  if (!st.isSocket()) usage(`--fd=${fd}: not a socket`);
  return fd;
}

/** An inherited ledger fd must be open and a file (a memfd: the ledger checks its layout). */
function ledgerFd(v: string): number {
  const fd = nonNegativeInt('ledger-fd', v, 1 << 20);
  let file = false;
  try {
    file = fs.fstatSync(fd).isFile();
  } catch {
    // not open
  }
  if (!file) usage(`--ledger-fd=${fd}: not an open file`);
  return fd;
}

function positiveInt(name: string, v: string | undefined, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  if (!/^\d+$/.test(v) || +v < 1 || +v > max) usage(`--${name} must be an integer in 1..${max}, got '${v}'`);
  return +v;
}

function nonNegativeInt(name: string, v: string, max: number): number {
  if (!/^\d+$/.test(v) || +v > max) usage(`--${name} must be an integer in 0..${max}, got '${v}'`);
  return +v;
}

function yesNo(name: string, v: string): boolean {
  if (v !== 'yes' && v !== 'no') usage(`--${name} must be yes or no, got '${v}'`);
  return v === 'yes';
}

/** --size: whole 512-byte sectors, more than 0. */
function diskSize(v: string | undefined): bigint | undefined {
  if (v === undefined) return undefined;
  let n: bigint;
  try {
    n = parseSize(v);
  } catch (e) {
    usage(`--size: ${(e as Error).message}`);
  }
  if (n === 0n || n % 512n !== 0n) usage(`--size must be a positive multiple of 512 bytes, got '${v}'`);
  return n;
}

function storeOf(v: string | undefined): 'gpu' | 'host' | undefined {
  if (v !== undefined && v !== 'gpu' && v !== 'host') usage(`--store must be gpu or host, got '${v}'`);
  return v;
}

/**
 * Started as root, the backend runs as an unprivileged user (security review
 * 3, N8): its workers run guest-chosen images through NVIDIA's loader, and
 * as root a worker's filter would be all that stands between a guest and the
 * host. The same user qcuda vm starts its backends as (vm/backend-user.ts),
 * taken before anything is made, so that the share table, the JIT cache and
 * the workers are that user's. dirs: where the sockets go (the user must
 * write there).
 */
function dropRoot(wanted: string | undefined, dirs: string[], write: (line: string) => void): void {
  let choice: BackendUserChoice;
  try {
    choice = chooseBackendUser(wanted, dirs);
  } catch (e) {
    usage((e as Error).message);
  }
  // Root by default is what this prevents: where the default user cannot run here, the operator says who (or root).
  if (choice.why)
    usage(`started as root, it runs as an unprivileged user, but ${choice.why}: pass --backend-user=USER, or root to keep root`);
  const u = choice.user;
  if (!u) return;
  // Its groups as its own (video, render: a host may narrow NVIDIA's device nodes to one), then its ids.
  const ids = process as NodeJS.Process & { initgroups(user: string, group: number): void };
  ids.initgroups(u.name, u.gid);
  process.setgid!(u.gid);
  process.setuid!(u.uid);
  if (wanted === undefined) write(`started as root: runs as ${u.name} (--backend-user=root keeps root)`);
}

async function main(): Promise<void> {
  let args;
  try {
    args = parseArgs({
      options: {
        'socket-path': { type: 'string' },
        shm: { type: 'string' },
        'shm-size': { type: 'string' },
        fd: { type: 'string' },
        'status-socket': { type: 'string' },
        device: { type: 'string' },
        queues: { type: 'string' },
        frontends: { type: 'string' },
        provider: { type: 'string' },
        gpu: { type: 'string' },
        'host-devices': { type: 'string' },
        isolation: { type: 'string' },
        'worker-sandbox': { type: 'string' },
        'peer-uid': { type: 'string' },
        'backend-user': { type: 'string' },
        'device-memory-limit': { type: 'string' },
        'max-processes': { type: 'string' },
        'context-overhead': { type: 'string' },
        'module-staging': { type: 'string' },
        'module-cache': { type: 'string' },
        'jit-time-max': { type: 'string' },
        'deferred-limit': { type: 'string' },
        'log-rate': { type: 'string' },
        'waiter-threads': { type: 'string' },
        'inline-wait': { type: 'string' },
        'poll-us': { type: 'string' },
        'inline-calls': { type: 'string' },
        'ring-server': { type: 'string' },
        'pin-guest-ram': { type: 'string' },
        'own-queues': { type: 'string' },
        'host-map-pieces': { type: 'string' },
        'process-handles': { type: 'string' },
        'gpu-share': { type: 'string' },
        'gpu-share-mps': { type: 'string' },
        'print-capabilities': { type: 'boolean' },
        'real-gpu-identity': { type: 'boolean' },
        size: { type: 'string' },
        store: { type: 'string' },
        'read-only': { type: 'boolean' },
        'ledger-fd': { type: 'string' },
        'ledger-slot': { type: 'string' },
        'restart-state': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    }).values;
  } catch (e) {
    usage((e as Error).message);
  }
  if (args.help) {
    process.stdout.write(`${HELP}\n`);
    return;
  }
  const deviceName = args.device ?? 'qcuda';
  const kind = Object.hasOwn(DEVICES, deviceName) ? DEVICES[deviceName] : undefined;
  if (!kind) usage(`unknown device '${deviceName}' (known: ${Object.keys(DEVICES).join(', ')})`);
  if (args['print-capabilities']) {
    // vhost-user.json: a block backend says "block" and the options it takes.
    const caps = deviceName === 'blk' ? { type: 'block', features: ['read-only'] } : { type: deviceName };
    process.stdout.write(`${JSON.stringify(caps)}\n`);
    return;
  }
  let shm: ReturnType<typeof shmOptions>;
  try {
    shm = shmOptions(args.shm, args['shm-size'], args.fd !== undefined);
  } catch (e) {
    usage((e as Error).message);
  }
  if (args['socket-path'] !== undefined && args.fd !== undefined) usage('give only one of --socket-path and --fd');
  if (args['socket-path'] === undefined && args.fd === undefined && !shm) usage('give one of --socket-path, --fd and --shm');
  checkDeviceOptions(deviceName, Object.keys(args));
  const provider = providerKind(args.provider ?? 'auto');
  const isolation = args.isolation ?? 'process';
  if (!provider)
    usage(
      `--provider must be ${PROVIDER_KINDS.slice(0, -1).join(', ')} or ${PROVIDER_KINDS[PROVIDER_KINDS.length - 1]}, got '${args.provider}'`,
    );
  if (!['process', 'none'].includes(isolation)) usage(`--isolation must be process or none, got '${isolation}'`);
  if (args['socket-path'] !== undefined) socketDir('socket-path', args['socket-path']);
  if (args['status-socket'] !== undefined && args['status-socket'] !== 'none') socketDir('status-socket', args['status-socket']);
  const workerSandbox = args['worker-sandbox'] ?? 'seccomp';
  if (!['seccomp', 'none'].includes(workerSandbox)) usage(`--worker-sandbox must be seccomp or none, got '${workerSandbox}'`);
  const peerUid = args['peer-uid'] === undefined ? undefined : nonNegativeInt('peer-uid', args['peer-uid'], 0xfffffffe);
  if (peerUid !== undefined && args.fd !== undefined) usage('--peer-uid needs --socket-path (an --fd is connected already)');
  let memoryLimit: bigint | undefined;
  try {
    memoryLimit = args['device-memory-limit'] === undefined ? undefined : parseSize(args['device-memory-limit']);
  } catch (e) {
    usage(`--device-memory-limit: ${(e as Error).message}`);
  }
  const limits: Partial<VmLimits> = {};
  const size = (name: string, v: string | undefined, zeroOk = false): bigint | undefined => {
    if (v === undefined) return undefined;
    try {
      const n = parseSize(v);
      if (n === 0n && !zeroOk) usage(`--${name} must be more than 0`);
      return n;
    } catch (e) {
      usage(`--${name}: ${(e as Error).message}`);
    }
  };
  if (args['max-processes'] !== undefined) limits.contexts = positiveInt('max-processes', args['max-processes'], 0, 4096);
  if (args['waiter-threads'] !== undefined) limits.waiterThreads = positiveInt('waiter-threads', args['waiter-threads'], 0, 4096);
  if (args['host-map-pieces'] !== undefined) limits.hostMapPieces = positiveInt('host-map-pieces', args['host-map-pieces'], 0, 1 << 20);
  if (args['process-handles'] !== undefined) {
    const n = args['process-handles'].split(',');
    if (n.length !== 4) usage(`--process-handles takes four bounds (streams,events,modules,objects), got '${args['process-handles']}'`);
    [limits.processStreams, limits.processEvents, limits.processModules, limits.processObjects] = n.map((v) =>
      positiveInt('process-handles', v, 0, 1 << 24),
    );
  }
  if (args['log-rate'] !== undefined) limits.logLinesPerSecond = positiveInt('log-rate', args['log-rate'], 0, 1_000_000);
  const staging = size('module-staging', args['module-staging']);
  if (staging !== undefined) limits.moduleStaging = staging;
  const cache = size('module-cache', args['module-cache'], true); // 0: no cache
  if (cache !== undefined) limits.moduleCache = cache;
  // Whole seconds, or a fraction down to ms (tests bound a job at a second or less).
  const jit = args['jit-time-max'];
  if (jit !== undefined) {
    if (!/^\d+(\.\d{1,3})?$/.test(jit) || +jit > 86_400) usage(`--jit-time-max must be seconds from 0 to 86400, got '${jit}'`);
    limits.jitTimeMs = Math.round(+jit * 1000);
  }
  if (args['context-overhead'] !== undefined) {
    try {
      limits.contextOverhead = parseSize(args['context-overhead']);
    } catch (e) {
      usage(`--context-overhead: ${(e as Error).message}`);
    }
  }
  const deferred = size('deferred-limit', args['deferred-limit']);
  if (deferred !== undefined) limits.deferredBytes = deferred;
  let gpus = [0];
  try {
    if (args.gpu !== undefined) gpus = parseGpus(args.gpu);
  } catch (e) {
    usage((e as Error).message);
  }
  if (gpus.length > 1 && deviceName !== 'qcuda') usage('a list of GPUs (--gpu=0,1) is for --device=qcuda');
  const gpu = gpus.length === 1 ? gpus[0] : gpus;
  const queues = positiveInt('queues', args.queues, 4, 64);
  const hd = args['host-devices'] === undefined ? undefined : positiveInt('host-devices', args['host-devices'], 1, MAX_HOST_DEVICES);
  let hostDevices = 1;
  try {
    hostDevices = hostDeviceCount(hd, gpus);
  } catch (e) {
    usage((e as Error).message);
  }
  const frontends = positiveInt('frontends', args.frontends, 1, 4096);
  if (frontends > 1 && args.fd !== undefined) usage('--frontends needs --socket-path (an --fd is one frontend)');
  const fd = args.fd === undefined ? undefined : connectedFd(args.fd);
  const restartFile = restartState(args['restart-state'], { socket: args['socket-path'] !== undefined, frontends, shm: !!shm, provider });
  let gpuShare: number | undefined;
  try {
    gpuShare = args['gpu-share'] === undefined ? undefined : parseWeight(args['gpu-share']);
  } catch (e) {
    usage((e as Error).message);
  }
  const mpsDir = args['gpu-share-mps'] === undefined ? undefined : path.resolve(args['gpu-share-mps']);
  if (mpsDir !== undefined) {
    if (!fs.statSync(mpsDir, { throwIfNoEntry: false })?.isDirectory())
      usage(`--gpu-share-mps=${args['gpu-share-mps']}: no directory ${mpsDir}`);
    gpuShare ??= 1; // the VM's part is its weight's: it must be in the table
  }
  // The rest of the options, parsed before the device (a GPU context, a disk's memory) exists.
  const parsed = {
    size: diskSize(args.size),
    store: storeOf(args.store),
    readOnly: args['read-only'],
    inlineWaitUs: args['inline-wait'] === undefined ? undefined : nonNegativeInt('inline-wait', args['inline-wait'], 1_000_000),
    inlineCalls: args['inline-calls'] === undefined ? undefined : yesNo('inline-calls', args['inline-calls']),
    ringServer: args['ring-server'] === undefined ? undefined : yesNo('ring-server', args['ring-server']),
    pinGuestRam: args['pin-guest-ram'] === undefined ? undefined : yesNo('pin-guest-ram', args['pin-guest-ram']),
    ownQueues: args['own-queues'] === undefined ? undefined : yesNo('own-queues', args['own-queues']),
    realGpuIdentity: args['real-gpu-identity'],
    pollUs: args['poll-us'] === undefined ? undefined : nonNegativeInt('poll-us', args['poll-us'], 1_000_000),
    ledgerFd: args['ledger-fd'] === undefined ? undefined : ledgerFd(args['ledger-fd']),
    ledgerSlot: args['ledger-slot'] === undefined ? undefined : nonNegativeInt('ledger-slot', args['ledger-slot'], 1 << 16),
  };
  const startedAt = Date.now();
  const write = (line: string) => void process.stderr.write(`qcuda-backend: ${line}\n`);
  const statusPath =
    args['status-socket'] === 'none'
      ? undefined
      : (args['status-socket'] ?? (args['socket-path'] !== undefined ? defaultStatusSocket(args['socket-path']) : undefined));
  dropRoot(
    args['backend-user'],
    [args['socket-path'], statusPath, shm?.path].filter((p) => p !== undefined).map((p) => path.dirname(path.resolve(p))),
    write,
  );
  // Not dumpable; ended with the qcuda vm or qcuda run that started it (sys/harden.ts).
  harden('SIGTERM');
  // Every line the VM's doings cause (the device's, the connection's events)
  // shares one rate limit, so that a guest cannot flood the journal.
  const vmLog = new LogLimiter(limits.logLinesPerSecond ?? DEFAULT_LIMITS.logLinesPerSecond, write);
  let server: VhostUserServer;
  let status: StatusSocket | undefined;
  let shareWindow: UsageWindow | undefined;
  let shareGate: ShareGate | undefined;
  let bridge: ShmBridge | undefined;
  try {
    // Without a daemon CUDA would run without MPS, quietly: refused before the VM joins anything.
    const missing = mpsDir === undefined ? undefined : mpsDaemonMissing(mpsDir);
    if (missing) throw new Error(`--gpu-share-mps: ${missing}`);
    // Before the device: its workers inherit where the VM's place in the table is (share/gate.ts).
    if (gpuShare !== undefined) {
      const share = joinShare(process.env.QCUDA_GPU_SHARE_TABLE ?? defaultTablePath(gpus[0]), gpuShare, mpsDir !== undefined);
      write(`GPU share: weight ${gpuShare}, slot ${share.slot} of ${share.table.path}`);
      shareWindow = new UsageWindow(share.table, share.slot);
      shareGate = share.gate;
      if (mpsDir !== undefined) {
        setMpsMode({ pipeDir: mpsDir, table: share.table, slot: share.slot, memoryLimit });
        write(`GPU share: MPS clients of ${mpsDir}, ${mpsPercentageNow()}% of the GPU's threads now`);
      }
    }
    const options: DeviceOptions = {
      queues,
      provider,
      gpu,
      hostDevices,
      memoryLimit,
      limits,
      isolation: isolation as 'process' | 'none',
      ...parsed,
      workerSandbox: workerSandbox as 'seccomp' | 'none',
      log: (line) => vmLog.log(line),
      share: shareGate,
    };
    const device = await kind.create(options);
    // auto chose a provider whose sessions cannot be carried (the cuda provider, or emu workers): refused, not ignored.
    if (restartFile && !device.saveState)
      usage(
        `--restart-state: this backend's sessions cannot be saved (${(device as { provider?: { name: string } }).provider?.name ?? deviceName} provider${parsed.ownQueues ? ' with --own-queues=yes' : ''}; only the emu provider's, served here, are carried yet): drop the option or use --provider=emu`,
      );
    const restart = restartFile ? new RestartSlot(readRestartState(restartFile, write)) : undefined;
    // The library's own lines (a frontend's failed requests, rate-limited;
    // connection errors) go to stderr as they are: they start "vhost-user: ".
    // Its events (connected, memory table, disconnected) are VM events.
    const logger: Logger = { error: stderrLogger.error, info: (line) => vmLog.log(line) };
    // Refused connections are logged under the VM's rate limit too: whoever makes them chooses how many.
    const refused = (line: string) => vmLog.log(line);
    const peer = peerUid === undefined ? undefined : { uid: peerUid, refused };
    if (fd !== undefined) {
      server = VhostUserServer.fromConnectedFd(fd, device, { onDisconnect: () => shutdown(0), logger });
    } else if (frontends > 1 || shm) {
      // Each frontend a device of its own, all counted against the first one's bounds (one quota).
      const shared: DeviceOptions = { ...options, vm: (device as { vm?: VmShared }).vm };
      const source: DeviceSource = {
        make: () => kind.create(shared),
        dispose: (d) => kind.dispose?.(d) ?? Promise.resolve(),
        max: frontends,
      };
      if (args['socket-path'] !== undefined) {
        server = VhostUserServer.listenEach(args['socket-path'], device, source, { logger, peer });
        write(`${device.name} device listening on ${args['socket-path']} for up to ${frontends} frontends`);
      } else server = VhostUserServer.unbound(device, source, { logger });
      if (shm) {
        const s = server;
        bridge = ShmBridge.create({ ...shm, connect: (fd) => s.serveConnected(fd, true), log: (line) => vmLog.log(line) });
        write(`${device.name} device serving the shared-memory region ${shm.path} (${shm.bytes >> 20} MiB)`);
      }
    } else {
      server = VhostUserServer.listen(args['socket-path']!, device, { logger, peer, restart });
      write(`${device.name} device listening on ${args['socket-path']}`);
    }
    if (statusPath !== undefined) {
      const s = server;
      const w = shareWindow;
      status = await StatusSocket.listen(statusPath, () => backendStatus(s, args['socket-path'], startedAt, w && (() => w.status())), {
        uids: peer ? [peer.uid] : [],
        refused,
      });
      write(`status on ${statusPath} (qcuda status --status-socket=${statusPath})`);
    }
  } catch (e) {
    process.stderr.write(`qcuda-backend: ${(e as Error).message}\n`);
    process.exit(1);
  }
  let exiting = false;
  function shutdown(code: number): void {
    // A second stop while the first waits: out at once.
    if (exiting) process.exit(code);
    exiting = true;
    bridge?.close();
    server.close();
    status?.close();
    // The frontends' devices finish their reset (their sessions ended and
    // logged, their memory given back) before the process goes, whatever
    // the order the frontends and the stop came in; a reset stuck past
    // SETTLE_MS is cut short.
    const late = new Promise((r) => setTimeout(r, SETTLE_MS).unref());
    void Promise.race([server.settled(), late]).then(() => process.exit(code));
  }
  let stopping = false;
  // With --restart-state a stop keeps the device's state for the next backend on this socket.
  const stop = (): void => {
    if (!restartFile) return shutdown(0);
    if (stopping) return void write('stopping already: saving the restart state');
    stopping = true;
    write(`stopping for a restart: no more requests taken; the ones in flight get up to ${RESTART_DRAIN_MS / 1000} s`);
    server.saveForRestart(restartFile, RESTART_DRAIN_MS).then(
      (r) => {
        if (r.outcome === 'saved') write(`restart state saved to ${restartFile}: ${r.what}`);
        else if (r.outcome === 'nothing') write(`restart state: ${r.what}`);
        else write(`restart state not saved (${r.what}): the guest's CUDA sessions end with this backend`);
        shutdown(r.outcome === 'failed' ? 1 : 0);
      },
      (e: Error) => {
        write(`restart state not saved (${e.message}): the guest's CUDA sessions end with this backend`);
        shutdown(1);
      },
    );
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

/**
 * --restart-state: a path in an existing directory, for one VM's QEMU on a
 * listening socket, whose sessions the provider can carry (the cuda
 * provider's cannot yet: refused before anything starts).
 */
function restartState(
  v: string | undefined,
  o: { socket: boolean; frontends: number; shm: boolean; provider: string },
): string | undefined {
  if (v === undefined) return undefined;
  if (!o.socket || o.frontends > 1 || o.shm)
    usage(
      "--restart-state needs --socket-path and one frontend (a VM's QEMU, which reconnects to the socket), without --fd, --frontends or --shm",
    );
  if (o.provider === 'cuda')
    usage(
      "--restart-state: the cuda provider's sessions cannot be saved yet (their CUDA state lives in the GPU and its workers): use --provider=emu, or drop the option",
    );
  const file = path.resolve(v);
  if (!fs.statSync(path.dirname(file), { throwIfNoEntry: false })?.isDirectory())
    usage(`--restart-state=${v}: no directory ${path.dirname(file)}`);
  if (fs.statSync(file, { throwIfNoEntry: false })?.isDirectory()) usage(`--restart-state=${v}: a directory`);
  return file;
}

/**
 * The state a stopped backend left in file, read and checked (its frame's
 * CRC, whose state it is), then removed, so that a crash of this backend
 * does not bring it back later. A file that is refused is kept as
 * file.refused, and the device starts empty: the guest's old sessions
 * then get errors.
 */
function readRestartState(file: string, write: (line: string) => void): RestartState | undefined {
  if (!fs.existsSync(file)) {
    write(`restart state: none in ${file}: the device starts empty`);
    return undefined;
  }
  try {
    const s = RestartState.read(file);
    fs.rmSync(file);
    write(
      `restart state: ${file} read (${s.bytes} bytes of ${s.mark.device} state saved at ${s.mark.savedAt} by pid ${s.mark.pid}) and removed: loaded when its QEMU is back`,
    );
    return s;
  } catch (e) {
    let kept = '';
    try {
      fs.renameSync(file, `${file}.refused`);
      kept = `; kept as ${file}.refused`;
    } catch (r) {
      kept = `; could not set it aside (${(r as Error).message})`;
    }
    write(`restart state refused, the device starts empty (the guest's old sessions get errors): ${(e as Error).message}${kept}`);
    return undefined;
  }
}

main().catch((e) => {
  process.stderr.write(`qcuda-backend: ${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
