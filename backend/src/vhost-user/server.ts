// A vhost-user backend endpoint: a listening socket (or an inherited
// connected fd) serving one device to one frontend at a time, or (listenEach)
// a device of its own to each of several frontends at once: the processes of
// `qcuda run`, each its own frontend. Several servers, one per device and
// socket, can share a process.
import createDebug from 'debug';
import fs from 'node:fs';
import { native } from './platform/native';
import { Backend } from './backend';
import { Fd } from './platform/fd';
import { Connection, type Message } from './connection';
import type { VhostUserDevice } from './device';
import { stderrLogger, type Logger } from './logger';
import { saveForRestart, type RestartSave, type RestartSlot } from './restart-state';

const debug = createDebug('vhost-user:server');

export interface ServerEvents {
  /** A frontend connected / went away (reason set on a protocol error). */
  onConnect?(): void;
  onDisconnect?(reason: Error | undefined): void;
}

export interface ServerOptions extends ServerEvents {
  /** Where the library's lines go (failed requests, connection errors); default stderrLogger. */
  logger?: Logger;
  /** Listening: serve only a frontend whose process runs as this user (PeerCheck). */
  peer?: PeerCheck;
  /**
   * A restarted backend's state (restart-state.ts), loaded into the device
   * when the first frontend starts its rings; and where saveForRestart
   * finds a state not yet loaded. Not for listenEach servers.
   */
  restart?: RestartSlot;
}

/**
 * Who may be a frontend, by SO_PEERCRED: the socket's file mode lets a group
 * in (every VM's QEMU, under libvirt), the uid check lets in only this VM's
 * (security review 2, L6). Anyone else's connection is logged and closed.
 */
export interface PeerCheck {
  uid: number;
  /** Where a refusal is said (one line); default the logger's error. */
  refused?: (line: string) => void;
}

/** listenEach: a new device for each frontend, and what ends it once that frontend is gone. */
export interface DeviceSource {
  make(): Promise<VhostUserDevice>;
  dispose(device: VhostUserDevice): Promise<void>;
  /** Frontends served at once; more are refused (their socket closed). */
  max: number;
}

interface Active {
  conn: Connection;
  backend: Backend;
}

export class VhostUserServer {
  #listener: Fd | undefined;
  #socketPath: string | undefined;
  /** The frontends served now (at most one without a DeviceSource). */
  readonly #active = new Set<Active>();
  /** Connections accepted whose device is still being made. */
  #starting = 0;
  /** Frontends gone whose device is still being reset (and, listenEach, let go): settled() waits for them. */
  readonly #ending = new Set<Promise<void>>();
  #closed = false;
  readonly #logger: Logger;

  private constructor(
    /** The device served (listenEach: the first frontend's, or a template that serves none). */
    readonly device: VhostUserDevice,
    private readonly events: ServerOptions,
    private readonly source?: DeviceSource,
  ) {
    this.#logger = events.logger ?? stderrLogger;
  }

  /** The connected frontend's backend (rings, memory), if one is connected (listenEach: the oldest). */
  get backend(): Backend | undefined {
    return this.#active.values().next().value?.backend;
  }

  /** Frontends connected now. */
  get connections(): number {
    return this.#active.size;
  }

  /** The devices of the frontends connected now. */
  get devices(): VhostUserDevice[] {
    return [...this.#active].map((a) => a.backend.device);
  }

  /** Listens on a unix socket path (an existing socket file there is replaced). */
  static listen(path: string, device: VhostUserDevice, options: ServerOptions = {}): VhostUserServer {
    const s = new VhostUserServer(device, options);
    s.#bind(path);
    return s;
  }

  #bind(path: string): void {
    try {
      if (fs.lstatSync(path, { throwIfNoEntry: false })?.isSocket()) fs.unlinkSync(path);
    } catch {
      /* bind below reports what is wrong */
    }
    this.#listener = new Fd(native.unixListen(path));
    this.#socketPath = path;
    this.#listener.watch(() => this.#accept());
    debug('%s: listening on %s', this.device.name, path);
  }

  /**
   * Listens on a unix socket path and serves each frontend that connects a
   * device of its own (source.make), ended (source.dispose) once it is gone;
   * template is what the status reports as the device.
   */
  static listenEach(path: string, template: VhostUserDevice, source: DeviceSource, options: ServerOptions = {}): VhostUserServer {
    const s = new VhostUserServer(template, options, source);
    s.#bind(path);
    return s;
  }

  /** A listenEach server without a socket of its own: its frontends come through serveConnected only. */
  static unbound(template: VhostUserDevice, source: DeviceSource, options: ServerOptions = {}): VhostUserServer {
    return new VhostUserServer(template, options, source);
  }

  /**
   * Serves one more frontend of a listenEach server on a connected socket
   * (one end of a pair), counted against its max as an accepted one: what
   * qcuda's shared-memory transport makes of a region's attach. Its memory
   * may be any file (ownMemory: the embedder made it, so a frontend cannot
   * cut it short); everything else is as untrusted as an accepted frontend's.
   * Resolves false, fd closed, if max are served or no device was made.
   */
  async serveConnected(fd: number, ownMemory: boolean): Promise<boolean> {
    const source = this.source;
    if (!source || this.#closed || this.#active.size + this.#starting >= source.max) {
      native.close(fd);
      return false;
    }
    this.#starting++;
    let device: VhostUserDevice;
    try {
      device = await source.make();
    } catch (e) {
      this.#logger.error(`vhost-user: ${this.device.name}: no device for a frontend: ${(e as Error).message}`);
      native.close(fd);
      return false;
    } finally {
      this.#starting--;
    }
    if (this.#closed) {
      native.close(fd);
      await source.dispose(device);
      return false;
    }
    const active = this.#serve(new Fd(fd), device);
    if (ownMemory) active.backend.memory.sealedOnly = false;
    return true;
  }

  /** Serves an already connected socket (--fd=FDNUM). */
  static fromConnectedFd(fd: number, device: VhostUserDevice, options: ServerOptions = {}): VhostUserServer {
    const s = new VhostUserServer(device, options);
    s.#serve(new Fd(fd), device);
    return s;
  }

  get connected(): boolean {
    return this.#active.size > 0;
  }

  /** The guest memory the (oldest) frontend now has mapped into this process (empty with none connected). */
  get memoryRegions(): { gpa: bigint; size: bigint }[] {
    return (this.backend?.memory.regions ?? []).map((r) => ({ gpa: r.gpa, size: r.size }));
  }

  #accept(): void {
    for (;;) {
      const fd = native.unixAccept(this.#listener!.value);
      if (fd < 0) return;
      if (!this.#peerAllowed(fd)) {
        native.close(fd);
        continue;
      }
      if (this.#active.size + this.#starting >= (this.source?.max ?? 1)) {
        debug('%s: refusing a frontend: %d served', this.device.name, this.#active.size);
        if (this.source) this.#logger.error(`vhost-user: ${this.device.name}: refused a frontend: ${this.source.max} are served already`);
        native.close(fd);
        continue;
      }
      if (!this.source) {
        this.#serve(new Fd(fd), this.device);
        continue;
      }
      // The frontend's first messages wait in the socket while its device is made.
      const sock = new Fd(fd);
      this.#starting++;
      this.source.make().then(
        (device) => {
          this.#starting--;
          if (this.#closed) {
            sock.close();
            void this.source!.dispose(device);
          } else this.#serve(sock, device);
        },
        (e: Error) => {
          this.#starting--;
          this.#logger.error(`vhost-user: ${this.device.name}: no device for a frontend: ${e.message}`);
          sock.close();
        },
      );
    }
  }

  /** Whether the process that connected fd may be a frontend (ServerOptions.peer); says why not. */
  #peerAllowed(fd: number): boolean {
    const want = this.events.peer;
    if (!want) return true;
    const refused = want.refused ?? ((line: string) => this.#logger.error(line));
    let who: { pid: number; uid: number };
    try {
      who = native.peerCred(fd);
    } catch (e) {
      refused(`vhost-user: ${this.device.name}: refused a frontend whose credentials cannot be read: ${(e as Error).message}`);
      return false;
    }
    if (who.uid === want.uid) return true;
    refused(`vhost-user: ${this.device.name}: refused a frontend: pid ${who.pid} runs as uid ${who.uid}, not ${want.uid} (--peer-uid)`);
    return false;
  }

  #serve(sock: Fd, device: VhostUserDevice): Active {
    // The connection's handlers reach its entry, made just after it.
    let active: Active | undefined;
    const conn = new Connection(sock, {
      onMessage: (m) => this.#onMessage(active!, m),
      onClose: (reason) => this.#onClose(active!, reason),
    });
    // listenEach serves programs (qcuda run's), each an untrusted frontend of a process they all share.
    const untrusted = this.source !== undefined;
    active = { conn, backend: new Backend(device, conn, this.#logger, untrusted, untrusted ? undefined : this.events.restart) };
    this.#active.add(active);
    debug('%s: frontend connected', device.name);
    this.#logger.info?.(`vhost-user: ${device.name}: frontend connected`);
    this.events.onConnect?.();
    return active;
  }

  #onMessage(active: Active, m: Message): void {
    active.conn.pause();
    active.backend.handle(m).then(
      () => active.conn.resume(),
      (e: Error) => active.conn.close(e),
    );
  }

  #onClose(active: Active, reason: Error | undefined): void {
    if (!this.#active.delete(active)) return;
    const device = active.backend.device;
    const closed = active.backend
      .close()
      .catch((e: Error) => this.#logger.error(`vhost-user: ${device.name}: device reset failed: ${e.message}`));
    const ended = !this.source
      ? closed
      : closed.then(() => this.source!.dispose(device)).catch((e: Error) => this.#logger.error(`vhost-user: ${device.name}: ${e.message}`));
    this.#ending.add(ended);
    void ended.then(() => this.#ending.delete(ended));
    if (reason) this.#logger.error(`vhost-user: ${device.name}: connection closed: ${reason.message}`);
    else this.#logger.info?.(`vhost-user: ${device.name}: frontend disconnected`);
    debug('%s: frontend disconnected%s', device.name, reason ? `: ${reason.message}` : '');
    this.events.onDisconnect?.(reason);
  }

  /**
   * A stop for a restart (restart-state.ts): the frontend's rings take
   * nothing more, what is in flight finishes (up to drainMs), and the
   * device's state goes to file. A state read at start and not loaded yet
   * (its frontend has not started its rings since) is written back as it
   * was. Nothing is written where there is nothing to keep (no frontend,
   * or one that has not started the device). The server goes on as it is:
   * close() it next.
   */
  async saveForRestart(file: string, drainMs: number): Promise<RestartSave> {
    const slot = this.events.restart;
    await slot?.loading;
    const pending = slot?.take();
    if (pending) {
      await pending.writeBack(file);
      return {
        outcome: 'saved',
        what: `the state read at start (${pending.bytes} bytes), its frontend not back yet: written back as it was`,
        inflight: 0,
      };
    }
    const b = this.backend;
    if (!b) return { outcome: 'nothing', what: 'no frontend is connected: nothing to keep', inflight: 0 };
    if (!b.rings.some((r) => r.started))
      return { outcome: 'nothing', what: 'the frontend has not started the device: nothing to keep', inflight: 0 };
    return saveForRestart(b, file, drainMs);
  }

  /**
   * Resolves once every frontend gone so far (by close() or on its own)
   * has had its device reset and, listenEach, let go: a process that
   * exits after close() waits for it, so that what the devices do as their
   * frontends go (end sessions, log them) is done, not cut short.
   */
  async settled(): Promise<void> {
    while (this.#ending.size > 0) await Promise.all(this.#ending);
  }

  /** Drops the frontends, stops listening and removes the socket file. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const a of [...this.#active]) a.conn.close();
    this.#listener?.close();
    if (this.#socketPath) fs.rmSync(this.#socketPath, { force: true });
  }
}
