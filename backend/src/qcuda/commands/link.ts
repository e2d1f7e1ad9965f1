// JIT linking: LINK hands finished module uploads to the provider's linker
// and keeps what it made (the cubin, the logs) for LINK_READ, which copies it
// into the guest's buffer a chunk at a time.
import type { Runs } from '../command';
import { CudaErr, CudaError } from '../cuda-error';
import type { LinkInput } from '../provider';
import { encode, QCUDA_CHUNK, QCUDA_LINK_NAME, QCUDA_MAX_LINK_INPUTS, QCUDA_MAX_LINK_OPTIONS, Status } from '../proto';

/** CUjitInputType: CUBIN, PTX, FATBINARY, OBJECT, LIBRARY, NVVM (LTO-IR). */
const MAX_INPUT_TYPE = 5;

/**
 * The CUjit_option values a guest may pass, each an integer, and the largest
 * value of each (the driver checks the rest). The logs and wall time are not
 * among them: they are the backend's, copied back in the result.
 */
const OPTIONS: ReadonlyMap<number, number> = new Map([
  [7, 4], // CU_JIT_OPTIMIZATION_LEVEL: 0..4
  [9, 0xffff], // CU_JIT_TARGET: a CUjit_target (the driver refuses one it does not know)
  [11, 1], // CU_JIT_GENERATE_DEBUG_INFO
  [12, 1], // CU_JIT_LOG_VERBOSE
  [13, 1], // CU_JIT_GENERATE_LINE_INFO
]);

/** Input i's name: up to its NUL, printable bytes only (the linker's logs quote it). */
function inputName(raw: Uint8Array, i: number): string {
  const own = raw.subarray(i * QCUDA_LINK_NAME, (i + 1) * QCUDA_LINK_NAME);
  const end = own.indexOf(0);
  const name = own.subarray(0, end < 0 ? own.length : end);
  return Buffer.from(name.map((b) => (b < 0x20 || b > 0x7e ? 0x3f : b))).toString('latin1');
}

function options(option: Uint32Array, value: Uint32Array, n: number): [number, number][] {
  if (n > QCUDA_MAX_LINK_OPTIONS) throw new CudaError(CudaErr.InvalidValue, `${n} link options (at most ${QCUDA_MAX_LINK_OPTIONS})`);
  const out: [number, number][] = [];
  for (let i = 0; i < n; i++) {
    const max = OPTIONS.get(option[i]);
    if (max === undefined)
      throw new CudaError(CudaErr.InvalidValue, `link option ${option[i]} is not one qcuda passes to the host's linker`);
    if (value[i] > max) throw new CudaError(CudaErr.InvalidValue, `link option ${option[i]} = ${value[i]} (at most ${max})`);
    out.push([option[i], value[i]]);
  }
  return out;
}

export const RUNS: Runs<'LINK' | 'LINK_READ'> = {
  /**
   * Every named upload is taken (its staging given back) whatever follows,
   * as MODULE_LOAD takes its one; the result is counted against the same
   * staging bound until it is read.
   */
  async LINK(c) {
    const s = c.session;
    const n = c.args.num_inputs;
    if (n === 0 || n > QCUDA_MAX_LINK_INPUTS) throw new CudaError(CudaErr.InvalidValue, `${n} link inputs (1 to ${QCUDA_MAX_LINK_INPUTS})`);
    const ids = [...c.args.upload_id.subarray(0, n)];
    if (new Set(ids).size !== n) throw new CudaError(CudaErr.InvalidValue, 'a module upload named twice in one link');
    const inputs: LinkInput[] = [];
    let failure: unknown;
    for (let i = 0; i < n; i++) {
      try {
        const { image } = s.modules.takeUpload(ids[i]);
        inputs.push({ type: c.args.type[i], name: inputName(c.args.name, i), data: image });
      } catch (e) {
        failure ??= e; // the other uploads are taken all the same
      }
    }
    if (failure !== undefined) throw failure;
    const bad = inputs.find((x) => x.type > MAX_INPUT_TYPE);
    if (bad) throw new CudaError(CudaErr.InvalidValue, `link input ${bad.name} of type ${bad.type} (CUjitInputType 0..${MAX_INPUT_TYPE})`);
    const opts = options(c.args.option, c.args.value, c.args.num_options);
    const r = await (await s.context()).link(inputs, opts);
    const image = r.status === 0 ? r.image : new Uint8Array(0);
    const all = Buffer.concat([image, r.infoLog, r.errorLog]);
    const id = all.length === 0 ? 0n : s.modules.addLinkResult(new Uint8Array(all.buffer, all.byteOffset, all.length));
    const wall = new DataView(new ArrayBuffer(4));
    wall.setFloat32(0, r.wallMs, true);
    return {
      value: id,
      out: encode('qcuda_out_link', {
        image_bytes: BigInt(image.length),
        info_bytes: r.infoLog.length,
        error_bytes: r.errorLog.length,
        wall_ms_bits: wall.getUint32(0, true),
        link_status: r.status,
      }),
    };
  },

  async LINK_READ(c) {
    // One request, as OUTPUT_READ: the last read drops the result, so chunks completing in any order would lose pieces.
    if (c.dataOffset !== 0n || c.dataLen === 0n || c.dataLen > BigInt(QCUDA_CHUNK))
      throw new CudaError(
        Status.BAD_REQUEST,
        `LINK_READ: a buffer of ${c.dataLen} bytes at offset ${c.dataOffset} (1 to ${QCUDA_CHUNK} bytes at offset 0)`,
      );
    const bytes = c.session.modules.readLinkResult(c.args.link, c.args.offset, Number(c.dataLen));
    let at = 0;
    for (const d of c.data) {
      if (at >= bytes.length) break;
      const k = Math.min(d.len, bytes.length - at);
      d.view.set(bytes.subarray(at, at + k));
      at += k;
    }
    return { value: BigInt(bytes.length) };
  },
};
