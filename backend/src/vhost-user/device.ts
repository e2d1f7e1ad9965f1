// What a device implements to be served over vhost-user: its virtio feature
// bits, config space, queue count and size, and a request handler. The
// library does the protocol, the memory and the rings.
import type { BusyPoll } from './platform/busy-poll';
import type { MemoryTable } from './memory';
import type { Request } from './request';
import type { Vring } from './vring';

export interface VhostUserDevice {
  readonly name: string;
  readonly numQueues: number;
  /** Largest queue size the driver may choose (a power of two <= 32768). */
  readonly maxQueueSize: number;
  /**
   * Largest indirect descriptor table accepted, in descriptors (1..65536);
   * a larger one fails its request. Default DEFAULT_MAX_INDIRECT (32768, the
   * virtio queue size limit); a device whose driver sends longer chains
   * (qcuda: a 16 MiB chunk page by page) says so here.
   */
  readonly maxIndirect?: number;
  /** Device-specific virtio feature bits; the library adds VERSION_1, RING_INDIRECT_DESC and RING_EVENT_IDX. */
  readonly features: bigint;
  /**
   * Microseconds the rings are polled after each request and each answer,
   * the driver's kicks suppressed meanwhile (platform/busy-poll.ts says why);
   * 0 or absent: the rings wait for kicks.
   */
  readonly pollUs?: number;
  /** Given the rings' poller when pollUs > 0: a device may poll its own completions on the same turns (BusyPoll.keep). */
  usePoll?(poll: BusyPoll): void;
  /** Given the rings: a device may hand one to another process (Vring.detach). */
  useRings?(rings: readonly Vring[]): void;
  /** GET_VRING_BASE on a ring handed to another process: the device gets it back here first. */
  reclaimRing?(index: number): Promise<void>;
  /** Before and after a ring's kick, call or enable changes (a ring that goes back to another process once it starts). */
  ringStarting?(index: number): void;
  ringStarted?(index: number): void;
  /** Config space size in bytes (0..256); 0 means no config space and no CONFIG protocol feature. */
  readonly configSize: number;
  /** The config space bytes now. */
  readConfig?(): Uint8Array;
  writeConfig?(offset: number, data: Uint8Array): void;
  /**
   * Serves one request; returns (or resolves to) the number of bytes written
   * into the writable part. Completions may come in any order. A throw or a
   * rejection fails that request only (used length 0).
   */
  handle(req: Request): number | Promise<number>;
  /** The frontend went away or reset the device: drop per-guest state. Guest
   * memory stays mapped until the returned promise settles. */
  reset?(): void | Promise<void>;
  /** A frontend connected: its guest memory (the table fills in later; set
   * memory.listener to hear of regions as they are mapped and unmapped). */
  attachMemory?(memory: MemoryTable): void;
  /** What the device holds now, as JSON-able values (the embedder's status endpoint shows it). */
  status?(): object;
  /**
   * Migration (VHOST_USER_PROTOCOL_F_DEVICE_STATE): write the device's whole
   * state. Called only with every ring stopped. A throw fails the migration
   * with its message; the device must then go on as if never asked.
   */
  saveState?(out: StateSink): Promise<void>;
  /**
   * A stop for a restart (restart-state.ts): the rings take nothing more.
   * Answer the requests that wait for the guest's next ones (which will not
   * be taken now), so that what is in flight can finish; return why the
   * state cannot be kept (the stop then goes at once, without it), or
   * undefined.
   */
  quiesce?(): string | undefined;
  /**
   * Take back what a saveState wrote, maybe in another backend process of
   * another version: every byte is untrusted. A throw refuses the state and
   * must leave the device as it was.
   */
  loadState?(input: StateSource): Promise<void>;
}

/** Where saveState writes (the migration stream's pipe, a file, a buffer). */
export interface StateSink {
  write(chunk: Uint8Array): Promise<void>;
}

/** Where loadState reads: read(n) gives exactly n bytes or throws at the stream's end. */
export interface StateSource {
  read(len: number): Promise<Uint8Array>;
  /** Whether the stream has ended (nothing more to read). */
  atEnd(): Promise<boolean>;
}
