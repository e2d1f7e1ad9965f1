// A C program built against qcuda's libcudart.so.13 and run under
// `qcuda run --provider=emu` with a 1 s batch delay, so that what crossed
// to the backend (qcuda_stats) is what the library sent, not the flusher:
// the round-trip counts of hostfn.test.ts and event-query.test.ts.
import type { ExecutionContext } from 'ava';
import { execFileSync, spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const LIB = path.resolve(dist, '..', 'build', 'guest', 'lib');
const CUDA_INCLUDE = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'include');

/** Builds source as name in the test's directory and runs it under qcuda run. */
export function runCounted(t: ExecutionContext, name: string, source: string): SpawnSyncReturns<string> {
  const prog = path.join(tmpDir(t), name);
  fs.writeFileSync(`${prog}.c`, source);
  execFileSync('gcc', ['-o', prog, `${prog}.c`, `-I${CUDA_INCLUDE}`, `-L${LIB}`, '-l:libcudart.so.13']);
  return spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', '--cudart=qcuda', '--', prog], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, QCUDA_BATCH_DELAY_US: '1000000' },
  });
}
