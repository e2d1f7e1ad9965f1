// vhost-user-ts: a device-independent vhost-user backend library.
export { Backend, MAX_MEM_SLOTS } from './backend';
export { ChainError, type Buf, type DescChain } from './chain';
export { Connection, type Message } from './connection';
export type { VhostUserDevice } from './device';
export { EventFd, Fd } from './fd';
export { MemoryError, MemoryTable } from './memory';
export * from './message';
export { Request } from './request';
export { VhostUserServer, type ServerEvents } from './server';
export { MAX_QUEUE_SIZE, Vring } from './vring';
