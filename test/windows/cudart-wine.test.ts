// cudart64_13.dll (issue 48: libcudart.so.13's sources cross-built with
// mingw-w64, `make windows-dll`) under Wine 8, against a real
// qcuda-backend --shm on the emu provider: rtbasic (test/windows/rtbasic.c),
// one runtime-API source built for Windows against the DLL's import library
// and for Linux against libcudart.so.13, prints over the region under Wine
// exactly what the Linux build prints under `qcuda run --cudart=qcuda
// --transport=shm`: devices and properties, bytes copied each way and set,
// CUDA's error codes, and a kernel registered from nvcc's fat binary whose
// image reaches the backend (which runs no kernels: 209). The DLL exports
// exactly the names libcudart.so.13 exports; the backend and Wine are
// stopped, and seen stopped, at the end.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { dllExports, dllImports, soExports } from './pe';
import { backend, linuxRun, programLines, ROOT, stopBoth, stopWine, WIN, wineFor, wineRun } from './wine';

const DLL = path.join(WIN, 'dll', 'cudart64_13.dll');
const EXE = path.join(WIN, 'dll', 'rtbasic.exe');
const LIBCUDART = path.join(ROOT, 'build', 'guest', 'lib', 'libcudart.so.13');

test.serial('under Wine, rtbasic over cudart64_13.dll prints what it prints over libcudart.so.13 on Linux', async (t) => {
  const env = wineFor(t, 'cudart');
  t.true(fs.existsSync(DLL) && fs.existsSync(EXE), 'make windows-dll built cudart64_13.dll and rtbasic.exe');
  const linux = linuxRun(tmpDir(t), [path.join(WIN, 'rtbasic')], ['--cudart=qcuda']);
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: rtbasic: \d+ checks$/m);
  // qcuda:device's trace names what the backend refused, the module load among them.
  const b = await backend(t, tmpDir(t), { DEBUG: 'qcuda:device' });
  // cudart64_13.dll lies next to rtbasic.exe: the loader takes it from there, as a user's copy would be.
  const wine = await wineRun(env, EXE, [], b.region);
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
  t.regex(b.log(), /status 0xd1: the emu provider runs no kernels/);
  t.true(await b.logged(/device reset: closing 1 sessions/), b.log());
  // Everything started is stopped.
  await stopBoth(t, b, env);
});

test.serial('under Wine, cudart64_13.dll without a region answers cudaErrorNoDevice', async (t) => {
  const env = wineFor(t, 'cudart');
  const wine = await wineRun(env, EXE, [], path.join(tmpDir(t), 'missing'));
  t.is(wine.code, 1, wine.out);
  t.regex(wine.out, /^FAIL cudaGetDeviceCount\(&count\) -> cudaErrorNoDevice \(100\)\r?$/m);
  t.regex(wine.out, /No such file or directory/);
  t.deepEqual(await stopWine(env), []);
});

test('cudart64_13.dll exports exactly the names libcudart.so.13 exports, and rtbasic.exe imports them from it', (t) => {
  t.true(fs.existsSync(DLL), 'make windows-dll built cudart64_13.dll');
  const so = soExports(LIBCUDART);
  const dll = dllExports(DLL);
  t.true(so.length > 400, `libcudart.so.13 exports ${so.length} names`);
  t.deepEqual(dll, so);
  const imported = dllImports(EXE, 'cudart64_13.dll');
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
