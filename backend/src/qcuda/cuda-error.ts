// The codes a failure carries: every cudaError_t, generated from CUDA's
// driver_types.h (npm run gen).
export { CudaErr } from './wire/cuda-errors';

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
