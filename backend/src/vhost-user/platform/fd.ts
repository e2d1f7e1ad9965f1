// Every fd the process creates or receives is owned by exactly one Fd and is
// closed exactly once. A watcher on the fd is closed before the fd itself.
import fs from 'node:fs';
import { native, POLL_READABLE, type Watcher } from './native';

export class Fd {
  #fd: number;
  #watcher: Watcher | undefined;

  constructor(fd: number) {
    if (!Number.isInteger(fd) || fd < 0) throw new RangeError(`not an fd: ${fd}`);
    this.#fd = fd;
  }

  get value(): number {
    if (this.#fd < 0) throw new Error('fd is closed');
    return this.#fd;
  }

  get closed(): boolean {
    return this.#fd < 0;
  }

  /** Calls onEvent whenever the fd is readable (eventfds: drained first). */
  watch(onEvent: (events: number, status: number) => void, drainEventfd = false, events = POLL_READABLE): void {
    this.unwatch();
    this.#watcher = new native.Watcher(this.value, onEvent, drainEventfd);
    this.#watcher.start(events);
  }

  /** Changes the events of the current watcher; 0 stops it. */
  setWatchEvents(events: number): void {
    if (!this.#watcher) throw new Error('fd is not watched');
    if (events === 0) this.#watcher.stop();
    else this.#watcher.start(events);
  }

  unwatch(): void {
    this.#watcher?.close();
    this.#watcher = undefined;
  }

  /** Hands the fd over to a new owner; this object is then closed. */
  take(): number {
    const fd = this.value;
    this.unwatch();
    this.#fd = -1;
    return fd;
  }

  close(): void {
    if (this.#fd < 0) return;
    this.unwatch();
    native.close(this.#fd);
    this.#fd = -1;
  }
}

export function closeAll(fds: readonly Fd[]): void {
  for (const fd of fds) fd.close();
}

/** Whether fd is an eventfd (not a pipe, socket or file another process could make block or fill). */
export function isEventfd(fd: number): boolean {
  try {
    return fs.readlinkSync(`/proc/self/fd/${fd}`) === 'anon_inode:[eventfd]';
  } catch {
    return false;
  }
}

/** An eventfd doorbell. */
export class EventFd extends Fd {
  static create(): EventFd {
    return new EventFd(native.eventfd());
  }

  /**
   * Adds 1 to the counter, never blocking: O_NONBLOCK is put back first
   * where the other holder of the fd cleared it. 0: written; 1: the counter
   * was full (already signalled); 2: the fd had been made blocking.
   */
  signal(): number {
    return native.eventfdWrite(this.value, 1);
  }

  /** The counter, or -1 if it was zero. */
  drain(): number {
    return native.eventfdRead(this.value);
  }
}
