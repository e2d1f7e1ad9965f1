// What a command is, as the dispatcher (virtio-device.ts) and the command files
// (commands/) see it: types only. A command's shape (its structs, data,
// handles, gates) is its declaration in wire/protocol.ts; what it does is a
// Run, typed by that declaration, so its arguments are its struct's fields.
import type { ShareGate } from './share/gate';
import type { Now } from '../sys/now';
import type { Decoded } from './proto';
import type { GuestSeg, Provider } from './provider';
import type { Session } from './session/session';
import type { CALLS, CmdName, StructName } from './wire/protocol';

/** The commands a session sends (the others the device answers itself). */
export type SessionCmd = { [K in CmdName]: (typeof CALLS)[K]['side'] extends 'device' ? never : K }[CmdName];

/** The decoded argument struct of a command (empty for commands without one). */
export type ArgsOf<K extends CmdName> = (typeof CALLS)[K] extends { args: infer S extends StructName } ? Decoded<S> : Record<string, never>;

/** What a command sees: its session, decoded arguments and its chunk of data. */
export interface Call<K extends CmdName = CmdName> {
  session: Session;
  args: ArgsOf<K>;
  queue: number;
  /** The data of this chunk: the bytes after the arguments (to device) or after the output (from device). */
  data: GuestSeg[];
  dataOffset: bigint;
  dataLen: bigint;
  dev: DeviceState;
  /** Argument bytes after the argument struct (commands declared with varArgs). */
  extra: Uint8Array;
}

/** What the commands need from the device. */
export interface DeviceState {
  readonly provider: Provider;
  /** The VM's GPU share gate under --gpu-share (share/gate.ts); undefined: commands run as they come. */
  readonly share?: ShareGate;
  /** Host address of a guest-physical range, checked whole. */
  hostAddressOfGpa(gpa: bigint, size: bigint): bigint;
  /** Bytes of guest RAM in the memory table now. */
  guestRamBytes(): bigint;
}

export interface Result {
  status?: number;
  value?: bigint;
  out?: Uint8Array;
}

/**
 * A command's run: its result at once where it finished on this thread (a
 * short call on a session's worker: no promise step on the round trip),
 * else a promise of it. It may throw or reject: the dispatcher takes both.
 */
export type Run<K extends CmdName> = (c: Call<K>) => Now<Result | void>;

/** Runs for some commands, each typed by its own declaration. */
export type Runs<K extends CmdName> = { readonly [P in K]: Run<P> };

/** A batch's ending call (a synchronize or a query), once its other entries ran (here, or in the ring server: ring-server.ts). */
export interface BatchEnding {
  /** The command and its argument bytes, as the batch had them. */
  cmd: number;
  args: Uint8Array;
  /** The reply's value, for a synchronize: the failed entry's index, else the count of the others (a query's is postedError). */
  value: bigint;
  /** The other entries' first failure (0: none). */
  postedError: number;
}
