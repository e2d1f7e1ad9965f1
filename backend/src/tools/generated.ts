// Every committed generated file of the repository and what writes it: one
// list, which `npm run gen` (make gen) writes and `make check-gen` and
// test/tools/generated.test.ts compare with the tree. Each entry gives the
// file's text for the repository at root. (libcuda's exports, stubs,
// forwards and cuGetProcAddress table are not committed: the build derives
// them from CUDA's headers, guest-driver/libcuda/gen-libcuda.mjs.)
import fs from 'node:fs';
import path from 'node:path';
import { launchRecordHeader } from '../qcuda/providers/cuda/launch-record';
import { callsHeader, contextCallsHeader, protoHeader, ringCallsHeader } from '../qcuda/wire/gen-c';
import { cudaErrSource, sharedErrorsHeader } from './gen-cuda-errors';
import { errtabSource, stubsSource } from './gen-cudart';
import { unsupportedDoc } from './gen-unsupported';
import { protocolDoc } from './protocol-doc';

export const GENERATED_FILES: Record<string, (root: string) => string> = {
  // From the wire protocol's declaration (backend/src/qcuda/wire/protocol.ts).
  'guest-driver/include/qcuda_proto.h': protoHeader,
  'guest-driver/lib/qc_calls.h': callsHeader,
  'addon/src/context_calls.h': contextCallsHeader,
  'addon/src/ring_calls.h': ringCallsHeader,
  // From the launch record's field list (providers/cuda/launch-record.ts).
  'addon/src/launch_record.h': launchRecordHeader,
  // From CUDA's error enums (CUDA_HOME's driver_types.h and cuda.h).
  'backend/src/qcuda/wire/cuda-errors.ts': cudaErrSource,
  'addon/src/cuda_shared_errors.h': sharedErrorsHeader,
  // From NVIDIA's libcudart.so.13 and headers (CUDA_HOME).
  'guest-driver/lib/errtab.c': errtabSource,
  'guest-driver/lib/stubs.c': stubsSource,
  // From stubs.c (after it: gen writes in this order).
  'guest-driver/lib/UNSUPPORTED.md': unsupportedDoc,
  // The protocol's reference, from the same declaration.
  'docs/protocol.md': protocolDoc,
};

/** The repository holding this file, from dist/backend/src/tools. */
export const REPO_ROOT = path.resolve(__dirname, '..', '..', '..', '..');

/** Each generated file whose text in the tree is not what its generator gives (or whose generator failed: the reason). */
export function staleFiles(root: string = REPO_ROOT): { file: string; why: string }[] {
  const stale: { file: string; why: string }[] = [];
  for (const [file, text] of Object.entries(GENERATED_FILES)) {
    try {
      if (readOrEmpty(path.join(root, file)) !== text(root)) stale.push({ file, why: 'differs from what its generator gives' });
    } catch (e) {
      stale.push({ file, why: `its generator failed: ${(e as Error).message}` });
    }
  }
  return stale;
}

function readOrEmpty(file: string): string {
  return fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
}
