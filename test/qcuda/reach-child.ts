// The other process of cuda-provider-hardening.ts's guest-RAM reach test (a
// kernel fault is sticky for the whole process, so each try is a process of
// its own): makes a cuda provider with pinGuestRam as argv[2] says ("pin" or
// "nopin"), gives it 4 MiB of memfd "guest RAM", and prints as JSON what a
// kernel reading that RAM at its host address got, and whether a copy from
// it and one through a HOST_MAP'd page came back right.
// argv[3]: the kernels fatbin (peek).
import fs from 'node:fs';
import { native } from '../../backend/src/sys/native';
import { createCudaProvider } from '../../backend/src/qcuda/providers/cuda/cuda';

const MARK = [0x1234, 0x5678, 0x9abc, 0xdef0];

async function main(): Promise<void> {
  const pin = process.argv[2] === 'pin';
  const image = new Uint8Array(fs.readFileSync(process.argv[3]));
  const size = 4 << 20;
  const fd = native.memfdCreate('qcuda-reach', size);
  const m = new native.Mapping(fd, size, 0);
  const view = new Uint8Array(m.window(0, size));
  new Int32Array(view.buffer, 0, 4).set(MARK);
  const p = await createCudaProvider(0, { pinGuestRam: pin });
  await p.registerGuestMemory(m.address, BigInt(size), { fd, region: { gpa: 0n, size: BigInt(size), userAddr: 0n, mmapOffset: 0n } });
  const x = await p.openContext(0);
  const out: Record<string, unknown> = { pin, registered: await p.isRegistered(m.address, BigInt(size)) };
  // A copy from guest RAM (pageable when not pinned) and back, and one from a HOST_MAP'd page (its alias).
  const dev = await x.malloc(1n << 20n);
  const bytes = (off: number, n: number) => view.subarray(off, off + n);
  for (let i = 0; i < 1 << 20; i++) view[65536 + i] = (i * 13 + 7) & 0xff;
  await x.copyToDevice(dev, [{ addr: m.address + 65536n, len: 1 << 20, view: bytes(65536, 1 << 20) }], undefined);
  await x.copyFromDevice([{ addr: m.address + 2097152n, len: 1 << 20, view: bytes(2097152, 1 << 20) }], dev, undefined);
  out.copyBack = Buffer.compare(bytes(65536, 1 << 20), bytes(2097152, 1 << 20)) === 0;
  const hp = await x.hostDevicePointer([{ addr: m.address + 3145728n, size: 65536n }]);
  for (let i = 0; i < 65536; i++) view[3145728 + i] = (i * 5 + 1) & 0xff;
  await x.copyToDevice(dev, [{ addr: m.address + 3145728n, len: 65536, view: bytes(3145728, 65536) }], undefined);
  await x.copyFromDevice([{ addr: m.address + 3211264n, len: 65536, view: bytes(3211264, 65536) }], dev, undefined);
  out.mappedCopyBack = Buffer.compare(bytes(3145728, 65536), bytes(3211264, 65536)) === 0;
  out.hostMapDevicePointer = hp !== 0n;
  // Last: a kernel reading guest RAM at its host address (may poison this process).
  const peek = await x.functionGet((await x.moduleLoad(image)).ref, 'peek', 256);
  const res = await x.malloc(64n);
  const args = new DataView(new ArrayBuffer(20));
  args.setBigUint64(0, m.address, true);
  args.setBigUint64(8, res, true);
  args.setInt32(16, 4, true);
  try {
    await x.launch(peek.ref, [1, 1, 1], [4, 1, 1], 0, undefined, new Uint8Array(args.buffer));
    await x.synchronize();
    await x.copyFromDevice([{ addr: m.address + 4096n, len: 16, view: bytes(4096, 16) }], res, undefined);
    out.kernelRead = [...new Int32Array(view.buffer.slice(4096, 4096 + 16))];
  } catch (e) {
    out.kernelRead = (e as Error).message;
  }
  process.stdout.write(JSON.stringify(out) + '\n');
  process.exit(0); // the context may be poisoned: no orderly teardown
}

main().catch((e) => {
  process.stderr.write(`reach-child: ${(e as Error).stack}\n`);
  process.exit(1);
});
