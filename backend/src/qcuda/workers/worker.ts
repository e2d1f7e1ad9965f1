// A session's GPU worker process (isolated.ts says why): one provider, one
// context, and its own mappings of guest RAM. It runs what its parent sends
// and ends when the parent asks, or when the parent is gone.
import createDebug from 'debug';
import { MemoryTable, type GuestRegion } from '../../vhost-user';
import { BusyPoll } from '../../vhost-user';
import { EventFd, Fd } from '../../vhost-user';
import { native } from '../../sys/native';
import { harden } from '../../sys/harden';
import { gateFromEnv } from '../share/gate';
import { OwnedQueue } from './owned-queue';
import { dropRegion, remapRing, type RingOfRegions } from './worker-regions';
import type { RingState } from '../../vhost-user';
import { CudaErr, CudaError } from '../cuda-error';
import {
  CONTEXT_METHODS,
  CONTEXT_TWINS,
  type GuestSeg,
  type HostPiece,
  type OutputSink,
  type Provider,
  type ProviderContext,
  type VmmFdContext,
} from '../provider';
import { EmuProvider } from '../providers/emu';
import { Channel } from './channel';
import { RemoteModules } from './remote-modules';
import { IpcLink } from '../ipc/ipc-remote';
import { reportJobs } from '../providers/cuda/jit-jobs';
import { CHANNEL_FD, decodeFast, encodeDone, Fast, type ToParent, type ToWorker, type WorkerOptions } from './worker-messages';

const debug = createDebug('qcuda:worker');

/** The ProviderContext methods a parent may call (nothing else runs). */
/** What the parent may ask of the context (destroy is answered apart: it ends the worker). */
const METHODS = new Set<string>(CONTEXT_METHODS.filter((m) => m !== 'destroy'));

interface Mapped {
  parentAddr: bigint;
  region: GuestRegion;
  /** The region's file (kept: mapped host memory gets a mapping of its own from it). */
  fd: Fd;
}

const regions = new Map<number, Mapped>();
/** The same regions as a table: a queue owner's ring and requests resolve guest addresses in it. */
const memory = new MemoryTable();

let channel: Channel;
/**
 * How long a queue owner's poll turn may spin on its ring while nothing is in
 * flight, before letting the event loop turn (for its channel): a caller's
 * next request then needs no turn of the loop to be seen.
 */
const OWNER_SPIN_US = 20;

/** The channel is polled for a while after each call (WorkerOptions.pollUs): the session's next call then finds this process awake. */
let poll: BusyPoll;

function send(m: ToParent): void {
  channel.send(m);
}

function sourceOf(r: Mapped): { fd: number; region: { gpa: bigint; size: bigint; userAddr: bigint; mmapOffset: bigint } } {
  const g = r.region;
  return { fd: r.fd.value, region: { gpa: g.gpa, size: g.size, userAddr: g.userAddr, mmapOffset: g.mmapOffset } };
}

/**
 * A parent address range -> the same bytes here. The region goes into used:
 * the call holds it mapped (and registered) until its reply, whatever the
 * parent says of it meanwhile.
 */
function local(addr: bigint, len: number, used: GuestRegion[]): GuestSeg {
  for (const { parentAddr, region } of regions.values()) {
    if (addr >= parentAddr && addr + BigInt(len) <= parentAddr + region.size) {
      const offset = Number(addr - parentAddr);
      used.push(region);
      return { addr: region.hostAddress + BigInt(offset), len, view: region.view(offset, len) };
    }
  }
  throw new CudaError(CudaErr.InvalidValue, `0x${addr.toString(16)}+${len} is in no guest RAM region this worker maps`);
}

const segs = (a: unknown, used: GuestRegion[]) => (a as { addr: bigint; len: number }[]).map((s) => local(s.addr, s.len, used));

/** Arguments as the provider takes them: guest addresses of the parent become this process's (their regions go into used). */
function translate(m: string, a: unknown[], used: GuestRegion[]): unknown[] {
  if (m === 'copyToDevice') return [a[0], segs(a[1], used), a[2]];
  if (m === 'copyFromDevice') return [segs(a[0], used), a[1], a[2]];
  if (m === 'copy3DToDevice') return [a[0], segs(a[1], used), a[2], a[3]];
  if (m === 'copy3DFromDevice') return [segs(a[0], used), a[1], a[2], a[3]];
  if (m === 'hostDevicePointer')
    return [(a[0] as HostPiece[]).map((p) => ({ addr: local(p.addr, Number(p.size), used).addr, size: p.size }))];
  return a;
}

/** The provider's views of guest RAM by (this process's) host address, for the emu provider. */
function guestView(addr: bigint, len: number): Uint8Array[] {
  for (const { region } of regions.values()) {
    const start = region.hostAddress;
    if (addr >= start && addr + BigInt(len) <= start + region.size) return region.segments(Number(addr - start), len);
  }
  throw new CudaError(CudaErr.InvalidValue, `0x${addr.toString(16)}+${len} is not guest RAM`);
}

async function createLocal(o: WorkerOptions): Promise<Provider> {
  if (o.kind === 'emu') return new EmuProvider({ guestView });
  const { createCudaProvider, setWaiterThreads, setInlineWait, setInlineCalls } =
    require('../providers/cuda/cuda') as typeof import('../providers/cuda/cuda');
  if (o.waiterThreads !== undefined) setWaiterThreads(o.waiterThreads);
  if (o.inlineWaitUs !== undefined) setInlineWait(o.inlineWaitUs);
  // This process serves one guest process, whose thread would block in the driver natively.
  setInlineCalls(o.inlineCalls ?? true);
  // This process serves one session: its stdout and stderr are that session's device output.
  return createCudaProvider(o.gpu, { captureOutput: true, pinGuestRam: o.pinGuestRam ?? false });
}

/**
 * No new privileges and a system call filter, for every thread (addon/src/
 * sandbox.cc): a worker runs guest-chosen images through NVIDIA's loader and
 * JIT, so a bug there must not give the guest a process that can exec, trace,
 * mount or change its ids. A worker that cannot sandbox itself does not start.
 */
function sandbox(): void {
  try {
    native.sandboxWorker();
  } catch (e) {
    throw new CudaError(
      CudaErr.InitializationError,
      `the worker sandbox could not be set up (--worker-sandbox=none runs without): ${(e as Error).message}`,
    );
  }
}

class WorkerMain {
  provider: Provider | undefined;
  ctx: ProviderContext | undefined;
  /** The session's own queue, served here (owner workers). */
  owned: OwnedQueue | undefined;
  /** The VM's module cache, the backend's (owner workers). */
  readonly modules = new RemoteModules(
    (id, sha256, size) => send({ t: 'module-find', id, sha256, size }),
    (image) => send({ t: 'module-add', image }),
  );
  /** The VM's IPC tables, the backend's (owner workers). */
  readonly ipc = new IpcLink((id, ask) => send({ t: 'ipc', id, ask }));
  readonly #started: Promise<void>;
  #ready = false;

  constructor(readonly o: WorkerOptions) {
    // Registration is #addRegion's (the provider may not exist yet); unregistration comes with the unmapping,
    // after the ring server's regions are the table's (without g) again (worker-regions.ts).
    memory.listener = {
      added: () => undefined,
      removing: (g) => {
        remapRing(this.#ring());
        return this.provider?.unregisterGuestMemory(g.hostAddress);
      },
    };
    this.#started = this.#start();
  }

  /**
   * Ready once guest RAM known by now is registered too: registering holds
   * the driver for a while (hundreds of ms per GiB), which a session would
   * otherwise pay in its first calls (staged copies, driver calls waiting).
   */
  async #start(): Promise<void> {
    const p = await createLocal(this.o);
    // A queue owner's session shares by IPC with the VM's other processes: CUDA's handles, from context to context.
    if (this.o.owner) Object.assign(p, CONTEXT_TWINS);
    // Its own JIT and link jobs are timed by the backend, which ends this process past the VM's bound.
    if (this.o.owner) reportJobs(p, (id, on) => send({ t: 'job', id, on }));
    // In the same tick as provider is set: regions mapped until now are
    // registered here, later ones by #addRegion, none twice.
    this.provider = p;
    if (poll.enabled) p.pollWith?.(poll);
    const registered = [...regions.values()].map((r) => p.registerGuestMemory(r.region.hostAddress, r.region.size, sourceOf(r)));
    // A queue owner's session opens its context when it first needs one, with its own output sink.
    if (!this.o.owner) {
      const output: OutputSink = (kind, bytes) => send({ t: 'output', kind, bytes });
      this.ctx = await p.openContext(this.o.device ?? 0, output);
    }
    await Promise.all(registered);
    // The driver is initialised (its device nodes open, the primary context made, and a
    // worker that owns no queue has its session's context): from here on it serves the guest.
    if ((this.o.sandbox ?? 'seccomp') === 'seccomp') sandbox();
    this.#ready = true;
    send({ t: 'ready' });
  }

  get started(): Promise<void> {
    return this.#started;
  }

  onMessage(m: ToWorker | Uint8Array): void {
    poll.touch();
    if (m instanceof Uint8Array) return this.#fastCall(m);
    if (m.t === 'region') this.#addRegion(m.id, m);
    else if (m.t === 'unregion') void this.#removeRegion(m.id);
    else if (m.t === 'call') void this.#call(m.id, m.m, m.a);
    else if (m.t === 'own') void this.#own(m);
    else if (m.t === 'handback') void this.owned?.giveBack();
    else if (m.t === 'park') void this.#park();
    else if (m.t === 'own-again') this.#ownAgain(m.state);
    else if (m.t === 'module') this.modules.answer(m.id, m.image);
    else if (m.t === 'ipc') this.ipc.answer(m.id, m, m.fd ? channel.takeFd() : undefined);
    else if (m.t === 'ipc-drop') void this.#dropped(m.id, this.ipc.onDrop(m.ptr));
    else if (m.t === 'vmm-drop') void this.#dropped(m.id, this.ipc.onVmmDrop(m.handle));
    else if (m.t === 'vmm-export') void this.#vmmExport(m.id, m.m);
    else if (m.t === 'vmm-import') void this.#vmmImport(m.id, channel.takeFd());
  }

  /** A POSIX fd of allocation m, to the parent with the answer (closed here once it has gone: only the importer keeps one). */
  async #vmmExport(id: number, m: unknown): Promise<void> {
    try {
      if (!this.#ready) await this.#started;
      // A queue owner's allocations are its session's (m: its handle), not this.ctx's.
      const fd = new Fd(await (this.owned ? this.owned.vmmExportFd(m) : this.#vmmFds().vmmExportFd(m)));
      channel.sendTaking({ t: 'vmm-exported', id }, [fd]);
    } catch (e) {
      this.#refuse(id, 'vmmExport', e);
    }
  }

  /** Imports another worker's export; its fd is closed at once: the driver's import holds the memory. */
  async #vmmImport(id: number, fd: Fd | undefined): Promise<void> {
    try {
      if (!fd) throw new CudaError(CudaErr.InvalidValue, 'an import of a shareable handle came without its fd');
      if (!this.#ready) await this.#started;
      send({ t: 'reply', id, ok: true, v: await this.#vmmFds().vmmImportFd(fd.value) });
    } catch (e) {
      this.#refuse(id, 'vmmImport', e);
    } finally {
      fd?.close();
    }
  }

  #vmmFds(): VmmFdContext {
    const x = this.ctx as Partial<VmmFdContext> | undefined;
    if (!x?.vmmExportFd || !x.vmmImportFd)
      throw new CudaError(CudaErr.NotSupported, "shareable memory handles: this worker's context cannot share its memory");
    return x as VmmFdContext;
  }

  /**
   * Says once what the owner's free took is closed here (an IPC opening, a
   * VMM import): the owner's free is answered after this reply (ipc.ts, vmm-share.ts).
   */
  /** Answers an ipc-drop or vmm-drop once its close or release is done; refused where it failed (the backend then ends this process). */
  async #dropped(id: number, closing: Promise<void>): Promise<void> {
    try {
      await closing;
      send({ t: 'reply', id, ok: true, v: undefined });
    } catch (e) {
      this.#refuse(id, 'drop', e);
    }
  }

  async #park(): Promise<void> {
    try {
      send({ t: 'parked', state: await this.owned!.park() });
    } catch (e) {
      // What was in flight did not finish: the parent ends this process and answers it.
      process.stderr.write(`qcuda-worker: the queue could not be parked: ${(e as Error).message}\n`);
      process.exit(1);
    }
  }

  #ownAgain(state: RingState): void {
    const kick = new EventFd(this.#fd().take());
    const call = new EventFd(this.#fd().take());
    this.owned!.adoptAgain(state, { kick, call, record: this.#fd() });
    send({ t: 'owning' });
  }

  #fd(): Fd {
    const fd = channel.takeFd();
    if (!fd) throw new Error('the queue came without its fds');
    return fd;
  }

  /** The owned ring and its server, for a change of the memory table (worker-regions.ts). */
  #ring(): RingOfRegions | undefined {
    const o = this.owned;
    return o && { remap: () => o.ring.remap(), forgetRegions: () => o.server?.forgetRegions() };
  }

  /** Serves the session's queue from now on; once it is given back, says where it stands and ends. */
  async #own(m: Extract<ToWorker, { t: 'own' }>): Promise<void> {
    const fds = { kick: new EventFd(this.#fd().take()), call: new EventFd(this.#fd().take()), record: this.#fd(), ledger: this.#fd() };
    if (!this.o.owner || this.owned) throw new Error('this worker cannot own a queue');
    if (!this.#ready) await this.#started;
    this.owned = new OwnedQueue(
      m,
      fds,
      memory,
      this.provider!,
      this.modules,
      this.ipc,
      poll.enabled ? poll : undefined,
      (state) => {
        send({ t: 'returned', state });
        channel.close(); // the process ends with the channel
      },
      () => process.kill(process.pid, 'SIGKILL'),
      this.o.ringServer ?? true,
      gateFromEnv(), // where its backend's VM is in the GPU share table, if it shares
    ); // end: as a killed worker (no exit handlers, the driver frees the context)
    send({ t: 'owning' });
  }

  #addRegion(id: number, m: Extract<ToWorker, { t: 'region' }>): void {
    const fd = channel.takeFd();
    if (!fd) throw new Error(`region ${id} came without its fd`);
    let region: GuestRegion;
    try {
      // A new table's regions come before the old ones go: they take the old ones' place in the table.
      region = memory.add(m.region, fd, { displace: true });
    } catch (e) {
      fd.close();
      throw e;
    }
    const r = { parentAddr: m.parentAddr, region, fd };
    regions.set(id, r);
    void this.provider?.registerGuestMemory(region.hostAddress, region.size, sourceOf(r));
    remapRing(this.#ring());
    send({ t: 'region-added', id });
  }

  async #removeRegion(id: number): Promise<void> {
    const r = regions.get(id);
    if (!r) return;
    regions.delete(id);
    // The ring server's regions leave it first, then it is unregistered and unmapped.
    await dropRegion(memory, r.region, this.#ring(), (a) => this.provider?.unregisterGuestMemory(a));
    r.fd.close();
  }

  #fastCall(frame: Uint8Array): void {
    const f = decodeFast(frame);
    if (f.kind === Fast.ToDevice) void this.#call(f.id, 'copyToDevice', [f.ptr, f.segs, f.stream]);
    else if (f.kind === Fast.FromDevice) void this.#call(f.id, 'copyFromDevice', [f.segs, f.ptr, f.stream]);
    else throw new Error(`the parent sent a raw frame of kind ${f.kind}`);
  }

  async #call(id: number, m: string, a: unknown[]): Promise<void> {
    try {
      // Once started, a call runs in the tick its message arrives in, before later messages are even decoded.
      if (!this.#ready) await this.#started;
      const v = await (m === 'destroy' ? this.#destroy() : this.#run(m, a));
      if (v === undefined) channel.sendRaw(encodeDone(id));
      else send({ t: 'reply', id, ok: true, v });
      poll.touch();
      if (m === 'destroy') channel.close(); // the reply is sent: the process ends with the channel
    } catch (e) {
      this.#refuse(id, m, e);
    }
  }

  /** Call id (of method m) failed with e: its error goes back as the reply. */
  #refuse(id: number, m: string, e: unknown): void {
    const err = e as CudaError & { index?: number };
    const code = e instanceof CudaError ? err.code : CudaErr.Unknown;
    if (!(e instanceof CudaError)) debug('call %s: %s', m, (e as Error)?.stack ?? e);
    send({
      t: 'reply',
      id,
      ok: false,
      code,
      message: err?.message ?? String(e),
      ...(typeof err?.index === 'number' ? { index: err.index } : {}),
    });
  }

  async #run(m: string, a: unknown[]): Promise<unknown> {
    if (!METHODS.has(m)) throw new CudaError(CudaErr.Unknown, `no such worker call: ${m}`);
    const ctx = this.ctx as unknown as Record<string, (...x: unknown[]) => Promise<unknown>>;
    const used: GuestRegion[] = [];
    const args = translate(m, a, used);
    for (const r of used) r.hold();
    try {
      return await ctx[m](...args);
    } finally {
      for (const r of used) r.release();
    }
  }

  async #destroy(): Promise<undefined> {
    try {
      await this.ctx?.destroy();
    } finally {
      for (const id of [...regions.keys()]) await this.#removeRegion(id);
      await this.provider?.close();
    }
    return undefined;
  }
}

function main(): void {
  // Not dumpable (other processes of its user cannot read or write its memory), and ended with its backend.
  harden('SIGKILL');
  const o = JSON.parse(process.argv[2] ?? '{}') as WorkerOptions;
  // A queue's owner serves one guest process from its ring: its turns may spin (busy-poll.ts).
  poll = new BusyPoll(o.pollUs ?? 0, o.owner ? OWNER_SPIN_US : 0);
  let w: WorkerMain | undefined;
  const onMessage = (m: unknown): void => {
    try {
      w!.onMessage(m as ToWorker | Uint8Array);
    } catch (e) {
      // Only the parent talks here, so this is a bug (or a region that cannot be mapped): say it and end.
      process.stderr.write(`qcuda-worker: ${(e as Error).message}\n`);
      process.exit(1);
    }
  };
  // Closed: the parent is gone (it exited, or was killed), or the session ended. So does this process.
  channel = new Channel(CHANNEL_FD, onMessage, () => process.exit());
  w = new WorkerMain(o);
  w.started.catch((e: Error) => {
    // id 0 is the start: the parent's openContext fails with this.
    const code = e instanceof CudaError ? e.code : CudaErr.InitializationError;
    send({ t: 'reply', id: 0, ok: false, code, message: `GPU worker: ${e.message}` });
    process.exitCode = 3;
    channel.close();
  });
}

main();
