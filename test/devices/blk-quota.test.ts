// One live device memory budget for a VM's CUDA device and its GPU disks
// (qcuda/quota/vm-ledger.ts, docs/gpu-sharing.md "Memory shared live"): the real
// qcuda-backend programs of a `qcuda vm`, a qcuda device and a disk (on the
// emu provider and host store: no GPU), sharing the VM's ledger inherited
// as fd 3, each with the quota on its own command line, driven by the test
// frontend. What the disk writes is taken from the quota a piece at a time,
// so CUDA allocations see it; what CUDA frees lets the disk write; a write
// past the quota is an I/O error and the disk serves on; what was never
// written reads as zeroes; what the disk held goes back when it exits.
import test, { type ExecutionContext } from 'ava';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { BackendStatus } from '../../backend/src/cli/status';
import { BlkS, BlkT, SECTOR } from '../../backend/src/devices/blk';
import { PIECE } from '../../backend/src/devices/blk-store';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { Cmd } from '../../backend/src/qcuda/proto';
import type { QcudaStatus } from '../../backend/src/qcuda/status';
import { diskSlot, vmLedger } from '../../backend/src/qcuda/quota/vm-ledger';
import type { Ledger } from '../../backend/src/qcuda/quota/limits';
import { Frontend, GuestMemory, type GuestBuf } from '../../backend/src/vhost-user/frontend';
import { alive, prng, randomBytes, tmpDir, until, KEEP_ROOT } from '../helpers';
import { QcudaClient } from '../qcuda/client';

const dist = path.resolve(__dirname, '..', '..');
const BACKEND = path.join(dist, 'backend/src/cli/backend.js');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const MIB = 1n << 20n;
/** The VM's quota: two of the disk's pieces and a half. */
const QUOTA = PIECE * 2n + PIECE / 2n;

/** A backend program sharing the ledger as fd 3, its stderr gathered in .log; killed when the test ends. */
function startBackend(t: ExecutionContext, ledger: Ledger, args: string[]): { p: ChildProcess; log: string } {
  const p = spawn(process.execPath, [BACKEND, `--device-memory-limit=${QUOTA}`, '--ledger-fd=3', ...KEEP_ROOT, ...args], {
    stdio: ['ignore', 'ignore', 'pipe', ledger.fd.value],
  });
  t.teardown(() => p.kill('SIGKILL'));
  const b = { p, log: '' };
  p.stderr!.on('data', (d: Buffer) => (b.log += d.toString()));
  return b;
}

async function frontend(t: ExecutionContext, sock: string, log: () => string): Promise<Frontend> {
  t.true(await until(() => fs.existsSync(sock), 15_000), log());
  const fe = Frontend.connect(sock, new GuestMemory([{ gpa: 0n, size: 16 << 20 }]));
  t.teardown(() => void (fe.closed || fe.close()));
  await fe.negotiate();
  await fe.start({ size: 64 });
  return fe;
}

/** One disk request of type at byte off: data to write (OUT) or a length to read (IN); its status and what was read. */
async function disk(fe: Frontend, type: number, off: bigint, o: { out?: Uint8Array; inLen?: number }) {
  const hdr = fe.mem.alloc(16, 8);
  const v = new DataView(fe.mem.bytes(hdr, 16).buffer, fe.mem.bytes(hdr, 16).byteOffset, 16);
  v.setUint32(0, type, true);
  v.setBigUint64(8, off / SECTOR, true);
  const bufs: GuestBuf[] = [{ gpa: hdr, len: 16 }];
  if (o.out) {
    const gpa = fe.mem.alloc(o.out.length, 512);
    fe.mem.bytes(gpa, o.out.length).set(o.out);
    bufs.push({ gpa, len: o.out.length });
  }
  const inGpa = o.inLen ? fe.mem.alloc(o.inLen, 512) : 0n;
  if (o.inLen) {
    fe.mem.bytes(inGpa, o.inLen).fill(0xee);
    bufs.push({ gpa: inGpa, len: o.inLen, write: true });
  }
  const st = fe.mem.alloc(1, 1);
  fe.mem.bytes(st, 1)[0] = 0xff;
  bufs.push({ gpa: st, len: 1, write: true });
  await fe.submit(0, bufs);
  return { status: fe.mem.bytes(st, 1)[0], data: o.inLen ? fe.mem.bytes(inGpa, o.inLen).slice() : new Uint8Array(0) };
}

test("a VM's qcuda device and GPU disk share one live quota: disk writes take it, CUDA frees give it, past it the write is an I/O error", async (t) => {
  const dir = tmpDir(t);
  const ledger = vmLedger(1);
  t.teardown(() => ledger.close());
  const total = () => ledger.native.total(0);
  const qsock = path.join(dir, 'qcuda.sock');
  const dsock = path.join(dir, 'blk0.sock');
  const q = startBackend(t, ledger, [`--socket-path=${qsock}`, '--device=qcuda', '--provider=emu', '--queues=1']);
  const d = startBackend(t, ledger, [
    `--socket-path=${dsock}`,
    '--device=blk',
    '--store=host',
    '--queues=1',
    `--size=${PIECE * 4n}`, // larger than the quota: only what is written counts
    `--ledger-slot=${diskSlot(0)}`,
    '--status-socket=none',
  ]);
  const cuda = new QcudaClient(await frontend(t, qsock, () => q.log));
  await cuda.open();
  const blk = await frontend(t, dsock, () => d.log);
  const rnd = prng(7);

  // Never written: zeroes, and nothing taken.
  const unwritten = await disk(blk, BlkT.IN, PIECE + 4096n, { inLen: 8192 });
  t.is(unwritten.status, BlkS.OK);
  t.deepEqual(unwritten.data, new Uint8Array(8192));
  t.is(total(), 0n, 'reads take nothing');

  // The first write into a piece takes the whole piece from the quota.
  const a = randomBytes(rnd, 4096);
  t.is((await disk(blk, BlkT.OUT, 512n, { out: a })).status, BlkS.OK);
  t.is(total(), PIECE);
  t.is((await disk(blk, BlkT.OUT, 8192n, { out: a })).status, BlkS.OK, 'the same piece again');
  t.is(total(), PIECE);

  // CUDA sees it: what is left is the quota less the disk's piece.
  const info = await cuda.call(Cmd.MEM_GET_INFO, { out: 'qcuda_out_mem_info' });
  t.is(info.out!.free, QUOTA - PIECE);
  t.is((await cuda.malloc(Number(QUOTA - PIECE + MIB))).status, CudaErr.MemoryAllocation, 'past quota less disk');
  const m = await cuda.malloc(Number(PIECE));
  t.is(m.status, 0);
  t.is(total(), 2n * PIECE);

  // qcuda status tells the disks' part.
  const st = spawnSync(process.execPath, [QCUDA, 'status', `--socket=${qsock}`, '--json'], { encoding: 'utf8', timeout: 20_000 });
  t.is(st.status, 0, st.stderr);
  t.deepEqual(((JSON.parse(st.stdout) as BackendStatus).status as QcudaStatus).deviceMemory, {
    used: Number(2n * PIECE),
    quota: Number(QUOTA),
    disks: Number(PIECE),
  });

  // A write into a new piece past the quota: an I/O error, nothing taken, the disk serves on.
  const b = randomBytes(rnd, 4096);
  t.is((await disk(blk, BlkT.OUT, 2n * PIECE, { out: b })).status, BlkS.IOERR);
  t.is(total(), 2n * PIECE);
  t.true(alive(d.p.pid!));
  t.true(await until(() => /blk: a write of 4096 bytes at sector \d+ failed \(I\/O error to the guest\)/.test(d.log), 5000), d.log);
  t.regex(d.log, /device memory quota of \d+ bytes would be exceeded/);
  t.deepEqual((await disk(blk, BlkT.IN, 2n * PIECE, { inLen: 4096 })).data, new Uint8Array(4096), 'the failed write left zeroes');
  t.deepEqual((await disk(blk, BlkT.IN, 512n, { inLen: 4096 })).data, a, 'what was written before reads back');

  // CUDA frees its piece's worth: the disk's write goes through.
  t.is((await cuda.free(m.value)).status, 0);
  t.is((await disk(blk, BlkT.OUT, 2n * PIECE, { out: b })).status, BlkS.OK);
  t.deepEqual((await disk(blk, BlkT.IN, 2n * PIECE, { inLen: 4096 })).data, b);
  t.is(total(), 2n * PIECE);
  t.is((await cuda.malloc(Number(PIECE))).status, CudaErr.MemoryAllocation, 'the disk now holds what CUDA gave back');

  // Write-zeroes into a piece never written takes nothing.
  const zeroes = new Uint8Array(16);
  new DataView(zeroes.buffer).setBigUint64(0, (3n * PIECE) / SECTOR, true);
  new DataView(zeroes.buffer).setUint32(8, 8, true);
  t.is((await disk(blk, BlkT.WRITE_ZEROES, 0n, { out: zeroes })).status, BlkS.OK);
  t.is(total(), 2n * PIECE);

  // The disk's backend exits: what it held goes back to the VM.
  blk.close();
  const gone = new Promise((r) => d.p.once('exit', r));
  d.p.kill('SIGTERM');
  await gone;
  t.is(total(), 0n);
  t.is((await cuda.malloc(Number(QUOTA))).status, 0, "the whole quota is CUDA's again");
});

test("a disk backend refuses a ledger without its slot, a slot of the qcuda backend's, or a quota without a ledger", (t) => {
  const run = (args: string[], ledger?: Ledger) =>
    spawnSync(process.execPath, [BACKEND, '--socket-path=/tmp/x', '--device=blk', '--size=1M', '--store=host', ...args], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe', ...(ledger ? [ledger.fd.value] : [])],
      timeout: 20_000,
    });
  const noSlot = run(['--ledger-fd=3']);
  t.is(noSlot.status, 2);
  t.regex(noSlot.stderr, /--ledger-fd and --ledger-slot go together/);
  const noLedger = run(['--device-memory-limit=1G']);
  t.is(noLedger.status, 2);
  t.regex(noLedger.stderr, /--device-memory-limit is an option of --device=qcuda \(and of --device=blk with --ledger-fd\)/);
  const closed = run(['--ledger-fd=9', '--ledger-slot=8192']);
  t.is(closed.status, 2);
  t.regex(closed.stderr, /--ledger-fd=9: not an open file/);
  const ledger = vmLedger(1);
  t.teardown(() => ledger.close());
  const theirs = run(['--ledger-fd=3', '--ledger-slot=5'], ledger);
  t.is(theirs.status, 1);
  t.regex(theirs.stderr, /ledger slot 5: below 8192 they are the qcuda backend's/);
});
