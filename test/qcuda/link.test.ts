// JIT linking through the device (commands/link.ts): module uploads linked
// by LINK in the session's cuda worker on the fake driver
// (fixtures/fakecuda.c: the "cubin" is a header naming the options, then each
// input with its name and type), the cubin and logs read back with LINK_READ
// in chunks, every upload taken by the LINK, results counted against the
// VM's staging bound until read whole or the session ends, bad links refused
// with the backend intact; the emu provider answers that it cannot link.
import test, { type ExecutionContext } from 'ava';
import { QcudaDevice } from '../../backend/src/qcuda/virtio-device';
import { Cmd, encode, QCUDA_LINK_NAME, QCUDA_MAX_LINK_INPUTS } from '../../backend/src/qcuda/proto';
import { EmuProvider } from '../../backend/src/qcuda/providers/emu';
import { IsolatedProvider } from '../../backend/src/qcuda/workers/isolated';
import { CudaErr } from '../../backend/src/qcuda/cuda-error';
import { fakeLibcuda } from '../addon/fake-driver';
import { started } from '../helpers';
import { QcudaClient } from './client';

// Workers inherit the environment: they load the fake driver.
process.env.QCUDA_LIBCUDA = fakeLibcuda();

const MIB = 1n << 20n;

async function setup(t: ExecutionContext, cuda = true, moduleStaging = 64n * MIB) {
  const provider = cuda ? new IsolatedProvider(new EmuProvider(), { worker: { kind: 'cuda', gpu: 0 } }) : new EmuProvider();
  const dev = new QcudaDevice({ provider, queues: 2, limits: { deviceMemory: 64n * MIB, moduleStaging } });
  if (provider instanceof IsolatedProvider) t.teardown(() => provider.close());
  const { fe } = await started(t, dev, { queues: 2, size: 64 });
  const c = new QcudaClient(fe, 2, 8);
  await c.open();
  return { dev, c };
}

async function upload(c: QcudaClient, id: bigint, text: string) {
  const image = Buffer.from(text, 'latin1');
  const gpa = c.fe.mem.alloc(image.length, 64);
  c.fe.mem.bytes(gpa, image.length).set(image);
  const r = await c.call(Cmd.MODULE_UPLOAD, {
    args: ['qcuda_args_module_upload', { upload_id: id, size: BigInt(image.length) }],
    to: [{ gpa, len: image.length }],
    dataOffset: 0n,
    dataLen: BigInt(image.length),
  });
  if (r.status !== 0) throw new Error(`upload: ${r.status}`);
}

interface Input {
  id: bigint;
  type: number;
  name: string;
}

function link(c: QcudaClient, inputs: readonly Input[], options: readonly [number, number][] = [], count = inputs.length) {
  const upload_id = new BigUint64Array(QCUDA_MAX_LINK_INPUTS);
  const type = new Uint32Array(QCUDA_MAX_LINK_INPUTS);
  const name = new Uint8Array(QCUDA_MAX_LINK_INPUTS * QCUDA_LINK_NAME);
  inputs.forEach((x, i) => {
    upload_id[i] = x.id;
    type[i] = x.type;
    name.set(Buffer.from(x.name, 'latin1'), i * QCUDA_LINK_NAME);
  });
  const option = new Uint32Array(8);
  const value = new Uint32Array(8);
  options.forEach(([o, v], i) => ((option[i] = o), (value[i] = v)));
  return c.call(Cmd.LINK, {
    rawArgs: encode('qcuda_args_link', { num_inputs: count, num_options: options.length, upload_id, type, option, value, name }),
    out: 'qcuda_out_link',
  });
}

/** LINK_READ of len bytes at offset: the reply and the bytes as text. */
async function read(c: QcudaClient, result: bigint, offset: number, len: number) {
  const gpa = c.fe.mem.alloc(len, 64);
  const r = await c.call(Cmd.LINK_READ, {
    args: ['qcuda_args_link_read', { link: result, offset: BigInt(offset) }],
    from: [{ gpa, len }],
    dataOffset: 0n,
    dataLen: BigInt(len),
  });
  return { r, text: Buffer.from(c.fe.mem.bytes(gpa, Number(r.value))).toString('latin1') };
}

const floatBits = (x: number) => new Uint32Array(new Float32Array([x]).buffer)[0];

test('LINK links the uploads with their names, types and options; LINK_READ reads cubin and logs in chunks, then drops them', async (t) => {
  const { dev, c } = await setup(t);
  await upload(c, 1n, '.entry a');
  await upload(c, 2n, 'BBBB');
  const r = await link(
    c,
    [
      { id: 1n, type: 1, name: 'a.ptx' },
      { id: 2n, type: 0, name: 'b.cubin' },
    ],
    [
      [7, 3],
      [12, 1],
    ],
  );
  t.is(r.status, 0);
  const image = '// fakecuda:linked 7=3 12=1\n// input a.ptx type 1\n.entry a// input b.cubin type 0\nBBBB';
  const info = 'fakecuda: added a.ptx\nfakecuda: added b.cubin\n';
  t.like(r.out, {
    image_bytes: BigInt(image.length),
    info_bytes: info.length,
    error_bytes: 0,
    link_status: 0,
    wall_ms_bits: floatBits(1.5),
  });
  const total = image.length + info.length;
  t.is(dev.vm.staging.used, BigInt(total), 'the uploads were taken; the result is counted');
  const first = await read(c, r.value, 0, 40);
  const rest = await read(c, r.value, 40, 4096);
  t.is(first.text + rest.text, image + info);
  t.is(dev.vm.staging.used, 0n, 'read whole: dropped');
  t.is((await read(c, r.value, 0, 16)).r.status, CudaErr.InvalidValue, 'a dropped result is gone');
  t.is((await link(c, [{ id: 1n, type: 1, name: 'a.ptx' }])).status, CudaErr.InvalidValue, 'the LINK took its uploads');
});

test('a failed link answers its CUresult with the error log to read, and no image', async (t) => {
  const { c } = await setup(t);
  await upload(c, 1n, 'x fakecuda:link-error');
  const r = await link(c, [{ id: 1n, type: 1, name: 'bad\x01.ptx' }]);
  t.is(r.status, 0);
  t.like(r.out, { image_bytes: 0n, info_bytes: 0, link_status: 218 });
  t.is((await read(c, r.value, 0, 4096)).text, 'fakecuda: bad?.ptx: link error\n', "the name's unprintable byte replaced");
});

test('bad links are refused, their uploads taken, and the session goes on', async (t) => {
  const { dev, c } = await setup(t);
  t.is((await link(c, [{ id: 9n, type: 1, name: 'x' }])).status, CudaErr.InvalidValue, 'unknown upload id');
  t.is((await link(c, [], [], 0)).status, CudaErr.InvalidValue, 'no inputs');
  t.is((await link(c, [], [], QCUDA_MAX_LINK_INPUTS + 1)).status, CudaErr.InvalidValue, 'too many inputs');
  await upload(c, 1n, 'a');
  t.is((await link(c, [{ id: 1n, type: 6, name: 'x' }])).status, CudaErr.InvalidValue, 'an input type CUDA does not have');
  await upload(c, 1n, 'a');
  await upload(c, 2n, 'b');
  t.is(
    (
      await link(
        c,
        [
          { id: 1n, type: 1, name: 'x' },
          { id: 2n, type: 1, name: 'y' },
        ],
        [[3, 0]],
      )
    ).status,
    CudaErr.InvalidValue,
    'an option the backend owns (the info log)',
  );
  await upload(c, 1n, 'a');
  t.is((await link(c, [{ id: 1n, type: 1, name: 'x' }], [[7, 5]])).status, CudaErr.InvalidValue, 'an optimization level past 4');
  await upload(c, 1n, 'a');
  t.is(
    (
      await link(c, [
        { id: 1n, type: 1, name: 'x' },
        { id: 1n, type: 1, name: 'x' },
      ])
    ).status,
    CudaErr.InvalidValue,
    'one upload twice',
  );
  t.is(dev.vm.staging.used, 1n, 'an upload named twice is left to a later load');
  const ok = await link(c, [{ id: 1n, type: 1, name: 'x' }]);
  t.is(ok.status, 0);
  t.is(ok.out?.link_status, 0);
  t.is((await read(c, ok.value, 1000, 16)).r.status, CudaErr.InvalidValue, 'an offset past the result');
});

test('results are bounded per session and by the staging bound, and freed at close', async (t) => {
  const { dev, c } = await setup(t, true, 4096n);
  const held: bigint[] = [];
  for (let i = 0; i < 4; i++) {
    await upload(c, 1n, 'a'.repeat(100));
    const r = await link(c, [{ id: 1n, type: 1, name: 'x' }]);
    t.is(r.status, 0);
    held.push(r.value);
  }
  const four = dev.vm.staging.used;
  t.is(four, 4n * (100n + 55n), "each result: the fake's 55 bytes of header and log around its input");
  await upload(c, 1n, 'a'.repeat(100));
  t.not((await link(c, [{ id: 1n, type: 1, name: 'x' }])).status, 0, 'a fifth unread result');
  t.is(dev.vm.staging.used, four, 'its upload taken, nothing kept');
  await read(c, held[0], 0, 4096);
  // An upload that fits beside the three results left, whose result (55 bytes more) does not.
  const n = Number(4096n - dev.vm.staging.used) - 20;
  await upload(c, 1n, 'a'.repeat(n));
  t.not((await link(c, [{ id: 1n, type: 1, name: 'x' }])).status, 0, 'past the staging bound with the others held');
  t.is(dev.vm.staging.used, 3n * 155n);
  await c.close();
  t.is(dev.vm.staging.used, 0n, "the session's results went with it");
});

test('the emu provider cannot link: cudaErrorNotSupported', async (t) => {
  const { dev, c } = await setup(t, false);
  await upload(c, 1n, '.entry a');
  t.is((await link(c, [{ id: 1n, type: 1, name: 'a.ptx' }])).status, CudaErr.NotSupported);
  t.is(dev.vm.staging.used, 0n, 'its upload taken all the same');
});
