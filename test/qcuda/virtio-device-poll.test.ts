// The qcuda device with ring polling (QcudaDevice's pollUs, the library's
// busy poll): its requests, copies of many sizes over all queues, are all
// served whole, and kicks are asked for only after a quiet spell.
import test from 'ava';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { prng, randomBytes, started } from '../helpers';
import { QcudaClient } from './client';

/** Long enough that a loaded CI machine does not pause past it between two requests. */
const WINDOW_US = 200_000;

test.serial('the qcuda device polled: copies of many sizes come back whole with the rings polled, over all queues', async (t) => {
  const dev = new QcudaDevice({ provider: emuProvider, queues: 4, pollUs: WINDOW_US });
  const { fe } = await started(t, dev, { size: 256 });
  const c = new QcudaClient(fe);
  await c.open();
  const rnd = prng(7);
  const big = 3 << 20;
  const ptr = (await c.malloc(big)).value;
  const src = fe.mem.alloc(big, 4096);
  const dst = fe.mem.alloc(big, 4096);
  const pattern = randomBytes(rnd, big);
  for (let i = 0; i < 40; i++) {
    const n = 1 + Math.floor(rnd() * big);
    // Different bytes each round: the pattern, shifted by the round.
    fe.mem.bytes(src, n).set(pattern.subarray(i, i + n).length === n ? pattern.subarray(i, i + n) : pattern.subarray(0, n));
    fe.mem.bytes(dst, n).fill(0);
    t.is(await c.htod(ptr, src, n), 0);
    t.is(await c.dtoh(dst, ptr, n), 0);
    t.is(Buffer.compare(fe.mem.bytes(dst, n), fe.mem.bytes(src, n)), 0, `copy ${i} of ${n} bytes`);
  }
  const kicks = fe.queues.reduce((k, q) => k + q.kicks, 0);
  t.log(`${kicks} kicks for the session open, hello, malloc and 80 copies`);
  // Each queue's first request after a quiet spell kicks; the rest come while it is polled.
  t.true(kicks <= 12, `${kicks} kicks for 80+ requests`);
  t.is((await c.close()).status, 0);
});
