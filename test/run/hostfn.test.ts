// A host function rides in the batch of the call that follows it
// (guest-driver/lib/callback.c): a memset, a host function and a
// synchronize go as one batch, the synchronize its last entry, as JAX's jit
// step makes them (a flush at the host function cost that step a round
// trip more: 0.25 of native against 0.45, on an H100). One waited for
// outside CUDA (on a semaphore it posts) still runs: the flusher sends it
// within the batch delay (1 s here). Counted with qcuda_stats, not timed.
import test from 'ava';
import { runCounted } from './counted';

const SOURCE = `#include <cuda_runtime_api.h>
#include <semaphore.h>
#include <stdio.h>
extern void qcuda_stats(unsigned long long out[3]);
static sem_t ran;
static void fn(void *arg) { (void)arg; sem_post(&ran); }
static unsigned long long batches(void) {
  unsigned long long s[3];
  qcuda_stats(s);
  return s[1];
}
int main(void) {
  unsigned long long at_post, at_sync, start;
  void *d;
  sem_init(&ran, 0, 0);
  if (cudaMalloc(&d, 64) != cudaSuccess) return 1;
  start = batches();
  if (cudaMemsetAsync(d, 0, 64, 0) != cudaSuccess || cudaLaunchHostFunc(0, fn, NULL) != cudaSuccess) return 2;
  at_post = batches();
  if (cudaStreamSynchronize(0) != cudaSuccess) return 3;
  at_sync = batches();
  sem_wait(&ran);
  printf("batches sent by the host function: %llu, with the synchronize: %llu\\n", at_post - start, at_sync - at_post);
  /* Waited for outside CUDA: no call follows to send it. */
  if (cudaMemsetAsync(d, 1, 64, 0) != cudaSuccess || cudaLaunchHostFunc(0, fn, NULL) != cudaSuccess) return 4;
  sem_wait(&ran);
  printf("the host function waited for outside CUDA ran\\n");
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 5;
}
`;

test('a host function goes in the batch of the synchronize after it; one waited for outside CUDA runs', (t) => {
  const r = runCounted(t, 'hostfn', SOURCE);
  t.is(r.status, 0, r.stderr);
  t.is(r.stdout, 'batches sent by the host function: 0, with the synchronize: 1\nthe host function waited for outside CUDA ran\n');
});
