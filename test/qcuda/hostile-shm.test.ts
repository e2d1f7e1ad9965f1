// A hostile guest of the shared-memory transport (backend/src/shm/): the
// test maps the region as the guest library does and scribbles on what a
// guest may write (ring indexes, descriptors and their lengths, a request's
// slot published twice, the attach generation), or hands the library a
// region cut short. Each case checks what the guest sees (an error, its
// generation FAILED), that the backend reached nothing outside the data
// area (the header's guest words are as the test left them), that the same
// server still serves a socket frontend and a new attach of the region (the
// real library's), and that nothing is left (connections, fds). And a
// guest that detaches just as the backend stops: its session still ends as
// a detach (IDLE, the device's reset logged), not as the backend's stop.
import test, { type ExecutionContext } from 'ava';
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode } from '../../backend/src/qcuda/proto';
import { emuProvider } from '../../backend/src/qcuda/providers/emu';
import { ShmBridge } from '../../backend/src/shm/bridge';
import { DATA_GPA, DATA_OFFSET, Off, RING_BYTES, RING_SIZE, State } from '../../backend/src/shm/layout';
import { native, VhostUserServer, type Mapping } from '../../backend/src/vhost-user';
import { openFds, tmpDir, until } from '../helpers';
import { sessionAt } from './client';

const BIN = path.resolve(__dirname, '..', '..', '..', 'build', 'guest', 'bin');
const REGION_BYTES = 128 << 20;
const DATA_BYTES = REGION_BYTES - DATA_OFFSET;

interface Served {
  sock: string;
  region: string;
  server: VhostUserServer;
  bridge: ShmBridge;
  /** The guest's view: the header page and the first ring's pages, and a page of the data area after the rings. */
  hdr: DataView;
  desc: DataView;
  avail: DataView;
  used: DataView;
  scratch: Uint8Array;
  logged: string[];
  devices: { made: number; disposed: number };
}

/** A backend of max frontends (a socket, and the region as one of them) on the emu provider. */
function serve(t: ExecutionContext, max = 3): Served {
  const dir = tmpDir(t);
  const sock = path.join(dir, 'qcuda.sock');
  const region = path.join(dir, 'qcuda.shm');
  const logged: string[] = [];
  const devices = { made: 0, disposed: 0 };
  const options = { queues: 4, limits: { contextOverhead: 0n }, provider: emuProvider };
  const template = new QcudaDevice(options);
  // Each frontend a device of its own on the template's quota, as qcuda-backend --frontends makes them.
  const make = () => {
    devices.made++;
    return Promise.resolve(new QcudaDevice({ ...options, vm: template.vm, log: (l) => logged.push(l) }));
  };
  const source = {
    make,
    dispose: () => {
      devices.disposed++;
      return Promise.resolve();
    },
    max,
  };
  const logger = { error: (l: string) => logged.push(l), info: (l: string) => logged.push(l) };
  const server = VhostUserServer.listenEach(sock, template, source, { logger });
  const bridge = ShmBridge.create({
    path: region,
    bytes: REGION_BYTES,
    connect: (fd) => server.serveConnected(fd, true),
    log: (l) => logged.push(l),
  });
  const fd = fs.openSync(region, 'r+');
  const map: Mapping = new native.Mapping(fd, DATA_OFFSET + 2 * RING_BYTES + 4096, 0);
  fs.closeSync(fd);
  t.teardown(() => {
    map.unmap();
    bridge.close();
    server.close();
  });
  const view = (at: number, len: number) => new DataView(map.window(at, len));
  return {
    sock,
    region,
    server,
    bridge,
    hdr: view(0, 4096),
    desc: view(DATA_OFFSET, 4096),
    avail: view(DATA_OFFSET + 4096, 4096),
    used: view(DATA_OFFSET + 8192, 4096),
    scratch: new Uint8Array(map.window(DATA_OFFSET + 2 * RING_BYTES, 4096)),
    logged,
    devices,
  };
}

const stateOf = (s: Served, gen: number) => (s.hdr.getUint32(Off.served, true) === gen ? s.hdr.getUint32(Off.state, true) : -1);

/** What the library does to attach: empty rings, a claim, a generation; resolves with the backend's answer. */
async function attach(s: Served, gen: number): Promise<number> {
  new Uint8Array(s.desc.buffer, s.desc.byteOffset, 4096).fill(0);
  new Uint8Array(s.avail.buffer, s.avail.byteOffset, 4096).fill(0);
  new Uint8Array(s.used.buffer, s.used.byteOffset, 4096).fill(0);
  s.hdr.setBigUint64(Off.owner, BigInt(process.pid), true);
  s.hdr.setUint32(Off.attach, gen, true);
  await until(() => stateOf(s, gen) > State.Idle, 10_000);
  return stateOf(s, gen);
}

function detach(s: Served, gen: number): void {
  s.hdr.setUint32(Off.detach, gen, true);
  s.hdr.setBigUint64(Off.owner, 0n, true);
}

/** Descriptor i: addr, len, flags, next (a split ring's). */
function setDesc(s: Served, i: number, addr: bigint, len: number, flags = 0, next = 0): void {
  s.desc.setBigUint64(i * 16, addr, true);
  s.desc.setUint32(i * 16 + 8, len, true);
  s.desc.setUint16(i * 16 + 12, flags, true);
  s.desc.setUint16(i * 16 + 14, next, true);
}

/** Publishes heads at the avail ring, then moves its index to idx. */
function publish(s: Served, heads: number[], idx = heads.length): void {
  heads.forEach((h, i) => s.avail.setUint16(4 + 2 * (i % RING_SIZE), h, true));
  s.avail.setUint16(2, idx, true);
}

const SCRATCH_GPA = DATA_GPA + BigInt(2 * RING_BYTES);
const NEXT = 1;
const WRITE = 2;

/** A well-formed request chain (descriptors 0, 1) of cmd and its arguments, whose reply lands in the scratch page. */
function requestChain(s: Served, cmd: Cmd, args: Uint8Array = new Uint8Array(0)): void {
  const hdr = encode('qcuda_req_hdr', { cmd, len: args.length, session: 0n, data_offset: 0n, data_len: 0n });
  s.scratch.set(hdr, 0);
  s.scratch.set(args, hdr.length);
  setDesc(s, 0, SCRATCH_GPA, hdr.length + args.length, NEXT, 1);
  setDesc(s, 1, SCRATCH_GPA + 1024n, 256, WRITE);
}

function helloChain(s: Served): void {
  requestChain(s, Cmd.HELLO, encode('qcuda_args_hello', { proto_version: 0, cuda_version: 0 }));
}

/** The guest words of the header as the test left them: the backend never writes them. */
function guestWords(s: Served): string {
  return `${s.hdr.getBigUint64(Off.owner, true)}/${s.hdr.getUint32(Off.attach, true)}/${s.hdr.getUint32(Off.detach, true)}/${s.hdr.getBigUint64(Off.magic, true)}`;
}

/** Runs a guest program of the real library over the region (spawned: the bridge serves from this process). */
function program(region: string, name = 'device'): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(path.join(BIN, name), [], {
      env: { ...process.env, QCUDA_SHM: region, LD_LIBRARY_PATH: path.resolve(BIN, '..', 'lib') },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (b: Buffer) => (out += b.toString()));
    p.stderr.on('data', (b: Buffer) => (out += b.toString()));
    const killer = setTimeout(() => p.kill('SIGKILL'), 60_000);
    p.once('close', (code) => {
      clearTimeout(killer);
      resolve({ code, out });
    });
  });
}

/** After a case: the socket frontend and a new attach of the region still work, and nothing is held. */
async function stillServes(t: ExecutionContext, s: Served, fds: number): Promise<void> {
  const c = await sessionAt(t, s.sock);
  t.not(c.session, 0n);
  c.fe.close();
  const r = await program(s.region);
  t.is(r.code, 0, r.out);
  t.regex(r.out, /^PASS: device/m);
  t.true(await until(() => s.server.connections === 0 && s.bridge.served === 0, 5000), 'every frontend gone');
  t.true(await until(() => s.devices.disposed === s.devices.made, 5000), `devices made ${s.devices.made}, disposed ${s.devices.disposed}`);
  const ok = await until(() => openFds() <= fds, 5000);
  if (!ok)
    t.log(
      fs
        .readdirSync('/proc/self/fd')
        .map((f) => {
          try {
            return fs.readlinkSync(`/proc/self/fd/${f}`);
          } catch {
            return '?';
          }
        })
        .join(' '),
    );
  t.true(ok, `fds ${openFds()} > ${fds}`);
}

const CASES: [string, (s: Served) => void][] = [
  ['a head past the ring', (s) => publish(s, [RING_SIZE + 7])],
  ['an avail index far ahead of the ring', (s) => publish(s, [0], 40_000)],
  [
    'a descriptor at the header page, outside the data area',
    (s) => {
      setDesc(s, 0, DATA_GPA - 4096n, 64, NEXT, 1);
      setDesc(s, 1, DATA_GPA - 2048n, 64, WRITE);
      publish(s, [0]);
    },
  ],
  [
    'a length that runs past the data area',
    (s) => {
      helloChain(s);
      setDesc(s, 1, DATA_GPA + BigInt(DATA_BYTES) - 64n, 0xffff_fff0, WRITE);
      publish(s, [0]);
    },
  ],
  [
    'a descriptor chain that loops',
    (s) => {
      setDesc(s, 0, SCRATCH_GPA, 64, NEXT, 1);
      setDesc(s, 1, SCRATCH_GPA, 64, NEXT, 0);
      publish(s, [0]);
    },
  ],
  [
    "a request's slot published again while it is in flight, and a next past the table",
    (s) => {
      helloChain(s);
      setDesc(s, 2, SCRATCH_GPA, 64, NEXT, 60_000);
      publish(s, [0, 0, 2]);
    },
  ],
];

for (const [name, scribble] of CASES) {
  test.serial(
    `shared-memory region: ${name} gets an error, reaches nothing outside the data area, and the backend serves on`,
    async (t) => {
      const s = serve(t);
      const fds = openFds();
      t.is(await attach(s, 1), State.Ready);
      const words = guestWords(s);
      scribble(s);
      // The guest sees an error: its generation dropped, or its requests answered with nothing written (used length 0) or an error status.
      await until(() => stateOf(s, 1) === State.Failed || s.used.getUint16(2, true) > 0, 5000);
      const failed = stateOf(s, 1) === State.Failed;
      const usedLens = Array.from({ length: s.used.getUint16(2, true) }, (_, i) => s.used.getUint32(4 + 8 * i + 4, true));
      t.true(failed || usedLens.length > 0, `neither dropped nor answered; log: ${s.logged.join('\n')}`);
      t.is(guestWords(s), words);
      // The test's guest goes as the library's would: detached, its claim freed.
      detach(s, 1);
      await stillServes(t, s, fds);
    },
  );
}

test.serial('shared-memory region: an attach storm leaves one session at most, and none once detached', async (t) => {
  const s = serve(t);
  const fds = openFds();
  for (let gen = 1; gen <= 25; gen++) {
    s.hdr.setUint32(Off.attach, gen, true);
    await new Promise((r) => setTimeout(r, gen % 5));
  }
  t.is(await attach(s, 26), State.Ready);
  t.true(await until(() => s.server.connections === 1, 5000));
  detach(s, 26);
  t.true(await until(() => stateOf(s, 26) === State.Idle && s.server.connections === 0, 5000));
  await stillServes(t, s, fds);
});

test.serial("shared-memory region: a claim whose process is gone is taken over, and the old generation's session ended", async (t) => {
  const s = serve(t);
  const fds = openFds();
  t.is(await attach(s, 7), State.Ready);
  // A process that exited without detaching holds the claim.
  const gone = spawnSync('true').pid;
  s.hdr.setBigUint64(Off.owner, BigInt(gone), true);
  const r = await program(s.region);
  t.is(r.code, 0, r.out);
  t.regex(r.out, /^PASS: device/m);
  t.regex(s.logged.join('\n'), /attach 8 served/);
  await stillServes(t, s, fds);
});

test.serial(
  'shared-memory region: an attach is one of the frontends: refused while the socket holds the only one, served after',
  async (t) => {
    const s = serve(t, 1);
    const c = await sessionAt(t, s.sock);
    t.is(await attach(s, 1), State.Failed);
    t.regex(s.logged.join('\n'), /attach 1 refused: no frontend is free/);
    c.fe.close();
    t.true(await until(() => s.server.connections === 0, 5000));
    t.is(await attach(s, 2), State.Ready);
    detach(s, 2);
    t.true(await until(() => s.server.connections === 0 && s.devices.disposed === s.devices.made, 5000));
  },
);

test.serial("shared-memory region: a backend that stops mid-run ends the program's calls with errors, not a hang", async (t) => {
  const s = serve(t);
  const started = Date.now();
  const done = program(s.region, 'memcpy');
  t.true(await until(() => s.bridge.served !== 0, 30_000), 'attached');
  s.bridge.close();
  const r = await done;
  t.not(r.code, 0);
  t.regex(r.out, /^FAIL/m);
  t.true(Date.now() - started < 50_000, `took ${Date.now() - started} ms`);
  t.is(stateOf(s, 1), State.Failed);
});

test('shared-memory region: a region that is cut short, or not a region, is refused by the library before it reads past the file', (t) => {
  const dir = tmpDir(t);
  const s = serve(t);
  const whole = fs.readFileSync(s.region).subarray(0, 4096);
  const cases: [string, Buffer][] = [
    ['short', whole.subarray(0, 100)],
    ['header only', whole],
    ['foreign', Buffer.alloc(8192, 0x5a)],
  ];
  for (const [name, bytes] of cases) {
    const f = path.join(dir, name);
    fs.writeFileSync(f, bytes);
    const r = spawnSync(path.join(BIN, 'device'), [], {
      env: { ...process.env, QCUDA_SHM: f, LD_LIBRARY_PATH: path.resolve(BIN, '..', 'lib') },
      encoding: 'utf8',
      timeout: 30_000,
    });
    t.is(r.signal, null, `${name}: ${r.stderr}`);
    t.not(r.status, 0, name);
    t.regex(r.stdout + r.stderr, /no CUDA device: cannot map the shared-memory region .*Protocol error/, name);
  }
});

test.serial('shared-memory region: a detach the backend stops right after ends its session as a detach, as a turn would', async (t) => {
  const s = serve(t);
  t.is(await attach(s, 3), State.Ready);
  requestChain(s, Cmd.SESSION_OPEN);
  publish(s, [0]);
  t.true(await until(() => s.used.getUint16(2, true) === 1, 5000), 'SESSION_OPEN answered');
  t.regex(s.logged.join('\n'), /session \w+ opened/);
  // The guest's process detaches and the backend stops before a poll turn sees it: only close() can.
  detach(s, 3);
  s.bridge.close();
  s.server.close();
  await s.server.settled();
  const log = s.logged.join('\n');
  t.is(stateOf(s, 3), State.Idle, log);
  t.regex(log, /detach 3/);
  // The device's reset ended the session before settled() resolved, and the device was let go.
  t.regex(log, /device reset: closing 1 sessions/);
  t.is(s.devices.disposed, s.devices.made);
});
