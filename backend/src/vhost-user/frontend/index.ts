// The test frontend of vhost-user-ts: plays QEMU (the vhost-user frontend)
// and the guest driver (guest RAM in a memfd, split rings), for tests and
// benchmarks. A separate entry from ../index.ts: the backend never loads it.
export { Frontend, type StartOptions, type StateOutcome } from './frontend';
export { openPipe, readToEnd, writeAndClose, type Pipe } from './pipe';
export { GIB, GuestMemory, type RegionSpec } from './guest-memory';
export { GuestRing, INDIRECT_MAX, type GuestBuf, type Used } from './guest-ring';
