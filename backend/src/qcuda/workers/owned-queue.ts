// A session's worker serving the session's own queue (issue 15): the guest
// driver keeps every request of the session on one queue
// (QCUDA_SESSION_OWN_QUEUE), and the backend hands that ring to the
// session's worker (Vring.detach there, Vring.adopt here), so a call goes
// from the guest straight to the process that runs it, with no hop through
// the backend. The worker runs the same device code (QcudaDevice: the same
// checks, the same commands) for its one session, counts against the VM's
// bounds in the shared ledger, finds module images in the backend's cache
// (remote-modules.ts), and records what it has in flight so that the
// backend can answer it should this process die.
import type { BusyPoll } from '../../vhost-user';
import type { EventFd, Fd } from '../../vhost-user';
import { InflightRecord, Vring, type MemoryTable, type RingState } from '../../vhost-user';
import { QcudaDevice } from '../virtio-device';
import { Ledger } from '../quota/limits';
import { remoteIpc, type IpcLink } from '../ipc/ipc-remote';
import type { ModuleStore } from '../modules/module-cache';
import type { OwnOrder, Provider, VmmFdContext } from '../provider';
import { vmShared, type Session } from '../session/session';
import { CudaErr, CudaError } from '../cuda-error';
import { ledgerLimits } from '../quota/vm-ledger';
import type { ShareGate } from '../share/gate';
import { RingServer } from './ring-server';

export interface OwnedFds {
  kick: EventFd;
  call: EventFd;
  record: Fd;
  ledger: Fd;
}

export class OwnedQueue {
  ring: Vring;
  readonly device: QcudaDevice;
  /** The one session it serves. */
  readonly session: Session;
  #record: InflightRecord;
  #returning: Promise<RingState> | undefined;
  /** The ring was handed back for a VM stop (park); the session lives on until it comes again (adoptAgain). */
  #parked: RingState | undefined;
  readonly #memory: MemoryTable;
  readonly #poll: BusyPoll | undefined;
  /** Answers the short calls of a round trip in C, ahead of the device (ring-server.ts); none: the device answers all. */
  readonly server: RingServer | undefined;

  /**
   * Serves order.session's queue from here on. onReturn gets where the ring
   * stands once giveBack() has given it back; end ends this process at once
   * (as the session's SESSION_CLOSE does). serveInC: the ring server stands
   * in front of the device (where the provider is cuda). share: the VM's
   * GPU share gate, for the device and the ring server (gateFromEnv).
   */
  constructor(
    order: OwnOrder,
    fds: OwnedFds,
    memory: MemoryTable,
    provider: Provider,
    modules: ModuleStore,
    ipc: IpcLink,
    poll: BusyPoll | undefined,
    readonly onReturn: (state: RingState) => void,
    readonly end: () => void,
    serveInC = true,
    share?: ShareGate,
  ) {
    // The VM's bounds are the shared ledger's (its limits as the backend sent them), its module images the backend's cache.
    // Its IPC and VMM shareable handles are in the VM's tables, the backend's (ipc-remote.ts, vmm-remote.ts):
    // a cuda context exports and imports VMM allocations as POSIX fds (cuda.ts).
    const tables = remoteIpc(ipc, provider.name === 'cuda');
    const vm = vmShared(order.limits, Ledger.open(fds.ledger, ledgerLimits(order.limits)), modules, tables, order.identityKey ?? 'real');
    this.#record = InflightRecord.open(fds.record, order.state.size);
    this.device = new QcudaDevice({
      provider,
      vm,
      queues: order.state.index + 1,
      pollUs: 0,
      share,
      // SESSION_CLOSE came on the queue. The guest takes its answer to mean
      // that what the session held on the host is free (qcuda_file.c), and
      // the context is freed only with this process (the fast way, as a
      // dead process's is: work still running on the GPU ends with it). So
      // the process ends here, the close unanswered and in flight in the
      // record; the backend answers it once the process has exited (delegation.ts).
      onSessionClosed: () => this.end(),
    });
    this.device.useMemory(memory);
    const session = this.device.adoptSession(order.session, order.slot);
    this.session = session;
    ipc.onDrop = (ptr) => session.dropImport(ptr);
    ipc.onVmmDrop = (h) => session.dropVmmImport(h);
    session.endSelf = () => this.end();
    const queue = order.state.index;
    this.server = serveInC
      ? RingServer.for(
          provider,
          session,
          (n) => {
            this.device.served[queue] += n;
            session.calls += n;
          },
          (req, ending) => this.device.finishBatch(req, session, ending),
          share,
        )
      : undefined;
    this.#memory = memory;
    this.#poll = poll;
    this.ring = this.#adopt(order.state, fds.kick, fds.call);
  }

  /**
   * A POSIX fd of the session's VMM allocation (m: its handle and device, as
   * the backend's table has them), for another session's import: the
   * caller's to close.
   */
  async vmmExportFd(m: unknown): Promise<number> {
    const { handle, device } = (m ?? {}) as { handle?: unknown; device?: unknown };
    if (typeof handle !== 'bigint' || typeof device !== 'number')
      throw new CudaError(CudaErr.InvalidValue, 'an export of a malformed VMM handle');
    // Released but still mapped is still there: its token names it until it is freed (vmm-share.ts).
    const a = this.session.vmm.existing(handle);
    if (!a) throw new CudaError(CudaErr.InvalidValue, 'cuMemImportFromShareableHandle: its memory was freed');
    if (a.token) throw new CudaError(CudaErr.NotSupported, 'an imported allocation is not exported again');
    const x = (await this.session.context(device)) as Partial<VmmFdContext>;
    if (!x.vmmExportFd) throw new CudaError(CudaErr.NotSupported, "shareable memory handles: this worker's context cannot export");
    return x.vmmExportFd(a.ref);
  }

  #adopt(state: RingState, kick: EventFd, call: EventFd): Vring {
    return Vring.adopt(state, { kick, call }, (req) => this.device.handle(req), this.#memory, {
      poll: this.#poll,
      record: this.#record,
      front: this.server,
    });
  }

  /**
   * The VM stops (GET_VRING_BASE): hands the ring back as a stop would find
   * it (what is in flight finishes first), and keeps the session for when
   * the ring comes again.
   */
  async park(): Promise<RingState> {
    if (this.#parked) return this.#parked;
    const state = await this.ring.detach();
    this.#parked = state;
    this.ring.close();
    this.#record.close();
    return state;
  }

  /** The VM goes on: the ring (where it stands now, with its kick and call, perhaps new) is served here again. */
  adoptAgain(state: RingState, fds: Omit<OwnedFds, 'ledger'>): void {
    if (!this.#parked) throw new Error('the queue is not parked');
    this.#parked = undefined;
    this.#record = InflightRecord.open(fds.record, state.size);
    this.ring = this.#adopt(state, fds.kick, fds.call);
  }

  /**
   * Stops taking requests, lets those in flight finish, ends the session
   * (its context goes) and hands the ring back through onReturn, once.
   */
  giveBack(): Promise<RingState> {
    this.#returning ??= (async () => {
      const parked = this.#parked;
      const state = parked ?? (await this.ring.detach());
      await this.device.reset();
      if (!parked) this.#record.close();
      this.onReturn(state);
      return state;
    })();
    return this.#returning;
  }
}
