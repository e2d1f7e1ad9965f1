// vhost-user-ts: a device-independent vhost-user backend library. Everything
// outside this folder imports it through this file; the test frontend
// (frontend/, which plays QEMU and a guest driver) is a separate entry,
// frontend/index.ts, so that the backend never loads it.
// Its system pieces (the addon, Fd/EventFd, the socket write queue, the log
// rate limiter) live in ../sys/, which the qcuda worker channel shares.
export { EventFd, Fd } from '../sys/fd';
export { Backend, describeRegions, MAX_MEM_SLOTS } from './backend';
export {
  ChainError, DEFAULT_MAX_INDIRECT, DESC_SIZE, DescTable, MAX_INDIRECT_LIMIT, VIRTQ_DESC_F_INDIRECT, VIRTQ_DESC_F_NEXT,
  VIRTQ_DESC_F_WRITE, walkChain, type Buf, type DescChain,
} from './chain';
export { Connection, type Message } from './connection';
export type { VhostUserDevice } from './device';
export { stderrLogger, type Logger } from './logger';
export { GuestRegion, MemoryError, MemoryTable, type MemoryListener } from './memory';
export * from './message';
export { Request } from './request';
export { VhostUserServer, type DeviceSource, type PeerCheck, type ServerEvents, type ServerOptions } from './server';
export { MAX_QUEUE_SIZE, Vring, type FrontRing, type LeftRequest, type RingFront, type RingState } from './vring';
export { InflightRecord, leftover, type Leftover, type RingNow } from './inflight';
