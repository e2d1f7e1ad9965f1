// OUTPUT_READ: the oldest device output waiting in the caller's session
// (output.ts) into the guest's buffer.
import type { Runs } from '../command';
import { CudaError } from '../cuda-error';
import { encode, QCUDA_CHUNK, Status } from '../proto';

export const RUNS: Runs<'OUTPUT_READ'> = {
  async OUTPUT_READ(c) {
    // Reading consumes, so the buffer must be one request: a chunked one could
    // complete in any order and its pieces would be lost or misplaced.
    if (c.dataOffset !== 0n || c.dataLen === 0n || c.dataLen > BigInt(QCUDA_CHUNK))
      throw new CudaError(
        Status.BAD_REQUEST,
        `OUTPUT_READ: a buffer of ${c.dataLen} bytes at offset ${c.dataOffset} (1 to ${QCUDA_CHUNK} bytes at offset 0)`,
      );
    const p = c.session.output.read(Number(c.dataLen));
    let at = 0;
    for (const d of c.data) {
      if (at >= p.bytes.length) break;
      const n = Math.min(d.len, p.bytes.length - at);
      d.view.set(p.bytes.subarray(at, at + n));
      at += n;
    }
    return { value: BigInt(p.bytes.length), out: encode('qcuda_out_output_read', { kind: p.kind, more: p.more ? 1 : 0 }) };
  },
};
