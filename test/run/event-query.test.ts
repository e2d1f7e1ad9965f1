// An event or stream query ends the batch of the work posted before it
// (QCUDA_BATCH_ENDS_QUERY, guest-driver/lib/batch.c): cudaEventRecord +
// cudaEventQuery in a loop, as PyTorch's caching allocator and JAX make
// them, is one round trip an iteration, not two (issue 43: 2.00 round trips
// an op, 0.71 of native on an H100); a query with nothing posted goes on its
// own. Counted with qcuda_stats, not timed. (What becomes of a posted
// failure before the query: test/qcuda/batch.test.ts, ring-server.test.ts.)
import test from 'ava';
import { runCounted } from './counted';

const SOURCE = `#include <cuda_runtime_api.h>
#include <stdio.h>
extern void qcuda_stats(unsigned long long out[3]);
static unsigned long long at[3];
/* Round trips since the last call: calls and batches. */
static void trips(const char *what) {
  unsigned long long s[3];
  qcuda_stats(s);
  printf("%s: %llu calls, %llu batches\\n", what, s[0] - at[0], s[1] - at[1]);
  qcuda_stats(at);
}
static int answered(cudaError_t e) { return e == cudaSuccess || e == cudaErrorNotReady; }
int main(void) {
  cudaEvent_t ev;
  cudaStream_t st;
  char *d;
  if (cudaMalloc((void **)&d, 64) != cudaSuccess || cudaEventCreate(&ev) != cudaSuccess ||
      cudaStreamCreate(&st) != cudaSuccess)
    return 1;
  qcuda_stats(at);
  for (int i = 0; i < 10; i++)
    if (cudaEventRecord(ev, st) != cudaSuccess || !answered(cudaEventQuery(ev))) return 2;
  trips("10 x event record + query");
  for (int i = 0; i < 10; i++)
    if (cudaMemsetAsync(d, i, 64, st) != cudaSuccess || !answered(cudaStreamQuery(st))) return 3;
  trips("10 x memset + stream query");
  if (!answered(cudaEventQuery(ev))) return 4;
  trips("a query with nothing posted");
  if (cudaEventRecord(ev, st) != cudaSuccess || cudaStreamSynchronize(st) != cudaSuccess) return 5;
  trips("a record and a synchronize");
  return 0;
}
`;

test('an event record and a query are one round trip, as are a memset and a stream query', (t) => {
  const r = runCounted(t, 'event-query', SOURCE);
  t.is(r.status, 0, r.stderr);
  t.is(
    r.stdout,
    [
      '10 x event record + query: 0 calls, 10 batches',
      '10 x memset + stream query: 0 calls, 10 batches',
      'a query with nothing posted: 1 calls, 0 batches',
      'a record and a synchronize: 0 calls, 1 batches',
      '',
    ].join('\n'),
  );
});
