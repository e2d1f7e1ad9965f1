// Writes queued on a non-blocking stream socket until it takes them: a
// partial write resumes where it stopped, and a message's fds go with its
// first byte. The owner polls for POLL_WRITABLE while `pending` and calls
// flush() then.
import { native } from './native';

export class Outbox {
  readonly #queue: { data: Uint8Array; fds: number[] }[] = [];

  constructor(readonly sock: number) {}

  get pending(): boolean {
    return this.#queue.length > 0;
  }

  /** Queues a message and writes what the socket takes now; throws what sendmsg throws. */
  push(data: Uint8Array, fds: number[] = []): void {
    this.#queue.push({ data, fds });
    if (this.#queue.length === 1) this.flush();
  }

  /** Writes until the queue is empty or the socket is full. */
  flush(): void {
    while (this.#queue.length > 0) {
      const head = this.#queue[0];
      const n = native.sendMsg(this.sock, head.data, head.fds);
      if (n < 0) return;
      head.fds = [];
      if (n < head.data.length) head.data = head.data.subarray(n);
      else this.#queue.shift();
    }
  }
}
