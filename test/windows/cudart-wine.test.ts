// cudart64_13.dll (issue 48: libcudart.so.13's sources cross-built with
// mingw-w64, `make windows-dll`) under Wine 8, against a real
// qcuda-backend --shm on the host provider: rtbasic (test/windows/rtbasic.c),
// one runtime-API source built for Windows against the DLL's import library
// and for Linux against libcudart.so.13, prints over the region under Wine
// exactly what the Linux build prints under `qcuda run --cudart=qcuda
// --transport=shm`: devices and properties, bytes copied each way and set,
// CUDA's error codes, and a kernel registered from nvcc's fat binary whose
// image reaches the backend (which runs no kernels: 209). The DLL exports
// exactly the names libcudart.so.13 exports; the backend and Wine are
// stopped, and seen stopped, at the end.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir, until } from '../helpers';
import { WINE, WINESERVER, backend, runTo, stopWine, wineEnv, winPath } from './wine';

const dist = path.resolve(__dirname, '..', '..');
const ROOT = path.resolve(dist, '..');
const QCUDA = path.join(dist, 'backend/src/cli/qcuda.js');
const WIN = path.join(ROOT, 'build', 'windows');
const DLL = path.join(WIN, 'dll', 'cudart64_13.dll');
const EXE = path.join(WIN, 'dll', 'rtbasic.exe');
const LIBCUDART = path.join(ROOT, 'build', 'guest', 'lib', 'libcudart.so.13');

/** The Linux build of rtbasic over qcuda's libcudart.so.13, under qcuda run over the region. */
function linuxRun(dir: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(
    process.execPath,
    [
      QCUDA,
      'run',
      '--provider=host',
      '--transport=shm',
      '--cudart=qcuda',
      `--backend-log=${path.join(dir, 'linux.log')}`,
      '--',
      path.join(WIN, 'rtbasic'),
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

test.serial('under Wine, rtbasic over cudart64_13.dll prints what it prints over libcudart.so.13 on Linux', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  t.true(fs.existsSync(DLL) && fs.existsSync(EXE), 'make windows-dll built cudart64_13.dll and rtbasic.exe');
  const linux = linuxRun(tmpDir(t));
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: rtbasic: \d+ checks$/m);
  const env = wineEnv('cudart');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  // qcuda:device's trace names what the backend refused, the module load among them.
  const b = await backend(t, tmpDir(t), { DEBUG: 'qcuda:device' });
  // cudart64_13.dll lies next to rtbasic.exe: the loader takes it from there, as a user's copy would be.
  const wine = await runTo(WINE!, [EXE], { ...env, QCUDA_SHM: winPath(b.region) }, 240_000);
  t.is(wine.code, 0, wine.out);
  const out = programLines(wine.out);
  t.is(out, linux.stdout);
  // What came back, line by line: the device, the bytes, CUDA's codes.
  for (const line of [
    /^ok {3}1 device\(s\)$/m,
    /^ok {3}device 0: qcuda host-memory device \(no GPU\)$/m,
    /^ok {3}1 MiB went host to device, device to device and back$/m,
    /^ok {3}cudaMemset of 8 KiB at 4 KiB, the rest as copied$/m,
    /^ok {3}a stream's copies and memset, in order$/m,
    /^ok {3}the per-thread stream's memset, read back$/m,
    /^ok {3}cudaSetDevice\(count\) -> cudaErrorInvalidDevice \(101\)$/m,
    /^ok {3}cudaFree\(d1\) -> cudaErrorInvalidValue \(1\)$/m,
    /^ok {3}cudaFree\(\(void \*\)0x1234\) -> cudaErrorInvalidValue \(1\)$/m,
    /^ok {3}cudaMemcpy\(d1, d2, 16, \(enum cudaMemcpyKind\)42\) -> cudaErrorInvalidMemcpyDirection \(21\)$/m,
    /^ok {3}cudaStreamDestroy\(NULL\) -> cudaErrorInvalidResourceHandle \(400\)$/m,
    // The registered kernel: found, its image sent, refused by a provider without kernels.
    /^ok {3}qc_fill<<<>>> -> cudaErrorNoKernelImageForDevice \(209\)$/m,
    /^ok {3}cudaLaunchKernel\(qc_fill\) -> cudaErrorNoKernelImageForDevice \(209\)$/m,
    /^ok {3}cudaLaunchKernel\(not a kernel\) -> cudaErrorInvalidDeviceFunction \(98\)$/m,
    /^PASS: rtbasic: \d+ checks$/m,
  ])
    t.regex(out, line);
  t.notRegex(out, /^FAIL/m);
  // The region carried it: the DLL's session opened, the fat binary's image reached the
  // provider's module load, and the session ended at the detach.
  t.regex(b.log(), /attach 1 served/);
  t.regex(b.log(), /session \w+ opened/);
  t.regex(b.log(), /status 0xd1: the host provider runs no kernels/);
  t.true(await until(() => /device reset: closing 1 sessions/.test(b.log()), 10_000), b.log());
  // Everything started is stopped: the backend exits 0 and takes its region file along; no process of the prefix is left.
  t.is(await b.stop(), 0, b.log());
  t.false(fs.existsSync(b.region));
  t.deepEqual(await stopWine(env), []);
});

test.serial('under Wine, cudart64_13.dll without a region answers cudaErrorNoDevice', async (t) => {
  t.timeout(300_000);
  t.truthy(WINE, 'Wine 8 is installed (make windows-deps)');
  const env = wineEnv('cudart');
  t.teardown(() => void spawnSync(WINESERVER!, ['-k'], { env, timeout: 30_000 }));
  const missing = winPath(path.join(tmpDir(t), 'missing'));
  const wine = await runTo(WINE!, [EXE], { ...env, QCUDA_SHM: missing }, 240_000);
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cudaGetDeviceCount\(&count\) -> cudaErrorNoDevice \(100\)\r?$/m);
  t.regex(wine.out, /No such file or directory/);
  t.deepEqual(await stopWine(env), []);
});

/** A PE file's exported names, or the names it imports from one DLL (objdump -p's tables). */
function peExports(file: string): string[] {
  const dump = spawnSync('x86_64-w64-mingw32-objdump', ['-p', file], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
  const table = dump.split('[Ordinal/Name Pointer] Table')[1] ?? '';
  return table
    .split('\n\n')[0]
    .split('\n')
    .map((l) => /\]\s+(\S+)$/.exec(l)?.[1])
    .filter((n): n is string => !!n)
    .sort();
}

function peImports(file: string, dll: string): string[] {
  const dump = spawnSync('x86_64-w64-mingw32-objdump', ['-p', file], { encoding: 'utf8', maxBuffer: 64 << 20 }).stdout;
  const part = dump.split(`DLL Name: ${dll}`)[1] ?? '';
  return part
    .split('\n\n')[0]
    .split('\n')
    .map((l) => /^\s+[0-9a-f]+\s+\d+\s+(\S+)$/.exec(l)?.[1])
    .filter((n): n is string => !!n)
    .sort();
}

test('cudart64_13.dll exports exactly the names libcudart.so.13 exports, and rtbasic.exe imports them from it', (t) => {
  t.true(fs.existsSync(DLL), 'make windows-dll built cudart64_13.dll');
  const so = spawnSync('nm', ['-D', '--defined-only', LIBCUDART], { encoding: 'utf8', maxBuffer: 64 << 20 })
    .stdout.split('\n')
    .map((l) => l.split(' ')[2]?.replace(/@.*/, ''))
    .filter((n): n is string => !!n && n !== 'libcudart.so.13') // the version node's own symbol
    .sort();
  const dll = peExports(DLL);
  t.true(so.length > 400, `libcudart.so.13 exports ${so.length} names`);
  t.deepEqual(dll, so);
  const imported = peImports(EXE, 'cudart64_13.dll');
  for (const n of [
    'cudaMalloc',
    'cudaMemcpy',
    'cudaGetDeviceProperties',
    'cudaLaunchKernel',
    'cudaMemcpy_ptds',
    'cudaMemsetAsync_ptsz',
    '__cudaRegisterFatBinary',
    '__cudaRegisterFatBinaryEnd',
    '__cudaRegisterFunction',
    '__cudaUnregisterFatBinary',
    '__cudaPushCallConfiguration',
    '__cudaPopCallConfiguration',
    '__cudaLaunchKernel',
  ]) {
    t.true(imported.includes(n), `rtbasic.exe imports ${n} from cudart64_13.dll`);
    t.true(dll.includes(n), `cudart64_13.dll exports ${n}`);
  }
});
