// A backend restart that keeps the device's state (restart-state.ts): a
// toy device's state is saved to a file by a stopping backend (its rings
// paused, what is in flight drained, what is parked answered by quiesce),
// and a backend started from the file loads it when the test frontend
// reconnects as QEMU does (rings from the used index in guest memory), then
// serves the requests made meanwhile. A file that is corrupted, truncated
// or not a state is refused on reading; a state is loaded only into its own
// frontend (another QEMU's memory, rings reset); a stop that cannot drain
// writes nothing; one before the frontend came back writes the state back.
import test, { type ExecutionContext } from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { EchoDevice, fnv1a } from '../../backend/src/devices/echo';
import {
  RestartSlot,
  RestartState,
  VhostUserServer,
  type Request,
  type RestartSlot as Slot,
  type StateSink,
  type StateSource,
} from '../../backend/src/vhost-user';
import { Frontend, GuestMemory } from '../../backend/src/vhost-user/frontend';
import { tick, tmpDir, until } from '../helpers';

/**
 * An echo device with a state (requests served, a checksum of their bytes).
 * A request whose first byte is 0xff is parked until quiesce() answers it;
 * 0xfe, never answered; 0xfd, answered after 150 ms.
 */
class ToyDevice extends EchoDevice {
  served = 0;
  sum = 0;
  loads = 0;
  failLoad: string | undefined;
  readonly #parked: (() => void)[] = [];

  constructor() {
    super({ queues: 2 });
  }

  override handle(req: Request): number | Promise<number> {
    const data = req.read();
    this.served++;
    this.sum = (this.sum ^ fnv1a(data)) >>> 0;
    if (data[0] === 0xff) return new Promise((r) => this.#parked.push(() => r(super.handle(req) as number)));
    if (data[0] === 0xfe) return new Promise(() => {});
    if (data[0] === 0xfd) return new Promise((r) => setTimeout(() => r(super.handle(req) as number), 150));
    return super.handle(req);
  }

  quiesce(): string | undefined {
    for (const p of this.#parked.splice(0)) p();
    return undefined;
  }

  async saveState(out: StateSink): Promise<void> {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setUint32(0, this.served, true);
    new DataView(b.buffer).setUint32(4, this.sum, true);
    await out.write(b);
  }

  async loadState(input: StateSource): Promise<void> {
    this.loads++;
    const b = await input.read(8);
    if (this.failLoad) throw new Error(this.failLoad);
    const v = new DataView(b.buffer, b.byteOffset, 8);
    this.served = v.getUint32(0, true);
    this.sum = v.getUint32(4, true);
  }
}

interface Rig {
  sock: string;
  file: string;
  fe: Frontend;
  logged: string[];
  serve(device: ToyDevice, restart?: Slot): VhostUserServer;
}

function rig(t: ExecutionContext, mem = new GuestMemory()): Rig {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'vhost.sock');
  const logged: string[] = [];
  const servers: VhostUserServer[] = [];
  let fe: Frontend | undefined;
  t.teardown(() => {
    fe?.close(); // also when the backend closed it: its rings' fds and memory are the test's
    for (const s of servers) s.close();
  });
  const r: Rig = {
    sock,
    file: path.join(dir, 'vm.state'),
    get fe() {
      fe ??= Frontend.connect(sock, mem);
      return fe;
    },
    logged,
    serve(device, restart) {
      const s = VhostUserServer.listen(sock, device, { logger: { error: (l) => logged.push(l), info: (l) => logged.push(l) }, restart });
      servers.push(s);
      return s;
    },
  };
  return r;
}

/** One echo request on queue q whose data starts with first; resolves with whether the echo came back right. */
async function echoed(fe: Frontend, q: number, first: number, len = 32): Promise<boolean> {
  const inp = fe.mem.alloc(len);
  const out = fe.mem.alloc(len + 8);
  const data = Uint8Array.from({ length: len }, (_, i) => (i === 0 ? first : (i * 7 + first) & 0xff));
  fe.mem.bytes(inp, len).set(data);
  const u = await fe.submit(q, [
    { gpa: inp, len },
    { gpa: out, len: len + 8, write: true },
  ]);
  return u.len === len + 8 && Buffer.compare(fe.mem.bytes(out, len), data) === 0;
}

/** A started device, n requests served, then a stop for a restart with one request parked and one slow in flight. */
async function savedAfter(t: ExecutionContext, r: Rig, n: number): Promise<ToyDevice> {
  const dev = new ToyDevice();
  const server = r.serve(dev);
  await r.fe.negotiate();
  await r.fe.start({ size: 16 });
  for (let i = 0; i < n; i++) t.true(await echoed(r.fe, i % 2, i));
  const parked = echoed(r.fe, 0, 0xff);
  const slow = echoed(r.fe, 1, 0xfd);
  t.true(await until(() => dev.served === n + 2));
  const saved = await server.saveForRestart(r.file, 5000);
  t.is(saved.outcome, 'saved', saved.what);
  t.true(await parked, 'the parked request was answered before the save');
  t.true(await slow, 'the request in flight finished before the save');
  t.is(dev.served, n + 2);
  server.close();
  t.true(await until(() => r.fe.closed));
  return dev;
}

test.serial('a stopped backend saves its state; the next one loads it when QEMU is back and serves what came meanwhile', async (t) => {
  const r = rig(t);
  const old = await savedAfter(t, r, 6);
  t.is(fs.statSync(r.file).mode & 0o777, 0o600, 'the file is the backend user only');
  t.deepEqual(
    fs.readdirSync(path.dirname(r.file)).filter((f) => f.includes('tmp')),
    [],
    'no temporary file left',
  );
  // Made available while no backend is there: the restarted one takes them.
  const meanwhile = [echoed(r.fe, 0, 1), echoed(r.fe, 1, 2), echoed(r.fe, 0, 3)];
  const state = RestartState.read(r.file);
  t.is(state.mark.device, 'echo');
  t.is(state.mark.rings.length, 2);
  t.true(
    state.mark.rings.every((x) => x.lastAvail === x.usedIdx),
    'every request taken was answered',
  );
  const dev = new ToyDevice();
  r.serve(dev, new RestartSlot(state));
  await r.fe.reconnect(r.sock);
  t.deepEqual(await Promise.all(meanwhile), [true, true, true], 'the requests made meanwhile are served by the new backend');
  t.is(dev.loads, 1);
  t.is(dev.served, old.served + 3, "the old backend's count, carried, and the three since");
  t.true(
    r.logged.some((l) => /restored the state saved at/.test(l)),
    r.logged.join('\n'),
  );
});

test.serial('a request still in flight when the drain ends: nothing is saved, and the stop says why', async (t) => {
  const r = rig(t);
  const dev = new ToyDevice();
  const server = r.serve(dev);
  await r.fe.negotiate();
  await r.fe.start({ size: 16 });
  void echoed(r.fe, 0, 0xfe); // never answered: the frontend is closed with it
  t.true(await until(() => dev.served === 1));
  const saved = await server.saveForRestart(r.file, 200);
  t.is(saved.outcome, 'failed');
  t.regex(saved.what, /1 requests still in flight after 200 ms/);
  t.false(fs.existsSync(r.file));
});

test.serial('a device that says its state cannot be kept: nothing is saved, at once', async (t) => {
  const r = rig(t);
  const dev = new ToyDevice();
  dev.quiesce = () => 'a host function that has not run yet';
  const server = r.serve(dev);
  await r.fe.negotiate();
  await r.fe.start({ size: 16 });
  t.true(await echoed(r.fe, 0, 9));
  const t0 = Date.now();
  const saved = await server.saveForRestart(r.file, 10_000);
  t.deepEqual([saved.outcome, saved.what], ['failed', 'a host function that has not run yet']);
  t.true(Date.now() - t0 < 5000);
  t.false(fs.existsSync(r.file));
});

test.serial('nothing to keep: no frontend, or one that has not started the device', async (t) => {
  const r = rig(t);
  const server = r.serve(new ToyDevice());
  t.is((await server.saveForRestart(r.file, 100)).outcome, 'nothing');
  await r.fe.negotiate();
  t.true(await until(() => server.connected));
  t.deepEqual(await server.saveForRestart(r.file, 100), {
    outcome: 'nothing',
    what: 'the frontend has not started the device: nothing to keep',
    inflight: 0,
  });
  t.false(fs.existsSync(r.file));
});

test.serial('corrupted, truncated, foreign and empty files are refused on reading, saying why', async (t) => {
  const r = rig(t);
  await savedAfter(t, r, 2);
  const good = fs.readFileSync(r.file);
  const refused = (bytes: Uint8Array): string => {
    fs.writeFileSync(r.file, bytes);
    try {
      RestartState.read(r.file);
      return 'read';
    } catch (e) {
      return (e as Error).message;
    }
  };
  const flip = (at: number) => {
    const b = Buffer.from(good);
    b[at] ^= 0x40;
    return b;
  };
  t.regex(refused(flip(good.length - 20)), /crc32 mismatch|corrupted/, 'a byte of the device state');
  t.regex(refused(flip(20)), /crc32 mismatch in its mark/, 'a byte of the mark');
  t.regex(refused(good.subarray(0, good.length - 5)), /truncated or corrupted/);
  t.regex(refused(good.subarray(0, 10)), /truncated/);
  t.regex(refused(Buffer.from('not a state at all, just some text')), /not a backend's restart state \(bad magic\)/);
  const other = Buffer.from(good);
  other.writeUInt32LE(2, 4);
  t.regex(refused(other), /format 2, this backend reads 1/);
  t.regex(refused(new Uint8Array(0)), /truncated/);
  t.is(refused(good), 'read');
});

test.serial("a state is loaded only into its own frontend: another QEMU's memory is refused and the device starts empty", async (t) => {
  const r = rig(t);
  await savedAfter(t, r, 3);
  const state = RestartState.read(r.file);
  // Another QEMU process maps guest RAM elsewhere: a fresh frontend on the same socket.
  const dev = new ToyDevice();
  r.serve(dev, new RestartSlot(state));
  const other = Frontend.connect(r.sock, new GuestMemory(undefined, 0x7e00_0000_0000n));
  t.teardown(() => other.close());
  await other.negotiate();
  await other.start({ size: 16 });
  t.true(await echoed(other, 0, 5), 'served, by a device that starts empty');
  t.is(dev.loads, 0);
  t.is(dev.served, 1);
  t.true(
    r.logged.some((l) =>
      /restart state refused, the device starts empty: not this frontend's: the frontend's guest memory is not the saved one's/.test(l),
    ),
    r.logged.join('\n'),
  );
});

test.serial('a guest that reset its device while the backend was away (rings started anew): the state is refused', async (t) => {
  const r = rig(t);
  await savedAfter(t, r, 3);
  const dev = new ToyDevice();
  r.serve(dev, new RestartSlot(RestartState.read(r.file)));
  // The same QEMU (memory) whose guest set its rings up again from 0.
  const again = Frontend.connect(r.sock, r.fe.mem);
  t.teardown(() => {
    // Its memory is r.fe's (closed with it): its own fds only.
    for (const q of again.queues) {
      q.kick.close();
      q.call.close();
    }
    again.conn.close();
  });
  await again.negotiate();
  await again.start({ size: 16 });
  t.true(await echoed(again, 0, 5));
  t.is(dev.loads, 0);
  t.true(
    r.logged.some((l) => /not this frontend's: vring 0 (is not where it was|starts at avail 0)/.test(l)),
    r.logged.join('\n'),
  );
});

test.serial('a device that refuses the state: said, and it starts empty; its rings are served', async (t) => {
  const r = rig(t);
  await savedAfter(t, r, 2);
  const dev = new ToyDevice();
  dev.failLoad = 'over the quota';
  r.serve(dev, new RestartSlot(RestartState.read(r.file)));
  const late = echoed(r.fe, 1, 4);
  await r.fe.reconnect(r.sock);
  t.true(await late);
  t.is(dev.loads, 1);
  t.is(dev.served, 1);
  t.true(r.logged.some((l) => /restart state refused, the device starts empty: the device refused the state: over the quota/.test(l)));
});

test.serial('a stop before the frontend came back writes the state back as it was read', async (t) => {
  const r = rig(t);
  await savedAfter(t, r, 2);
  const bytes = fs.readFileSync(r.file);
  const slot = new RestartSlot(RestartState.read(r.file));
  fs.rmSync(r.file);
  const server = r.serve(new ToyDevice(), slot);
  const saved = await server.saveForRestart(r.file, 100);
  t.is(saved.outcome, 'saved');
  t.regex(saved.what, /its frontend not back yet: written back as it was/);
  t.deepEqual(fs.readFileSync(r.file), bytes);
  t.is(fs.statSync(r.file).mode & 0o777, 0o600);
  await tick();
});
