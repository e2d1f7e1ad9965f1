// What a module load counts against the VM's quota (security review 2, M3),
// through the device, with each session's context in a cuda worker on the
// fake driver (fixtures/fakecuda.c), which measures a load as NVIDIA's does
// (free memory before and after) and can free memory during it, as another
// process of the VM freeing at that moment would. The count is the larger
// of the measurement and what the image declares, so such a free cannot
// make it smaller than the image's globals, constants and code.
import test, { type ExecutionContext } from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';
import { elf, ptx } from './images';

// Workers inherit the environment: they load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

const MIB = 1n << 20n;

async function setup(t: ExecutionContext) {
  const provider = new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } });
  const dev = new QcudaDevice({ provider, queues: 2, limits: { deviceMemory: 64n * MIB } });
  t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 2, size: 64 });
  const c = new QcudaClient(fe, 2, 8);
  await c.open();
  return { dev, c };
}

/** Uploads and loads an image: the reply (its value is the module handle). */
async function load(c: QcudaClient, id: bigint, image: Uint8Array) {
  const gpa = c.fe.mem.alloc(image.length, 64);
  c.fe.mem.bytes(gpa, image.length).set(image);
  const up = await c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: id, size: BigInt(image.length) }],
    to: [{ gpa, len: image.length }],
    dataOffset: 0n,
    dataLen: BigInt(image.length),
  });
  if (up.status !== 0) throw new Error(`upload: ${up.status}`);
  return c.call(Cmd.MODULE_LOAD, { args: ['qcuda_args_module_load', { upload_id: id }] });
}

const unload = (c: QcudaClient, handle: bigint) => c.call(Cmd.MODULE_UNLOAD, { args: ['qcuda_args_handle', { handle }] });

test('a free elsewhere during a load cannot make the load count less than the PTX declares', async (t) => {
  const { dev, c } = await setup(t);
  const declared = 4n * MIB + 65536n;
  // Globals after a comment and a constant bank: the driver takes them all; another process frees as much meanwhile.
  const text = `.const .b8 c[65536];\n.global /* between */ .b8 g[4194304];\n// fakecuda:global=${declared} fakecuda:freed=${declared}`;
  const r = await load(c, 1n, new Uint8Array(ptx(text)));
  t.is(r.status, 0);
  t.is(dev.vm.quota.used, declared, "the load measured 0 bytes taken; the image's own count stands");
  t.is((await unload(c, r.value)).status, 0);
  t.is(dev.vm.quota.used, 0n);
  // Measured more than declared (the driver's pages, the JIT's code): the measurement counts.
  const more = await load(c, 2n, new Uint8Array(ptx(`.global .b8 g[16];\n// fakecuda:global=${2n * MIB}`)));
  t.is(more.status, 0);
  t.is(dev.vm.quota.used, 2n * MIB);
  await c.close();
  t.is(dev.vm.quota.used, 0n);
});

test('a cubin counts its constant banks and code, not only its globals, whatever the load measured', async (t) => {
  const { dev, c } = await setup(t);
  // The fake driver reads an ELF image as a C string (it ends at byte 7): the load measures 0.
  const cubin = elf(4096n, [
    { name: '.nv.constant0.k', bytes: 544 },
    { name: '.nv.constant3', bytes: 1024 },
    { name: '.text.k', bytes: 8192 },
    { name: '.nv.info.k', bytes: 64 },
  ]);
  const r = await load(c, 1n, cubin);
  t.is(r.status, 0);
  t.is(dev.vm.quota.used, 4096n + 544n + 1024n + 8192n);
  await c.close();
  t.is(dev.vm.quota.used, 0n);
});
