// Benchmark (not a test): the GPU disk (qcuda-backend --device=blk) through
// the vhost-user harness, no VM: 1 MiB sequential writes and reads and
// 4 KiB random reads, 16 requests in flight over 2 queues, against the same
// store called directly in this process (the copies alone: the baseline).
// test/gpu/run.sh prints native pinned cudaMemcpy figures of the same run
// beside it (copy_bench), the limit of the gpu store.
// --poll-us sets the backend's (default: its own default; 0: kicks and wake-ups only).
//   node dist/test/bench/blk.js [--store gpu|host] [--mib 256] [--seconds 3] [--poll-us US]
import { spawn } from 'node:child_process';
import path from 'node:path';
import { BlkT } from '../../backend/src/devices/blk';
import { ProviderStore } from '../../backend/src/devices/blk-store';
import { createProvider } from '../../backend/src/qcuda/choose-provider';
import type { GuestSeg } from '../../backend/src/qcuda/provider';
import { native } from '../../backend/src/sys/native';
import { Frontend, GuestMemory, type GuestBuf } from '../../backend/src/vhost-user/frontend';
import { report, type Row } from './stats';

const arg = (name: string, dflt: string) => (process.argv.includes(name) ? process.argv[process.argv.indexOf(name) + 1] : dflt);
const STORE = arg('--store', 'gpu') as 'gpu' | 'host';
const MIB = Number(arg('--mib', '256'));
const SECONDS = Number(arg('--seconds', '2'));
const POLL_US = arg('--poll-us', '');
/** More backend options, space-separated (e.g. '--waiter-threads=1'). */
const BACKEND_ARGS = arg('--backend-args', '').split(' ').filter(Boolean);
const DEPTH = 16;
const QUEUES = 2;
const dist = path.resolve(__dirname, '..', '..');

interface Slot {
  hdr: bigint;
  data: bigint;
  status: bigint;
}

/** Requests of `size` bytes at the offsets next() gives, DEPTH in flight, for SECONDS: bytes per second and requests per second. */
async function drive(fe: Frontend, slots: Slot[], type: number, size: number, next: () => bigint): Promise<{ bps: number; iops: number }> {
  const until = process.hrtime.bigint() + BigInt(SECONDS * 1e9);
  let done = 0;
  const t0 = process.hrtime.bigint();
  await Promise.all(
    slots.map(async (s, k) => {
      while (process.hrtime.bigint() < until) {
        const h = new DataView(fe.mem.bytes(s.hdr, 16).buffer, fe.mem.bytes(s.hdr, 16).byteOffset, 16);
        h.setUint32(0, type, true);
        h.setBigUint64(8, next() / 512n, true);
        const bufs: GuestBuf[] = [
          { gpa: s.hdr, len: 16 },
          { gpa: s.data, len: size, write: type === BlkT.IN },
          { gpa: s.status, len: 1, write: true },
        ];
        await fe.submit(k % QUEUES, bufs);
        if (fe.mem.bytes(s.status, 1)[0] !== 0) throw new Error(`request failed with status ${fe.mem.bytes(s.status, 1)[0]}`);
        done++;
      }
    }),
  );
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  return { bps: (done * size) / secs, iops: done / secs };
}

/** The store alone: the same sizes, sequential, one at a time (the copies' own rate). */
async function direct(store: ProviderStore, seg: (len: number) => GuestSeg[], write: boolean, size: number): Promise<number> {
  const until = process.hrtime.bigint() + BigInt(SECONDS * 1e9);
  const t0 = process.hrtime.bigint();
  let off = 0n;
  let n = 0;
  while (process.hrtime.bigint() < until) {
    await (write ? store.write(off, seg(size)) : store.read(off, seg(size)));
    off = (off + BigInt(size)) % store.size;
    n++;
  }
  return (n * size) / (Number(process.hrtime.bigint() - t0) / 1e9);
}

async function main(): Promise<void> {
  const size = BigInt(MIB) << 20n;
  const [mine, theirs] = native.socketPair();
  const child = spawn(
    process.execPath,
    [
      path.join(dist, 'backend/src/cli/backend.js'),
      '--fd=3',
      '--device=blk',
      ...(process.geteuid?.() === 0 ? ['--backend-user=root'] : []), // as before: started as root, it would drop
      `--queues=${QUEUES}`,
      `--size=${size}`,
      `--store=${STORE}`,
      ...(POLL_US ? [`--poll-us=${POLL_US}`] : []),
      ...BACKEND_ARGS,
    ],
    { stdio: ['ignore', 'inherit', 'inherit', theirs] },
  );
  native.close(theirs);
  const mem = new GuestMemory([{ gpa: 0n, size: 64 << 20 }]);
  const fe = Frontend.fromFd(mine, mem);
  await fe.negotiate();
  await fe.start({ size: 256 });
  const slots: Slot[] = Array.from({ length: DEPTH }, () => ({
    hdr: mem.alloc(16, 16),
    data: mem.alloc(1 << 20, 4096),
    status: mem.alloc(1, 1),
  }));
  let seq = 0n;
  const sequential = () => {
    const o = seq;
    seq = (seq + (1n << 20n)) % size;
    return o;
  };
  let x = 12345n;
  const random = () => {
    x = (x * 6364136223846793005n + 1442695040888963407n) & ((1n << 64n) - 1n);
    return ((x >> 20n) % (size / 4096n)) * 4096n;
  };
  const w = await drive(fe, slots, BlkT.OUT, 1 << 20, sequential);
  seq = 0n;
  const r = await drive(fe, slots, BlkT.IN, 1 << 20, sequential);
  const rr = await drive(fe, slots, BlkT.IN, 4096, random);
  const rw = await drive(fe, slots, BlkT.OUT, 4096, random);
  fe.close();
  await new Promise((res) => child.once('exit', res));

  const { provider, note } = await createProvider(STORE === 'gpu' ? 'cuda' : 'emu', 0, {}, { captureOutput: false });
  const buf = new GuestMemory([{ gpa: 0n, size: 2 << 20 }]);
  const region = new native.Mapping(buf.fd.value, 2 << 20, 0);
  await provider.registerGuestMemory(region.address, BigInt(region.length));
  const view = new Uint8Array(region.window(0, 2 << 20));
  const seg = (len: number): GuestSeg[] => [{ addr: region.address, len, view: view.subarray(0, len) }];
  const store = await ProviderStore.open(provider, size);
  const dw = await direct(store, seg, true, 1 << 20);
  const dr = await direct(store, seg, false, 1 << 20);
  await store.close();
  await provider.unregisterGuestMemory(region.address);
  region.unmap();
  buf.close();
  await provider.close();

  const gb = (v: number) => v / 1e9;
  const rows: Row[] = [
    { what: '1 MiB sequential write', value: gb(w.bps), unit: 'GB/s', baseline: gb(dw), ratio: w.bps / dw },
    { what: '1 MiB sequential read', value: gb(r.bps), unit: 'GB/s', baseline: gb(dr), ratio: r.bps / dr },
    { what: '4 KiB random read', value: rr.iops, unit: 'IOPS' },
    { what: '4 KiB random write', value: rw.iops, unit: 'IOPS' },
  ];
  report(
    `GPU disk through the vhost-user harness (store ${STORE}, ${MIB} MiB, ${DEPTH} requests in flight on ${QUEUES} queues) vs the store called directly (${note})`,
    rows,
    {
      store: STORE,
      mib: MIB,
      depth: DEPTH,
      queues: QUEUES,
      pollUs: POLL_US || 'default',
      ratio: 'harness figure relative to the direct one',
    },
  );
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e);
    process.exit(1);
  },
);
