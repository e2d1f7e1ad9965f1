// The library's native addon (vhost_user_native, built from native/),
// typed: only the system calls JavaScript cannot make. (platform/: the
// library's system pieces -- this addon, fds, the socket write queue, busy
// polling, the log rate limit -- which an embedder such as qcuda may share.)
import path from 'node:path';

export interface RecvResult {
  n: number;
  fds?: number[];
  ctrunc?: boolean;
}

export interface Mapping {
  readonly length: number;
  readonly address: bigint;
  readonly mapped: boolean;
  window(offset: number, length: number): ArrayBuffer;
  unmap(): void;
}

export interface Watcher {
  start(events: number): void;
  stop(): void;
  close(): void;
}

export interface Native {
  unixListen(path: string): number;
  unixAccept(fd: number): number;
  unixConnect(path: string): number;
  socketPair(): [number, number];
  sendMsg(fd: number, data: Uint8Array, fds: number[]): number;
  recvMsg(fd: number, buf: Uint8Array, maxFds?: number): RecvResult;
  close(fd: number): void;
  dup(fd: number): number;
  shutdown(fd: number): void;
  /** Who connected a unix socket (SO_PEERCRED, as at connect time). */
  peerCred(fd: number): { pid: number; uid: number; gid: number };
  memfdCreate(name: string, size: number): number;
  fdInfo(fd: number): { size: number; seals: number; regular: boolean };
  addSeals(fd: number, seals: number): void;
  /** random: at an unguessable address (guest RAM the GPU can reach: native/memory.cc says why). */
  Mapping: {
    new (fd: number, length: number, offset: number, random?: boolean): Mapping;
    /** The pieces ([fd, offset, length], whole pages) one after another, at a random address. */
    new (pieces: readonly (readonly [number, number, number])[]): Mapping;
  };
  pageSize: number;
  F_SEAL_SHRINK: number;
  F_SEAL_GROW: number;
  eventfd(): number;
  eventfdRead(fd: number): number;
  /** 0: written; 1: the counter was full (already signalled); 2: the fd had been made blocking (O_NONBLOCK put back first). */
  eventfdWrite(fd: number, n?: number): number;
  Watcher: new (fd: number, cb: (events: number, status: number) => void, drainEventfd?: boolean) => Watcher;
}

export const POLL_READABLE = 1;
export const POLL_WRITABLE = 2;

/** The repository root, from dist/backend/src/vhost-user/platform/. */
const ROOT = path.resolve(__dirname, '..', '..', '..', '..', '..');

/** An addon of this library's (native/vhost-user.gypi; the repository's addon/binding.gyp includes it and builds it there). */
export function loadAddon<T>(name: 'vhost_user_native' | 'vhost_user_bench'): T {
  return require(path.join(ROOT, 'addon', 'build', 'Release', `${name}.node`)) as T;
}

function load(): Native {
  return loadAddon<Native>('vhost_user_native');
}

export const native: Native = load();
