// JIT linking from a program through qcuda's libcuda.so.1 (guest-driver/
// libcuda/link.c) under `qcuda run`, its CUDA in a cuda worker on the fake
// driver (fixtures/fakecuda.c: the "cubin" is a header naming the integer
// options, then each input): test/libcuda/link.c links a PTX input
// (cuLinkAddData) and a file (cuLinkAddFile), gets the cubin, both logs and
// the sizes and wall time written back into its option values, loads the
// cubin, and sees a refused link's status and error log and the bounds; then
// cuModuleLoadDataEx and cuLibraryLoadData of PTX with JIT options (linked
// alone with them, logs and wall time written back), of bad PTX (CUDA_ERROR_INVALID_PTX, its error log) and of a cubin
// (no JIT: empty logs, 0 bytes written).
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fakeLibcuda } from '../addon/fake-driver';
import { KEEP_ROOT } from '../helpers';

const ROOT = path.resolve(__dirname, '..', '..', '..');
const LIB = path.join(ROOT, 'build/guest/lib');
const QCUDA = path.join(ROOT, 'dist/backend/src/cli/qcuda.js');
if (!fs.existsSync(path.join(LIB, 'libcuda.so.1'))) throw new Error(`${LIB}/libcuda.so.1 is not built: run 'make guest-libcuda'`);

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'qcuda-link-'));
test.after.always(() => fs.rmSync(work, { recursive: true, force: true }));

test("a program links PTX and a file with the host's linker and loads the cubin; logs, sizes, wall time, refusals and bounds", (t) => {
  const exe = path.join(work, 'link');
  const cc = spawnSync(
    'gcc',
    [
      '-std=gnu11',
      '-Wall',
      '-Wextra',
      '-Werror',
      '-O2',
      '-I/usr/local/cuda/include',
      '-o',
      exe,
      path.join(ROOT, 'test/libcuda/link.c'),
      `-L${LIB}`,
      '-l:libcuda.so.1',
    ],
    { encoding: 'utf8' },
  );
  t.is(cc.status, 0, cc.stderr);
  const lib = path.join(work, 'dev.a');
  fs.writeFileSync(lib, 'lib bytes\n');
  const r = spawnSync(process.execPath, [QCUDA, 'run', '--provider=cuda', ...KEEP_ROOT, '--', exe, lib], {
    encoding: 'utf8',
    timeout: 120_000,
    env: { ...process.env, QCUDA_LIBCUDA: fakeLibcuda() },
  });
  t.is(r.status, 0, r.stdout + r.stderr);
  const cubin = `// fakecuda:linked 12=1 7=3\n// input add1.ptx type 1\n.entry add1// input ${lib} type 4\nlib bytes\n`;
  const info = `fakecuda: added add1.ptx\nfakecuda: added ${lib}\n`;
  // One PTX input, unnamed, linked for a load with options.
  const added = 'fakecuda: added \n';
  t.is(
    r.stdout,
    [
      'unknown option: CUDA_ERROR_INVALID_VALUE',
      'bad type: CUDA_ERROR_INVALID_VALUE',
      `cubin ${cubin.length} bytes, a C string`,
      `[${cubin}]`,
      `info [${info}] size ${info.length + 1}; error [] size 0; wall 1.5`,
      'refused: CUDA_ERROR_INVALID_PTX, error [fakecuda: bad.ptx: link error\n]',
      'fifth input: CUDA_ERROR_NOT_SUPPORTED',
      'destroy NULL: CUDA_ERROR_INVALID_HANDLE',
      `loadEx: loaded; info [${added}] size ${added.length + 1}; error [] size 0; wall 1.5`,
      'loadEx bad PTX: CUDA_ERROR_INVALID_PTX, error [fakecuda: : link error\n] size 24',
      'loadEx unknown option: CUDA_ERROR_INVALID_VALUE',
      'loadEx cubin: info [] size 0; error [] size 0',
      `library: info [${added}] size ${added.length + 1}`,
      '',
    ].join('\n'),
  );
});
