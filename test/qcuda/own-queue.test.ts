// A session that keeps to a queue of its own (QCUDA_SESSION_OWN_QUEUE) has
// that queue served by its worker process (qcuda-backend --own-queues;
// workers/owned-queue.ts), here with emu-provider workers: real child
// processes serving a real ring. The backend answers only the SESSION_OPEN
// there; the VM's quota is one across the backend and the workers (the
// shared ledger); a closed session's queue comes back to the backend; a
// killed worker's session is gone and what it held is given back; across a VM
// stop (GET_VRING_BASE) and restart the ring goes back to the same worker.
import test, { type ExecutionContext } from 'ava';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import type { VmLimits } from '../../backend/src/qcuda/quota/limits';
import { Cmd, Status } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { alive, started, until } from '../helpers';
import { QcudaClient } from './client';

const MIB = 1 << 20;

async function setup(t: ExecutionContext, ownQueues = true, memoryLimit = 0n, limits: Partial<VmLimits> = {}) {
  const lines: string[] = [];
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'emu', gpu: 0 } });
  const dev = new QcudaDevice({ provider, queues: 4, ownQueues, memoryLimit, limits, log: (l) => lines.push(l) });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 4, size: 256 });
  /** The pid of the worker serving queue q, from the event log. */
  const ownerOf = async (q: number): Promise<number | undefined> => {
    let pid: number | undefined;
    await until(() => {
      const m = lines
        .map((l) => new RegExp(`queue ${q} served by its worker, pid (\\d+)`).exec(l))
        .filter(Boolean)
        .pop();
      pid = m ? Number(m[1]) : undefined;
      return pid !== undefined;
    }, 10_000);
    return pid;
  };
  // A session without a queue of its own keeps to queue 0 (owned queues are their workers').
  return { dev, fe, lines, ownerOf, provider, client: () => new QcudaClient(fe, 1, 16) };
}

/** A copy there and back through the session: true if the bytes came back. */
async function roundTrip(c: QcudaClient, size: number, seed: number): Promise<boolean> {
  const mem = c.fe.mem;
  const src = mem.alloc(size, 64);
  const dst = mem.alloc(size, 64);
  mem.bytes(src, size).forEach((_, i, a) => (a[i] = (i * 13 + seed) & 0xff));
  const m = await c.malloc(size);
  if (m.status !== 0) return false;
  if ((await c.htod(m.value, src, size)) !== 0) return false;
  if ((await c.dtoh(dst, m.value, size)) !== 0) return false;
  if ((await c.free(m.value)).status !== 0) return false;
  return Buffer.compare(mem.bytes(src, size), mem.bytes(dst, size)) === 0;
}

test.serial('a session on its own queue is served by its worker: the backend answers only its SESSION_OPEN there', async (t) => {
  const { dev, client, ownerOf } = await setup(t);
  const a = client();
  await a.openOwn(1);
  const pid = await ownerOf(1);
  t.truthy(pid && alive(pid), 'a worker serves queue 1');
  t.true(await roundTrip(a, 3 * MIB + 5, 1), 'bytes there and back');
  const calls = (): number | undefined => dev.status().sessions.find((x) => x.id === a.session.toString(16))?.calls;
  const before = calls()!;
  t.true(before > 4, `the backend's status counts the calls its worker served (${before})`);
  t.is((await a.call(Cmd.DEVICE_SYNC)).status, 0);
  t.is(calls(), before + 1, 'one call more');
  t.is(dev.served[1], 1, 'the backend served the SESSION_OPEN on queue 1 and nothing after it');
  // The same session's request on another queue is refused: its state is the worker's.
  t.is((await a.call(Cmd.DEVICE_SYNC, { queue: 0 })).status, Status.BAD_REQUEST);
  // Closing it hands the queue back: a new session opens on it and is served by a new worker.
  // The close is answered once what the session held is free: its worker (and context) gone, its quota back.
  t.is((await a.malloc(8 * MIB)).status, 0);
  t.is(dev.vm.quota.used, 8n << 20n);
  t.is((await a.close()).status, 0);
  t.false(alive(pid!), 'the worker was gone when the close was answered');
  t.is(dev.vm.quota.used, 0n, 'and what the session held was given back');
  const b = client();
  await b.openOwn(1);
  t.true(await roundTrip(b, 64 * 1024, 2));
  t.is(dev.served[1], 2, 'the backend served queue 1 again for the new SESSION_OPEN only');
});

test.serial('the VM quota is one across the backend and the workers (the shared ledger)', async (t) => {
  const { dev, client } = await setup(t, true, 64n << 20n);
  const a = client();
  await a.openOwn(1);
  const b = client();
  await b.openOwn(2);
  const shared = client();
  await shared.open();
  const x = await a.malloc(40 * MIB);
  t.is(x.status, 0);
  t.is((await b.malloc(40 * MIB)).status, CudaErr.MemoryAllocation, "another worker's session is refused past the quota");
  t.is((await shared.malloc(40 * MIB)).status, CudaErr.MemoryAllocation, 'and so is a session served by the backend');
  t.is(dev.vm.quota.used, 40n << 20n, 'the backend sees what the worker holds');
  t.is((await a.free(x.value)).status, 0);
  t.is((await b.malloc(40 * MIB)).status, 0, 'once freed, another takes it');
  t.is(dev.vm.quota.used, 40n << 20n);
});

test.serial('a killed worker: its session is gone, what it held is given back, and its queue is served by the backend again', async (t) => {
  const { dev, client, ownerOf } = await setup(t, true, 64n << 20n);
  const a = client();
  await a.openOwn(3);
  t.is((await a.malloc(30 * MIB)).status, 0);
  t.is(dev.vm.quota.used, 30n << 20n);
  const pid = (await ownerOf(3))!;
  process.kill(pid, 'SIGKILL');
  t.true(await until(() => dev.vm.quota.used === 0n, 5000), 'the quota it held is back');
  t.is((await a.malloc(MIB)).status, Status.NO_SESSION, 'its session is gone; the backend answers on queue 3');
  const b = client();
  await b.openOwn(3);
  t.true(await roundTrip(b, MIB, 3), 'a new session owns queue 3');
});

test.serial(
  "a context opened by a worker counts --context-overhead in the VM's quota, given back when the session closes or the worker dies",
  async (t) => {
    const { dev, client, ownerOf } = await setup(t, true, 64n << 20n, { contextOverhead: 24n << 20n });
    const a = client();
    await a.openOwn(1);
    const b = client();
    await b.openOwn(2);
    t.is((await a.call(Cmd.DEVICE_SYNC)).status, 0);
    t.is((await b.call(Cmd.DEVICE_SYNC)).status, 0);
    t.is(dev.vm.quota.used, 48n << 20n, 'two contexts, each opened in its worker');
    const shared = client();
    await shared.open();
    t.is((await shared.call(Cmd.DEVICE_SYNC)).status, CudaErr.MemoryAllocation, 'a third does not fit 64 MiB');
    process.kill((await ownerOf(2))!, 'SIGKILL');
    t.true(await until(() => dev.vm.quota.used === 24n << 20n, 5000), "a killed worker's context is given back");
    t.is((await shared.call(Cmd.DEVICE_SYNC)).status, 0, 'and another process takes it');
    await a.close();
    t.is(dev.vm.quota.used, 24n << 20n, "a closed session's too");
    await shared.close();
    t.is(dev.vm.quota.used, 0n);
  },
);

test.serial(
  "a worker that takes nothing while its session's close waits (held in the driver; here stopped) is killed, and the close is answered",
  async (t) => {
    const { dev, client, ownerOf, lines } = await setup(t, true, 64n << 20n);
    const a = client();
    await a.openOwn(1);
    t.is((await a.malloc(8 * MIB)).status, 0);
    const pid = (await ownerOf(1))!;
    process.kill(pid, 'SIGSTOP'); // as a thread blocked in the driver: alive, taking nothing
    t.teardown(() => alive(pid) && process.kill(pid, 'SIGKILL'));
    const t0 = Date.now();
    const r = await a.close();
    const took = Date.now() - t0;
    t.is(r.status, 0, 'the close is answered as done');
    t.true(took < 3000, `within ${took} ms`);
    t.false(alive(pid), 'the worker is gone');
    t.is(dev.vm.quota.used, 0n, 'what the session held is given back');
    t.true(
      lines.some((l) => /took nothing for \d+ ms while the session's close waited: killed/.test(l)),
      'the event log says why',
    );
    const b = client();
    await b.openOwn(1);
    t.true(await roundTrip(b, MIB, 4), 'a new session owns queue 1');
  },
);

test.serial('a worker that takes nothing while only calls wait is left alone: it is busy, as a native process may be', async (t) => {
  const { client, ownerOf } = await setup(t);
  const a = client();
  await a.openOwn(2);
  const pid = (await ownerOf(2))!;
  process.kill(pid, 'SIGSTOP');
  t.teardown(() => alive(pid) && process.kill(pid, 'SIGKILL'));
  const sync = a.call(Cmd.DEVICE_SYNC);
  await new Promise((r) => setTimeout(r, 1600));
  t.true(alive(pid), 'not killed after 1.6 s (3 looks)');
  process.kill(pid, 'SIGCONT');
  t.is((await sync).status, 0, 'its call is answered once it goes on');
  t.true(await roundTrip(a, MIB, 5));
  t.is((await a.close()).status, 0);
  t.false(alive(pid));
});

test.serial(
  'a VM stop and go on (GET_VRING_BASE, then the rings again): the owned ring goes back to the same worker, the session lives on',
  async (t) => {
    const { dev, fe, client, ownerOf } = await setup(t);
    const a = client();
    await a.openOwn(2);
    const mem = fe.mem;
    const src = mem.alloc(MIB, 64);
    const dst = mem.alloc(MIB, 64);
    mem.bytes(src, MIB).forEach((_, i, b) => (b[i] = (i * 7 + 1) & 0xff));
    const m = await a.malloc(MIB);
    t.is(await a.htod(m.value, src, MIB), 0);
    const pid = (await ownerOf(2))!;
    const calls = (): number | undefined => dev.status().sessions.find((x) => x.id === a.session.toString(16))?.calls;
    const before = calls()!;
    const bases = await fe.stop();
    t.is(bases[2], fe.queues[2].ring.availIdx, 'the ring stopped past every request the guest made available');
    t.true(alive(pid), 'the worker lives through the stop');
    await fe.resume(bases);
    t.is(await a.dtoh(dst, m.value, MIB), 0, 'the session goes on after the stop');
    t.is(Buffer.compare(mem.bytes(src, MIB), mem.bytes(dst, MIB)), 0, 'its device memory kept what it held');
    t.is(dev.served[2], 1, 'the backend served only the SESSION_OPEN on queue 2');
    t.is(calls(), before + 1, 'the calls served before the stop still count, and the one after it');
    // A second stop and go on, then the close: the worker ends.
    await fe.resume(await fe.stop());
    t.is((await a.call(Cmd.DEVICE_SYNC)).status, 0);
    t.is((await a.close()).status, 0);
    t.true(await until(() => !alive(pid), 5000), 'the worker exited after the close');
  },
);

test.serial('without --own-queues the flag changes nothing: the backend serves the queue', async (t) => {
  const { dev, client } = await setup(t, false);
  const a = client();
  await a.openOwn(1);
  t.true(await roundTrip(a, MIB, 5));
  t.true(dev.served[1] > 4, `${dev.served[1]} requests served by the backend on queue 1`);
});

test.serial(
  'the frontend gone while the queue is being handed over: the worker that was starting is ended and nothing is left',
  async (t) => {
    const { dev, fe, client, provider } = await setup(t);
    const a = client();
    void a.openOwn(1).catch(() => undefined); // its HELLO is never answered: the frontend goes first
    // The SESSION_OPEN is answered as the worker starts (a node process: tens of ms at least).
    t.true(await until(() => a.session !== 0n, 5000), 'the session opened');
    fe.close(); // the device resets while its worker starts
    t.true(
      await until(() => dev.sessions.size === 0 && provider.ownerPids.length === 0, 15_000),
      `sessions ${dev.sessions.size}, owner workers ${provider.ownerPids}`,
    );
    t.is(dev.vm.quota.used, 0n);
  },
);

test.serial(
  'module images cross once per VM with owned queues too: a worker finds what another process loaded, and leaves its own for the next',
  async (t) => {
    const { createHash } = await import('node:crypto');
    const { dev, fe, client } = await setup(t);
    const g = fe.mem.alloc(4096);
    const image = (n: number) => Buffer.from(`//\n.version 8.0\n.target sm_90\n.address_size 64\n// image ${n}\n`);
    const sha = (b: Buffer) => createHash('sha256').update(b).digest();
    const find = (c: QcudaClient, id: bigint, b: Buffer) =>
      c.call(Cmd.MODULE_FIND, { args: ['qcuda_args_module_find', { upload_id: id, size: BigInt(b.length), sha256: sha(b) }] });
    const uploadAndLoad = async (c: QcudaClient, id: bigint, b: Buffer) => {
      fe.mem.bytes(g, b.length).set(b);
      t.is(
        (
          await c.call(Cmd.MODULE_UPLOAD, {
            args: ['qcuda_args_module_upload', { upload_id: id, size: BigInt(b.length) }],
            to: [{ gpa: g, len: b.length }],
            dataLen: BigInt(b.length),
          })
        ).status,
        0,
      );
      // The emu provider runs no kernels: the image is checked (and kept), then refused with 209.
      t.is((await c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: id }] })).status, CudaErr.NoKernelImageForDevice);
    };
    // A session the backend serves loads image 1.
    const shared = client();
    await shared.open();
    t.is((await find(shared, 1n, image(1))).value, 0n, 'nothing cached yet');
    await uploadAndLoad(shared, 1n, image(1));
    // A worker on its own queue finds it, and the cache gives only what the content names.
    const a = client();
    await a.openOwn(1);
    t.is((await find(a, 2n, image(1))).value, 1n, 'found through the backend: staged as upload 2');
    t.is(
      (await a.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: 2n }] })).status,
      CudaErr.NoKernelImageForDevice,
      'and loads as the upload did',
    );
    t.is((await find(a, 3n, image(2))).value, 0n, 'an image nobody loaded is not found');
    // It loads image 2 itself; a later process on another worker finds that one.
    await uploadAndLoad(a, 3n, image(2));
    t.is((await a.close()).status, 0);
    const b = client();
    await b.openOwn(2);
    t.is((await find(b, 4n, image(2))).value, 1n, "the first worker's image is the VM's now");
    t.is((await find(shared, 5n, image(2))).value, 1n, 'also for a session the backend serves');
    t.is(dev.served[2], 1, 'the worker answered the MODULE_FIND on queue 2');
    t.is((await b.close()).status, 0);
  },
);
