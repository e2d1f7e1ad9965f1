// A C program built against qcuda's libcudart.so.13 (or NVIDIA's, over
// qcuda's libcuda.so.1: the path PyTorch, JAX and CuPy take) and run under
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
const CUDA_HOME = process.env.CUDA_HOME ?? '/usr/local/cuda';
const CUDA_INCLUDE = path.join(CUDA_HOME, 'include');
/** NVIDIA's libcudart.so.13, from the toolkit the build uses. */
const NVIDIA_CUDART_DIR = path.join(CUDA_HOME, 'lib64');

/**
 * Builds source as name in the test's directory and runs it under qcuda run:
 * over qcuda's runtime, or (runtime 'nvidia') over NVIDIA's, which reaches
 * qcuda's libcuda.so.1 through cuGetProcAddress; such a program finds
 * qcuda_stats in libcuda.so.1 with dlopen(RTLD_NOLOAD).
 */
export function runCounted(
  t: ExecutionContext,
  name: string,
  source: string,
  runtime: 'qcuda' | 'nvidia' = 'qcuda',
): SpawnSyncReturns<string> {
  const prog = path.join(tmpDir(t), name);
  fs.writeFileSync(`${prog}.c`, source);
  const link =
    runtime === 'qcuda'
      ? [`-L${LIB}`, '-l:libcudart.so.13']
      : [`-L${NVIDIA_CUDART_DIR}`, '-l:libcudart.so.13', `-Wl,-rpath,${NVIDIA_CUDART_DIR}`, '-ldl'];
  execFileSync('gcc', ['-o', prog, `${prog}.c`, `-I${CUDA_INCLUDE}`, ...link]);
  const cudart = runtime === 'qcuda' ? ['--cudart=qcuda'] : [];
  return spawnSync(process.execPath, [QCUDA, 'run', '--provider=emu', ...cudart, '--', prog], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, QCUDA_BATCH_DELAY_US: '1000000' },
  });
}
