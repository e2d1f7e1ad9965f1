// Messages between the backend and its session workers (isolated.ts,
// worker.ts): values in V8's serialization (bigint and typed arrays go
// through as they are), each behind a u32 length, on a unix stream socket
// that also carries fds. Node's own IPC channel does the same job, but cost
// ~45 us more per round trip on the H100 host, on every CUDA call.
// A frame whose length has RAW set holds bytes the sender encoded itself
// (the hot copy calls and their answers, worker-messages.ts): the receiver
// gets them as a Uint8Array.
import { deserialize, serialize } from 'node:v8';
import { native, POLL_READABLE, POLL_WRITABLE } from '../../sys/native';
import { Fd } from '../../vhost-user';
import { Outbox } from '../../vhost-user';

/** Module images are the largest messages. */
const MAX_MESSAGE = 512 << 20;
const RAW = 0x8000_0000;
const READ_ROOM = 256 << 10;

export class Channel {
  readonly #sock: Fd;
  readonly #outbox: Outbox;
  readonly #fds: Fd[] = [];
  /** fds sent by sendTaking, closed once the outbox is empty (their message has gone). */
  readonly #sentFds: Fd[] = [];
  #buf = new Uint8Array(READ_ROOM * 2);
  #len = 0;
  #mask = 0;
  #closed = false;

  /** Takes fd over. onMessage gets every message in order; onClose once, at EOF or a broken socket. */
  constructor(
    fd: number,
    readonly onMessage: (m: unknown) => void,
    readonly onClose: (why?: Error) => void,
  ) {
    this.#sock = new Fd(fd);
    this.#outbox = new Outbox(fd);
    this.#sock.watch((events, status) => this.#onPoll(events, status), false, POLL_READABLE);
    this.#mask = POLL_READABLE;
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** fds go with the message's first byte; the receiver takes them with takeFd(). */
  send(m: unknown, fds: number[] = []): void {
    this.#post(serialize(m), 0, fds);
  }

  /**
   * As send, taking the fds over: each is closed once its message has gone
   * (the socket holds it until the peer takes it), or with the channel.
   */
  sendTaking(m: unknown, fds: Fd[]): void {
    const values = fds.map((f) => f.value);
    this.#sentFds.push(...fds);
    this.#post(serialize(m), 0, values);
    this.#closeSent();
  }

  /** fds sendTaking has taken that have not gone yet (their message, or one before it, waits for the socket). */
  get fdsInTransit(): number {
    return this.#sentFds.length;
  }

  #closeSent(): void {
    if (this.#closed || !this.#outbox.pending) for (const fd of this.#sentFds.splice(0)) fd.close();
  }

  /** A frame of bytes the caller encoded; the peer's onMessage gets them as a Uint8Array. */
  sendRaw(bytes: Uint8Array): void {
    this.#post(bytes, RAW, []);
  }

  #post(body: Uint8Array, flags: number, fds: number[]): void {
    if (this.#closed) {
      this.#closeSent();
      throw new Error('the channel is closed');
    }
    const data = new Uint8Array(4 + body.length);
    new DataView(data.buffer).setUint32(0, (body.length | flags) >>> 0, true);
    data.set(body, 4);
    this.#write(() => this.#outbox.push(data, fds));
  }

  /** The oldest fd received and not yet taken (the caller owns it), or undefined. */
  takeFd(): Fd | undefined {
    return this.#fds.shift();
  }

  close(why?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#sock.close();
    for (const fd of this.#fds.splice(0)) fd.close();
    this.#closeSent();
    this.onClose(why);
  }

  #onPoll(events: number, status: number): void {
    if (status < 0) return this.close(new Error(`channel poll failed (${status})`));
    if (events & POLL_WRITABLE) {
      this.#write(() => this.#outbox.flush());
      this.#closeSent();
    }
    if (events & POLL_READABLE) this.#read();
  }

  #watch(): void {
    const mask = POLL_READABLE | (this.#outbox.pending ? POLL_WRITABLE : 0);
    if (this.#closed || mask === this.#mask) return;
    this.#mask = mask;
    this.#sock.setWatchEvents(mask);
  }

  #write(write: () => void): void {
    try {
      write();
    } catch (e) {
      return this.close(e as Error);
    }
    this.#watch();
  }

  #read(): void {
    try {
      while (!this.#closed) {
        this.#room();
        const r = native.recvMsg(this.#sock.value, this.#buf.subarray(this.#len));
        for (const fd of r.fds ?? []) this.#fds.push(new Fd(fd));
        if (r.n < 0) return;
        if (r.n === 0) return this.close(this.#len > 0 ? new Error('the peer closed in the middle of a message') : undefined);
        this.#len += r.n;
        this.#deliver();
      }
    } catch (e) {
      this.close(e as Error);
    }
  }

  /** At least READ_ROOM free bytes, or room for the whole message being read. */
  #room(): void {
    const want = this.#len >= 4 ? 4 + (new DataView(this.#buf.buffer).getUint32(0, true) & ~RAW) : 0;
    const need = Math.max(this.#len + READ_ROOM, want);
    if (need <= this.#buf.length) return;
    const bigger = new Uint8Array(Math.max(need, this.#buf.length * 2));
    bigger.set(this.#buf.subarray(0, this.#len));
    this.#buf = bigger;
  }

  #deliver(): void {
    let at = 0;
    const view = new DataView(this.#buf.buffer);
    while (this.#len - at >= 4) {
      const word = view.getUint32(at, true);
      const size = word & ~RAW;
      if (size > MAX_MESSAGE) throw new Error(`a message of ${size} bytes`);
      if (this.#len - at - 4 < size) break;
      // A copy: typed arrays in the result are views of what is deserialized, and #buf is reused.
      const body = this.#buf.slice(at + 4, at + 4 + size);
      const m = word & RAW ? body : deserialize(body);
      at += 4 + size;
      this.onMessage(m);
      if (this.#closed) return;
    }
    this.#buf.copyWithin(0, at, this.#len);
    this.#len -= at;
  }
}
