// One session per process on Windows (issue 48): cudart64_13.dll holds no
// code of its own but forwards each runtime name to nvcuda.dll, which holds
// the runtime beside the driver API, so a program that loads both claims
// the region once. rtdrv (test/windows/rtdrv.c) allocates with each API and
// uses the memory with the other, bytes compared, and frees pinned memory
// of one through the other: under Wine over a region a real qcuda-backend
// --shm serves it prints exactly what its Linux build (NVIDIA's runtime
// over qcuda's libcuda.so.1, one session too) prints under `qcuda run
// --transport=shm`, and the backend serves one attach and one session.
import test from 'ava';
import fs from 'node:fs';
import path from 'node:path';
import { tmpDir } from '../helpers';
import { backend, linuxRun, programLines, stopBoth, WIN, wineFor, wineRun } from './wine';

const EXE = path.join(WIN, 'dll', 'rtdrv.exe');

test.serial('under Wine, a program of both APIs gets one session through cudart64_13.dll and nvcuda.dll, as on Linux', async (t) => {
  const env = wineFor(t, 'rtdrv');
  t.true(fs.existsSync(EXE), 'make windows-dll built rtdrv.exe');
  const linux = linuxRun(tmpDir(t), [path.join(WIN, 'rtdrv')]);
  t.is(linux.status, 0, linux.stdout + linux.stderr);
  t.regex(linux.stdout, /^PASS: rtdrv$/m);
  const b = await backend(t, tmpDir(t));
  const wine = await wineRun(env, EXE, [], b.region);
  t.is(wine.code, 0, wine.out);
  const out = programLines(wine.out);
  t.is(out, linux.stdout);
  t.regex(out, /^cudaMalloc'd memory through cuMemcpy: 1048576 bytes equal$/m);
  t.regex(out, /^cuMemAlloc'd memory through cudaMemcpy: 1048576 bytes equal$/m);
  t.regex(out, /^cudaFreeHost\(host\) -> cudaSuccess$/m);
  t.notRegex(wine.out, /busy|DIFFER|FAIL/);
  // One claimant: one attach, one session, ended at the detach.
  t.true(await b.logged(/device reset: closing 1 sessions/), b.log());
  t.is((b.log().match(/session \w+ opened/g) ?? []).length, 1, b.log());
  t.notRegex(b.log(), /attach 2/);
  await stopBoth(t, b, env);
});
