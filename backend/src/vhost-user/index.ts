// vhost-user-ts: a device-independent vhost-user backend library. Everything
// outside this folder imports it through this file; the test frontend
// (frontend/, which plays QEMU and a guest driver) is a separate entry,
// frontend/index.ts, so that the backend never loads it.
// It stands alone: it imports only itself, Node's builtins, `debug` and its
// own addon (test/cli/imports.test.ts checks). Its system pieces (the addon,
// Fd/EventFd, the socket write queue, busy polling, the log rate limiter)
// live in platform/, and are exported here for an embedder to share.
export { BusyPoll, type PollCheck, type Quiet } from './platform/busy-poll';
export { closeAll, EventFd, Fd } from './platform/fd';
export { LogLimiter, printable } from './platform/log-limiter';
export { native, POLL_READABLE, POLL_WRITABLE, type Mapping, type Native, type RecvResult, type Watcher } from './platform/native';
export { MAX_SAFE_BIG } from './platform/numbers';
export { Outbox } from './platform/outbox';
export { Backend, describeRegions, MAX_MEM_SLOTS } from './backend';
export {
  DEFAULT_MAX_INDIRECT,
  DESC_SIZE,
  DescTable,
  MAX_INDIRECT_LIMIT,
  VIRTQ_DESC_F_INDIRECT,
  VIRTQ_DESC_F_NEXT,
  VIRTQ_DESC_F_WRITE,
  walkChain,
  type Buf,
  type DescChain,
} from './chain';
export { Connection, type Message } from './connection';
export {
  ChainError,
  FrontendFault,
  MemoryError,
  ProtocolError,
  RequestError,
  RingError,
  VhostUserError,
  type ChainReason,
  type ProtocolReason,
  type VhostUserErrorKind,
} from './errors';
export type { StateSink, StateSource, VhostUserDevice } from './device';
export { ChunkSource, MAX_STATE_BYTES, StateDirection, StatePhase, StateTransfer, type TransferResult } from './state-transfer';
export { stderrLogger, type Logger } from './logger';
export {
  RESTART_FORMAT,
  RESTART_MAGIC,
  RestartSlot,
  RestartState,
  RestartStateError,
  saveForRestart,
  writeAtomic,
  type RestartMark,
  type RestartSave,
  type RingMark,
} from './restart-state';
export { GuestRegion, MemoryTable, type MemoryListener } from './memory';
export * from './message';
export { Reader, Writer, type Segment, type Struct } from './cursor';
export { Request } from './request';
export { VhostUserServer, type DeviceSource, type PeerCheck, type ServerEvents, type ServerOptions } from './server';
export { MAX_QUEUE_SIZE, Vring, type RingState } from './vring';
export type { FrontRing, Handler, LeftRequest, RingFront } from './ring-front';
export { InflightRecord, leftover, type Leftover, type RingNow } from './inflight';
