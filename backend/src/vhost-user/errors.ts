// The library's errors, by kind, so that a caller can tell what failed
// without matching messages (as rust-vmm's vhost_user::Error and
// virtio_queue::Error variants, or Node's `code`). Each names what the other
// side (a frontend, a guest driver) or the device did wrong; misuse of the
// library's own API stays a plain Error or RangeError.

/**
 * protocol: a frontend's message breaks the vhost-user protocol (size, fds,
 *   an unoffered feature, an unknown request);
 * ring: a vring refuses the step in its state (SET_VRING_NUM on a started
 *   ring, a hand-over with requests in flight, a bad in-flight record);
 * memory: a guest address outside the memory table (a ring's, or one a
 *   device asks for; a chain's own is a chain error);
 * chain: a descriptor chain the driver built wrongly (loops, nesting, order,
 *   memory outside the table);
 * request: a device's read or write past its request's buffers.
 */
export type VhostUserErrorKind = 'protocol' | 'ring' | 'memory' | 'chain' | 'request';

// The finer reason (ProtocolError.reason, ChainError.reason) is a field
// beside kind, not a finer kind: kind stays the five values above, which is
// what a caller that matches kind or the class already relies on, and each
// reason belongs to one class, so after `instanceof ProtocolError` a switch
// on reason is checked for every case. (rust-vmm's vhost_user::Error and
// virtio_queue::Error variants are the granularity aimed at.)

/** Why a frontend's message was refused (ProtocolError.reason). */
export type ProtocolReason =
  /** The header: a version other than 1, REPLY where it does not belong, a reply's flags. */
  | 'bad-header'
  /** A payload of the wrong length, or over the limit; a size inside one that does not fit (config space). */
  | 'bad-size'
  /** Fds missing, extra or truncated, or not what the message says they are (a region's fd too small). */
  | 'bad-fds'
  /** The socket closed in the middle of a message. */
  | 'partial-message'
  /** A request, or a mode of one, the backend or the device does not handle (no kick fd, no config space). */
  | 'unsupported-request'
  /** A feature or protocol feature the backend did not offer or the frontend did not negotiate. */
  | 'not-negotiated'
  /** A field out of its range: a queue index, size or base, ring addresses, a memory region, reserved bits. */
  | 'bad-value'
  /** A request that is well formed but not now: a device state transfer while rings run or another is under way, no memory slot free. */
  | 'bad-state';

/** What is wrong with a descriptor chain (ChainError.reason). */
export type ChainReason =
  /** The chain loops, or is longer than its table. */
  | 'loop'
  /** An indirect table: not negotiated, nested, with NEXT, a length not a multiple of 16 or over the device's limit, misaligned or across a mapping window. */
  | 'indirect-table'
  /** A buffer or an indirect table outside the memory table (the memory table's MemoryError is the cause). */
  | 'out-of-memory-table'
  /** A head or next index past its table. */
  | 'bad-index'
  /** A device-readable descriptor after a device-writable one. */
  | 'bad-order';

export class VhostUserError extends Error {
  constructor(
    readonly kind: VhostUserErrorKind,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export class ProtocolError extends VhostUserError {
  override readonly name = 'ProtocolError';
  constructor(
    readonly reason: ProtocolReason,
    message: string,
  ) {
    super('protocol', message);
  }
}

export class RingError extends VhostUserError {
  override readonly name = 'RingError';
  constructor(message: string) {
    super('ring', message);
  }
}

export class MemoryError extends VhostUserError {
  override readonly name = 'MemoryError';
  constructor(message: string) {
    super('memory', message);
  }
}

export class ChainError extends VhostUserError {
  override readonly name = 'ChainError';
  constructor(
    readonly reason: ChainReason,
    message: string,
    options?: ErrorOptions,
  ) {
    super('chain', message, options);
  }
}

export class RequestError extends VhostUserError {
  override readonly name = 'RequestError';
  constructor(message: string) {
    super('request', message);
  }
}

/**
 * A frontend did what only a hostile one does where the frontends are
 * untrusted programs (VhostUserServer.listenEach): a memory region that
 * could be cut short under the backend's mapping, a doorbell that is not an
 * eventfd or was made blocking. The frontend is dropped (its connection
 * closed, the reason logged), never the backend.
 */
export class FrontendFault extends VhostUserError {
  override readonly name = 'FrontendFault';
  constructor(message: string) {
    super('protocol', message);
  }
}
