// What a Windows user copies (`make windows-zip`:
// build/windows/qcuda-windows-x64.zip): unzipped, it holds the two DLLs and
// README.txt in one folder and nothing else; cudart64_13.dll exports
// exactly what libcudart.so.13 exports, each name forwarded to nvcuda.dll,
// which exports what libcuda.so.1 and libcudart.so.13 export and needs
// nothing but Windows' own DLLs; and,
// copied next to a program as the README says, each loads under Wine 8 and
// carries that program's calls over a region a real qcuda-backend serves
// (drvbasic over nvcuda.dll, rtbasic over cudart64_13.dll). The backend and
// Wine are seen stopped at the end.
import test from 'ava';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { dllExports, objdump, soExports } from './pe';
import { backend, ROOT, stopBoth, WIN, wineFor, wineRun, winPath } from './wine';

const ZIP = path.join(WIN, 'qcuda-windows-x64.zip');
const LIB = path.join(ROOT, 'build', 'guest', 'lib');

/** The zip unzipped into a fresh folder: its qcuda-windows-x64 folder. */
function unzipped(dir: string): string {
  const r = spawnSync('unzip', ['-q', ZIP, '-d', dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`unzip: ${r.stderr}`);
  return path.join(dir, 'qcuda-windows-x64');
}

test('the zip holds nvcuda.dll, cudart64_13.dll and README.txt, and the DLLs export what the Linux libraries export', (t) => {
  t.true(fs.existsSync(ZIP), 'make windows-zip built it');
  const dir = unzipped(tmpDir(t));
  t.deepEqual(fs.readdirSync(path.dirname(dir)), ['qcuda-windows-x64']);
  t.deepEqual(fs.readdirSync(dir).sort(), ['README.txt', 'cudart64_13.dll', 'nvcuda.dll']);
  for (const dll of ['nvcuda.dll', 'cudart64_13.dll'])
    t.true(fs.readFileSync(path.join(dir, dll)).equals(fs.readFileSync(path.join(WIN, 'dll', dll))), `${dll} is the one built`);
  const nvcuda = dllExports(path.join(dir, 'nvcuda.dll'));
  const cudart = dllExports(path.join(dir, 'cudart64_13.dll'));
  const runtime = soExports(path.join(LIB, 'libcudart.so.13'));
  t.deepEqual(nvcuda, [...new Set([...soExports(path.join(LIB, 'libcuda.so.1')), ...runtime])].sort());
  t.deepEqual(cudart, runtime);
  // cudart64_13.dll holds no code: every name is nvcuda.dll's (one session for both).
  const forwarded = [...objdump(path.join(dir, 'cudart64_13.dll')).matchAll(/Forwarder RVA -- nvcuda\.(\S+)/g)].map((m) => m[1]).sort();
  t.deepEqual(forwarded, runtime);
  for (const n of ['cuInit', 'cuGetProcAddress_v2', 'cuMemAlloc_v2', 'cuLaunchKernel_ptsz']) t.true(nvcuda.includes(n), n);
  for (const n of ['cudaMalloc', 'cudaGetDeviceProperties', 'cudaMemcpy_ptds', 'cudaLaunchKernel', '__cudaRegisterFatBinary'])
    t.true(cudart.includes(n), n);
  // Nothing to copy beside them: only DLLs every Windows has (cudart64_13.dll imports nothing).
  const imports = (dll: string): string[] =>
    [...objdump(path.join(dir, dll)).matchAll(/DLL Name: (\S+)/g)].map((m) => m[1].toLowerCase()).sort();
  t.deepEqual(imports('nvcuda.dll'), ['bcrypt.dll', 'kernel32.dll', 'msvcrt.dll', 'setupapi.dll']);
  t.deepEqual(imports('cudart64_13.dll'), []);
  // The README says where they go and how they find the backend, in Windows' line ends.
  const readme = fs.readFileSync(path.join(dir, 'README.txt'), 'utf8');
  t.true(
    readme
      .split('\n')
      .slice(0, -1)
      .every((l) => l.endsWith('\r')),
    'CRLF line ends',
  );
  for (const w of ['nvcuda.dll', 'cudart64_13.dll', 'QCUDA_SHM', 'IVSHMEM', 'ivshmem-plain', 'System32', 'qcuda-backend'])
    t.true(readme.includes(w), w);
});

test.serial('under Wine, the unzipped DLLs load next to a program and carry its calls over the region', async (t) => {
  const env = wineFor(t, 'zip');
  const dir = unzipped(tmpDir(t));
  // As the README says: the program beside the DLLs (the test programs of make windows-dll).
  for (const exe of ['drvbasic.exe', 'rtbasic.exe']) fs.copyFileSync(path.join(WIN, 'dll', exe), path.join(dir, exe));
  const b = await backend(t, tmpDir(t));
  const drv = await wineRun(env, path.join(dir, 'drvbasic.exe'), [winPath(path.join(WIN, 'drvapi.cubin'))], b.region);
  t.is(drv.code, 0, drv.out);
  t.regex(drv.out, /^PASS: drvbasic: \d+ checks\r?$/m);
  const rt = await wineRun(env, path.join(dir, 'rtbasic.exe'), [], b.region);
  t.is(rt.code, 0, rt.out);
  t.regex(rt.out, /^ok {3}1 MiB went host to device, device to device and back\r?$/m);
  t.regex(rt.out, /^PASS: rtbasic: \d+ checks\r?$/m);
  // One session a program, each ended at its detach.
  t.regex(b.log(), /attach 2 served/);
  t.is(b.log().match(/session \w+ opened/g)?.length, 2, b.log());
  await stopBoth(t, b, env);
});
