// The cuda addon's link (addon/src/cuda_ctx_link.cc) on the fake driver
// (test/qcuda/fixtures/fakecuda.c: the "cubin" is a header naming the
// options, then each input with its name and type; the info log names each
// input; an input containing "fakecuda:link-error" fails the link): the
// inputs, names, types and options reach the driver's linker, the cubin and
// both logs and the wall time come back, and a failed link resolves with its
// CUresult and error log.
import test from 'ava';
import { unpackLink } from '../../backend/src/qcuda/providers/cuda/context';
import { fakeCuda, text } from './fake-driver';

const n = fakeCuda();
const str = (b: Uint8Array) => Buffer.from(b).toString('latin1');

test('link: the inputs with their names and types, the options; the cubin, logs and wall time back', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const r = unpackLink(
    await ctx.link(
      [
        { type: 1, name: 'a.ptx', data: text('.entry a') },
        { type: 0, name: 'b.cubin', data: text('BBB') },
      ],
      [
        [7, 3],
        [12, 1],
      ],
    ),
  );
  t.is(r.status, 0);
  t.is(str(r.image), '// fakecuda:linked 7=3 12=1\n// input a.ptx type 1\n.entry a// input b.cubin type 0\nBBB');
  t.is(str(r.infoLog), 'fakecuda: added a.ptx\nfakecuda: added b.cubin\n');
  t.is(r.errorLog.length, 0);
  t.is(r.wallMs, 1.5);
});

test('link: a link the driver refuses resolves with its CUresult and error log, and no image', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  const r = unpackLink(
    await ctx.link(
      [
        { type: 1, name: 'ok.ptx', data: text('fine') },
        { type: 1, name: 'bad.ptx', data: text('x fakecuda:link-error') },
      ],
      [],
    ),
  );
  t.is(r.status, 218);
  t.is(r.image.length, 0);
  t.is(str(r.errorLog), 'fakecuda: bad.ptx: link error\n');
  t.is(str(r.infoLog), 'fakecuda: added ok.ptx\n');
});

test('link: malformed arguments are refused before the driver sees them', async (t) => {
  const ctx = await n.openContext(0, 0, false);
  t.teardown(() => ctx.destroy());
  t.throws(() => ctx.link([{ type: 1, name: 'a', data: 'text' as unknown as Uint8Array }], []), { instanceOf: TypeError });
  t.throws(() => ctx.link([], [[7] as unknown as [number, number]]), { instanceOf: TypeError });
});
