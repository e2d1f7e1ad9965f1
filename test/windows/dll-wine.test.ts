// nvcuda.dll (issue 48 step 2: libcuda's sources cross-built with
// mingw-w64, `make windows-dll`) under Wine 8, against a real
// qcuda-backend --shm on the emu provider: drvbasic (test/libcuda), one
// driver-API source built for Windows against the DLL and for Linux against
// libcuda.so.1, prints over the region under Wine exactly what the Linux
// build prints under `qcuda run --transport=shm`; and the DLL exports
// exactly the names libcuda.so.1 exports and, for cudart64_13.dll's
// forwarders, those libcudart.so.13 exports.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { dllExports, soExports } from './pe';
import { backend, linuxRun, programLines, ROOT, WIN, wineFor, wineRun, winPath } from './wine';

const DLL = path.join(WIN, 'dll', 'nvcuda.dll');
const EXE = path.join(WIN, 'dll', 'drvbasic.exe');
const CUBIN = path.join(WIN, 'drvapi.cubin');
const LIBCUDA = path.join(ROOT, 'build', 'guest', 'lib', 'libcuda.so.1');
const LIBCUDART = path.join(ROOT, 'build', 'guest', 'lib', 'libcudart.so.13');

test.serial('under Wine, drvbasic over nvcuda.dll prints what it prints over libcuda.so.1 on Linux', async (t) => {
  const env = wineFor(t, 'dll');
  t.true(fs.existsSync(DLL), 'make windows-dll built nvcuda.dll');
  const linux = linuxRun(tmpDir(t), [path.join(WIN, 'drvbasic'), CUBIN]);
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: drvbasic: \d+ checks$/m);
  const b = await backend(t, tmpDir(t));
  // nvcuda.dll lies next to drvbasic.exe: the loader takes it from there, as a user's copy would be.
  const wine = await wineRun(env, EXE, [winPath(CUBIN)], b.region);
  t.is(wine.code, 0, wine.out);
  t.is(programLines(wine.out), linux.stdout);
  // The region carried it: the DLL's session opened, and ended at its detach.
  t.regex(b.log(), /attach 1 served/);
  t.regex(b.log(), /session \w+ opened/);
  t.true(await b.logged(/device reset: closing 1 sessions/), b.log());
});

test.serial('under Wine, nvcuda.dll without a region says no device, and the program fails', async (t) => {
  const env = wineFor(t, 'dll');
  const wine = await wineRun(env, EXE, [winPath(CUBIN)], path.join(tmpDir(t), 'missing'));
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cuInit\(0\) -> CUDA_ERROR_NO_DEVICE\r?$/m);
  t.regex(wine.out, /No such file or directory/);
});

test.serial('under Wine, nvcuda.dll without QCUDA_SHM looks for the IVSHMEM device, finds none, and says no device', async (t) => {
  const env = wineFor(t, 'dll');
  const wine = await wineRun(env, EXE, [winPath(CUBIN)]);
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cuInit\(0\) -> CUDA_ERROR_NO_DEVICE\r?$/m);
  // SetupAPI lists no device of virtio-win's IVSHMEM interface under Wine: -ENODEV.
  t.regex(wine.out, /cannot map the shared-memory region ivshmem: No such device/);
});

test.serial('under Wine, what cannot work on Windows yet answers CUDA_ERROR_NOT_SUPPORTED, and the program goes on', async (t) => {
  const env = wineFor(t, 'dll');
  const b = await backend(t, tmpDir(t));
  const wine = await wineRun(env, path.join(WIN, 'dll', 'dll_refusals.exe'), [], b.region);
  t.is(wine.code, 0, wine.out);
  const answers = new Map(
    wine.out
      .replace(/\r/g, '')
      .split('\n')
      .map((l) => /^(\w+)\(.*\) -> (\w+)$/.exec(l))
      .filter((m): m is RegExpExecArray => !!m)
      .map((m) => [m[1], m[2]]),
  );
  for (const n of [
    'cuMemExportToShareableHandle',
    'cuMemImportFromShareableHandle',
    'cuMemPoolExportToShareableHandle',
    'cuMemPoolImportFromShareableHandle',
  ])
    t.is(answers.get(n), 'CUDA_ERROR_NOT_SUPPORTED', n);
  // The rest worked: the allocations refused sharing were made, registered memory is copied from (staged).
  for (const n of [
    'cuInit',
    'cuCtxCreate',
    'cuMemCreate',
    'cuMemRelease',
    'cuMemPoolCreate',
    'cuMemHostRegister',
    'cuMemcpyHtoD',
    'cuCtxDestroy',
  ])
    t.is(answers.get(n), 'CUDA_SUCCESS', n);
  t.regex(wine.out, /^END\r?$/m);
});

test('nvcuda.dll exports exactly the names libcuda.so.1 and libcudart.so.13 export (cuGetProcAddress and the _v2/_ptds ones among them)', (t) => {
  t.true(fs.existsSync(DLL), 'make windows-dll built nvcuda.dll');
  const so = soExports(LIBCUDA);
  const rt = soExports(LIBCUDART);
  const dll = dllExports(DLL);
  t.true(so.length > 500, `libcuda.so.1 exports ${so.length} names`);
  t.true(rt.length > 400, `libcudart.so.13 exports ${rt.length} names`);
  t.deepEqual(dll, [...new Set([...so, ...rt])].sort());
  for (const n of ['cuGetProcAddress', 'cuGetProcAddress_v2', 'cuMemAlloc_v2', 'cuMemcpyHtoDAsync_v2_ptsz', 'cuStreamSynchronize_ptsz'])
    t.true(dll.includes(n), n);
});
