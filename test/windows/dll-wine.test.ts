// nvcuda.dll (issue 48 step 2: libcuda's sources cross-built with
// mingw-w64, `make windows-dll`) under Wine 8, against a real
// qcuda-backend --shm on the host provider: drvbasic (test/libcuda), one
// driver-API source built for Windows against the DLL and for Linux against
// libcuda.so.1, prints over the region under Wine exactly what the Linux
// build prints under `qcuda run --transport=shm`; and the DLL exports
// exactly the names libcuda.so.1 exports and, for cudart64_13.dll's
// forwarders, those libcudart.so.13 exports.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir, until } from '../helpers';
import { WINE, WINESERVER, backend, runTo, wineEnv, winPath } from './wine';

const dist = path.resolve(__dirname, '..', '..');
const ROOT = path.resolve(dist, '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const WIN = path.join(ROOT, 'build', 'windows');
const DLL = path.join(WIN, 'dll', 'nvcuda.dll');
const CUBIN = path.join(WIN, 'drvapi.cubin');
const LIBCUDA = path.join(ROOT, 'build', 'guest', 'lib', 'libcuda.so.1');
const LIBCUDART = path.join(ROOT, 'build', 'guest', 'lib', 'libcudart.so.13');

/** The Linux build of drvbasic under qcuda run over the region: its status and output. */
function linuxRun(dir: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [
      QCUDA,
      'run',
      '--provider=host',
      '--transport=shm',
      `--backend-log=${path.join(dir, 'linux.log')}`,
      '--',
      path.join(WIN, 'drvbasic'),
      CUBIN,
    ],
    { encoding: 'utf8', timeout: 120_000 },
  );
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A Windows program's output without Wine's own lines (a fresh prefix's, on its first start). */
function programLines(out: string): string {
  return out
    .replace(/\r/g, '')
    .split('\n')
    .filter((l) => !l.startsWith('wine: '))
    .join('\n');
}

test.serial('under Wine, drvbasic over nvcuda.dll prints what it prints over libcuda.so.1 on Linux', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  t.true(fs.existsSync(DLL), 'make windows-dll built nvcuda.dll');
  const linux = linuxRun(tmpDir(t));
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: drvbasic: \d+ checks$/m);
  const env = wineEnv('dll');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const b = await backend(t, tmpDir(t));
  // nvcuda.dll lies next to drvbasic.exe: the loader takes it from there, as a user's copy would be.
  const wine = await runTo(
    WINE!,
    [path.join(WIN, 'dll', 'drvbasic.exe'), winPath(CUBIN)],
    { ...env, QCUDA_SHM: winPath(b.region) },
    240_000,
  );
  t.is(wine.code, 0, wine.out);
  t.is(programLines(wine.out), linux.stdout);
  // The region carried it: the DLL's session opened, and ended at its detach.
  t.regex(b.log(), /attach 1 served/);
  t.regex(b.log(), /session \w+ opened/);
  t.true(await until(() => /device reset: closing 1 sessions/.test(b.log()), 10_000), b.log());
});

test.serial('under Wine, nvcuda.dll without a region says no device, and the program fails', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  const env = wineEnv('dll');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const missing = winPath(path.join(tmpDir(t), 'missing'));
  const wine = await runTo(WINE!, [path.join(WIN, 'dll', 'drvbasic.exe'), winPath(CUBIN)], { ...env, QCUDA_SHM: missing }, 240_000);
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cuInit\(0\) -> CUDA_ERROR_NO_DEVICE\r?$/m);
  t.regex(wine.out, /No such file or directory/);
});

test.serial('under Wine, nvcuda.dll without QCUDA_SHM looks for the IVSHMEM device, finds none, and says no device', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  const env = wineEnv('dll');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const noRegion = { ...env };
  delete noRegion.QCUDA_SHM;
  const wine = await runTo(WINE!, [path.join(WIN, 'dll', 'drvbasic.exe'), winPath(CUBIN)], noRegion, 240_000);
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cuInit\(0\) -> CUDA_ERROR_NO_DEVICE\r?$/m);
  // SetupAPI lists no device of virtio-win's IVSHMEM interface under Wine: -ENODEV.
  t.regex(wine.out, /cannot map the shared-memory region ivshmem: No such device/);
});

test.serial('under Wine, what cannot work on Windows yet answers CUDA_ERROR_NOT_SUPPORTED, and the program goes on', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  const env = wineEnv('dll');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const b = await backend(t, tmpDir(t));
  const wine = await runTo(WINE!, [path.join(WIN, 'dll', 'dll_refusals.exe')], { ...env, QCUDA_SHM: winPath(b.region) }, 240_000);
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

/** A DLL's exported names (its export table, as objdump -p prints it). */
function dllExports(dll: string): string[] {
  const dump = spawnSync('x86_64-w64-mingw32-objdump', ['-p', dll], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
  const table = dump.split('[Ordinal/Name Pointer] Table')[1] ?? '';
  return table
    .split('\n\n')[0]
    .split('\n')
    .map((l) => /\]\s+(\S+)$/.exec(l)?.[1])
    .filter((n): n is string => !!n)
    .sort();
}

/** A Linux library's exported names, without the version node's own symbol. */
function soExports(so: string): string[] {
  return spawnSync('nm', ['-D', '--defined-only', so], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .stdout.split('\n')
    .map((l) => l.split(' ')[2]?.replace(/@.*/, ''))
    .filter((n): n is string => !!n && n !== path.basename(so))
    .sort();
}

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
