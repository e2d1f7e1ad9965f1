// A provider with a process per session: each guest process's CUDA context
// lives in a worker process of its own (worker.ts), which maps guest RAM
// from the same memfds and runs the calls there.
//
// Why: on the H100 (driver 580) a kernel fault (an illegal address) poisons
// every CUDA context of the process it happens in, new ones too. With all
// sessions in the backend process, one guest process's bad kernel would end
// CUDA for every other process of its VM; in a worker it ends that worker.
// It also makes device printf attribution exact: a worker's stdout holds one
// session's output.
//
// This process keeps what is no session's: device properties and memory
// info, from an in-process provider that never runs a kernel (so nothing can
// poison it), and the guest RAM regions, with a dup of each fd, which every
// worker gets when it starts and whenever they change. Every call costs a
// message each way on the worker's channel (channel.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import createDebug from 'debug';
import { native } from '../../sys/native';
import { Fd } from '../../vhost-user';
import { childEnv } from '../../sys/harden';
import type { MemRegion, RingState } from '../../vhost-user';
import { CudaErr, CudaError } from '../cuda-error';
import {
  CONTEXT_METHODS,
  CONTEXT_TWINS,
  type ContextTwins,
  type DevPtr,
  type DeviceProps,
  type GuestMemorySource,
  type GuestSeg,
  type OutputSink,
  type Provider,
  type ProviderContext,
  type ProviderName,
  type StreamRef,
  type HostBlock,
  type Place,
  type OwnOrder,
  type QueueOwner,
  type VmmRef,
} from '../provider';
import type { IpcAnswerer, IpcAsk } from '../ipc/ipc-remote';
import type { ModuleStore } from '../modules/module-cache';
import { checkImage } from '../modules/module-image';
import { QCUDA_MAX_MODULE } from '../proto';
import { Channel } from './channel';
import { decodeFast, encodeCopy, Fast, fastStream, type ToParent, type ToWorker, type WorkerOptions } from './worker-messages';
import { cudaEnv } from './worker-env';
import { mpsEnv } from '../share/mps';
import { JIT_METHODS, JitJobs, type WorkerJobs } from '../providers/cuda/jit-jobs';

const debug = createDebug('qcuda:isolated');

/** How long a worker may take to start (node, CUDA init, a context) and to shut down. */
const START_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 10_000;
/**
 * fds (VMM imports' POSIX fds) the backend holds for a worker's channel at
 * once, sent and not yet taken: a worker that stops reading its channel
 * makes the backend hold no more of them (further imports fail).
 */
export const VMM_FDS_IN_TRANSIT = 64;

interface SharedRegion {
  id: number;
  region: MemRegion;
  parentAddr: bigint;
  fd: Fd;
}

/** A worker process as its parent sees it: calls go out, replies and output come back. */
class Worker {
  readonly #child: ChildProcess;
  readonly #channel: Channel;
  readonly #pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  #nextId = 1;
  #gone: CudaError | undefined;
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;
  /** A queue owner: 'owning' came; where it left its ring ('returned'), or undefined if it ended without saying. */
  #owning: (() => void) | undefined;
  #parked: ((s: RingState) => void) | undefined;
  /** Regions sent and not yet mapped there, by id. */
  readonly #regionsAdded = new Map<number, () => void>();
  #returned: RingState | undefined;
  /** A queue owner's VM module cache, which it asks for images by content and adds its own to. */
  modules: ModuleStore | undefined;
  /** A queue owner's way to the VM's IPC tables, for its session. */
  ipc: IpcAnswerer | undefined;
  /** Its JIT and link jobs running, timed for the worker watch (jit-jobs.ts). */
  readonly jobs: WorkerJobs;
  #nextJob = 1;

  constructor(
    options: WorkerOptions,
    readonly output: OutputSink | undefined,
    log: (line: string) => void,
    board: JitJobs,
  ) {
    const [mine, theirs] = native.socketPair();
    // Under --gpu-share-mps an MPS client with its VM's part of the GPU, as the share table has it now: share/mps.ts.
    const mps = mpsEnv(options.gpu);
    try {
      // Loads modules eagerly (their code is counted at the load) and JIT-caches per VM: worker-env.ts.
      // In a session of its own: no controlling terminal, whose input it could write (security review 3, N2).
      // Ended by the kernel with this process (sys/harden.ts); io_uring, which its filter refuses, stays off in libuv.
      this.#child = spawn(process.execPath, [path.join(__dirname, 'worker.js'), JSON.stringify(options)], {
        stdio: ['ignore', 'inherit', 'inherit', theirs],
        env: { ...childEnv(cudaEnv()), ...mps, UV_USE_IO_URING: '0' },
        detached: true,
      });
    } finally {
      native.close(theirs);
    }
    this.#channel = new Channel(
      mine,
      (m) => this.#onMessage(m as ToParent | Uint8Array),
      () => undefined,
    );
    const pid = this.#child.pid;
    this.jobs = board.forWorker(pid, () => this.kill());
    this.exited = new Promise((resolve) =>
      this.#child.once('exit', (code, signal) => {
        this.jobs.clear();
        log(`qcuda: GPU worker pid ${pid} exited (${signal ?? `status ${code}`})`);
        this.#fail(`the session's GPU worker (pid ${pid}) exited (${signal ?? `status ${code}`})`);
        this.#channel.close();
        resolve();
      }),
    );
    this.#child.on('error', (e) => this.#fail(`the session's GPU worker: ${e.message}`));
    this.ready = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new CudaError(CudaErr.InitializationError, 'the GPU worker did not start in time')),
        START_TIMEOUT_MS,
      );
      this.#pending.set(0, {
        resolve: () => {
          clearTimeout(timer);
          resolve();
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
    });
    const part = mps.CUDA_MPS_ACTIVE_THREAD_PERCENTAGE;
    log(`qcuda: GPU worker pid ${pid} started${part === undefined ? '' : ` (MPS client: ${part}% of the GPU's threads)`}`);
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  /** Lets the worker map a region: its fd goes with the message. Resolves once the worker has it mapped, or is gone. */
  addRegion(r: SharedRegion): Promise<void> {
    if (this.#gone) return Promise.resolve();
    const mapped = new Promise<void>((resolve) => {
      this.#regionsAdded.set(r.id, resolve);
      void this.exited.then(resolve);
    });
    this.#send({ t: 'region', id: r.id, region: r.region, parentAddr: r.parentAddr }, [r.fd.value]);
    return mapped;
  }

  removeRegion(id: number): void {
    if (!this.#gone) this.#send({ t: 'unregion', id });
  }

  /** Hands the worker its session's queue (fds: kick, call, in-flight record, ledger); resolves once it serves it. */
  own(order: OwnOrder, fds: number[]): Promise<void> {
    return this.#ask<void>({ t: 'own', ...order }, fds, (answered) => (this.#owning = answered));
  }

  /** Asks a queue owner to give its queue back (its session ends). */
  handback(): void {
    if (!this.#gone) this.#send({ t: 'handback' });
  }

  /** Asks a queue owner to give its queue back for a VM stop, keeping its session; resolves with where the ring stands. */
  park(): Promise<RingState> {
    return this.#ask<RingState>({ t: 'park' }, [], (answered) => (this.#parked = answered));
  }

  /** Hands a parked queue back (fds: kick, call, a new in-flight record); resolves once it serves it. */
  ownAgain(state: RingState, fds: number[]): Promise<void> {
    return this.#ask<void>({ t: 'own-again', state }, fds, (answered) => (this.#owning = answered));
  }

  /**
   * Sends a queue owner m and resolves with its answer, which comes through
   * the handler `listen` installs ('owning', 'parked'); rejects once the
   * process is gone.
   */
  #ask<T>(m: ToWorker, fds: number[], listen: (answered: (v: T) => void) => void): Promise<T> {
    if (this.#gone) return Promise.reject(this.#gone);
    const answer = new Promise<T>((resolve, reject) => {
      listen(resolve);
      void this.exited.then(() => reject(this.#gone ?? new CudaError(CudaErr.Unknown, 'the worker exited')));
    });
    this.#send(m, fds);
    return answer;
  }

  /** Where a queue owner left its ring, once the process is gone (undefined: it died without saying). */
  async returned(): Promise<RingState | undefined> {
    await this.exited;
    return this.#returned;
  }

  call(m: string, a: unknown[]): Promise<unknown> {
    const sent = this.#expect((id) => this.#send({ t: 'call', id, m, a }));
    if (!JIT_METHODS.has(m) || this.#gone) return sent;
    // A JIT or link job: timed from here to its reply (the worker watch ends one that runs too long).
    const job = this.#nextJob++;
    this.jobs.begin(job);
    return sent.finally(() => this.jobs.end(job));
  }

  /** copyToDevice / copyFromDevice, in a raw frame where the stream allows. */
  copy(kind: Fast.ToDevice | Fast.FromDevice, ptr: bigint, segs: GuestSeg[], stream: StreamRef | undefined): Promise<void> {
    const m = kind === Fast.ToDevice ? 'copyToDevice' : 'copyFromDevice';
    if (!fastStream(stream))
      return this.call(m, kind === Fast.ToDevice ? [ptr, addrs(segs), stream] : [addrs(segs), ptr, stream]) as Promise<void>;
    return this.#expect((id) => this.#sendRaw(encodeCopy({ kind, id, ptr, stream, segs }))) as Promise<void>;
  }

  #expect(post: (id: number) => void): Promise<unknown> {
    if (this.#gone) return Promise.reject(this.#gone);
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      post(id);
    });
  }

  /** Destroys the context, then makes sure the process is gone. */
  async stop(): Promise<void> {
    const timer = setTimeout(() => this.kill(), STOP_TIMEOUT_MS);
    try {
      await this.call('destroy', []).catch((e: Error) => debug('worker %d: destroy: %s', this.pid, e.message));
      await Promise.race([this.exited, new Promise((r) => setTimeout(r, 1000))]);
    } finally {
      clearTimeout(timer);
      this.kill();
      await this.exited;
    }
  }

  /**
   * Ends the worker at once (SIGKILL): the guest process is gone, so nothing
   * it would still print matters, and a kernel that never ends cannot hold
   * the context (the driver frees a dead process's context and memory).
   */
  async end(): Promise<void> {
    this.kill();
    await this.exited;
  }

  kill(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGKILL');
  }

  #send(m: ToWorker, fds: number[] = []): void {
    this.#post(() => this.#channel.send(m, fds));
  }

  #sendRaw(frame: Uint8Array): void {
    this.#post(() => this.#channel.sendRaw(frame));
  }

  /** The VM's cached image for a queue owner's MODULE_FIND (what it asks is checked: it serves a guest). */
  async #moduleFind(id: number, sha256: unknown, size: unknown): Promise<void> {
    let image: Uint8Array | undefined;
    if (
      this.modules &&
      sha256 instanceof Uint8Array &&
      sha256.length === 32 &&
      typeof size === 'bigint' &&
      size > 0n &&
      size <= BigInt(QCUDA_MAX_MODULE)
    )
      image = await this.modules.find(sha256, size);
    if (!this.#gone) this.#send({ t: 'module', id, image });
  }

  /** A queue owner's loaded image: kept by content for the VM's next processes once it passes the same check here. */
  #moduleAdd(image: unknown): void {
    if (!this.modules || !(image instanceof Uint8Array) || image.length === 0 || image.length > QCUDA_MAX_MODULE) return;
    try {
      checkImage(image);
    } catch (e) {
      debug('worker %d: a module image that fails the check is not cached: %s', this.pid, (e as Error).message);
      return;
    }
    this.modules.add(image);
  }

  /** A queue owner's IPC ask, answered from the VM's tables (refused where it has none). */
  async #ipcAsk(id: number, ask: IpcAsk): Promise<void> {
    const { fd, ...a } = this.ipc
      ? await this.ipc.answer(ask)
      : { ok: false as const, code: CudaErr.NotSupported, message: "IPC: this worker has no way to the VM's tables" };
    // An answer's fd (a VMM import's) goes with it, closed here once sent (or now, the worker gone).
    if (!fd) return void (this.#gone || this.#send({ t: 'ipc', id, ...a }));
    const refused = this.#sendFd({ t: 'ipc', id, ...a, fd: true }, fd);
    if (refused && !this.#gone) this.#send({ t: 'ipc', id, ok: false, code: refused.code, message: refused.message });
  }

  /** Sends m with fd, which is closed once sent; closed at once, and the error returned, where it cannot go. */
  #sendFd(m: ToWorker, fd: Fd): CudaError | undefined {
    if (this.#gone || this.#channel.fdsInTransit >= VMM_FDS_IN_TRANSIT) {
      fd.close();
      return (
        this.#gone ??
        new CudaError(
          CudaErr.MemoryAllocation,
          `shareable memory handles: ${VMM_FDS_IN_TRANSIT} imports are on their way to the process already`,
        )
      );
    }
    this.#post(() => this.#channel.sendTaking(m, [fd]));
    return undefined;
  }

  /**
   * Tells a queue owner to close what its session opened at ptr (the owner's
   * memory went); resolves once it has closed it, or is gone (its memory
   * went with it), and rejects where its close failed. Unbounded here: the
   * VM's table bounds it and ends a worker that takes too long (ipc.ts letGo).
   */
  ipcDrop(ptr: bigint): Promise<void> {
    return this.#acknowledged((id) => ({ t: 'ipc-drop', id, ptr }));
  }

  /** As ipcDrop, for its session's import `handle` of a VMM allocation (vmm-remote.ts): resolves once unmapped and released. */
  vmmDrop(handle: bigint): Promise<void> {
    return this.#acknowledged((id) => ({ t: 'vmm-drop', id, handle }));
  }

  /** Sends m, resolving once the worker replies that it did it, or is gone; rejecting with its refusal. */
  async #acknowledged(m: (id: number) => ToWorker): Promise<void> {
    try {
      await this.#expect((id) => this.#send(m(id)));
    } catch (e) {
      if (!this.#gone) throw e;
    }
  }

  /**
   * A POSIX fd of the context's VMM allocation m (cuMemExportToShareableHandle
   * in the worker; a queue owner's: m is its session's handle and device),
   * the caller's to hand on.
   */
  vmmExport(m: unknown): Promise<Fd> {
    return this.#expect((id) => this.#send({ t: 'vmm-export', id, m })) as Promise<Fd>;
  }

  /** Imports fd (another worker's vmmExport) in the context: its allocation here. The fd is taken over, and closed once sent. */
  vmmImport(fd: Fd): Promise<unknown> {
    if (this.#gone) {
      fd.close();
      return Promise.reject(this.#gone);
    }
    return this.#expect((id) => {
      const refused = this.#sendFd({ t: 'vmm-import', id }, fd);
      if (refused) this.#settle(id, false, refused);
    });
  }

  /** The fd of a 'vmm-exported': the waiting vmmExport's, or closed if nobody waits for it any more. */
  #vmmExported(id: number): void {
    const fd = this.#channel.takeFd();
    if (!fd) return this.#settle(id, false, new CudaError(CudaErr.Unknown, 'the worker exported no fd'));
    if (this.#pending.has(id)) this.#settle(id, true, fd);
    else fd.close();
  }

  #post(write: () => void): void {
    try {
      write();
    } catch (e) {
      this.#fail(`the session's GPU worker cannot be reached: ${(e as Error).message}`);
    }
  }

  #onMessage(m: ToParent | Uint8Array): void {
    if (m instanceof Uint8Array) {
      const f = decodeFast(m);
      if (f.kind !== Fast.Done) throw new Error(`a worker sent a raw frame of kind ${f.kind}`);
      return this.#settle(f.id, true, undefined);
    }
    switch (m.t) {
      case 'ready':
        return this.#settle(0, true, undefined);
      case 'reply':
        return this.#settle(m.id, m.ok, m.ok ? m.v : toError(m));
      case 'owning':
        return this.#owning?.();
      case 'region-added':
        this.#regionsAdded.get(m.id)?.();
        this.#regionsAdded.delete(m.id);
        return;
      case 'parked':
        return this.#parked?.(m.state);
      case 'module-find':
        return void this.#moduleFind(m.id, m.sha256, m.size);
      case 'module-add':
        return this.#moduleAdd(m.image);
      case 'job':
        // A queue owner's own JIT or link job (jit-jobs.ts reportJobs); ids apart from the calls sent from here.
        if (typeof m.id !== 'number') return;
        return m.on ? this.jobs.begin(-m.id) : this.jobs.end(-m.id);
      case 'ipc':
        return void this.#ipcAsk(m.id, m.ask);
      case 'vmm-exported':
        return this.#vmmExported(m.id);
      case 'returned':
        this.#returned = m.state;
        // It has nothing left to do but end: a context it still has goes the fast way (end()).
        this.kill();
        return;
      case 'output':
        try {
          this.output?.(m.kind, m.bytes);
        } catch (e) {
          debug('output sink: %s', (e as Error).message);
        }
        return;
    }
  }

  #settle(id: number, ok: boolean, v: unknown): void {
    const p = this.#pending.get(id);
    if (!p) return;
    this.#pending.delete(id);
    if (ok) p.resolve(v);
    else p.reject(v as Error);
  }

  /** The worker is gone: every call waiting and every later one fails. */
  #fail(why: string): void {
    if (this.#gone) return;
    debug('%s', why);
    this.#gone = new CudaError(CudaErr.Unknown, why);
    for (const p of this.#pending.values()) p.reject(this.#gone);
    this.#pending.clear();
  }
}

function toError(m: { code: number; message: string; index?: number }): CudaError {
  const e = new CudaError(m.code, m.message);
  if (m.index !== undefined) Object.assign(e, { index: m.index });
  return e;
}

/** Segments go as addresses of this process; the worker finds them in its own mappings. */
function addrs(segs: GuestSeg[]): { addr: bigint; len: number }[] {
  return segs.map((s) => ({ addr: s.addr, len: s.len }));
}

/**
 * A session's context, in its worker: every method the class does not
 * define itself (the copies, whose guest memory goes as addresses or raw
 * frames, and destroy) is a call message, defined below for every
 * ProviderContext method.
 */
interface RemoteContext extends ProviderContext {}

class RemoteContext implements ProviderContext {
  #stopped: Promise<void> | undefined;

  constructor(
    readonly worker: Worker,
    readonly onDestroy: () => void,
  ) {}

  copyToDevice(dst: DevPtr, src: GuestSeg[], stream: StreamRef | undefined): Promise<void> {
    return this.worker.copy(Fast.ToDevice, dst, src, stream);
  }
  copyFromDevice(dst: GuestSeg[], src: DevPtr, stream: StreamRef | undefined): Promise<void> {
    return this.worker.copy(Fast.FromDevice, src, dst, stream);
  }

  /** 2D/3D copies with guest memory: its segments go as addresses (the worker has the same bytes mapped). */
  copy3DToDevice(dst: Place, src: GuestSeg[], blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void> {
    return this.worker.call('copy3DToDevice', [dst, addrs(src), blocks, stream]) as Promise<void>;
  }
  copy3DFromDevice(dst: GuestSeg[], src: Place, blocks: readonly HostBlock[], stream: StreamRef | undefined): Promise<void> {
    return this.worker.call('copy3DFromDevice', [addrs(dst), src, blocks, stream]) as Promise<void>;
  }

  /** At a reset the worker is asked to destroy its context (its device output reaches the guest); when the process is gone, it is killed at once. */
  destroy(why: 'reset' | 'exit' = 'reset'): Promise<void> {
    if (this.#stopped && why === 'exit') this.worker.kill(); // a graceful stop under way: end it now
    this.#stopped ??= (why === 'exit' ? this.worker.end() : this.worker.stop()).finally(this.onDestroy);
    return this.#stopped;
  }
}

for (const m of CONTEXT_METHODS) {
  if (Object.hasOwn(RemoteContext.prototype, m)) continue;
  Object.defineProperty(RemoteContext.prototype, m, {
    value(this: RemoteContext, ...a: unknown[]) {
      return this.worker.call(m, a);
    },
    writable: true,
    configurable: true,
  });
}

export interface IsolatedOptions {
  /** What each worker runs (the cuda provider in production; host for tests without a GPU). */
  worker: WorkerOptions;
  /** Where a worker's start and exit are logged (the VM's event log); default DEBUG=qcuda:isolated. */
  log?: (line: string) => void;
}

// IPC between sessions, each in its worker (cuda workers: emu ones refuse
// with NotSupported at the export): every provider-level method of two
// contexts runs in one of them (provider.ts CONTEXT_TWINS).
export interface IsolatedProvider extends ContextTwins {}

export class IsolatedProvider implements Provider {
  readonly name: ProviderName;
  readonly hasGpu: boolean;
  readonly #regions = new Map<bigint, SharedRegion>();
  readonly #contexts = new Set<RemoteContext>();
  /** Workers serving their sessions' queues: they map guest RAM as the others do. */
  readonly #owners = new Set<Worker>();
  /** The JIT and link jobs running in its workers (the device's worker watch bounds them). */
  readonly jobs = new JitJobs();
  #nextRegion = 1;
  #closed = false;

  /** local answers what is device-wide; it must never run a kernel. */
  constructor(
    readonly local: Provider,
    readonly o: IsolatedOptions,
  ) {
    this.name = local.name;
    this.hasGpu = local.hasGpu;
    if (o.worker.kind === 'cuda') {
      this.vmmExportFd = (owner, m) => this.#vmmExportFd(owner, m);
      this.vmmImportFd = (importer, fd) => this.#vmmImportFd(importer, fd);
      this.vmmImport = async (owner, m, importer) => this.#vmmImportFd(importer, await this.#vmmExportFd(owner, m));
    }
  }

  deviceCount(): number {
    return this.local.deviceCount();
  }
  driverVersion(): number {
    return this.local.driverVersion();
  }
  deviceProps(device: number): DeviceProps {
    return this.local.deviceProps(device);
  }

  /** Pids of the workers serving their sessions' own queues (tests check that none is left). */
  get ownerPids(): number[] {
    return [...this.#owners].map((w) => w.pid).filter((p): p is number => p !== undefined);
  }

  /** Worker pids (tests check that each is gone after destroy). */
  get workerPids(): number[] {
    return [...this.#contexts].map((c) => c.worker.pid).filter((p): p is number => p !== undefined);
  }

  async openContext(device: number, output?: OutputSink): Promise<ProviderContext> {
    if (this.#closed) throw new CudaError(CudaErr.InitializationError, 'the provider is closed');
    if (device < 0 || device >= this.deviceCount()) throw new CudaError(CudaErr.InvalidDevice, `no device ${device}`);
    // No worker is started ahead: an idle one would hold a context's GPU
    // memory, which cudaMemGetInfo would show every guest as gone.
    // A worker per context, as before: a session's contexts on two devices are two workers, so no copyPeer here
    // (a queue owner holds every device's context of its session in one process: docs/multi-gpu.md).
    const w = new Worker({ ...this.o.worker, device }, output, this.o.log ?? ((l) => debug('%s', l)), this.jobs);
    // Guest RAM known by now is mapped in the worker before the context is
    // handed out (as registerGuestMemory waits for the running ones); it never rejects.
    const mapped = [...this.#regions.values()].map((r) => w.addRegion(r));
    const c = new RemoteContext(w, () => this.#contexts.delete(c));
    this.#contexts.add(c);
    try {
      await w.ready;
      await Promise.all(mapped);
    } catch (e) {
      await c.destroy();
      throw e;
    }
    return c;
  }

  /**
   * Starts a worker for one session that serves the session's queue itself
   * (order.state: the ring, detached here; fds: its kick, call, in-flight
   * record and the VM's ledger). Its CUDA context opens when the session
   * first needs one, as a session's does here.
   */
  async startOwner(order: OwnOrder, fds: number[], modules?: ModuleStore, ipc?: IpcAnswerer): Promise<QueueOwner> {
    if (this.#closed) throw new CudaError(CudaErr.InitializationError, 'the provider is closed');
    const w = new Worker({ ...this.o.worker, owner: true }, undefined, this.o.log ?? ((l) => debug('%s', l)), this.jobs);
    w.modules = modules;
    w.ipc = ipc;
    this.#owners.add(w);
    void w.exited.then(() => this.#owners.delete(w));
    const mapped = [...this.#regions.values()].map((r) => w.addRegion(r)); // as openContext's
    try {
      await w.ready;
      await Promise.all(mapped);
      await w.own(order, fds);
    } catch (e) {
      w.kill();
      throw e;
    }
    return {
      pid: w.pid,
      returned: w.returned(),
      handback: () => w.handback(),
      park: () => w.park(),
      ownAgain: (s, f) => w.ownAgain(s, f),
      kill: () => w.kill(),
      ipcDrop: (ptr) => w.ipcDrop(ptr),
      vmmExport: (handle, device) => w.vmmExport({ handle, device }),
      vmmDrop: (handle) => w.vmmDrop(handle),
    };
  }

  /** Keeps a dup of the region's fd for workers to come and hands it to those running. */
  /**
   * Keeps a dup of the region's fd for workers to come and hands it to those
   * running; resolves once each has it mapped. A queue owner serves its ring
   * itself, so a frontend that adds a region (ADD_MEM_REG) and then uses it
   * there must not be answered before (the ack waits for this).
   */
  async registerGuestMemory(addr: bigint, size: bigint, source?: GuestMemorySource): Promise<void> {
    if (!source) {
      debug('region 0x%s+%s comes without its fd: workers cannot map it', addr.toString(16), size);
      return;
    }
    const r: SharedRegion = {
      id: this.#nextRegion++,
      region: { gpa: source.region.gpa, size: source.region.size, userAddr: source.region.userAddr, mmapOffset: source.region.mmapOffset },
      parentAddr: addr,
      fd: new Fd(native.dup(source.fd)),
    };
    this.#regions.set(addr, r);
    await Promise.all([...[...this.#contexts].map((c) => c.worker.addRegion(r)), ...[...this.#owners].map((w) => w.addRegion(r))]);
  }

  unregisterGuestMemory(addr: bigint): void {
    const r = this.#regions.get(addr);
    if (!r) return;
    this.#regions.delete(addr);
    for (const c of this.#contexts) c.worker.removeRegion(r.id);
    for (const w of this.#owners) w.removeRegion(r.id);
    r.fd.close();
  }

  /**
   * VMM shareable handles between sessions, each in its worker: the owner's
   * worker exports the allocation as a POSIX fd, which comes here and goes
   * on to the importer's worker, where its context imports it. The fd is
   * only in transit: each copy is closed once imported (a token names the
   * allocation, not an fd: vmm-share.ts). Emu workers' memory does not
   * leave their process: absent there (the device says so).
   */
  readonly vmmImport?: (owner: ProviderContext, m: VmmRef, importer: ProviderContext) => Promise<VmmRef>;
  /** The halves of vmmImport: a queue owner's worker exports (QueueOwner.vmmExport) or imports (vmm-remote.ts) the other end. */
  readonly vmmExportFd?: (owner: ProviderContext, m: VmmRef) => Promise<Fd>;
  readonly vmmImportFd?: (importer: ProviderContext, fd: Fd) => Promise<VmmRef>;

  #vmmExportFd(owner: ProviderContext, m: VmmRef): Promise<Fd> {
    if (!(owner instanceof RemoteContext))
      return Promise.reject(new CudaError(CudaErr.InvalidValue, 'a shareable handle of another provider'));
    return owner.worker.vmmExport(m);
  }

  #vmmImportFd(importer: ProviderContext, fd: Fd): Promise<VmmRef> {
    if (importer instanceof RemoteContext) return importer.worker.vmmImport(fd);
    fd.close();
    return Promise.reject(new CudaError(CudaErr.InvalidValue, 'a shareable handle imported into another provider'));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await Promise.allSettled([...this.#contexts].map((c) => c.destroy()));
    for (const w of this.#owners) w.kill();
    await Promise.allSettled([...this.#owners].map((w) => w.exited));
    for (const r of this.#regions.values()) r.fd.close();
    this.#regions.clear();
    await this.local.close();
  }
}

Object.assign(IsolatedProvider.prototype, CONTEXT_TWINS);
