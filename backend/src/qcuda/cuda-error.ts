// cudaError_t values the backend returns (the runtime API's numbering, which
// the guest library hands to the program unchanged).
export enum CudaErr {
  Success = 0,
  InvalidValue = 1,
  MemoryAllocation = 2,
  InitializationError = 3,
  DevicesUnavailable = 46,
  InvalidKernelImage = 200,
  InvalidDevice = 101,
  InvalidDevicePointer = 17,
  /** CUDA's invalid context (201): cuIpcOpenMemHandle in the process that made the handle. */
  DeviceUninitialized = 201,
  NoKernelImageForDevice = 209,
  UnsupportedLimit = 215,
  InvalidPtx = 218,
  SymbolNotFound = 500,
  InvalidResourceHandle = 400,
  NotReady = 600,
  NoDevice = 100,
  NotSupported = 801,
  InvalidPitchValue = 12,
  InvalidConfiguration = 9,
  IllegalAddress = 700,
  LaunchFailure = 719,
  ContextIsDestroyed = 709,
  PeerAccessUnsupported = 217,
  PeerAccessAlreadyEnabled = 704,
  PeerAccessNotEnabled = 705,
  OperatingSystem = 304,
  Unknown = 999,
}

/** A failure with a CUDA error code: reaches the guest as the reply status. */
export class CudaError extends Error {
  override readonly name = 'CudaError';
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}
