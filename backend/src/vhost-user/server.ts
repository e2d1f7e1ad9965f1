// A vhost-user backend endpoint: a listening socket (or an inherited
// connected fd) serving one device to one frontend at a time. Several
// servers, one per device and socket, can share a process.
import createDebug from 'debug';
import fs from 'node:fs';
import { native } from '../sys/native';
import { Backend } from './backend';
import { Fd } from '../sys/fd';
import { Connection, type Message } from './connection';
import type { VhostUserDevice } from './device';
import { stderrLogger, type Logger } from './logger';

const debug = createDebug('qcuda:vhost-user:server');

export interface ServerEvents {
  /** A frontend connected / went away (reason set on a protocol error). */
  onConnect?(): void;
  onDisconnect?(reason: Error | undefined): void;
}

export interface ServerOptions extends ServerEvents {
  /** Where the library's lines go (failed requests, connection errors); default stderrLogger. */
  logger?: Logger;
}

export class VhostUserServer {
  #listener: Fd | undefined;
  #socketPath: string | undefined;
  #active: { conn: Connection; backend: Backend } | undefined;
  #closed = false;
  readonly #logger: Logger;

  private constructor(
    readonly device: VhostUserDevice,
    private readonly events: ServerOptions,
  ) {
    this.#logger = events.logger ?? stderrLogger;
  }

  /** The connected frontend's backend (rings, memory), if one is connected. */
  get backend(): Backend | undefined {
    return this.#active?.backend;
  }

  /** Listens on a unix socket path (an existing socket file there is replaced). */
  static listen(path: string, device: VhostUserDevice, options: ServerOptions = {}): VhostUserServer {
    const s = new VhostUserServer(device, options);
    try {
      if (fs.lstatSync(path, { throwIfNoEntry: false })?.isSocket()) fs.unlinkSync(path);
    } catch {
      /* bind below reports what is wrong */
    }
    s.#listener = new Fd(native.unixListen(path));
    s.#socketPath = path;
    s.#listener.watch(() => s.#accept());
    debug('%s: listening on %s', device.name, path);
    return s;
  }

  /** Serves an already connected socket (--fd=FDNUM). */
  static fromConnectedFd(fd: number, device: VhostUserDevice, options: ServerOptions = {}): VhostUserServer {
    const s = new VhostUserServer(device, options);
    s.#serve(new Fd(fd));
    return s;
  }

  get connected(): boolean {
    return this.#active !== undefined;
  }

  /** The guest memory the frontend now has mapped into this process (empty with none connected). */
  get memoryRegions(): { gpa: bigint; size: bigint }[] {
    return (this.#active?.backend.memory.regions ?? []).map((r) => ({ gpa: r.gpa, size: r.size }));
  }

  #accept(): void {
    for (;;) {
      const fd = native.unixAccept(this.#listener!.value);
      if (fd < 0) return;
      if (this.#active) {
        debug('%s: refusing a second frontend', this.device.name);
        native.close(fd);
        continue;
      }
      this.#serve(new Fd(fd));
    }
  }

  #serve(sock: Fd): void {
    const conn: Connection = new Connection(sock, {
      onMessage: (m) => this.#onMessage(m),
      onClose: (reason) => this.#onClose(reason),
    });
    this.#active = { conn, backend: new Backend(this.device, conn, this.#logger) };
    debug('%s: frontend connected', this.device.name);
    this.#logger.info?.(`vhost-user: ${this.device.name}: frontend connected`);
    this.events.onConnect?.();
  }

  #onMessage(m: Message): void {
    const active = this.#active!;
    active.conn.pause();
    active.backend.handle(m).then(
      () => active.conn.resume(),
      (e: Error) => active.conn.close(e),
    );
  }

  #onClose(reason: Error | undefined): void {
    const active = this.#active;
    this.#active = undefined;
    active?.backend.close().catch((e: Error) => this.#logger.error(`vhost-user: ${this.device.name}: device reset failed: ${e.message}`));
    if (reason) this.#logger.error(`vhost-user: ${this.device.name}: connection closed: ${reason.message}`);
    else this.#logger.info?.(`vhost-user: ${this.device.name}: frontend disconnected`);
    debug('%s: frontend disconnected%s', this.device.name, reason ? `: ${reason.message}` : '');
    this.events.onDisconnect?.(reason);
  }

  /** Drops the frontend, stops listening and removes the socket file. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#active?.conn.close();
    this.#listener?.close();
    if (this.#socketPath) fs.rmSync(this.#socketPath, { force: true });
  }
}
