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
 * memory: a guest address outside the memory table;
 * chain: a descriptor chain the driver built wrongly (loops, nesting, order);
 * request: a device's read or write past its request's buffers.
 */
export type VhostUserErrorKind = 'protocol' | 'ring' | 'memory' | 'chain' | 'request';

export class VhostUserError extends Error {
  constructor(
    readonly kind: VhostUserErrorKind,
    message: string,
  ) {
    super(message);
  }
}

export class ProtocolError extends VhostUserError {
  override readonly name = 'ProtocolError';
  constructor(message: string) {
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
  constructor(message: string) {
    super('chain', message);
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
