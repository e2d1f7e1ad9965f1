// VHOST_USER_PROTOCOL_F_DEVICE_STATE: a toy device's state goes through
// SET_DEVICE_STATE_FD / CHECK_DEVICE_STATE over real sockets and pipes, as
// QEMU's vhost_save_backend_state and vhost_load_backend_state move it; a
// failing save or load, a broken stream and a misuse each fail CHECK with a
// logged reason and leave the device as it was.
import test from 'ava';
import { EchoDevice, fnv1a } from '../../backend/src/devices/echo';
import path from 'node:path';
import { native, Req, VhostUserServer, type Request, type StateSink, type StateSource } from '../../backend/src/vhost-user';
import { Frontend, openPipe, readToEnd, writeAndClose } from '../../backend/src/vhost-user/frontend';
import { connect, openFds, prng, started, tick, tmpDir, until, type Pair } from '../helpers';

const SAVE = 0;
const LOAD = 1;
const ACCEPTED = 0x100n; // no error, no fd of the backend's

/**
 * An echo device with a state: how many requests it served, a checksum of
 * every byte they carried, and `blob` (big enough to fill a pipe many times,
 * so the writer must wait for the reader).
 */
class ToyDevice extends EchoDevice {
  served = 0;
  sum = 0;
  blob: Uint8Array;
  failSave: string | undefined;
  failLoad: string | undefined;
  loads = 0;

  constructor(blobBytes = 3 << 20, seed = 1) {
    super({ queues: 2 });
    const r = prng(seed);
    this.blob = Uint8Array.from({ length: blobBytes }, () => Math.floor(r() * 256));
  }

  override handle(req: Request): number | Promise<number> {
    this.served++;
    this.sum = (this.sum ^ fnv1a(req.read())) >>> 0;
    return super.handle(req);
  }

  async saveState(out: StateSink): Promise<void> {
    const head = new Uint8Array(12);
    const v = new DataView(head.buffer);
    v.setUint32(0, this.served, true);
    v.setUint32(4, this.sum, true);
    v.setUint32(8, this.blob.length, true);
    await out.write(head);
    for (let off = 0; off < this.blob.length; off += 65536) {
      if (this.failSave && off > 65536 * 4) throw new Error(this.failSave);
      await out.write(this.blob.subarray(off, off + 65536));
    }
  }

  async loadState(input: StateSource): Promise<void> {
    this.loads++;
    const head = await input.read(12);
    const v = new DataView(head.buffer, head.byteOffset, 12);
    const blob = Uint8Array.from(await input.read(v.getUint32(8, true)));
    if (this.failLoad) throw new Error(this.failLoad);
    if (!(await input.atEnd())) throw new Error('bytes after the toy state');
    // Taken only whole: a throw above leaves the device as it was.
    this.served = v.getUint32(0, true);
    this.sum = v.getUint32(4, true);
    this.blob = blob;
  }
}

/** Sends n requests on queue 0 and checks each echo. */
async function traffic(t: { is: (a: unknown, b: unknown, m?: string) => void }, p: Pair, n: number, seed: number): Promise<void> {
  const r = prng(seed);
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(r() * 200);
    const inp = p.fe.mem.alloc(len);
    const out = p.fe.mem.alloc(len + 8);
    const data = Uint8Array.from({ length: len }, () => Math.floor(r() * 256));
    p.fe.mem.bytes(inp, len).set(data);
    const u = await p.fe.submit(0, [
      { gpa: inp, len },
      { gpa: out, len: len + 8, write: true },
    ]);
    t.is(u.len, len + 8);
    t.is(Buffer.compare(p.fe.mem.bytes(out, len), data), 0, 'echoed');
  }
}

test.serial('DEVICE_STATE is offered only to a device with saveState and loadState', async (t) => {
  const plain = connect(t, new EchoDevice({ queues: 1 }));
  await plain.fe.negotiate();
  t.is(plain.fe.protocolFeatures & (1n << 19n), 0n);
  const p = openPipe();
  t.is(await plain.fe.setDeviceStateFd(SAVE, 0, p.write), 0x101n, 'refused without the feature');
  native.close(p.write);
  native.close(p.read);
  t.true(plain.logged.some((l) => /SET_DEVICE_STATE_FD refused: the DEVICE_STATE protocol feature was not negotiated/.test(l)));
  const toy = connect(t, new ToyDevice(16));
  await toy.fe.negotiate();
  t.is(toy.fe.protocolFeatures & (1n << 19n), 1n << 19n);

  // Nor to an untrusted frontend (one of many a listenEach server serves).
  const sock = path.join(tmpDir(t), 'each.sock');
  const dev = new ToyDevice(16);
  const logged: string[] = [];
  const server = VhostUserServer.listenEach(
    sock,
    dev,
    { make: () => Promise.resolve(dev), dispose: () => Promise.resolve(), max: 1 },
    { logger: { error: (l) => logged.push(l) } },
  );
  const fe = Frontend.connect(sock);
  t.teardown(() => {
    fe.close();
    server.close();
  });
  await fe.negotiate();
  t.is(fe.protocolFeatures & (1n << 19n), 0n, 'not offered to an untrusted frontend');
  const q = openPipe();
  t.is(await fe.setDeviceStateFd(LOAD, 0, q.read), 0x101n);
  native.close(q.read);
  native.close(q.write);
  t.is(dev.loads, 0);
});

test.serial("a toy device's state round-trips through pipes, and the source goes on after the save", async (t) => {
  const src = new ToyDevice(3 << 20, 7);
  const a = await started(t, src, { size: 16 });
  await traffic(t, a, 40, 1);
  const bases = await a.fe.stop();
  const saved = await a.fe.saveDeviceState();
  t.is(saved.set, ACCEPTED);
  t.is(saved.check, 0n, a.logged.join('\n'));
  t.true(saved.data!.length > src.blob.length, 'the whole state came through a 64 KiB pipe');

  const dst = new ToyDevice(16, 9);
  const b = connect(t, dst);
  await b.fe.negotiate();
  const loaded = await b.fe.loadDeviceState(saved.data!);
  t.is(loaded.set, ACCEPTED);
  t.is(loaded.check, 0n, b.logged.join('\n'));
  t.is(dst.served, 40);
  t.is(dst.sum, src.sum);
  t.is(Buffer.compare(dst.blob, src.blob), 0, 'every byte');

  // A failed migration: the source's rings start again where they were.
  await a.fe.resume(bases);
  await traffic(t, a, 3, 2);
  t.is(src.served, 43);
});

test.serial('a throwing saveState or loadState fails CHECK with its reason; the device is intact', async (t) => {
  const dev = new ToyDevice(1 << 20, 3);
  const a = await started(t, dev, { size: 16 });
  await traffic(t, a, 5, 3);
  const bases = await a.fe.stop();
  dev.failSave = 'the GPU is gone';
  const bad = await a.fe.saveDeviceState();
  t.is(bad.set, ACCEPTED, 'the transfer began');
  t.not(bad.check, 0n);
  t.true(
    a.logged.some((l) => /CHECK_DEVICE_STATE: state save failed: the device's saveState failed: the GPU is gone/.test(l)),
    a.logged.join('\n'),
  );
  dev.failSave = undefined;
  const good = await a.fe.saveDeviceState();
  t.is(good.check, 0n, 'the next save works');

  const dst = new ToyDevice(16, 4);
  const before = { served: dst.served, sum: dst.sum, blob: dst.blob };
  dst.failLoad = 'quota too small';
  const b = connect(t, dst);
  await b.fe.negotiate();
  const refused = await b.fe.loadDeviceState(good.data!);
  t.not(refused.check, 0n);
  t.true(b.logged.some((l) => /state load failed: the device refused the state: quota too small/.test(l)));
  t.deepEqual({ served: dst.served, sum: dst.sum, blob: dst.blob }, before, 'as it was');
  dst.failLoad = undefined;
  t.is((await b.fe.loadDeviceState(good.data!)).check, 0n, 'a good state after a refused one');
  t.is(dst.served, 5);

  await a.fe.resume(bases);
  await traffic(t, a, 2, 4);
});

test.serial('a truncated, corrupted or foreign stream is refused before the device reads it', async (t) => {
  const src = new ToyDevice(200_000, 5);
  const a = await started(t, src, { size: 16 });
  await traffic(t, a, 3, 5);
  await a.fe.stop();
  const { data } = await a.fe.saveDeviceState();
  const dst = new ToyDevice(16, 6);
  const b = connect(t, dst);
  await b.fe.negotiate();
  const cases: [string, Uint8Array, RegExp][] = [
    ['truncated', data!.subarray(0, data!.length - 1000), /truncated or corrupted/],
    ['cut in its framing', data!.subarray(0, 10), /truncated: 10 bytes/],
    ['empty', new Uint8Array(0), /truncated: 0 bytes/],
    ['one byte flipped', Buffer.from(data!).fill(0x5a, 5000, 5001), /crc32 mismatch/],
    ['not a state', Buffer.from('hello, this is not a vhost-user state at all'), /bad magic/],
    ['another format', Buffer.from(data!).fill(9, 4, 5), /format 9/],
  ];
  for (const [what, bytes, why] of cases) {
    b.logged.length = 0;
    const r = await b.fe.loadDeviceState(bytes);
    t.is(r.set, ACCEPTED, what);
    t.not(r.check, 0n, what);
    t.true(
      b.logged.some((l) => why.test(l)),
      `${what}: ${b.logged.join('\n')}`,
    );
  }
  t.is(dst.loads, 0, 'loadState never saw a bad stream');
  t.is(dst.served, 0);
});

test.serial('misuse is refused: running rings, a second transfer, bad direction or phase, CHECK alone', async (t) => {
  const dev = new ToyDevice(1 << 20, 8);
  const a = await started(t, dev, { size: 16 });
  const fdsBefore = openFds();

  const running = await a.fe.saveDeviceState();
  t.is(running.set, 0x101n, 'refused while the rings run');
  t.not(running.check, 0n);
  t.true(a.logged.some((l) => /refused: vring 0 is running: the device must be stopped first/.test(l)));
  await traffic(t, a, 2, 8); // the device still serves

  const bases = await a.fe.stop();
  for (const [dir, phase, why] of [
    [2, 0, /direction 2/],
    [SAVE, 1, /phase 1/],
  ] as const) {
    const r = await a.fe.saveDeviceState(dir, phase);
    t.is(r.set, 0x101n);
    t.not(r.check, 0n);
    t.true(a.logged.some((l) => why.test(l)));
  }
  a.logged.length = 0;
  t.not(await a.fe.checkDeviceState(), 0n, 'CHECK with no transfer');
  t.true(a.logged.some((l) => /no state transfer was asked for/.test(l)));

  // A load whose stream is still open, then a second transfer.
  const p = openPipe();
  t.is(await a.fe.setDeviceStateFd(LOAD, 0, p.read), ACCEPTED);
  native.close(p.read);
  const q = openPipe();
  t.is(await a.fe.setDeviceStateFd(SAVE, 0, q.write), 0x101n, 'a second transfer at once');
  native.close(q.write);
  t.true(a.logged.some((l) => /a load is under way/.test(l)));
  await readToEnd(q.read);
  await writeAndClose(p.write, new Uint8Array(3));
  t.not(await a.fe.checkDeviceState(), 0n);
  t.is(dev.loads, 0);

  // Nothing leaked, and the device still works.
  t.true(await until(() => openFds() === fdsBefore), 'every pipe end was closed');
  t.is((await a.fe.saveDeviceState()).check, 0n);
  await a.fe.resume(bases);
  await traffic(t, a, 2, 9);
});

test.serial('a reader that does not read holds up only the save, never the message loop', async (t) => {
  const dev = new ToyDevice(4 << 20, 10);
  const a = await started(t, dev, { size: 16 });
  await a.fe.stop();
  const p = openPipe();
  t.is(await a.fe.setDeviceStateFd(SAVE, 0, p.write), ACCEPTED);
  native.close(p.write);
  await tick(50);
  // The pipe is full and nobody reads it: the backend still answers.
  t.is(await a.fe.getU64(Req.GET_QUEUE_NUM), 2n);
  t.is(await a.fe.getConfig(4, 4).then((c) => c.length), 4);
  // The reader goes away: the save fails, and CHECK says so.
  native.close(p.read);
  t.not(await a.fe.checkDeviceState(), 0n);
  t.true(
    a.logged.some((l) => /state save failed: .*writing the state: write EPIPE/.test(l)),
    a.logged.join('\n'),
  );
});

test.serial('a frontend that goes away mid-transfer ends it; the fds are closed', async (t) => {
  const before = openFds();
  const dev = new ToyDevice(16, 11);
  const a = connect(t, dev);
  await a.fe.negotiate();
  const p = openPipe();
  t.is(await a.fe.setDeviceStateFd(LOAD, 0, p.read), ACCEPTED);
  native.close(p.read);
  a.fe.close();
  await until(() => a.server.connections === 0);
  native.close(p.write);
  a.server.close();
  t.true(await until(() => openFds() === before), 'the backend let go of its pipe end');
  t.is(dev.loads, 0);
});
