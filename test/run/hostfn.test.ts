// A host function leaves with the call that posts it (guest-driver/lib/
// callback.c): a program may wait for one outside CUDA (on a semaphore the
// function posts, as JAX's bound on computations in flight does), with no
// later call to flush it, and would otherwise wait the batch delay each
// time. Counted with qcuda_stats, not timed: the batch holding the host
// function went out during cudaLaunchHostFunc, here with a 1 s batch delay.
import test from 'ava';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';

const dist = path.resolve(__dirname, '..', '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const LIB = path.resolve(dist, '..', 'build', 'guest', 'lib');
const CUDA_INCLUDE = path.join(process.env.CUDA_HOME ?? '/usr/local/cuda', 'include');

const SOURCE = `#include <cuda_runtime_api.h>
#include <semaphore.h>
#include <stdio.h>
extern void qcuda_stats(unsigned long long out[3]);
static sem_t ran;
static void fn(void *arg) { (void)arg; sem_post(&ran); }
int main(void) {
  unsigned long long before[3], after[3];
  void *d;
  sem_init(&ran, 0, 0);
  if (cudaMalloc(&d, 64) != cudaSuccess || cudaMemsetAsync(d, 0, 64, 0) != cudaSuccess) return 1;
  qcuda_stats(before);
  if (cudaLaunchHostFunc(0, fn, NULL) != cudaSuccess) return 2;
  qcuda_stats(after);
  sem_wait(&ran);
  printf("batches sent during the call: %llu\\n", after[1] - before[1]);
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 3;
}
`;

test('a host function goes out with the call that posts it, not after the batch delay', (t) => {
  const dir = tmpDir(t);
  const prog = path.join(dir, 'hostfn');
  fs.writeFileSync(`${prog}.c`, SOURCE);
  execFileSync('gcc', ['-o', prog, `${prog}.c`, `-I${CUDA_INCLUDE}`, `-L${LIB}`, '-l:libcudart.so.13']);
  const r = spawnSync(process.execPath, [QCUDA, 'run', '--provider=host', '--cudart=qcuda', '--', prog], {
    encoding: 'utf8',
    timeout: 60_000,
    env: { ...process.env, QCUDA_BATCH_DELAY_US: '1000000' },
  });
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, 'batches sent during the call: 1\n', 'the memset and the host function, in one batch');
});
