// One vhost-user socket: reassembles messages across partial reads, pairs
// each message with the fds that came with it, and queues writes until the
// socket takes them. The peer is untrusted: a malformed header ends the
// connection (the stream cannot be resynchronised), never the process.
import createDebug from 'debug';
import { native, POLL_READABLE, POLL_WRITABLE } from './platform/native';
import { Fd, closeAll } from './platform/fd';
import { Outbox } from './platform/outbox';
import { checkHeader, decodeHeader, encodeMessage, HEADER_SIZE, MAX_FDS, type Header } from './message';
import { ProtocolError } from './errors';

const debug = createDebug('vhost-user:conn');

export interface Message extends Header {
  payload: Uint8Array;
  fds: Fd[];
}

export interface ConnectionEvents {
  onMessage(msg: Message): void;
  onClose(reason: Error | undefined): void;
}

export class Connection {
  readonly #sock: Fd;
  readonly #events: ConnectionEvents;
  #header = new Uint8Array(HEADER_SIZE);
  #got = 0;
  #current: Header | undefined;
  #payload = new Uint8Array(0);
  #fds: Fd[] = [];
  readonly #outbox: Outbox;
  #paused = false;
  #closed = false;
  #pollMask = -1;

  /** replies: this end is a frontend and reads replies instead of requests. */
  constructor(
    sock: Fd,
    events: ConnectionEvents,
    private readonly replies = false,
  ) {
    this.#sock = sock;
    this.#outbox = new Outbox(sock.value);
    this.#events = events;
    this.#sock.watch((ev, status) => this.#onPoll(ev, status), false, POLL_READABLE);
    this.#pollMask = POLL_READABLE;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Stops delivering messages (while an async handler runs) until resume(). */
  pause(): void {
    this.#paused = true;
    this.#updateWatch();
  }

  resume(): void {
    if (!this.#paused || this.#closed) return;
    this.#paused = false;
    this.#updateWatch();
    this.#readAvailable();
  }

  send(request: number, flags: number, payload: Uint8Array, fds: number[] = []): void {
    if (this.#closed) throw new Error('connection is closed');
    const data = encodeMessage(request, flags, payload);
    this.#write(() => this.#outbox.push(data, fds));
  }

  close(reason?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    closeAll(this.#fds);
    this.#fds = [];
    this.#sock.close();
    this.#events.onClose(reason);
  }

  /** Level-triggered polling: watch only what can make progress now. */
  #updateWatch(): void {
    if (this.#closed) return;
    const mask = (this.#paused ? 0 : POLL_READABLE) | (this.#outbox.pending ? POLL_WRITABLE : 0);
    if (mask === this.#pollMask) return;
    this.#pollMask = mask;
    this.#sock.setWatchEvents(mask);
  }

  #onPoll(events: number, status: number): void {
    if (status < 0) return this.close(new Error(`socket poll failed (${status})`));
    if (events & POLL_WRITABLE) this.#write(() => this.#outbox.flush());
    if (events & POLL_READABLE && !this.#paused) this.#readAvailable();
  }

  #readAvailable(): void {
    try {
      while (!this.#closed && !this.#paused && this.#readSome());
    } catch (e) {
      this.close(e as Error);
    }
  }

  /** Reads at most the rest of the current header or payload; true if more may follow. */
  #readSome(): boolean {
    const target = this.#current ? this.#payload : this.#header;
    const r = native.recvMsg(this.#sock.value, target.subarray(this.#got));
    if (r.n < 0) return false;
    const fds = (r.fds ?? []).map((fd) => new Fd(fd));
    this.#fds.push(...fds);
    if (r.ctrunc) throw new ProtocolError('bad-fds', 'fds were truncated (MSG_CTRUNC)');
    if (this.#fds.length > MAX_FDS) throw new ProtocolError('bad-fds', `more than ${MAX_FDS} fds with one message`);
    if (r.n === 0) {
      if (this.#got > 0 || this.#current) throw new ProtocolError('partial-message', 'peer closed in the middle of a message');
      this.close();
      return false;
    }
    this.#got += r.n;
    if (this.#got === target.length) this.#advance();
    return true;
  }

  #advance(): void {
    this.#got = 0;
    if (!this.#current) {
      const h = decodeHeader(this.#header);
      checkHeader(h, this.replies);
      this.#current = h;
      this.#payload = new Uint8Array(h.size);
      if (h.size > 0) return;
    }
    const msg: Message = { ...this.#current, payload: this.#payload, fds: this.#fds };
    this.#current = undefined;
    this.#fds = [];
    debug('recv %d flags=0x%s size=%d fds=%d', msg.request, msg.flags.toString(16), msg.size, msg.fds.length);
    this.#events.onMessage(msg);
  }

  #write(write: () => void): void {
    try {
      write();
    } catch (e) {
      return this.close(e as Error);
    }
    this.#updateWatch();
  }
}
